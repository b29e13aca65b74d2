"""The Transformer's side of continuous batching (`search/continuous.py`): its cache of the
live sentences, whose rows are at different steps of their own sentences.

The cache (`TransformerSlots`), which only this module reads and reshapes:
* "self": the rows' self-attention keys/values {"layer_{l}": {"k", "v": [N, H, M, d]}},
  N = sentences x K beams, one fixed-size buffer of M positions written at one global
  position g for every row; a sentence that joined at g0 is at its own step t = g - g0 and
  attends to positions g0..g only (the others get t2t's LARGE_NEGATIVE bias, an exact zero
  in the softmax).
* "memory", "encdec_bias": each sentence's encoder keys/values per decoder layer
  {"k", "v": [n, H, L, d]} (read untiled by its K beams) and float32 [n, 1, 1, L]: computed
  when it joins, among sentences of its own length (no padding), then padded into the
  rows' longest input L with masked positions.
* "position": g, int32 scalar; "input_lengths": each sentence's input length, int32 [n].
When sentences leave, the buffer is cut to the positions the live rows use (from the oldest
one's start, shifted to position 0) and the memory to their longest input; when g reaches
M, the buffer is shifted left likewise (compaction) or M grows.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from t2t_lite import hparams_support
from t2t_lite.layers import common_attention
from t2t_lite.search.interface import Decoder, own_shapes
from t2t_lite.utils import precision

# The buffer spans a multiple of this many positions (fewer shapes; fewer, larger copies).
CACHE_SPAN_STEP = 16


def refusal(hparams) -> str | None:
    """Why a Transformer with these hparams cannot decode in slots, or None when it can."""
    relative = hparams_support.hparam(hparams, "self_attention_type") != "dot_product"
    if relative or hparams.pos not in ("timing", "none", None):
        return "relative self-attention or positions other than timing"
    return None


def slot_decoding(model, beam_size: int) -> TransformerSlots | None:
    """`model`'s side of continuous batching with `beam_size` rows per sentence, or None
    when it cannot decode in slots (relative self-attention, positions other than t2t's
    timing signal)."""
    if refusal(model.hparams):
        return None
    return TransformerSlots(model, beam_size)


def cache_span(positions: int) -> int:
    """The buffer positions M to hold `positions`: the next multiple of CACHE_SPAN_STEP.
    Every new M is a new shape for the step's kernels (oneDNN caches a primitive per
    shape), so M takes one value in CACHE_SPAN_STEP; the positions past g are masked like
    those before a row's start."""
    return -(-positions // CACHE_SPAN_STEP) * CACHE_SPAN_STEP


def _pad_axis(tensor: tf.Tensor, axis: int, size, value: float = 0) -> tf.Tensor:
    """`tensor` padded at the end of `axis` to `size` (int or int32 scalar) with `value`."""
    known = tensor.shape[axis]
    if isinstance(size, int) and known is not None:
        # Known sizes (the host's calls between steps): no op for the padding's size, and
        # none at all when there is nothing to pad.
        if size <= known:
            return tensor
        extra = size - known
    else:
        extra = size - tf.shape(tensor)[axis]
    paddings = [[0, 0]] * tensor.shape.rank
    paddings[axis] = [0, extra]
    return tf.pad(tensor, paddings, constant_values=tf.constant(value, tensor.dtype))


def _spec(tensor: tf.Tensor, *free: int) -> tf.TensorSpec:
    """The spec of `tensor` with axis 0 and the `free` axes of any size."""
    shape = [None if axis == 0 or axis in free else size
             for axis, size in enumerate(tensor.shape.as_list())]
    return tf.TensorSpec(shape, tensor.dtype)


class TransformerSlots:
    """The cache of continuous batching (see the module docstring), a
    `search.interface.SlotDecoding`.

    Args:
      model: a Transformer that can decode in slots (`refusal`).
      beam_size: K, the rows per sentence.
    """

    def __init__(self, model, beam_size: int):
        self.model = model
        self.beam_size = int(beam_size)

    def empty(self, room) -> dict:
        """See `SlotDecoding.empty` (inside a traced function)."""
        memory, encdec_bias = self._encode(tf.zeros([0, 1], tf.int32), 0)
        return {"self": self.model.init_decode_cache(0, room), "memory": memory,
                "encdec_bias": encdec_bias, "position": tf.constant(0),
                "input_lengths": tf.zeros([0], tf.int32)}

    def spec(self, cache: dict) -> dict:
        """See `SlotDecoding.spec`: rows, buffer positions (M) and input length (L) vary."""
        return {"self": tf.nest.map_structure(lambda c: _spec(c, 2), cache["self"]),
                "memory": tf.nest.map_structure(lambda c: _spec(c, 2), cache["memory"]),
                "encdec_bias": _spec(cache["encdec_bias"], 3),
                "position": tf.TensorSpec([], tf.int32),
                "input_lengths": tf.TensorSpec([None], tf.int32)}

    def _encode(self, inputs, target_space_id):
        model = self.model
        encoder_output, encdec_bias = model.encode(inputs, target_space_id, training=False,
                                                   matrices=model.modality.matrices())
        return model.body.decoder.encdec_memory_kv(encoder_output), encdec_bias

    def admit(self, cache: dict, inputs: tf.Tensor, target_space_id) -> dict:
        """See `SlotDecoding.admit`: the sentences encoded, their memory and the rows'
        padded to the longer length (masked), zero keys/values of the buffer's size."""
        memory, encdec_bias = self._encode(inputs, target_space_id)
        width = tf.maximum(tf.shape(encdec_bias)[3], tf.shape(cache["encdec_bias"])[3])

        def padded(memory, encdec_bias):
            return ([{name: _pad_axis(layer[name], 2, width) for name in layer}
                     for layer in memory],
                    _pad_axis(encdec_bias, 3, width, common_attention.LARGE_NEGATIVE))

        rows = tf.shape(inputs)[0]
        positions = tf.shape(next(iter(cache["self"].values()))["k"])[2]
        new = dict(zip(("memory", "encdec_bias"), padded(memory, encdec_bias)),
                   self=self.model.init_decode_cache(rows * self.beam_size, positions),
                   input_lengths=tf.fill([rows], tf.shape(inputs)[1]))
        old = dict(zip(("memory", "encdec_bias"),
                       padded(cache["memory"], cache["encdec_bias"])),
                   self=cache["self"], input_lengths=cache["input_lengths"])
        joined = tf.nest.map_structure(lambda a, b: tf.concat([a, b], axis=0), old, new)
        return dict(joined, position=cache["position"])

    def decoder(self, cache: dict, max_steps, float32_logits: bool) -> Decoder:
        """See `SlotDecoding.decoder` (inside the traced loop): the weights are read once,
        the timing signal's table made once for steps below `max_steps`."""
        model = self.model
        table = None
        if model.hparams.pos == "timing":
            # Row p is the same whatever the table's length (get_timing_signal_1d).
            table = common_attention.get_timing_signal_1d(max_steps, model.hidden_size)
        matrices = model.modality.matrices()
        decoder_weights = precision.weights_read_once(model.body.decoder)
        matrices = dict(matrices, softmax=tf.cast(matrices["softmax"],
                                                  model.body.decoder.compute_dtype))

        def step(ids, t, cache):
            g = cache["position"]
            first = g - t  # [N]: where each row's step 0 is in the buffer
            x = model.modality.bottom(ids, "targets", matrices)
            x *= tf.cast(t > 0, x.dtype)[:, None, None]  # GO at a row's step 0
            if table is not None:
                x += tf.cast(tf.gather(table[0], t)[:, None, :], x.dtype)
            slots = tf.range(tf.shape(next(iter(cache["self"].values()))["k"])[2])
            valid = tf.logical_and(slots[None, :] >= first[:, None], slots[None, :] <= g)
            bias = tf.where(valid, 0.0, common_attention.LARGE_NEGATIVE)[:, None, None, :]
            with decoder_weights():
                x, keys_values = model.body.decoder(
                    x, None, bias, cache["encdec_bias"], memory_kv=cache["memory"],
                    cache=cache["self"], decode_step=g, training=False)
            logits = model.modality.top(x, matrices)[:, 0, :]
            logits = tf.cast(logits, tf.float32) if float32_logits else logits
            return logits, dict(cache, self=keys_values, position=g + 1)

        def reorder(cache, rows):
            return dict(cache, self=tf.nest.map_structure(lambda c: tf.gather(c, rows, axis=0),
                                                          cache["self"]))

        return Decoder(step, cache, reorder, own_shapes)

    def make_room(self, cache: dict, steps: np.ndarray, room: int) -> dict:
        """See `SlotDecoding.make_room`: the buffer shifted left by the oldest row's start,
        or grown, so that g + room <= M (eagerly)."""
        g = int(cache["position"])
        capacity = int(next(iter(cache["self"].values()))["k"].shape[2])
        if g + room <= capacity:
            return cache
        shift = g - int(steps.max())
        keys_values = cache["self"]
        if shift > 0:
            # Positions before a row's start are masked: what rolls round is never read.
            keys_values = tf.nest.map_structure(lambda c: tf.roll(c, -shift, axis=2),
                                                keys_values)
            g -= shift
        if g + room > capacity:
            keys_values = tf.nest.map_structure(
                lambda c: _pad_axis(c, 2, cache_span(g + room)), keys_values)
        return dict(cache, self=keys_values, position=tf.constant(g))

    def keep(self, cache: dict, rows: np.ndarray, steps: np.ndarray, room: int) -> dict:
        """See `SlotDecoding.keep`: the rows of the sentences `rows`, the buffer cut to the
        positions they use (from the oldest one's start, shifted to 0) and the memory to
        their longest input, so that a step's cost follows M and L (eagerly)."""
        beam_rows = (rows[:, None] * self.beam_size + np.arange(self.beam_size)).reshape(-1)
        g = int(cache["position"])
        shift = g - int(steps.max())
        capacity = cache_span(g - shift + room)
        keys_values = tf.nest.map_structure(
            lambda c: _pad_axis(tf.gather(c, beam_rows)[:, :, shift:g], 2, capacity),
            cache["self"])
        input_lengths = np.asarray(cache["input_lengths"])[rows]
        width = int(input_lengths.max())
        memory = [{name: tf.gather(layer[name], rows)[:, :, :width] for name in layer}
                  for layer in cache["memory"]]
        encdec_bias = tf.gather(cache["encdec_bias"], rows)[..., :width]
        return {"self": keys_values, "memory": memory, "encdec_bias": encdec_bias,
                "position": tf.constant(g - shift), "input_lengths": tf.constant(input_lengths)}
