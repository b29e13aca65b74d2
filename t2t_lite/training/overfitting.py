"""A hint when the model starts to overfit: the dev loss rises while the training loss falls.

The rule: at an evaluation, the dev loss rose at each of the last two evaluations (three
evaluations, each dev loss above the one before) while the training loss fell over the same
stretch (each evaluation's training loss below the one before). The training loss of an
evaluation is the mean of the progress lines' losses since the evaluation before it (each of
those is the mean over its own steps), so that one noisy batch decides nothing.

Then one warning line names the best evaluation so far (lowest dev loss, the earliest of
equal ones), whether its checkpoint is still in the run folder, and the flags that would have
kept it: `--keep_best_checkpoints` (the best checkpoints in output_dir/best/) and t2t's early
stopping (`--eval_early_stopping_steps`, which stops training when the dev loss no longer
improves), leaving out the ones the run already has. It is said once per best step: a dev
loss that goes on rising says nothing new; a new best and a later rise say it again.

The watch keeps its history in memory: a resumed run starts it afresh.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence

from absl import logging


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """One evaluation: its global step, the dev loss, and the training loss before it (the
    mean of the progress lines' losses since the evaluation before; None: no line yet)."""
    step: int
    dev_loss: float
    training_loss: float | None


def is_overfitting(history: Sequence[Evaluation]) -> bool:
    """Whether the dev loss rose at each of the last two evaluations while the training loss
    fell at each of them.

    Args:
      history: the evaluations, oldest first.

    Returns:
      False with fewer than three evaluations or a training loss unknown among the last three.
    """
    if len(history) < 3:
        return False
    a, b, c = history[-3:]
    if None in (a.training_loss, b.training_loss, c.training_loss):
        return False
    return (a.dev_loss < b.dev_loss < c.dev_loss
            and a.training_loss > b.training_loss > c.training_loss)


def best_evaluation(history: Sequence[Evaluation]) -> Evaluation:
    """The evaluation of lowest dev loss (the earliest of equal ones)."""
    return min(history, key=lambda e: (e.dev_loss, e.step))


def hint_line(history: Sequence[Evaluation], checkpoint: str | None, eval_every: int,
              keep_best: int = 0, early_stopping_steps: int | None = None) -> str:
    """The warning line of an overfitting run (see the module docstring).

    Args:
      history: the evaluations, oldest first (`is_overfitting(history)` holds).
      checkpoint: the best evaluation's checkpoint prefix if it is still on disk, else None.
      eval_every: steps between evaluations (the early stopping window suggested is twice it).
      keep_best: --keep_best_checkpoints of the run (0: not set).
      early_stopping_steps: --eval_early_stopping_steps of the run (None: not set).
    """
    last = history[-3:]
    best = best_evaluation(history)
    dev = " -> ".join(f"{e.dev_loss:.4g}" for e in last)
    training = " -> ".join(f"{e.training_loss:.4g}" for e in last)
    line = (f"The model may be overfitting: dev loss rose at two evaluations in a row ({dev} "
            f"at steps {last[0].step}-{last[-1].step}) while training loss fell ({training}). "
            f"Best so far: dev loss {best.dev_loss:.4g} at step {best.step}")
    if checkpoint:
        line += f" ({checkpoint}; decode it with --checkpoint_path={checkpoint})"
    else:
        line += " (its checkpoint is no longer kept: --keep_checkpoint_max)"
    keep = []
    if keep_best:
        keep.append(f"--keep_best_checkpoints={keep_best} keeps it in "
                    "output_dir/best (decode with --checkpoint_path=output_dir/best)")
    else:
        keep.append("--keep_best_checkpoints=1 keeps the best checkpoint in output_dir/best")
    if early_stopping_steps:
        keep.append(f"--eval_early_stopping_steps={early_stopping_steps} stops the run when "
                    "its metric no longer improves")
    else:
        keep.append(f"--eval_early_stopping_steps={2 * eval_every} (t2t's early stopping, "
                    "--eval_early_stopping_metric=loss) stops training when the dev loss no "
                    "longer improves")
    return line + ". " + "; ".join(keep) + "."


class OverfittingWatch:
    """Collects a training run's losses and says `hint_line` when `is_overfitting` first holds
    for a best step.

    Args:
      output_dir: the run folder (where the best step's checkpoint `ckpt-<step>` is looked for).
      eval_every: steps between evaluations.
      checkpoint_exists: prefix -> whether its checkpoint is on disk (default: its .index file).
    """

    def __init__(self, output_dir: str, eval_every: int,
                 checkpoint_exists: Callable[[str], bool] | None = None):
        self.output_dir = output_dir
        self.eval_every = eval_every
        self.keep_best = 0
        self.early_stopping_steps: int | None = None
        self.history: list[Evaluation] = []
        self._losses: list[float] = []  # progress lines' losses since the last evaluation
        self._last_loss: float | None = None
        self._said_for: int | None = None  # the best step the hint was given for
        self._exists = checkpoint_exists or (lambda prefix: os.path.exists(prefix + ".index"))

    def selection(self, keep_best: int = 0, early_stopping_steps: int | None = None) -> None:
        """The run's own --keep_best_checkpoints / --eval_early_stopping_steps (the hint then
        says what they do instead of suggesting them)."""
        self.keep_best = keep_best or 0
        self.early_stopping_steps = early_stopping_steps or None

    def training_loss(self, loss: float) -> None:
        """A progress line's training loss (the mean over its steps)."""
        self._losses.append(float(loss))
        self._last_loss = float(loss)

    def evaluation(self, step: int, dev_loss: float, say: bool = False) -> str | None:
        """Records an evaluation; returns the hint line when it is due (and, with `say`, logs
        it as a warning), else None."""
        losses, self._losses = self._losses, []
        training = sum(losses) / len(losses) if losses else self._last_loss
        self.history.append(Evaluation(int(step), float(dev_loss), training))
        if not is_overfitting(self.history):
            return None
        best = best_evaluation(self.history)
        if best.step == self._said_for:
            return None
        self._said_for = best.step
        prefix = os.path.join(self.output_dir, f"ckpt-{best.step}")
        line = hint_line(self.history, prefix if self._exists(prefix) else None,
                         self.eval_every, self.keep_best, self.early_stopping_steps)
        if say:
            logging.warning("%s", line)
        return line
