"""The Transformer's side of the batch search (`search/interface.py`'s `Decoder`): its
decoding step and its caches, which only this module reads, grows and reorders.

The caches of a decoder of N = B * K rows (K beams of B sentences, row b * K + k):
* "recompute" (t2t's slow path): none; the whole decoder runs on the prefix every step.
* "growing" (t2t's fast decoding): self-attention keys/values {"layer_{l}": {"k", "v":
  [N, H, t, d]}}, a position appended per step; beam search gathers them by parent row.
* "fixed" (XLA, static shapes): the same, preallocated [N, H, max_length, d] and written
  at step t; attention over the positions not yet written gets -1e9 (exactly zero weight).
* "beam_slots" (beam search, dot-product attention): the keys/values stay in the beam slot
  that computed them, [B, H, K, t, d] (`init_beam_slot_storage`), and a slot table
  {"slots": int32 [N, t, 1]}, the only part that follows the hypotheses, says where each
  hypothesis' positions are; new positions gather in a small recent part that moves into
  the settled part every `BEAM_SLOT_BLOCK` steps, so a step does not copy all earlier
  positions. The K beams of a sentence also read its encoder output untiled.
"""
from __future__ import annotations

import tensorflow as tf

from t2t_lite import hparams_support
from t2t_lite.layers import common_attention
from t2t_lite.search import beam_search
from t2t_lite.search.interface import Decoder, StepOptions, own_shapes
from t2t_lite.search.sampling import Sampling
from t2t_lite.utils import precision

# Beam-slot storage moves its recent keys/values into the settled part every this many
# steps (`common_attention.settle_beam_slots`): a step copies < 12 positions instead of
# all, plus all once per 12 steps (about sqrt(2 T) minimises the copies of T-step outputs;
# 4, 8, 12, 16 and 32 measured alike, within noise, on 500 dev lines of ~40 subwords).
BEAM_SLOT_BLOCK = 12


def sampling_from_hparams(hparams) -> Sampling:
    """The sampling settings of model `hparams` (t2t's sampling_method, sampling_temp,
    sampling_keep_top_k and sampling_keep_top_p; defaults for those a set lacks).

    Raises:
      HParamsError: a Python sampling_keep_top_p outside (0, 1] (a tensor, the SavedModel's
        input, is checked by its signature).
    """
    values = [hparams_support.hparam(hparams, f"sampling_{name}")
              for name in ("method", "temp", "keep_top_k", "keep_top_p")]
    if isinstance(values[3], (int, float)):
        hparams_support.check_range("sampling_keep_top_p", values[3])
    return Sampling(*values)


def self_attention_zeros(model, shape_fn) -> dict[str, dict[str, tf.Tensor]]:
    """{"layer_{l}": {"k", "v"}} zeros of shape `shape_fn(heads, depth per head)` in each
    decoder self-attention's compute dtype (bfloat16/float16 under a mixed policy)."""
    zeros = {}
    for layer in model.body.decoder.layers_:
        attention = layer.self_attention
        heads = attention.num_heads
        zeros[layer.name] = {
            name: tf.zeros(shape_fn(heads, depth // heads), attention.compute_dtype)
            for name, depth in (("k", attention.key_depth), ("v", attention.value_depth))
        }
    return zeros


def init_beam_slot_storage(model, batch_size, beam_size: int) -> dict[str, dict[str, tf.Tensor]]:
    """Empty per-slot key/value storage for beam search (the "beam_slots" cache).

    Returns:
      {"layer_{l}": {"k", "k_recent": [B, H, K, 0, Dk/H], "v", "v_recent": [B, H, K, 0,
      Dv/H]}}: the settled and recent parts of `common_attention._attend_beam_slots`.
    """
    zeros = self_attention_zeros(
        model, lambda heads, depth: [batch_size, heads, beam_size, 0, depth])
    return {name: dict(layer, k_recent=layer["k"], v_recent=layer["v"])
            for name, layer in zeros.items()}


def _gather_rows(cache, rows: tf.Tensor):
    """Every tensor of `cache` gathered along its rows (axis 0)."""
    return tf.nest.map_structure(lambda c: tf.gather(c, rows, axis=0), cache)


def _fast_step(model, memory_kv, encdec_bias, max_length, matrices, fixed_cache: bool = False,
               beam_slots: int | None = None, float32_logits: bool = True):
    """`fn(ids [N, *], t, cache) -> (logits [N, V], cache)`: one decoder position from the
    last id, reusing the caches (t2t's `symbols_to_logits_fn` of `_fast_decode`).

    The caches grow by the new position (t2t's way), or with `fixed_cache` have
    `max_length` slots and get position t written (static shapes, for XLA). With
    `beam_slots` = K, `cache` is the pair ({"slots": int32 [N, t, 1]},
    `init_beam_slot_storage` grown by t positions). The logits are float32, or with
    `float32_logits=False` in the decoder's compute dtype (beam search casts what it reads
    of them: `beam_search.best_extensions`)."""
    timing = common_attention.get_timing_signal_1d(max_length + 1, model.hidden_size)
    slots = tf.range(max_length)
    # Weights read (and cast to the compute dtype) once, outside the decoding loop; the
    # softmax matrix too (the embedding gathers its few rows in float32, as training).
    decoder_weights = precision.weights_read_once(model.body.decoder)
    matrices = dict(matrices, softmax=tf.cast(matrices["softmax"],
                                              model.body.decoder.compute_dtype))

    def step(ids, i, cache):
        x = model.modality.bottom(ids[:, -1:], "targets", matrices)
        # Step 0 sees the zero vector ("GO"), as t2t's `preprocess_targets`.
        x *= tf.cast(i > 0, x.dtype)
        if model.hparams.pos == "timing":
            # A static-size slice (not timing[:, i:i + 1]) keeps the step XLA-compilable.
            x += tf.cast(tf.slice(timing, [0, i, 0], [1, 1, model.hidden_size]), x.dtype)
        if fixed_cache:
            bias = tf.where(slots <= i, 0.0, common_attention.LARGE_NEGATIVE)
            bias = tf.reshape(bias, [1, 1, 1, max_length])
        else:
            bias = None  # a growing cache holds exactly the positions 0..i
        if beam_slots:
            table, storage = cache
            rows = tf.shape(table["slots"])[0]
            # Row b * K + j writes its step into slot j.
            own_slot = tf.reshape(tf.range(rows, dtype=tf.int32) % beam_slots, [rows, 1, 1])
            slot_ids = tf.concat([table["slots"], own_slot], axis=1)
            slot_mask = common_attention.beam_slot_mask(slot_ids, beam_slots, x.dtype)
            cache = {name: dict(layer_storage, slot_mask=slot_mask)
                     for name, layer_storage in storage.items()}
        with decoder_weights():
            x, cache = model.body.decoder(
                x, None, bias, encdec_bias, memory_kv=memory_kv, cache=cache,
                decode_step=i if fixed_cache else None, training=False,
            )
        if beam_slots:
            storage = {name: {part: c[part] for part in ("k", "v", "k_recent", "v_recent")}
                       for name, c in cache.items()}
            cache = ({"slots": slot_ids},
                     common_attention.settle_beam_slots(storage, BEAM_SLOT_BLOCK))
        logits = model.modality.top(x, matrices)[:, 0, :]
        return (tf.cast(logits, tf.float32) if float32_logits else logits), cache

    return step


def _slow_step(model, encoder_output, encdec_bias, matrices):
    """`fn(ids [N, t + 1], t, cache) -> (logits [N, V], cache)`: recomputes the whole
    decoder on the prefix (t2t's slow path); the reference for the cached decoder."""

    def step(ids, i, cache):
        x = model._decoder_input(ids, False, matrices)
        bias = common_attention.attention_bias_lower_triangle(tf.shape(ids)[1])
        x = model.body.decoder(x, encoder_output, bias, encdec_bias, training=False)
        logits = model.modality.top(x[:, -1:, :], matrices)[:, 0, :]
        return tf.cast(logits, tf.float32), cache

    return step


def start_decoding(model, inputs, target_space_id, options: StepOptions) -> Decoder:
    """`Transformer.start_decoding`: runs the encoder once and returns the decoder of the
    B * K rows the search asks for, with the cache layout it asks for (see the module
    docstring; beam slots fall back to growing caches for relative self-attention, whose
    relative-position terms the slot attention does not compute).

    Args:
      model: a Transformer.
      inputs: int32 [B, L] source ids.
      target_space_id: int32 scalar.
      options: the beams, cache layout, length and logits dtype the search asks for.

    Returns:
      an `interface.Decoder`.
    """
    batch_size = tf.shape(inputs)[0]
    k = options.beam_size
    # The embedding matrices are concatenated once, not at every step.
    matrices = model.modality.matrices()
    encoder_output, encdec_bias = model.encode(inputs, target_space_id, training=False,
                                               matrices=matrices)
    if options.cache == "recompute":
        if k > 1:
            # The encoder-side tensors never change across steps: tile them once to the
            # [B * K] beam layout and close over them. (The cached decoder's attention reads
            # them untiled, the K beams of a batch element together.)
            encoder_output = beam_search.tile_to_beams(encoder_output, k)
            encdec_bias = beam_search.tile_to_beams(encdec_bias, k)
        return Decoder(_slow_step(model, encoder_output, encdec_bias, matrices), {})
    memory_kv = model.body.decoder.encdec_memory_kv(encoder_output)
    fixed = options.cache == "fixed"
    relative = hparams_support.hparam(model.hparams, "self_attention_type") != "dot_product"
    slots = k if options.cache == "beam_slots" and k > 1 and not relative else None
    step = _fast_step(model, memory_kv, encdec_bias, options.max_length, matrices,
                      fixed_cache=fixed, beam_slots=slots,
                      float32_logits=options.float32_logits)
    if slots:
        # Only the slot table follows the hypotheses; the storage stays where it was
        # written. [N, t, 1]: it grows along every axis but the last (t2t's invariant).
        return Decoder(step, ({"slots": tf.zeros([batch_size * k, 0, 1], tf.int32)},
                              init_beam_slot_storage(model, batch_size, k)),
                       lambda cache, rows: (_gather_rows(cache[0], rows), cache[1]))
    # Growing caches (t2t's) cost about half of fixed-size ones, which XLA needs.
    cache = model.init_decode_cache(batch_size * k, options.max_length if fixed else 0)
    return Decoder(step, cache, _gather_rows, own_shapes if fixed else None)
