"""tensor2tensor's attention pieces: sinusoid timing signal, attention biases and multi-head
dot-product attention with an incremental-decoding key/value cache.

Layouts: activations `[B, L, D]`; per-head tensors `[B, H, L, D/H]` (t2t's split-heads
layout); biases broadcast to logits `[B, H, Lq, Lk]` and are additive (`-1e9` = masked), as in
t2t, so padded query rows stay finite.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import keras
import tensorflow as tf

from t2t_lite.layers import common_layers, fused_ops
from t2t_lite.utils import validation

# Additive bias for masked positions (t2t's -1e9; exp underflows to exactly 0 in float32).
LARGE_NEGATIVE = -1e9


def get_timing_signal_1d(
    length,
    channels: int,
    min_timescale: float = 1.0,
    max_timescale: float = 1.0e4,
    start_index=0,
) -> tf.Tensor:
    """t2t's sinusoid timing signal: first half sines, second half cosines (not interleaved).

    For `n = channels // 2` timescales `inv[i] = min_timescale * exp(-i * ln(max/min) /
    max(n - 1, 1))`, row p is `[sin(p * inv), cos(p * inv)]`, plus one zero channel when
    `channels` is odd.

    Args:
      length: number of positions L (int or scalar tensor).
      channels: number of channels C.
      min_timescale: smallest timescale.
      max_timescale: largest timescale.
      start_index: position of the first row (int or scalar tensor).

    Returns:
      float32 [1, L, C].
    """
    position = tf.cast(tf.range(length) + start_index, tf.float32)
    num_timescales = channels // 2
    log_timescale_increment = math.log(float(max_timescale) / float(min_timescale)) / max(
        float(num_timescales) - 1, 1
    )
    inv_timescales = min_timescale * tf.exp(
        tf.cast(tf.range(num_timescales), tf.float32) * -log_timescale_increment
    )
    scaled_time = tf.expand_dims(position, 1) * tf.expand_dims(inv_timescales, 0)
    signal = tf.concat([tf.sin(scaled_time), tf.cos(scaled_time)], axis=1)
    signal = tf.pad(signal, [[0, 0], [0, channels % 2]])
    return tf.reshape(signal, [1, length, channels])


def add_timing_signal_1d(
    x: tf.Tensor,
    min_timescale: float = 1.0,
    max_timescale: float = 1.0e4,
    start_index=0,
) -> tf.Tensor:
    """Adds `get_timing_signal_1d` to x.

    Args:
      x: [B, L, C].
      min_timescale, max_timescale, start_index: as in `get_timing_signal_1d`.

    Returns:
      [B, L, C].
    """
    length = tf.shape(x)[1]
    channels = x.shape[-1]
    signal = get_timing_signal_1d(length, channels, min_timescale, max_timescale, start_index)
    return x + tf.cast(signal, x.dtype)


def add_timing_signal_1d_given_position(
    x: tf.Tensor,
    position: tf.Tensor,
    min_timescale: float = 1.0,
    max_timescale: float = 1.0e4,
) -> tf.Tensor:
    """Adds the timing signal of explicit positions (t2t's, for packed examples whose
    positions restart at 0 in every segment).

    Args:
      x: [B, L, C].
      position: int [B, L] position of each element within its own example.
      min_timescale, max_timescale: as in `get_timing_signal_1d`.

    Returns:
      [B, L, C].
    """
    channels = x.shape[-1]
    num_timescales = channels // 2
    log_timescale_increment = math.log(float(max_timescale) / float(min_timescale)) / (
        float(num_timescales) - 1)
    inv_timescales = min_timescale * tf.exp(
        tf.cast(tf.range(num_timescales), tf.float32) * -log_timescale_increment
    )
    scaled_time = tf.cast(position, tf.float32)[:, :, tf.newaxis] * inv_timescales
    signal = tf.concat([tf.sin(scaled_time), tf.cos(scaled_time)], axis=2)
    signal = tf.pad(signal, [[0, 0], [0, 0], [0, channels % 2]])
    return x + tf.cast(signal, x.dtype)


def attention_bias_same_segment(query_segment_id: tf.Tensor,
                                memory_segment_id: tf.Tensor) -> tf.Tensor:
    """Bias that keeps the examples packed into one row from attending to each other.

    Args:
      query_segment_id: int [B, Lq] (1-based example number; 0 = padding).
      memory_segment_id: int [B, Lm].

    Returns:
      float32 [B, 1, Lq, Lm]: `-1e9` where the segments differ, 0 where they are equal.
    """
    different = tf.not_equal(query_segment_id[:, :, tf.newaxis],
                             memory_segment_id[:, tf.newaxis, :])
    return (tf.cast(different, tf.float32) * LARGE_NEGATIVE)[:, tf.newaxis]


def attention_bias_lower_triangle(length) -> tf.Tensor:
    """Causal bias: `-1e9` strictly above the diagonal, 0 elsewhere.

    Args:
      length: int or scalar tensor L.

    Returns:
      float32 [1, 1, L, L].
    """
    positions = tf.range(length)
    future = tf.expand_dims(positions, 1) < tf.expand_dims(positions, 0)
    bias = tf.cast(future, tf.float32) * LARGE_NEGATIVE
    return tf.reshape(bias, [1, 1, length, length])


def attention_bias_ignore_padding(memory_padding: tf.Tensor) -> tf.Tensor:
    """Bias that masks padded memory positions.

    Args:
      memory_padding: float [B, L]; 1.0 at padding.

    Returns:
      float32 [B, 1, 1, L]: `-1e9` at padding, 0 elsewhere.
    """
    bias = tf.cast(memory_padding, tf.float32) * LARGE_NEGATIVE
    return bias[:, tf.newaxis, tf.newaxis, :]


def embedding_to_padding(emb: tf.Tensor) -> tf.Tensor:
    """Padding mask from embeddings: 1.0 where the whole embedding vector is 0.

    Args:
      emb: [B, L, D].

    Returns:
      float32 [B, L].
    """
    emb_sum = tf.reduce_sum(tf.abs(emb), axis=-1)
    return tf.cast(tf.equal(emb_sum, 0.0), tf.float32)


def split_heads(x: tf.Tensor, num_heads: int) -> tf.Tensor:
    """[B, L, D] -> [B, H, L, D/H]; head j holds channels j*D/H .. (j+1)*D/H - 1.

    Args:
      x: [B, L, D].
      num_heads: H.

    Returns:
      [B, H, L, D/H].
    """
    depth = x.shape[-1]
    shape = tf.shape(x)
    x = tf.reshape(x, [shape[0], shape[1], num_heads, depth // num_heads])
    return tf.transpose(x, [0, 2, 1, 3])


def combine_heads(x: tf.Tensor) -> tf.Tensor:
    """Inverse of `split_heads`: [B, H, L, D/H] -> [B, L, D].

    Args:
      x: [B, H, L, D/H].

    Returns:
      [B, L, D].
    """
    num_heads, depth = x.shape[1], x.shape[3]
    x = tf.transpose(x, [0, 2, 1, 3])
    shape = tf.shape(x)
    return tf.reshape(x, [shape[0], shape[1], num_heads * depth])


class MultiheadAttention(keras.layers.Layer):
    """t2t's `multihead_attention` (dot_product) as a Keras layer.

    Dense projections q, k, v and output_transform have no bias; q is scaled by
    `(key_depth / H) ** -0.5` before `q kᵀ`; the bias is added to the logits, softmax over keys,
    dropout (attention_dropout) on the weights, then the weighted sum of values.

    Incremental decoding:
    * Self-attention, growing cache (t2t's `_fast_decode`): pass `cache = {"k", "v"}`
      `[B, H, T, Dk/H]` holding the T positions decoded so far (T = 0 at first) and no
      `decode_step`; the new position's key/value (query length 1) are appended and the
      query attends over all T + 1 positions (no bias needed). A tf.while_loop carrying it
      needs shape invariants.
    * Self-attention, fixed-size cache (static shapes, for XLA): pass `cache`
      preallocated `[B, H, M, Dk/H]` (zeros) and `decode_step`; the new key/value are
      written into slot `decode_step` and the query attends over all M slots, so the
      caller's bias must mask the slots after `decode_step`.
    * Encoder-decoder attention: pass `memory_kv = compute_memory_kv(memory)`, projected once,
      instead of `memory`. The query may hold K rows per memory row (beam search's
      b * K + k layout; `bias` then stays [B, 1, 1, Lm]): each memory row is read once for
      its K beams.

    Args:
      num_heads: H.
      hidden_size: D (input and output depth).
      key_depth: total key depth (0 -> D; hparams.attention_key_channels).
      value_depth: total value depth (0 -> D; hparams.attention_value_channels).
      dropout: attention weight dropout rate.
      dropout_broadcast_dims: hparams.attention_dropout_broadcast_dims (over [B, H, Lq, Lk]).
      kernel_initializer: initializer of the four kernels.
      fused: softmax + dropout + matmul by `fused_ops.softmax_dropout_matmul` when dropping
        weights with a stateless mask (hparams.use_fused_kernels); False: the plain ops, the
        same mask.
      name: t2t scope "multihead_attention".
    """

    def __init__(
        self,
        num_heads: int,
        hidden_size: int,
        key_depth: int = 0,
        value_depth: int = 0,
        dropout: float = 0.0,
        dropout_broadcast_dims: str | Sequence[int] = (),
        kernel_initializer="glorot_uniform",
        fused: bool = True,
        name: str = "multihead_attention",
        **kwargs,
    ):
        super().__init__(name=name, **kwargs)
        self.fused = bool(fused)
        self.num_heads = int(num_heads)
        self.hidden_size = int(hidden_size)
        validation.check_attention_depths(self.hidden_size, self.num_heads, int(key_depth),
                                          int(value_depth))
        self.key_depth = int(key_depth or hidden_size)
        self.value_depth = int(value_depth or hidden_size)
        self.dropout_rate = float(dropout)
        self.dropout_broadcast_dims = dropout_broadcast_dims
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

        def dense(units: int, name: str) -> keras.layers.Dense:
            return keras.layers.Dense(
                units, use_bias=False,
                kernel_initializer=common_layers.fresh_initializer(self.kernel_initializer),
                name=name,
            )

        # Dense layers hold the four kernels (only `.kernel` is used, in fused matmuls):
        # sub-layers named q, k, v, output_transform are what give t2t's checkpoint names
        # ".../multihead_attention/q/kernel"; Keras 3 weight names cannot contain "/".
        self.q = dense(self.key_depth, "q")
        self.k = dense(self.key_depth, "k")
        self.v = dense(self.value_depth, "v")
        self.output_transform = dense(self.hidden_size, "output_transform")
        self.dropout = common_layers.Dropout(
            self.dropout_rate, dropout_broadcast_dims, name="attention_dropout"
        )

    def build(self, query_shape: Sequence[int | None] | None = None) -> None:
        shape = (None, None, self.hidden_size)
        for layer in (self.q, self.k, self.v):
            layer.build(shape)
        self.output_transform.build((None, None, self.value_depth))

    def _project(self, x: tf.Tensor, *layers: keras.layers.Dense) -> list[tf.Tensor]:
        """x · [W_1 | W_2 | ...] as one matmul, split back per layer (fewer, larger matmuls;
        the same values as separate projections)."""
        kernels = [layer.kernel for layer in layers]
        kernel = kernels[0] if len(kernels) == 1 else tf.concat(kernels, axis=1)
        y = common_layers.matmul_last_axis(x, kernel)
        if len(layers) == 1:
            return [y]
        return tf.split(y, [layer.units for layer in layers], axis=-1)

    def compute_memory_kv(self, memory: tf.Tensor) -> dict[str, tf.Tensor]:
        """Projects memory once into per-head keys and values (the enc-dec decode cache).

        Args:
          memory: [B, Lm, D] (encoder output).

        Returns:
          {"k": [B, H, Lm, Dk/H], "v": [B, H, Lm, Dv/H]}.
        """
        k, v = self._project(memory, self.k, self.v)
        return {"k": split_heads(k, self.num_heads), "v": split_heads(v, self.num_heads)}

    def call(
        self,
        query: tf.Tensor,
        memory: tf.Tensor | None = None,
        bias: tf.Tensor | None = None,
        memory_kv: dict[str, tf.Tensor] | None = None,
        cache: dict[str, tf.Tensor] | None = None,
        decode_step=None,
        training: bool | None = None,
        return_attention_scores: bool = False,
    ):
        """Multi-head attention of `query` over `memory` (or over itself).

        Args:
          query: [B, Lq, D].
          memory: [B, Lm, D], or None for self-attention.
          bias: additive bias broadcastable to [B, H, Lq, Lk] (e.g. [1, 1, Lq, Lk] causal,
            [B, 1, 1, Lk] padding).
          memory_kv: {"k", "v"} from `compute_memory_kv`, replacing `memory`.
          cache: self-attention decode cache {"k", "v"} [B, H, T or M, D/H] (see class
            docstring).
          decode_step: int32 scalar, the slot written in a fixed-size cache; None appends
            to a growing cache.
          training: enables attention dropout.
          return_attention_scores: also return the attention weights (softmax output,
            before dropout), e.g. for pictures; not with a cache. The plain ops run then.

        Returns:
          [B, Lq, D]; with a cache, the tuple ([B, Lq, D], updated cache); with
          `return_attention_scores`, the tuple ([B, Lq, D], weights [B, H, Lq, Lk]).
        """
        if cache is not None and (memory is not None or memory_kv is not None):
            raise ValueError("a decode cache is for self-attention")
        if cache is not None and return_attention_scores:
            raise ValueError("return_attention_scores is for calls without a decode cache")
        if memory_kv is not None:
            (q,) = self._project(query, self.q)
            k, v = memory_kv["k"], memory_kv["v"]
        elif cache is not None:
            # Decoding one position: separate small matmuls; fusing would concatenate the
            # kernels again at every step.
            (q,), (k,), (v,) = (self._project(query, p) for p in (self.q, self.k, self.v))
        elif memory is None:
            q, k, v = self._project(query, self.q, self.k, self.v)
        else:
            (q,) = self._project(query, self.q)
            k, v = self._project(memory, self.k, self.v)
        if cache is not None and "slot_mask" in cache:
            y, cache = _attend_beam_slots(q, k, v, cache, self.num_heads,
                                          self.key_depth // self.num_heads)
            (y,) = self._project(y, self.output_transform)
            return y, cache
        if cache is not None:
            k = _write_cache(cache["k"], split_heads(k, self.num_heads), decode_step)
            v = _write_cache(cache["v"], split_heads(v, self.num_heads), decode_step)
        # Keys/values are [B, Lk, H*d] when just projected, [B, H, Lk, d] from a cache. Heads
        # are split with explicit transposes and multiplied with BatchMatMul (t2t's form):
        # measured 25% faster forward + backward on CPU than the equivalent einsums.
        if cache is None and memory_kv is None:
            k, v = split_heads(k, self.num_heads), split_heads(v, self.num_heads)
        depth_per_head = self.key_depth // self.num_heads
        q = split_heads(q, self.num_heads) * tf.cast(depth_per_head**-0.5, q.dtype)
        if memory_kv is not None:
            # Beam search: the query rows are the K beams of each memory row (b * K + k).
            # They attend to their memory row's keys together ([K * Lq, d] x [d, Lm]), so
            # the memory is read once per batch element, not once per beam.
            queries_per_memory = tf.shape(q)[0] // tf.shape(k)[0]
            q = _group_beams(q, queries_per_memory)
        logits = tf.matmul(q, k, transpose_b=True)
        if bias is not None:
            logits += tf.cast(bias, logits.dtype)
        mask = None
        if self.fused and not return_attention_scores:
            mask = self.dropout.stateless_scaled_mask(logits, training)
        if mask is not None:
            x = fused_ops.softmax_dropout_matmul(logits, v, mask)
        else:
            weights = scores = tf.nn.softmax(logits)
            if memory_kv is not None:
                scores = _ungroup_beams(weights, queries_per_memory)
            weights = self.dropout(weights, training=training)
            x = tf.matmul(weights, v)
        if memory_kv is not None:
            x = _ungroup_beams(x, queries_per_memory)
        x = combine_heads(x)
        (y,) = self._project(x, self.output_transform)
        if return_attention_scores:
            return y, scores
        return y if cache is None else (y, {"k": k, "v": v})

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            hidden_size=self.hidden_size,
            key_depth=self.key_depth,
            value_depth=self.value_depth,
            dropout=self.dropout_rate,
            dropout_broadcast_dims=self.dropout_broadcast_dims,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            fused=self.fused,
        )
        return config


def _swap_axes_1_2(x: tf.Tensor) -> tf.Tensor:
    """[A, M, N, ...] -> [A, N, M, ...] as a gather over the merged M * N axis.

    For the small per-step tensors of decoding: oneDNN's Transpose costs ~50 us a call on
    them, a gather ~6 us (measured in a loop of 1,000 on [32, 4, 4, 32]); same values.
    """
    shape = tf.shape(x)
    m, n = shape[1], shape[2]
    out_index = tf.range(m * n)  # output (j, i) at j * M + i reads input (i, j) at i * N + j
    source = (out_index % m) * n + out_index // m
    merged = tf.reshape(x, tf.concat([[shape[0], m * n], shape[3:]], axis=0))
    y = tf.reshape(tf.gather(merged, source, axis=1),
                   tf.concat([[shape[0], n, m], shape[3:]], axis=0))
    y.set_shape([x.shape[0], x.shape[2], x.shape[1]] + x.shape[3:].as_list())
    return y


def _group_beams(x: tf.Tensor, beams) -> tf.Tensor:
    """[B * K, H, L, d] -> [B, H, K * L, d]: the K rows of each group become one row."""
    shape = tf.shape(x)
    x = tf.reshape(x, [shape[0] // beams, beams, shape[1], shape[2], shape[3]])
    x = _swap_axes_1_2(x)
    return tf.reshape(x, [shape[0] // beams, shape[1], beams * shape[2], shape[3]])


def _ungroup_beams(x: tf.Tensor, beams) -> tf.Tensor:
    """Inverse of `_group_beams`: [B, H, K * L, d] -> [B * K, H, L, d]."""
    shape = tf.shape(x)
    x = tf.reshape(x, [shape[0], shape[1], beams, shape[2] // beams, shape[3]])
    x = _swap_axes_1_2(x)
    return tf.reshape(x, [shape[0] * beams, shape[1], shape[2] // beams, shape[3]])


def _attend_beam_slots(q: tf.Tensor, k: tf.Tensor, v: tf.Tensor, cache: dict,
                       num_heads: int, depth_per_head: int) -> tuple[tf.Tensor, dict]:
    """Self-attention of one decode step over beam-slot storage that is never reordered.

    Beam search reorders its hypotheses every step; instead of copying every cache row to
    its new beam, each beam slot's keys/values stay where they were written, and a one-hot
    `slot_mask` (from the slots that beam search reorders with the hypotheses, a few ints)
    says which slot holds each earlier position of each hypothesis. The K queries of a
    sentence score all K slots' keys in one `[K, d] x [d, K * T]` matmul per head; the mask
    keeps each hypothesis' own history (exact: one term, the others exact zeros), and the
    weights go back through the same mask to the values.

    The storage is in two parts so that a step does not copy all earlier positions (a
    growing tensor is copied whenever it grows): "settled" positions, grown a block at a
    time by `settle_beam_slots`, and the "recent" ones since, to which the step appends.
    Scores and values are read from both parts.

    Args:
      q, k, v: [B * K, 1, D] the step's projected query (unscaled), key and value; row
        b * K + j is hypothesis j of sentence b.
      cache: {"k", "v": [B, H, K, S, d] settled storage (position s of slot j),
        "k_recent", "v_recent": [B, H, K, R, d] the positions S..S + R - 1, "slot_mask":
        [B, 1, K, K, S + R + 1] with 1 where hypothesis j's position t is in slot s (this
        step's position in the hypothesis' own slot)}.
      num_heads: H.
      depth_per_head: d of the keys, for the query scale.

    Returns:
      ([B * K, 1, H * d_v] attention output before the output transform, the cache with
      the step's keys/values appended to the recent part).
    """
    own = cache["slot_mask"]
    shape = tf.shape(cache["k"])
    batch, beams, settled = shape[0], shape[2], shape[3]

    def to_heads(x):  # [B * K, 1, H * d] -> [B, H, K, d]
        return _group_beams(split_heads(x, num_heads), beams)

    recent_keys = tf.concat([cache["k_recent"], to_heads(k)[:, :, :, tf.newaxis]], axis=3)
    recent_values = tf.concat([cache["v_recent"], to_heads(v)[:, :, :, tf.newaxis]], axis=3)
    recent = tf.shape(recent_keys)[3]
    q = to_heads(q) * tf.cast(depth_per_head**-0.5, q.dtype)  # [B, H, K, d]

    def scores(keys, length):  # [B, H, K, K, length]: query j against slot s, position t
        # The depth is given (not -1): a part may hold no positions.
        logits = tf.matmul(
            q, tf.reshape(keys, [batch, num_heads, beams * length, keys.shape[-1]]),
            transpose_b=True)
        return tf.reshape(logits, [batch, num_heads, beams, beams, length])

    all_logits = tf.concat([scores(cache["k"], settled), scores(recent_keys, recent)], axis=4)
    weights = tf.nn.softmax(tf.reduce_sum(all_logits * own, axis=3))  # [B, H, K, T]
    settled_weights, recent_weights = tf.split(weights[:, :, :, tf.newaxis, :] * own,
                                               tf.stack([settled, recent]), axis=4)

    def read(slot_weights, values, length):  # [B, H, K, d]
        return tf.matmul(tf.reshape(slot_weights, [batch, num_heads, beams, beams * length]),
                         tf.reshape(values, [batch, num_heads, beams * length,
                                             values.shape[-1]]))

    x = read(settled_weights, cache["v"], settled) + read(recent_weights, recent_values, recent)
    # [B, H, K, d] -> [B * K, 1, H * d] (combine_heads of the ungrouped rows).
    x = tf.reshape(_swap_axes_1_2(x), [batch * beams, 1, v.shape[-1]])
    return x, {"k": cache["k"], "v": cache["v"], "k_recent": recent_keys,
               "v_recent": recent_values, "slot_mask": own}


def settle_beam_slots(storage: dict, block: int) -> dict:
    """Moves the recent keys/values of beam-slot storage into the settled part once
    `block` positions have gathered there (for every layer together).

    Appending to one growing tensor copies all positions every step; appending to the
    recent part copies fewer than `block`, and the settled part is copied once per
    `block` steps.

    Args:
      storage: {layer: {"k", "v", "k_recent", "v_recent"}} as `_attend_beam_slots`
        returns them (without "slot_mask"); every layer has the same number of recent
        positions.
      block: the number of recent positions that triggers the move.

    Returns:
      The same structure, settled when full.
    """
    some_layer = next(iter(storage.values()))
    full = tf.equal(tf.shape(some_layer["k_recent"])[3], block)

    def settle():
        return {name: {"k": tf.concat([s["k"], s["k_recent"]], axis=3),
                       "v": tf.concat([s["v"], s["v_recent"]], axis=3),
                       "k_recent": s["k_recent"][:, :, :, :0],
                       "v_recent": s["v_recent"][:, :, :, :0]}
                for name, s in storage.items()}

    return tf.cond(full, settle, lambda: storage)


def beam_slot_mask(slots: tf.Tensor, beams: int, dtype) -> tf.Tensor:
    """The `slot_mask` of `_attend_beam_slots` from the slot of every position.

    Args:
      slots: int32 [B * K, T, 1], the beam slot holding position t of hypothesis row.
      beams: K.
      dtype: the attention's compute dtype.

    Returns:
      [B, 1, K, K, T]: 1 at [b, 0, j, s, t] where hypothesis j's position t is in slot s.
    """
    shape = tf.shape(slots)
    slots = tf.reshape(slots, [shape[0] // beams, beams, 1, shape[1]])
    own = tf.equal(slots, tf.range(beams)[tf.newaxis, tf.newaxis, :, tf.newaxis])
    return tf.cast(own, dtype)[:, tf.newaxis]


def _write_cache(cache: tf.Tensor, new: tf.Tensor, step) -> tf.Tensor:
    """Writes `new` [B, H, 1, d] into slot `step` of `cache` [B, H, M, d] (fixed shape), or
    appends it to `cache` [B, H, T, d] when `step` is None.

    Appending copies the T positions decoded so far. Writing a slot is a strided-slice
    update, a copy of the cache with the one slot replaced: on CPU several times cheaper
    than a select over all M slots, which reads the cache, the new values and a mask (the
    continuous search's beam step spent 26-38% of its op time in that select at 8-32
    sentences; bench/history/serving.md). XLA wants the update's position at compile time:
    there the select stays (XLA fuses it). `step` must be in [0, M).
    """
    if step is None:
        return tf.concat([cache, new], axis=2)
    if _in_xla_context():
        slots = tf.range(tf.shape(cache)[2])
        mask = tf.reshape(tf.equal(slots, step), [1, 1, -1, 1])
        return tf.where(mask, new, cache)
    begin = tf.stack([0, 0, tf.cast(step, tf.int32), 0])
    # Axes 0, 1 and 3 whole (begin_mask = end_mask = 0b1011), axis 2 the one slot.
    return tf.raw_ops.TensorStridedSliceUpdate(
        input=cache, begin=begin, end=begin + tf.constant([0, 0, 1, 0]),
        strides=tf.constant([1, 1, 1, 1]), value=new, begin_mask=0b1011, end_mask=0b1011)


def _in_xla_context() -> bool:
    """Whether the ops being built will be compiled by XLA (a jit_compile function)."""
    try:
        from tensorflow.python.ops import control_flow_util
    except ImportError:  # TensorFlow moved it: the select, which works everywhere
        return True
    return bool(control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()))


# ---------------------------------------------------------------------------------------------
# Relative position self-attention (Shaw et al. 2018): t2t's `dot_product_attention_relative`,
# i.e. hparams.self_attention_type="dot_product_relative".


def _generate_relative_positions_matrix(length_q, length_k, max_relative_position: int,
                                        cache: bool = False) -> tf.Tensor:
    """t2t's matrix of relative positions `key - query`, clipped to +-max_relative_position
    and shifted to be >= 0 (an index into 2 * max_relative_position + 1 embeddings).

    Args:
      length_q: Lq (int or scalar tensor); the queries are the last Lq of the Lk positions.
      length_k: Lk.
      max_relative_position: m > 0.
      cache: t2t's decoding branch: the one query is the last position (Lk - 1).

    Returns:
      int32 [Lq, Lk] (or [1, Lk] with `cache`) with values in [0, 2m].
    """
    if not cache:
        range_vec_k = tf.range(length_k)
        range_vec_q = range_vec_k[-length_q:]
        distance_mat = range_vec_k[tf.newaxis, :] - range_vec_q[:, tf.newaxis]
    else:
        distance_mat = tf.expand_dims(tf.range(-length_k + 1, 1, 1), 0)
    distance_mat_clipped = tf.clip_by_value(distance_mat, -max_relative_position,
                                            max_relative_position)
    # Shifted to >= 0: each integer still identifies one (clipped) relative position.
    return distance_mat_clipped + max_relative_position


def _relative_positions_matrix_at_step(length_k, step, max_relative_position: int) -> tf.Tensor:
    """The cache branch's row for a fixed-size cache: the query at position `step` against
    the key slots 0..Lk-1 (slots after `step` are masked by the caller's bias). For
    `step = Lk - 1` it equals `_generate_relative_positions_matrix(1, Lk, m, cache=True)`.

    Returns:
      int32 [1, Lk].
    """
    distance = tf.range(length_k)[tf.newaxis, :] - tf.cast(step, tf.int32)
    return tf.clip_by_value(distance, -max_relative_position,
                            max_relative_position) + max_relative_position


def _generate_relative_positions_embeddings(relative_positions_matrix: tf.Tensor,
                                            embeddings_table: tf.Tensor) -> tf.Tensor:
    """t2t's embedding of each relative position (the table, t2t's variable
    `<name>/embeddings`, is owned by a `RelativePositionEmbeddings` layer here).

    Args:
      relative_positions_matrix: int32 [Lq or 1, Lk] from `_generate_relative_positions_matrix`.
      embeddings_table: [2m + 1, d].

    Returns:
      [Lq or 1, Lk, d].
    """
    return tf.gather(embeddings_table, relative_positions_matrix)


def _relative_attention_inner(x: tf.Tensor, y: tf.Tensor, z: tf.Tensor,
                              transpose: bool) -> tf.Tensor:
    """t2t's relative attention inner product: `x yᵀ + x zᵀ` (transpose) or `x y + x z`,
    where z depends on the query position but not on batch or head, so x is regrouped by
    query position for one batched matmul with z.

    Args:
      x: [B, H, Lq, d] queries (transpose) or [B, H, Lq, Lk] weights.
      y: [B, H, Lk, d] keys or values.
      z: [Lq, Lk, d] relative embeddings.
      transpose: True for the logits (x has depth last), False for the output.

    Returns:
      [B, H, Lq, Lk] (transpose) or [B, H, Lq, d].
    """
    batch_size = tf.shape(x)[0]
    heads = x.shape[1]
    length = tf.shape(x)[2]
    xy_matmul = tf.matmul(x, y, transpose_b=transpose)
    x_t = tf.transpose(x, [2, 0, 1, 3])  # [Lq, B, H, *]
    x_t_r = tf.reshape(x_t, [length, heads * batch_size, -1])
    x_tz_matmul = tf.matmul(x_t_r, tf.cast(z, x.dtype), transpose_b=transpose)
    x_tz_matmul_r = tf.reshape(x_tz_matmul, [length, batch_size, heads, -1])
    x_tz_matmul_r_t = tf.transpose(x_tz_matmul_r, [1, 2, 0, 3])
    return xy_matmul + x_tz_matmul_r_t


def dot_product_attention_relative(
    q: tf.Tensor,
    k: tf.Tensor,
    v: tf.Tensor,
    bias: tf.Tensor | None,
    max_relative_position: int,
    keys_table: tf.Tensor,
    values_table: tf.Tensor,
    dropout: keras.layers.Layer | None = None,
    training: bool | None = None,
    cache: bool = False,
    decode_step=None,
) -> tuple[tf.Tensor, tf.Tensor]:
    """t2t's relative position-aware dot-product self-attention.

    `logits[i, j] = q_i · (k_j + a_K[clip(j - i)])`, softmax, then
    `out_i = sum_j w_ij (v_j + a_V[clip(j - i)])`, with the tables a_K, a_V of
    2m + 1 rows indexed by the clipped relative position. As in t2t the dropout on the
    weights has no broadcast dims (t2t passes none to this function).

    Args:
      q: [B, H, Lq, d] (already scaled by d ** -0.5); Lq = Lk, or 1 with `cache`.
      k: [B, H, Lk, d].
      v: [B, H, Lk, d] (the same per-head depth as the keys: t2t's tables have the keys').
      bias: additive bias broadcastable to [B, H, Lq, Lk], or None.
      max_relative_position: m > 0.
      keys_table, values_table: [2m + 1, d] (t2t's relative_positions_keys/embeddings,
        relative_positions_values/embeddings).
      dropout: a `common_layers.Dropout` for the weights (training only), or None.
      training: enables dropout.
      cache: decoding one position: the query is the last key position (t2t's cache branch).
      decode_step: with `cache`, the query's position in a fixed-size cache of Lk slots
        (t2t_lite's XLA decoder); None: the last position.

    Returns:
      (output [B, H, Lq, d], weights [B, H, Lq, Lk] before dropout).
    """
    if not max_relative_position:
        raise ValueError(f"max_relative_position ({max_relative_position}) should be > 0 when "
                         "using relative self attention")
    length_k = tf.shape(k)[2]
    if cache and decode_step is not None:
        positions = _relative_positions_matrix_at_step(length_k, decode_step,
                                                       max_relative_position)
    else:
        # t2t: without memory, the query length is the key length (self-attention).
        positions = _generate_relative_positions_matrix(length_k, length_k,
                                                        max_relative_position, cache=cache)
    relations_keys = _generate_relative_positions_embeddings(positions, keys_table)
    relations_values = _generate_relative_positions_embeddings(positions, values_table)
    logits = _relative_attention_inner(q, k, relations_keys, True)
    if bias is not None:
        logits += tf.cast(bias, logits.dtype)
    weights = tf.nn.softmax(logits)
    dropped = weights if dropout is None else dropout(weights, training=training)
    return _relative_attention_inner(dropped, v, relations_values, False), weights


class RelativePositionEmbeddings(keras.layers.Layer):
    """One table of relative position embeddings (t2t scope "relative_positions_keys" or
    "relative_positions_values", variable "embeddings").

    Args:
      max_relative_position: m; the table has 2m + 1 rows.
      depth: d, the per-head key depth.
      initializer: the model's default initializer (t2t's get_variable default).
    """

    def __init__(self, max_relative_position: int, depth: int, initializer, **kwargs):
        super().__init__(**kwargs)
        self.max_relative_position = int(max_relative_position)
        self.depth = int(depth)
        self.initializer = keras.initializers.get(initializer)

    def build(self, input_shape=None) -> None:
        self.embeddings = self.add_weight(
            name="embeddings", shape=(2 * self.max_relative_position + 1, self.depth),
            initializer=common_layers.fresh_initializer(self.initializer))

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(max_relative_position=self.max_relative_position, depth=self.depth,
                      initializer=keras.initializers.serialize(self.initializer))
        return config


class MultiheadAttentionRelative(MultiheadAttention):
    """t2t's `multihead_attention` with attention_type="dot_product_relative": the q, k, v
    and output projections of `MultiheadAttention`, and `dot_product_attention_relative`
    with two tables [2m + 1, Dk/H] under ".../multihead_attention/
    dot_product_attention_relative/relative_positions_{keys,values}/embeddings".

    Self-attention only (t2t uses it for encoder and decoder self-attention). Decoding
    caches: a growing cache (t2t's, no `decode_step`) or a fixed-size one with `decode_step`
    as in `MultiheadAttention`; not the beam-slot storage (beam search reorders a growing
    cache instead).

    Args:
      num_heads, hidden_size, key_depth, value_depth, dropout, kernel_initializer, name: as
        `MultiheadAttention` (t2t's relative attention has no dropout broadcast dims and no
        fused kernel).
      max_relative_position: m > 0 (hparams.max_relative_position).
    """

    def __init__(self, num_heads: int, hidden_size: int, max_relative_position: int,
                 key_depth: int = 0, value_depth: int = 0, dropout: float = 0.0,
                 kernel_initializer="glorot_uniform", name: str = "multihead_attention",
                 **kwargs):
        kwargs.pop("dropout_broadcast_dims", None)
        kwargs.pop("fused", None)
        super().__init__(num_heads, hidden_size, key_depth=key_depth, value_depth=value_depth,
                         dropout=dropout, dropout_broadcast_dims=(),
                         kernel_initializer=kernel_initializer, fused=False, name=name,
                         **kwargs)
        if int(max_relative_position) <= 0:
            raise ValueError(
                f"hparams.max_relative_position={max_relative_position} must be > 0 with "
                "self_attention_type=dot_product_relative")
        if self.key_depth != self.value_depth:
            # t2t builds both tables with the keys' depth; other value depths fail there.
            raise ValueError(
                "self_attention_type=dot_product_relative needs attention_key_channels == "
                f"attention_value_channels (got {self.key_depth} and {self.value_depth})")
        self.max_relative_position = int(max_relative_position)
        depth = self.key_depth // self.num_heads
        self.relative_positions_keys = RelativePositionEmbeddings(
            self.max_relative_position, depth, self.kernel_initializer,
            name="relative_positions_keys")
        self.relative_positions_values = RelativePositionEmbeddings(
            self.max_relative_position, depth, self.kernel_initializer,
            name="relative_positions_values")

    def build(self, query_shape: Sequence[int | None] | None = None) -> None:
        super().build(query_shape)
        # t2t's scope of the tables inside multihead_attention.
        with keras.name_scope("dot_product_attention_relative"):
            self.relative_positions_keys.build()
            self.relative_positions_values.build()

    def call(self, query: tf.Tensor, memory: tf.Tensor | None = None,
             bias: tf.Tensor | None = None, memory_kv: dict[str, tf.Tensor] | None = None,
             cache: dict[str, tf.Tensor] | None = None, decode_step=None,
             training: bool | None = None, return_attention_scores: bool = False):
        """Relative self-attention of `query` over itself.

        Args:
          query: [B, L, D] ([B, 1, D] with a cache).
          memory, memory_kv: must be None (self-attention only).
          bias: additive bias broadcastable to [B, H, L, L] ([1, 1, 1, M] for a fixed-size
            cache, None for a growing one).
          cache: {"k", "v"} [B, H, T or M, D/H] decode cache (see `MultiheadAttention`).
          decode_step: int32 scalar slot of a fixed-size cache; None appends.
          training: enables dropout.
          return_attention_scores: also return the weights [B, H, L, L] (not with a cache).

        Returns:
          [B, L, D]; with a cache ([B, 1, D], updated cache); with
          `return_attention_scores` ([B, L, D], weights).
        """
        if memory is not None or memory_kv is not None:
            raise ValueError("dot_product_relative attention is for self-attention only")
        if cache is not None and ("slot_mask" in cache or return_attention_scores):
            raise ValueError("relative attention decodes with a growing or fixed-size cache "
                             "and returns no attention scores with one")
        if cache is not None:
            (q,), (k,), (v,) = (self._project(query, p) for p in (self.q, self.k, self.v))
            k = _write_cache(cache["k"], split_heads(k, self.num_heads), decode_step)
            v = _write_cache(cache["v"], split_heads(v, self.num_heads), decode_step)
        else:
            q, k, v = self._project(query, self.q, self.k, self.v)
            k, v = split_heads(k, self.num_heads), split_heads(v, self.num_heads)
        depth_per_head = self.key_depth // self.num_heads
        q = split_heads(q, self.num_heads) * tf.cast(depth_per_head**-0.5, q.dtype)
        x, weights = dot_product_attention_relative(
            q, k, v, bias, self.max_relative_position,
            self.relative_positions_keys.embeddings, self.relative_positions_values.embeddings,
            dropout=self.dropout, training=training, cache=cache is not None,
            decode_step=decode_step)
        (y,) = self._project(combine_heads(x), self.output_transform)
        if return_attention_scores:
            return y, weights
        return y if cache is None else (y, {"k": k, "v": v})

    def get_config(self) -> dict:
        config = super().get_config()
        config.pop("dropout_broadcast_dims", None)
        config.pop("fused", None)
        config["max_relative_position"] = self.max_relative_position
        return config
