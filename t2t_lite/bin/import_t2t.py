"""`run.py --mode=import_t2t`: an original tensor2tensor checkpoint -> a t2t_lite checkpoint.

Reads the flags and runs `t2t_lite.utils.t2t_checkpoint`.
"""
from __future__ import annotations

import json
import os

import tensorflow as tf

from t2t_lite.hparams import create_hparams
from t2t_lite.utils.t2t_checkpoint import _resolve_checkpoint, _write_text_atomically, load_model


def main(flags) -> str:
    """run.py `--mode=import_t2t`: converts a t2t checkpoint into a t2t_lite checkpoint.

    Reads the t2t checkpoint `--checkpoint_path` (prefix or directory) with `--hparams_set` /
    `--hparams` (the hparams it was trained with), and
    writes `tf.train.Checkpoint(step=global_step, model=model)` under `--output_dir` (prefix
    "ckpt", managed by tf.train.CheckpointManager) plus `hparams.json`. Nothing is written if
    the checkpoint does not match the hparams. Refuses an output_dir that already holds a
    checkpoint.

    Args:
      flags: parsed absl flags with checkpoint_path, hparams_set, hparams, output_dir.

    Returns:
      The path of the written checkpoint.
    """
    for name in ("checkpoint_path", "hparams_set", "output_dir"):
        if not getattr(flags, name):
            raise ValueError(
                f"--{name} is required for --mode=import_t2t (--checkpoint_path=<t2t "
                "model.ckpt-N or its directory> --hparams_set=<its hparams set> "
                "--output_dir=<new t2t_lite directory>)"
            )
    if tf.train.latest_checkpoint(flags.output_dir):
        raise ValueError(
            f"--output_dir={flags.output_dir} already holds a checkpoint; choose an empty "
            "directory"
        )
    hparams = create_hparams(flags.hparams_set, flags.hparams or "")
    source = _resolve_checkpoint(flags.checkpoint_path)
    model = load_model(source, hparams)
    reader = tf.train.load_checkpoint(source)
    step = 0
    if reader.has_tensor("global_step"):
        step = int(reader.get_tensor("global_step"))
    tf.io.gfile.makedirs(flags.output_dir)
    checkpoint = tf.train.Checkpoint(step=tf.Variable(step, dtype=tf.int64), model=model)
    manager = tf.train.CheckpointManager(checkpoint, flags.output_dir, max_to_keep=None,
                                         checkpoint_name="ckpt")
    path = manager.save(checkpoint_number=step)
    _write_text_atomically(
        os.path.join(flags.output_dir, "hparams.json"), model.hparams.to_json(indent=1)
    )
    _write_text_atomically(
        os.path.join(flags.output_dir, "t2t_import.json"),
        json.dumps({
            "t2t_checkpoint": source,
            "global_step": step,
            "input_vocab_size": model.input_vocab_size,
            "target_vocab_size": model.target_vocab_size,
        }, indent=1, sort_keys=True),
    )
    return path
