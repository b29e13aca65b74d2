"""Stopping a diverged training run before it writes a non-finite checkpoint.

The training step records, on the device, the first global step whose loss or gradient norm
is not finite (`DivergenceRecord.record`, a few scalar ops inside the compiled step). The
host reads the record only where it already waits for the device (progress lines,
evaluations, checkpoint saves) and checks the weights before every save, so a run that
diverges stops with one line before any non-finite checkpoint is written, and the last good
checkpoints are never rotated out by bad ones.
"""
from __future__ import annotations

import tensorflow as tf

from t2t_lite.errors import UserError

# Which value was non-finite (index 1 of the record).
_LOSS, _GRAD_NORM = 1, 2


class TrainingDiverged(UserError):
    """Training produced a non-finite loss, gradient norm or weight."""

    def __init__(self, problem: str, last_checkpoint: str | None):
        kept = (f"the last good checkpoint {last_checkpoint} is kept" if last_checkpoint
                else "no checkpoint was written")
        super().__init__(
            f"training diverged: {problem}; stopped without saving ({kept}); lower the "
            "learning rate (--hparams=learning_rate_constant=...) or raise the warmup, then "
            "rerun to resume from the last good checkpoint")


class DivergenceRecord:
    """The first non-finite step of a run: (global step, which value, the value), on device.

    Create it under the strategy's scope (its variables are mirrored like the global step).
    """

    def __init__(self):
        aggregation = tf.VariableAggregation.ONLY_FIRST_REPLICA
        self.step_and_kind = tf.Variable([-1, 0], dtype=tf.int64, trainable=False,
                                         name="first_non_finite", aggregation=aggregation)
        self.value = tf.Variable(0.0, dtype=tf.float32, trainable=False,
                                 name="first_non_finite_value", aggregation=aggregation)

    def record(self, step: tf.Tensor, loss: tf.Tensor, grad_norm: tf.Tensor) -> None:
        """Records `step` if it is the first with a non-finite value (graph ops only).

        Args:
          step: int64 scalar, the global step this training step completes.
          loss: float scalar, the step's global loss.
          grad_norm: float scalar, the step's global gradient norm (before clipping).
        """
        loss = tf.cast(loss, tf.float32)
        grad_norm = tf.cast(grad_norm, tf.float32)
        loss_bad = tf.logical_not(tf.math.is_finite(loss))
        bad = tf.logical_or(loss_bad, tf.logical_not(tf.math.is_finite(grad_norm)))
        first = tf.logical_and(bad, self.step_and_kind[0] < 0)
        kind = tf.where(loss_bad, tf.constant(_LOSS, tf.int64), tf.constant(_GRAD_NORM, tf.int64))
        self.step_and_kind.assign(
            tf.where(first, tf.stack([tf.cast(step, tf.int64), kind]), self.step_and_kind))
        self.value.assign(tf.where(first, tf.where(loss_bad, loss, grad_norm), self.value))

    def problem(self) -> str | None:
        """"the loss is nan at step 7" (host read), or None while every step was finite."""
        step, kind = (int(x) for x in self.step_and_kind.numpy())
        if step < 0:
            return None
        name = "loss" if kind == _LOSS else "gradient norm"
        return f"the {name} is {float(self.value.numpy())} at step {step}"


@tf.function
def _all_finite(variables: list) -> tf.Tensor:
    return tf.reduce_all([tf.reduce_all(tf.math.is_finite(v)) for v in variables])


def all_finite(variables: list) -> bool:
    """Whether every float variable holds finite values only (one device reduction).

    Args:
      variables: tf.Variables of any shape (integer ones are skipped).
    """
    floats = [v for v in variables if tf.as_dtype(v.dtype).is_floating]
    return bool(_all_finite(floats)) if floats else True
