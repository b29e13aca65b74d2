"""Keep the best checkpoints: `--keep_best_checkpoints=N --best_checkpoint_metric=M`.

After each evaluation the chief compares metric M (an eval metric, or a decoding metric of
train_eval_and_decode) with the checkpoints in `output_dir/best/`; while fewer than N are
there, or when it beats the worst of them, it writes the current weights there as
`best/ckpt-<step>` and removes the one it displaces. `best/best_checkpoints.json` maps each
kept step to its value ({"metric", "minimize", "checkpoints": {step: value}}), written
atomically after the checkpoint files; the folder's `checkpoint` state file names the best
one first; `hparams.json` / `flags.json` are copied along, so the folder serves decoding,
export and averaging as a run does (`--checkpoint_path=$RUN/best`). `best/` is its own
folder: `--keep_checkpoint_max` rotates only output_dir's own checkpoints, never these.

Not t2t's (t2t's BestExporter exports SavedModels of the lowest eval loss only).
"""
from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from typing import Any

from t2t_lite import file_io
from t2t_lite.utils.best_checkpoints import BEST_DIR, INDEX_FILE, PREFIX, ranked, read_index

# What a later use of the folder checks the run by (run_metadata), copied along.
RUN_FILES = ("hparams.json", "flags.json", "run_inputs.json")


class BestCheckpoints:
    """The N best checkpoints of a run by one metric, in `output_dir/best/`.

    Args:
      output_dir: the training run's directory.
      keep: N, how many to keep (> 0).
      metric: the result key to rank by.
      minimize: whether smaller is better.
    """

    def __init__(self, output_dir: str, keep: int, metric: str, minimize: bool):
        self.output_dir = output_dir
        self.directory = os.path.join(output_dir, BEST_DIR)
        self.keep = keep
        self.metric = metric
        self.minimize = minimize
        index = read_index(self.directory)
        if index and index.get("metric") != metric:
            raise ValueError(
                f"--best_checkpoint_metric={metric}: {self.directory} keeps the best by "
                f"{index.get('metric')}; keep that metric, or move the folder away to start "
                "anew")
        self.checkpoints = {int(s): float(v) for s, v in (index or {}).get(
            "checkpoints", {}).items()}

    def _better(self, a: float, b: float) -> bool:
        return a < b if self.minimize else a > b

    def _worst(self) -> int:
        sign = 1 if self.minimize else -1
        return max(self.checkpoints, key=lambda s: (sign * self.checkpoints[s], s))

    def consider(self, step: int, results: dict[str, float],
                 write: Callable[[str], None]) -> bool:
        """Keeps the checkpoint of `step` if it is among the N best by the metric.

        Args:
          step: global step of the weights just evaluated.
          results: that evaluation's metrics (no metric in them: nothing happens).
          write: writes the current weights at a checkpoint prefix.

        Returns:
          Whether the checkpoint was kept.
        """
        if self.metric not in results:
            return False
        value = float(results[self.metric])
        # A resumed run evaluating a step again replaces its entry.
        self.checkpoints.pop(step, None)
        if len(self.checkpoints) >= self.keep and not self._better(
                value, self.checkpoints[self._worst()]):
            return False
        os.makedirs(self.directory, exist_ok=True)
        for name in RUN_FILES:
            source = os.path.join(self.output_dir, name)
            if os.path.isfile(source):
                shutil.copyfile(source, os.path.join(self.directory, name))
        write(os.path.join(self.directory, f"{PREFIX}-{step}"))
        self.checkpoints[step] = value
        dropped = []
        while len(self.checkpoints) > self.keep:
            worst = self._worst()
            del self.checkpoints[worst]
            dropped.append(worst)
        self._write_index()
        for old in dropped:
            self._remove(old)
        return True

    def _write_index(self) -> None:
        index = {"metric": self.metric, "minimize": self.minimize,
                 "checkpoints": {str(s): v for s, v in sorted(self.checkpoints.items())}}
        file_io.atomic_write(os.path.join(self.directory, INDEX_FILE),
                             json.dumps(index, indent=1) + "\n")
        names = [os.path.basename(p) for p in ranked(self.directory)]
        # TensorFlow's state file: the best first, so that tools reading it pick that one.
        state = f'model_checkpoint_path: "{names[0]}"\n' + "".join(
            f'all_model_checkpoint_paths: "{n}"\n' for n in names)
        file_io.atomic_write(os.path.join(self.directory, "checkpoint"), state)

    def _remove(self, step: int) -> None:
        prefix = f"{PREFIX}-{step}."
        for name in os.listdir(self.directory):
            if name.startswith(prefix) and (name.endswith(".index") or ".data-" in name):
                os.remove(os.path.join(self.directory, name))

    def run_card_values(self) -> dict[str, Any]:
        """The run card's lines for the kept checkpoints."""
        return {"best checkpoints": os.path.join(self.output_dir, BEST_DIR),
                "best by": self.metric,
                "kept (step: value)": {str(s): v for s, v in sorted(self.checkpoints.items())}}
