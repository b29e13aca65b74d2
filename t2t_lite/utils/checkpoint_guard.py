"""Which checkpoint a run restores, whether it fits the model, and cleaning what kills left.

Discovery: the checkpoints of a directory are the complete `<name>-N` prefixes on disk (an
`.index` file and every data shard it names), newest (highest N) first. The `checkpoint`
state file of tf.train.CheckpointManager is only a hint: a copy or sync that lost it, or a
file left empty or garbled, no longer makes a run start from step 0 over its own
checkpoints. Training repairs the state file (`repair_state_file`) so that the manager keeps
rotating every checkpoint on disk; the other modes warn once and read the newest one.

Damage: a run killed while saving, or a disk that filled up, can leave the newest checkpoint
with a truncated data file (restoring it fails with `Read less bytes than requested`).
Training (resume) and decoding fall back to the newest checkpoint whose every tensor reads,
with a warning naming the damaged ones, and fail with one line when none reads. A save
killed midway also leaves a `ckpt-N_temp/` folder of partial shards: `remove_temp_folders`
removes them when a run that holds the directory's lock starts.

Strict restore: `check_model_matches` compares the model's variables with a t2t_lite
checkpoint's (through the checkpoint's object graph, the attribute path from `model`), so
that a checkpoint of another architecture is one error line naming the variables instead of a
partial, silent load.

Readers beside a writer: `retry_if_vanished` reads again from the then-newest checkpoint
when the chosen one is rotated away while it is read (export and average beside training).
Temporary folders of a killed export or average carry their writer's host and pid
(`temp_dir_name`); `remove_stale_temp_dirs` removes those whose writer is dead or that are a
day old.
"""
from __future__ import annotations

import json
import os
import re
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import keras
import tensorflow as tf
from absl import logging
from google.protobuf import text_format
from tensorflow.core.protobuf import trackable_object_graph_pb2
from tensorflow.python.training.checkpoint_state_pb2 import CheckpointState

from t2t_lite import file_io
from t2t_lite.errors import UserError, describe_storage_problem, one_line
from t2t_lite.utils import run_lock

STATE_FILE = "checkpoint"
OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
_VARIABLE_VALUE = "VARIABLE_VALUE"
_INDEX = re.compile(r"^(?P<prefix>.+-(?P<step>\d+))\.index$")
_SHARD = re.compile(r"\.data-\d{5}-of-(?P<count>\d{5})$")
# How many names an error line lists before "(+N more)".
_NAMES_SHOWN = 4
# Reading again after the chosen checkpoint vanished (rotated by a training run).
READ_ATTEMPTS = 5
# A temporary folder whose writer cannot be checked (another host) is stale after this long.
STALE_TEMP_SECS = 24 * 3600
T = TypeVar("T")


# --- Discovery --------------------------------------------------------------------------------
def step_of(path: str) -> int:
    """The N of a checkpoint prefix `.../name-N` (-1 when it has none)."""
    match = re.search(r"-(\d+)$", path)
    return int(match.group(1)) if match else -1


def is_complete(path: str) -> bool:
    """Whether checkpoint `path` has its `.index` and every data shard (by the shard names).

    Args:
      path: a checkpoint prefix (e.g. "run/ckpt-6").
    """
    if not tf.io.gfile.exists(path + ".index"):
        return False
    shards = tf.io.gfile.glob(path + ".data-*-of-*")
    counts = {int(m.group("count")) for m in map(_SHARD.search, shards) if m}
    # One count, and as many shards as it says (a checkpoint has at least one data file).
    return len(counts) == 1 and len(shards) == counts.pop()


def _on_disk(directory: str) -> list[str]:
    """The complete `<name>-N` checkpoints of `directory`, any order."""
    found = []
    for path in tf.io.gfile.glob(os.path.join(directory, "*-*.index")):
        match = _INDEX.match(os.path.basename(path))
        if match:
            prefix = os.path.join(directory, match.group("prefix"))
            if is_complete(prefix):
                found.append(prefix)
    return found


# Directories whose state file's paths outside them were already warned about.
_WARNED_OUTSIDE: set[str] = set()


def _drop_outside(directory: str, state: CheckpointState) -> list[str]:
    """Removes from `state` the checkpoints outside `directory` (a TF1 / t2t state file of
    absolute paths copied with its run: another run's), warning once per directory; names
    its own checkpoints below `directory` as given (a relative --output_dir, a symlink).
    Returns the paths removed."""
    local = "://" not in directory
    real = os.path.realpath(directory) if local else directory

    def own(path: str) -> str | None:
        resolved = os.path.realpath(path) if local else path
        if not file_io.is_inside(real, resolved):
            return None
        return os.path.join(directory, os.path.relpath(resolved, real)) if local else path

    named = [*state.all_model_checkpoint_paths, state.model_checkpoint_path]
    kept = [own(p) for p in named]
    outside = sorted({p for p, k in zip(named, kept) if k is None})
    listed = [k for k in kept[:-1] if k]
    del state.all_model_checkpoint_paths[:]
    state.all_model_checkpoint_paths.extend(listed)
    state.model_checkpoint_path = kept[-1] or (listed[-1] if listed else "")
    if outside and directory not in _WARNED_OUTSIDE:
        _WARNED_OUTSIDE.add(directory)
        logging.warning("%s names checkpoints outside %s (%s): ignored, never restored from "
                        "or rotated (another run's? copied with absolute paths)",
                        os.path.join(directory, STATE_FILE), directory, names_text(outside))
    return outside


def read_state_file(directory: str) -> tuple[CheckpointState | None, str | None]:
    """The directory's `checkpoint` state, parsed without TensorFlow's ValueError or logging;
    checkpoints it names outside `directory` left out (`_drop_outside`).

    Returns:
      (state with paths joined to `directory`, None) when it reads and names a checkpoint;
      (None, why) otherwise: "is missing", "is empty", "does not parse (...)", "names only
      checkpoints outside the run".
    """
    state, problem = _parse_state_file(directory)
    if state is not None and _drop_outside(directory, state) and (
            not state.model_checkpoint_path):
        return None, "names only checkpoints outside the run"
    return state, problem


def _parse_state_file(directory: str) -> tuple[CheckpointState | None, str | None]:
    """`read_state_file` with every path it names, those outside `directory` included."""
    path = os.path.join(directory, STATE_FILE)
    if not tf.io.gfile.exists(path):
        return None, "is missing"
    try:
        with tf.io.gfile.GFile(path, "r") as f:
            text = f.read()
        state = text_format.Parse(text, CheckpointState())
    except (tf.errors.OpError, text_format.ParseError, UnicodeDecodeError) as e:
        return None, f"does not parse ({one_line(e)})"
    if not state.model_checkpoint_path:
        return None, "is empty" if not text.strip() else "names no checkpoint"
    state.model_checkpoint_path = os.path.join(directory, state.model_checkpoint_path)
    paths = [os.path.join(directory, p) for p in state.all_model_checkpoint_paths]
    del state.all_model_checkpoint_paths[:]
    state.all_model_checkpoint_paths.extend(paths)
    return state, None


def checkpoints_newest_first(directory: str) -> list[str]:
    """The complete checkpoints of `directory`, highest step first.

    Those on disk named `<name>-N`, and any other complete one the state file lists (an
    imported or hand-named checkpoint); a listed checkpoint whose files are gone is left out.
    """
    paths = set(_on_disk(directory))
    state, _ = read_state_file(directory)
    if state is not None:
        listed = [*state.all_model_checkpoint_paths, state.model_checkpoint_path]
        paths.update(p for p in listed if p not in paths and is_complete(p))
    return sorted(paths, key=lambda p: (step_of(p), p), reverse=True)


def _warn_about_state_file(directory: str, newest: str) -> None:
    """One warning line when the state file would not have led to `newest`."""
    state, problem = read_state_file(directory)
    if directory in _WARNED_OUTSIDE:
        return  # its paths outside the run were the one warning about this file
    if problem is not None:
        logging.warning("%s %s: using the newest complete checkpoint on disk, %s",
                        os.path.join(directory, STATE_FILE), problem, os.path.basename(newest))
    elif state.model_checkpoint_path != newest:
        logging.warning("%s names %s, but %s on disk is newer: using it",
                        os.path.join(directory, STATE_FILE),
                        os.path.basename(state.model_checkpoint_path), os.path.basename(newest))


def repair_state_file(directory: str) -> bool:
    """Rewrites the state file from the checkpoints on disk when it does not list them all.

    tf.train.CheckpointManager rotates (deletes beyond keep_checkpoint_max) only what the
    state file lists, with its timestamps, and saves as `latest` what it names: the repaired
    file lists every complete checkpoint oldest first, timestamped by its index file, so
    the oldest are still deleted first. Call it only while holding the run lock (a training
    run: the only writer of the directory). Checkpoints it names outside `directory` are
    dropped (the file is removed when it names no other): the manager never deletes them.

    Returns:
      Whether the file was rewritten or removed (with one warning line when it was missing,
      damaged or named checkpoints outside).
    """
    on_disk = checkpoints_newest_first(directory)[::-1]
    state, problem = _parse_state_file(directory)
    # The manager would restore and rotate every path the file names: none outside may stay.
    dropped = state is not None and _drop_outside(directory, state)
    if dropped and not on_disk:
        # Only another run's checkpoints: without this file the manager starts afresh.
        tf.io.gfile.remove(os.path.join(directory, STATE_FILE))
        return True
    if not on_disk:
        return False
    if not dropped and state is not None and list(state.all_model_checkpoint_paths) == (
            on_disk) and state.model_checkpoint_path == on_disk[-1]:
        return False
    stamps = [tf.io.gfile.stat(p + ".index").mtime_nsec / 1e9 for p in on_disk]
    new = CheckpointState(
        model_checkpoint_path=os.path.basename(on_disk[-1]),
        all_model_checkpoint_paths=[os.path.relpath(p, directory) for p in on_disk],
        all_model_checkpoint_timestamps=stamps,
        # Below every timestamp: the manager only rotates checkpoints younger than this.
        last_preserved_timestamp=min(stamps) - 1)
    file_io.atomic_write(os.path.join(directory, STATE_FILE), text_format.MessageToString(new))
    names = ", ".join(os.path.basename(p) for p in on_disk)
    what = problem if problem is not None else (
        "named checkpoints outside the run" if dropped
        else "did not list every checkpoint on disk")
    log = logging.warning if problem is not None else logging.info
    log("%s %s: rewritten from the checkpoints on disk (%s); resuming from %s",
        os.path.join(directory, STATE_FILE), what, names, os.path.basename(on_disk[-1]))
    return True


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


def check_readable(path: str, flag: str = "checkpoint_path") -> str:
    """Returns `path` if it reads, else raises UserError naming the flag and the damage."""
    reason = damage(path)
    if reason:
        raise UserError(f"--{flag}={path}: the checkpoint is damaged ({reason})")
    return path


def newest_good_checkpoint(directory: str, warn_state_file: bool = True,
                           known_good: str | None = None) -> str | None:
    """The newest checkpoint of `directory` that reads, warning about newer damaged ones.

    Checkpoints are found on disk (`checkpoints_newest_first`); a missing or damaged state
    file gives one warning line (unless `warn_state_file` is False: a training run repairs
    it and says so then). One that vanishes while it is checked (rotated away by a training
    run) is skipped without a warning. `known_good`, a checkpoint this process has already
    found readable, is not read again (its damage check reads every tensor).

    Returns:
      Its prefix, or None if the directory holds no checkpoint.

    Raises:
      UserError: checkpoints are there but none of them reads.
    """
    damaged = []
    for path in checkpoints_newest_first(directory):
        reason = None if path == known_good else damage(path)
        if reason is None:
            if damaged:
                logging.warning(
                    "Checkpoint(s) %s damaged (%s): falling back to %s",
                    ", ".join(os.path.basename(p) for p, _ in damaged), damaged[0][1], path)
            elif warn_state_file:
                _warn_about_state_file(directory, path)
            return path
        if is_complete(path):
            damaged.append((path, reason))
    if damaged:
        names = ", ".join(os.path.basename(p) for p, _ in damaged)
        raise UserError(f"no readable checkpoint in {directory}: {names} damaged "
                        f"({damaged[0][1]}); restore them from a backup or train anew in "
                        "another --output_dir")
    return None


def new_checkpoints(directory: str, timeout_secs: float,
                    poll_secs: float = 1.0) -> Iterator[str]:
    """Yields each new newest checkpoint of `directory` as it appears (discovered on disk,
    as `tf.train.checkpoints_iterator` does from the state file); stops after `timeout_secs`
    without a new one."""
    last, deadline = None, time.time() + timeout_secs
    while True:
        candidates = checkpoints_newest_first(directory)
        if candidates and candidates[0] != last:
            path = newest_good_checkpoint(directory)
            if path is not None and path != last:
                last = path
                yield path
                deadline = time.time() + timeout_secs
                continue
        if time.time() >= deadline:
            return
        time.sleep(poll_secs)


class Vanished(Exception):
    """A checkpoint (its prefix is the message) vanished while it was read."""


def retry_if_vanished(discover: Callable[[], str], read: Callable[[str], T],
                      attempts: int = READ_ATTEMPTS) -> tuple[str, T]:
    """`read(discover())`, discovering again when the checkpoint vanishes while it is read.

    A training run beside this reader rotates its oldest checkpoints away; a read that fails
    because its checkpoint's files are gone is repeated with the then-newest ones.

    Args:
      discover: () -> checkpoint prefix to read.
      read: prefix -> result; may raise tf.errors.OpError (or UserError / ValueError naming
        a damaged checkpoint) when the files vanish, or `Vanished` naming another
        checkpoint it reads that vanished.
      attempts: reads before giving up.

    Returns:
      (the prefix read, read's result).

    Raises:
      UserError: the checkpoints vanished under every attempt. A failure of a checkpoint that
        is still complete is raised as it is.
    """
    for _ in range(attempts):
        path = discover()
        try:
            return path, read(path)
        except Vanished as e:
            gone = str(e)
        except (tf.errors.OpError, ValueError):
            if is_complete(path):
                raise
            gone = path
        logging.warning("%s vanished while it was read (rotated by a training run?): "
                        "reading the newest checkpoints again", gone)
    raise UserError(f"the checkpoints vanished while they were read, {attempts} times: a "
                    "training run beside this one rotates them too fast; raise its "
                    "--keep_checkpoint_max or read a copy")


# --- Strict restore ---------------------------------------------------------------------------
def _is_variable(obj) -> bool:
    return isinstance(obj, (tf.Variable, keras.Variable))


def model_variables(obj, path: tuple[str, ...] = (), seen=None) -> Iterator[tuple]:
    """(attribute path, variable) of every variable reachable from `obj` by tracking."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if _is_variable(obj):
        yield path, obj
        return
    children = getattr(obj, "_trackable_children", None)
    if children is None:
        return
    for name, child in sorted(children(save_type="checkpoint").items()):
        yield from model_variables(child, path + (name,), seen)


def checkpoint_variables(reader, root_child: str = "model") -> dict[tuple[str, ...], str]:
    """(attribute path below `root_child`) -> checkpoint key, from a checkpoint's object graph.

    A variable reachable by several paths (a shared matrix) is listed under each of them.
    """
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor(OBJECT_GRAPH_KEY))
    start = [c.node_id for c in graph.nodes[0].children if c.local_name == root_child]
    keys: dict[tuple[str, ...], str] = {}
    pending = [(start[0], (), frozenset())] if start else []
    while pending:
        node_id, path, ancestors = pending.pop()
        node = graph.nodes[node_id]
        for attribute in node.attributes:
            if attribute.name == _VARIABLE_VALUE:
                keys[path] = attribute.checkpoint_key
        ancestors = ancestors | {node_id}
        pending.extend((c.node_id, path + (c.local_name,), ancestors)
                       for c in node.children if c.node_id not in ancestors)
    return keys


def variable_name(variable) -> str:
    """A variable's name as t2t writes it (`transformer/body/...`, no `:0`)."""
    return getattr(variable, "path", None) or variable.name.removesuffix(":0")


def match_shapes(wanted: dict[str, tuple[str | None, Any]],
                 shapes: dict[str, Any]) -> dict[str, Any]:
    """Matches model variables with a checkpoint's tensors by key, then by shape.

    Args:
      wanted: model variable name -> (its checkpoint key, None when the checkpoint has no
        key for it; the variable).
      shapes: the checkpoint's key -> shape (`reader.get_variable_to_shape_map()`).

    Returns:
      {"plan": name -> (key, variable) of those of the checkpoint's shape, "missing": names
      whose key the checkpoint lacks, "mismatched": "name: checkpoint [shape] vs model
      [shape]", "used": the set of keys found, of either shape}; the lists sorted.
    """
    plan, missing, mismatched, used = {}, [], [], set()
    for name, (key, variable) in sorted(wanted.items()):
        if key is None or key not in shapes:
            missing.append(name)
            continue
        used.add(key)
        if tuple(shapes[key]) != tuple(variable.shape):
            mismatched.append(f"{name}: checkpoint {list(shapes[key])} vs model "
                              f"{list(variable.shape)}")
        else:
            plan[name] = (key, variable)
    return {"plan": plan, "missing": missing, "mismatched": mismatched, "used": used}


def match_model(model, reader) -> dict[str, Any]:
    """Matches the model's variables with a t2t_lite checkpoint's `model` variables.

    Args:
      model: a built keras model.
      reader: tf.train.load_checkpoint of a checkpoint with an object graph.

    Returns:
      `match_shapes`' plan, missing and mismatched, and "unused": the checkpoint's model
      variables ("model/<attribute path>") that the model does not have, sorted.
    """
    keys = checkpoint_variables(reader)
    found = match_shapes({variable_name(variable): (keys.get(path), variable)
                          for path, variable in model_variables(model)},
                         reader.get_variable_to_shape_map())
    used = found.pop("used")
    unused_paths = {}
    for path, key in sorted(keys.items()):
        if key not in used:
            unused_paths.setdefault(key, "model/" + "/".join(path))
    return {**found, "unused": sorted(unused_paths.values())}


def names_text(names: list[str]) -> str:
    """The first few names, then "(+N more)"."""
    more = f" (+{len(names) - _NAMES_SHOWN} more)" if len(names) > _NAMES_SHOWN else ""
    return ", ".join(names[:_NAMES_SHOWN]) + more


def _hparams_hint(path: str, hparams: Any) -> str:
    """Which hparams differ between the run beside checkpoint `path` and the model's."""
    json_path = os.path.join(os.path.dirname(path), "hparams.json")
    try:
        with tf.io.gfile.GFile(json_path, "r") as f:
            saved = json.load(f)
    except (tf.errors.OpError, ValueError):
        saved = None
    values = hparams.values() if hparams is not None else {}
    differ = sorted(k for k in saved or {} if k in values and saved[k] != values[k])
    if not differ:
        return "built with other --hparams_set/--hparams/--problem than the run?"
    saved_text = ", ".join(f"{k}={saved[k]}" for k in differ[:_NAMES_SHOWN])
    model_text = ", ".join(f"{k}={values[k]}" for k in differ[:_NAMES_SHOWN])
    return f"the run's hparams.json has {saved_text}, the model {model_text}: --hparams?"


def check_model_matches(model, path: str, hparams: Any = None,
                        name: str | None = None) -> None:
    """Raises unless every model variable is in checkpoint `path` with its shape and every
    model variable of the checkpoint belongs to the model (optimizer slots, the step and the
    input position are not model variables: the caller restores those it needs).

    Args:
      model: a built keras model, tracked as `model` in the checkpoint.
      path: a t2t_lite checkpoint prefix (with an object graph).
      hparams: the model's hparams, to name those that differ from the run's hparams.json.
      name: how the error names the checkpoint (default `--checkpoint_path=<path>`).

    Raises:
      UserError: one line naming the first unmatched variables (and both shapes).
    """
    name = name or f"--checkpoint_path={path}"
    reader = tf.train.load_checkpoint(path)
    if not reader.has_tensor(OBJECT_GRAPH_KEY):
        raise UserError(f"{name} is not a t2t_lite checkpoint (it has no object graph)")
    found = match_model(model, reader)
    problems = [f"{title}: {names_text(found[key])}" for key, title in (
        ("missing", "model variables missing from the checkpoint"),
        ("mismatched", "of another shape"),
        ("unused", "checkpoint variables not used")) if found[key]]
    if problems:
        raise UserError(f"{name} does not match the model: {'; '.join(problems)} "
                        f"({_hparams_hint(path, hparams)})")


def check_restore_status(status, name: str) -> None:
    """Raises unless every object that the restoring tf.train.Checkpoint tracks (the
    optimizer's variables, ...) found its values in the checkpoint.

    Args:
      status: what tf.train.Checkpoint.restore returned.
      name: how the error names the checkpoint.

    Raises:
      UserError: one line naming what was not found.
    """
    try:
        status.assert_existing_objects_matched()
    except AssertionError as e:
        raise UserError(f"{name} does not hold everything this run restores: "
                        f"{one_line(e)[:400]}") from None


# --- Temporary folders --------------------------------------------------------------------------
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


def discard_failed_save(directory: str, step: int, prefix: str = "ckpt") -> str | None:
    """Removes what a save of `<prefix>-<step>` that raised left behind (its `_temp` folder of
    partial shards, and its files when they are not a whole, readable checkpoint), so that
    nothing half-written stays; call it only while holding the directory's run lock.

    Args:
      directory: the run's directory.
      step: the step whose save failed.
      prefix: the checkpoints' name.

    Returns:
      The newest readable checkpoint left in `directory` (the failed one itself when the
      save failed after writing it whole, e.g. on the `checkpoint` state file), or None.
    """
    path = os.path.join(directory, f"{prefix}-{step}")
    for folder in tf.io.gfile.glob(f"{path}_temp*"):
        if tf.io.gfile.isdir(folder):
            tf.io.gfile.rmtree(folder)
    if tf.io.gfile.glob(path + ".*") and (not is_complete(path) or damage(path)):
        for name in tf.io.gfile.glob(path + ".*"):
            tf.io.gfile.remove(name)
    for name in tf.io.gfile.glob(os.path.join(directory, "checkpoint.tmp*")):
        tf.io.gfile.remove(name)  # TensorFlow's temporary state file
    try:
        return newest_good_checkpoint(directory, warn_state_file=False)
    except UserError:
        return None


def failed_save_message(directory: str, step: int, problem: tuple[str, str | None],
                        prefix: str = "ckpt") -> str:
    """The one line of a checkpoint save that failed on a full disk or an unwritable
    directory (`errors.storage_problem`), after `discard_failed_save`: which checkpoint is
    kept and where a rerun resumes."""
    kept = discard_failed_save(directory, step, prefix)
    name = f"{prefix}-{step}"
    if kept is None:
        what = f"no checkpoint kept, {name} not written (a rerun starts at step 0)"
    elif step_of(kept) == step:
        what = f"checkpoint {name} written whole, the `checkpoint` state file not updated"
    else:
        what = (f"checkpoint {os.path.basename(kept)} kept; {name} not written (its partial "
                "files removed)")
    return describe_storage_problem(
        problem, f"{what}; make room in --output_dir={directory} and run the same command "
                 f"to resume at step {step_of(kept) if kept else 0}")


def temp_dir_name(stem: str) -> str:
    """A hidden, unique folder name `.<stem>.tmp-<host>-<pid>-<random>` that tells
    `remove_stale_temp_dirs` who writes it."""
    return f".{stem}.tmp-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def remove_stale_temp_dirs(parent: str, stem: str) -> list[str]:
    """Removes the `temp_dir_name(stem)` folders in `parent` whose writer is dead.

    A folder of this host whose pid no longer runs is stale; one of another host (its pid
    cannot be checked from here) only when its last change is STALE_TEMP_SECS old. A live
    writer's folder (a concurrent export or average) is kept.

    Returns:
      The folders removed.
    """
    pattern = re.compile(rf"^\.{re.escape(stem)}\.tmp-(?P<host>.+)-(?P<pid>\d+)-[0-9a-f]+$")
    removed = []
    if not tf.io.gfile.isdir(parent):
        return removed
    host = socket.gethostname()
    for name in tf.io.gfile.listdir(parent):
        match = pattern.match(name.rstrip("/"))
        if not match:
            continue
        path = os.path.join(parent, name.rstrip("/"))
        if match.group("host") == host:
            stale = not run_lock.pid_alive(int(match.group("pid")))
        else:
            stale = time.time() - tf.io.gfile.stat(path).mtime_nsec / 1e9 > STALE_TEMP_SECS
        if stale:
            tf.io.gfile.rmtree(path)
            removed.append(path)
            logging.warning("Removed %s, left by an interrupted run (pid %s on %s)", path,
                            match.group("pid"), match.group("host"))
    return removed


def give_dirs_the_umask(root: str) -> None:
    """Sets the mode of `root` and every folder below it to 0777 less the user's umask, as
    os.mkdir would (TensorFlow creates folders 0755 less the umask, tempfile.mkdtemp 0700), so
    that an output folder is as shared as the user's other files. Local paths only.
    """
    if "://" in root:
        return
    umask = os.umask(0o022)
    os.umask(umask)
    for folder, _, _ in os.walk(root):
        os.chmod(folder, 0o777 & ~umask)
