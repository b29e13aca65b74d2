"""The translation server's engines: what turns input ids into hypotheses.

* `T2tLiteEngine`: a model loaded by `decoding.runs` (a run, a checkpoint, an ensemble),
  decoded by `Transformer.infer`'s search with the decode API's batching and formatting
  (`pad_batch`, `format_decodes`): one compiled decoder per (beam_size, n-best > 1), alpha
  an input, at most --serve_max_compiled_decoders of them (`compiled_decoders`).
* `CTranslate2Engine`: `export.ct2.Translator` on a `--export_format=ctranslate2` directory.
* `SavedModelEngine`: a `--mode=export` SavedModel (`tf.saved_model.load`), through its
  `encode`, `encode_decode_ids` and `decode` signatures; beam size and alpha are the export's.

Each engine encodes a sentence (`encode`: ids ending in EOS, or a `SentenceError` naming what
is wrong with it), decodes a batch (`decode`, see `batching.Engine`) and says for each row
whether its result may depend on the batch (t2t's decode length is the batch's padded input
length + extra_length: a shorter row that did not end within its own limit decoded further
than it would alone; the t2t_lite engine gives each row its own decode length instead).
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from t2t_lite.data_generators.text_encoder import EOS_ID, PAD_ID
from t2t_lite.decoding import decoding, text_batches
from t2t_lite.errors import UserError
from t2t_lite.serving.batching import Engine, Hypothesis, Options, Row, Unsupported
from t2t_lite.serving.compiled_decoders import CompiledSearches, LruCache


class SentenceError(UserError):
    """A sentence the engine cannot decode (the message says why); its request gets 422."""


NO_ATTENTION = ("return_attention needs a single t2t_lite model (not an ensemble, a SavedModel "
                "or CTranslate2)")


def _ended_within(ids: np.ndarray, limit: int) -> bool:
    """Whether a decoded id row has an EOS among its first `limit` positions."""
    eos = np.flatnonzero(np.asarray(ids).reshape(-1) == EOS_ID)
    return bool(eos.size) and int(eos[0]) < limit


class T2tLiteEngine(Engine):
    """A t2t_lite model (or ensemble) decoded by `Transformer.infer`'s search, compiled per
    (beam_size, n-best > 1) with alpha an input (`compiled_decoders.CompiledSearches`).

    Args:
      model: from `runs.restore_model`.
      encoders: the run's {"inputs", "targets"} text encoders.
      target_space_id: the problem's.
      decode_hp: the server's decode hparams (`decode_hparams.decode_hparams`); requests may
        change beam_size, alpha and the number of hypotheses.
      input_vocab_size: ids at or above it are refused per sentence.
      description: what /v1/models shows (hparams set, problem, checkpoint, step).
      attention_fn: `fn(model, input_ids, output_ids, target_space_id) -> {"encoder_decoder":
        [N, H, T, L]}` (`visualization.attention_viz.attention_weights`), None: no attention.
      labels_fn: `fn(encoder, ids) -> [str]`, the subword pieces on the attention axes.
      max_compiled_decoders: compiled decoders kept at most (`compiled_decoders.LruCache`).
      intra_op_threads: TensorFlow's intra-op threads in use (`threads.configure`; None:
        not set by the server), what /v1/models shows.
    """

    name = "t2t_lite"
    default_batch_timeout_ms = 5.0

    def __init__(self, model: Any, encoders: dict, target_space_id: int, decode_hp: Any,
                 input_vocab_size: int, description: dict,
                 attention_fn: Callable | None = None, labels_fn: Callable | None = None,
                 max_compiled_decoders: int = 8, intra_op_threads: int | None = None):
        self.model = model
        self.intra_op_threads = intra_op_threads
        self.inputs_encoder = encoders.get("inputs", encoders["targets"])
        self.targets_encoder = encoders["targets"]
        self.target_space_id = target_space_id
        self.decode_hp = decode_hp
        self.extra_length = int(decode_hp.extra_length)
        self.input_vocab_size = input_vocab_size
        self.description = dict(description, engine=self.name)
        self.attention_fn = attention_fn
        self.labels_fn = labels_fn or (lambda encoder, ids: [encoder.decode([i]) for i in ids])
        self.max_compiled_decoders = int(max_compiled_decoders)
        self._searches = CompiledSearches(model, target_space_id, self.extra_length, EOS_ID,
                                          bool(decode_hp.force_decode_length),
                                          self.max_compiled_decoders)
        # The continuous searches' traced functions, one dict per search configuration.
        self._slot_functions = LruCache(self.max_compiled_decoders)

    @property
    def default_workers(self) -> int:
        """Batches to decode at the same time: one per usable core, as `--mode=decode`'s
        parallel batches (`decoding.default_parallel_batches`)."""
        return decoding.default_parallel_batches()

    @property
    def has_attention(self) -> bool:
        """Whether `attention` works (a single model with an attention function)."""
        return self.attention_fn is not None

    def encode(self, text: str) -> list[int]:
        """The input ids of a sentence, EOS last (`text_batches.encode_input`).

        Raises:
          SentenceError: a token the input encoder cannot read, or an id outside the vocab.
        """
        try:
            text_batches.check_id_inputs([text], self.inputs_encoder, "input")
        except UserError as e:
            raise SentenceError(str(e).removeprefix("input:1: ")) from None
        ids = text_batches.encode_input(text, self.inputs_encoder, self.decode_hp.max_input_size)
        bad = [i for i in ids if not 0 <= i < self.input_vocab_size]
        if bad:
            raise SentenceError(f"id {bad[0]} is outside the input vocabulary (0 to "
                                f"{self.input_vocab_size - 1})")
        return ids

    def compiled_decoders(self) -> int:
        """The compiled decoders held now (batch and continuous searches)."""
        return len(self._searches) + len(self._slot_functions)

    def describe(self) -> dict:
        """The description, with whether the checkpoint loaded (each member's, for an
        ensemble) is still whole on disk: training beside the server rotates old ones away,
        the weights served stay those loaded."""
        from t2t_lite.utils import checkpoint_guard

        described = dict(self.description)
        checkpoint = described.get("checkpoint")
        if checkpoint:
            described["checkpoint_on_disk"] = all(
                checkpoint_guard.is_complete(path) for path in str(checkpoint).split(","))
        return described

    def decode(self, id_lists: Sequence[Sequence[int]], options: Options) -> list[Row]:
        """Decodes one batch (see `batching.Engine`); outputs as `--mode=decode` formats them.

        Each row decodes with its own decode length (its input length + extra_length: the
        search's `input_lengths`) and stops where it would alone, so no row depends on its
        batch, except with force_decode_length, skip_eos_postprocess or identity_output
        (the tokens after EOS are then part of the output and follow the batch's steps)."""
        batch = text_batches.pad_batch(id_lists)
        lengths = np.array([len(ids) for ids in id_lists], np.int32)
        outputs, scores = self._searches(
            batch, lengths, options.beam_size, options.alpha,
            options.beam_size if options.n_best > 1 else 1)
        if outputs.ndim == 2:
            outputs = outputs[:, None, :]
        scores = np.asarray(scores).reshape(len(id_lists), -1)
        exact_only = self._outputs_follow_the_batch
        # The search writes nothing past a row's own decode length.
        return [Row(self._hypotheses(outputs[r, :, :len(ids) + self.extra_length], scores[r],
                                     options.n_best),
                    bool(exact_only and len(ids) < batch.shape[1]))
                for r, ids in enumerate(id_lists)]

    def _hypotheses(self, outputs: np.ndarray, scores: np.ndarray,
                    n_best: int) -> list[Hypothesis]:
        """The first n_best of a sentence's outputs [K, T] (cut to its decode length) and
        scores [K], as `--mode=decode` formats them."""
        hp = self.decode_hp
        hypotheses = []
        for k in range(min(n_best, outputs.shape[0])):
            text = text_batches.format_decodes(
                outputs[k: k + 1], None, self.targets_encoder,
                skip_eos_postprocess=hp.skip_eos_postprocess,
                identity_output=hp.identity_output)[0]
            target = [int(i) for i in text_batches.save_until_eos(outputs[k])]
            hypotheses.append(Hypothesis(text, float(scores[k]), target))
        return hypotheses

    @property
    def _outputs_follow_the_batch(self) -> bool:
        """Whether an output's tokens after EOS follow the batch's steps (force_decode_length,
        skip_eos_postprocess or identity_output)."""
        hp = self.decode_hp
        return bool(hp.force_decode_length or hp.skip_eos_postprocess or hp.identity_output)

    def continuous_refusal(self) -> str | None:
        """Why this engine cannot batch continuously (`slot_search`), or None when it can:
        a single Transformer decoded by argmax or beam search, whose outputs end at EOS
        (not force_decode_length, skip_eos_postprocess or identity_output, where the tokens
        after EOS follow the batch's steps)."""
        from t2t_lite.search import continuous

        if self._outputs_follow_the_batch:
            return "force_decode_length, skip_eos_postprocess or identity_output is set"
        return continuous.supports(self.model)

    def slot_search(self, options: Options, max_input_length: int,
                    steps_per_call: int) -> SlotRows:
        """A continuous search of this model with `options` (`continuous.SlotSearch`) whose
        `run` returns (token, Row) pairs."""
        from t2t_lite.search import continuous

        search = continuous.SlotSearch(
            self.model, options.beam_size, options.alpha, self.extra_length,
            max_input_length, top_beams=options.beam_size if options.n_best > 1 else 1,
            target_space_id=self.target_space_id, steps_per_call=steps_per_call,
            # The search's traced functions depend on these options (alpha is their
            # input), at most max_compiled_decoders.
            functions=self._slot_functions.get_or_make(
                (options.beam_size, options.n_best > 1), dict))
        return SlotRows(search, lambda finished: Row(self._hypotheses(
            finished.outputs, finished.scores, options.n_best)))

    def attention_cells(self, input_length: int) -> int:
        """The most encoder-decoder attention weights of a sentence of `input_length` ids:
        decoder layers x heads x (its decode length + EOS) x input_length."""
        if self.attention_fn is None:
            return 0
        hparams = self.model.hparams
        layers = int(hparams.get("num_decoder_layers") or hparams.num_hidden_layers)
        outputs = input_length + self.extra_length + 1
        return layers * int(hparams.num_heads) * outputs * input_length

    def attention(self, input_ids: Sequence[int], output_ids: Sequence[int]) -> dict:
        """The encoder-decoder attention of the pair, teacher-forced as `--mode=attention`.

        Returns:
          {"source_pieces": [L], "target_pieces": [T], "weights": [N][H][T][L]} (EOS last on
          both sides; N layers, H heads).
        """
        if self.attention_fn is None:
            raise Unsupported(NO_ATTENTION)
        # As --mode=attention: trailing padding (no EOS within the decode length) dropped.
        targets = [int(i) for i in output_ids]
        while targets and targets[-1] == PAD_ID:
            targets.pop()
        targets.append(EOS_ID)
        weights = self.attention_fn(self.model, list(input_ids), targets,
                                    self.target_space_id)["encoder_decoder"]
        return {"source_pieces": self.labels_fn(self.inputs_encoder, list(input_ids)),
                "target_pieces": self.labels_fn(self.targets_encoder, targets),
                "weights": np.round(np.asarray(weights, np.float64), 4).tolist()}


class SlotRows:
    """A continuous search whose finished sentences come back as Rows (`batching`'s
    continuous worker).

    Args:
      search: a `continuous.SlotSearch`.
      to_row: `fn(continuous.Finished) -> Row`.
    """

    def __init__(self, search: Any, to_row: Callable):
        self.search = search
        self.to_row = to_row

    def __len__(self) -> int:
        """The live sentences."""
        return len(self.search)

    def admit(self, id_lists: Sequence[Sequence[int]], tokens: Sequence) -> None:
        """Adds sentences (ids ending in EOS); each token comes back with its Row."""
        self.search.admit(id_lists, tokens)

    def run(self) -> list[tuple[Any, Row]]:
        """Runs a few steps; the (token, Row) of each sentence that ended."""
        return [(finished.token, self.to_row(finished)) for finished in self.search.run()]

    @property
    def last_steps(self) -> int:
        """The decode steps the last `run` ran."""
        return self.search.last_steps


class _ExportEngine(Engine):
    """What the engines of exported models share: no attention, the server's decode hparams.

    Args:
      decode_hp: the server's decode hparams (extra_length, max_input_size, defaults).
      description: what /v1/models shows.
    """

    name = "export"
    has_attention = False
    default_batch_timeout_ms = 5.0

    def __init__(self, decode_hp: Any, description: dict):
        self.decode_hp = decode_hp
        self.extra_length = int(decode_hp.extra_length)
        self.description = dict(description, engine=self.name)

    def attention(self, input_ids, output_ids) -> dict:
        """Not offered by exported models."""
        raise Unsupported(NO_ATTENTION)


class CTranslate2Engine(_ExportEngine):
    """`ct2.Translator` on an exported CTranslate2 directory.

    Args:
      translator: a `t2t_lite.export.ct2.Translator`.
      decode_hp: the server's decode hparams (extra_length, max_input_size, defaults).
      description: what /v1/models shows.
      workers: the server's decode workers (0: `default_workers`, one per replica).
    """

    name = "ctranslate2"
    # A lone sentence decodes in ~20 ms (the trained transformer_tiny on this bench's CPU):
    # a worker that waits 5 ms for its batch to fill idles its replica for a quarter of a
    # decode; 1 ms gave 1.1-1.2x the sentences/s of 5 ms at 16 clients (bench/README.md).
    default_batch_timeout_ms = 1.0

    def __init__(self, translator: Any, decode_hp: Any, description: dict, workers: int = 0):
        super().__init__(decode_hp, description)
        self.translator = translator
        self.workers = workers or self.default_workers

    def describe(self) -> dict:
        """The description, with whether the export folder is still on disk."""
        model_dir = self.description.get("model_dir")
        return dict(self.description, **({"model_dir_on_disk": os.path.isdir(model_dir)}
                                         if model_dir else {}))

    @property
    def default_workers(self) -> int:
        """One decode worker per CTranslate2 replica (`inter_threads`): each batch runs on a
        replica of its own while the other workers fill and decode theirs."""
        return self.translator.inter_threads

    def encode(self, text: str) -> list[int]:
        """Subword ids of the sentence (cut to max_input_size - 1 when > 0) plus EOS.

        Raises:
          SentenceError: longer than the positions the export serves.
        """
        ids = text_batches.encode_input(text, self.translator.inputs_encoder,
                                        self.decode_hp.max_input_size)
        if len(ids) > self.translator.max_position:
            raise SentenceError(f"{len(ids)} subwords (EOS included) is longer than the "
                                f"{self.translator.max_position} positions this export serves")
        return ids

    def decode(self, id_lists: Sequence[Sequence[int]], options: Options) -> list[Row]:
        """Decodes one batch with `Translator.translate_id_batches` (t2t's scores and decode
        length). One CTranslate2 batch runs on one of its `inter_threads` replicas (one core
        each on CPU); with fewer decode workers than replicas, the batch is cut into parts
        of neighbouring lengths (one per replica a worker has to itself), decoded at once,
        each with its own decode length."""
        order = sorted(range(len(id_lists)), key=lambda i: len(id_lists[i]))
        part_count = max(1, self.translator.inter_threads // self.workers)
        size = -(-len(order) // max(1, min(part_count, len(order))))
        parts = [order[start: start + size] for start in range(0, len(order), size)]
        results = self.translator.translate_id_batches(
            [[list(id_lists[i][:-1]) for i in part] for part in parts],
            beam_size=options.beam_size, alpha=options.alpha, extra_length=self.extra_length,
            num_hypotheses=options.n_best)
        rows: list[Row | None] = [None] * len(id_lists)
        for part, hypothesis_lists in zip(parts, results):
            padded = max(len(id_lists[i]) for i in part)
            for i, hypotheses in zip(part, hypothesis_lists):
                limit = len(id_lists[i]) + self.extra_length
                # A hypothesis of n ids ended with EOS at position n, or ran to its part's
                # limit.
                depends = len(id_lists[i]) < padded and any(len(h.ids) + 1 > limit
                                                            for h in hypotheses)
                rows[i] = Row([Hypothesis(h.text, float(h.score), list(h.ids))
                               for h in hypotheses], depends)
        return rows


class SavedModelEngine(_ExportEngine):
    """A `--mode=export` SavedModel, loaded with `tf.saved_model.load`.

    Beam size, alpha, extra length and return_beams were fixed at export time; the server's
    --decode_hparams must state the same values (a request asking for others gets 422).

    Args:
      loaded: the loaded SavedModel (with `encode`, `encode_decode_ids`, `decode`).
      decode_hp: the export's decode hparams.
      description: what /v1/models shows.
    """

    name = "saved_model"

    def __init__(self, loaded: Any, decode_hp: Any, description: dict):
        super().__init__(decode_hp, description)
        self.loaded = loaded
        self.top_beams = int(decode_hp.beam_size) if decode_hp.return_beams else 1

    def describe(self) -> dict:
        """The description, with whether the SavedModel is still on disk."""
        path = self.description.get("saved_model")
        on_disk = {"saved_model_on_disk": os.path.isfile(os.path.join(path, "saved_model.pb"))}
        return dict(self.description, **(on_disk if path else {}))

    def check_options(self, options: Options) -> None:
        """Refuses options other than the export's.

        Raises:
          Unsupported: naming the option and the export's value.
        """
        fixed = {"beam_size": int(self.decode_hp.beam_size),
                 "alpha": float(self.decode_hp.alpha)}
        for name, value in fixed.items():
            if getattr(options, name) != value:
                raise Unsupported(f"{name}={getattr(options, name)}: this SavedModel decodes "
                                  f"with {name}={value}, fixed at export")
        if options.n_best > self.top_beams:
            raise Unsupported(f"n_best={options.n_best}: this SavedModel returns "
                              f"{self.top_beams} hypotheses (return_beams at export)")

    def encode(self, text: str) -> list[int]:
        """The SavedModel's own `encode` signature (ids then EOS)."""
        import tensorflow as tf

        ids = self.loaded.signatures["encode"](inputs=tf.constant([text]))["outputs"]
        return [int(i) for i in np.asarray(ids).reshape(-1)]

    def decode(self, id_lists: Sequence[Sequence[int]], options: Options) -> list[Row]:
        """Decodes one batch with `encode_decode_ids`, texts with `decode`."""
        import tensorflow as tf

        self.check_options(options)
        batch = text_batches.pad_batch(id_lists)
        result = self.loaded.signatures["encode_decode_ids"](inputs=tf.constant(batch))
        outputs = np.asarray(result["outputs"])
        if outputs.ndim == 2:
            outputs = outputs[:, None, :]
        scores = np.asarray(result["scores"]).reshape(len(id_lists), -1)
        flat = outputs.reshape(-1, outputs.shape[-1])
        texts = self.loaded.signatures["decode"](inputs=tf.constant(flat, tf.int32))["outputs"]
        texts = [t.decode("utf-8") for t in np.asarray(texts).reshape(-1)]
        rows = []
        for r, ids in enumerate(id_lists):
            hypotheses = [Hypothesis(texts[r * outputs.shape[1] + k], float(scores[r, k]),
                                     [int(i) for i in text_batches.save_until_eos(outputs[r, k])])
                          for k in range(options.n_best)]
            limit = len(ids) + self.extra_length
            depends = len(ids) < batch.shape[1] and not all(
                _ended_within(outputs[r, k], limit) for k in range(options.n_best))
            rows.append(Row(hypotheses, depends))
        return rows
