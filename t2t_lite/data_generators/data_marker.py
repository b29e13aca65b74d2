"""Completion markers of generated data: datagen's proof that a split is whole.

t2t-datagen skips a split whose first shard exists, so a run killed halfway (during the
shuffle, say) left 1 of 100 shards that the next run took as done, and training read them
without a word. Here, once every shard of a split is written and shuffled, datagen writes
`<data_dir>/<dataset_filename>.<split>.complete.json` last (atomically), listing each shard's
name, size in bytes and record count:

    {"split": "train", "max_cases": null, "shards": [
        {"name": "translate_ende_wmt32k-train-00000-of-00100", "bytes": 4718, "records": 12}, ...]}

A split without a valid marker is incomplete for datagen (it is removed and written again)
and, when its shard set is also incomplete by its names (`-00007-of-00100` missing), for
training too (one line naming what is missing and the datagen command). A complete shard set
without a marker (t2t-datagen's output, or an older t2t_lite's) is accepted with a warning.
Training also compares each shard's size with the marker's, a cheap stat that finds truncated
or replaced shards before the first step. The marker's name cannot match the shards' glob
(`<dataset_filename>-train*`).

Markers also record what the data was made from (`made_from`: the problem, the datagen
settings that change the records, and each raw input file's path, size and sha256) and the
vocab files written with it. A rerun whose inputs or settings differ is refused, naming each
change (`made_from_changes`), unless `--overwrite_data` asks for the data to be made again:
complete data is never kept over other inputs. Markers of an older t2t_lite, without
`made_from`, are accepted with a warning.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import struct
from typing import Any

import tensorflow as tf
from absl import logging

from t2t_lite import file_io
from t2t_lite.data_generators import corpus_io
from t2t_lite.errors import DataError

SPLIT_TAGS = ("train", "dev", "test")
MARKER_SUFFIX = ".complete.json"
UNSHUFFLED_INFIX = "-unshuffled"
INCOMPLETE_SUFFIX = ".incomplete"
_SHARD_NAME = re.compile(r"-(\d{5})-of-(\d{5})$")


# Test hook: `T2T_LITE_DATAGEN_KILL_AT=<point>` makes datagen SIGKILL itself at that point, so
# that tests can check that a rerun after a crash at any moment gives the complete data set
# (`<point>:SIGTERM` sends that signal instead, a scheduler's stop at that moment).
# Points: "vocab" (vocab built, not stored), "generate" (10 examples written), "rename" (one
# shard renamed), "shuffle" (one shard shuffled), "marker" (one split's marker written),
# "worker" (the last of several encoding workers, `parallel_datagen`, after its first record).
KILL_AT_ENV = "T2T_LITE_DATAGEN_KILL_AT"


def kill_point(name: str) -> None:
    """SIGKILLs this process (or sends it the signal after a colon, "generate:SIGTERM") when
    the test hook `T2T_LITE_DATAGEN_KILL_AT` names `name`."""
    point, _, signal_name = os.environ.get(KILL_AT_ENV, "").partition(":")
    if point == name:
        os.kill(os.getpid(), getattr(signal, signal_name or "SIGKILL"))


def marker_path(data_dir: str, dataset_filename: str, tag: str) -> str:
    """`<data_dir>/<dataset_filename>.<tag>.complete.json`."""
    return os.path.join(data_dir, f"{dataset_filename}.{tag}{MARKER_SUFFIX}")


def final_shards(data_dir: str, dataset_filename: str, tag: str) -> list[str]:
    """The split's finished shard files (`<base>-<tag>-*`, no `.incomplete`), sorted."""
    pattern = os.path.join(data_dir, f"{dataset_filename}-{tag}*")
    return sorted(f for f in tf.io.gfile.glob(pattern) if not f.endswith(INCOMPLETE_SUFFIX))


def all_split_files(data_dir: str, dataset_filename: str, tag: str) -> list[str]:
    """Every file of the split in any state: finished, unshuffled, `.incomplete`, marker."""
    files = set()
    for base in (dataset_filename, dataset_filename + UNSHUFFLED_INFIX):
        files.update(tf.io.gfile.glob(os.path.join(data_dir, f"{base}-{tag}*")))
    marker = marker_path(data_dir, dataset_filename, tag)
    if tf.io.gfile.exists(marker):
        files.add(marker)
    return sorted(files)


def count_records(path: str) -> int:
    """Number of records in a TFRecord file, reading only the 12-byte headers.

    Raises:
      ValueError: the file ends inside a record (names the file and byte offset).
    """
    size = tf.io.gfile.stat(path).length
    count, position = 0, 0
    with tf.io.gfile.GFile(path, "rb") as f:
        while position < size:
            header = f.read(12)
            if len(header) < 12:
                raise ValueError(f"{path}: truncated TFRecord header at byte {position}")
            (length,) = struct.unpack_from("<Q", header)
            end = position + 12 + length + 4
            if end > size:
                raise ValueError(f"{path}: truncated TFRecord of {length} bytes at byte "
                                 f"{position} (the file has {size} bytes)")
            f.seek(end)
            position = end
            count += 1
    return count


def missing_shards(files: list[str]) -> tuple[int, list[int]] | None:
    """For t2t-named shards (`...-00003-of-00010`): (total, missing indices); None when the
    names carry no shard numbers (user files) and nothing can be said."""
    totals, indices = set(), set()
    for name in files:
        match = _SHARD_NAME.search(name)
        if not match:
            return None
        indices.add(int(match.group(1)))
        totals.add(int(match.group(2)))
    if len(totals) != 1:
        return None
    (total,) = totals
    return total, sorted(set(range(total)) - indices)


def fingerprint(paths: list[str]) -> dict[str, Any]:
    """What identifies the content of raw input files, read once.

    Args:
      paths: one file, or the files of one input in reading order (a treebank's sections).

    Returns:
      {"path": absolute path of the first file, "files": count, "bytes": total size,
      "sha256": hex digest of the contents in order, "lines": number of lines as
      `text_problems.count_lines` counts them (all files together, gzip/xz decompressed)}.
    """
    digest, size, lines = hashlib.sha256(), 0, 0
    for path in paths:
        last, file_lines = b"\n", 0
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
                file_lines += chunk.count(b"\n")
                last = chunk[-1:]
        file_lines += last != b"\n"  # a last line without its newline
        # A gzip/xz file: the lines of its text, not of its compressed bytes.
        lines += corpus_io.count_lines(path) if corpus_io.compression(path) else file_lines
    return {"path": os.path.abspath(paths[0]), "files": len(paths), "bytes": size,
            "sha256": digest.hexdigest(), "lines": lines}


def run_inputs(encoders: dict[str, Any], data_dir: str | None,
               dataset_filename: str | None) -> dict[str, Any]:
    """What a run reads that gives its ids their meaning: the record a training run keeps
    (`run_metadata.save_inputs`) and every later use of the run compares
    (`run_metadata.check_inputs`).

    Args:
      encoders: the problem's text encoders by feature (`problem_hparams.vocabulary`);
        those read from a file (`.filename`) are recorded.
      data_dir: the data directory (None: no data recorded).
      dataset_filename: the problem's shard base name, whose split markers are recorded.

    Returns:
      {"vocab": {file name: {"path": path read, "sha256": content hash}},
       "features": {feature: its vocab's file name} (which file is the inputs', for
       fine-tuning: `--vocab_from`, `--warm_start_from`),
       "data": {marker file name: sha256 of the marker}}.
    """
    vocab, features = {}, {}
    for feature, encoder in sorted(encoders.items()):
        path = getattr(encoder, "filename", None)
        if path:
            path = path if "://" in path else os.path.abspath(path)
            vocab[os.path.basename(path)] = {"path": path, "sha256": file_io.sha256_of(path)}
            features[feature] = os.path.basename(path)
    data = {}
    for tag in SPLIT_TAGS if data_dir and dataset_filename else ():
        path = marker_path(data_dir, dataset_filename, tag)
        if tf.io.gfile.exists(path):
            data[os.path.basename(path)] = file_io.sha256_of(path)
    return {"vocab": vocab, "features": features, "data": data}


def made_from_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between two `made_from` records, one phrase per change.

    Args:
      old, new: {"problem": name, "settings": {flag: value}, "inputs": {label:
        `fingerprint`}} (the marker's and this run's).

    Returns:
      Phrases such as "--approx_vocab_size 4096 -> 8192" or "--train_src a.en -> a.de
      (sha256 1f2e3d4c5b6a -> 9a8b7c6d5e4f)"; empty when the data was made from the same
      inputs (a file moved with the same content is the same input).
    """
    changes = []
    if old.get("problem") != new.get("problem"):
        changes.append(f"--problem {old.get('problem')} -> {new.get('problem')}")
    old_settings, new_settings = old.get("settings", {}), new.get("settings", {})
    for name in sorted(set(old_settings) | set(new_settings)):
        if old_settings.get(name) != new_settings.get(name):
            changes.append(f"{name} {old_settings.get(name)} -> {new_settings.get(name)}")
    old_inputs, new_inputs = old.get("inputs", {}), new.get("inputs", {})
    for label in sorted(set(old_inputs) | set(new_inputs)):
        before, after = old_inputs.get(label), new_inputs.get(label)
        if before is None:
            changes.append(f"{label} {after['path']} added")
        elif after is None:
            changes.append(f"{label} {before['path']} no longer read")
        elif before["sha256"] != after["sha256"]:
            what = (f"{before['path']} -> {after['path']}" if before["path"] != after["path"]
                    else f"{after['path']} changed")
            changes.append(f"{label} {what} (sha256 {before['sha256'][:12]} -> "
                           f"{after['sha256'][:12]})")
    return changes


def write_marker(data_dir: str, dataset_filename: str, tag: str,
                 max_cases: int | None = None, made_from: dict[str, Any] | None = None,
                 vocab_files: list[str] | None = None) -> dict[str, Any]:
    """Writes the split's marker after checking that its shard set is whole.

    Args:
      data_dir, dataset_filename, tag: the split.
      max_cases: datagen's --max_cases (None: all).
      made_from: see `made_from_changes` (None: not recorded).
      vocab_files: names of the vocab files in data_dir written with the data (t2t's one, or
        SentencePiece models); recorded as "vocab_file" (the first) and "vocab_files".

    Returns:
      The marker's content.

    Raises:
      ValueError: the split has no shard, or shards are missing by their names.
    """
    files = final_shards(data_dir, dataset_filename, tag)
    if not files:
        raise ValueError(f"datagen wrote no {tag} shard for {dataset_filename} in {data_dir}")
    numbering = missing_shards(files)
    if numbering and numbering[1]:
        raise ValueError(f"datagen left the {tag} split of {dataset_filename} without shards "
                         f"{numbering[1][:5]} of {numbering[0]}")
    content = {
        "split": tag,
        "max_cases": max_cases,
        "made_from": made_from,
        "vocab_file": vocab_files[0] if vocab_files else None,
        "vocab_files": vocab_files or [],
        "shards": [_shard_entry(f) for f in files],
    }
    file_io.atomic_write(marker_path(data_dir, dataset_filename, tag),
                         json.dumps(content, indent=1) + "\n")
    return content


def _shard_entry(path: str) -> dict[str, Any]:
    """A shard's line in its marker: name, bytes, records, sha256 (no modification time: the
    marker of the same data is the same file wherever and whenever datagen made it)."""
    return {"name": os.path.basename(path), "bytes": tf.io.gfile.stat(path).length,
            "records": count_records(path), "sha256": _sha256(path)}


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with tf.io.gfile.GFile(path, "rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def read_marker(data_dir: str, dataset_filename: str, tag: str) -> dict[str, Any] | None:
    """The split's marker, or None when absent or unreadable (an unreadable one counts as
    absent: markers are written atomically, so it was not written by datagen)."""
    path = marker_path(data_dir, dataset_filename, tag)
    if not tf.io.gfile.exists(path):
        return None
    try:
        with tf.io.gfile.GFile(path, "r") as f:
            content = json.load(f)
        return content if isinstance(content.get("shards"), list) else None
    except (ValueError, AttributeError):
        return None


def marker_mismatches(data_dir: str, marker: dict[str, Any]) -> list[str]:
    """What differs between the marker and the files on disk (missing shards, sizes, and the
    content of a shard modified since the marker was written, by its sha256): one phrase per
    damaged shard, naming it; empty when the split is as datagen left it.

    Each shard is hashed (sha256 reads ~200 MB/s: seconds for a WMT-size split), so a
    same-size damage is found before training writes anything. Markers of an older t2t_lite
    (no sha256): sizes only."""
    problems = []
    for shard in marker["shards"]:
        path = os.path.join(data_dir, shard["name"])
        if not tf.io.gfile.exists(path):
            problems.append(f"{path} is missing")
            continue
        stat = tf.io.gfile.stat(path)
        if stat.length != shard["bytes"]:
            problems.append(f"{path} has {stat.length} bytes where datagen wrote "
                            f"{shard['bytes']}")
        elif shard.get("sha256") and _sha256(path) != shard["sha256"]:
            problems.append(f"{path} was changed since datagen wrote it (same size, other "
                            "content: its sha256 differs from the marker's)")
    return problems


def split_is_complete(data_dir: str, dataset_filename: str, tag: str) -> bool:
    """True when the split has a marker and its files match it."""
    marker = read_marker(data_dir, dataset_filename, tag)
    return marker is not None and not marker_mismatches(data_dir, marker)


def remove_split(data_dir: str, dataset_filename: str, tag: str) -> list[str]:
    """Deletes every file of the split (finished, unshuffled, partial, marker); returns them."""
    files = all_split_files(data_dir, dataset_filename, tag)
    for path in files:
        tf.io.gfile.remove(path)
    return files


def find_damaged_shard(files: list[str]) -> str | None:
    """The first file whose TFRecord framing or checksums are broken, with the reason; None
    if all are whole (used to name the file behind a DataLossError: reads every record)."""
    for path in files:
        try:
            count_records(path)
        except ValueError as e:
            return str(e)
    for path in files:
        try:
            for _ in tf.data.TFRecordDataset(path, buffer_size=1 << 22).batch(1 << 14):
                pass
        except tf.errors.DataLossError as e:
            reason = re.search(r"corrupted record at \d+", e.message)
            return f"{path}: {reason.group(0) if reason else ' '.join(e.message.split())}"
    return None


_WARNED: set[tuple[str, str]] = set()


def check_split_for_reading(data_dir: str, dataset_filename: str, tag: str, files: list[str],
                            datagen_command: str) -> None:
    """Refuses to read a split that is incomplete or damaged; warns once about a complete
    shard set without a marker (t2t-datagen's output).

    Args:
      data_dir: the data directory.
      dataset_filename: the problem's shard base name.
      tag: "train", "dev" or "test".
      files: the split's finished shard files about to be read (non-empty).
      datagen_command: the command line that (re)generates the data, for the message.

    Raises:
      DataError: one line naming the damaged or missing shards and `datagen_command`.
    """
    marker = read_marker(data_dir, dataset_filename, tag)
    if marker is not None:
        problems = marker_mismatches(data_dir, marker)
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise DataError(f"Damaged data: {problems[0]}{more}; datagen regenerates the "
                            f"{tag} split: {datagen_command}")
        return
    numbering = missing_shards(files)
    if numbering and numbering[1]:
        total, missing = numbering
        raise DataError(
            f"The {tag} split of {dataset_filename} in {data_dir} is incomplete: "
            f"{total - len(missing)} of {total} shards and no completion marker (an "
            f"interrupted datagen?); datagen completes it: {datagen_command}")
    if (data_dir, tag) not in _WARNED:
        _WARNED.add((data_dir, tag))
        logging.warning(
            "%s: no datagen completion marker for the %s split (data written by t2t-datagen "
            "or an older t2t_lite); reading its %d shard(s)%s", data_dir, tag, len(files),
            ", a complete set by their names" if numbering else "")
