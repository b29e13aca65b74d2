"""t2t-avg-all: `run.py --mode=average --output_dir=RUN [--n=8] [--avg_output_dir=RUN/avg]`.

Reads the averaging flags and runs `t2t_lite.training.avg_checkpoints`.
"""
from __future__ import annotations

import os

from t2t_lite.errors import UserError, one_line
from t2t_lite.training.avg_checkpoints import average_checkpoints, average_newest
from t2t_lite.utils import run_metadata, validation


def main(flags) -> None:
    """`run.py --mode=average --output_dir=RUN [--n=8] [--avg_output_dir=RUN/avg]`.

    Args:
      flags: absl FLAGS with `output_dir`, `n`, `avg_output_dir`.
    """
    if not flags.output_dir:
        raise UserError("--mode=average needs --output_dir=<training run directory>")
    avg_dir = flags.avg_output_dir or os.path.join(flags.output_dir, "avg")
    validation.check_output_not_input("avg_output_dir", avg_dir, {"output_dir": flags.output_dir})
    validation.check_output_dir("avg_output_dir", avg_dir)
    validation.check_writable_dir("avg_output_dir", avg_dir)
    # The run's record is checked as decode checks it: no hand-edited hparams.json, no
    # changed vocabulary (the average carries the record on).
    run_metadata.read_hparams_json(os.path.join(flags.output_dir, "hparams.json"))
    run_metadata.check_recorded_vocab(flags.output_dir, "average")
    try:
        paths, values = average_newest(flags.output_dir, flags.n)
        prefix = average_checkpoints(paths, avg_dir, values)
    except ValueError as e:
        raise UserError(one_line(e)) from e
    print(f"Averaged {len(paths)} checkpoints: {', '.join(os.path.basename(p) for p in paths)}")
    print(f"Wrote {prefix}")
