"""Progress with a total and a rate for long work (decoding a file, averaging, datagen).

In a terminal (stderr is a tty) a tqdm bar: count/total, percentage, rate, elapsed and ETA.
Otherwise (logs, CI, pipes) a log line every `interval` seconds and one at the end, e.g.
`Decoding: 120/500 lines (24%), 3.2 lines/s, ETA 0:01:58`, so that captured output stays short.
`T2T_LITE_PROGRESS=log` forces the log lines, `off` silences both.
"""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from absl import logging

T = TypeVar("T")
# At most this long between two progress lines (heartbeat.SILENCE_SECS is the same bound for
# work that cannot count).
LOG_INTERVAL_SECS = 10.0
# Training's first time-based progress line (`FirstReport`), after the first step.
FIRST_REPORT_SECS = 30.0


def format_duration(seconds: float) -> str:
    """H:MM:SS of a non-negative duration (negative counts as 0)."""
    seconds = int(max(0, seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def style(stream: Any = None) -> str:
    """"bar" when `stream` (default stderr) is a terminal, else "log"; T2T_LITE_PROGRESS
    ("bar", "log" or "off") overrides."""
    chosen = os.environ.get("T2T_LITE_PROGRESS", "")
    if chosen in ("bar", "log", "off"):
        return chosen
    stream = stream or sys.stderr
    return "bar" if hasattr(stream, "isatty") and stream.isatty() else "log"


def status_line(desc: str, done: float, total: float | None, unit: str,
                elapsed: float) -> str:
    """The periodic log line: `desc: done/total unit (pct%), rate unit/s, ETA H:MM:SS`
    (without a total: `desc: done unit, rate unit/s`)."""
    rate = done / elapsed if elapsed > 0 else 0.0
    if not total:
        return f"{desc}: {done:g} {unit}, {rate:.3g} {unit}/s"
    eta = format_duration((total - done) / rate) if rate > 0 else "?"
    return (f"{desc}: {done:g}/{total:g} {unit} ({100 * done / total:.0f}%), "
            f"{rate:.3g} {unit}/s, ETA {eta}")


def track(items: Iterable[T], total: float | None, desc: str, unit: str = "it",
          size: Callable[[T], float] | None = None,
          interval: float = LOG_INTERVAL_SECS) -> Iterator[T]:
    """Yields `items` unchanged while showing progress.

    Args:
      items: any iterable.
      total: the amount expected in all (in `unit`), or None when unknown.
      desc: what is being done ("Decoding", "Averaging").
      unit: the unit counted ("lines", "variables").
      size: amount of one item (default 1), e.g. `len` for batches counted in lines.
      interval: seconds between log lines when not in a terminal.
    """
    mode = style()
    if mode == "off":
        yield from items
        return
    if mode == "bar":
        from tqdm import tqdm

        with tqdm(total=total, desc=desc, unit=f" {unit}", file=sys.stderr,
                  dynamic_ncols=True, leave=True) as bar:
            for item in items:
                yield item
                bar.update(size(item) if size else 1)
        return
    start = last_log = time.time()
    done = 0.0
    for item in items:
        yield item
        done += size(item) if size else 1
        now = time.time()
        if now - last_log >= interval:
            logging.info("%s", status_line(desc, done, total, unit, now - start))
            last_log = now
    elapsed = time.time() - start
    logging.info("%s: %g %s in %s (%.3g %s/s)", desc, done, unit, format_duration(elapsed),
                 done / max(elapsed, 1e-9), unit)


def first_step_line(step: int, train_steps: int, seconds: float, every: int,
                    report_after: float | None) -> str:
    """The line after a training run's first step: how long it took (tracing and compiling
    the step function: a minute and more on a loaded CPU), and when progress lines follow
    (`report_after` seconds: a time-based first report, else every `every` steps)."""
    then = f", the first after ~{report_after:.0f} s" if report_after else ""
    return (f"step {step}/{train_steps}: the first step took {seconds:.1f} s (tracing and "
            f"compiling it); progress lines every {every} steps{then}")


class FirstReport:
    """The first progress lines of a training loop: after its first step, how long that step
    took (`first_step_line`); then, unless the usual cadence logged a line meanwhile, one
    progress line `report_after` seconds later, so that a run shows its rate within its first
    minute whatever `every` is.

    Args:
      first_step: the loop's first step (the restored step + 1).
      train_steps: the last step.
      every: the usual cadence (--log_step_count_steps).
      report_after: seconds from the first step to the time-based report.
    """

    def __init__(self, first_step: int, train_steps: int, every: int,
                 report_after: float = FIRST_REPORT_SECS):
        self.first_step = first_step
        self.train_steps = train_steps
        self.every = every
        self.report_after = report_after
        self.began = time.time()
        self.report_at: float | None = None

    def after_step(self, step: int, logged: bool, timed: bool = True) -> bool:
        """Logs the first step's line at `step` == first_step; `logged`: this step wrote a
        progress line (no timed report is then needed, and any pending one is dropped).

        Returns:
          True when a timed report is now pending (the caller restarts its rate there).
        """
        if logged:
            self.report_at = None
        if step != self.first_step:
            return False
        timed = timed and not logged
        logging.info("%s", first_step_line(step, self.train_steps, time.time() - self.began,
                                           self.every, self.report_after if timed else None))
        self.report_at = time.time() + self.report_after if timed else None
        return timed

    def due(self) -> bool:
        """Whether the timed report is due now (then it is no longer pending)."""
        if self.report_at is None or time.time() < self.report_at:
            return False
        self.report_at = None
        return True


def training_eta(step: int, train_steps: int, steps_per_sec: float,
                 stops_early: bool) -> str:
    """The ETA part of the training progress line.

    A run that stops when a condition holds (the default run stops at its target accuracy)
    cannot know its last step: its line gives the time to the step budget as an upper bound
    instead of an ETA that is mostly wrong.

    Returns:
      "ETA 0:01:05", or "at most 0:23:57 to step 4000 (stops earlier at its target)".
    """
    remaining = format_duration((train_steps - step) / max(steps_per_sec, 1e-9))
    if stops_early:
        return f"at most {remaining} to step {train_steps} (stops earlier at its target)"
    return f"ETA {remaining}"
