"""Raw corpus files read as they come: plain, gzip or xz, streamed in bounded memory.

A compressed file is recognised by its first bytes (gzip `1f 8b`, xz `fd 37 7a 58 5a 00`),
not by its name, so `train.en.gz` and a gzip file named `train.en` are both read as text.
Every reader here streams: memory stays at a few buffers whatever the file size.
"""
from __future__ import annotations

import functools
import gzip
import lzma
import os
from typing import BinaryIO

_MAGIC = {b"\x1f\x8b": "gzip", b"\xfd7zXZ\x00": "xz"}
COMPRESSION_SUFFIXES = (".gz", ".xz")
_CHUNK = 1 << 20


def compression(path: str) -> str | None:
    """"gzip", "xz" or None (plain), from the file's first bytes."""
    with open(path, "rb") as f:
        head = f.read(6)
    for magic, kind in _MAGIC.items():
        if head.startswith(magic):
            return kind
    return None


def open_binary(path: str) -> BinaryIO:
    """The file's decompressed bytes as a binary stream (a plain file is opened as is)."""
    kind = compression(path)
    if kind == "gzip":
        return gzip.open(path, "rb")
    if kind == "xz":
        return lzma.open(path, "rb")
    return open(path, "rb")


def plain_name(path: str) -> str:
    """`path` without a `.gz` / `.xz` suffix (what the text inside is: `news.sgm.gz` ->
    `news.sgm`)."""
    for suffix in COMPRESSION_SUFFIXES:
        if path.endswith(suffix):
            return path[: -len(suffix)]
    return path


@functools.cache
def _decompressed_stats(path: str, mtime_ns: int, size: int) -> tuple[int, int]:
    del mtime_ns, size  # part of the cache key only: a rewritten file is read again
    count, total, last = 0, 0, b"\n"
    with open_binary(path) as f:
        while chunk := f.read(_CHUNK):
            count += chunk.count(b"\n")
            total += len(chunk)
            last = chunk[-1:]
    return total, count + (last != b"\n")


def _stats(path: str) -> tuple[int, int]:
    info = os.stat(path)
    return _decompressed_stats(os.path.abspath(path), info.st_mtime_ns, info.st_size)


def text_size(path: str) -> int:
    """Bytes of text in the file: its size, or its decompressed size (read once, cached
    while the file is unchanged). t2t's vocab sampler spaces its lines by this size, so a
    compressed corpus gives the same vocab as the plain one."""
    if compression(path) is None:
        return os.path.getsize(path)
    return _stats(path)[0]


def count_lines(path: str) -> int:
    """Lines of the (decompressed) file: newlines, plus an unterminated last line."""
    return _stats(path)[1]
