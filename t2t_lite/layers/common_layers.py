"""tensor2tensor's common layers: layer norm, dropout with broadcast dims, pre/post-processing,
the position-wise feed-forward block and the padded (label-smoothed) cross-entropy.

Names follow t2t (`layer_norm`, `layer_preprocess`, `dense_relu_dense`, `padded_cross_entropy`)
and so do the weight names (`layer_norm/layer_norm_scale`, `conv1/kernel`, ...), so that a t2t
checkpoint maps onto these layers one to one (see `t2t_lite.models.t2t_checkpoint`).
Activations are 3-D `[B, L, D]` (t2t's 4-D `[B, L, 1, D]` layout is not used).
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence

import keras
import tensorflow as tf

from t2t_lite.errors import UserError
from t2t_lite.layers import fused_ops

# t2t's `layer_prepostprocess` letters: residual, gated zero-init residual, norm, dropout.
_SEQUENCE_LETTERS = frozenset("azdn")


def comma_separated_string_to_integer_list(s: str) -> list[int]:
    """Parses t2t's `*_dropout_broadcast_dims` strings, e.g. "0,1" -> [0, 1] and "" -> [].

    Args:
      s: comma-separated integers (negative allowed), possibly empty.

    Returns:
      The list of integers.
    """
    try:
        return [int(i) for i in s.split(",") if i.strip()]
    except ValueError:
        raise ValueError(
            f"Broadcast dims must be comma-separated integers such as '0,1', got {s!r}"
        ) from None


def broadcast_noise_shape(rank: int, broadcast_dims: Sequence[int]) -> list[int | None] | None:
    """The dropout `noise_shape` for t2t's broadcast dims: 1 on listed axes, full size elsewhere.

    Args:
      rank: rank of the tensor dropout is applied to.
      broadcast_dims: axes along which one dropout mask is shared (negative counts from the end).

    Returns:
      A list of length `rank` with 1 on broadcast axes and None (= that axis' size) elsewhere,
      or None when there is nothing to broadcast.
    """
    if not broadcast_dims:
        return None
    dims = set()
    for dim in broadcast_dims:
        if not -rank <= dim < rank:
            raise ValueError(f"Dropout broadcast dim {dim} is out of range for rank {rank}")
        dims.add(dim % rank)
    return [1 if i in dims else None for i in range(rank)]


def get_variable_initializer(hparams) -> keras.initializers.Initializer | None:
    """t2t's `optimize.get_variable_initializer` (kept beside the layers that use it, so that
    models need no training module): the default kernel initializer by name.

    Args:
      hparams: with `initializer` ("uniform_unit_scaling", "normal_unit_scaling", "uniform",
        "orthogonal", "xavier", or "" for the library default) and `initializer_gain`.

    Returns:
      A Keras initializer, or None when `hparams.initializer` is empty.
    """
    name, gain = hparams.initializer, float(hparams.initializer_gain)
    if not name:
        return None
    if name == "orthogonal":
        return keras.initializers.Orthogonal(gain)
    if name == "uniform":
        return keras.initializers.RandomUniform(-0.1 * gain, 0.1 * gain)
    if name == "normal_unit_scaling":
        # TF1's variance_scaling_initializer(distribution="normal") is a truncated normal.
        return keras.initializers.VarianceScaling(gain, "fan_avg", "truncated_normal")
    if name == "uniform_unit_scaling":
        return keras.initializers.VarianceScaling(gain, "fan_avg", "uniform")
    if name == "xavier":
        return keras.initializers.GlorotUniform()
    raise UserError(
        f"Unrecognized initializer: hparams.initializer={name!r}; use uniform_unit_scaling, "
        "normal_unit_scaling, uniform, orthogonal or xavier"
    )


def fresh_initializer(initializer) -> keras.initializers.Initializer:
    """A new instance of `initializer` for one more variable.

    Keras 3 initializers without a seed draw a fixed seed when constructed and return the same
    values on every call, so one instance shared by several variables of one shape would
    initialize them identically (q = k = v, equal embedding shards). t2t draws every variable
    independently; so do we, with one instance per variable.

    Args:
      initializer: a Keras initializer, its name, or its config.

    Returns:
      An unused initializer with the same configuration.
    """
    initializer = keras.initializers.get(initializer)
    return initializer.__class__.from_config(initializer.get_config())


_SEEDS = threading.local()


@contextlib.contextmanager
def dropout_seed(seed):
    """Makes every `Dropout` called inside draw its mask from stateless RNG seeded by `seed`.

    Each Dropout folds its own `salt` (see `number_dropout_layers`) into `seed`, so the layers
    of one step draw independent masks, and a step's masks depend on nothing but `seed`: no
    random-generator state to mirror across replicas, to checkpoint or to restore. The
    trainer derives `seed` from (--random_seed, global step, replica id) inside each replica's
    step function (`step_dropout_seed`). The context is per thread, as tf.distribute runs each
    replica's function on its own thread.

    Args:
      seed: int32/int64 [2] tensor, or None to leave the enclosing seed (if any) in force.

    Yields:
      None.
    """
    stack = _SEEDS.__dict__.setdefault("stack", [])
    stack.append(seed if seed is not None else current_dropout_seed())
    try:
        yield
    finally:
        stack.pop()


def current_dropout_seed() -> tf.Tensor | None:
    """The seed of the innermost `dropout_seed` context of this thread, or None."""
    stack = _SEEDS.__dict__.get("stack")
    return stack[-1] if stack else None


def step_dropout_seed(base_seed: int, step, replica_id) -> tf.Tensor:
    """The dropout seed of one replica at one training step.

    Args:
      base_seed: --random_seed (or a random number drawn once per run without one).
      step: int scalar global step (micro-batches, before this step's increment).
      replica_id: int scalar replica id in the sync group (global across workers under
        MultiWorkerMirroredStrategy).

    Returns:
      int64 [2]: a seed that differs for every (base_seed, step, replica_id).
    """
    seed = tf.constant([base_seed % 2**63, 0x7432_7432], tf.int64)
    seed = tf.random.experimental.stateless_fold_in(seed, tf.cast(step, tf.int64))
    return tf.random.experimental.stateless_fold_in(seed, tf.cast(replica_id, tf.int64))


def number_dropout_layers(layer: keras.layers.Layer) -> int:
    """Gives every Dropout inside `layer` its own salt 1, 2, ... in layer-tracking order.

    The order is the order in which the model creates its layers, so the salts are the same
    in every process that builds the same architecture.

    Args:
      layer: a model or layer.

    Returns:
      The number of Dropout layers numbered.
    """
    count = 0
    for sublayer in layer._flatten_layers(include_self=True, recursive=True):
        if isinstance(sublayer, Dropout):
            count += 1
            sublayer.salt = count
    return count


class Dropout(keras.layers.Layer):
    """Inverted dropout whose mask may be shared along axes (t2t's `dropout_with_broadcast_dims`).

    Active only when called with `training=True` and `rate > 0`. Inside a `dropout_seed`
    context the mask comes from `fused_ops.stateless_dropout` with the context's seed folded
    with this layer's `salt`; outside one it comes from TensorFlow's stateful RNG (seeded by
    `seed` and the global seed), for direct use of a layer or model.

    Args:
      rate: probability of dropping a unit (t2t passes `1 - rate` as keep_prob).
      broadcast_dims: axes sharing one mask; a t2t `"0,1"`-style string or a list of ints.
      seed: optional integer op seed of the stateful fallback.
    """

    def __init__(
        self,
        rate: float,
        broadcast_dims: str | Sequence[int] = (),
        seed: int | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"Dropout rate must be in [0, 1), got {rate}")
        if isinstance(broadcast_dims, str):
            broadcast_dims = comma_separated_string_to_integer_list(broadcast_dims)
        self.rate = float(rate)
        self.broadcast_dims = list(broadcast_dims)
        self.seed = seed
        # Which stream of the step seed this layer draws from (`number_dropout_layers`).
        self.salt = 0
        self.built = True

    def call(self, inputs: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        """Args: inputs: any shape. Returns: the same shape, dropped out when training."""
        if not training or self.rate == 0.0:
            return inputs
        noise_shape = self.noise_shape(inputs)
        seed = self.step_seed()
        if seed is None:
            return tf.nn.dropout(inputs, self.rate, noise_shape=noise_shape, seed=self.seed)
        return fused_ops.stateless_dropout(inputs, self.rate, seed, noise_shape)

    def noise_shape(self, x: tf.Tensor) -> tf.Tensor | None:
        """int32 [rank] shape of the mask for x (1 on the broadcast dims), or None (x's)."""
        broadcast = broadcast_noise_shape(len(x.shape), self.broadcast_dims)
        if broadcast is None:
            return None
        return tf.where(tf.constant([d == 1 for d in broadcast]), 1, tf.shape(x))

    def stateless_scaled_mask(self, x: tf.Tensor, training: bool | None) -> tf.Tensor | None:
        """The scaled mask this layer multiplies x by when it drops units (training,
        rate > 0) with a stateless mask (inside a `dropout_seed` context), else None.

        For the hand-written kernels of `fused_ops`, which apply the mask themselves: it is
        the mask `self(x, training=training)` applies.

        Args:
          x: the tensor to drop units of, any shape.
          training: dropout is active only when True.

        Returns:
          x's dtype, the mask's shape (`noise_shape(x)`, broadcastable to x): 1 / (1 - rate)
          where a unit is kept, 0 where dropped; or None.
        """
        seed = self.step_seed() if training and self.rate > 0.0 else None
        if seed is None:
            return None
        noise_shape = self.noise_shape(x)
        return fused_ops.stateless_scaled_mask(
            tf.shape(x) if noise_shape is None else noise_shape, self.rate, seed, x.dtype)

    def step_seed(self) -> tf.Tensor | None:
        """This layer's stateless seed int64 [2]: the enclosing `dropout_seed` folded with its
        `salt`, or None outside such a context (then the stateful RNG draws the mask)."""
        seed = current_dropout_seed()
        if seed is None:
            return None
        return tf.random.experimental.stateless_fold_in(seed, self.salt)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(rate=self.rate, broadcast_dims=self.broadcast_dims, seed=self.seed)
        return config


class SymbolDropout(Dropout):
    """t2t's `symbol_dropout`: each id is replaced by 0 (padding) with probability `rate`.

    t2t's symbol modality calls `dropout_no_scaling(ids, 1 - symbol_dropout)` before the
    embedding lookup, so a dropped token embeds to the zero vector, and in the encoder t2t
    derives the padding from that zero embedding: a dropped source token is masked out of
    attention as padding is (word dropout). There is no rescaling. Active only when called
    with `training=True` (t2t sets every `*dropout` hparam to 0 outside training). It draws
    from the same per-step, per-replica seed as `Dropout` (with its own salt).

    Args:
      rate: probability of dropping an id, in [0, 1).
      seed: optional integer op seed of the stateful fallback (outside a `dropout_seed`).
    """

    def __init__(self, rate: float, seed: int | None = None, **kwargs):
        super().__init__(rate, seed=seed, **kwargs)

    def call(self, inputs: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        """Args: inputs: int ids, any shape. Returns: the same ids, some set to 0 when
        training."""
        if not training or self.rate == 0.0:
            return inputs
        seed = self.step_seed()
        shape = tf.shape(inputs)
        if seed is None:
            uniform = tf.random.uniform(shape, seed=self.seed)
        else:
            uniform = tf.random.stateless_uniform(shape, seed)
        # t2t keeps an id where uniform < keep_prob.
        keep = tf.less(uniform, 1.0 - self.rate)
        return tf.where(keep, inputs, tf.zeros_like(inputs))

    def get_config(self) -> dict:
        config = super().get_config()
        del config["broadcast_dims"]
        return config


def layer_norm_compute(
    x: tf.Tensor, epsilon: float, scale: tf.Tensor, bias: tf.Tensor, fused: bool = True
) -> tf.Tensor:
    """t2t's `layer_norm_compute`: normalizes over the last axis with biased variance.

    Args:
      x: [..., D].
      epsilon: added to the variance (t2t: `norm_epsilon` = 1e-6).
      scale: [D] gain.
      bias: [D] offset.
      fused: differentiate with the closed-form gradient of `fused_ops.layer_norm`; False:
        the plain ops of `layer_norm_plain` and autodiff (the same forward values).

    Returns:
      [..., D]: `(x - mean) * rsqrt(var + epsilon) * scale + bias`.
    """
    dtype = x.dtype
    # Half-precision activations are normalized in float32 (as Keras does) for stability.
    if dtype in (tf.float16, tf.bfloat16):
        x = tf.cast(x, tf.float32)
    scale = tf.convert_to_tensor(tf.cast(scale, x.dtype))
    bias = tf.convert_to_tensor(tf.cast(bias, x.dtype))
    norm = fused_ops.layer_norm if fused else layer_norm_plain
    return tf.cast(norm(x, scale, bias, epsilon), dtype)


def layer_norm_plain(x: tf.Tensor, scale: tf.Tensor, bias: tf.Tensor,
                     epsilon: float) -> tf.Tensor:
    """t2t's layer norm as plain TensorFlow ops (differentiated by autodiff).

    Args:
      x: [..., D].
      scale: [D] gain, x's dtype.
      bias: [D] offset, x's dtype.
      epsilon: added to the variance.

    Returns:
      [..., D]: `(x - mean) * rsqrt(var + epsilon) * scale + bias`.
    """
    mean = tf.reduce_mean(x, axis=-1, keepdims=True)
    variance = tf.reduce_mean(tf.math.squared_difference(x, mean), axis=-1, keepdims=True)
    return (x - mean) * tf.math.rsqrt(variance + tf.cast(epsilon, x.dtype)) * scale + bias


class LayerNorm(keras.layers.Layer):
    """t2t's `layer_norm`: weights `layer_norm_scale` (ones) and `layer_norm_bias` (zeros).

    Keras' LayerNormalization uses epsilon 1e-3 and names gamma/beta; this layer keeps t2t's
    epsilon and names so checkpoints map directly.

    Args:
      epsilon: variance epsilon (hparams.norm_epsilon).
      fused: the closed-form gradient of `fused_ops.layer_norm` (hparams.use_fused_kernels);
        False: plain ops and autodiff.
      name: scope name; t2t uses "layer_norm" (then "layer_norm_1", ... within one scope).
    """

    def __init__(self, epsilon: float = 1e-6, fused: bool = True, name: str = "layer_norm",
                 **kwargs):
        super().__init__(name=name, **kwargs)
        self.epsilon = float(epsilon)
        self.fused = bool(fused)

    def build(self, input_shape: Sequence[int | None]) -> None:
        depth = input_shape[-1]
        self.scale = self.add_weight(
            name="layer_norm_scale", shape=(depth,), initializer="ones"
        )
        self.bias = self.add_weight(name="layer_norm_bias", shape=(depth,), initializer="zeros")

    def call(self, x: tf.Tensor) -> tf.Tensor:
        """Args: x: [..., D]. Returns: [..., D] normalized."""
        return layer_norm_compute(x, self.epsilon, self.scale, self.bias, self.fused)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(epsilon=self.epsilon, fused=self.fused)
        return config


def _check_sequence(sequence: str, what: str) -> None:
    if sequence == "none":
        return
    unknown = sorted(set(sequence) - _SEQUENCE_LETTERS)
    if unknown or not sequence:
        raise ValueError(
            f"hparams.{what}={sequence!r} is not a t2t pre/post-process sequence: use 'none' "
            "or letters from 'a' (residual), 'n' (norm), 'd' (dropout), e.g. 'n' or 'da'"
        )
    if "z" in sequence:
        raise ValueError(
            f"hparams.{what}={sequence!r}: the gated zero-init residual 'z' is not supported"
        )


class LayerPrepostprocess(keras.layers.Layer):
    """t2t's `layer_prepostprocess`: applies the letters of `sequence` left to right.

    `a` adds the residual (`previous_value`), `n` applies layer norm, `d` applies dropout;
    "none" returns `x` unchanged. Every `n` owns a LayerNorm, named as t2t names them
    (`layer_norm`, `layer_norm_1`, ...).

    Args:
      sequence: "none" or letters from "a", "n", "d" (e.g. "n", "da", "dan").
      dropout_rate: rate of the "d" steps (hparams.layer_prepostprocess_dropout).
      dropout_broadcast_dims: hparams.layer_prepostprocess_dropout_broadcast_dims.
      norm_type: hparams.norm_type; "layer" or "none".
      epsilon: hparams.norm_epsilon.
      fused: the norms' closed-form gradient (hparams.use_fused_kernels; see `LayerNorm`).
      name: "layer_prepostprocess" for preprocess, "layer_postprocess" for postprocess (t2t).
    """

    def __init__(
        self,
        sequence: str,
        dropout_rate: float = 0.0,
        dropout_broadcast_dims: str | Sequence[int] = (),
        norm_type: str = "layer",
        epsilon: float = 1e-6,
        fused: bool = True,
        name: str = "layer_prepostprocess",
        **kwargs,
    ):
        super().__init__(name=name, **kwargs)
        _check_sequence(sequence, "layer_*process_sequence")
        if norm_type not in ("layer", "none"):
            raise ValueError(
                f"hparams.norm_type={norm_type!r} is not supported; use 'layer' (t2t's "
                "Transformer default) or 'none'"
            )
        self.sequence = sequence
        self.dropout_rate = float(dropout_rate)
        self.dropout_broadcast_dims = dropout_broadcast_dims
        self.norm_type = norm_type
        self.epsilon = float(epsilon)
        self.fused = bool(fused)
        # Sub-layers are attributes, not lists: tf.train.Checkpoint only follows attributes
        # of Keras 3 layers.
        self._norm_names = []
        self._dropout_names = []
        letters = "" if sequence == "none" else sequence
        for letter in letters:
            if letter == "n" and norm_type == "layer":
                count = len(self._norm_names)
                name = "layer_norm" + (f"_{count}" if count else "")
                setattr(self, name, LayerNorm(epsilon, fused, name=name))
                self._norm_names.append(name)
            elif letter == "d":
                name = f"dropout_{len(self._dropout_names)}"
                setattr(self, name, Dropout(dropout_rate, dropout_broadcast_dims, name=name))
                self._dropout_names.append(name)

    @property
    def norms(self) -> list[LayerNorm]:
        """The LayerNorms of the "n" steps, in order."""
        return [getattr(self, name) for name in self._norm_names]

    @property
    def dropouts(self) -> list[Dropout]:
        """The Dropouts of the "d" steps, in order."""
        return [getattr(self, name) for name in self._dropout_names]

    def build(self, input_shape: Sequence[int | None]) -> None:
        for norm in self.norms:
            norm.build(input_shape)

    def call(
        self, x: tf.Tensor, previous_value: tf.Tensor | None = None, training: bool | None = None
    ) -> tf.Tensor:
        """Args: x: [B, L, D]; previous_value: [B, L, D] residual input (needed for "a").

        Returns: [B, L, D].
        """
        if self.sequence == "none":
            return x
        norms = iter(self.norms)
        dropouts = iter(self.dropouts)
        for letter in self.sequence:
            if letter == "a":
                if previous_value is None:
                    raise ValueError(f"{self.name}: sequence {self.sequence!r} needs a residual")
                x = x + previous_value
            elif letter == "n":
                if self.norm_type == "layer":
                    x = next(norms)(x)
            else:
                x = next(dropouts)(x, training=training)
        return x

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            sequence=self.sequence,
            dropout_rate=self.dropout_rate,
            dropout_broadcast_dims=self.dropout_broadcast_dims,
            norm_type=self.norm_type,
            epsilon=self.epsilon,
            fused=self.fused,
        )
        return config


def layer_preprocess(
    sequence: str,
    dropout_rate: float = 0.0,
    dropout_broadcast_dims: str | Sequence[int] = (),
    norm_type: str = "layer",
    epsilon: float = 1e-6,
    fused: bool = True,
) -> LayerPrepostprocess:
    """t2t's `layer_preprocess` as a layer, scope "layer_prepostprocess". The sequence
    (hparams.layer_preprocess_sequence) may not contain "a" or "z" (there is no residual).

    Args:
      sequence, dropout_rate, dropout_broadcast_dims, norm_type, epsilon, fused: see
        `LayerPrepostprocess`.

    Returns:
      A LayerPrepostprocess to call as `pre(x, training=...)` on [B, L, D].
    """
    if sequence != "none" and ("a" in sequence or "z" in sequence):
        raise ValueError(
            f"hparams.layer_preprocess_sequence={sequence!r}: residual connections ('a', 'z') "
            "are not allowed in the preprocess sequence (t2t); move them to "
            "layer_postprocess_sequence"
        )
    _check_sequence(sequence, "layer_preprocess_sequence")
    return LayerPrepostprocess(sequence, dropout_rate, dropout_broadcast_dims, norm_type,
                               epsilon, fused, name="layer_prepostprocess")


def layer_postprocess(
    sequence: str,
    dropout_rate: float = 0.0,
    dropout_broadcast_dims: str | Sequence[int] = (),
    norm_type: str = "layer",
    epsilon: float = 1e-6,
    fused: bool = True,
) -> LayerPrepostprocess:
    """t2t's `layer_postprocess` as a layer (hparams.layer_postprocess_sequence), scope
    "layer_postprocess".

    Args:
      sequence, dropout_rate, dropout_broadcast_dims, norm_type, epsilon, fused: see
        `LayerPrepostprocess`.

    Returns:
      A LayerPrepostprocess to call as `post(y, previous_value=x, training=...)` on [B, L, D].
    """
    _check_sequence(sequence, "layer_postprocess_sequence")
    return LayerPrepostprocess(sequence, dropout_rate, dropout_broadcast_dims, norm_type,
                               epsilon, fused, name="layer_postprocess")


def matmul_last_axis(x: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
    """`x · kernel` over the last axis as one 2-D matmul.

    A 2-D MatMul is the best-optimized path (GEMM, and TF's MatMul + BiasAdd (+ Relu) fusion);
    a broadcast BatchMatMul of [B, T, D] by [D, U] measured about 20% slower forward+backward
    on CPU.

    Args:
      x: [..., D_in].
      kernel: [D_in, U].

    Returns:
      [..., U].
    """
    shape = tf.shape(x)
    y = tf.matmul(tf.reshape(x, [-1, kernel.shape[0]]), tf.cast(kernel, x.dtype))
    return tf.reshape(y, tf.concat([shape[:-1], [kernel.shape[1]]], axis=0))


def dense(x: tf.Tensor, layer: keras.layers.Dense) -> tf.Tensor:
    """`x · kernel (+ bias)` of a built Dense layer (its activation is not applied).

    Args:
      x: [..., D_in].
      layer: a built keras.layers.Dense.

    Returns:
      [..., units].
    """
    shape = tf.shape(x)
    y = tf.matmul(tf.reshape(x, [-1, layer.kernel.shape[0]]), tf.cast(layer.kernel, x.dtype))
    if layer.use_bias:
        y = tf.nn.bias_add(y, tf.cast(layer.bias, y.dtype))
    return tf.reshape(y, tf.concat([shape[:-1], [layer.units]], axis=0))


class DenseReluDense(keras.layers.Layer):
    """t2t's `dense_relu_dense`: `conv2(dropout(relu(conv1(x))))`, both dense with bias.

    The two dense layers are named "conv1" and "conv2" directly under this layer's scope, as in
    t2t's `ffn` scope (name this layer "ffn").

    Args:
      filter_size: hidden width f (hparams.filter_size).
      output_size: output width d.
      dropout: relu dropout rate (hparams.relu_dropout).
      dropout_broadcast_dims: hparams.relu_dropout_broadcast_dims.
      kernel_initializer: initializer of both kernels (biases start at 0).
      fused: relu + dropout by `fused_ops.relu_dropout` when dropping units with a stateless
        mask (hparams.use_fused_kernels); False: the plain ops, the same mask.
    """

    def __init__(
        self,
        filter_size: int,
        output_size: int,
        dropout: float = 0.0,
        dropout_broadcast_dims: str | Sequence[int] = (),
        kernel_initializer="glorot_uniform",
        fused: bool = True,
        name: str = "ffn",
        **kwargs,
    ):
        super().__init__(name=name, **kwargs)
        self.fused = bool(fused)
        self.filter_size = int(filter_size)
        self.output_size = int(output_size)
        self.dropout_rate = float(dropout)
        self.dropout_broadcast_dims = dropout_broadcast_dims
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.conv1 = keras.layers.Dense(
            self.filter_size, activation="relu",
            kernel_initializer=fresh_initializer(self.kernel_initializer), name="conv1",
        )
        self.dropout = Dropout(self.dropout_rate, dropout_broadcast_dims, name="relu_dropout")
        self.conv2 = keras.layers.Dense(
            self.output_size, kernel_initializer=fresh_initializer(self.kernel_initializer),
            name="conv2",
        )

    def build(self, input_shape: Sequence[int | None]) -> None:
        self.conv1.build(input_shape)
        self.conv2.build(tuple(input_shape[:-1]) + (self.filter_size,))

    def call(self, x: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        """Args: x: [B, L, D]. Returns: [B, L, output_size]."""
        z = dense(x, self.conv1)
        mask = self.dropout.stateless_scaled_mask(z, training) if self.fused else None
        if mask is None:
            h = self.dropout(tf.nn.relu(z), training=training)
        else:
            h = fused_ops.relu_dropout(z, mask, self.dropout_rate)
        return dense(h, self.conv2)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            filter_size=self.filter_size,
            output_size=self.output_size,
            dropout=self.dropout_rate,
            dropout_broadcast_dims=self.dropout_broadcast_dims,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            fused=self.fused,
        )
        return config


def shift_right(ids: tf.Tensor) -> tf.Tensor:
    """Shifts ids right by one along the length axis, inserting 0 and dropping the last id.

    Embedding the shifted ids equals t2t's `shift_right_3d` on embedded targets, because id 0
    embeds to the zero vector.

    Args:
      ids: int [B, T].

    Returns:
      int [B, T].
    """
    return tf.pad(ids, [[0, 0], [1, 0]])[:, :-1]


def log_prob_from_logits(logits: tf.Tensor, axis: int = -1) -> tf.Tensor:
    """Log-softmax as t2t computes it: `logits - logsumexp(logits)`.

    Args:
      logits: [..., V].
      axis: the class axis.

    Returns:
      [..., V] log-probabilities.
    """
    return logits - tf.reduce_logsumexp(logits, axis=axis, keepdims=True)


def padded_cross_entropy(
    logits: tf.Tensor,
    labels: tf.Tensor,
    label_smoothing: float,
    weights_fn=None,
) -> tuple[tf.Tensor, tf.Tensor]:
    """t2t's `padded_cross_entropy` with label smoothing; returns the sums, not the mean.

    The soft target gives the true class `1 - eps` and every other class `eps / (V - 1)`; the
    constant entropy of that target is subtracted, so a perfect prediction has loss 0.
    Positions whose label is 0 (padding) get weight 0. The global loss is
    `sum(num) / max(1, sum(den))` over all replicas.

    Computed as t2t's `smoothing_cross_entropy` computes it: the soft target as a one-hot
    with on/off values and TensorFlow's fused `softmax_cross_entropy_with_logits`, whose kernel
    returns the loss and its gradient `softmax - q` in one pass over the logits (the sparse
    kernel when `label_smoothing` is 0). Autodiff of a logsumexp/gather/sum formulation
    measured twice as slow: its gradient broadcasts and scatter-adds three `[B, T, V]` terms.

    Args:
      logits: [B, T, V] or [N, V] (any float dtype; computed in float32).
      labels: int [B, T] or [N]; 0 = padding.
      label_smoothing: eps (0 in eval).
      weights_fn: optional `labels -> float32 [B, T]` weights; default `labels != 0`.

    Returns:
      (num, den): float32 scalars, sum of weighted losses and sum of weights.
    """
    logits = tf.cast(logits, tf.float32)
    labels = tf.cast(labels, tf.int32)
    vocab_size = logits.shape[-1]
    if vocab_size is None:
        raise ValueError("padded_cross_entropy needs a static vocabulary dimension on logits")
    if label_smoothing > 0:
        confidence, low_confidence, normalizing = fused_ops.smoothing_targets(
            label_smoothing, vocab_size)
        soft_targets = tf.one_hot(labels, vocab_size, on_value=confidence,
                                  off_value=low_confidence)
        xent = tf.nn.softmax_cross_entropy_with_logits(soft_targets, logits) - normalizing
    else:
        xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
    if weights_fn is None:
        weights = tf.cast(tf.not_equal(labels, 0), tf.float32)
    else:
        weights = tf.cast(weights_fn(labels), tf.float32)
    return tf.reduce_sum(xent * weights), tf.reduce_sum(weights)
