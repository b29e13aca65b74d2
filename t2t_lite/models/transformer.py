"""tensor2tensor's Transformer ("transformer") as a Keras 3 model.

Computation, initialization and variable names follow t2t (T2T_REFERENCE.md §2, §7.3-7.4): the
weight paths of this model ARE t2t's checkpoint names (`model.weights[i].path ==
"transformer/body/encoder/layer_0/self_attention/multihead_attention/q/kernel"`, ...), and
`t2t_variable_map` lists them explicitly from the model's structure.

Differences from t2t, none of which changes the logits:
* 3-D activations `[B, L, D]` and 2-D ids `[B, L]` instead of t2t's `[B, L, 1, D]` / `[B, L, 1,
  1]`; logits are `[B, T, V]`.
* The encoder FFN runs on padded positions too (t2t's PadRemover skips them and writes zeros);
  real positions and all decoder outputs are identical because padded encoder positions are
  masked with -1e9 in the encoder-decoder attention. (Consequently a non-empty
  `relu_dropout_broadcast_dims` refers to axes of `[B, L, F]`, not of t2t's `[1, tokens, F]`.)
* The encoder padding mask is computed from `inputs == 0` (after `symbol_dropout`, which sets
  dropped ids to 0) instead of "embedding is all zero": the same thing, since only id 0
  embeds to the zero vector.
* Fast decoding concatenates each step's keys/values to the caches, as t2t does. Beam search
  does not copy the caches to their new beams after each step (t2t gathers them): they
  stay in the beam slot that computed them and a slot-id table, reordered instead, picks
  each hypothesis' history; the K beams of a sentence also read its encoder output
  untiled. Only the XLA-compiled decoder (`infer(..., jit_compile=True)`), which needs
  static shapes, writes the keys/values into preallocated caches `[B, H, max_len, D/H]`;
  attention over the not-yet-written slots gets -1e9, i.e. exactly zero weight. The
  decoding side (caches, steps) is `transformer_decoding`; continuous batching's is
  `transformer_slots`.
"""
from __future__ import annotations

import keras
import tensorflow as tf

from t2t_lite import hparams_support, registry
from t2t_lite.search import beam_search, driver

# The XLA input buckets, importable from here as before the search had its own room.
from t2t_lite.search.driver import xla_batch_bucket, xla_length_bucket  # noqa: F401
from t2t_lite.search.interface import Decoder, StepOptions
from t2t_lite.search.interface import ids_2d as _ids_2d
from t2t_lite.search.sampling import Sampling
from t2t_lite.hparams import HParams
from t2t_lite.layers import common_attention, common_layers, fused_ops, modalities
from t2t_lite.models import transformer_decoding
from t2t_lite.models.transformer_decoding import BEAM_SLOT_BLOCK  # noqa: F401
from t2t_lite.models.transformer_layers import TransformerBody, layer_args
from t2t_lite.utils import validation

# The features of packed examples (t2t's generator_utils.pack_examples / pack_dataset).
PACKED_FEATURES = ("inputs_segmentation", "inputs_position", "targets_segmentation",
                   "targets_position")


def get_variable_initializer(hparams) -> keras.initializers.Initializer:
    """t2t's default kernel initializer for `hparams` (`common_layers.get_variable_initializer`).

    An empty `hparams.initializer` means TF1's `get_variable` default, Glorot uniform.
    """
    return common_layers.get_variable_initializer(hparams) or keras.initializers.GlorotUniform()


def _check_hparams(hparams) -> None:
    hparams_support.check_supported(hparams)
    validation.check_attention_depths(
        hparams.hidden_size, hparams.num_heads,
        hparams_support.hparam(hparams, "attention_key_channels"),
        hparams_support.hparam(hparams, "attention_value_channels"))
    # None is t2t's `pos` of the relative sets: no position signal, as "none".
    if hparams.pos not in ("timing", "none", None):
        raise ValueError(
            f"hparams.pos={hparams.pos!r} is not supported; use one of ('timing', 'none')")


@registry.register_model("transformer")
class Transformer(keras.Model):
    """tensor2tensor's Transformer (registered as "transformer").

    Call on `{"inputs": int [B, L], "targets": int [B, T], "target_space_id": int scalar
    (optional, default 0)}` to get teacher-forced logits float32 [B, T, V_target]; dropout only
    with `training=True`. `infer` decodes greedily or with beam search.

    The weights are created in the constructor (all shapes follow from the hparams), so the
    model can be loaded, counted or saved before its first call.

    Args:
      hparams: model HParams (e.g. `create_hparams("transformer_base")`).
      input_vocab_size: V_in of the inputs (before `vocab_divisor` padding).
      target_vocab_size: V_out of the targets.
    """

    def __init__(self, hparams, input_vocab_size: int, target_vocab_size: int,
                 name: str = "transformer", **kwargs):
        super().__init__(name=name, **kwargs)
        _check_hparams(hparams)
        self.hparams = hparams.copy()
        self.input_vocab_size = int(input_vocab_size)
        self.target_vocab_size = int(target_vocab_size)
        self.hidden_size = hparams.hidden_size
        self.num_heads = hparams.num_heads
        initializer = get_variable_initializer(hparams)
        self.modality = modalities.SymbolModality(
            self.input_vocab_size,
            self.target_vocab_size,
            hparams.hidden_size,
            num_shards=hparams.symbol_modality_num_shards,
            share_softmax=hparams.shared_embedding_and_softmax_weights,
            shared_embedding=hparams_support.hparam(hparams, "shared_embedding"),
            multiply_embedding_mode=hparams.multiply_embedding_mode,
            vocab_divisor=hparams_support.hparam(hparams, "vocab_divisor"),
        )
        if not self.modality.share_softmax:
            # t2t sets the hparam to 0 when the vocab sizes differ; record what is in effect.
            self.hparams.shared_embedding_and_softmax_weights = False
        self.body = TransformerBody(
            hparams.num_encoder_layers or hparams.num_hidden_layers,
            hparams.num_decoder_layers or hparams.num_hidden_layers,
            use_target_space_embedding=hparams.use_target_space_embedding,
            kernel_initializer=initializer,
            **layer_args(hparams),
        )
        # t2t's symbol_dropout on the source and the (shifted) target ids. Created after the
        # body so that the body's dropout layers keep their salts (`number_dropout_layers`).
        symbol_dropout = hparams_support.hparam(hparams, "symbol_dropout")
        self.inputs_symbol_dropout = common_layers.SymbolDropout(
            symbol_dropout, name="inputs_symbol_dropout")
        self.targets_symbol_dropout = common_layers.SymbolDropout(
            symbol_dropout, name="targets_symbol_dropout")
        # Compiled decoders by configuration; set past Keras/TF attribute tracking so that
        # checkpoints and SavedModels of the model never include them.
        object.__setattr__(self, "_infer_functions", driver.CompiledDecoders())
        self.build()
        common_layers.number_dropout_layers(self)

    def build(self, input_shape=None) -> None:
        self.modality.build()
        self.body.build()

    @property
    def vocab_size(self) -> int:
        """V of the logits (the target vocab after vocab_divisor padding)."""
        return self.modality.target_vocab_size

    def get_config(self) -> dict:
        return {
            "hparams": self.hparams.to_json(),
            "input_vocab_size": self.input_vocab_size,
            "target_vocab_size": self.target_vocab_size,
            "name": self.name,
        }

    @classmethod
    def from_config(cls, config: dict) -> Transformer:
        config = dict(config)
        config["hparams"] = HParams.from_json(config["hparams"])
        return cls(**config)

    # ----------------------------------------------------------------------------------------
    # Teacher-forced computation.

    def encode(self, inputs, target_space_id=0, training: bool | None = None,
               matrices: dict[str, tf.Tensor] | None = None,
               packing: dict[str, tf.Tensor] | None = None,
               return_attention_scores: bool = False):
        """t2t's `transformer_prepare_encoder` + `transformer_encoder`.

        Args:
          inputs: int [B, L] source ids (0 = padding).
          target_space_id: int scalar (or [B]) row of the target-space embedding.
          training: enables dropout.
          matrices: optional `self.modality.matrices()` shared with `decode`.
          packing: for packed examples (t2t's `*_packed` problems, `pack_dataset`), the
            features "inputs_segmentation", "inputs_position" [B, L] and
            "targets_segmentation" [B, T]: attention stays within each example and the
            timing signal follows the positions within it.
          return_attention_scores: also return the encoder's attention weights,
            {"layer_{l}/self_attention": [B, H, L, L]}.

        Returns:
          (encoder_output [B, L, D], encoder-decoder bias float32 [B, 1, 1, L], or
          [B, 1, T, L] with packing), and the weights with `return_attention_scores`.
        """
        inputs = self.inputs_symbol_dropout(_ids_2d(inputs), training=training)
        x = self.modality.bottom(inputs, "inputs", matrices)
        if packing is None:
            # A dropped source id is padding here, as t2t's padding from zero embeddings.
            padding = tf.cast(tf.equal(inputs, 0), tf.float32)
            bias = encdec_bias = common_attention.attention_bias_ignore_padding(padding)
        else:
            segments = _ids_2d(packing["inputs_segmentation"])
            bias = common_attention.attention_bias_same_segment(segments, segments)
            encdec_bias = common_attention.attention_bias_same_segment(
                _ids_2d(packing["targets_segmentation"]), segments)
        if self.body.use_target_space_embedding:
            target_space_id = tf.cast(target_space_id, tf.int32)
            x += tf.cast(self.body.target_space_embedding(target_space_id), x.dtype)
        x = self._add_timing(x, None if packing is None else packing["inputs_position"])
        x = self.body.encoder_input_dropout(x, training=training)
        if return_attention_scores:
            x, scores = self.body.encoder(x, bias, training=training,
                                          return_attention_scores=True)
            return x, encdec_bias, scores
        return self.body.encoder(x, bias, training=training), encdec_bias

    def decode(self, targets, encoder_output: tf.Tensor, encdec_bias: tf.Tensor,
               training: bool | None = None,
               matrices: dict[str, tf.Tensor] | None = None,
               packing: dict[str, tf.Tensor] | None = None) -> tf.Tensor:
        """Teacher-forced decoder: shifted-right targets -> logits.

        Args:
          targets: int [B, T] target ids (ending with EOS, 0-padded).
          encoder_output: [B, L, D].
          encdec_bias: [B, 1, 1, L] (or [B, 1, T, L] with packing).
          training: enables dropout.
          matrices: optional `self.modality.matrices()` shared with `encode`.
          packing: "targets_segmentation", "targets_position" [B, T] of packed examples.
            As in t2t the whole packed row is shifted right, so an example after the first
            sees the previous example's EOS where an unpacked one sees the zero vector.

        Returns:
          float32 logits [B, T, V].
        """
        x = self._decoder_output(targets, encoder_output, encdec_bias, training, matrices,
                                 packing)
        return tf.cast(self.modality.top(x, matrices), tf.float32)

    def _decoder_output(self, targets, encoder_output, encdec_bias, training, matrices,
                        packing, return_attention_scores: bool = False):
        """The teacher-forced decoder's output [B, T, D] before the softmax layer (and its
        attention weights with `return_attention_scores`, see `TransformerDecoder`)."""
        targets = _ids_2d(targets)
        position = None if packing is None else packing["targets_position"]
        x = self._decoder_input(common_layers.shift_right(targets), training, matrices, position)
        bias = common_attention.attention_bias_lower_triangle(tf.shape(targets)[1])
        if packing is not None:
            segments = _ids_2d(packing["targets_segmentation"])
            bias += common_attention.attention_bias_same_segment(segments, segments)
        return self.body.decoder(x, encoder_output, bias, encdec_bias, training=training,
                                 return_attention_scores=return_attention_scores)

    def _add_timing(self, x: tf.Tensor, position: tf.Tensor | None) -> tf.Tensor:
        if self.hparams.pos != "timing":
            return x
        if position is None:
            return common_attention.add_timing_signal_1d(x)
        return common_attention.add_timing_signal_1d_given_position(x, _ids_2d(position))

    def _decoder_input(self, shifted_ids: tf.Tensor, training, matrices=None,
                       position: tf.Tensor | None = None) -> tf.Tensor:
        shifted_ids = self.targets_symbol_dropout(shifted_ids, training=training)
        x = self.modality.bottom(shifted_ids, "targets", matrices)
        x = self._add_timing(x, position)
        return self.body.decoder_input_dropout(x, training=training)

    def call(self, features: dict, training: bool | None = None,
             return_attention_scores: bool = False):
        """Teacher-forced logits.

        Args:
          features: {"inputs": int [B, L], "targets": int [B, T], optional
            "target_space_id": int scalar; for packed examples also "inputs_segmentation",
            "inputs_position" [B, L], "targets_segmentation", "targets_position" [B, T]}.
          training: enables dropout.
          return_attention_scores: also return every attention's weights (softmax output),
            by layer path: {"encoder/layer_{l}/self_attention": [B, H, L, L],
            "decoder/layer_{l}/self_attention": [B, H, T, T],
            "decoder/layer_{l}/encdec_attention": [B, H, T, L]} (for pictures).

        Returns:
          float32 logits [B, T, V]; with `return_attention_scores`, (logits, weights).
        """
        matrices = self.modality.matrices()
        packing = None
        if "inputs_segmentation" in features:
            packing = {name: features[name] for name in PACKED_FEATURES}
        encoded = self.encode(
            features["inputs"], features.get("target_space_id", 0), training=training,
            matrices=matrices, packing=packing, return_attention_scores=return_attention_scores,
        )
        if not return_attention_scores:
            return self.decode(
                features["targets"], *encoded, training=training, matrices=matrices,
                packing=packing,
            )
        encoder_output, encdec_bias, encoder_scores = encoded
        x, decoder_scores = self._decoder_output(
            features["targets"], encoder_output, encdec_bias, training, matrices, packing,
            return_attention_scores=True)
        scores = {f"encoder/{name}": w for name, w in encoder_scores.items()}
        scores.update({f"decoder/{name}": w for name, w in decoder_scores.items()})
        return tf.cast(self.modality.top(x, matrices), tf.float32), scores

    def encdec_attention(self, inputs, targets, layer: int = -1,
                         target_space_id=0) -> tf.Tensor:
        """The encoder-decoder attention of one decoder layer, mean over its heads,
        teacher-forced on `targets` (word alignments, `decoding/alignment.py`): row t is
        what the decoder read when it produced target t, as in incremental decoding.

        Args:
          inputs: int [B, L] source ids.
          targets: int [B, T] target ids (EOS, then anything: rows before it do not see it).
          layer: decoder layer index (negative: from the last).
          target_space_id: int scalar.

        Returns:
          float32 [B, T, L].
        """
        layers = len(self.body.decoder.layers_)
        if not -layers <= layer < layers:
            raise ValueError(f"alignment_layer={layer} is outside the decoder's {layers} "
                             f"layers (0 to {layers - 1}, or -1 for the last)")
        matrices = self.modality.matrices()
        encoder_output, encdec_bias = self.encode(inputs, target_space_id, training=False,
                                                  matrices=matrices)
        _, scores = self._decoder_output(targets, encoder_output, encdec_bias, False,
                                         matrices, None, return_attention_scores=True)
        weights = scores[f"layer_{layer % layers}/encdec_attention"]
        return tf.reduce_mean(tf.cast(weights, tf.float32), axis=1)

    def training_loss(self, features: dict, label_smoothing: float,
                      training: bool | None = None,
                      skip_padding: bool = True) -> tuple[tf.Tensor, tf.Tensor]:
        """t2t's training loss, `padded_cross_entropy(self(features), targets, eps)`, with the
        softmax layer applied to the non-padding target positions only.

        Padding positions have weight 0 in the loss, so leaving out their logits changes
        neither the loss nor any gradient; it saves that fraction (~7% on the bucketed toy
        WMT batches) of the step's largest cost, the `[B*T, D] x [D, V]` logits and their
        cross-entropy, forward and backward. With hparams.use_fused_kernels the logits of the
        remaining positions are computed in chunks (`fused_ops.softmax_cross_entropy`), so
        the `[N, V]` tensors never exist whole; without, by the modality's softmax layer and
        `padded_cross_entropy` (plain ops).

        Args:
          features: as for `call`.
          label_smoothing: eps (hparams.label_smoothing in training).
          training: enables dropout.
          skip_padding: leave out the padding positions' logits (their number varies, so
            False under XLA, which needs static shapes).

        Returns:
          (num, den): float32 scalars, the summed token losses and the number of non-padding
          target tokens.
        """
        matrices = self.modality.matrices()
        packing = None
        if "inputs_segmentation" in features:
            packing = {name: features[name] for name in PACKED_FEATURES}
        encoder_output, encdec_bias = self.encode(
            features["inputs"], features.get("target_space_id", 0), training=training,
            matrices=matrices, packing=packing,
        )
        targets = _ids_2d(features["targets"])
        x = self._decoder_output(targets, encoder_output, encdec_bias, training, matrices,
                                 packing)
        if not skip_padding:
            return common_layers.padded_cross_entropy(
                self.modality.top(x, matrices), targets, label_smoothing)
        positions = tf.where(tf.not_equal(targets, 0))
        labels = tf.gather_nd(targets, positions)
        x = tf.gather_nd(x, positions)
        # The fused loss casts the unscaled logit gradients to the compute dtype; with
        # float16 loss scaling they must be scaled first, as autodiff does.
        if not hparams_support.hparam(self.hparams, "use_fused_kernels") or x.dtype == tf.float16:
            return common_layers.padded_cross_entropy(
                self.modality.top(x, matrices), labels, label_smoothing)
        num = fused_ops.softmax_cross_entropy(
            x, matrices["softmax"], labels, label_smoothing)
        return num, tf.cast(tf.size(labels), tf.float32)

    # ----------------------------------------------------------------------------------------
    # Decoding.

    def init_decode_cache(self, batch_size, max_length) -> dict[str, dict[str, tf.Tensor]]:
        """Zero self-attention caches for fast decoding (`transformer_decoding`).

        Args:
          batch_size: N rows (int or scalar tensor).
          max_length: M, the number of decode steps (int or scalar tensor) for fixed-size
            caches; 0 for the empty caches that decoding grows by a position per step.

        Returns:
          {"layer_{l}": {"k": [N, H, M, Dk/H], "v": [N, H, M, Dv/H]}} zeros of the attention
          layers' compute dtype.
        """
        return transformer_decoding.self_attention_zeros(
            self, lambda heads, depth: [batch_size, heads, max_length, depth])

    @property
    def sampling(self) -> Sampling:
        """How greedy decoding chooses a token: the sampling settings of the hparams."""
        return transformer_decoding.sampling_from_hparams(self.hparams)

    def start_decoding(self, inputs, target_space_id, options: StepOptions) -> Decoder:
        """The search's interface (`search/interface.py`): runs the encoder once and returns
        the decoder of the rows the search asks for (`transformer_decoding.start_decoding`).

        Args:
          inputs: int32 [B, L] source ids.
          target_space_id: int32 scalar.
          options: the beams, cache layout, length and logits dtype the search asks for.

        Returns:
          a `Decoder`: `step(ids, t, cache) -> (logits [N, V], cache)`, its cache, and how
          the cache follows the beams.
        """
        return transformer_decoding.start_decoding(self, inputs, target_space_id, options)

    def slot_decoding(self, beam_size: int = 1):
        """The model's side of continuous batching (`transformer_slots.TransformerSlots`, a
        `search.interface.SlotDecoding` of `beam_size` rows per sentence), or None when this
        model cannot decode in slots."""
        from t2t_lite.models import transformer_slots

        return transformer_slots.slot_decoding(self, beam_size)

    def slot_decoding_refusal(self) -> str | None:
        """Why this model cannot decode in slots (`slot_decoding`), or None when it can."""
        from t2t_lite.models import transformer_slots

        return transformer_slots.refusal(self.hparams)

    def infer(
        self,
        features: dict,
        decode_length=50,
        beam_size: int = 1,
        alpha: float = 0.6,
        top_beams: int = 1,
        use_cache: bool = True,
        eos_id: int = beam_search.EOS_ID,
        jit_compile: bool = False,
        force_decode_length: bool = False,
        **options,
    ) -> dict[str, tf.Tensor]:
        """Autoregressive decoding (t2t's `infer` with fast incremental decoding), by the
        search of `search` (`driver.infer`, which documents every argument).

        Args:
          features: {"inputs": int [B, L_in], optional "target_space_id": int scalar}.
          decode_length: extra length: at most L_in + decode_length tokens.
          beam_size: 1 = greedy (`hparams.sampling_method`), >1 = beam search.
          alpha: length-penalty exponent of beam search.
          top_beams: beams returned (<= beam_size).
          use_cache: False recomputes the whole decoder prefix every step (reference path).
          eos_id: end-of-sequence id.
          jit_compile: compile the cached decoder with XLA (bucketed input shapes).
          force_decode_length: greedy decoding runs every step.
          **options: the further options of `driver.infer`.

        Returns:
          {"outputs": int32 [B, T'] (or [B, top_beams, T']), "scores": float32 [B] (or
          [B, top_beams])}.
        """
        return driver.infer(self, self._infer_functions, features, decode_length, beam_size,
                            alpha, top_beams, use_cache, eos_id, jit_compile,
                            force_decode_length, **options)
