"""TensorBoard summaries beyond scalars and text: the HParams dashboard.

Scalars and text are written by `trainer_lib.write_scalars` / `write_text` with the plugins'
metadata; this module adds the run's hparams in the format of TensorBoard's HParams plugin, so
the dashboard lists every run of a directory with its settings next to its dev metrics.
"""
from __future__ import annotations

import json
from typing import Any

from tensorboard.plugins.hparams import api as hparams_api


def _dashboard_value(value: Any) -> bool | int | float | str:
    """HParams plugin values are bool, number or string: lists and None become JSON text."""
    if isinstance(value, bool | int | float | str):
        return value
    return json.dumps(value)


def write_hparams(writer, hparams: dict[str, Any], run_name: str) -> None:
    """Writes the HParams plugin's session-start summary (step 0) for one run.

    Args:
      writer: a tf.summary file writer (the run's top directory), or None to do nothing.
      hparams: name -> value (every hparam of the run, overrides applied).
      run_name: the trial id shown in the dashboard (e.g. the output_dir).
    """
    if writer is None:
        return
    values = {name: _dashboard_value(value) for name, value in sorted(hparams.items())}
    with writer.as_default():
        hparams_api.hparams(values, trial_id=run_name)
    writer.flush()

