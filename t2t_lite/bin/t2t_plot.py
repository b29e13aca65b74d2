"""`run.py --mode=plot --output_dir=RUN`: PNGs of a run's curves (`t2t_lite.visualization.plots`)."""
from __future__ import annotations

import os
from typing import Any

from t2t_lite.errors import UserError
from t2t_lite.utils import heartbeat
from t2t_lite.visualization import plots


def main(flags_obj: Any) -> list[str]:
    """Writes RUN/plots/*.png from RUN's event files and prints their paths.

    Args:
      flags_obj: absl FLAGS (output_dir).

    Returns:
      The PNG paths written.
    """
    if not flags_obj.output_dir:
        raise UserError("--mode=plot needs --output_dir (a training run's directory)")
    output_dir = os.path.expanduser(flags_obj.output_dir)
    print(f"Reading the curves of {output_dir} (its event files, eval/, decode/, "
          "decode_eval/)", flush=True)

    def written_one(path: str, k: int, n: int) -> None:
        print(f"Wrote {path} ({k}/{n})", flush=True)

    with heartbeat.phase(f"--mode=plot: reading and drawing the curves of {output_dir}"):
        return plots.plot_run(output_dir, on_written=written_one)
