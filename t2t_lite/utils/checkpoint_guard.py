"""Finding the newest readable checkpoint of a run, and cleaning what a killed save left.

A run killed while saving, or a disk that filled up, can leave the newest checkpoint with a
truncated data file (restoring it fails with `Read less bytes than requested`). Training
(resume) and decoding fall back to the newest checkpoint whose every tensor reads, with a
warning naming the damaged ones, and fail with one line when none reads. A save killed
midway also leaves a `ckpt-N_temp/` folder of partial shards: `remove_temp_folders` removes
them when a run that holds the directory's lock starts.
"""
from __future__ import annotations

import os

import tensorflow as tf
from absl import logging

from t2t_lite.errors import UserError, one_line


def damage(path: str) -> str | None:
    """Why checkpoint `path` cannot be read (its index and every tensor), or None.

    Args:
      path: a checkpoint prefix (e.g. "run/ckpt-6").
    """
    try:
        reader = tf.train.load_checkpoint(path)
        for name, dtype in reader.get_variable_to_dtype_map().items():
            # Variant tensors (the input pipeline's position under --deterministic) have no
            # NumPy form; every other tensor is read in full.
            if dtype != tf.variant:
                reader.get_tensor(name)
    except (tf.errors.OpError, IndexError, ValueError, OSError) as e:
        return one_line(e)
    return None


def checkpoints_newest_first(directory: str) -> list[str]:
    """The checkpoint prefixes the directory's `checkpoint` state lists, newest first."""
    state = tf.train.get_checkpoint_state(directory)
    if state is None:
        return []
    paths = list(state.all_model_checkpoint_paths)
    if state.model_checkpoint_path and state.model_checkpoint_path not in paths:
        paths.append(state.model_checkpoint_path)
    # get_checkpoint_state has joined relative entries with `directory` already (joining
    # again made a relative --output_dir "run" read "run/run/ckpt-N").
    return paths[::-1]


def check_readable(path: str, flag: str = "checkpoint_path") -> str:
    """Returns `path` if it reads, else raises UserError naming the flag and the damage."""
    reason = damage(path)
    if reason:
        raise UserError(f"--{flag}={path}: the checkpoint is damaged ({reason})")
    return path


def newest_good_checkpoint(directory: str) -> str | None:
    """The newest checkpoint of `directory` that reads, warning about newer damaged ones.

    Returns:
      Its prefix, or None if the directory lists no checkpoint.

    Raises:
      UserError: checkpoints are listed but none of them reads.
    """
    damaged = []
    for path in checkpoints_newest_first(directory):
        reason = damage(path)
        if reason is None:
            if damaged:
                logging.warning(
                    "Checkpoint(s) %s damaged (%s): falling back to %s",
                    ", ".join(os.path.basename(p) for p, _ in damaged), damaged[0][1], path)
            return path
        damaged.append((path, reason))
    if damaged:
        names = ", ".join(os.path.basename(p) for p, _ in damaged)
        raise UserError(f"no readable checkpoint in {directory}: {names} damaged "
                        f"({damaged[0][1]}); restore them from a backup or train anew in "
                        "another --output_dir")
    return None


def remove_temp_folders(directory: str, prefix: str = "ckpt") -> list[str]:
    """Removes `<prefix>-N_temp*` folders (partial shards of a save that was killed).

    Call it only while holding the directory's run lock (a live save writes such a folder).

    Returns:
      The folders removed.
    """
    removed = []
    for path in tf.io.gfile.glob(os.path.join(directory, f"{prefix}-*_temp*")):
        if tf.io.gfile.isdir(path):
            tf.io.gfile.rmtree(path)
            removed.append(path)
            logging.warning("Removed %s, left by a checkpoint save that did not finish", path)
    return removed
