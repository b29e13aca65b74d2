"""Which of t2t's hparams t2t_lite implements, and a one-line refusal of the others.

Every hparam of every registered set is in exactly one of three tables (the test
`tests/test_hparams_support.py` walks all sets x all hparams):

* `USED`: read with t2t's meaning; name -> the module that reads it (that module may still
  refuse some values, e.g. `ffn_layer` other than "dense_relu_dense", in one line).
* `NO_EFFECT`: t2t reads them only to choose how to compute (variable placement, a custom
  op, padding removal before the feed-forward layer, TPU host calls), with the same numbers;
  any value is accepted and changes nothing here either.
* `NOT_SUPPORTED`: name -> (the one value accepted, what t2t does with it). The accepted value
  is that of every registered set: it turns the feature off, or t2t's Transformer ignores the
  hparam at that value too. Any other value stops the run with one line naming the hparam
  (`check_supported`), so that a t2t recipe never trains silently without a setting it asked
  for.

t2t_lite's own hparams, which t2t does not have, are in `OWN` with their default and
meaning; `create_hparams` adds them to every set (so `--hparams` can set them and
hparams.json records them).
"""
from __future__ import annotations

import functools
from typing import Any

from t2t_lite.hparams import HParams
from t2t_lite.hparams_sets import transformer as transformer_sets

_LAYERS = "t2t_lite.layers.common_layers"
_ATTENTION = "t2t_lite.layers.common_attention"
_MODALITIES = "t2t_lite.layers.modalities"
_MODEL = "t2t_lite.models.transformer"
_MODEL_LAYERS = "t2t_lite.models.transformer_layers"
_TRAINER = "t2t_lite.utils.trainer_lib"
_OPTIMIZE = "t2t_lite.utils.optimize"
_LEARNING_RATE = "t2t_lite.utils.learning_rate"
_PROBLEM = "t2t_lite.data_generators.problem"
_DATA_READER = "t2t_lite.utils.data_reader"

USED: dict[str, str] = {
    "activation_dtype": _TRAINER,
    "attention_dropout": _MODEL_LAYERS,
    "attention_dropout_broadcast_dims": _ATTENTION,
    "attention_key_channels": _ATTENTION,
    "attention_value_channels": _ATTENTION,
    "batch_shuffle_size": _PROBLEM,
    "batch_size": _PROBLEM,
    "causal_decoder_self_attention": _MODEL,
    "clip_grad_norm": _TRAINER,
    "eval_drop_long_sequences": _PROBLEM,
    "eval_run_autoregressive": _TRAINER,
    "ffn_layer": _MODEL_LAYERS,
    "filter_size": _MODEL_LAYERS,
    "hidden_size": _MODEL,
    "initializer": _OPTIMIZE,
    "initializer_gain": _OPTIMIZE,
    "label_smoothing": _TRAINER,
    "layer_postprocess_sequence": _LAYERS,
    "layer_prepostprocess_dropout": _LAYERS,
    "layer_prepostprocess_dropout_broadcast_dims": _LAYERS,
    "layer_preprocess_sequence": _LAYERS,
    "learning_rate": _LEARNING_RATE,
    "learning_rate_constant": _LEARNING_RATE,
    "learning_rate_cosine_cycle_steps": _LEARNING_RATE,
    "learning_rate_decay_rate": _LEARNING_RATE,
    "learning_rate_decay_scheme": _LEARNING_RATE,
    "learning_rate_decay_staircase": _LEARNING_RATE,
    "learning_rate_decay_steps": _LEARNING_RATE,
    "learning_rate_minimum": _LEARNING_RATE,
    "learning_rate_schedule": _LEARNING_RATE,
    "learning_rate_warmup_steps": _LEARNING_RATE,
    "length_bucket_step": _DATA_READER,
    "max_input_seq_length": _PROBLEM,
    "max_length": _PROBLEM,
    "max_relative_position": _MODEL,
    "max_target_seq_length": _PROBLEM,
    "min_length": _PROBLEM,
    "min_length_bucket": _DATA_READER,
    "mixed_precision_optimizer_init_loss_scale": _OPTIMIZE,
    "mixed_precision_optimizer_loss_scaler": _OPTIMIZE,
    "multiply_embedding_mode": _MODALITIES,
    "norm_epsilon": _LAYERS,
    "norm_type": _LAYERS,
    "num_decoder_layers": _MODEL,
    "num_encoder_layers": _MODEL,
    "num_heads": _MODEL,
    "num_hidden_layers": _MODEL,
    "optimizer": _OPTIMIZE,
    "optimizer_adam_beta1": _OPTIMIZE,
    "optimizer_adam_beta2": _OPTIMIZE,
    "optimizer_adam_epsilon": _OPTIMIZE,
    "optimizer_momentum_momentum": _OPTIMIZE,
    "optimizer_momentum_nesterov": _OPTIMIZE,
    "optimizer_multistep_accumulate_steps": _OPTIMIZE,
    "overload_eval_metric_name": _TRAINER,
    "pack_dataset": _PROBLEM,
    "pos": _MODEL,
    "prepend_mode": _MODEL,
    "proximity_bias": _MODEL,
    "relu_dropout": _LAYERS,
    "relu_dropout_broadcast_dims": _LAYERS,
    "sampling_keep_top_k": _MODEL,
    "sampling_method": _MODEL,
    "sampling_temp": _MODEL,
    "self_attention_type": _MODEL,
    "shared_embedding": _MODALITIES,
    "shared_embedding_and_softmax_weights": _MODALITIES,
    "symbol_dropout": _MODEL,
    "symbol_modality_num_shards": _MODALITIES,
    "unidirectional_encoder": _MODEL,
    "use_fixed_batch_size": _PROBLEM,
    "use_target_space_embedding": _MODEL,
    "vocab_divisor": _MODALITIES,
    "weight_decay": _TRAINER,
    "weight_dtype": _TRAINER,
}

NO_EFFECT: dict[str, str] = {
    "daisy_chain_variables": "places variables across GPUs",
    "use_custom_ops": "packs pack_dataset's examples with a custom op",
    "use_pad_remover": "removes padding before the feed-forward layers (same numbers)",
    "tpu_enable_host_call": "writes TPU summaries through a host call",
}

OWN: dict[str, tuple[Any, str, str]] = {
    "use_fused_kernels": (
        True, _MODEL_LAYERS,
        ("the hand-written forward/backward kernels of t2t_lite.layers.fused_ops (layer norm, "
         "relu + dropout, attention softmax + dropout + matmul, chunked softmax loss); false: "
         "plain TensorFlow ops differentiated by autodiff, with the same dropout masks")),
}

_FFN_ONLY = "read only by feed-forward layer types other than dense_relu_dense"
_AREA = "area attention"
_MULTIPROBLEM = "multi-problem training"
_SCHEDULED_SAMPLING = "scheduled sampling"
_SPLIT_TARGETS = "splitting long targets into chunks"
_ADAFACTOR = "the adafactor optimizer"
_UNREAD = "t2t's Transformer does not read it"

NOT_SUPPORTED: dict[str, tuple[Any, str]] = {
    "add_relative_to_values": (False, "relative attention"),
    "area_key_mode": ("none", _AREA),
    "area_value_mode": ("none", _AREA),
    "attention_variables_3d": (False, "3-d attention variables"),
    "compress_steps": (0, _UNREAD),
    "conv_first_kernel": (3, _FFN_ONLY),
    "dropout": (0.2, _UNREAD),
    "factored_logits": (False, "factored softmax logits"),
    "force_full_predict": (False, "decoding without the fast cached path"),
    "gpu_automatic_mixed_precision": (False, "TF1 mixed precision; use activation_dtype"),
    "grad_noise_scale": (0.0, "gradient noise"),
    "gumbel_noise_weight": (0.0, "Gumbel noise in hard attention"),
    "hard_attention_k": (0, "hard attention"),
    "heads_share_relative_embedding": (False, "relative attention"),
    "kernel_height": (3, _UNREAD),
    "kernel_width": (1, _UNREAD),
    "max_area_height": (1, _AREA),
    "max_area_width": (1, _AREA),
    "memory_height": (1, _AREA),
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
    "optimizer_adafactor_beta1": (0.0, _ADAFACTOR),
    "optimizer_adafactor_beta2": (0.999, _ADAFACTOR),
    "optimizer_adafactor_clipping_threshold": (1.0, _ADAFACTOR),
    "optimizer_adafactor_decay_type": ("pow", _ADAFACTOR),
    "optimizer_adafactor_factored": (True, _ADAFACTOR),
    "optimizer_adafactor_memory_exponent": (0.8, _ADAFACTOR),
    "optimizer_adafactor_multiply_by_parameter_scale": (True, _ADAFACTOR),
    "optimizer_zero_grads": (False, "zeroing gradients of unused variables"),
    "pad_batch": (False, "padding the last batch to the full batch size"),
    "parameter_attention_key_channels": (0, _FFN_ONLY),
    "parameter_attention_value_channels": (0, _FFN_ONLY),
    "position_features": ("", _UNREAD),
    "pretrained_model_dir": ("", "a pretrained model directory; use --warm_start_from"),
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
    "summarize_grads": (False, "gradient summaries"),
    "summarize_vars": (False, "variable summaries"),
    "video_num_input_frames": (1, "video problems"),
    "video_num_target_frames": (1, "video problems"),
    "warm_start_from_second": ("", "a second warm-start checkpoint"),
    "weight_noise": (0.0, "weight noise"),
}


def check_supported(hparams: HParams) -> None:
    """Raises ValueError (one line naming the hparam) for the first `NOT_SUPPORTED` hparam
    whose value is not the accepted one. Hparams absent from `hparams` are skipped."""
    for name, (accepted, use) in NOT_SUPPORTED.items():
        if name in hparams and hparams.get(name) != accepted:
            raise ValueError(
                f"hparams.{name}={hparams.get(name)!r} is not supported by t2t_lite (t2t: "
                f"{use}); leave it at {accepted!r}"
            )


_MISSING = object()


@functools.cache
def _declared_values() -> dict[str, Any]:
    values = transformer_sets.basic_params1().values()
    for name, value in transformer_sets.transformer_base_v1().values().items():
        values.setdefault(name, value)
    for name, (value, _, _) in OWN.items():
        values[name] = value
    return values


def add_own_hparams(hparams: HParams) -> None:
    """Adds t2t_lite's own hparams (`OWN`) that `hparams` lacks, at their defaults.

    Args:
      hparams: HParams, changed in place.
    """
    for name, (value, _, _) in OWN.items():
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
