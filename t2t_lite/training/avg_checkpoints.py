"""Checkpoint averaging: `run.py --mode=average` (t2t's `avg_checkpoints` / `t2t-avg-all`).

Averages the last `--n` checkpoints of a run (the newest complete ones in `--output_dir`,
oldest to newest) into a new checkpoint in `--avg_output_dir` (default
`<output_dir>/avg`), as t2t does for the paper's "average the last 5 / 20 checkpoints":

* every floating-point tensor is the arithmetic mean (accumulated in float64, written back in
  its own dtype), optimizer slots included, as in t2t's `avg_checkpoints`;
* integer, boolean and string tensors (the step, the optimizer's iteration count, the save
  counter, the object-graph proto) are copied from the newest checkpoint, so the averaged
  checkpoint reports the newest step (t2t-avg-all's choice; t2t's `avg_checkpoints` resets
  `global_step` to 0 instead);
* tensors keep their checkpoint keys, including the object graph
  (`_CHECKPOINTABLE_OBJECT_GRAPH`), so `tf.train.Checkpoint(model=..., optimizer=...)
  .restore()` loads the result like any checkpoint of the run, and a `checkpoint` state file
  makes it the latest of its directory. The run's `hparams.json` and `flags.json` are copied
  along so that the directory can serve as `--output_dir` for decoding or export.

The output directory is written under a temporary name and renamed at the end, so a failure
leaves no half-written checkpoint behind; the temporary folders of a killed average (named
with its host and pid) are removed by the next average once their writer is dead. The
checkpoints are found on disk (`checkpoint_guard`), and when training beside the average
rotates one away while it is read, the newest ones are read again (`average_newest`).
"""
from __future__ import annotations

import os
import shutil
from collections.abc import Iterable

import numpy as np
import tensorflow as tf
from absl import logging

from t2t_lite import file_io
from t2t_lite.errors import one_line
from t2t_lite.utils import checkpoint_guard, progress

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
# Files of a run that describe its model; copied next to the averaged checkpoint.
RUN_FILES = ("hparams.json", "flags.json", "run_inputs.json")


def last_checkpoints(model_dir: str, n: int) -> list[str]:
    """The last `n` complete checkpoints of `model_dir` on disk, oldest first.

    Args:
      model_dir: a training run's directory (its `checkpoint` state file is only a hint:
        `checkpoint_guard.checkpoints_newest_first`).
      n: how many to take (fewer when fewer exist, as t2t's `--num_last_checkpoints`).

    Returns:
      Checkpoint prefixes, e.g. [".../ckpt-4", ".../ckpt-5"].

    Raises:
      ValueError: `n` < 1, or no checkpoint in `model_dir`.
    """
    if n < 1:
        raise ValueError(f"--n={n}: the number of checkpoints to average must be >= 1")
    paths = checkpoint_guard.checkpoints_newest_first(model_dir)[:n]
    if not paths:
        raise ValueError(f"No checkpoints in {model_dir}; point --output_dir at a training "
                         "run's directory")
    return paths[::-1]


def last_readable_checkpoints(model_dir: str, n: int, newest_step: int | None = None,
                              flag: str | None = None) -> list[str]:
    """The last `n` complete checkpoints of `model_dir` whose every tensor reads, oldest
    first: damaged ones (a save cut short) are skipped with one warning, as decode, export
    and eval fall back to the newest readable checkpoint (`first_readable`).

    Args:
      model_dir: a training run's directory.
      n: how many to take (fewer when fewer read, with a warning).
      newest_step: leave out checkpoints of a higher step (None: none left out).
      flag: the flag that asked for `n`, for the warning (default "--n=<n>").

    Raises:
      ValueError: `n` < 1, no checkpoint, or none of them reads (naming the newest damaged).
    """
    if n < 1:
        raise ValueError(f"--n={n}: the number of checkpoints to average must be >= 1")
    candidates = (path for path in checkpoint_guard.checkpoints_newest_first(model_dir)
                  if newest_step is None or checkpoint_guard.step_of(path) <= newest_step)
    return first_readable(candidates, n, model_dir, flag or f"--n={n}")[::-1]


def first_readable(candidates: Iterable[str], n: int, model_dir: str, flag: str) -> list[str]:
    """The first `n` of `candidates` whose every tensor reads, in their order.

    Damaged ones are skipped with one warning naming them; ones no longer complete (rotated
    or removed while this runs) are passed over. Fewer than `n` readable is one warning
    naming `flag` and what is averaged: the average of fewer checkpoints is another model.

    Args:
      candidates: checkpoint prefixes in order of preference (newest first, best first).
      n: how many to take.
      model_dir: where they are, for the messages.
      flag: the flag that asked for `n` ("--n=5", "--average_best=2").

    Raises:
      ValueError: none of them reads (naming the first damaged one, or the incomplete
        ones), or there is none.
    """
    found, damaged, incomplete = [], [], []
    for path in candidates:
        reason = checkpoint_guard.damage(path)
        if reason is None:
            found.append(path)
            if len(found) == n:
                break
        elif checkpoint_guard.is_complete(path):  # not one rotated away meanwhile
            damaged.append((path, reason))
        else:
            incomplete.append(path)
    if damaged and found:
        logging.warning("Checkpoint(s) %s damaged (%s): averaging the readable ones, %s",
                        ", ".join(os.path.basename(p) for p, _ in damaged), damaged[0][1],
                        ", ".join(os.path.basename(p) for p in found))
    elif damaged:
        path, reason = damaged[0]
        raise ValueError(f"checkpoint {path} is damaged ({reason}) and no other checkpoint "
                         f"of {model_dir} reads; restore them from a backup")
    if not found and incomplete:
        raise ValueError(f"{flag}: no checkpoint of {model_dir} is whole (files of "
                         f"{', '.join(os.path.basename(p) for p in incomplete)} are missing); "
                         "restore them from a backup")
    if not found:
        raise ValueError(f"No checkpoints in {model_dir}; point --output_dir at a training "
                         "run's directory")
    if len(found) < n:
        logging.warning("%s: only %d readable checkpoint(s) in %s, averaging %s (an average "
                        "of fewer checkpoints than asked for)", flag, len(found), model_dir,
                        ", ".join(os.path.basename(p) for p in found))
    return found


def average_newest(model_dir: str, n: int, newest_step: int | None = None,
                   flag: str | None = None) -> tuple[list[str], dict[str, np.ndarray]]:
    """Averages the last `n` readable checkpoints of `model_dir` (`last_readable_checkpoints`),
    beside a training run that rotates them: when one vanishes while it is read, the
    then-newest `n` are read instead.

    Args:
      model_dir: a training run's directory.
      n: how many checkpoints to average.
      newest_step: average none of a higher step (a --checkpoint_path naming one).
      flag: the flag that asked for `n`, for the warning when fewer read.

    Returns:
      (the checkpoint prefixes averaged, oldest first; `average_tensors`' values).

    Raises:
      ValueError: as `last_readable_checkpoints`; the checkpoints differ; or they kept
        vanishing (`checkpoint_guard.retry_if_vanished`).
    """
    paths: list[str] = []

    def discover() -> str:
        paths[:] = last_readable_checkpoints(model_dir, n, newest_step, flag)
        return paths[0]  # the oldest: the first that rotation removes

    def read(_) -> dict[str, np.ndarray]:
        try:
            return average_tensors(paths)
        except tf.errors.OpError:
            gone = [p for p in paths if not checkpoint_guard.is_complete(p)]
            if gone:
                raise checkpoint_guard.Vanished(gone[0]) from None
            raise

    _, values = checkpoint_guard.retry_if_vanished(discover, read)
    return list(paths), values


def average_ranked(ranked: list[str], n: int, model_dir: str,
                   flag: str) -> tuple[list[str], dict[str, np.ndarray]]:
    """Averages the `n` best readable checkpoints of a keep-best folder, as `average_newest`
    averages the newest: damaged ones are skipped with a warning (`first_readable`); one
    that vanishes while it is read (training beside this replaces it) is one line.

    Args:
      ranked: the folder's checkpoint prefixes, best first (`best_checkpoints.ranked`).
      n: how many to average.
      model_dir: the keep-best folder, for the messages.
      flag: the flag that asked for `n` ("--average_best=2").

    Returns:
      (the checkpoint prefixes averaged, oldest first; `average_tensors`' values).

    Raises:
      ValueError: as `first_readable`, or the checkpoints differ.
    """
    paths = sorted(first_readable(ranked, n, model_dir, flag), key=checkpoint_guard.step_of)
    try:
        return paths, average_tensors(paths)
    except tf.errors.OpError as e:  # one vanished after its check
        gone = [p for p in paths if not checkpoint_guard.is_complete(p)]
        if gone:
            raise ValueError(f"{gone[0]} vanished while it was read (replaced by a training "
                             "run beside this one?); run the same command again") from e
        raise ValueError(f"reading {', '.join(paths)}: {one_line(e)}") from e


def average_tensors(checkpoint_paths: list[str]) -> dict[str, np.ndarray]:
    """Reads the checkpoints and averages them key by key.

    Args:
      checkpoint_paths: checkpoint prefixes, oldest first; all must hold the same keys with
        the same shapes and dtypes.

    Returns:
      key -> value: the float64-accumulated mean, cast back, for floating-point tensors; the
      newest checkpoint's value for every other tensor.

    Raises:
      ValueError: the checkpoints do not hold the same variables.
    """
    readers = [tf.train.load_checkpoint(p) for p in checkpoint_paths]
    newest = readers[-1]
    shapes = newest.get_variable_to_shape_map()
    dtypes = newest.get_variable_to_dtype_map()
    for path, reader in zip(checkpoint_paths, readers):
        if reader.get_variable_to_shape_map() != shapes:
            other = reader.get_variable_to_shape_map()
            diff = sorted(set(other.items()).symmetric_difference(shapes.items()),
                          key=str)[:5]
            raise ValueError(
                f"Cannot average {path} with {checkpoint_paths[-1]}: their variables differ "
                f"(first differences, name and shape: {diff})"
            )
    values = {}
    for key in progress.track(sorted(shapes), len(shapes), "Averaging", "variables"):
        dtype = dtypes[key]
        if key == OBJECT_GRAPH_KEY or not dtype.is_floating:
            values[key] = newest.get_tensor(key)
            continue
        total = np.zeros(shapes[key], np.float64)
        for reader in readers:
            total += np.asarray(reader.get_tensor(key), np.float64)
        values[key] = (total / len(readers)).astype(dtype.as_numpy_dtype)
    return values


def _write_checkpoint_state(directory: str, name: str) -> None:
    """Writes the `checkpoint` state file making `name` the latest checkpoint there."""
    quoted = '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'
    file_io.atomic_write(
        os.path.join(directory, "checkpoint"),
        f"model_checkpoint_path: {quoted}\nall_model_checkpoint_paths: {quoted}\n",
    )


def _check_output_dir(output_dir: str, checkpoint_paths: list[str]) -> None:
    """Refuses an output directory whose replacement would destroy anything but an earlier
    average: a directory holding the input checkpoints, or one with unrelated files."""
    local = _is_local(output_dir)
    real_out = os.path.realpath(output_dir) if local else output_dir.rstrip("/")
    for path in checkpoint_paths:
        source = os.path.dirname(path)
        source = os.path.realpath(source) if local else source.rstrip("/")
        if source == real_out or source.startswith(real_out + "/"):
            raise ValueError(
                f"--avg_output_dir={output_dir} contains the checkpoints being averaged "
                f"({path}); choose a new directory, e.g. <output_dir>/avg"
            )
    if not tf.io.gfile.isdir(output_dir):
        if tf.io.gfile.exists(output_dir):
            raise ValueError(f"--avg_output_dir={output_dir} exists and is not a directory")
        return
    for entry in tf.io.gfile.listdir(output_dir):
        entry = entry.rstrip("/")
        full = os.path.join(output_dir, entry)
        ours = entry == "checkpoint" or entry in RUN_FILES or entry.endswith(".index") or (
            ".data-" in entry)
        if not ours or tf.io.gfile.isdir(full):
            raise ValueError(
                f"--avg_output_dir={output_dir} exists and holds {entry!r}, which is not part "
                "of an averaged checkpoint; choose another directory or remove it"
            )


def _is_local(path: str) -> bool:
    """A path of the local filesystem (directories there can be renamed whole)."""
    return "://" not in path or path.startswith("file://")


def _save(values: dict, prefix: str) -> None:
    keys = sorted(values)
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=keys, shape_and_slices=[""] * len(keys),
                      tensors=[values[k] for k in keys])


def _write_in_place(values: dict, name: str, output_dir: str, source_dir: str) -> str:
    """`average_checkpoints` on a filesystem without directory renames (gs://, ...).

    The checkpoint files are written in a temporary subfolder and renamed into `output_dir`
    one by one; the `checkpoint` state file, written last, makes the new average the one that
    readers find; files of an earlier average are removed after it.
    """
    tf.io.gfile.makedirs(output_dir)
    tmp_dir = os.path.join(output_dir, checkpoint_guard.temp_dir_name(
        os.path.basename(output_dir.rstrip("/"))))
    tf.io.gfile.makedirs(tmp_dir)
    try:
        _save(values, os.path.join(tmp_dir, name))
        for filename in RUN_FILES:
            if tf.io.gfile.exists(os.path.join(source_dir, filename)):
                tf.io.gfile.copy(os.path.join(source_dir, filename),
                                 os.path.join(tmp_dir, filename), overwrite=True)
        for filename in tf.io.gfile.listdir(tmp_dir):
            tf.io.gfile.rename(os.path.join(tmp_dir, filename),
                               os.path.join(output_dir, filename), overwrite=True)
        _write_checkpoint_state(output_dir, name)
    finally:
        if tf.io.gfile.exists(tmp_dir):
            tf.io.gfile.rmtree(tmp_dir)
    for filename in tf.io.gfile.listdir(output_dir):
        stale = (filename.endswith(".index") or ".data-" in filename) and not (
            filename.startswith(name + "."))
        if stale:
            tf.io.gfile.remove(os.path.join(output_dir, filename))
    return os.path.join(output_dir, name)


def remove_stale_temp_dirs(output_dir: str) -> list[str]:
    """Removes the temporary folders that killed averages into `output_dir` left (beside it,
    or inside it on gs://), unless their writer still runs (`checkpoint_guard`).

    Returns:
      The folders removed.
    """
    stem = os.path.basename(output_dir.rstrip("/"))
    parent = os.path.dirname(output_dir.rstrip("/"))
    return [*checkpoint_guard.remove_stale_temp_dirs(parent, stem),
            *checkpoint_guard.remove_stale_temp_dirs(parent, stem + ".old"),
            *checkpoint_guard.remove_stale_temp_dirs(output_dir, stem)]


def average_checkpoints(checkpoint_paths: list[str], output_dir: str,
                        values: dict[str, np.ndarray] | None = None) -> str:
    """Writes the average of `checkpoint_paths` as a new checkpoint directory.

    Args:
      checkpoint_paths: checkpoint prefixes, oldest first.
      output_dir: directory to create (with the user's umask); an earlier average there is
        replaced atomically (on a filesystem without directory renames, such as gs://, file
        by file, the `checkpoint` state file last). The checkpoint is named like the newest
        input (e.g. `ckpt-5000`). Temporary folders of killed averages are removed first.
      values: their `average_tensors` when already read (`average_newest`).

    Returns:
      The new checkpoint's prefix, `<output_dir>/<name>`.

    Raises:
      ValueError: `output_dir` holds the inputs or unrelated files, or the inputs differ.
    """
    if not checkpoint_paths:
        raise ValueError("average_checkpoints: no checkpoints given")
    remove_stale_temp_dirs(output_dir)
    _check_output_dir(output_dir, checkpoint_paths)
    if values is None:
        values = average_tensors(checkpoint_paths)
    name = os.path.basename(checkpoint_paths[-1])
    source_dir = os.path.dirname(checkpoint_paths[-1])
    if not _is_local(output_dir):
        return _write_in_place(values, name, output_dir, source_dir)
    output_dir = os.path.abspath(output_dir)
    parent = os.path.dirname(output_dir)
    os.makedirs(parent, exist_ok=True)
    stem = os.path.basename(output_dir)
    # os.mkdir, not tempfile.mkdtemp: the folder becomes the output, with the user's umask
    # (mkdtemp's 0700 made avg/ unreadable to the group).
    tmp_dir = os.path.join(parent, checkpoint_guard.temp_dir_name(stem))
    os.mkdir(tmp_dir)
    try:
        _save(values, os.path.join(tmp_dir, name))
        _write_checkpoint_state(tmp_dir, name)
        for filename in RUN_FILES:
            if os.path.exists(os.path.join(source_dir, filename)):
                shutil.copy2(os.path.join(source_dir, filename), tmp_dir)
        # Same timestamp as the newest checkpoint (as t2t-avg-all), so tools that order
        # checkpoints by time see the average where its step is; a training run beside this
        # one may have rotated it away by now.
        index = checkpoint_paths[-1] + ".index"
        if os.path.exists(index):
            mtime = os.path.getmtime(index)
            for filename in os.listdir(tmp_dir):
                if filename.startswith(name + "."):
                    os.utime(os.path.join(tmp_dir, filename), (mtime, mtime))
        if os.path.exists(output_dir):
            old_dir = os.path.join(parent, checkpoint_guard.temp_dir_name(stem + ".old"))
            os.mkdir(old_dir)
            os.rename(output_dir, os.path.join(old_dir, "avg"))
            os.rename(tmp_dir, output_dir)
            shutil.rmtree(old_dir)
        else:
            os.rename(tmp_dir, output_dir)
    except BaseException:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise
    return os.path.join(output_dir, name)
