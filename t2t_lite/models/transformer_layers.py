"""The Transformer's layers (t2t scopes `transformer/body/...`): target-space embedding,
encoder and decoder layers, the encoder and decoder stacks, and the body that holds them.

Each layer takes plain constructor arguments named as the hparams they come from
(`layer_args(hparams)` reads them) and returns them from `get_config`; the weight paths are
t2t's checkpoint names (see `t2t_lite.models.transformer`).
"""
from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from t2t_lite import hparams_support
from t2t_lite.layers import common_attention, common_layers

NUM_TARGET_SPACES = 32


class TargetSpaceEmbedding(keras.layers.Layer):
    """t2t's `target_space_embedding`: a [32, D] table, row `target_space_id` is added to
    every encoder position.

    Args:
      hidden_size: D.
      initializer: the model's default initializer (no scaling of the looked-up row).
    """

    def __init__(self, hidden_size: int, initializer, name: str = "target_space_embedding",
                 **kwargs):
        super().__init__(name=name, **kwargs)
        self.hidden_size = int(hidden_size)
        self.initializer = keras.initializers.get(initializer)

    def build(self, input_shape=None) -> None:
        self.kernel = self.add_weight(
            name="kernel", shape=(NUM_TARGET_SPACES, self.hidden_size),
            initializer=common_layers.fresh_initializer(self.initializer),
        )

    def call(self, target_space_id: tf.Tensor) -> tf.Tensor:
        """Args: target_space_id: int scalar or [B].

        Returns: [1, 1, D] (scalar id) or [B, 1, D], to add to [B, L, D].
        """
        emb = tf.gather(self.kernel, tf.cast(target_space_id, tf.int32))
        return tf.reshape(emb, [-1, 1, self.hidden_size])

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(hidden_size=self.hidden_size,
                      initializer=keras.initializers.serialize(self.initializer))
        return config


def _sublayer_scope(name: str):
    """Opens t2t's sub-layer scope ("self_attention", "encdec_attention", "ffn") while the
    wrapped layers build, so their weight paths read ".../<name>/layer_prepostprocess/..."."""
    return keras.name_scope(name)


# The hparams that shape one encoder or decoder layer; the layers take them as constructor
# arguments of the same names (`layer_args` reads them from a model's hparams).
LAYER_HPARAMS = (
    "hidden_size",
    "num_heads",
    "filter_size",
    "ffn_layer",
    "attention_key_channels",
    "attention_value_channels",
    "attention_dropout",
    "attention_dropout_broadcast_dims",
    "relu_dropout",
    "relu_dropout_broadcast_dims",
    "layer_preprocess_sequence",
    "layer_postprocess_sequence",
    "layer_prepostprocess_dropout",
    "layer_prepostprocess_dropout_broadcast_dims",
    "norm_type",
    "norm_epsilon",
    "use_fused_kernels",
    "self_attention_type",
    "max_relative_position",
)


def layer_args(hparams) -> dict[str, Any]:
    """Constructor arguments of the Transformer's layers from model hparams.

    Args:
      hparams: model HParams.

    Returns:
      {name: value} for every name of `LAYER_HPARAMS`, e.g. to build
      `TransformerEncoderLayer(**layer_args(hparams), name="layer_0")`.
    """
    return {name: hparams_support.hparam(hparams, name) for name in LAYER_HPARAMS}


class _TransformerLayer(keras.layers.Layer):
    """Shared parts of encoder and decoder layers: pre/post-processing around sub-layers.

    Args (each named as the hparam it comes from, see `layer_args`):
      hidden_size: D.
      num_heads: H.
      filter_size: hidden width of the feed-forward layer.
      ffn_layer: only "dense_relu_dense".
      attention_key_channels, attention_value_channels: total key / value depth (0 -> D).
      attention_dropout, attention_dropout_broadcast_dims: attention weight dropout.
      relu_dropout, relu_dropout_broadcast_dims: dropout inside the feed-forward layer.
      layer_preprocess_sequence, layer_postprocess_sequence: t2t's "n", "dan", ... sequences.
      layer_prepostprocess_dropout, layer_prepostprocess_dropout_broadcast_dims: their "d".
      norm_type: "layer" or "none".
      norm_epsilon: layer norm epsilon.
      use_fused_kernels: the hand-written kernels of `fused_ops` (t2t_lite's own hparam);
        False: plain TensorFlow ops, the same dropout masks.
      self_attention_type: "dot_product", or "dot_product_relative" (t2t's relative position
        self-attention; encoder-decoder attention stays dot_product, as in t2t).
      max_relative_position: clipping distance of dot_product_relative.
      kernel_initializer: initializer of every kernel (the model's default initializer).
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        filter_size: int,
        ffn_layer: str = "dense_relu_dense",
        attention_key_channels: int = 0,
        attention_value_channels: int = 0,
        attention_dropout: float = 0.0,
        attention_dropout_broadcast_dims: str = "",
        relu_dropout: float = 0.0,
        relu_dropout_broadcast_dims: str = "",
        layer_preprocess_sequence: str = "none",
        layer_postprocess_sequence: str = "dan",
        layer_prepostprocess_dropout: float = 0.1,
        layer_prepostprocess_dropout_broadcast_dims: str = "",
        norm_type: str = "layer",
        norm_epsilon: float = 1e-6,
        use_fused_kernels: bool = True,
        self_attention_type: str = "dot_product",
        max_relative_position: int = 0,
        kernel_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        implemented = hparams_support.SUPPORTED_VALUES["self_attention_type"][0]
        if self_attention_type not in implemented:
            raise ValueError(f"hparams.self_attention_type={self_attention_type!r} is not "
                             f"supported; use one of {implemented!r}")
        if ffn_layer != "dense_relu_dense":
            raise ValueError(
                f"hparams.ffn_layer={ffn_layer!r} is not supported; use 'dense_relu_dense'"
            )
        self.hidden_size = int(hidden_size)
        self.num_heads = int(num_heads)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self._args = {
            "hidden_size": self.hidden_size,
            "num_heads": self.num_heads,
            "filter_size": int(filter_size),
            "ffn_layer": ffn_layer,
            "attention_key_channels": int(attention_key_channels),
            "attention_value_channels": int(attention_value_channels),
            "attention_dropout": float(attention_dropout),
            "attention_dropout_broadcast_dims": attention_dropout_broadcast_dims,
            "relu_dropout": float(relu_dropout),
            "relu_dropout_broadcast_dims": relu_dropout_broadcast_dims,
            "layer_preprocess_sequence": layer_preprocess_sequence,
            "layer_postprocess_sequence": layer_postprocess_sequence,
            "layer_prepostprocess_dropout": float(layer_prepostprocess_dropout),
            "layer_prepostprocess_dropout_broadcast_dims": (
                layer_prepostprocess_dropout_broadcast_dims),
            "norm_type": norm_type,
            "norm_epsilon": float(norm_epsilon),
            "use_fused_kernels": bool(use_fused_kernels),
            "self_attention_type": self_attention_type,
            "max_relative_position": int(max_relative_position),
        }

    def _preprocess(self) -> common_layers.LayerPrepostprocess:
        a = self._args
        return common_layers.layer_preprocess(
            a["layer_preprocess_sequence"], a["layer_prepostprocess_dropout"],
            a["layer_prepostprocess_dropout_broadcast_dims"], a["norm_type"], a["norm_epsilon"],
            a["use_fused_kernels"])

    def _postprocess(self) -> common_layers.LayerPrepostprocess:
        a = self._args
        return common_layers.layer_postprocess(
            a["layer_postprocess_sequence"], a["layer_prepostprocess_dropout"],
            a["layer_prepostprocess_dropout_broadcast_dims"], a["norm_type"], a["norm_epsilon"],
            a["use_fused_kernels"])

    def _attention(self) -> common_attention.MultiheadAttention:
        a = self._args
        return common_attention.MultiheadAttention(
            a["num_heads"],
            a["hidden_size"],
            key_depth=a["attention_key_channels"],
            value_depth=a["attention_value_channels"],
            dropout=a["attention_dropout"],
            dropout_broadcast_dims=a["attention_dropout_broadcast_dims"],
            kernel_initializer=self.kernel_initializer,
            fused=a["use_fused_kernels"],
        )

    def _self_attention(self) -> common_attention.MultiheadAttention:
        """The self-attention of `self_attention_type` (t2t passes it to self-attention only)."""
        a = self._args
        if a["self_attention_type"] != "dot_product_relative":
            return self._attention()
        return common_attention.MultiheadAttentionRelative(
            a["num_heads"],
            a["hidden_size"],
            a["max_relative_position"],
            key_depth=a["attention_key_channels"],
            value_depth=a["attention_value_channels"],
            dropout=a["attention_dropout"],
            kernel_initializer=self.kernel_initializer,
        )

    def _ffn(self) -> common_layers.DenseReluDense:
        a = self._args
        return common_layers.DenseReluDense(
            a["filter_size"],
            a["hidden_size"],
            dropout=a["relu_dropout"],
            dropout_broadcast_dims=a["relu_dropout_broadcast_dims"],
            kernel_initializer=self.kernel_initializer,
            fused=a["use_fused_kernels"],
            name="ffn",
        )

    def _build_sublayer(self, scope: str, pre, post, inner=None) -> None:
        shape = (None, None, self.hidden_size)
        with _sublayer_scope(scope):
            pre.build(shape)
            if inner is not None:
                inner.build(shape)
            post.build(shape)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(self._args)
        config["kernel_initializer"] = keras.initializers.serialize(self.kernel_initializer)
        return config


class TransformerEncoderLayer(_TransformerLayer):
    """One encoder layer (t2t scope `encoder/layer_{l}`): self-attention, then FFN, each as
    `x = postprocess(x, sublayer(preprocess(x)))`.

    Args: those of `_TransformerLayer` (`layer_args(hparams)`), kernel_initializer and
    name ("layer_{l}").
    """

    def __init__(self, hidden_size: int, num_heads: int, filter_size: int, **kwargs):
        super().__init__(hidden_size, num_heads, filter_size, **kwargs)
        self.self_attention_pre = self._preprocess()
        self.self_attention = self._self_attention()
        self.self_attention_post = self._postprocess()
        self.ffn_pre = self._preprocess()
        self.ffn = self._ffn()
        self.ffn_post = self._postprocess()

    def build(self, input_shape=None) -> None:
        self._build_sublayer(
            "self_attention", self.self_attention_pre, self.self_attention_post,
            self.self_attention,
        )
        self._build_sublayer("ffn", self.ffn_pre, self.ffn_post)
        # The FFN layer is itself named "ffn": its conv1/conv2 sit directly in that scope.
        self.ffn.build((None, None, self.hidden_size))

    def call(self, x: tf.Tensor, bias: tf.Tensor, training: bool | None = None,
             return_attention_scores: bool = False):
        """Args: x: [B, L, D]; bias: [B, 1, 1, L] padding bias; return_attention_scores: also
        return {"self_attention": [B, H, L, L]} attention weights.

        Returns: [B, L, D] (and the weights).
        """
        y = self.self_attention(
            self.self_attention_pre(x, training=training), bias=bias, training=training,
            return_attention_scores=return_attention_scores,
        )
        if return_attention_scores:
            y, scores = y
        x = self.self_attention_post(y, previous_value=x, training=training)
        y = self.ffn(self.ffn_pre(x, training=training), training=training)
        x = self.ffn_post(y, previous_value=x, training=training)
        return (x, {"self_attention": scores}) if return_attention_scores else x


class TransformerDecoderLayer(_TransformerLayer):
    """One decoder layer (t2t scope `decoder/layer_{l}`): causal self-attention,
    encoder-decoder attention, FFN.

    Args: those of `_TransformerLayer` (`layer_args(hparams)`), kernel_initializer and
    name ("layer_{l}").
    """

    def __init__(self, hidden_size: int, num_heads: int, filter_size: int, **kwargs):
        super().__init__(hidden_size, num_heads, filter_size, **kwargs)
        self.self_attention_pre = self._preprocess()
        self.self_attention = self._self_attention()
        self.self_attention_post = self._postprocess()
        self.encdec_attention_pre = self._preprocess()
        self.encdec_attention = self._attention()
        self.encdec_attention_post = self._postprocess()
        self.ffn_pre = self._preprocess()
        self.ffn = self._ffn()
        self.ffn_post = self._postprocess()

    def build(self, input_shape=None) -> None:
        self._build_sublayer(
            "self_attention", self.self_attention_pre, self.self_attention_post,
            self.self_attention,
        )
        self._build_sublayer(
            "encdec_attention", self.encdec_attention_pre, self.encdec_attention_post,
            self.encdec_attention,
        )
        self._build_sublayer("ffn", self.ffn_pre, self.ffn_post)
        self.ffn.build((None, None, self.hidden_size))

    def call(
        self,
        x: tf.Tensor,
        encoder_output: tf.Tensor | None,
        self_attention_bias: tf.Tensor,
        encdec_bias: tf.Tensor,
        memory_kv: dict[str, tf.Tensor] | None = None,
        cache: dict[str, tf.Tensor] | None = None,
        decode_step=None,
        training: bool | None = None,
        return_attention_scores: bool = False,
    ):
        """Runs the layer on the full target or, with a cache, on one new position.

        Args:
          x: [B, T, D] (T = 1 when decoding with a cache).
          encoder_output: [B, L, D]; may be None when `memory_kv` is given.
          self_attention_bias: [1, 1, T, T] causal bias; when decoding, [1, 1, 1, M] row of
            the current step for a fixed-size cache of M slots, None for a growing cache.
          encdec_bias: [B, 1, 1, L] encoder padding bias.
          memory_kv: {"k", "v"} [B, H, L, D/H], the encoder output projected once (decoding).
          cache: {"k", "v"} [B, H, T or M, D/H] self-attention cache (decoding).
          decode_step: int32 scalar slot of a fixed-size cache; None appends to a growing
            cache.
          training: enables dropout.
          return_attention_scores: also return {"self_attention": [B, H, T, T],
            "encdec_attention": [B, H, T, L]} attention weights (without a cache).

        Returns:
          [B, T, D], or ([B, 1, D], updated cache) with a cache, or ([B, T, D], weights).
        """
        scores = {}
        y = self.self_attention(
            self.self_attention_pre(x, training=training), bias=self_attention_bias,
            cache=cache, decode_step=decode_step, training=training,
            return_attention_scores=return_attention_scores,
        )
        if return_attention_scores:
            y, scores["self_attention"] = y
        elif cache is not None:
            y, cache = y
        x = self.self_attention_post(y, previous_value=x, training=training)
        y = self.encdec_attention(
            self.encdec_attention_pre(x, training=training),
            memory=None if memory_kv is not None else encoder_output,
            bias=encdec_bias, memory_kv=memory_kv, training=training,
            return_attention_scores=return_attention_scores,
        )
        if return_attention_scores:
            y, scores["encdec_attention"] = y
        x = self.encdec_attention_post(y, previous_value=x, training=training)
        y = self.ffn(self.ffn_pre(x, training=training), training=training)
        x = self.ffn_post(y, previous_value=x, training=training)
        if return_attention_scores:
            return x, scores
        return x if cache is None else (x, cache)


def _prefixed(prefix: str, scores: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    """{prefix/name: weights} of a sub-layer's {name: weights}."""
    return {f"{prefix}/{name}": weights for name, weights in scores.items()}


class _LayerStack(keras.layers.Layer):
    """N layers `layer_0 .. layer_{N-1}` of one class, then one more preprocess (the final
    layer norm of pre-norm sets; identity for "none"): what t2t's encoder and decoder share.

    Args:
      num_layers: N.
      **layer_kwargs: the arguments of every layer (`layer_args(hparams)` and
        kernel_initializer, see `_TransformerLayer`).
    """

    layer_class: type[_TransformerLayer]

    def __init__(self, num_layers: int, name: str, **layer_kwargs):
        own = {k: layer_kwargs.pop(k) for k in ("trainable", "dtype") if k in layer_kwargs}
        super().__init__(name=name, **own)
        self.num_layers = int(num_layers)
        for i in range(self.num_layers):
            # Attributes, not a list: tf.train.Checkpoint only follows attributes.
            setattr(self, f"layer_{i}", self.layer_class(name=f"layer_{i}", **layer_kwargs))
        first = self.layer_class(**layer_kwargs) if not self.num_layers else self.layer_0
        self.hidden_size = first.hidden_size
        # The arguments every layer was built with, as its config holds them.
        self.layer_config = {
            k: v for k, v in first.get_config().items()
            if k in LAYER_HPARAMS or k == "kernel_initializer"
        }
        self.output_norm = first._preprocess()

    @property
    def layers_(self) -> list[keras.layers.Layer]:
        """The layers `layer_0 .. layer_{N-1}`, in order."""
        return [getattr(self, f"layer_{i}") for i in range(self.num_layers)]

    def build(self, input_shape=None) -> None:
        for layer in self.layers_:
            layer.build()
        self.output_norm.build((None, None, self.hidden_size))

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(num_layers=self.num_layers, **self.layer_config)
        return config


class TransformerEncoder(_LayerStack):
    """t2t's `transformer_encoder` (scope "encoder").

    Args:
      num_layers: hparams.num_encoder_layers or num_hidden_layers.
      **layer_kwargs: see `_LayerStack`.
    """

    layer_class = TransformerEncoderLayer

    def __init__(self, num_layers: int, name: str = "encoder", **layer_kwargs):
        super().__init__(num_layers, name, **layer_kwargs)

    def call(self, x: tf.Tensor, bias: tf.Tensor, training: bool | None = None,
             return_attention_scores: bool = False):
        """Args: x: [B, L, D] prepared input; bias: [B, 1, 1, L]; return_attention_scores:
        also return {"layer_{l}/self_attention": [B, H, L, L]} attention weights.

        Returns: [B, L, D] (and the weights).
        """
        scores = {}
        for layer in self.layers_:
            x = layer(x, bias, training=training, return_attention_scores=return_attention_scores)
            if return_attention_scores:
                x, layer_scores = x
                scores.update(_prefixed(layer.name, layer_scores))
        x = self.output_norm(x, training=training)
        return (x, scores) if return_attention_scores else x


class TransformerDecoder(_LayerStack):
    """t2t's `transformer_decoder` (scope "decoder").

    Args:
      num_layers: hparams.num_decoder_layers or num_hidden_layers.
      **layer_kwargs: see `_LayerStack`.
    """

    layer_class = TransformerDecoderLayer

    def __init__(self, num_layers: int, name: str = "decoder", **layer_kwargs):
        super().__init__(num_layers, name, **layer_kwargs)

    def call(
        self,
        x: tf.Tensor,
        encoder_output: tf.Tensor | None,
        self_attention_bias: tf.Tensor,
        encdec_bias: tf.Tensor,
        memory_kv: list[dict[str, tf.Tensor]] | None = None,
        cache: dict[str, Any] | None = None,
        decode_step=None,
        training: bool | None = None,
        return_attention_scores: bool = False,
    ):
        """Decodes the full target, or one position with a cache.

        Args:
          x: [B, T, D] prepared decoder input ([B, 1, D] with a cache).
          encoder_output: [B, L, D] (unused with a cache).
          self_attention_bias: [1, 1, T, T] causal bias ([1, 1, 1, M] with fixed-size
            caches, None with growing ones).
          encdec_bias: [B, 1, 1, L] ([B', 1, 1, L] with `memory_kv`).
          memory_kv: with a cache, per layer {"k", "v"} [B', H, L, D/H]: the encoder output
            projected once by that layer's encdec_attention (`encdec_memory_kv`); B = B' * K
            in beam search (rows b * K + k read memory row b).
          cache: {"layer_{l}": {"k", "v"}} [B, H, T or M, D/H] self-attention caches
            (`Transformer.init_decode_cache`).
          decode_step: int32 scalar slot of a fixed-size cache; None appends to growing
            caches (see `common_attention.MultiheadAttention`).
          training: enables dropout.
          return_attention_scores: also return {"layer_{l}/self_attention": [B, H, T, T],
            "layer_{l}/encdec_attention": [B, H, T, L]} attention weights (without a cache).

        Returns:
          [B, T, D], or ([B, 1, D], updated cache), or ([B, T, D], weights).
        """
        new_cache = {} if cache is not None else None
        scores = {}
        for i, layer in enumerate(self.layers_):
            if cache is None:
                x = layer(x, encoder_output, self_attention_bias, encdec_bias, training=training,
                          return_attention_scores=return_attention_scores)
                if return_attention_scores:
                    x, layer_scores = x
                    scores.update(_prefixed(layer.name, layer_scores))
                continue
            x, new_cache[layer.name] = layer(
                x, None, self_attention_bias, encdec_bias, memory_kv=memory_kv[i],
                cache=cache[layer.name], decode_step=decode_step, training=training,
            )
        x = self.output_norm(x, training=training)
        if return_attention_scores:
            return x, scores
        return x if cache is None else (x, new_cache)

    def encdec_memory_kv(self, encoder_output: tf.Tensor) -> list[dict[str, tf.Tensor]]:
        """Projects the encoder output once per layer for fast decoding.

        Args:
          encoder_output: [B, L, D].

        Returns:
          Per layer {"k": [B, H, L, Dk/H], "v": [B, H, L, Dv/H]}.
        """
        return [layer.encdec_attention.compute_memory_kv(encoder_output)
                for layer in self.layers_]


class TransformerBody(keras.layers.Layer):
    """t2t's `transformer/body` scope: target-space embedding, encoder, decoder and the
    input dropouts.

    Args:
      num_encoder_layers, num_decoder_layers: layers of each stack.
      use_target_space_embedding: add the target-space row to the encoder input.
      **layer_kwargs: the arguments of every layer (`layer_args(hparams)` and
        kernel_initializer, see `_TransformerLayer`).
    """

    def __init__(self, num_encoder_layers: int, num_decoder_layers: int,
                 use_target_space_embedding: bool = True, name: str = "body", **layer_kwargs):
        own = {k: layer_kwargs.pop(k) for k in ("trainable", "dtype") if k in layer_kwargs}
        super().__init__(name=name, **own)
        self.num_encoder_layers = int(num_encoder_layers)
        self.num_decoder_layers = int(num_decoder_layers)
        self.use_target_space_embedding = bool(use_target_space_embedding)
        self.target_space_embedding = TargetSpaceEmbedding(
            layer_kwargs["hidden_size"], layer_kwargs.get("kernel_initializer", "glorot_uniform"))
        self.encoder = TransformerEncoder(self.num_encoder_layers, **layer_kwargs)
        self.decoder = TransformerDecoder(self.num_decoder_layers, **layer_kwargs)
        rate = self.encoder.layer_config["layer_prepostprocess_dropout"]
        # t2t applies plain dropout (no broadcast dims) to the prepared encoder/decoder inputs.
        self.encoder_input_dropout = common_layers.Dropout(rate, name="encoder_input_dropout")
        self.decoder_input_dropout = common_layers.Dropout(rate, name="decoder_input_dropout")

    def build(self, input_shape=None) -> None:
        if self.use_target_space_embedding:
            self.target_space_embedding.build()
        self.encoder.build()
        self.decoder.build()

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            num_encoder_layers=self.num_encoder_layers,
            num_decoder_layers=self.num_decoder_layers,
            use_target_space_embedding=self.use_target_space_embedding,
            **self.encoder.layer_config,
        )
        return config
