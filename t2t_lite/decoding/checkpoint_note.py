"""Which checkpoint a tool read, and how it ranks among the run's evaluations.

Importable without TensorFlow (the decoder's CTranslate2 path never loads it); reading a run's
event files imports it.

Decode and export name the checkpoint they restored; where the run has dev metrics they add
whether it is the best one, so that a run that went on past its best (overfitting) is not
decoded or shipped from its newest checkpoint unawares:

* with a keep-best folder (`output_dir/best`, `--keep_best_checkpoints`), the best is its
  first checkpoint by the metric it keeps them for;
* otherwise the dev losses of the run's evaluations (`output_dir/eval`'s event files, the
  `loss` written at each evaluation): the best is the lowest (the earliest of equal ones).
"""
from __future__ import annotations

import glob
import os

from t2t_lite.utils import best_checkpoints


def dev_losses(run_dir: str) -> dict[int, float]:
    """step -> dev loss of the run's evaluations ({} without eval/ event files).

    A record cut short at the end of an event file (a training run writing it) ends that
    file's reading; a later file's value of the same step wins (a resumed run's)."""
    import tensorflow as tf
    from tensorflow.core.util import event_pb2

    losses: dict[int, float] = {}
    for path in sorted(glob.glob(os.path.join(run_dir, "eval", "events.out.tfevents.*"))):
        try:
            for record in tf.data.TFRecordDataset(path):
                event = event_pb2.Event.FromString(record.numpy())
                for value in event.summary.value:
                    if value.tag != "loss":
                        continue
                    if value.HasField("tensor"):
                        losses[int(event.step)] = float(tf.make_ndarray(value.tensor))
                    else:
                        losses[int(event.step)] = float(value.simple_value)
        except (tf.errors.DataLossError, OSError):
            continue
    return losses


def run_dir_of(checkpoint: str, output_dir: str | None) -> str:
    """The run folder of a checkpoint: --output_dir, else the checkpoint's folder (its
    parent for a keep-best folder's checkpoint)."""
    if output_dir:
        return output_dir
    folder = os.path.dirname(checkpoint)
    if os.path.basename(folder) == best_checkpoints.BEST_DIR:
        return os.path.dirname(folder)
    return folder


def describe(checkpoint: str, output_dir: str | None = None) -> str:
    """`checkpoint` and, where the run has dev metrics, how it ranks among them.

    Args:
      checkpoint: the prefix restored (comma-joined prefixes: an ensemble, named as given).
      output_dir: the run folder (None: the checkpoint's own).

    Returns:
      e.g. "run/ckpt-2500 (step 2500: dev loss 4.51; the run's best dev loss is 4.35 at
      step 1500: --checkpoint_path=run/ckpt-1500)", "run/ckpt-1500 (step 1500: the best dev
      loss of the run's 5 evaluations, 4.35)", or the prefix alone.
    """
    from t2t_lite.utils import checkpoint_guard  # TensorFlow's: not at import (CTranslate2)

    if "," in checkpoint:
        return checkpoint
    step = checkpoint_guard.step_of(checkpoint)
    run_dir = run_dir_of(checkpoint, output_dir)
    best_dir = os.path.join(run_dir, best_checkpoints.BEST_DIR)
    try:
        index = best_checkpoints.read_index(best_dir)
    except ValueError:
        index = None
    if index and index.get("checkpoints"):
        return _by_kept_best(checkpoint, step, best_dir, index)
    losses = dev_losses(run_dir)
    if not losses or step < 0:
        return checkpoint
    best_step = min(losses, key=lambda s: (losses[s], s))
    best = losses[best_step]
    if step == best_step:
        return (f"{checkpoint} (step {step}: the best dev loss of the run's {len(losses)} "
                f"evaluations, {best:.4g})")
    here = (f"dev loss {losses[step]:.4g}" if step in losses
            else "no evaluation at this step")
    best_prefix = os.path.join(os.path.dirname(checkpoint), f"ckpt-{best_step}")
    where = (f"--checkpoint_path={best_prefix}" if os.path.exists(best_prefix + ".index")
             else "its checkpoint is no longer kept; --keep_best_checkpoints=1 keeps the "
                  "best while training")
    return (f"{checkpoint} (step {step}: {here}; the run's best dev loss is {best:.4g} at "
            f"step {best_step}: {where})")


def _by_kept_best(checkpoint: str, step: int, best_dir: str, index: dict) -> str:
    """The note of a run with a keep-best folder: ranked by the metric it keeps for."""
    metric = index.get("metric", "loss")
    sign = 1 if index.get("minimize", True) else -1
    kept = {int(s): float(v) for s, v in index["checkpoints"].items()}
    best_step = min(kept, key=lambda s: (sign * kept[s], s))
    if step == best_step:
        return (f"{checkpoint} (step {step}: the best {metric} of the run, "
                f"{kept[best_step]:.4g}, kept in {best_dir})")
    here = f"{metric} {kept[step]:.4g}" if step in kept else f"not among the best by {metric}"
    return (f"{checkpoint} (step {step}: {here}; the run's best {metric} is "
            f"{kept[best_step]:.4g} at step {best_step}: --checkpoint_path={best_dir})")
