"""Every hparam's one declaration: its meaning, the values t2t_lite accepts, and whether a
resumed run may change it.

`HPARAMS` holds one `Hparam` per name of every registered set (and t2t_lite's own), the
habit of fairseq's and flax's configs (meaning and constraints beside the name). Adding an
hparam is one entry here (plus its value in the sets of `hparams/transformer.py`, t2t's
defaults, kept as t2t wrote them); `tests/test_hparams_support.py` walks all sets x all
hparams. What reads it:

* `check_supported` (the model calls it first) and `utils/validation.check_hparams` (before
  a run writes anything, and when a tool loads a run): `choices` and the `NOT_SUPPORTED`
  values, and `check`, the `Interval` a number must lie in (each end open or closed, e.g.
  `interval("(0, 1]")`), each refused in one line naming the hparam and the interval;
* `utils/run_metadata`: `resume` says whether a resume (and eval, decode, export, attention
  of a run) may change it: `VARIABLES` shape the checkpoint's variables, `COMPUTATION` keep
  them but change what the weights compute, `SAFE` ones may change (the run card's History
  lists them);
* the run card lists the values of the hparams a resume may not change.

Kinds (`support`), as before in four tables, now views of `HPARAMS`:

* `USED`: read with t2t's meaning; name -> what it does in t2t_lite, in one line. At least
  two values are accepted (values outside t2t's own range, e.g. an unknown optimizer name, are
  refused where they are read); `tests/test_hparams_meaning.py` observes each one's effect.
* `NO_EFFECT`: t2t reads them only to choose how to compute (variable placement, a custom
  op, padding removal before the feed-forward layer, TPU host calls), with the same numbers;
  any value is accepted and changes nothing here either.
* `NOT_SUPPORTED`: name -> (the one value accepted, what t2t does with the others). The
  accepted value is that of every registered set: it turns the feature off, or t2t's
  Transformer ignores the hparam at that value too. Any other value stops the run with one
  line naming the hparam (`check_supported`), so that a t2t recipe never trains silently
  without a setting it asked for.
* `OWN`: t2t_lite's own hparams, which t2t does not have, with their default and meaning;
  `create_hparams` adds them to every set (so `--hparams` can set them and hparams.json
  records them).
"""
from __future__ import annotations

import dataclasses
import functools
import math
import re
from typing import Any

from t2t_lite.hparams import HParams, HParamsError
from t2t_lite.hparams_sets import transformer as transformer_sets

# `Hparam.support`
USED_KIND = "used"
NO_EFFECT_KIND = "no effect"
NOT_SUPPORTED_KIND = "not supported"
OWN_KIND = "own"


@dataclasses.dataclass(frozen=True)
class Interval:
    """The numbers an hparam accepts: from `low` to `high` (-inf / inf: unbounded), each end
    included (closed) or not (open). `str()` is the notation, e.g. "(0, 1]"."""
    low: float = -math.inf
    high: float = math.inf
    low_closed: bool = False
    high_closed: bool = False

    def __contains__(self, value: float) -> bool:
        above = value >= self.low if self.low_closed else value > self.low
        below = value <= self.high if self.high_closed else value < self.high
        return above and below

    def __str__(self) -> str:
        def end(bound: float) -> str:
            return "inf" if bound == math.inf else "-inf" if bound == -math.inf else f"{bound:g}"

        return (f"{'[' if self.low_closed else '('}{end(self.low)}, "
                f"{end(self.high)}{']' if self.high_closed else ')'}")

    @property
    def rule(self) -> str:
        """What a value outside it is told: "must be > 0", "must be >= 0" for an interval
        bounded on one side, "must be in (0, 1]" for one bounded on both."""
        if self.high == math.inf:
            return f"must be {'>=' if self.low_closed else '>'} {self.low:g}"
        if self.low == -math.inf:
            return f"must be {'<=' if self.high_closed else '<'} {self.high:g}"
        return f"must be in {self}"


_INTERVAL = re.compile(r"^\s*([\[(])\s*(\S+?)\s*,\s*(\S+?)\s*([\])])\s*$")


def interval(text: str) -> Interval:
    """The interval written `text`: "(0, 1]", "[0, inf)", "(-inf, 0)" ("[" / "]": closed,
    "(" / ")": open; an infinite end must be open).

    Raises:
      ValueError: `text` is not such an interval.
    """
    problem = ValueError(f"{text!r} is not an interval such as (0, 1] or [0, inf)")
    match = _INTERVAL.match(text)
    if not match:
        raise problem
    opening, low, high, closing = match.groups()
    try:
        result = Interval(float(low), float(high), opening == "[", closing == "]")
    except ValueError:
        raise problem from None
    if result.low > result.high or (math.isinf(result.low) and result.low_closed) or (
            math.isinf(result.high) and result.high_closed):
        raise problem
    return result


# `Hparam.check`s used by many hparams (None: no range).
POSITIVE, NON_NEGATIVE, UNIT_INTERVAL = interval("(0, inf)"), interval("[0, inf)"), interval(
    "[0, 1)")
# `Hparam.resume`: whether a resumed run (or a tool reading a run) may change it.
SAFE = "may change on resume"
VARIABLES = "changes the checkpoint's variables"
COMPUTATION = "changes what the trained weights compute"
_NO_DEFAULT = object()


@dataclasses.dataclass(frozen=True)
class Hparam:
    """One hparam's declaration.

    Attributes:
      doc: what it does in t2t_lite, in one line (NOT_SUPPORTED: what t2t does with the
        values t2t_lite refuses).
      support: USED_KIND, NO_EFFECT_KIND, NOT_SUPPORTED_KIND or OWN_KIND.
      check: the `Interval` of a number (POSITIVE, NON_NEGATIVE, UNIT_INTERVAL, or any
        `interval("...")`) or None.
      choices: the values accepted (None: any of the type); a NOT_SUPPORTED hparam has one.
      others: what t2t does with the values outside `choices` (USED hparams with choices).
      resume: SAFE, VARIABLES or COMPUTATION.
      default: the value of an OWN hparam (t2t's hparams take theirs from the sets).
    """
    doc: str
    support: str = USED_KIND
    check: Interval | None = None
    choices: tuple[Any, ...] | None = None
    others: str = ""
    resume: str = SAFE
    default: Any = _NO_DEFAULT

    def range_error(self, value: Any) -> str | None:
        """`check`'s rule ("must be in (0, 1]") when the number `value` lies outside it
        (None: it does not, or it is not a number)."""
        if self.check is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        return None if value in self.check else self.check.rule


def used(doc: str, **kwargs: Any) -> Hparam:
    """A USED hparam's declaration (see `Hparam`)."""
    return Hparam(doc, USED_KIND, **kwargs)


def no_effect(doc: str, **kwargs: Any) -> Hparam:
    """A NO_EFFECT hparam's declaration."""
    return Hparam(doc, NO_EFFECT_KIND, **kwargs)


def not_supported(accepted: Any, t2t_use: str, **kwargs: Any) -> Hparam:
    """A NOT_SUPPORTED hparam: the one value accepted, what t2t does with the others."""
    return Hparam(t2t_use, NOT_SUPPORTED_KIND, choices=(accepted,), **kwargs)


def own(default: Any, doc: str, **kwargs: Any) -> Hparam:
    """One of t2t_lite's own hparams: its default and meaning."""
    return Hparam(doc, OWN_KIND, default=default, **kwargs)


_FFN_ONLY = "read only by feed-forward layer types other than dense_relu_dense"
_AREA = "area attention"
_MULTIPROBLEM = "multi-problem training"
_SCHEDULED_SAMPLING = "scheduled sampling"
_SPLIT_TARGETS = "splitting long targets into chunks"
_UNREAD = "t2t's Transformer does not read it"

HPARAMS: dict[str, Hparam] = {
    # Used with t2t's meaning.
    "activation_dtype": used(
        "compute dtype of training (float32, or float16 / bfloat16 mixed precision with float32 "
        "weights; float16 adds loss scaling)",
    ),
    "attention_dropout": used(
        "dropout rate on the attention weights (training only)",
        check=UNIT_INTERVAL,
    ),
    "attention_dropout_broadcast_dims": used(
        "dimensions of [B, H, Lq, Lk] sharing one attention dropout mask",
    ),
    "attention_key_channels": used(
        "total depth of the attention queries and keys (0: hidden_size)",
        check=NON_NEGATIVE,
        resume=VARIABLES,
    ),
    "attention_value_channels": used(
        "total depth of the attention values (0: hidden_size)",
        check=NON_NEGATIVE,
        resume=VARIABLES,
    ),
    "batch_shuffle_size": used("buffer (in batches) of the training batch shuffle (0: none)"),
    "batch_size": used(
        "tokens per batch and replica (examples with use_fixed_batch_size)",
        check=POSITIVE,
    ),
    "clip_grad_norm": used(
        "clips the gradients to this global norm (0: no clipping)",
        check=NON_NEGATIVE,
    ),
    "eval_drop_long_sequences": used("eval also drops examples longer than max_length"),
    "eval_run_autoregressive": used(
        "eval logits come from greedy decoding instead of the reference targets",
    ),
    "filter_size": used(
        "width of the feed-forward layers' hidden layer",
        check=POSITIVE,
        resume=VARIABLES,
    ),
    "hidden_size": used(
        "model depth D (embeddings, attention, layer outputs)",
        check=POSITIVE,
        resume=VARIABLES,
    ),
    "initializer": used("distribution of the initial kernel and embedding weights"),
    "initializer_gain": used("scale of the initializer"),
    "label_smoothing": used("label smoothing of the training cross-entropy", check=UNIT_INTERVAL),
    "layer_postprocess_sequence": used(
        "steps after each sub-layer: a (residual), n (norm), d (dropout)",
        resume=VARIABLES,
    ),
    "layer_prepostprocess_dropout": used(
        "rate of the d steps of the pre/post-process sequences (training only)",
        check=UNIT_INTERVAL,
    ),
    "layer_prepostprocess_dropout_broadcast_dims": used(
        "dimensions sharing one mask in those d steps",
    ),
    "layer_preprocess_sequence": used(
        "steps before each sub-layer (and after each stack): n (norm), d (dropout)",
        resume=VARIABLES,
    ),
    "learning_rate": used("scale of the legacy learning-rate schedule", check=POSITIVE),
    "learning_rate_constant": used(
        "the constant factor of the learning-rate schedule",
        check=POSITIVE,
    ),
    "learning_rate_cosine_cycle_steps": used("cycle length of the legacy cosine decay"),
    "learning_rate_decay_rate": used("base of the exponential decays"),
    "learning_rate_decay_scheme": used("decay of the legacy schedule (noam, exp, cosine, ...)"),
    "learning_rate_decay_staircase": used("exponential decays in whole steps of decay_steps"),
    "learning_rate_decay_steps": used("period of the decays (exp, cosdecay, linear_decay, ...)"),
    "learning_rate_minimum": used("floor of the learning rate (None or 0: none)"),
    "learning_rate_schedule": used("the learning rate as a product of named factors"),
    "learning_rate_warmup_steps": used("steps of the learning-rate warmup", check=NON_NEGATIVE),
    "length_bucket_step": used("growth factor between the length buckets' boundaries"),
    "max_input_seq_length": used("inputs are truncated to this length (0: not truncated)"),
    "max_length": used("longest example kept in training (0: batch_size)", check=NON_NEGATIVE),
    "max_relative_position": used(
        "relative positions beyond +-this share one embedding (dot_product_relative: 2m+1 key and"
        " value embeddings per layer)",
        resume=VARIABLES,
    ),
    "max_target_seq_length": used("targets are truncated to this length (0: not truncated)"),
    "min_length": used("shortest example kept", check=NON_NEGATIVE),
    "min_length_bucket": used("first length bucket boundary"),
    "mixed_precision_optimizer_init_loss_scale": used("initial loss scale of float16 training"),
    "multiply_embedding_mode": used(
        "embeddings multiplied by sqrt(hidden_size) (sqrt_depth) or not (none)",
        resume=COMPUTATION,
    ),
    "norm_epsilon": used("epsilon of the layer norms", resume=COMPUTATION),
    "norm_type": used("the n step: layer norm (layer) or nothing (none)", resume=VARIABLES),
    "num_decoder_layers": used(
        "decoder layers (0: num_hidden_layers)",
        check=NON_NEGATIVE,
        resume=VARIABLES,
    ),
    "num_encoder_layers": used(
        "encoder layers (0: num_hidden_layers)",
        check=NON_NEGATIVE,
        resume=VARIABLES,
    ),
    "num_heads": used("attention heads", check=POSITIVE, resume=COMPUTATION),
    "num_hidden_layers": used("encoder and decoder layers", check=POSITIVE, resume=VARIABLES),
    "optimizer": used(
        "the optimizer (adam, multistep_adam, adafactor, momentum, sgd)",
        resume=VARIABLES,
    ),
    "optimizer_adafactor_beta1": used("Adafactor's momentum (0: none)"),
    "optimizer_adafactor_beta2": used("Adafactor's second-moment decay (decay_type adam)"),
    "optimizer_adafactor_clipping_threshold": used("Adafactor's update clipping (RMS)"),
    "optimizer_adafactor_decay_type": used("Adafactor's second-moment decay: pow or adam"),
    "optimizer_adafactor_factored": used("Adafactor factors the second moments of matrices"),
    "optimizer_adafactor_memory_exponent": used("exponent of Adafactor's pow decay"),
    "optimizer_adafactor_multiply_by_parameter_scale": used(
        "Adafactor scales updates by the weights' RMS",
    ),
    "optimizer_adam_beta1": used("Adam's first-moment decay"),
    "optimizer_adam_beta2": used("Adam's second-moment decay"),
    "optimizer_adam_epsilon": used("Adam's epsilon"),
    "optimizer_momentum_momentum": used("momentum of optimizer=momentum"),
    "optimizer_momentum_nesterov": used("Nesterov momentum for optimizer=momentum"),
    "optimizer_multistep_accumulate_steps": used(
        "micro-batches per update of multistep_adam",
        check=NON_NEGATIVE,
    ),
    "overload_eval_metric_name": used("name of the eval metrics instead of the problem's"),
    "pack_dataset": used("packs examples into rows of max_length on the fly"),
    "pos": used(
        "sinusoidal position signal added to the embeddings (timing) or none",
        resume=COMPUTATION,
    ),
    "relu_dropout": used(
        "dropout rate inside the feed-forward layers (training only)",
        check=UNIT_INTERVAL,
    ),
    "relu_dropout_broadcast_dims": used("dimensions sharing one mask in that dropout"),
    "sampling_keep_top_k": used("sampling draws among the k most likely ids (-1: all)"),
    "sampling_method": used("greedy decoding takes the argmax or samples (random)"),
    "sampling_temp": used("temperature of sampling (0: argmax)"),
    "self_attention_type": used(
        "encoder/decoder self-attention: dot_product, or dot_product_relative (Shaw et al. "
        "relative positions, max_relative_position)",
        choices=("dot_product", "dot_product_relative"),
        others="dot_product_relative_v2, local and other self-attention types",
        resume=VARIABLES,
    ),
    "shared_embedding": used("inputs and targets share one embedding matrix", resume=VARIABLES),
    "shared_embedding_and_softmax_weights": used(
        "the target embedding is also the softmax matrix (equal vocab sizes)",
        resume=VARIABLES,
    ),
    "summarize_grads": used(
        "writes each applied gradient's histogram and norm (gradients/*, gradient_norm/*, "
        "global_norm/clipped_gradient_norm) at progress steps",
    ),
    "summarize_vars": used(
        "writes each trainable variable's histogram (training_variables/*) at progress steps",
    ),
    "symbol_dropout": used(
        "rate at which input and target ids are replaced by padding (training)",
        check=UNIT_INTERVAL,
    ),
    "symbol_modality_num_shards": used(
        "row shards of the embedding matrices",
        check=POSITIVE,
        resume=VARIABLES,
    ),
    "use_fixed_batch_size": used("batch_size counts examples instead of tokens"),
    "use_target_space_embedding": used(
        "adds the target space's embedding to the encoder input",
        resume=VARIABLES,
    ),
    "vocab_divisor": used("vocab sizes rounded up to a multiple of this", resume=VARIABLES),
    "weight_decay": used(
        "L2 penalty on the weights added to the training loss",
        check=NON_NEGATIVE,
    ),
    # t2t reads them only to choose how to compute: any value, the same numbers.
    "add_relative_to_values": no_effect(
        "read only by relative attention types other than dot_product_relative (which always adds"
        " the value embeddings)",
    ),
    "heads_share_relative_embedding": no_effect(
        "read only by relative attention types other than dot_product_relative (whose tables all "
        "heads share)",
    ),
    "daisy_chain_variables": no_effect("places variables across GPUs"),
    "use_custom_ops": no_effect("packs pack_dataset's examples with a custom op"),
    "use_pad_remover": no_effect("removes padding before the feed-forward layers (same numbers)"),
    "tpu_enable_host_call": no_effect("writes TPU summaries through a host call"),
    # Not supported: the one value accepted, and what t2t does with the others.
    "area_key_mode": not_supported("none", _AREA),
    "area_value_mode": not_supported("none", _AREA),
    "attention_variables_3d": not_supported(False, "3-d attention variables"),
    "causal_decoder_self_attention": not_supported(
        True,
        "a decoder attending to later positions too",
    ),
    "compress_steps": not_supported(0, _UNREAD),
    "conv_first_kernel": not_supported(3, _FFN_ONLY),
    "dropout": not_supported(0.2, _UNREAD, check=UNIT_INTERVAL),
    "factored_logits": not_supported(False, "factored softmax logits"),
    "ffn_layer": not_supported(
        "dense_relu_dense",
        "other feed-forward layers (conv, sru, moe, ...)",
        resume=VARIABLES,
    ),
    "force_full_predict": not_supported(False, "decoding without the fast cached path"),
    "gpu_automatic_mixed_precision": not_supported(
        False,
        "TF1 mixed precision; use activation_dtype",
    ),
    "grad_noise_scale": not_supported(0.0, "gradient noise"),
    "gumbel_noise_weight": not_supported(0.0, "Gumbel noise in hard attention"),
    "hard_attention_k": not_supported(0, "hard attention"),
    "kernel_height": not_supported(3, _UNREAD),
    "kernel_width": not_supported(1, _UNREAD),
    "max_area_height": not_supported(1, _AREA),
    "max_area_width": not_supported(1, _AREA),
    "memory_height": not_supported(1, _AREA),
    "mixed_precision_optimizer_loss_scaler": not_supported(
        "exponential",
        "float16 without loss scaling",
    ),
    "mlperf_mode": not_supported(False, "MLPerf logging and stopping"),
    "moe_hidden_sizes": not_supported("2048", _FFN_ONLY),
    "moe_k": not_supported(2, _FFN_ONLY),
    "moe_loss_coef": not_supported(0.001, _FFN_ONLY),
    "moe_num_experts": not_supported(16, _FFN_ONLY),
    "moe_overhead_eval": not_supported(2.0, _FFN_ONLY),
    "moe_overhead_train": not_supported(1.0, _FFN_ONLY),
    "multiproblem_fixed_train_length": not_supported(-1, _MULTIPROBLEM),
    "multiproblem_label_weight": not_supported(0.5, _MULTIPROBLEM),
    "multiproblem_max_input_length": not_supported(-1, _MULTIPROBLEM),
    "multiproblem_max_target_length": not_supported(-1, _MULTIPROBLEM),
    "multiproblem_mixing_schedule": not_supported("constant", _MULTIPROBLEM),
    "multiproblem_per_task_threshold": not_supported("", _MULTIPROBLEM),
    "multiproblem_reweight_label_loss": not_supported(False, _MULTIPROBLEM),
    "multiproblem_schedule_max_examples": not_supported(10000000.0, _MULTIPROBLEM),
    "multiproblem_schedule_threshold": not_supported(0.5, _MULTIPROBLEM),
    "multiproblem_target_eval_only": not_supported(False, _MULTIPROBLEM),
    "multiproblem_vocab_size": not_supported(-1, _MULTIPROBLEM),
    "nbr_decoder_problems": not_supported(1, "several decoder problems"),
    "no_data_parallelism": not_supported(False, _UNREAD),
    "num_area_layers": not_supported(0, _AREA),
    "optimizer_zero_grads": not_supported(False, "zeroing gradients of unused variables"),
    "pad_batch": not_supported(False, "padding the last batch to the full batch size"),
    "parameter_attention_key_channels": not_supported(0, _FFN_ONLY),
    "parameter_attention_value_channels": not_supported(0, _FFN_ONLY),
    "position_features": not_supported("", _UNREAD),
    "prepend_mode": not_supported("none", "inputs prepended to the targets (decoder-only models)"),
    "pretrained_model_dir": not_supported(
        "",
        "a pretrained model directory; use --warm_start_from",
    ),
    "proximity_bias": not_supported(False, "a self-attention bias favouring nearby positions"),
    "scheduled_sampling_gold_mixin_prob": not_supported(0.5, _SCHEDULED_SAMPLING),
    "scheduled_sampling_method": not_supported("parallel", _SCHEDULED_SAMPLING),
    "scheduled_sampling_num_passes": not_supported(1, _SCHEDULED_SAMPLING),
    "scheduled_sampling_prob": not_supported(0.0, _SCHEDULED_SAMPLING),
    "scheduled_sampling_warmup_schedule": not_supported("exp", _SCHEDULED_SAMPLING),
    "scheduled_sampling_warmup_steps": not_supported(50000, _SCHEDULED_SAMPLING),
    "split_targets_chunk_length": not_supported(0, _SPLIT_TARGETS),
    "split_targets_max_chunks": not_supported(100, _SPLIT_TARGETS),
    "split_targets_strided_training": not_supported(False, _SPLIT_TARGETS),
    "split_to_length": not_supported(0, "splitting long examples at datagen"),
    "unidirectional_encoder": not_supported(False, "an encoder with causal self-attention"),
    "video_num_input_frames": not_supported(1, "video problems"),
    "video_num_target_frames": not_supported(1, "video problems"),
    "warm_start_from_second": not_supported("", "a second warm-start checkpoint"),
    "weight_dtype": not_supported("float32", "bfloat16 weights (TPU)"),
    "weight_noise": not_supported(0.0, "weight noise"),
    # t2t_lite's own (t2t has no such hparam): default and meaning.
    "use_fused_kernels": own(
        True,
        "the hand-written forward/backward kernels of t2t_lite.layers.fused_ops (layer norm, "
        "relu + dropout, attention softmax + dropout + matmul, chunked softmax loss) and Adam's "
        "one-kernel update (ResourceApplyAdam, t2t's TF1 kernel); false: plain TensorFlow ops "
        "differentiated by autodiff, with the same dropout masks, and Keras' Adam",
    ),
    "sampling_keep_top_p": own(
        1.0,
        "nucleus sampling: with sampling_method=random, the draw is among the most likely ids "
        "whose probability (after sampling_temp and sampling_keep_top_k) first reaches p "
        "(1.0: all)",
        check=interval("(0, 1]"),
    ),
}


def _kind(support: str) -> dict[str, Hparam]:
    return {name: h for name, h in HPARAMS.items() if h.support == support}


# The four kinds as tables (name -> meaning, or (value, meaning)), read by the tests and docs.
USED: dict[str, str] = {name: h.doc for name, h in _kind(USED_KIND).items()}
NO_EFFECT: dict[str, str] = {name: h.doc for name, h in _kind(NO_EFFECT_KIND).items()}
NOT_SUPPORTED: dict[str, tuple[Any, str]] = {
    name: (h.choices[0], h.doc) for name, h in _kind(NOT_SUPPORTED_KIND).items()}
OWN: dict[str, tuple[Any, str]] = {name: (h.default, h.doc)
                                   for name, h in _kind(OWN_KIND).items()}
# USED hparams of which t2t_lite implements only some of t2t's values: name -> (the values
# accepted, what t2t does with the others). `check_supported` refuses the others by name.
SUPPORTED_VALUES: dict[str, tuple[tuple[Any, ...], str]] = {
    name: (h.choices, h.others) for name, h in _kind(USED_KIND).items() if h.choices}


def names_with(check: str | None = None, resume: str | None = None) -> tuple[str, ...]:
    """The declared hparams with this `check` (range) or this `resume` rule, in table order."""
    return tuple(name for name, h in HPARAMS.items()
                 if (check is None or h.check == check)
                 and (resume is None or h.resume == resume))


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


def default(name: str) -> Any:
    """The one default of hparam `name`: what `hparam` gives for a set that lacks it.

    Raises:
      KeyError: `name` is not declared by `basic_params1`, `transformer_base_v1` or `OWN`.
    """
    return _declared_values()[name]


def check_range(name: str, value: Any) -> None:
    """Refuses a value of hparam `name` outside its declared interval (`Hparam.check`), for
    callers holding one value rather than a run's hparams (`validation.check_hparams`).

    Raises:
      HParamsError: "hparams sampling_keep_top_p=1.5: must be in (0, 1]".
    """
    declared = HPARAMS.get(name)
    rule = declared.range_error(value) if declared is not None else None
    if rule:
        raise HParamsError(f"hparams {name}={value!r}: {rule}")
