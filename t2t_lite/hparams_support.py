"""Which of t2t's hparams t2t_lite implements, and a one-line refusal of the others.

Every hparam of every registered set is in exactly one of three tables (the test
`tests/test_hparams_support.py` walks all sets x all hparams):

* `USED`: read with t2t's meaning; name -> what it does in t2t_lite, in one line. At least
  two values are accepted (values outside t2t's own range, e.g. an unknown optimizer name, are
  refused where they are read); `tests/test_hparams_meaning.py` observes each one's effect.
* `NO_EFFECT`: t2t reads them only to choose how to compute (variable placement, a custom
  op, padding removal before the feed-forward layer, TPU host calls), with the same numbers;
  any value is accepted and changes nothing here either.
* `NOT_SUPPORTED`: name -> (the one value accepted, what t2t does with the others). The
  accepted value is that of every registered set: it turns the feature off, or t2t's
  Transformer ignores the hparam at that value too. Any other value stops the run with one
  line naming the hparam (`check_supported`, which the model calls before anything else), so
  that a t2t recipe never trains silently without a setting it asked for.

t2t_lite's own hparams, which t2t does not have, are in `OWN` with their default and
meaning; `create_hparams` adds them to every set (so `--hparams` can set them and
hparams.json records them).
"""
from __future__ import annotations

import functools
from typing import Any

from t2t_lite.hparams import HParams, HParamsError
from t2t_lite.hparams_sets import transformer as transformer_sets

USED: dict[str, str] = {
    "activation_dtype": "compute dtype of training (float32, or float16 / bfloat16 mixed "
                        "precision with float32 weights; float16 adds loss scaling)",
    "attention_dropout": "dropout rate on the attention weights (training only)",
    "attention_dropout_broadcast_dims": "dimensions of [B, H, Lq, Lk] sharing one attention "
                                        "dropout mask",
    "attention_key_channels": "total depth of the attention queries and keys (0: hidden_size)",
    "attention_value_channels": "total depth of the attention values (0: hidden_size)",
    "batch_shuffle_size": "buffer (in batches) of the training batch shuffle (0: none)",
    "batch_size": "tokens per batch and replica (examples with use_fixed_batch_size)",
    "clip_grad_norm": "clips the gradients to this global norm (0: no clipping)",
    "eval_drop_long_sequences": "eval also drops examples longer than max_length",
    "eval_run_autoregressive": "eval logits come from greedy decoding instead of the reference "
                               "targets",
    "filter_size": "width of the feed-forward layers' hidden layer",
    "hidden_size": "model depth D (embeddings, attention, layer outputs)",
    "initializer": "distribution of the initial kernel and embedding weights",
    "initializer_gain": "scale of the initializer",
    "label_smoothing": "label smoothing of the training cross-entropy",
    "layer_postprocess_sequence": "steps after each sub-layer: a (residual), n (norm), "
                                  "d (dropout)",
    "layer_prepostprocess_dropout": "rate of the d steps of the pre/post-process sequences "
                                    "(training only)",
    "layer_prepostprocess_dropout_broadcast_dims": "dimensions sharing one mask in those d "
                                                   "steps",
    "layer_preprocess_sequence": "steps before each sub-layer (and after each stack): "
                                 "n (norm), d (dropout)",
    "learning_rate": "scale of the legacy learning-rate schedule",
    "learning_rate_constant": "the constant factor of the learning-rate schedule",
    "learning_rate_cosine_cycle_steps": "cycle length of the legacy cosine decay",
    "learning_rate_decay_rate": "base of the exponential decays",
    "learning_rate_decay_scheme": "decay of the legacy schedule (noam, exp, cosine, ...)",
    "learning_rate_decay_staircase": "exponential decays in whole steps of decay_steps",
    "learning_rate_decay_steps": "period of the decays (exp, cosdecay, linear_decay, ...)",
    "learning_rate_minimum": "floor of the learning rate (None or 0: none)",
    "learning_rate_schedule": "the learning rate as a product of named factors",
    "learning_rate_warmup_steps": "steps of the learning-rate warmup",
    "length_bucket_step": "growth factor between the length buckets' boundaries",
    "max_input_seq_length": "inputs are truncated to this length (0: not truncated)",
    "max_length": "longest example kept in training (0: batch_size)",
    "max_relative_position": "relative positions beyond +-this share one embedding "
                             "(dot_product_relative: 2m+1 key and value embeddings per layer)",
    "max_target_seq_length": "targets are truncated to this length (0: not truncated)",
    "min_length": "shortest example kept",
    "min_length_bucket": "first length bucket boundary",
    "mixed_precision_optimizer_init_loss_scale": "initial loss scale of float16 training",
    "multiply_embedding_mode": "embeddings multiplied by sqrt(hidden_size) (sqrt_depth) or "
                               "not (none)",
    "norm_epsilon": "epsilon of the layer norms",
    "norm_type": "the n step: layer norm (layer) or nothing (none)",
    "num_decoder_layers": "decoder layers (0: num_hidden_layers)",
    "num_encoder_layers": "encoder layers (0: num_hidden_layers)",
    "num_heads": "attention heads",
    "num_hidden_layers": "encoder and decoder layers",
    "optimizer": "the optimizer (adam, multistep_adam, adafactor, momentum, sgd)",
    "optimizer_adafactor_beta1": "Adafactor's momentum (0: none)",
    "optimizer_adafactor_beta2": "Adafactor's second-moment decay (decay_type adam)",
    "optimizer_adafactor_clipping_threshold": "Adafactor's update clipping (RMS)",
    "optimizer_adafactor_decay_type": "Adafactor's second-moment decay: pow or adam",
    "optimizer_adafactor_factored": "Adafactor factors the second moments of matrices",
    "optimizer_adafactor_memory_exponent": "exponent of Adafactor's pow decay",
    "optimizer_adafactor_multiply_by_parameter_scale": "Adafactor scales updates by the "
                                                       "weights' RMS",
    "optimizer_adam_beta1": "Adam's first-moment decay",
    "optimizer_adam_beta2": "Adam's second-moment decay",
    "optimizer_adam_epsilon": "Adam's epsilon",
    "optimizer_momentum_momentum": "momentum of optimizer=momentum",
    "optimizer_momentum_nesterov": "Nesterov momentum for optimizer=momentum",
    "optimizer_multistep_accumulate_steps": "micro-batches per update of multistep_adam",
    "overload_eval_metric_name": "name of the eval metrics instead of the problem's",
    "pack_dataset": "packs examples into rows of max_length on the fly",
    "pos": "sinusoidal position signal added to the embeddings (timing) or none",
    "relu_dropout": "dropout rate inside the feed-forward layers (training only)",
    "relu_dropout_broadcast_dims": "dimensions sharing one mask in that dropout",
    "sampling_keep_top_k": "sampling draws among the k most likely ids (-1: all)",
    "sampling_method": "greedy decoding takes the argmax or samples (random)",
    "sampling_temp": "temperature of sampling (0: argmax)",
    "self_attention_type": "encoder/decoder self-attention: dot_product, or dot_product_relative "
                           "(Shaw et al. relative positions, max_relative_position)",
    "shared_embedding": "inputs and targets share one embedding matrix",
    "shared_embedding_and_softmax_weights": "the target embedding is also the softmax "
                                            "matrix (equal vocab sizes)",
    "summarize_grads": "writes each applied gradient's histogram and norm (gradients/*, "
                       "gradient_norm/*, global_norm/clipped_gradient_norm) at progress steps",
    "summarize_vars": "writes each trainable variable's histogram (training_variables/*) at "
                      "progress steps",
    "symbol_dropout": "rate at which input and target ids are replaced by padding (training)",
    "symbol_modality_num_shards": "row shards of the embedding matrices",
    "use_fixed_batch_size": "batch_size counts examples instead of tokens",
    "use_target_space_embedding": "adds the target space's embedding to the encoder input",
    "vocab_divisor": "vocab sizes rounded up to a multiple of this",
    "weight_decay": "L2 penalty on the weights added to the training loss",
}

NO_EFFECT: dict[str, str] = {
    "add_relative_to_values": "read only by relative attention types other than "
                              "dot_product_relative (which always adds the value embeddings)",
    "heads_share_relative_embedding": "read only by relative attention types other than "
                                      "dot_product_relative (whose tables all heads share)",
    "daisy_chain_variables": "places variables across GPUs",
    "use_custom_ops": "packs pack_dataset's examples with a custom op",
    "use_pad_remover": "removes padding before the feed-forward layers (same numbers)",
    "tpu_enable_host_call": "writes TPU summaries through a host call",
}

OWN: dict[str, tuple[Any, str]] = {
    "use_fused_kernels": (
        True,
        ("the hand-written forward/backward kernels of t2t_lite.layers.fused_ops (layer norm, "
         "relu + dropout, attention softmax + dropout + matmul, chunked softmax loss) and Adam's "
         "one-kernel update (ResourceApplyAdam, t2t's TF1 kernel); false: plain TensorFlow "
         "ops differentiated by autodiff, with the same dropout masks, and Keras' Adam")),
    "sampling_keep_top_p": (
        1.0,
        ("nucleus sampling: with sampling_method=random, the draw is among the most likely "
         "ids whose probability (after sampling_temp and sampling_keep_top_k) first reaches "
         "p (1.0: all)")),
}

_FFN_ONLY = "read only by feed-forward layer types other than dense_relu_dense"
_AREA = "area attention"
_MULTIPROBLEM = "multi-problem training"
_SCHEDULED_SAMPLING = "scheduled sampling"
_SPLIT_TARGETS = "splitting long targets into chunks"
_UNREAD = "t2t's Transformer does not read it"

NOT_SUPPORTED: dict[str, tuple[Any, str]] = {
    "area_key_mode": ("none", _AREA),
    "area_value_mode": ("none", _AREA),
    "attention_variables_3d": (False, "3-d attention variables"),
    "causal_decoder_self_attention": (True, "a decoder attending to later positions too"),
    "compress_steps": (0, _UNREAD),
    "conv_first_kernel": (3, _FFN_ONLY),
    "dropout": (0.2, _UNREAD),
    "factored_logits": (False, "factored softmax logits"),
    "ffn_layer": ("dense_relu_dense", "other feed-forward layers (conv, sru, moe, ...)"),
    "force_full_predict": (False, "decoding without the fast cached path"),
    "gpu_automatic_mixed_precision": (False, "TF1 mixed precision; use activation_dtype"),
    "grad_noise_scale": (0.0, "gradient noise"),
    "gumbel_noise_weight": (0.0, "Gumbel noise in hard attention"),
    "hard_attention_k": (0, "hard attention"),
    "kernel_height": (3, _UNREAD),
    "kernel_width": (1, _UNREAD),
    "max_area_height": (1, _AREA),
    "max_area_width": (1, _AREA),
    "memory_height": (1, _AREA),
    "mixed_precision_optimizer_loss_scaler": ("exponential", "float16 without loss scaling"),
    "mlperf_mode": (False, "MLPerf logging and stopping"),
    "moe_hidden_sizes": ("2048", _FFN_ONLY),
    "moe_k": (2, _FFN_ONLY),
    "moe_loss_coef": (1e-3, _FFN_ONLY),
    "moe_num_experts": (16, _FFN_ONLY),
    "moe_overhead_eval": (2.0, _FFN_ONLY),
    "moe_overhead_train": (1.0, _FFN_ONLY),
    "multiproblem_fixed_train_length": (-1, _MULTIPROBLEM),
    "multiproblem_label_weight": (0.5, _MULTIPROBLEM),
    "multiproblem_max_input_length": (-1, _MULTIPROBLEM),
    "multiproblem_max_target_length": (-1, _MULTIPROBLEM),
    "multiproblem_mixing_schedule": ("constant", _MULTIPROBLEM),
    "multiproblem_per_task_threshold": ("", _MULTIPROBLEM),
    "multiproblem_reweight_label_loss": (False, _MULTIPROBLEM),
    "multiproblem_schedule_max_examples": (1e7, _MULTIPROBLEM),
    "multiproblem_schedule_threshold": (0.5, _MULTIPROBLEM),
    "multiproblem_target_eval_only": (False, _MULTIPROBLEM),
    "multiproblem_vocab_size": (-1, _MULTIPROBLEM),
    "nbr_decoder_problems": (1, "several decoder problems"),
    "no_data_parallelism": (False, _UNREAD),
    "num_area_layers": (0, _AREA),
    "optimizer_zero_grads": (False, "zeroing gradients of unused variables"),
    "pad_batch": (False, "padding the last batch to the full batch size"),
    "parameter_attention_key_channels": (0, _FFN_ONLY),
    "parameter_attention_value_channels": (0, _FFN_ONLY),
    "position_features": ("", _UNREAD),
    "prepend_mode": ("none", "inputs prepended to the targets (decoder-only models)"),
    "pretrained_model_dir": ("", "a pretrained model directory; use --warm_start_from"),
    "proximity_bias": (False, "a self-attention bias favouring nearby positions"),
    "scheduled_sampling_gold_mixin_prob": (0.5, _SCHEDULED_SAMPLING),
    "scheduled_sampling_method": ("parallel", _SCHEDULED_SAMPLING),
    "scheduled_sampling_num_passes": (1, _SCHEDULED_SAMPLING),
    "scheduled_sampling_prob": (0.0, _SCHEDULED_SAMPLING),
    "scheduled_sampling_warmup_schedule": ("exp", _SCHEDULED_SAMPLING),
    "scheduled_sampling_warmup_steps": (50000, _SCHEDULED_SAMPLING),
    "split_targets_chunk_length": (0, _SPLIT_TARGETS),
    "split_targets_max_chunks": (100, _SPLIT_TARGETS),
    "split_targets_strided_training": (False, _SPLIT_TARGETS),
    "split_to_length": (0, "splitting long examples at datagen"),
    "unidirectional_encoder": (False, "an encoder with causal self-attention"),
    "video_num_input_frames": (1, "video problems"),
    "video_num_target_frames": (1, "video problems"),
    "warm_start_from_second": ("", "a second warm-start checkpoint"),
    "weight_dtype": ("float32", "bfloat16 weights (TPU)"),
    "weight_noise": (0.0, "weight noise"),
}


# USED hparams of which t2t_lite implements only some of t2t's values: name -> (the values
# accepted, what t2t does with the others). `check_supported` refuses the others by name.
SUPPORTED_VALUES: dict[str, tuple[tuple[Any, ...], str]] = {
    "self_attention_type": (
        ("dot_product", "dot_product_relative"),
        "dot_product_relative_v2, local and other self-attention types"),
}


def check_supported(hparams: HParams) -> None:
    """Raises HParamsError (a ValueError; one line naming the hparam, which entry points
    print without a traceback) for the first `NOT_SUPPORTED` hparam whose value is not the
    accepted one, or `SUPPORTED_VALUES` hparam whose value is not among the accepted ones.
    Hparams absent from `hparams` are skipped."""
    for name, (accepted_values, use) in SUPPORTED_VALUES.items():
        if name in hparams and hparams.get(name) not in accepted_values:
            raise HParamsError(
                f"hparams.{name}={hparams.get(name)!r} is not supported by t2t_lite (t2t: "
                f"{use}); use one of {accepted_values!r}"
            )
    if (hparams.get("self_attention_type") == "dot_product_relative"
            and not hparams.get("max_relative_position")):
        raise HParamsError(
            f"hparams.max_relative_position={hparams.get('max_relative_position')!r} is not "
            "supported with self_attention_type=dot_product_relative (t2t: an error); set it "
            "> 0")
    for name, (accepted, use) in NOT_SUPPORTED.items():
        if name in hparams and hparams.get(name) != accepted:
            raise HParamsError(
                f"hparams.{name}={hparams.get(name)!r} is not supported by t2t_lite (t2t: "
                f"{use}); leave it at {accepted!r}"
            )


_MISSING = object()


@functools.cache
def _declared_values() -> dict[str, Any]:
    values = transformer_sets.basic_params1().values()
    for name, value in transformer_sets.transformer_base_v1().values().items():
        values.setdefault(name, value)
    for name, (value, _) in OWN.items():
        values[name] = value
    return values


def add_own_hparams(hparams: HParams) -> None:
    """Adds t2t_lite's own hparams (`OWN`) that `hparams` lacks, at their defaults.

    Args:
      hparams: HParams, changed in place.
    """
    for name, (value, _) in OWN.items():
        if name not in hparams:
            hparams.add_hparam(name, value)


def hparam(hparams: Any, name: str) -> Any:
    """`hparams.<name>`, or the value t2t declares it with when `hparams` does not have it.

    One default per hparam: the value of `basic_params1` (or, for the Transformer's own
    hparams, the value `transformer_base_v1` adds it with; for t2t_lite's own, the `OWN`
    default), so library code that accepts
    hparams sets without some name never repeats a default.

    Args:
      hparams: an HParams (or an object with HParams' `get(name, default)`), or any object
        with attributes.
      name: a hparam name that t2t's `basic_params1` or `transformer_base_v1` declares, or
        one of `OWN`.

    Raises:
      KeyError: `name` is not declared by those sets.
    """
    if hasattr(hparams, "get") and not isinstance(hparams, dict):
        value = hparams.get(name, _MISSING)
    else:
        value = getattr(hparams, name, _MISSING)
    return _declared_values()[name] if value is _MISSING else value
