"""Decoding a model that implements `start_decoding` (interface.py): the cache layout,
greedy or beam search over its `Decoder`, the traced / XLA-compiled decoders and their
input buckets.

`infer` is `Transformer.infer` and `TransformerEnsemble.infer`: the models hold a
`CompiledDecoders` and pass it with themselves.
"""
from __future__ import annotations

import threading
from collections.abc import Callable

import tensorflow as tf

from t2t_lite.search import beam_search, greedy
from t2t_lite.search import sampling as sampling_lib
from t2t_lite.search.interface import StepOptions, ids_2d


def xla_length_bucket(length: int) -> int:
    """The padded input length of the XLA decoder: the smallest of 8, 12, 16, 24, 32, 48,
    ... (powers of two and 1.5 times them) that holds `length`, so that inputs of all lengths
    need few compilations and at most 50% padding."""
    bucket = 8
    while bucket < length:
        bucket = bucket * 3 // 2 if bucket & (bucket - 1) == 0 else bucket * 4 // 3
    return bucket


def xla_batch_bucket(batch_size: int) -> int:
    """The padded batch size of the XLA decoder: the next power of two."""
    return 1 << max(0, batch_size - 1).bit_length()


def check_beams(beam_size, top_beams) -> None:
    """Refuses a beam_size that is not an int >= 1 or top_beams outside 1..beam_size.

    Raises:
      ValueError: one line naming the value.
    """
    if not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_size must be an int >= 1, got {beam_size!r}")
    if not 1 <= top_beams <= beam_size:
        raise ValueError(f"top_beams={top_beams} must be between 1 and beam_size={beam_size}")


class CompiledDecoders(dict):
    """A model's traced decoders by configuration key (a dict); decoding threads
    (decode_from_file's parallel batches) create each one once."""

    def __init__(self):
        super().__init__()
        self._lock = threading.Lock()

    def get_or_make(self, key: tuple, make: Callable[[], Callable]) -> Callable:
        """The decoder of `key`, made by `make()` the first time."""
        with self._lock:
            if key not in self:
                self[key] = make()
            return self[key]


def _cache(beam_size: int, use_cache: bool, fixed: bool, beam_slots: bool) -> str:
    """The cache layout (interface.CACHES) of a decoding configuration."""
    if not use_cache:
        return "recompute"
    if fixed:
        return "fixed"  # XLA needs static shapes
    # Beam search keeps keys/values in beam-slot storage (no per-step reordering copies).
    return "beam_slots" if beam_size > 1 and beam_slots else "growing"


def infer_graph(model, inputs, target_space_id, decode_length, beam_size: int,
                top_beams: int, alpha: float, use_cache: bool, eos_id: int,
                force_decode_length: bool = False, input_length=None,
                buffer_length: int | None = None, beam_slots: bool = True, prefixes=None,
                sampling: sampling_lib.Sampling | None = None, input_lengths=None):
    """The decoding graph of `infer`.

    With `buffer_length` (a Python int) every loop tensor has a static shape, so the
    graph compiles with XLA: `inputs` may then carry extra padding columns beyond the
    batch's own padded length `input_length`, which still sets the number of steps as in
    t2t, and the result is the whole buffer with "steps" (see `infer`). `prefixes`
    (int32 [B, P]) forces the first tokens (see `infer`); `sampling` replaces the model's
    sampling hparams in greedy decoding; `input_lengths` (int32 [B]) gives each row its own
    decode length, its input length + decode_length (see `infer`).
    """
    inputs = ids_2d(inputs)
    batch_size = tf.shape(inputs)[0]
    if input_length is None:
        input_length = tf.shape(inputs)[1]
    # t2t: decode_length = padded input length + extra length.
    max_length = input_length + tf.cast(decode_length, tf.int32)
    buffers = max_length if buffer_length is None else buffer_length
    row_lengths = None
    if input_lengths is not None:
        row_lengths = tf.cast(input_lengths, tf.int32) + tf.cast(decode_length, tf.int32)
    options = StepOptions(beam_size, buffers,
                          _cache(beam_size, use_cache, buffer_length is not None, beam_slots),
                          float32_logits=beam_size == 1)
    decoder = model.start_decoding(inputs, target_space_id, options)
    if beam_size == 1:
        choice = sampling or model.sampling
        outputs, scores, steps = greedy.search(
            decoder, batch_size, max_length,
            lambda logits, t: sampling_lib.sample(logits, choice, t), eos_id,
            whole_prefix=not use_cache, force_decode_length=force_decode_length,
            buffer_length=buffer_length, prefixes=prefixes, row_lengths=row_lengths,
        )
        if buffer_length is not None:
            return {"outputs": outputs, "scores": scores, "steps": steps}
        return {"outputs": outputs[:, :steps], "scores": scores}
    ids, scores, _, steps = beam_search.search(
        decoder, tf.zeros([batch_size], tf.int32), beam_size, max_length, model.vocab_size,
        alpha, eos_id=eos_id, stop_early=top_beams == 1, max_decode_length=buffer_length,
        prefixes=prefixes, row_decode_lengths=row_lengths, whole_prefix=not use_cache,
    )
    # Without the start column; t2t's length (the steps run) unless the caller wants the
    # static buffer (XLA).
    ids = ids[:, :, 1:] if buffer_length is not None else ids[:, :, 1: steps + 1]
    result = {"outputs": ids[:, :top_beams], "scores": scores[:, :top_beams]}
    if top_beams == 1:
        result = {"outputs": ids[:, 0], "scores": scores[:, 0]}
    if buffer_length is not None:
        result["steps"] = steps
    return result


def _pad_rows(ids: tf.Tensor, rows: int, columns: int) -> tf.Tensor:
    """[B, C] -> [rows, columns]: zero columns, then copies of row 0 (which finish with it)."""
    padded = tf.pad(ids, [[0, 0], [0, columns - int(ids.shape[1])]])
    if rows > int(ids.shape[0]):
        padded = tf.concat(
            [padded, tf.repeat(padded[:1], rows - int(ids.shape[0]), axis=0)], axis=0)
    return padded


def _infer_xla(model, functions: CompiledDecoders, inputs: tf.Tensor,
               target_space_id: tf.Tensor, decode_length: int, key: tuple,
               settings: dict, prefixes: tf.Tensor | None = None) -> dict[str, tf.Tensor]:
    """`infer` through one XLA-compiled decoder per bucket shape.

    The batch [B, L] is padded to [xla_batch_bucket(B), xla_length_bucket(L)] (extra rows
    copy row 0, so they finish with it; extra columns are padding, masked as any other),
    which bounds the number of compilations; the number of steps still comes from L, as
    in t2t, and the extra rows are dropped from the result. Prefixes [B, P] are padded
    the same way, to [xla_batch_bucket(B), xla_length_bucket(P)] (zero columns are no
    prefix).
    """
    batch, length = (int(d) for d in inputs.shape)
    padded_batch = xla_batch_bucket(batch)
    padded = _pad_rows(inputs, padded_batch, xla_length_bucket(length))
    # No input signature: one trace and compilation per bucket shape.
    function = functions.get_or_make(
        key + ("xla", decode_length, prefixes is not None), lambda: tf.function(
            lambda inputs, target_space_id, input_length, prefixes=None: infer_graph(
                model, inputs, target_space_id, decode_length, **settings,
                input_length=input_length, buffer_length=int(inputs.shape[1]) + decode_length,
                prefixes=prefixes,
            ),
            autograph=False, jit_compile=True,
        ))
    if prefixes is None:
        result = function(padded, target_space_id, tf.constant(length))
    else:
        result = function(padded, target_space_id, tf.constant(length), _pad_rows(
            prefixes, padded_batch, xla_length_bucket(int(prefixes.shape[1]))))
    steps = int(result["steps"])
    return {"outputs": result["outputs"][:batch, ..., :steps],
            "scores": result["scores"][:batch]}


def infer(model, functions: CompiledDecoders, features: dict, decode_length=50,
          beam_size: int = 1, alpha: float = 0.6, top_beams: int = 1, use_cache: bool = True,
          eos_id: int = beam_search.EOS_ID, jit_compile: bool = False,
          force_decode_length: bool = False, beam_slots: bool = True,
          sampling: sampling_lib.Sampling | None = None,
          alignment_layer: int | None = None) -> dict[str, tf.Tensor]:
    """Autoregressive decoding of `model` (t2t's `infer` with fast incremental decoding).

    At most `L_in + decode_length` tokens are generated (L_in = padded input length).
    Greedy (beam_size 1) stops early only when every row has produced EOS; tokens after a
    row's first EOS are kept, as in t2t. Beam search uses the GNMT length penalty `alpha`.
    Called eagerly, the decoder runs as a tf.function (one trace per decoding
    configuration, kept in `functions`); called inside a tf.function, it adds its ops to
    that graph.

    Args:
      model: a model with `start_decoding`, `vocab_size` and `sampling` (interface.py).
      functions: the model's compiled decoders.
      features: {"inputs": int [B, L_in], optional "target_space_id": int scalar,
        optional "prefixes": int [B, P]: target prefixes, 0-padded subword ids without
        EOS; every output of row b starts with its prefix and the search continues from
        it (greedy and beam search, also with jit_compile; scores are those of the whole
        output, prefix included, as the search scores any output), optional
        "input_lengths": int [B], each row's own input length (EOS included, no padding):
        row b then decodes at most input_lengths[b] + decode_length tokens and stops where
        it would alone, so that its output and score do not depend on the rows it is
        batched with (beyond float rounding over padded positions); its output is 0 after
        its own length (not with jit_compile)}.
      decode_length: extra length (int or int32 scalar).
      beam_size: 1 = greedy (`hparams.sampling_method`), >1 = beam search.
      alpha: length-penalty exponent of beam search.
      top_beams: beams returned (<= beam_size).
      use_cache: False recomputes the whole decoder prefix every step (reference/slow path).
      eos_id: end-of-sequence id.
      jit_compile: compile the cached decoder (greedy or beam search) with XLA: one
        compilation per bucket of input shapes (`xla_length_bucket`,
        `xla_batch_bucket`); `decode_length` must then be a Python int. Ignored inside a
        tf.function.
      force_decode_length: greedy decoding runs all `L_in + decode_length` steps even
        when every row has emitted EOS (t2t's decode hparam; beam search ignores it).
      beam_slots: beam search keeps the caches in beam slots (False: growing caches
        reordered with the hypotheses, t2t's way; the same results).
      sampling: greedy decoding chooses tokens by these settings instead of the model's
        sampling hparams (inside a tf.function its keep_top_p may be a float32 tensor).
      alignment_layer: also return "attention", the encoder-decoder attention of this
        decoder layer (-1: the last), mean over its heads, for the best output
        (`model.encdec_attention`, teacher-forced on that output; word alignments).

    Returns:
      {"outputs": int32 [B, T'] (or [B, top_beams, T']), "scores": float32 [B] (or
      [B, top_beams])}, and with `alignment_layer` "attention" float32 [B, T', L_in].
      Greedy scores sum the log-probs up to and including the first EOS; beam scores are
      t2t's length-normalized log-probs.
    """
    check_beams(beam_size, top_beams)
    inputs = ids_2d(features["inputs"])
    target_space_id = tf.cast(features.get("target_space_id", 0), tf.int32)
    settings = {"beam_size": beam_size, "top_beams": top_beams, "alpha": float(alpha),
                "use_cache": bool(use_cache), "eos_id": int(eos_id),
                "force_decode_length": bool(force_decode_length)}
    key = tuple(settings.values())
    if not beam_slots:
        settings["beam_slots"] = False
        key += ("growing caches",)
    if sampling is not None:
        settings["sampling"] = sampling
        key += (sampling,)
    prefixes = features.get("prefixes")
    prefixes = None if prefixes is None else ids_2d(prefixes)
    input_lengths = features.get("input_lengths")
    if input_lengths is not None:
        if jit_compile and not tf.inside_function():
            raise ValueError("input_lengths (a decode length per row) is not offered with "
                             "jit_compile=True")
        input_lengths = tf.reshape(tf.cast(input_lengths, tf.int32), [-1])
    result = _search(model, functions, inputs, target_space_id, decode_length, key, settings,
                     prefixes, jit_compile, input_lengths)
    if alignment_layer is not None:
        result = dict(result, attention=_attention(model, functions, inputs, result["outputs"],
                                                   target_space_id, alignment_layer, eos_id))
    return result


def _search(model, functions: CompiledDecoders, inputs, target_space_id, decode_length,
            key: tuple, settings: dict, prefixes, jit_compile: bool,
            input_lengths=None) -> dict[str, tf.Tensor]:
    """The search of `infer`: in the caller's graph, XLA-compiled, or a traced function."""
    if tf.inside_function():
        return infer_graph(model, inputs, target_space_id, tf.cast(decode_length, tf.int32),
                           **settings, prefixes=prefixes, input_lengths=input_lengths)
    if jit_compile:
        if not settings["use_cache"] or not isinstance(decode_length, int):
            raise ValueError(
                "jit_compile=True needs the cached decoder and a Python int decode_length; "
                f"got use_cache={settings['use_cache']}, decode_length={decode_length!r}"
            )
        return _infer_xla(model, functions, inputs, target_space_id, decode_length, key,
                          settings, prefixes)
    signature = [tf.TensorSpec([None, None], tf.int32), tf.TensorSpec(None, tf.int32),
                 tf.TensorSpec([], tf.int32)]
    # The optional inputs, in this order, each with its own traced function.
    extras = {name: value for name, value in (("prefixes", prefixes),
                                              ("input_lengths", input_lengths))
              if value is not None}
    shapes = {"prefixes": [None, None], "input_lengths": [None]}
    names = tuple(extras)

    def search(inputs, target_space_id, decode_length, *values):
        return infer_graph(model, inputs, target_space_id, decode_length, **settings,
                           **dict(zip(names, values)))

    function = functions.get_or_make(key + names, lambda: tf.function(
        search,
        # The loops are explicit tf.while_loops; autograph would only slow tracing.
        autograph=False,
        input_signature=signature + [tf.TensorSpec(shapes[name], tf.int32) for name in names],
    ))
    return function(inputs, target_space_id, tf.cast(decode_length, tf.int32),
                    *extras.values())


def _attention(model, functions: CompiledDecoders, inputs, outputs, target_space_id,
               layer: int, eos_id: int) -> tf.Tensor:
    """`model.encdec_attention` of `layer` over the best of `outputs` ([B, T] or
    [B, K, T]) with the ids after its first EOS zeroed: float32 [B, T, L]."""
    best = outputs if outputs.shape.rank == 2 else outputs[:, 0]
    after_eos = tf.cumsum(tf.cast(tf.equal(best, eos_id), tf.int32), axis=1, exclusive=True)
    targets = tf.where(after_eos > 0, 0, best)
    if tf.inside_function():
        return model.encdec_attention(inputs, targets, layer, target_space_id)
    function = functions.get_or_make(("alignment", layer), lambda: tf.function(
        lambda inputs, targets, target_space_id: model.encdec_attention(
            inputs, targets, layer, target_space_id),
        autograph=False,
        input_signature=[tf.TensorSpec([None, None], tf.int32),
                         tf.TensorSpec([None, None], tf.int32), tf.TensorSpec(None, tf.int32)],
    ))
    return function(inputs, targets, target_space_id)
