"""tensor2tensor's Transformer hparams sets, by their registered t2t names.

Values are those of t2t at HEAD bafdc1b6 / 1.15.7 (see T2T_REFERENCE.md §1). Each set is
built from its parent exactly as t2t builds it, so inherited values and hparam types (fixed
when a name is first added) match t2t's.
"""
from t2t_lite.hparams import HParams
from t2t_lite.registry import register_hparams


def basic_params1() -> HParams:
    """t2t's `common_hparams.basic_params1`: the defaults every set starts from."""
    hparams = HParams(
        batch_size=4096,
        batch_shuffle_size=512,
        use_fixed_batch_size=False,
        num_hidden_layers=4,
        kernel_height=3,
        kernel_width=1,
        hidden_size=64,
        compress_steps=0,
        dropout=0.2,
        clip_grad_norm=2.0,
        grad_noise_scale=0.0,
        summarize_grads=False,
        mlperf_mode=False,
        summarize_vars=False,
        initializer="orthogonal",
        initializer_gain=1.5,
        label_smoothing=0.1,
        optimizer="adam",
        optimizer_adam_epsilon=1e-6,
        optimizer_adam_beta1=0.85,
        optimizer_adam_beta2=0.997,
        optimizer_momentum_momentum=0.9,
        optimizer_momentum_nesterov=False,
        optimizer_adafactor_beta1=0.0,
        optimizer_adafactor_beta2=0.999,
        optimizer_adafactor_factored=True,
        optimizer_adafactor_decay_type="pow",
        optimizer_adafactor_memory_exponent=0.8,
        optimizer_adafactor_clipping_threshold=1.0,
        optimizer_adafactor_multiply_by_parameter_scale=True,
        optimizer_multistep_accumulate_steps=0,
        mixed_precision_optimizer_loss_scaler="exponential",
        mixed_precision_optimizer_init_loss_scale=2**15,
        optimizer_zero_grads=False,
        weight_decay=1e-6,
        weight_noise=0.0,
        learning_rate_schedule="legacy",
        learning_rate_constant=1.0,
        learning_rate_decay_scheme="none",
        learning_rate_decay_steps=5000,
        learning_rate_decay_staircase=False,
        learning_rate_minimum=None,
        learning_rate_decay_rate=1.0,
        learning_rate_warmup_steps=100,
        learning_rate_cosine_cycle_steps=250000,
        learning_rate=0.1,
        sampling_method="argmax",
        sampling_temp=1.0,
        sampling_keep_top_k=-1,
        factored_logits=False,
        multiply_embedding_mode="sqrt_depth",
        moe_hidden_sizes="2048",
        moe_num_experts=64,
        moe_k=2,
        moe_loss_coef=1e-2,
        layer_preprocess_sequence="none",
        layer_postprocess_sequence="dan",
        layer_prepostprocess_dropout=0.1,
        layer_prepostprocess_dropout_broadcast_dims="",
        symbol_dropout=0.0,
        norm_type="layer",
        norm_epsilon=1e-6,
        vocab_divisor=1,
        min_length_bucket=8,
        max_length=0,
        length_bucket_step=1.1,
        eval_drop_long_sequences=False,
        eval_run_autoregressive=False,
        shared_embedding_and_softmax_weights=False,
        shared_embedding=False,
        symbol_modality_num_shards=1,
        max_input_seq_length=0,
        max_target_seq_length=0,
        split_to_length=0,
        video_num_input_frames=1,
        video_num_target_frames=1,
        prepend_mode="none",
        scheduled_sampling_prob=0.0,
        scheduled_sampling_method="parallel",
        scheduled_sampling_num_passes=1,
        scheduled_sampling_warmup_schedule="exp",
        scheduled_sampling_warmup_steps=50000,
        scheduled_sampling_gold_mixin_prob=0.5,
        daisy_chain_variables=True,
        force_full_predict=False,
        no_data_parallelism=False,
        activation_dtype="float32",
        weight_dtype="float32",
        pretrained_model_dir="",
        multiproblem_schedule_threshold=0.5,
        multiproblem_per_task_threshold="",
        multiproblem_schedule_max_examples=1e7,
        multiproblem_mixing_schedule="constant",
        multiproblem_reweight_label_loss=False,
        multiproblem_label_weight=0.5,
        max_relative_position=0,
        heads_share_relative_embedding=False,
        add_relative_to_values=False,
        tpu_enable_host_call=False,
        pad_batch=False,
        multiproblem_target_eval_only=False,
        multiproblem_vocab_size=-1,
        multiproblem_max_input_length=-1,
        multiproblem_max_target_length=-1,
        multiproblem_fixed_train_length=-1,
        warm_start_from_second="",
        area_value_mode="none",
        area_key_mode="none",
        num_area_layers=0,
        max_area_width=1,
        max_area_height=1,
        memory_height=1,
        gpu_automatic_mixed_precision=False,
        min_length=0,
        split_targets_chunk_length=0,
        split_targets_max_chunks=100,
        split_targets_strided_training=False,
        use_custom_ops=True,
        pack_dataset=False,
    )
    # None in t2t (a floor on the learning rate when set, see utils/learning_rate.py); typed
    # so that --hparams can set it.
    hparams.declare_type("learning_rate_minimum", float)
    return hparams


@register_hparams
def transformer_base_v1() -> HParams:
    """The paper's base model: post-norm ("none"/"dan"), noam schedule, no attention dropout."""
    hparams = basic_params1()
    hparams.norm_type = "layer"
    hparams.hidden_size = 512
    hparams.batch_size = 4096
    hparams.max_length = 256
    hparams.clip_grad_norm = 0.0
    hparams.optimizer_adam_epsilon = 1e-9
    hparams.learning_rate_schedule = "legacy"
    hparams.learning_rate_decay_scheme = "noam"
    hparams.learning_rate = 0.1
    hparams.learning_rate_warmup_steps = 4000
    hparams.initializer_gain = 1.0
    hparams.num_hidden_layers = 6
    hparams.initializer = "uniform_unit_scaling"
    hparams.weight_decay = 0.0
    hparams.optimizer_adam_beta1 = 0.9
    hparams.optimizer_adam_beta2 = 0.98
    # A dead attribute in t2t too: not a declared hparam, never read, not in values().
    hparams.num_sampled_classes = 0
    hparams.label_smoothing = 0.1
    hparams.shared_embedding_and_softmax_weights = True
    hparams.symbol_modality_num_shards = 16

    hparams.add_hparam("filter_size", 2048)
    hparams.add_hparam("num_encoder_layers", 0)
    hparams.add_hparam("num_decoder_layers", 0)
    hparams.add_hparam("num_heads", 8)
    hparams.add_hparam("attention_key_channels", 0)
    hparams.add_hparam("attention_value_channels", 0)
    hparams.add_hparam("ffn_layer", "dense_relu_dense")
    hparams.add_hparam("parameter_attention_key_channels", 0)
    hparams.add_hparam("parameter_attention_value_channels", 0)
    hparams.add_hparam("attention_dropout", 0.0)
    hparams.add_hparam("attention_dropout_broadcast_dims", "")
    hparams.add_hparam("relu_dropout", 0.0)
    hparams.add_hparam("relu_dropout_broadcast_dims", "")
    hparams.add_hparam("pos", "timing")
    hparams.add_hparam("position_features", "")
    hparams.add_hparam("nbr_decoder_problems", 1)
    hparams.add_hparam("proximity_bias", False)
    hparams.add_hparam("causal_decoder_self_attention", True)
    hparams.add_hparam("use_pad_remover", True)
    hparams.add_hparam("self_attention_type", "dot_product")
    hparams.add_hparam("conv_first_kernel", 3)
    hparams.add_hparam("attention_variables_3d", False)
    hparams.add_hparam("use_target_space_embedding", True)
    hparams.add_hparam("moe_overhead_train", 1.0)
    hparams.add_hparam("moe_overhead_eval", 2.0)
    hparams.moe_num_experts = 16
    hparams.moe_loss_coef = 1e-3
    hparams.add_hparam("overload_eval_metric_name", "")
    hparams.add_hparam("unidirectional_encoder", False)
    hparams.add_hparam("hard_attention_k", 0)
    hparams.add_hparam("gumbel_noise_weight", 0.0)
    return hparams


@register_hparams
def transformer_base_v2() -> HParams:
    """Pre-norm ("n"/"da") with attention and ReLU dropout; noam, lr 0.2, warmup 8000."""
    hparams = transformer_base_v1()
    hparams.layer_preprocess_sequence = "n"
    hparams.layer_postprocess_sequence = "da"
    hparams.layer_prepostprocess_dropout = 0.1
    hparams.attention_dropout = 0.1
    hparams.relu_dropout = 0.1
    hparams.learning_rate_warmup_steps = 8000
    hparams.learning_rate = 0.2
    return hparams


@register_hparams
def transformer_base_v3() -> HParams:
    """v2 with beta2 0.997 and the constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size schedule."""
    hparams = transformer_base_v2()
    hparams.optimizer_adam_beta2 = 0.997
    hparams.learning_rate_schedule = "constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size"
    hparams.learning_rate_constant = 2.0
    return hparams


@register_hparams
def transformer_base() -> HParams:
    """The current default: identical to transformer_base_v3."""
    return transformer_base_v3()


@register_hparams
def transformer_big() -> HParams:
    """d=1024, f=4096, 16 heads, dropout 0.3, batch 2048 per GPU."""
    hparams = transformer_base()
    hparams.hidden_size = 1024
    hparams.filter_size = 4096
    hparams.batch_size = 2048
    hparams.num_heads = 16
    hparams.layer_prepostprocess_dropout = 0.3
    return hparams


@register_hparams
def transformer_big_single_gpu() -> HParams:
    """transformer_big for one GPU: dropout 0.1, warmup 16000."""
    hparams = transformer_big()
    hparams.layer_prepostprocess_dropout = 0.1
    hparams.learning_rate_warmup_steps = 16000
    return hparams


@register_hparams
def transformer_base_single_gpu() -> HParams:
    """transformer_base for one GPU: batch 1024, constant 0.1 * warmup 16000 * rsqrt_decay."""
    hparams = transformer_base()
    hparams.batch_size = 1024
    hparams.learning_rate_schedule = "constant*linear_warmup*rsqrt_decay"
    hparams.learning_rate_constant = 0.1
    hparams.learning_rate_warmup_steps = 16000
    return hparams


def _tiny_sizes(hparams: HParams) -> HParams:
    """t2t's tiny sizes: 2 layers, d=128, f=512, 4 heads (transformer_tiny and its variants)."""
    hparams.num_hidden_layers = 2
    hparams.hidden_size = 128
    hparams.filter_size = 512
    hparams.num_heads = 4
    return hparams


@register_hparams
def transformer_tiny() -> HParams:
    """2 layers, d=128, f=512, 4 heads."""
    return _tiny_sizes(transformer_base())


@register_hparams
def transformer_small() -> HParams:
    """2 layers, d=256, f=1024, 4 heads."""
    hparams = transformer_base()
    hparams.num_hidden_layers = 2
    hparams.hidden_size = 256
    hparams.filter_size = 1024
    hparams.num_heads = 4
    return hparams


@register_hparams
def transformer_parsing_base() -> HParams:
    """WSJ parsing: d=1024, dropout 0.2, max_length 512, warmup 16000, unshared softmax.

    `learning_rate=0.05` is kept for fidelity but unused by the C*W*R*H schedule.
    """
    hparams = transformer_base()
    hparams.attention_dropout = 0.2
    hparams.layer_prepostprocess_dropout = 0.2
    hparams.max_length = 512
    hparams.learning_rate_warmup_steps = 16000
    hparams.hidden_size = 1024
    hparams.learning_rate = 0.05
    hparams.shared_embedding_and_softmax_weights = False
    return hparams


@register_hparams
def transformer_parsing_big() -> HParams:
    """WSJ parsing on transformer_big: max_length 512, warmup 4000, dropout 0.1."""
    hparams = transformer_big()
    hparams.max_length = 512
    # Dead attribute in t2t (not a declared hparam): kept so t2t scripts reading it still work.
    hparams.shared_source_target_embedding = False
    hparams.learning_rate_warmup_steps = 4000
    hparams.layer_prepostprocess_dropout = 0.1
    hparams.batch_size = 2048
    hparams.learning_rate = 0.05
    return hparams


@register_hparams
def transformer_big_enfr() -> HParams:
    """En-Fr big model: f=8192, dropout 0.1, batch 4096, unshared softmax."""
    hparams = transformer_big()
    hparams.filter_size = 8192
    hparams.layer_prepostprocess_dropout = 0.1
    hparams.batch_size = 4096
    hparams.shared_embedding_and_softmax_weights = False
    return hparams


@register_hparams
def transformer_base_multistep8() -> HParams:
    """transformer_base with gradients accumulated over 8 steps (multistep Adam)."""
    hparams = transformer_base()
    hparams.optimizer = "multistep_adam"
    hparams.optimizer_multistep_accumulate_steps = 8
    return hparams


@register_hparams
def transformer_relative() -> HParams:
    """transformer_base with relative position self-attention (Shaw et al. 2018) instead of
    the sinusoid position signal: pos=None, max_relative_position 20."""
    hparams = transformer_base()
    hparams.pos = None
    hparams.self_attention_type = "dot_product_relative"
    hparams.max_relative_position = 20
    return hparams


@register_hparams
def transformer_relative_tiny() -> HParams:
    """transformer_relative at 2 layers, d=128, f=512, 4 heads."""
    return _tiny_sizes(transformer_relative())


@register_hparams
def transformer_relative_big() -> HParams:
    """transformer_big with relative position self-attention: pos=None,
    max_relative_position 20."""
    hparams = transformer_big()
    hparams.pos = None
    hparams.self_attention_type = "dot_product_relative"
    hparams.max_relative_position = 20
    return hparams
