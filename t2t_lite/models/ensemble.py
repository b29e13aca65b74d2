"""Decoding with an ensemble of Transformers (not in t2t; as fairseq's and Marian's ensembles).

Each step, every member runs its own cached decoder on the same hypotheses, and the search
scores the next token by the members' averaged probabilities: log(mean_k p_k(token)), the
log-probabilities averaged in probability space (fairseq's `EnsembleModel`). Beam search,
greedy search, the length penalty and EOS handling are `Transformer.infer`'s, so an ensemble
of one model decodes exactly as that model.

Members may differ in hparams (layers, sizes, pre- or post-norm: two runs, or two checkpoints
of one run); they must share the vocabularies, which `TransformerEnsemble` checks by size and
the tool that loads them (`decoding.runs.restore_ensemble`) by content.
"""
from __future__ import annotations

import math
import threading
from collections.abc import Sequence

import tensorflow as tf

from t2t_lite.models.transformer import Transformer, _ids_2d, check_beams
from t2t_lite.utils import beam_search


class TransformerEnsemble(tf.Module):
    """Several Transformers decoding as one (the `Transformer.infer` API).

    Attributes:
      members: the models, in order.
      hparams: the first member's hparams (its sampling settings drive greedy sampling).
      input_vocab_size / vocab_size: the shared vocabulary sizes.
    """

    def __init__(self, members: Sequence[Transformer]):
        super().__init__(name="transformer_ensemble")
        if len(members) < 1:
            raise ValueError("An ensemble needs at least one model")
        sizes = {(m.input_vocab_size, m.vocab_size) for m in members}
        if len(sizes) > 1:
            raise ValueError(
                "The models of an ensemble must share their vocabularies; their (input, "
                f"target) vocab sizes differ: {sorted(sizes)}")
        self.members = list(members)
        self.hparams = members[0].hparams
        self.input_vocab_size, self.vocab_size = sizes.pop()
        self._functions: dict[tuple, tf.types.experimental.GenericFunction] = {}
        self._functions_lock = threading.Lock()

    @property
    def variables(self) -> list:
        """The members' variables, in order, as each member lists them (Keras variables,
        which the SavedModel export tracks through their `.value`)."""
        return [v for member in self.members for v in member.variables]

    def _symbols_to_logits_fn(self, inputs, target_space_id, batch_size, buffers):
        """The members' encoders run once; returns (fn(ids, i, states) -> (log of the mean
        probabilities [N, V], states), the members' empty caches)."""
        fns, caches = [], []
        for member in self.members:
            matrices = member.modality.matrices()
            encoder_output, encdec_bias = member.encode(
                inputs, target_space_id, training=False, matrices=matrices)
            memory_kv = member.body.decoder.encdec_memory_kv(encoder_output)
            fns.append(member._fast_symbols_to_logits_fn(memory_kv, encdec_bias, buffers,
                                                         matrices))
            caches.append(member.init_decode_cache(batch_size, 0))
        log_members = math.log(len(self.members))

        def fn(ids, i, states):
            outputs = [member_fn(ids, i, cache) for member_fn, cache in zip(fns, states)]
            log_probs = tf.stack([tf.nn.log_softmax(logits) for logits, _ in outputs])
            mean = tf.reduce_logsumexp(log_probs, axis=0) - log_members
            return mean, tuple(cache for _, cache in outputs)

        return fn, tuple(caches)

    def _infer_graph(self, inputs, target_space_id, decode_length, beam_size: int,
                     top_beams: int, alpha: float, eos_id: int, force_decode_length: bool):
        inputs = _ids_2d(inputs)
        batch_size = tf.shape(inputs)[0]
        # t2t: decode_length = padded input length + extra length.
        max_length = tf.shape(inputs)[1] + tf.cast(decode_length, tf.int32)
        fn, states = self._symbols_to_logits_fn(inputs, target_space_id, batch_size,
                                                max_length)
        if beam_size == 1:
            outputs, scores, steps = self.members[0]._greedy(
                fn, batch_size, max_length, states, full_ids=False, eos_id=eos_id,
                force_decode_length=force_decode_length)
            return {"outputs": outputs[:, :steps], "scores": scores}
        ids, scores, _ = beam_search.beam_search(
            fn, tf.zeros([batch_size], tf.int32), beam_size, max_length, self.vocab_size,
            alpha, states=states, eos_id=eos_id, stop_early=top_beams == 1)
        if top_beams == 1:
            return {"outputs": ids[:, 0], "scores": scores[:, 0]}
        return {"outputs": ids[:, :top_beams], "scores": scores[:, :top_beams]}

    def infer(self, features: dict, decode_length=50, beam_size: int = 1, alpha: float = 0.6,
              top_beams: int = 1, use_cache: bool = True, eos_id: int = beam_search.EOS_ID,
              jit_compile: bool = False,
              force_decode_length: bool = False) -> dict[str, tf.Tensor]:
        """`Transformer.infer` for the ensemble (same arguments and results).

        Args:
          features: {"inputs": int [B, L_in], optional "target_space_id": int scalar}.
          decode_length, beam_size, alpha, top_beams, eos_id, force_decode_length: as
            `Transformer.infer`.
          use_cache, jit_compile: the ensemble always decodes with the members' caches and
            without XLA; use_cache=False or jit_compile=True is refused.

        Returns:
          {"outputs": int32 [B, T'] (or [B, top_beams, T']), "scores": float32 [B] (or
          [B, top_beams])}.
        """
        if not use_cache or jit_compile:
            raise ValueError("An ensemble decodes with the cached decoder and without XLA "
                             "(use_cache=True, jit_compile=False)")
        check_beams(beam_size, top_beams)
        inputs = _ids_2d(features["inputs"])
        target_space_id = tf.cast(features.get("target_space_id", 0), tf.int32)
        config = (beam_size, top_beams, float(alpha), int(eos_id), bool(force_decode_length))
        decode_length = tf.cast(decode_length, tf.int32)
        if tf.inside_function():
            return self._infer_graph(inputs, target_space_id, decode_length, *config)
        with self._functions_lock:
            if config not in self._functions:
                self._functions[config] = tf.function(
                    lambda inputs, target_space_id, decode_length: self._infer_graph(
                        inputs, target_space_id, decode_length, *config),
                    autograph=False,
                    input_signature=[tf.TensorSpec([None, None], tf.int32),
                                     tf.TensorSpec(None, tf.int32),
                                     tf.TensorSpec([], tf.int32)])
        return self._functions[config](inputs, target_space_id, decode_length)
