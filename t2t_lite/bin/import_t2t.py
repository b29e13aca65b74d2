"""`run.py --mode=import_t2t`: an original tensor2tensor checkpoint -> a t2t_lite checkpoint.

Reads the flags and runs `t2t_lite.training.t2t_import` (weights through
`t2t_lite.models.t2t_checkpoint`; Adafactor or Adam slots when the checkpoint has them).
"""
from __future__ import annotations

from t2t_lite.errors import UserError, one_line
from t2t_lite.hparams_lib import create_hparams
from t2t_lite.models.t2t_checkpoint import T2TCheckpointError
from t2t_lite.training.learning_rate import LearningRateError
from t2t_lite.training.t2t_import import import_checkpoint
from t2t_lite.utils import checkpoint_guard, run_metadata


def main(flags) -> str:
    """run.py `--mode=import_t2t`: converts a t2t checkpoint into a t2t_lite checkpoint.

    Reads the t2t checkpoint `--checkpoint_path` (prefix or directory) with `--hparams_set` /
    `--hparams` (the hparams it was trained with), and
    writes `tf.train.Checkpoint(step=global_step, model=model)` under `--output_dir` (prefix
    "ckpt", managed by tf.train.CheckpointManager) plus `hparams.json`, with `optimizer=` too
    when the checkpoint holds the slots of hparams.optimizer adafactor, adam or true_adam, so
    that `--mode=train --output_dir=...` resumes at t2t's step with t2t's optimizer state.
    Nothing is written if the checkpoint does not match the hparams. Also writes `flags.json`
    with the run's `hparams_set` and `model` (the Transformer), so that a resume with another
    hparams set is refused and decode / export take them from the run; the problem is not
    known here and comes from the training run's --problem. Refuses an output_dir that
    already holds a checkpoint.

    Args:
      flags: parsed absl flags with checkpoint_path, hparams_set, hparams, output_dir.

    Returns:
      The path of the written checkpoint.

    Raises:
      UserError: a missing flag, an output_dir with a checkpoint, a checkpoint that does not
        match the hparams (weights or optimizer slots), on one line.
    """
    for name in ("checkpoint_path", "hparams_set", "output_dir"):
        if not getattr(flags, name):
            raise UserError(
                f"--{name} is required for --mode=import_t2t (--checkpoint_path=<t2t "
                "model.ckpt-N or its directory> --hparams_set=<its hparams set> "
                "--output_dir=<new t2t_lite directory>)"
            )
    if checkpoint_guard.checkpoints_newest_first(flags.output_dir):
        raise UserError(
            f"--output_dir={flags.output_dir} already holds a checkpoint; choose an empty "
            "directory"
        )
    hparams = create_hparams(flags.hparams_set, flags.hparams or "")
    try:
        path = import_checkpoint(flags.checkpoint_path, hparams, flags.output_dir)
    except (T2TCheckpointError, LearningRateError) as e:
        # A checkpoint that does not match the hparams (names listed), or a learning-rate
        # schedule the optimizer cannot be built with: one line, nothing written.
        raise UserError(one_line(e)) from e
    run_metadata.save_flags(flags.output_dir, {"hparams_set": flags.hparams_set,
                                               "model": "transformer"})
    return path
