"""t2t-avg-all: `run.py --mode=average --output_dir=RUN [--n=8] [--avg_output_dir=RUN/avg]`.

Reads the averaging flags and runs `t2t_lite.training.avg_checkpoints`.
"""
from __future__ import annotations

import os

from t2t_lite.errors import UserError, one_line
from t2t_lite.training.avg_checkpoints import average_checkpoints, average_newest
from t2t_lite.utils import checkpoint_guard, validation


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
    """`run.py --mode=average --output_dir=RUN [--n=8] [--avg_output_dir=RUN/avg]`.

    Args:
      flags: absl FLAGS with `output_dir`, `n`, `avg_output_dir` and `checkpoint_path` (the
        run to average instead of --output_dir's, or its checkpoint to average up to).
    """
    checkpoint_path = getattr(flags, "checkpoint_path", None)
    model_dir, newest_step = source_of(flags.output_dir, checkpoint_path)
    avg_dir = flags.avg_output_dir or os.path.join(flags.output_dir or model_dir, "avg")
    validation.check_output_not_input("avg_output_dir", avg_dir, {
        "output_dir": flags.output_dir, "checkpoint_path": model_dir})
    validation.check_output_not_protected(
        "avg_output_dir", avg_dir, validation.run_folders(flags.output_dir, checkpoint_path))
    validation.check_output_dir("avg_output_dir", avg_dir)
    validation.check_writable_dir("avg_output_dir", avg_dir)
    try:
        paths, values = average_newest(model_dir, flags.n, newest_step)
        prefix = average_checkpoints(paths, avg_dir, values)
    except ValueError as e:
        raise UserError(one_line(e)) from e
    print(f"Averaged {len(paths)} checkpoints: {', '.join(os.path.basename(p) for p in paths)}")
    print(f"Wrote {prefix}")
