"""tensor2tensor's learning-rate schedules as a Keras `LearningRateSchedule`.

`learning_rate_schedule(hparams)` returns a schedule whose value at `step` (the global step t2t
reads *before* incrementing it for this update) is t2t's: the product of the factors named in
`hparams.learning_rate_schedule` ("constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size", ...),
where the factor `legacy` is the older schedule picked by `learning_rate_decay_scheme` ("noam",
"exp", "sqrt", "cosine", "piecewise", "cyclelinear10x", "none") and scaled by
`learning_rate * (0.002 if "adam" in optimizer else 1)`. A non-zero `learning_rate_minimum`
floors the result (`max(lr, learning_rate_minimum)`, t2t's meaning of that hparam).
With gradient accumulation (`optimizer_multistep_accumulate_steps = n > 0`) every factor sees
`step / n`, as t2t's `_global_step` does. Arithmetic is float32, like t2t's graph.
See T2T_REFERENCE.md §4.2.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf

from t2t_lite import hparams_support
from t2t_lite.errors import UserError
from t2t_lite.hparams import HParams

FACTORS = (
    "constant",
    "linear_warmup",
    "linear_decay",
    "cosdecay",
    "single_cycle_cos_decay",
    "multi_cycle_cos_decay",
    "rsqrt_decay",
    "rsqrt_normalized_decay",
    "exp_decay",
    "rsqrt_hidden_size",
    "legacy",
)
LEGACY_DECAY_SCHEMES = ("noam", "none", "", "exp", "piecewise", "cosine", "cyclelinear10x", "sqrt")


class LearningRateError(UserError):
    """A learning-rate setting that t2t would reject (unknown factor, missing hparam)."""


def _hparam(hparams: HParams, name: str, needed_by: str) -> Any:
    value = hparams.get(name)
    if value is None:
        raise LearningRateError(
            f"learning_rate_schedule factor {needed_by!r} needs hparam {name!r}, which is not "
            f"set; add it with --hparams or choose another schedule"
        )
    return value


def _schedule_names(hparams: HParams) -> list[str]:
    names = [n.strip() for n in hparams.learning_rate_schedule.split("*") if n.strip()]
    for name in names:
        if name not in FACTORS:
            raise LearningRateError(
                f"Unknown learning rate factor {name!r} in "
                f"learning_rate_schedule={hparams.learning_rate_schedule!r}; "
                f"known factors: {', '.join(FACTORS)}"
            )
    return names


def _factor_fn(name: str, hparams: HParams) -> Callable[[tf.Tensor], tf.Tensor]:
    """Returns `step -> factor` (float32 scalars) for one factor of the composite schedule."""
    warmup = float(hparams.learning_rate_warmup_steps)
    if name == "constant":
        value = float(hparams.learning_rate_constant)
        return lambda step: tf.constant(value, tf.float32)
    if name == "linear_warmup":
        return lambda step: tf.minimum(1.0, step / warmup)
    if name == "linear_decay":
        train_steps = float(_hparam(hparams, "train_steps", name))
        decay_steps = float(hparams.learning_rate_decay_steps)
        return lambda step: tf.minimum(1.0, tf.maximum(0.0, (train_steps - step) / decay_steps))
    if name == "cosdecay":  # OpenAI GPT: 1 during warmup, then cosine over decay_steps.
        decay_steps = float(hparams.learning_rate_decay_steps)

        def cosdecay(step):
            in_warmup = tf.cast(step <= warmup, tf.float32)
            ret = 0.5 * (1.0 + tf.cos(math.pi * step / decay_steps))
            return in_warmup * 1.0 + (1.0 - in_warmup) * ret

        return cosdecay
    if name == "single_cycle_cos_decay":
        train_steps = float(_hparam(hparams, "train_steps", name))
        if train_steps <= warmup:
            raise LearningRateError(
                "single_cycle_cos_decay cannot be used unless train_steps "
                f"({train_steps:g}) > learning_rate_warmup_steps ({warmup:g})"
            )
        return lambda step: (
            tf.cos((tf.maximum(step, warmup) - warmup) * math.pi / (train_steps - warmup)) / 2.0
            + 0.5
        )
    if name == "multi_cycle_cos_decay":
        decay_steps = float(hparams.learning_rate_decay_steps)
        return lambda step: (
            tf.cos((tf.maximum(step, warmup) - warmup) * math.pi / decay_steps) / 2.0 + 0.5
        )
    if name == "rsqrt_decay":
        return lambda step: tf.math.rsqrt(tf.maximum(step, warmup))
    if name == "rsqrt_normalized_decay":
        scale = tf.sqrt(tf.constant(warmup, tf.float32))
        return lambda step: scale * tf.math.rsqrt(tf.maximum(step, warmup))
    if name == "exp_decay":
        decay_steps = float(hparams.learning_rate_decay_steps)
        rate = float(hparams.learning_rate_decay_rate)
        staircase = bool(hparams.learning_rate_decay_staircase)

        def exp_decay(step):
            p = tf.maximum((step - warmup) / decay_steps, 0.0)
            if staircase:
                p = tf.floor(p)
            return tf.pow(rate, p)

        return exp_decay
    if name == "rsqrt_hidden_size":
        value = float(hparams.hidden_size) ** -0.5
        return lambda step: tf.constant(value, tf.float32)
    if name == "legacy":
        return _legacy_fn(hparams)
    raise LearningRateError(f"Unknown learning rate factor {name!r}")  # guarded by caller


def _legacy_decay_fn(hparams: HParams) -> Callable[[tf.Tensor], tf.Tensor]:
    """t2t's `_learning_rate_decay`: the multiplier after warmup for non-noam schemes."""
    scheme = hparams.learning_rate_decay_scheme
    warmup = float(hparams.learning_rate_warmup_steps)
    if not scheme or scheme == "none":
        return lambda step: tf.constant(1.0, tf.float32)
    if scheme == "exp":
        decay_steps = float(hparams.learning_rate_decay_steps)
        rate = float(hparams.learning_rate_decay_rate)
        staircase = bool(hparams.learning_rate_decay_staircase)

        def exp(step):
            p = (step - warmup) / decay_steps
            if staircase:
                p = tf.floor(p)
            return tf.pow(rate, p)

        return exp
    if scheme == "piecewise":
        boundaries = [float(b) for b in _hparam(hparams, "learning_rate_boundaries", scheme)]
        values = [1.0] + [float(m) for m in _hparam(hparams, "learning_rate_multiples", scheme)]
        if len(values) != len(boundaries) + 1:
            raise LearningRateError(
                "learning_rate_multiples needs exactly one value per learning_rate_boundaries "
                f"entry, got {len(values) - 1} multiples for {len(boundaries)} boundaries"
            )

        def piecewise(step):
            # tf.train.piecewise_constant: values[i] for boundaries[i-1] < step <= boundaries[i].
            index = tf.reduce_sum(tf.cast(step > tf.constant(boundaries), tf.int32))
            return tf.gather(tf.constant(values, tf.float32), index)

        return piecewise
    if scheme == "cosine":
        cycle = float(hparams.learning_rate_cosine_cycle_steps)

        def cosine(step):
            position = tf.math.floormod(step, 2.0 * cycle)
            position = cycle - tf.abs(cycle - position)
            return 0.5 * (1.0 + tf.cos(math.pi * position / cycle))

        return cosine
    if scheme == "cyclelinear10x":  # up and down by 10x every warmup_steps

        def cyclelinear10x(step):
            position = (tf.math.floormod(step, 2.0 * warmup) - warmup) / warmup
            return (1.0 - tf.abs(position) + 0.1) * 3.0

        return cyclelinear10x
    if scheme == "sqrt":
        return lambda step: 500.0 / tf.sqrt(tf.maximum(step - warmup, 1.0))
    raise LearningRateError(
        f"Unrecognized learning_rate_decay_scheme={scheme!r}; known: "
        f"{', '.join(s for s in LEGACY_DECAY_SCHEMES if s)}"
    )


def _legacy_fn(hparams: HParams) -> Callable[[tf.Tensor], tf.Tensor]:
    """t2t's `legacy_learning_rate_schedule` (noam, or exponential warmup then a decay)."""
    warmup_steps = hparams.learning_rate_warmup_steps
    warmup = float(warmup_steps)
    scale = (0.002 if "adam" in hparams.optimizer else 1.0) * float(hparams.learning_rate)
    if hparams.learning_rate_decay_scheme == "noam":
        noam_constant = 5000.0 * float(hparams.hidden_size) ** -0.5

        def noam(step):
            return noam_constant * tf.minimum(
                (step + 1.0) * warmup**-1.5, (step + 1.0) ** -0.5
            ) * scale

        return noam
    decay_fn = _legacy_decay_fn(hparams)

    def legacy(step):
        if warmup_steps:
            # exp(log(0.01) / w) ** (w - step): rises exponentially from 0.01 to 1 at step w.
            # Same float32 op order as t2t (the power amplifies the rounding of the base).
            base = tf.exp(tf.math.log(tf.constant(0.01, tf.float32)) / warmup)
            warm = tf.pow(base, warmup - step)
        else:
            warm = tf.constant(1.0, tf.float32)
        return tf.where(step < warmup, warm, decay_fn(step)) * scale

    return legacy


class T2TLearningRateSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """t2t's learning rate as a function of the global step (see module docstring).

    Call with the global step read before its increment (an int or float scalar, or a
    variable such as `optimizer.iterations`); returns a float32 scalar tensor.
    """

    def __init__(self, hparams: HParams):
        self.hparams = hparams.copy()
        self._factors = [_factor_fn(name, hparams) for name in _schedule_names(hparams)]
        self._multistep = int(
            hparams_support.hparam(hparams, "optimizer_multistep_accumulate_steps") or 0)
        # t2t's floor on the learning rate (t2t_model.optimize before t2t 1.5; declared but
        # unread in 1.15): None or 0 leaves the schedule as it is.
        self._minimum = float(hparams_support.hparam(hparams, "learning_rate_minimum") or 0.0)

    def __call__(self, step) -> tf.Tensor:
        step = tf.cast(tf.convert_to_tensor(step), tf.float32)
        if self._multistep:
            step = step / float(self._multistep)
        value = tf.constant(1.0, tf.float32)
        for factor in self._factors:
            value = value * factor(step)
        if self._minimum:
            value = tf.maximum(value, self._minimum)
        return value

    def get_config(self) -> dict:
        return {"hparams": self.hparams.to_json()}

    @classmethod
    def from_config(cls, config: dict) -> T2TLearningRateSchedule:
        return cls(HParams.from_json(config["hparams"]))


def learning_rate_schedule(hparams: HParams) -> T2TLearningRateSchedule:
    """Builds t2t's learning-rate schedule from `hparams`.

    Args:
      hparams: model hparams (`learning_rate_schedule`, `learning_rate_constant`,
        `learning_rate_warmup_steps`, `hidden_size`, ...; `train_steps` for the
        `linear_decay` and `single_cycle_cos_decay` factors).

    Returns:
      A keras LearningRateSchedule; `schedule(step)` -> float32 scalar.

    Raises:
      LearningRateError: an unknown factor or decay scheme, or a missing hparam.
    """
    return T2TLearningRateSchedule(hparams)


def short_run_warning(hparams: HParams, train_steps: int) -> str | None:
    """One line when the schedule leaves a run of `train_steps` updates almost untrained:
    the run ends before the rate peaks (inside a warmup longer than the run), or the rate
    stays under a tenth of its peak for most of the run. None otherwise.

    t2t's sets warm up over 8,000 steps (`learning_rate_warmup_steps`): a run of 400 steps
    reaches 1/20 of the peak and, on a small corpus, learns nothing. The line names the rate
    at the last step and the warmup override that fixes it (a fifth of the run, as the
    small-data example of docs/small_data.md).

    Args:
      hparams: the run's hparams (its schedule, warmup, hidden size, ...).
      train_steps: the run's last step.

    Returns:
      The warning line, or None.
    """
    if hparams.get("train_steps") is None:  # linear_decay and others read it, as in training
        hparams = hparams.copy()
        hparams.add_hparam("train_steps", train_steps)
    schedule = learning_rate_schedule(hparams)
    warmup = int(hparams.get("learning_rate_warmup_steps") or 0)
    accumulate = max(1, int(hparams_support.hparam(
        hparams, "optimizer_multistep_accumulate_steps") or 0))
    horizon = 2 * max(train_steps, warmup * accumulate)
    samples = sorted({round(horizon * i / 200) for i in range(201)} | {warmup * accumulate})
    rates = [float(schedule(step)) for step in samples]  # piecewise factors are scalar-only
    peak = max(rates)
    peak_step = samples[rates.index(peak)]
    last = float(schedule(max(0, train_steps - 1)))
    during = sorted(r for s, r in zip(samples, rates) if s < train_steps)
    if peak <= 0:
        return None
    if peak_step > train_steps and last < 0.5 * peak:
        return (f"learning rate: this run ends at step {train_steps} but the schedule peaks at "
                f"step {peak_step} ({peak:.2g}; learning_rate_warmup_steps={warmup}): the rate "
                f"reaches only {last:.2g} at the last step and the model may learn nothing; "
                "for a short run give --hparams=learning_rate_warmup_steps="
                f"{max(1, train_steps // 5)} (small data: docs/small_data.md)")
    if during and during[len(during) // 2] < 0.1 * peak:
        return (f"learning rate: the schedule keeps the rate under a tenth of its peak ({peak:.2g} "
                f"at step {peak_step}) for most of this run of {train_steps} steps ({last:.2g} at "
                f"the last step); check learning_rate_schedule={hparams.learning_rate_schedule} "
                "and its decay hparams (small data: docs/small_data.md)")
    return None
