"""t2t-avg-all: `run.py --mode=average --output_dir=RUN [--n=8] [--avg_output_dir=RUN/avg]`;
`--average_best=N` (or `--checkpoint_path=RUN/best --n=N`) averages the N best checkpoints
that `--keep_best_checkpoints` kept.

Reads the averaging flags and runs `t2t_lite.training.avg_checkpoints`.
"""
from __future__ import annotations

import os

from t2t_lite.errors import UserError, one_line
from t2t_lite.training import keep_best
from t2t_lite.training.avg_checkpoints import (
    average_checkpoints,
    average_newest,
    average_tensors,
)
from t2t_lite.utils import checkpoint_guard, run_metadata, validation


def main(flags) -> None:
    """`run.py --mode=average --output_dir=RUN [--n=8 | --average_best=N]
    [--checkpoint_path=DIR] [--avg_output_dir=RUN/avg]`.

    Args:
      flags: absl FLAGS with `output_dir`, `n`, `avg_output_dir`, `average_best`,
        `checkpoint_path`.
    """
    average_best = getattr(flags, "average_best", 0) or 0
    source = getattr(flags, "checkpoint_path", None) or None
    if average_best:
        if not flags.output_dir and not source:
            raise UserError("--average_best needs --output_dir=<training run directory>")
        source = source or os.path.join(flags.output_dir, keep_best.BEST_DIR)
    if source and not os.path.isdir(source):
        raise UserError(f"--checkpoint_path={source}: --mode=average reads a folder of "
                        "checkpoints (e.g. $RUN/best); no such directory")
    run_dir = flags.output_dir or (os.path.dirname(source.rstrip("/")) if source else None)
    if not run_dir:
        raise UserError("--mode=average needs --output_dir=<training run directory>")
    avg_dir = flags.avg_output_dir or os.path.join(run_dir, "avg")
    inputs = {"output_dir": run_dir, **({"checkpoint_path": source} if source else {})}
    validation.check_output_not_input("avg_output_dir", avg_dir, inputs)
    validation.check_output_dir("avg_output_dir", avg_dir)
    validation.check_writable_dir("avg_output_dir", avg_dir)
    n = average_best or flags.n
    # The run's record is checked as decode checks it: no hand-edited hparams.json, no
    # changed vocabulary (the average carries the record on).
    run_metadata.read_hparams_json(os.path.join(run_dir, "hparams.json"))
    run_metadata.check_recorded_vocab(run_dir, "average")
    try:
        best = keep_best.ranked(source) if source else []
        if source and best:
            # The n best by their metric, averaged oldest first (the newest gives the step).
            paths = sorted(best[:n], key=checkpoint_guard.step_of)
            values = average_tensors(paths)
        elif average_best:
            raise ValueError(f"{source} holds no best_checkpoints.json: train with "
                             "--keep_best_checkpoints=N first")
        else:
            paths, values = average_newest(source or flags.output_dir, n)
        prefix = average_checkpoints(paths, avg_dir, values)
    except ValueError as e:
        raise UserError(one_line(e)) from e
    print(f"Averaged {len(paths)} checkpoints: {', '.join(os.path.basename(p) for p in paths)}")
    print(f"Wrote {prefix}")
