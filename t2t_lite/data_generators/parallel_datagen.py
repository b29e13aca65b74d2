"""Writing a text split's shards fast, in one process or in N worker processes.

t2t writes example k of a split to shard k mod S (round robin, S shards). Here worker w of N
owns the shards s with s mod N == w: it reads the split's samples itself (the problem's own
`generate_samples`, a stream over its files), encodes only the examples of its shards and
writes those shards; the parent builds the vocab first and renames the shards into place
when every worker has finished. Each shard gets the same examples in the same order
whatever N is, and examples are serialized deterministically (features in sorted order),
so the shards are byte-identical for any number of workers. Memory: each worker holds one
sample at a time and the encoder; nothing grows with the corpus.

Workers are forked (`multiprocessing` "fork"): they inherit the problem, its encoder and the
modules already imported, and import nothing (TensorFlow, imported by the parent, takes
seconds to import again). Workers only need samples that can be read again, so N > 1 is
offered for the translation problems (files on disk); other problems use one process. The
encoder is t2t's subword vocabulary or a SentencePiece model (one per side when the two
sides have their own): either encodes a sample on its own, whatever N is.

Records are framed as TFRecord (length, masked CRC32C of the length, data, masked CRC32C of
the data) by this module, with `google_crc32c`, so that no TensorFlow call is made per
record.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import gc
import multiprocessing
import os
import struct
import time
from collections.abc import Callable, Iterable
from typing import Any, BinaryIO

import google_crc32c

from t2t_lite.data_generators import text_encoder
from t2t_lite.errors import UserError

INCOMPLETE_SUFFIX = ".incomplete"

# Varint bytes of the small ids (every id of a vocab up to 2^16), looked up instead of built.
_VARINT_TABLE_SIZE = 1 << 16


def _varint(value: int) -> bytes:
    """Protocol buffer base-128 varint of a non-negative int (a negative int64 as its
    10-byte two's complement, as protobuf writes it)."""
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_VARINTS = [_varint(i) for i in range(_VARINT_TABLE_SIZE)]


def _ids_bytes(ids: list[int]) -> bytes:
    # The table lookup runs in C (map); a negative index would silently pick a wrong entry,
    # so ids out of the table's range take the slow path.
    if ids and (min(ids) < 0 or max(ids) >= _VARINT_TABLE_SIZE):
        return b"".join(map(_varint, ids))
    return b"".join(map(_VARINTS.__getitem__, ids))


def _length(n: int) -> bytes:
    return _VARINTS[n] if n < _VARINT_TABLE_SIZE else _varint(n)


def serialize_example(features: dict[str, list[int]]) -> bytes:
    """A tf.train.Example of int64 list features, serialized with its features in sorted
    order: equal to `to_example(features).SerializeToString(deterministic=True)` when no
    name is a prefix of another (protobuf's upb puts "targets_segmentation" before
    "targets"; datagen's names are "inputs" and "targets").

    Args:
      features: name -> [n] ints (non-empty lists).

    Returns:
      The serialized Example.
    """
    entries = []
    for name in sorted(features):
        packed = _ids_bytes(features[name])
        int64_list = b"\x0a" + _length(len(packed)) + packed          # Int64List.value
        feature = b"\x1a" + _length(len(int64_list)) + int64_list     # Feature.int64_list
        key = name.encode("utf-8")
        entry = (b"\x0a" + _length(len(key)) + key                     # map key
                 + b"\x12" + _length(len(feature)) + feature)          # map value
        entries.append(b"\x0a" + _length(len(entry)) + entry)         # Features.feature
    body = b"".join(entries)
    return b"\x0a" + _length(len(body)) + body                        # Example.features


def _masked_crc(data: bytes) -> bytes:
    crc = google_crc32c.value(data)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def write_record(f: BinaryIO, record: bytes) -> None:
    """Appends one TFRecord-framed record to an open binary file."""
    length = struct.pack("<Q", len(record))
    f.write(length + _masked_crc(length) + record + _masked_crc(record))


def _encode_sample(sample: dict[str, Any], encoder: Any, has_inputs: bool,
                   targets_encoder: Any = None) -> bytes:
    """A text sample's serialized Example: each side encoded (the targets by
    `targets_encoder` when given), EOS appended (t2t's `text2text_generate_encoded`)."""
    features = dict(sample)
    if has_inputs:
        features["inputs"] = encoder.encode(sample["inputs"]) + [text_encoder.EOS_ID]
    features["targets"] = ((targets_encoder or encoder).encode(sample["targets"])
                           + [text_encoder.EOS_ID])
    if features.keys() == ({"inputs", "targets"} if has_inputs else {"targets"}):
        return serialize_example(features)
    from t2t_lite.data_generators import generator_utils  # other features: t2t's to_example

    return generator_utils.to_example(features).SerializeToString(deterministic=True)


def write_owned_shards(samples: Iterable[dict[str, Any]], encoder: Any, has_inputs: bool,
                       paths: list[str], worker: int, workers: int,
                       max_cases: int | None = None,
                       on_record: Callable[[int], None] | None = None,
                       targets_encoder: Any = None) -> list[int]:
    """Encodes and writes the examples of worker `worker`'s shards (`<path>.incomplete`).

    Example k (counting every sample, up to `max_cases`) belongs to shard k mod S; the
    worker owns the shards s with s mod `workers` == `worker`, creates each (empty ones too)
    and skips the other examples without encoding them.

    Args:
      samples: the split's text samples ({"inputs": str, "targets": str}), in order.
      encoder: text encoder of both sides (of the inputs, with `targets_encoder`).
      has_inputs: whether samples have inputs.
      paths: the S final shard paths (written with the `.incomplete` suffix).
      worker, workers: this worker's index and the number of workers.
      max_cases: examples of the split to consider (None or 0: all).
      on_record: called with the running count of records this worker wrote.
      targets_encoder: the targets' own encoder (two SentencePiece models; None: `encoder`).

    Returns:
      [S] records written per shard (0 for shards of other workers).
    """
    num_shards = len(paths)
    owned = [s % workers == worker for s in range(num_shards)]
    counts = [0] * num_shards
    with contextlib.ExitStack() as stack:
        files = {s: stack.enter_context(open(paths[s] + INCOMPLETE_SUFFIX, "wb",
                                             buffering=1 << 20))
                 for s in range(num_shards) if owned[s]}
        written = 0
        for k, sample in enumerate(samples):
            if max_cases and k >= max_cases:
                break
            shard = k % num_shards
            if not owned[shard]:
                continue
            write_record(files[shard], _encode_sample(sample, encoder, has_inputs,
                                                      targets_encoder))
            counts[shard] += 1
            written += 1
            if on_record is not None:
                on_record(written)
    return counts


# The split a forked worker writes: set by the parent just before it forks the workers.
_JOB: dict[str, Any] = {}


def _run_worker(worker: int) -> list[int]:
    from t2t_lite.data_generators import data_marker

    job = _JOB
    samples = job["make_samples"]()

    def kill_at_first(written: int) -> None:
        if written == 1:
            data_marker.kill_point("worker")

    return write_owned_shards(samples, job["encoder"], job["has_inputs"], job["paths"],
                              worker, job["workers"], job["max_cases"],
                              on_record=kill_at_first if worker == job["workers"] - 1 else None,
                              targets_encoder=job["targets_encoder"])


def write_split(make_samples: Callable[[], Iterable[dict[str, Any]]], encoder: Any,
                has_inputs: bool, paths: list[str], max_cases: int | None = None,
                workers: int = 1, desc: str = "Writing", targets_encoder: Any = None) -> int:
    """Writes a split's shards (round robin, t2t's) with `workers` processes, renaming each
    shard to its final name once all are complete; on any error (or Ctrl-C) every shard
    file of the split is removed.

    Args:
      make_samples: returns a new iterator over the split's text samples each call (a
        worker reads the split itself).
      encoder: text encoder of both sides (of the inputs, with `targets_encoder`).
      has_inputs: whether samples have inputs.
      paths: the S shard paths.
      max_cases: at most this many examples (None or 0: all).
      workers: processes encoding (1: this process).
      desc: progress label.
      targets_encoder: the targets' own encoder (two SentencePiece models; None: `encoder`).

    Returns:
      Number of examples written.
    """
    from t2t_lite.data_generators import data_marker
    from t2t_lite.utils import progress

    try:
        if workers <= 1:
            def kill_at_ten(written: int) -> None:
                if written == 10:
                    data_marker.kill_point("generate")

            samples = progress.track(make_samples(), max_cases or None, desc, "examples")
            counts = write_owned_shards(samples, encoder, has_inputs, paths, 0, 1, max_cases,
                                        on_record=kill_at_ten, targets_encoder=targets_encoder)
        else:
            counts = _run_workers(make_samples, encoder, has_inputs, paths, max_cases, workers,
                                  targets_encoder)
        for path in paths:
            os.replace(path + INCOMPLETE_SUFFIX, path)
            data_marker.kill_point("rename")
    except BaseException:
        for path in paths:
            for name in (path, path + INCOMPLETE_SUFFIX):
                if os.path.exists(name):
                    os.remove(name)
        raise
    return sum(counts)


def _worker_death(processes: list, workers: int) -> str:
    """The one line for an encoding worker that died (the out-of-memory killer, a signal),
    naming its pid and how it ended where the pool's processes are known.

    Args:
      processes: the pool's `multiprocessing.Process` objects (may be empty).
      workers: --num_datagen_workers.
    """
    import signal

    how = ""
    for process in processes:
        process.join(5)  # the pool has ended them: the others by its SIGTERM
    ended = [p for p in processes if p.exitcode not in (None, 0, -signal.SIGTERM)] or [
        p for p in processes if p.exitcode not in (None, 0)]
    if ended:
        code = ended[0].exitcode
        if code < 0:
            name = (signal.Signals(-code).name if -code in signal.valid_signals()
                    else f"signal {-code}")
            how = f" (pid {ended[0].pid}, killed by {name})"
        else:
            how = f" (pid {ended[0].pid}, exit status {code})"
    return (f"a datagen worker process (one of --num_datagen_workers={workers}) died before "
            f"its shards were written{how}; this split's shards were removed, the data made "
            "before it is kept: run the same command again (fewer --num_datagen_workers need "
            "less memory)")


def _run_workers(make_samples, encoder, has_inputs, paths, max_cases, workers,
                 targets_encoder) -> list[int]:
    """Forks `workers` processes, each writing its shards; the per-shard record counts."""
    from absl import logging

    _JOB.update(make_samples=make_samples, encoder=encoder, has_inputs=has_inputs,
                paths=paths, max_cases=max_cases, workers=workers,
                targets_encoder=targets_encoder)
    start = time.time()
    # The workers share the parent's memory pages until they write to them; the cyclic
    # garbage collector would write to every object's header it scans (copying the page).
    # Frozen objects are never scanned, so the parent's pages stay shared.
    gc.collect()
    gc.freeze()
    try:
        context = multiprocessing.get_context("fork")
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
            results = [pool.submit(_run_worker, w) for w in range(workers)]
            # The worker processes (forked at the first submit), to name one that dies:
            # the pool itself only says that "a process" ended abruptly.
            processes = list((getattr(pool, "_processes", None) or {}).values())
            try:
                per_worker = [future.result() for future in results]
            except concurrent.futures.BrokenExecutor:  # a worker died
                raise UserError(_worker_death(processes, workers)) from None
    finally:
        gc.unfreeze()
        _JOB.clear()
    counts = [sum(column) for column in zip(*per_worker)]
    logging.info("%d workers wrote %d examples into %d shards in %.1fs", workers, sum(counts),
                 len(paths), time.time() - start)
    return counts
