"""t2t-avg-all: `run.py --mode=average --output_dir=RUN [--n=8] [--avg_output_dir=RUN/avg]`;
`--average_best=N` (or `--checkpoint_path=RUN/best --n=N`) averages the N best checkpoints
that `--keep_best_checkpoints` kept.

Reads the averaging flags and runs `t2t_lite.training.avg_checkpoints`.
"""
from __future__ import annotations

import os

from t2t_lite.errors import UserError, one_line
from t2t_lite.training.avg_checkpoints import (
    average_checkpoints,
    average_newest,
    average_ranked,
)
from t2t_lite.utils import best_checkpoints, checkpoint_guard, run_metadata, validation


def source_of(output_dir: str | None, checkpoint_path: str | None) -> tuple[str, int | None]:
    """The run whose checkpoints are averaged, and the newest step to take (None: any).

    `--checkpoint_path` wins over `--output_dir`, as in decode and export: a run's folder,
    or one checkpoint `RUN/ckpt-N` (the `--n` newest up to step N).

    Raises:
      UserError: neither flag, or an ensemble ("A,B") given.
    """
    if checkpoint_path:
        if "," in checkpoint_path:
            raise UserError(f"--mode=average averages one run's checkpoints, not an "
                            f"ensemble's (--checkpoint_path={checkpoint_path})")
        if os.path.isdir(checkpoint_path) or (
                "://" in checkpoint_path and checkpoint_guard.step_of(checkpoint_path) < 0):
            return checkpoint_path, None
        return os.path.dirname(checkpoint_path) or ".", checkpoint_guard.step_of(checkpoint_path)
    if not output_dir:
        raise UserError("--mode=average needs --output_dir=<training run directory> (or "
                        "--checkpoint_path)")
    return output_dir, None


def main(flags) -> None:
    """`run.py --mode=average --output_dir=RUN [--n=8 | --average_best=N]
    [--checkpoint_path=DIR] [--avg_output_dir=RUN/avg]`.

    Args:
      flags: absl FLAGS with `output_dir`, `n`, `avg_output_dir`, `average_best` and
        `checkpoint_path` (the run to average instead of --output_dir's, its checkpoint to
        average up to, or a keep-best folder `RUN/best`).
    """
    average_best = getattr(flags, "average_best", 0) or 0
    checkpoint_path = getattr(flags, "checkpoint_path", None) or None
    if average_best and not checkpoint_path:
        if not flags.output_dir:
            raise UserError("--average_best needs --output_dir=<training run directory>")
        checkpoint_path = os.path.join(flags.output_dir, best_checkpoints.BEST_DIR)
    model_dir, newest_step = source_of(flags.output_dir, checkpoint_path)
    try:
        best = (best_checkpoints.ranked(model_dir)
                if checkpoint_path and os.path.isdir(model_dir) else [])
    except ValueError as e:  # a damaged best_checkpoints.json, named
        raise UserError(one_line(e)) from e
    if average_best and not best:
        if os.path.exists(os.path.join(model_dir, best_checkpoints.INDEX_FILE)):
            raise UserError(f"--average_best={average_best}: none of the checkpoints that "
                            f"{os.path.join(model_dir, best_checkpoints.INDEX_FILE)} lists is in "
                            f"{model_dir}; average the run's own with --n instead")
        raise UserError(f"{model_dir} holds no best_checkpoints.json: train with "
                        "--keep_best_checkpoints=N first")
    # The run the checkpoints belong to (a keep-best folder's is its parent).
    run_dir = os.path.dirname(model_dir.rstrip("/")) if best else model_dir
    avg_dir = flags.avg_output_dir or os.path.join(flags.output_dir or run_dir, "avg")
    validation.check_output_not_input("avg_output_dir", avg_dir, {
        "output_dir": flags.output_dir, "checkpoint_path": model_dir})
    validation.check_output_not_protected(
        "avg_output_dir", avg_dir, validation.run_folders(flags.output_dir, checkpoint_path))
    validation.check_output_dir("avg_output_dir", avg_dir)
    validation.check_writable_dir("avg_output_dir", avg_dir)
    n = average_best or flags.n
    flag = f"--average_best={average_best}" if average_best else f"--n={n}"
    # The run's record is checked as decode checks it: no hand-edited hparams.json, no
    # changed vocabulary (the average carries the record on).
    run_metadata.read_hparams_json(os.path.join(run_dir, "hparams.json"))
    run_metadata.check_recorded_vocab(run_dir, "average")
    try:
        if best:
            # The n best readable by their metric, averaged oldest first (the newest gives
            # the step).
            paths, values = average_ranked(best, n, model_dir, flag)
        else:
            paths, values = average_newest(model_dir, n, newest_step, flag)
        prefix = average_checkpoints(paths, avg_dir, values)
    except ValueError as e:
        raise UserError(one_line(e)) from e
    print(f"Averaged {len(paths)} checkpoints: {', '.join(os.path.basename(p) for p in paths)}")
    print(f"Wrote {prefix}")
