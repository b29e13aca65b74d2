"""t2t-trainer's early stopping (`--eval_early_stopping_steps`, `_metric`, `_metric_delta`,
`_metric_minimize`) with the rule of t2t's `metrics_hook.EarlyStoppingHook`.

t2t's rule (`has_metric_plateaued`), which this module follows where it differs from the flags'
help text ("stop when the metric has not decreased for N steps"):

* the reference is the value of the last evaluation at least N steps before the newest one
  (not the best value so far); training stops when no evaluation from the reference on
  improved on it by `delta` or more (strictly: every improvement < delta). So with
  delta <= 0 t2t never stops (the reference's own improvement, 0, is not < 0);
* `--eval_early_stopping_metric_minimize` alone gives the direction (default True: a BLEU or
  accuracy metric needs `--noeval_early_stopping_metric_minimize`, as in t2t);
* the check runs after each evaluation, with at least two evaluations and one of them N
  steps or more before the newest.

t2t 1.15 applies that hook only to its distributed schedules (`train` beside a separate
evaluator, reading `output_dir/eval_continuous`); in its local `train_and_evaluate` it
passed the flags to tf.contrib.learn's ValidationMonitor (best value, delta ignored), which
does not exist on TensorFlow 2, and `continuous_train_and_eval` ignores them. t2t_lite
applies the hook's rule to every train_and_eval schedule.

The metric's history (step, value as float32, as in the event files t2t's hook reads) is the
run's state, `output_dir/early_stopping.json` (written atomically), so a resumed run goes on
with the evaluations before it, as t2t's hook reads them from the event files.
"""
from __future__ import annotations

import json
import os
import struct
from collections.abc import Sequence
from typing import Any

from t2t_lite import file_io
from t2t_lite.errors import UserError, one_line

STATE_FILE = "early_stopping.json"
# Decoding metrics of train_eval_and_decode, by their --metrics / lower-case names.
DECODE_METRIC_NAMES = {"bleu": "BLEU", "sacrebleu": "sacreBLEU", "chrf": "chrF2",
                       "chrf++": "chrF2++", "ter": "TER"}


def has_metric_plateaued(steps: Sequence[int], values: Sequence[float], num_steps: int,
                         delta: float, decrease: bool = True) -> bool:
    """t2t's `metrics_hook.has_metric_plateaued`: whether no value since the last one at least
    `num_steps` before the newest improved on that one by `delta` or more.

    Args:
      steps: global steps of the evaluations, ascending.
      values: the metric at those steps.
      num_steps: --eval_early_stopping_steps (> 0).
      delta: --eval_early_stopping_metric_delta.
      decrease: --eval_early_stopping_metric_minimize (improving = decreasing).

    Returns:
      True when training should stop.
    """
    if num_steps <= 0:
        raise ValueError(f"--eval_early_stopping_steps={num_steps}: must be > 0")
    if len(steps) < 2:
        return False
    old_enough = [s for s in steps if s <= steps[-1] - num_steps]
    if not old_enough:
        return False
    start = len(old_enough) - 1
    improvements = [(values[start] - v) if decrease else (v - values[start])
                    for v in values[start:]]
    return all(improvement < delta for improvement in improvements)


def as_float32(value: float) -> float:
    """`value` rounded to float32, as TensorBoard's event files hold scalars and t2t's hook
    reads them back (so that a comparison with delta decides as t2t's does)."""
    return struct.unpack("f", struct.pack("f", float(value)))[0]


def resolve_metric(name: str, available: Sequence[str]) -> str:
    """The result key of metric `name`: itself, a decoding metric by its --metrics name
    ("bleu" -> "BLEU", "chrf" -> "chrF2"), or the one eval metric whose last part it is
    ("accuracy" -> "metrics-<problem>/targets/accuracy").

    Raises:
      ValueError: none or several match (naming the available ones).
    """
    if name in available:
        return name
    decode = DECODE_METRIC_NAMES.get(name.lower())
    if decode in available:
        return decode
    tails = [a for a in available if a.rsplit("/", 1)[-1] == name]
    if len(tails) == 1:
        return tails[0]
    raise ValueError(f"{name!r} is {'ambiguous' if tails else 'not a metric of this run'}; "
                     f"use one of {', '.join(sorted(available))}")


def lower_is_better(metric: str) -> bool:
    """Whether smaller values of `metric` are better: losses and TER."""
    return "loss" in metric.lower() or metric in ("TER", "ter")


def read_state(output_dir: str) -> dict[str, Any]:
    """The early-stopping state of a run, `output_dir/early_stopping.json` ({"history": {}}
    when there is none).

    Returns:
      {"history": {metric: [[step, value], ...]}, ...}.

    Raises:
      UserError: the file does not parse (junk bytes, cut short) or is not such a state,
        naming the file.
    """
    path = os.path.join(output_dir, STATE_FILE)
    if not os.path.isfile(path):
        return {"history": {}}
    advice = "remove it to start the early-stopping history afresh"
    try:
        with open(path, encoding="utf-8") as f:
            state = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{path} does not parse ({one_line(e)}); {advice}") from e
    history = state.setdefault("history", {}) if isinstance(state, dict) else None
    if not isinstance(history, dict) or not all(
            isinstance(entries, list) and all(
                isinstance(entry, list) and len(entry) == 2
                and all(isinstance(x, int | float) for x in entry) for entry in entries)
            for entries in history.values()):
        raise UserError(f"{path} is not an early-stopping history ({{\"history\": {{metric: "
                        f"[[step, value], ...]}}}}); {advice}")
    return state


class EarlyStopping:
    """The early-stopping rule of one run, its state in `output_dir/early_stopping.json`.

    Args:
      output_dir: the run's directory.
      metric: the result key to watch (after `resolve_metric`).
      num_steps: --eval_early_stopping_steps.
      delta: --eval_early_stopping_metric_delta.
      minimize: --eval_early_stopping_metric_minimize.
    """

    def __init__(self, output_dir: str, metric: str, num_steps: int, delta: float,
                 minimize: bool):
        self.output_dir = output_dir
        self.metric = metric
        self.num_steps = num_steps
        self.delta = delta
        self.minimize = minimize
        self.path = os.path.join(output_dir, STATE_FILE)
        self.state = self._read()
        self.stop_message: str | None = None

    def _read(self) -> dict[str, Any]:
        return read_state(self.output_dir)

    @property
    def history(self) -> list[tuple[int, float]]:
        """(step, value) of each evaluation of the metric so far, ascending steps."""
        return [(int(s), float(v)) for s, v in self.state["history"].get(self.metric, [])]

    def best(self) -> tuple[int, float] | None:
        """(step, value) of the best evaluation so far (the earliest of equal ones)."""
        history = self.history
        if not history:
            return None
        sign = 1 if self.minimize else -1
        return min(history, key=lambda sv: (sign * sv[1], sv[0]))

    def update(self, step: int, results: dict[str, float]) -> bool:
        """Adds the evaluation at `step`, saves the state, applies t2t's rule.

        An evaluation at or before a step already in the history replaces the history from
        there (a run resumed from an older checkpoint evaluates those steps again).

        Returns:
          True when training should stop (then `stop_message` says why, in one line).
        """
        if self.metric not in results:
            return False
        history = [(s, v) for s, v in self.history if s < step]
        history.append((int(step), as_float32(results[self.metric])))
        self.state["history"][self.metric] = [[s, v] for s, v in history]
        steps, values = zip(*history)
        stop = has_metric_plateaued(steps, values, self.num_steps, self.delta, self.minimize)
        best_step, best_value = self.best()
        self.state["best"] = {"metric": self.metric, "step": best_step, "value": best_value}
        if stop:
            self.stop_message = (
                f"Early stopping at step {step}: {self.metric} improved by less than "
                f"{self.delta:g} over {self.num_steps} steps; best {best_value:.6g} at step "
                f"{best_step}")
            self.state["stopped"] = {"step": int(step), "metric": self.metric,
                                     "best_value": best_value, "best_step": best_step}
        file_io.atomic_write(self.path, json.dumps(self.state, indent=1) + "\n")
        return stop

    def run_card_values(self) -> dict[str, Any]:
        """The run card's "early stopping" section."""
        best = self.best()
        values: dict[str, Any] = {
            "metric": self.metric, "steps": self.num_steps, "delta": self.delta,
            "minimize": self.minimize, "evaluations": len(self.history)}
        if best is not None:
            values.update({"best step": best[0], "best value": best[1]})
        stopped = self.state.get("stopped")
        values["stopped at step"] = stopped["step"] if stopped and self.stop_message else None
        return values
