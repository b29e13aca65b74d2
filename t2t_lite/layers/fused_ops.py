"""The hand-written kernels of the training step, in one place: the stateless dropout mask
(a keyed integer hash compiled by XLA), and forward passes with hand-written backward
passes (`tf.custom_gradient`) for layer norm, relu + dropout, attention softmax + dropout +
matmul and the chunked softmax cross-entropy.

Each kernel computes what a few plain TensorFlow ops compute, with the same forward values
(the loss: to float rounding), and a backward pass that keeps less for the gradient and runs
fewer ops (tuned on CPU; see bench/README.md, "Where the step goes"). The layers choose them
with an explicit argument, `fused` (hparams.use_fused_kernels, t2t_lite's own hparam, True by
default); with it off they run the plain ops and autodiff differentiates them, so a NaN or a
slow step can be checked against plain TensorFlow with `--hparams=use_fused_kernels=false`.

The dropout mask is drawn by `stateless_scaled_mask` on both paths: it decides which units
are dropped (the model's randomness, like its seeds), not how a gradient is computed, and the
same masks make the two paths comparable step for step.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable

import tensorflow as tf

from t2t_lite.layers import native_kernels
from t2t_lite.utils import onednn

# The dropout mask's random bits: a counter-based generator, a unit's 32 bits a keyed hash of
# its position. Two rounds of Wellons' "lowbias32" integer hash (multipliers below), each
# keyed by 32 bits of the seed, so that two seeds give unrelated masks rather than shifted
# copies of one sequence (one round of hash(i + key) would).
_HASH_MULTIPLIERS = (0x7FEB352D, 0x846CA68B)


def _grad_scope(name: str):
    """Decorator: a hand-written backward pass's ops under the name scope `name`.

    TensorFlow runs a custom gradient outside the forward pass's name scopes, so without it
    these ops get bare names ("mul_91") and a profile cannot tell which kernel they belong
    to (bench/bench_training.py --profile_steps sorts op time by name)."""

    def decorate(grad):
        def scoped(*args, **kwargs):
            with tf.name_scope(name):
                return grad(*args, **kwargs)

        return scoped

    return decorate


def stateless_dropout(
    x: tf.Tensor, rate: float, seed: tf.Tensor, noise_shape: tf.Tensor | None = None
) -> tf.Tensor:
    """Inverted dropout with a stateless mask (`stateless_scaled_mask`): one multiply.

    The same maths as `tf.nn.experimental.stateless_dropout` (kept units scaled by
    1 / (1 - rate), the rest zero; the mask a function of `seed` and the mask's shape alone),
    with cheaper random bits: on an AVX2 CPU TensorFlow's Philox kernel drew a
    `transformer_tiny` step's masks in 27-38 ms (of a ~460-510 ms step), the hashed mask in
    4.7-5.8 ms (bench/README.md, "The dropout mask from a hash").

    Args:
      x: any shape, floating.
      rate: drop probability in (0, 1).
      seed: int64 [2] stateless seed.
      noise_shape: int32 [rank] shape of the mask, broadcastable to x's shape (1 on shared
        axes); None: x's shape.

    Returns:
      x's shape and dtype.
    """
    mask = stateless_scaled_mask(tf.shape(x) if noise_shape is None else noise_shape, rate,
                                 seed, x.dtype)
    return x * mask


def stateless_scaled_mask(shape: tf.Tensor, rate: float, seed: tf.Tensor,
                          dtype: tf.DType = tf.float32) -> tf.Tensor:
    """The mask `stateless_dropout` multiplies by: `dtype` `shape`, 1 / (1 - rate) (rounded to
    `dtype`) where a unit is kept, 0 where it is dropped (probability `rate`).

    A unit is kept when its 32 random bits (`hashed_bits`, the counter being the unit's flat
    position) are >= round(rate * 2**32), so the drop probability is `rate` to within
    2**-33. The mask is computed by an XLA kernel (one fused loop) in rows of `_MASK_ROW`
    units, for a number of rows rounded up to one of 8 sizes per octave
    (`mask_kernel_rows`): a run's bucketed batch shapes then compile a few dozen kernels
    (~40 ms each on CPU), not one per shape, for at most 12.5% more units drawn; the
    padding's units are dropped. `hashed_bits` is the same function in plain ops, bit for
    bit (tested).

    Scaled values rather than a bool mask make dropout one multiply, t2t's own form
    (`tf.nn.dropout` multiplies by a float mask), where a bool mask takes a multiply and a
    select, forward and backward: the selects were ~5% of a `transformer_tiny` step's op
    time on an AVX512 CPU (bench/README.md, "Dropout as one multiply"). Kept units get
    `x * scale`, the same float as before; dropped ones `x * 0`.

    Args:
      shape: int32 [rank].
      rate: drop probability in (0, 1).
      seed: int32/int64 [2] stateless seed.
      dtype: the floating dtype of the tensor the mask applies to.
    """
    shape = tf.convert_to_tensor(shape, tf.int32)
    units = tf.reduce_prod(shape)
    threshold = tf.constant(min(round(rate * 2**32), 2**32 - 1), tf.uint32)
    scale = tf.cast(1.0 / (1.0 - rate), dtype)
    mask = _scaled_mask_kernel(mask_kernel_rows(units), seed, threshold, scale)
    return tf.reshape(tf.reshape(mask, [-1])[:units], shape)


def stateless_keep_mask(shape: tf.Tensor, rate: float, seed: tf.Tensor) -> tf.Tensor:
    """Which units `stateless_scaled_mask` keeps: bool `shape`, False with probability
    `rate` (the same kernel; for tests and benchmarks).

    Args:
      shape: int32 [rank].
      rate: drop probability in (0, 1).
      seed: int32/int64 [2] stateless seed.
    """
    return stateless_scaled_mask(shape, rate, seed) > 0


# The mask kernel's row length (units): its counter r * _MASK_ROW + c is the flat position.
_MASK_ROW = 1024


def mask_kernel_rows(units: tf.Tensor) -> tf.Tensor:
    """The rows of `_MASK_ROW` units the mask kernel draws for a mask of `units` units:
    int32 scalar, ceil(units / _MASK_ROW) rounded up to a multiple of 2**(e - 3) where
    2**e <= ceil(units / _MASK_ROW) (so one of 8 sizes per octave, at most 12.5% more)."""
    rows = (units + _MASK_ROW - 1) // _MASK_ROW
    exponent = tf.cast(tf.math.floor(tf.math.log(tf.cast(tf.maximum(rows, 1), tf.float32))
                                     / math.log(2.0)), tf.int32)
    step = tf.bitwise.left_shift(1, tf.maximum(exponent - 3, 0))
    return (rows + step - 1) // step * step


def hashed_bits(rows: tf.Tensor, cols: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """32 random bits per unit of a [rows, cols] mask: uint32 [rows, cols].

    Unit (r, c) is counter n = r * cols + c (mod 2**32), so the bits of a mask depend on its
    number of units and the seed, not on how the shape factors. With the seed's four 32-bit
    words k0..k3: h(h((n + k0) ^ k1) + k2) where h is lowbias32; k3 is not used.

    Args:
      rows: int32 scalar.
      cols: int32 scalar.
      seed: int32/int64 [2].
    """
    key = tf.reshape(tf.bitcast(tf.cast(seed, tf.int64), tf.uint32), [4])
    row_start = tf.bitcast(tf.range(rows, dtype=tf.int32), tf.uint32) * tf.bitcast(cols, tf.uint32)
    counter = row_start[:, None] + tf.bitcast(tf.range(cols, dtype=tf.int32), tf.uint32)[None, :]
    bits = _lowbias32(tf.bitwise.bitwise_xor(counter + key[0], key[1]))
    return _lowbias32(bits + key[2])


def _lowbias32(x: tf.Tensor) -> tf.Tensor:
    """Wellons' lowbias32 integer hash, elementwise on uint32 (a bijection of 2**32)."""
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, tf.constant(16, tf.uint32)))
    x = x * tf.constant(_HASH_MULTIPLIERS[0], tf.uint32)
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, tf.constant(15, tf.uint32)))
    x = x * tf.constant(_HASH_MULTIPLIERS[1], tf.uint32)
    return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, tf.constant(16, tf.uint32)))


@tf.function(jit_compile=True, autograph=False)
def _scaled_mask_kernel(rows, seed, threshold, scale):
    """scale's dtype [rows, _MASK_ROW]: `scale` where `hashed_bits` >= threshold, else 0; one
    XLA loop (`rows` is a compile-time constant: one compilation per number of rows and
    dtype)."""
    kept = hashed_bits(rows, tf.constant(_MASK_ROW), seed) >= threshold
    return tf.where(kept, scale, tf.zeros_like(scale))


def layer_norm(x: tf.Tensor, scale: tf.Tensor, bias: tf.Tensor, epsilon: float) -> tf.Tensor:
    """t2t's layer norm forward, op for op, with its gradient in closed form.

    Autodiff of the composed forward keeps x - mean, the squared differences and the scaled
    products of every norm for the backward pass (3 x [N, D] floats) and runs ~20 small ops;
    the closed form keeps the normalized x and 1/std only ([N, D] + [N, 1]) and runs ~11.
    With n = (x - mean) * rstd and g = dy * scale:
    dx = rstd * (g - mean(g) - n * mean(g * n)), dscale = sum(dy * n), dbias = sum(dy),
    the exact derivative of the biased-variance norm with epsilon inside the rsqrt.
    Where it can be built, the backward is one C++ op (`native_kernels.layer_norm_grad`,
    one pass over dy and n), else those ops; the two agree to float rounding.
    The plain counterpart is `common_layers.layer_norm_plain` (same forward ops).

    Args:
      x: [..., D] float32 (or float64).
      scale: [D] gain, x's dtype.
      bias: [D] offset, x's dtype.
      epsilon: added to the variance.

    Returns:
      [..., D]: `(x - mean) * rsqrt(var + epsilon) * scale + bias`.
    """

    @tf.custom_gradient
    def norm(x, scale, bias):
        mean = tf.reduce_mean(x, axis=-1, keepdims=True)
        variance = tf.reduce_mean(tf.math.squared_difference(x, mean), axis=-1, keepdims=True)
        rstd = tf.math.rsqrt(variance + tf.cast(epsilon, x.dtype))
        norm_x = (x - mean) * rstd

        @_grad_scope("layer_norm_grad")
        def grad(dy):
            native = native_kernels.layer_norm_grad(dy.dtype, placed_on=norm_x)
            if native is not None:
                # One pass over dy and norm_x instead of the eleven ops below.
                return native(dy, norm_x, rstd, scale)
            outer_axes = tf.range(tf.rank(dy) - 1)
            d_scale = tf.reduce_sum(dy * norm_x, axis=outer_axes)
            d_bias = tf.reduce_sum(dy, axis=outer_axes)
            g = dy * scale
            dx = rstd * (g - tf.reduce_mean(g, axis=-1, keepdims=True)
                         - norm_x * tf.reduce_mean(g * norm_x, axis=-1, keepdims=True))
            return dx, d_scale, d_bias

        return norm_x * scale + bias, grad

    return norm(x, scale, bias)


def relu_dropout(z: tf.Tensor, mask: tf.Tensor, rate: float) -> tf.Tensor:
    """`tf.nn.relu(z) * mask`, differentiated from the output alone.

    A unit of the output is non-zero exactly where the mask kept it and z > 0, which is
    where dout/dz = 1 / (1 - rate); elsewhere it is 0. So the backward pass needs only
    the output, which the next matmul keeps for its own gradient anyway: the relu
    output and the mask ([N, f] floats each) are not kept (~14 MB per FFN of a
    `transformer_tiny` batch). Same values and gradients as the two ops.

    Args:
      z: [..., f] pre-activations.
      mask: the dropout's scaled mask, broadcastable to z (`stateless_scaled_mask`, z's
        dtype).
      rate: dropout rate in (0, 1) (the mask's kept value is 1 / (1 - rate)).

    Returns:
      z's shape: dropout(relu(z)).
    """
    scale = 1.0 / (1.0 - rate)

    @tf.custom_gradient
    def fused(z):
        out = tf.nn.relu(z) * mask

        @_grad_scope("relu_dropout_grad")
        def grad(dout):
            # ReluGrad passes dout where out > 0 (one op; a compare and a select before),
            # then the kept units' scale: where(out > 0, dout * scale, 0), the same floats.
            return tf.raw_ops.ReluGrad(gradients=dout, features=out) * tf.cast(scale, dout.dtype)

        return out, grad

    return fused(z)


def softmax_dropout_matmul(logits: tf.Tensor, v: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
    """`matmul(softmax(logits) * mask, v)` whose backward pass keeps only the softmax
    weights and the dropout mask.

    Autodiff of the three ops keeps the weights (softmax gradient), the dropped weights
    (gradient of v) and the mask: 12 bytes per attention weight in float32. Here the dropped
    weights are recomputed from the other two in the backward pass (8 bytes kept). Same
    values as the three ops; the logits' gradient is one C++ op where it can be built
    (`native_kernels.softmax_dropout_grad`), else TensorFlow's softmax gradient ops: the
    same gradients to float rounding.

    Args:
      logits: [B, H, Lq, Lk] attention logits (bias added).
      v: [B, H, Lk, d] values.
      mask: the dropout's scaled mask, broadcastable to logits (`stateless_scaled_mask`,
        the logits' dtype).

    Returns:
      [B, H, Lq, d].
    """

    @tf.custom_gradient
    def fused(logits, v):
        weights = tf.nn.softmax(logits)
        out = tf.matmul(weights * mask, v)

        @_grad_scope("softmax_dropout_matmul_grad")
        def grad(dout):
            # Recomputed once the upstream gradient exists: without the dependency the
            # executor would run it during the forward pass and keep it (and Grappler
            # would merge it with the forward's multiply).
            with tf.control_dependencies([dout]):
                dropped = weights * mask
            d_dropped = tf.matmul(dout, v, adjoint_b=True)
            d_v = tf.matmul(dropped, dout, adjoint_a=True)
            native = native_kernels.softmax_dropout_grad(weights.dtype, placed_on=weights)
            if native is not None:
                # One pass instead of the four ops below. A mask of the weights' shape is
                # passed as it is (broadcast_to forwards it); a noise_shape mask is expanded.
                return native(d_dropped, weights,
                              tf.broadcast_to(mask, tf.shape(weights))), d_v
            d_weights = d_dropped * mask
            # Softmax's gradient, as TensorFlow's _SoftmaxGrad writes it.
            d_logits = (d_weights - tf.reduce_sum(d_weights * weights, -1, keepdims=True)) * weights
            return d_logits, d_v

        return out, grad

    return fused(logits, v)


def smoothing_targets(label_smoothing: float, vocab_size: int) -> tuple[float, float, float]:
    """t2t's label-smoothed targets (`common_layers.smoothing_cross_entropy`): the true
    class's probability, every other class's, and the entropy of that distribution
    (subtracted so that a perfect prediction has loss 0).

    Args:
      label_smoothing: eps in (0, 1).
      vocab_size: V.

    Returns:
      (confidence = 1 - eps, low_confidence = eps / (V - 1), normalizing constant).
    """
    confidence = 1.0 - label_smoothing
    low_confidence = (1.0 - confidence) / float(vocab_size - 1)
    normalizing = -(confidence * math.log(confidence)
                    + float(vocab_size - 1) * low_confidence * math.log(low_confidence + 1e-20))
    return confidence, low_confidence, normalizing


# A chunk's exp(logits) is used unshifted when every position's sum lies in [2**-60,
# 2**60]: no term overflowed (nor can the matmuls that read the terms), and the terms below
# float32's smallest normal (2**-126; flushed to zero where the CPU flushes denormals) add
# at most V * 2**-126 to a sum >= 2**-60, under 2**-40 of it for any V < 2**26.
_UNSHIFTED_SUM_RANGE = (2.0 ** -60, 2.0 ** 60)

# Vocabularies whose size is a multiple of this get vocab-major logits (`vocab_major_logits`).
VOCAB_MAJOR_MULTIPLE = 1024


def vocab_major_logits(vocab_size: int, cpu_flags: set[str] | frozenset[str] | None = None) -> bool:
    """Whether `softmax_cross_entropy` lays a chunk's logits out vocab-major ([V, chunk])
    rather than position-major ([chunk, V]) for this vocabulary size on this CPU.

    Measured (bench/bench_chunk_loss.py, oneDNN; bench/README.md "The chunk loss's layout"):
    on an AVX2 CPU, position-major, the matrix's gradient `x_chunkᵀ · e` reads [chunk, V]
    float32 rows whose stride is a multiple of 4 KB when V is a multiple of 1024, and ran at
    54-69 GFLOP/s there (D = 64-256) against 100-160 for V = 8000, 8085, 8704, 32000 and at
    D = 512; vocab-major avoids that product (1.10-1.45x the loss's speed for V = 4096,
    8192, 9216, 10240, 12288, 16384, 32768) but is 0.85-0.97x elsewhere, where its `eᵀ ·
    matrix` is the slower product. On an AVX512 CPU (oneDNN's AVX512 kernels) the 4 KB
    stride costs little and vocab-major was 0.93-1.00x position-major for V = 4096, 8085,
    8192, 16384 and 32768 (D = 128-512). So: vocab-major exactly where the stride is a
    multiple of 4 KB and the CPU has no AVX512. The two layouts give the same loss and
    gradients to float rounding.

    Args:
      vocab_size: V.
      cpu_flags: the CPU's /proc/cpuinfo flags; None: this machine's (none known: no
        AVX512 assumed).
    """
    if cpu_flags is None:
        cpu_flags = _this_cpu_flags()
    return vocab_size % VOCAB_MAJOR_MULTIPLE == 0 and "avx512f" not in cpu_flags


@functools.lru_cache(maxsize=1)
def _this_cpu_flags() -> frozenset[str]:
    return frozenset(onednn.cpu_info(onednn.read_cpuinfo())[1])


def _exp_and_sums(
    logits: tf.Tensor, axis: int, logits_again: Callable[[], tf.Tensor]
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """exp(logits - shift) of a chunk, each position's sum over the vocabulary `axis` and
    its log-sum-exp, in two passes over the chunk where it is safe.

    The usual shift is each position's maximum, which costs two more memory-bound passes
    (the maximum and the subtraction) over the chunk's [chunk, V] floats. A softmax does not
    depend on the shift, and a Transformer's logits are small (|logit| < ~30: layer-normed
    outputs times the embedding matrix), so the chunk is first exponentiated unshifted; only
    if a sum falls outside `_UNSHIFTED_SUM_RANGE` (an overflow to inf, all terms
    underflowing, or NaN) is the chunk redone shifted by its maxima, as `tf.nn.softmax`
    does, from logits computed again by `logits_again`. Both give the same p = e / s and
    lse to float rounding. The rare shifted path recomputes rather than keeps the logits so
    that the exp is their last reader and may write over them (TensorFlow forwards a
    buffer whose only reference is the op's input): one [chunk, V] tensor alive, not two.
    Position-major chunks on a CPU take the exp and its sums in one pass
    (`native_kernels.exp_sums`, where it can be built).

    Args:
      logits: float32 [positions, V] (axis 1) or [V, positions] (axis 0); read by nothing
        after this call.
      axis: the vocabulary's axis.
      logits_again: returns the same logits (called only on the shifted path).

    Returns:
      (e, s, lse): e of the logits' shape; s and lse with `axis` kept as 1; p = e / s and
      lse = log Σ_v exp(logits).
    """
    native = (native_kernels.exp_sums(logits.dtype, placed_on=logits)
              if axis in (-1, logits.shape.rank - 1) else None)
    if native is not None:
        # One pass with this CPU's vectors (TensorFlow's Exp and Sum: two passes).
        exp, sums = native(logits)
    else:
        exp = tf.exp(logits)
        sums = tf.reduce_sum(exp, axis=axis, keepdims=True)
    low, high = _UNSHIFTED_SUM_RANGE
    # NaN fails both comparisons, so a NaN position takes the shifted path too.
    in_range = tf.reduce_all(tf.logical_and(sums >= low, sums <= high))

    def shifted():
        again = logits_again()
        maxima = tf.reduce_max(again, axis=axis, keepdims=True)
        shifted_exp = tf.exp(again - maxima)
        shifted_sums = tf.reduce_sum(shifted_exp, axis=axis, keepdims=True)
        return shifted_exp, shifted_sums, maxima + tf.math.log(shifted_sums)

    return tf.cond(in_range, lambda: (exp, sums, tf.math.log(sums)), shifted)


def softmax_cross_entropy(
    x: tf.Tensor,
    matrix: tf.Tensor,
    labels: tf.Tensor,
    label_smoothing: float,
    chunk_size: int = 512,
    vocab_major: bool | None = None,
) -> tf.Tensor:
    """Summed (label-smoothed) cross-entropy of the logits `x · matrixᵀ`, never holding more
    than `chunk_size` positions' logits.

    The same loss as `common_layers.padded_cross_entropy(x @ matrixᵀ, labels, eps)[0]` (the
    plain path) for labels that are all non-padding, and the same gradients: the output is a
    sum, so its upstream gradient is one scalar g, and the gradients `g * dlogitsᵀ x` and
    `g * dlogits · matrix` can be accumulated chunk by chunk in the forward pass. The backward
    pass only scales them. The `[N, V]` logits and their gradient exist one chunk at a time
    (the batch's logits, softmax and its gradient would be ~450 MB for 3.4k tokens x 8k
    vocab; a chunk of 512 positions holds 16.5 MB), and no extra matmul.

    A chunk's logits are read by as few passes as possible (each pass over its [chunk, V]
    floats is memory-bound): `exp(logits)` and its sums s over the vocabulary, nothing else,
    where no position can overflow or underflow (`_exp_and_sums`; else the maxima are
    subtracted first). With q = low + (conf - low) one_hot(label) the
    logit gradient is `p - q = e / s - low - (conf - low) one_hot`, and its products are
    formed from the parts: `(p - q) · matrix = (e · matrix) / s - low Σ_v matrix_v - (conf -
    low) matrix[label]` and `xᵀ (p - q) = (x / s)ᵀ e - low Σ_i x_i - (conf - low) Σ_{i:
    label = v} x_i` (float32; in half precision p is formed and cast, as the matmuls' inputs
    must be of one dtype), so p, p - q and the one-hot entries never exist as [N, V]
    tensors. The loss is `-(low (Σ logits - V Σ lse) + (conf - low) Σ (logit_label - lse))`
    with lse = log s (max + log s where shifted), and Σ logits = (Σ_i x_i) · (Σ_v matrix_v).

    The chunk's logits are [chunk, V] (position-major: the matrix's gradient accumulated as
    `x_chunkᵀ · e`, [D, V], transposed once) or [V, chunk] (vocab-major: `matrix · x_chunkᵀ`,
    the matrix's gradient `e · x_chunk` in its own [V, D] layout, the gradient of x `eᵀ ·
    matrix`), whichever its matmuls run faster for this vocabulary size
    (`vocab_major_logits`). Same values to float rounding.

    Args:
      x: [N, D] decoder outputs of the (non-padding) target positions.
      matrix: [V, D] softmax weights (float32; cast to x's dtype for the matmuls).
      labels: int [N] target ids.
      label_smoothing: eps (0: plain cross-entropy).
      chunk_size: positions whose logits are computed at a time.
      vocab_major: the layout of a chunk's logits; None: `vocab_major_logits(V)`.

    Returns:
      float32 scalar: the summed token losses.
    """
    vocab_size = matrix.shape[0]
    if vocab_major is None:
        vocab_major = vocab_major_logits(vocab_size)
    vocab_axis = 0 if vocab_major else 1
    labels = tf.cast(labels, tf.int32)
    if label_smoothing > 0:
        confidence, low, normalizing = smoothing_targets(label_smoothing, vocab_size)
    else:
        confidence, low, normalizing = 1.0, 0.0, 0.0
    at_label = confidence - low  # q's extra mass at the label

    @tf.custom_gradient
    def fused(x, matrix):
        rows = tf.shape(x)[0]
        weights = tf.cast(matrix, x.dtype)
        num_chunks = (rows + chunk_size - 1) // chunk_size

        def body(c, lse_sum, label_log_prob_sum, d_matrix_acc, d_x):
            start = c * chunk_size
            size = tf.minimum(chunk_size, rows - start)
            x_chunk = tf.slice(x, [start, 0], [size, -1])
            chunk_labels = tf.slice(labels, [start], [size])

            def chunk_logits():
                if vocab_major:
                    logits = tf.matmul(weights, x_chunk, transpose_b=True)  # [V, size]
                else:
                    logits = tf.matmul(x_chunk, weights, transpose_b=True)  # [size, V]
                return tf.cast(logits, tf.float32)

            logits = chunk_logits()
            if vocab_major:
                at_labels = tf.stack([chunk_labels, tf.range(size)], axis=1)
            else:
                at_labels = tf.stack([tf.range(size), chunk_labels], axis=1)
            label_logits = tf.gather_nd(logits, at_labels)
            # The gather first (the exp is created under the dependency): the exp is then the
            # logits' last reader.
            with tf.control_dependencies([label_logits]):
                exp, sums, lse = _exp_and_sums(logits, vocab_axis, chunk_logits)
            lse = tf.reshape(lse, [-1])
            lse_sum += tf.reduce_sum(lse)
            # log p at the labels, each position's before the sum (Σ lse alone is ~8x the
            # loss).
            label_log_prob_sum += tf.reduce_sum(label_logits - lse)
            # p = e / s. In float32, 1 / s scales the [size, D] sides, not the [size, V] e,
            # as a product with the reciprocals (a division costs ~6x a product); in half
            # precision p itself is formed and cast for the matmuls.
            if x.dtype == tf.float32:
                inverse_sums = tf.math.reciprocal(tf.reshape(sums, [-1, 1]))  # [size, 1]
                scores, x_side = exp, x_chunk * inverse_sums
            else:
                scores, x_side = tf.cast(exp * tf.math.reciprocal(sums), x.dtype), x_chunk
            if vocab_major:
                d_matrix_part = tf.matmul(scores, x_side)
                d_x_chunk = tf.matmul(scores, weights, transpose_a=True)
            else:
                d_matrix_part = tf.matmul(x_side, scores, transpose_a=True)
                d_x_chunk = tf.matmul(scores, weights)
            if x.dtype == tf.float32:
                d_x_chunk = d_x_chunk * inverse_sums
            d_matrix_acc += tf.cast(d_matrix_part, tf.float32)
            return c + 1, lse_sum, label_log_prob_sum, d_matrix_acc, d_x.write(c, d_x_chunk)

        # The matrix's gradient: [V, D] vocab-major, else [D, V] (transposed once below).
        _, lse_sum, label_log_prob_sum, d_matrix_acc, d_x = tf.while_loop(
            lambda c, *unused: c < num_chunks, body,
            [tf.constant(0), tf.constant(0.0), tf.constant(0.0),
             tf.zeros(matrix.shape if vocab_major else matrix.shape[::-1], tf.float32),
             tf.TensorArray(x.dtype, size=num_chunks, infer_shape=False,
                            element_shape=tf.TensorShape([None, x.shape[-1]]))],
            parallel_iterations=1,
        )
        x32, matrix32 = tf.cast(x, tf.float32), tf.cast(matrix, tf.float32)
        sum_x = tf.reduce_sum(x32, axis=0)  # [D]
        sum_matrix = tf.reduce_sum(matrix32, axis=0)  # [D]
        rows_f = tf.cast(rows, tf.float32)
        sum_logits = tf.reduce_sum(sum_x * sum_matrix)
        total = -(low * (sum_logits - float(vocab_size) * lse_sum)
                  + at_label * label_log_prob_sum) - normalizing * rows_f
        # p - q's products from p's: q = low everywhere + at_label at each row's label.
        d_x = (tf.cast(d_x.concat(), tf.float32) - low * sum_matrix
               - at_label * tf.gather(matrix32, labels))
        d_matrix = ((d_matrix_acc if vocab_major else tf.transpose(d_matrix_acc))
                    - low * sum_x
                    - at_label * tf.math.unsorted_segment_sum(x32, labels, vocab_size))

        @_grad_scope("softmax_cross_entropy_grad")
        def grad(g):
            return tf.cast(g * d_x, x.dtype), tf.cast(g * d_matrix, matrix.dtype)

        return total, grad

    return fused(x, matrix)
