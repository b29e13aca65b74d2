"""`run.py --mode=export` (t2t-exporter): a SavedModel that translates text without Python.

t2t's exporter took serialized `tf.Example`s of ids, so every client had to run t2t's Python
SubwordTextEncoder in front of TensorFlow Serving. Here the encoder and decoder are part of the
graph (`t2t_lite.export.subword_graph`, core TensorFlow string ops only), and the SavedModel
needs nothing but TensorFlow.

    python run.py --mode=export --problem=translate_ende_wmt32k --data_dir=DATA \
        --output_dir=TRAIN [--checkpoint_path=CKPT] [--export_dir=DIR] \
        [--decode_hparams="beam_size=4,alpha=0.6,extra_length=100,return_beams=False"]

writes `<export_dir>/<unix time>/` (export_dir defaults to `<output_dir>/export`; the numbered
version folder is the layout TensorFlow Serving's `--model_base_path` expects) with signatures:

* `serving_default`: `inputs` string [B] -> `outputs` string [B] (translations) and `scores`
  float32 [B]; with `return_beams=True`, `outputs` string [B, K] and `scores` [B, K] (best first).
* `encode_decode_ids`: `inputs` int32 [B, L] (subtoken ids, then EOS=1, right-padded with 0,
  as t2t's clients sent them) -> `outputs` int32 [B, T] (or [B, K, T]) cut after the first EOS
  (later positions 0) and `scores`. Ids outside [0, input vocab size) are an
  InvalidArgumentError that names the vocab size.
* `translate_options`: `inputs` string [B], `prefixes` string [B] (target prefixes: every
  output starts with the prefix's subwords and the search continues from there; "" = none),
  `sampling_keep_top_p` float32 scalar (<= 0: decode as exported; in (0, 1]: sample
  each token from the nucleus of probability p, with the model's `sampling_temp` and
  `sampling_keep_top_k`; exports with beam_size=1 only) and `seed` int64 scalar (< 0:
  unseeded draws from TensorFlow's stateful generator, different at every call; >= 0: the
  stateless draws seeded by (seed, step), the same outputs for the same seed and inputs)
  -> `outputs`, `scores` as `serving_default`.
* With `return_alignment=true` in `--decode_hparams`, `serving_default` and
  `translate_options` also return `alignments` string [B]: the Pharaoh line `i-j ...` of
  the best output (`decoding/alignment.py`: the encoder-decoder attention of decode
  hparam `alignment_layer`, mean over heads, pieces merged to words).
* `encode`: `inputs` string [B] -> `outputs` int32 [B, L], the ids that `serving_default` feeds
  to the model (EOS included, 0-padded). `decode`: `inputs` int32 [B, T] -> `outputs`
  string [B] (ids cut at the first EOS, then decoded).

Beam size, alpha, extra decode length and return_beams are fixed at export time from
`--decode_hparams`; the target space id from the problem. Input length follows the same rule
as decode mode (`text_batches.input_length_limit`, t2t's `max_input_size`): with max_input_size > 0
longer inputs are cut to `max_input_size - 1` subtokens plus EOS, otherwise they are decoded
whole, as t2t-decoder decodes them, so both modes give the same output. Invalid UTF-8
bytes are read as U+FFFD, and an empty string is translated like an empty line (EOS only).

The model comes from `--checkpoint_path` or the newest checkpoint of `--output_dir` (found on
disk; read again from the then-newest one if a training run beside the export rotates it away
while it is read): a t2t_lite checkpoint (training run, averaged or imported) whose model
variables are exactly the model's, or an original tensor2tensor checkpoint.
Serving needs TensorFlow only (no Keras, tensorflow-text or t2t_lite), except for a
SentencePiece vocabulary: its graph encoder is tensorflow-text's `SentencepieceTokenizer`
(`sentencepiece_graph`), so `import tensorflow_text` comes before `tf.saved_model.load`, and
TensorFlow Serving needs a binary with tensorflow-text's ops:

    model = tf.saved_model.load("<export_dir>/<version>")
    model.signatures["serving_default"](inputs=tf.constant(["The debate is closed."]))
    # or: tensorflow_model_server --model_name=t2t --model_base_path=<export_dir>
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging as std_logging
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import tensorflow as tf

from t2t_lite import hparams_support
from t2t_lite.data_generators import sentencepiece_encoder, text_encoder
from t2t_lite.decoding import alignment
from t2t_lite.export import alignment_graph, sentencepiece_graph, subword_graph
from t2t_lite.hparams import HParams
from t2t_lite.layers import native_kernels
from t2t_lite.search import sampling as sampling_lib
from t2t_lite.utils import checkpoint_guard

EOS_ID = text_encoder.EOS_ID
# Temporary SavedModel folders are `.export.tmp-<host>-<pid>-<random>` in the export dir.
TEMP_STEM = "export"


def cut_at_eos(ids: tf.Tensor) -> tf.RaggedTensor:
    """Drops the first EOS of each row and everything after it (t2t's `_save_until_eos`).

    Args:
      ids: int32 [N, T].

    Returns:
      int32 RaggedTensor [N, None].
    """
    width = tf.shape(ids)[1]
    eos_position = tf.where(tf.equal(ids, EOS_ID), tf.range(width)[tf.newaxis, :], width)
    # min() over an empty row is the dtype's maximum: clip it to the width.
    length = tf.minimum(tf.reduce_min(eos_position, axis=1), width)
    return tf.RaggedTensor.from_tensor(ids, lengths=length)


def limit_input_ids(inputs: tf.Tensor, limit: int | None) -> tf.Tensor:
    """Cuts rows longer than `limit` to their first `limit - 1` ids plus EOS.

    Args:
      inputs: int32 [B, L], each row ids then EOS then 0-padding.
      limit: maximum row length (EOS included), or None for no limit.

    Returns:
      int32 [B, min(L, limit)]; shorter rows are unchanged.
    """
    if limit is None:
        return inputs

    def cut():
        nonzero = inputs != 0
        trailing_pads = tf.argmax(tf.cast(tf.reverse(nonzero, [1]), tf.int32), axis=1,
                                  output_type=tf.int32)
        row_length = tf.where(tf.reduce_any(nonzero, axis=1),
                              tf.shape(inputs)[1] - trailing_pads, 0)
        last = tf.where(row_length > limit, EOS_ID, inputs[:, limit - 1])
        return tf.concat([inputs[:, :limit - 1], last[:, None]], axis=1)

    return tf.cond(tf.shape(inputs)[1] > limit, cut, lambda: inputs)


def _in_interval(value: tf.Tensor, interval: hparams_support.Interval) -> tf.Tensor:
    """bool scalar: whether the scalar `value` lies in `interval` (its ends open or closed)."""
    above = value >= interval.low if interval.low_closed else value > interval.low
    below = value <= interval.high if interval.high_closed else value < interval.high
    return tf.logical_and(above, below)


class ServingModule(tf.Module):
    """What the SavedModel holds: the model's variables, the graph encoders, the signatures.

    Args:
      model: a Transformer (anything with t2t_lite's `infer`, `variables` and
        `input_vocab_size`).
      inputs_vocab, targets_vocab: `graph_vocabulary` of the input / target encoder: the
        subtoken strings of a SubwordTextEncoder (`all_subtoken_strings`), a
        `SentencePieceVocab`, or None to export the id signature only.
      decode_hparams: from `decode_hparams.decode_hparams` (beam_size, alpha, extra_length,
        return_beams).
      max_input_length: from `text_batches.input_length_limit` (None: no limit).
      target_space_id: the problem's target space id.
      subword_segmenter: the graph encoders' segmenter, `subword_graph.SEGMENTERS`: "core"
        (the SavedModel loads in any TensorFlow) or "tensorflow_text" (faster encoding; the
        loading process needs tensorflow-text's ops, `import tensorflow_text`).
    """

    def __init__(self, model, inputs_vocab, targets_vocab, decode_hparams: HParams,
                 max_input_length: int | None, target_space_id: int,
                 subword_segmenter: str = "core"):
        super().__init__(name="t2t_lite_serving")
        if max_input_length is not None and max_input_length < 2:
            raise ValueError(f"The input length limit must be >= 2 (one id and EOS), got "
                             f"{max_input_length}; raise max_input_size in --decode_hparams")
        # Only the variables are tracked (as Keras' ExportArchive does): the SavedModel then
        # holds no Keras object and loads without Keras or t2t_lite. A bound method is not
        # tracked.
        self._model_infer = model.infer
        self.model_variables = [getattr(v, "value", v) for v in model.variables]
        self._input_vocab_size = model.input_vocab_size
        self._beam_size = int(decode_hparams.beam_size)
        self._alpha = float(decode_hparams.alpha)
        self._extra_length = int(decode_hparams.extra_length)
        self._top_beams = self._beam_size if decode_hparams.return_beams else 1
        self._max_input_length = max_input_length
        self._target_space_id = int(target_space_id)
        self._alignment_layer = alignment.layer(decode_hparams)
        # The nucleus draws of `translate_options` use the model's temperature and top-k.
        self._sampling = model.sampling
        self.text = inputs_vocab is not None and targets_vocab is not None
        if self.text:
            self.inputs_encoder = _graph_encoder(inputs_vocab, subword_segmenter)
            self.targets_encoder = (
                self.inputs_encoder if _same_vocabulary(targets_vocab, inputs_vocab)
                else _graph_encoder(targets_vocab, subword_segmenter))
            self.serving_default = _function(
                self._translate, input_signature=[tf.TensorSpec([None], tf.string)])
            self.encode = _function(
                self._encode_text, input_signature=[tf.TensorSpec([None], tf.string)])
            self.decode = _function(
                self._decode_text, input_signature=[tf.TensorSpec([None, None], tf.int32)])
            self.translate_options = _function(self._translate_options, input_signature=[
                tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.string),
                tf.TensorSpec([], tf.float32), tf.TensorSpec([], tf.int64)])
        self.encode_decode_ids = _function(
            self._translate_ids, input_signature=[tf.TensorSpec([None, None], tf.int32)])

    @property
    def signature_names(self) -> list[str]:
        """The signatures this module exports."""
        if self.text:
            return ["serving_default", "encode_decode_ids", "encode", "decode",
                    "translate_options"]
        return ["encode_decode_ids"]

    def signatures(self) -> dict:
        """Concrete functions by signature name, for `tf.saved_model.save`."""
        return {name: getattr(self, name).get_concrete_function()
                for name in self.signature_names}

    # -------------------------------------------------------------------------- signatures
    def _translate(self, inputs: tf.Tensor) -> dict[str, tf.Tensor]:
        """string [B] -> {"outputs": string [B] or [B, K], "scores": float32 [B] or [B, K]}
        (and "alignments" string [B] with return_alignment)."""
        ids = self._encode_text(inputs)["outputs"]
        return self._texts(ids, self._infer(ids))

    def _translate_options(self, inputs: tf.Tensor, prefixes: tf.Tensor,
                           sampling_keep_top_p: tf.Tensor,
                           seed: tf.Tensor) -> dict[str, tf.Tensor]:
        """`_translate` with target prefixes (string [B], "" = none), nucleus sampling
        (float32 scalar p; <= 0: the export's own decoding) and the draws' seed (int64
        scalar; < 0: unseeded)."""
        ids = self._encode_text(inputs)["outputs"]
        prefix_ids = self.targets_encoder.encode(prefixes).to_tensor(default_value=0)
        p = sampling_keep_top_p
        if self._beam_size > 1:
            check = tf.debugging.assert_less_equal(
                p, 0.0, message=f"sampling_keep_top_p applies to greedy decoding; this "
                                f"SavedModel decodes with beam_size={self._beam_size} (set at "
                                "export): pass 0")
            with tf.control_dependencies([check]):
                return self._texts(ids, self._infer(ids, prefix_ids))
        # p > 0 asks for nucleus sampling: p must then lie in the hparam's declared interval.
        declared = hparams_support.HPARAMS["sampling_keep_top_p"].check
        check = tf.debugging.Assert(
            tf.logical_or(p <= 0.0, _in_interval(p, declared)),
            [(f"translate_options: sampling_keep_top_p {declared.rule} (<= 0: decode as "
              "exported), got"), p])
        with tf.control_dependencies([check]):
            p = tf.identity(p)
        nucleus = dataclasses.replace(self._sampling, method="random",
                                      temp=self._sampling.temp or 1.0, keep_top_p=p, seed=seed)
        # p <= 0: the export's own choice (argmax, or its sampling hparams' draws, seeded too).
        exported = dataclasses.replace(self._sampling, seed=seed)
        result = tf.cond(p > 0.0, lambda: self._infer(ids, prefix_ids, nucleus),
                         lambda: self._infer(ids, prefix_ids, exported))
        return self._texts(ids, result)

    def _texts(self, ids: tf.Tensor, result: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """The signature outputs of `_infer(ids)`'s result: texts, scores, alignments."""
        outputs = result["outputs"]
        if self._top_beams > 1:
            flat = tf.reshape(outputs, [-1, tf.shape(outputs)[2]])
            text = tf.reshape(self._decode_text(flat)["outputs"], tf.shape(outputs)[:2])
        else:
            text = self._decode_text(outputs)["outputs"]
        texts = {"outputs": text, "scores": result["scores"]}
        if "attention" in result:
            best = outputs if outputs.shape.rank == 2 else outputs[:, 0]
            decode = self.inputs_encoder.decode
            source_words = alignment_graph.piece_words(
                decode, ids, alignment_graph.length_before(ids, (EOS_ID, 0)))
            target_words = alignment_graph.piece_words(
                self.targets_encoder.decode, best,
                alignment_graph.length_before(best, (EOS_ID,)))
            texts["alignments"] = alignment_graph.alignment_lines(
                result["attention"], source_words, target_words)
        return texts

    def _translate_ids(self, inputs: tf.Tensor) -> dict[str, tf.Tensor]:
        """int32 [B, L] (ids, EOS, 0-padding) -> {"outputs": int32 [B, (K,) T], "scores"}."""
        checks = [
            tf.debugging.assert_greater_equal(
                inputs, 0, message="encode_decode_ids: input ids must be >= 0"),
            tf.debugging.assert_less(
                inputs, self._input_vocab_size,
                message=f"encode_decode_ids: input ids must be < the input vocab size "
                        f"{self._input_vocab_size}"),
        ]
        # The embedding lookup is stateless, so without this dependency the graph may run it
        # before the checks and fail with GatherV2's message instead of theirs.
        with tf.control_dependencies(checks):
            inputs = tf.identity(inputs)
        inputs = limit_input_ids(inputs, self._max_input_length)
        result = self._infer(inputs, attention=False)
        outputs = result["outputs"]
        # Zero everything after the first EOS (greedy decoding keeps producing tokens).
        after_eos = tf.cumsum(tf.cast(tf.equal(outputs, EOS_ID), tf.int32), axis=-1,
                              exclusive=True) > 0
        return {"outputs": tf.where(after_eos, 0, outputs), "scores": result["scores"]}

    def _encode_text(self, inputs: tf.Tensor) -> dict[str, tf.Tensor]:
        """string [B] -> {"outputs": int32 [B, L]}: ids + EOS, cut to the limit, 0-padded."""
        limit = None if self._max_input_length is None else self._max_input_length - 1
        ids = self.inputs_encoder.encode(inputs, max_length=limit)
        eos = tf.fill([tf.shape(inputs)[0], 1], EOS_ID)
        ids = tf.concat([ids, tf.RaggedTensor.from_tensor(eos)], axis=1)
        return {"outputs": ids.to_tensor(default_value=0)}

    def _decode_text(self, inputs: tf.Tensor) -> dict[str, tf.Tensor]:
        """int32 [B, T] -> {"outputs": string [B]}: cut at the first EOS, then decoded."""
        return {"outputs": self.targets_encoder.decode(cut_at_eos(inputs))}

    # ----------------------------------------------------------------------------- helpers
    def _infer(self, inputs: tf.Tensor, prefixes: tf.Tensor | None = None,
               sampling: sampling_lib.Sampling | None = None,
               attention: bool = True) -> dict[str, tf.Tensor]:
        """The model's decode of ids [B, L] (with target prefixes [B, P], another sampling),
        and "attention" [B, T, L] with return_alignment (unless `attention` is False)."""
        features = {"inputs": inputs, "target_space_id": self._target_space_id}
        if prefixes is not None:
            features["prefixes"] = prefixes
        options = {} if sampling is None else {"sampling": sampling}
        if self._alignment_layer is not None and attention:
            options["alignment_layer"] = self._alignment_layer
        return self._model_infer(
            features, decode_length=self._extra_length, beam_size=self._beam_size,
            alpha=self._alpha, top_beams=self._top_beams, **options)


def _function(python_function, input_signature: list) -> tf.types.experimental.Function:
    """A signature's tf.function. Without autograph: the signatures' control flow is explicit
    (tf.cond, tf.while_loop; Python conditions only on Python values), and converting the
    model's and the encoders' source took about half of an export's CPU time."""
    return tf.function(python_function, input_signature=input_signature, autograph=False)


def _graph_encoder(vocab, segmenter: str) -> tf.Module:
    """The in-graph encoder of a `graph_vocabulary`."""
    if isinstance(vocab, sentencepiece_graph.SentencePieceVocab):
        return sentencepiece_graph.SentencePieceGraphEncoder(vocab)
    return subword_graph.SubwordGraphEncoder(vocab, segmenter=segmenter)


def _same_vocabulary(a, b) -> bool:
    if isinstance(a, sentencepiece_graph.SentencePieceVocab) or isinstance(
            b, sentencepiece_graph.SentencePieceVocab):
        return a == b
    return list(a) == list(b)


# ---------------------------------------------------------------------------------- main
def subtoken_strings(encoder) -> list[str] | None:
    """The subtoken strings of a SubwordTextEncoder (for the in-graph encoder), else None."""
    if isinstance(encoder, text_encoder.SubwordTextEncoder):
        return list(encoder.all_subtoken_strings)
    return None


def graph_vocabulary(encoder):
    """What the in-graph encoder of `encoder` is built from: a SubwordTextEncoder's subtoken
    strings, a SentencePieceEncoder's `SentencePieceVocab` (the SavedModel then needs
    tensorflow-text's ops to load), else None (the id signature only)."""
    if isinstance(encoder, sentencepiece_encoder.SentencePieceEncoder):
        return sentencepiece_graph.SentencePieceVocab.of(encoder)
    return subtoken_strings(encoder)


def _below_warning_from_tensorflow(record: std_logging.LogRecord) -> bool:
    """False (drop) for an INFO / DEBUG record logged by TensorFlow's own modules."""
    return record.levelno >= std_logging.WARNING or (
        f"{os.sep}tensorflow{os.sep}" not in record.pathname)


@contextlib.contextmanager
def _tensorflow_save_lines_hidden() -> Iterator[None]:
    """Hides TensorFlow's INFO lines of a SavedModel save (signature input names, up to 1,251
    characters; saver sharding; assets; fingerprint): about TensorFlow's work, not the user's.
    Its warnings and errors still show, and so do t2t_lite's lines. TensorFlow logs through
    absl's logger and its own. absl's level is restored after: tf.saved_model.save leaves it
    at WARNING, and a library caller that exports and then trains in one process would lose
    its INFO lines."""
    loggers = [std_logging.getLogger(name) for name in ("tensorflow", "absl")]
    absl_level = loggers[1].level
    for logger in loggers:
        logger.addFilter(_below_warning_from_tensorflow)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(_below_warning_from_tensorflow)
        loggers[1].setLevel(absl_level)


def _traced(module: Any, on_traced: Callable[[str, int, int, float], None] | None) -> dict:
    """`module.signatures()`, one signature at a time with `on_traced` after each when the
    module names them (`signature_names`, a ServingModule's)."""
    names = getattr(module, "signature_names", None)
    if names is None:
        return module.signatures()
    signatures = {}
    for k, name in enumerate(names, 1):
        started = time.time()
        signatures[name] = getattr(module, name).get_concrete_function()
        if on_traced is not None:
            on_traced(name, k, len(names), time.time() - started)
    return signatures


def export(module: ServingModule, export_dir: str,
           on_traced: Callable[[str, int, int, float], None] | None = None) -> str:
    """Saves `module` as `<export_dir>/<unix time>/` (folders with the user's umask), written
    under a temporary name first (those of killed exports, whose writer no longer runs, are
    removed).

    Args:
      module: the ServingModule.
      export_dir: parent folder of the numbered versions.
      on_traced: called with (signature name, k, n, seconds) after the k-th of the n
        signatures is traced (the longest part of an export), before the SavedModel is written.

    Returns:
      The SavedModel directory.
    """
    tf.io.gfile.makedirs(export_dir)
    version = int(time.time())
    while tf.io.gfile.exists(os.path.join(export_dir, str(version))):
        version += 1
    final = os.path.join(export_dir, str(version))
    # Saved under a hidden name (serving skips non-numeric folders), renamed when complete;
    # tf.io.gfile, so that gs:// export dirs work as in t2t. The name carries this host and
    # pid, so the next export removes it if this one is killed.
    checkpoint_guard.remove_stale_temp_dirs(export_dir, TEMP_STEM)
    tmp = os.path.join(export_dir, checkpoint_guard.temp_dir_name(TEMP_STEM))
    try:
        # The SavedModel keeps the model's custom gradients, traced here: as TensorFlow ops,
        # so that it loads where t2t_lite's native kernels are not (serving, plain TF).
        with _tensorflow_save_lines_hidden(), native_kernels.disabled():
            tf.saved_model.save(module, tmp, signatures=_traced(module, on_traced))
        checkpoint_guard.give_dirs_the_umask(tmp)
        tf.io.gfile.rename(tmp, final)
    except BaseException:
        if tf.io.gfile.exists(tmp):
            tf.io.gfile.rmtree(tmp)
        raise
    return final
