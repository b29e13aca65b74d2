"""Decoding with an ensemble of Transformers (not in t2t; as fairseq's and Marian's ensembles).

Each step, every member runs its own cached decoder on the same hypotheses, and the search
scores the next token by the members' averaged probabilities: log(mean_k p_k(token)), the
log-probabilities averaged in probability space (fairseq's `EnsembleModel`). Beam search
(with beam slots, or under XLA), greedy search, the length penalty and EOS handling are the
search's (`search`), so an ensemble of one model decodes exactly as that model.

Members may differ in hparams (layers, sizes, pre- or post-norm: two runs, or two checkpoints
of one run); they must share the vocabularies, which `TransformerEnsemble` checks by size and
the tool that loads them (`decoding.runs.restore_ensemble`) by content.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import tensorflow as tf

from t2t_lite.search import beam_search, driver
from t2t_lite.search.interface import Decoder, StepOptions
from t2t_lite.search.sampling import Sampling
from t2t_lite.models.transformer import Transformer


class TransformerEnsemble(tf.Module):
    """Several Transformers decoding as one (the `Transformer.infer` API).

    Attributes:
      members: the models, in order.
      hparams: the first member's hparams (its sampling settings drive greedy sampling:
        `sampling`).
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
        # Set past tf.Module's attribute tracking, as the Transformer's.
        object.__setattr__(self, "_infer_functions", driver.CompiledDecoders())

    @property
    def variables(self) -> list:
        """The members' variables, in order, as each member lists them (Keras variables,
        which the SavedModel export tracks through their `.value`)."""
        return [v for member in self.members for v in member.variables]

    @property
    def sampling(self) -> Sampling:
        """How greedy decoding chooses a token: the first member's sampling settings."""
        return self.members[0].sampling

    def start_decoding(self, inputs, target_space_id, options: StepOptions) -> Decoder:
        """The search's interface (`search/interface.py`): every member's encoder
        runs once; the step returns log(mean_k p_k) [N, V] of the members' probabilities.

        The cache is the tuple of the members' caches, each with the layout the search asks
        for, each reordered (and shaped) by its member.
        """
        # The mean is taken over float32 probabilities.
        options = dataclasses.replace(options, float32_logits=True)
        decoders = [member.start_decoding(inputs, target_space_id, options)
                    for member in self.members]
        log_members = math.log(len(self.members))

        def step(ids, t, caches):
            outputs = [d.step(ids, t, cache) for d, cache in zip(decoders, caches)]
            log_probs = tf.stack([tf.nn.log_softmax(logits) for logits, _ in outputs])
            mean = tf.reduce_logsumexp(log_probs, axis=0) - log_members
            return mean, tuple(cache for _, cache in outputs)

        def reorder(caches, rows):
            return tuple(cache if d.reorder is None else d.reorder(cache, rows)
                         for d, cache in zip(decoders, caches))

        return Decoder(step, tuple(d.cache for d in decoders), reorder,
                       lambda caches: tuple(d.shape_invariants(cache)
                                            for d, cache in zip(decoders, caches)))

    def encdec_attention(self, inputs, targets, layer: int = -1,
                         target_space_id=0) -> tf.Tensor:
        """`Transformer.encdec_attention` averaged over the members (float32 [B, T, L])."""
        return tf.reduce_mean(tf.stack([
            member.encdec_attention(inputs, targets, layer, target_space_id)
            for member in self.members]), axis=0)

    def infer(self, features: dict, decode_length=50, beam_size: int = 1, alpha: float = 0.6,
              top_beams: int = 1, use_cache: bool = True, eos_id: int = beam_search.EOS_ID,
              jit_compile: bool = False, force_decode_length: bool = False,
              **options) -> dict[str, tf.Tensor]:
        """`Transformer.infer` for the ensemble (same arguments and results, the same
        search: `search/driver.infer`).

        Args:
          features: {"inputs": int [B, L_in], optional "target_space_id": int scalar}.
          decode_length, beam_size, alpha, top_beams, use_cache, eos_id, jit_compile,
            force_decode_length, **options: as `Transformer.infer`.

        Returns:
          {"outputs": int32 [B, T'] (or [B, top_beams, T']), "scores": float32 [B] (or
          [B, top_beams])}.
        """
        return driver.infer(self, self._infer_functions, features, decode_length, beam_size,
                            alpha, top_beams, use_cache, eos_id, jit_compile,
                            force_decode_length, **options)
