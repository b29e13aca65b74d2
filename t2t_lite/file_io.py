"""Writing files so that a reader never sees half of one, on any filesystem TensorFlow knows.

Every file the library writes for a user (vocabularies, decodes, hparams.json, flags.json,
scores, data markers) goes through `atomic_write`: the content goes to a temporary name beside
the target and is renamed over it at the end, with `tf.io.gfile` so that `gs://`, `hdfs://`
and `ram://` paths work wherever TensorFlow's filesystem does. A crash leaves the old file or
the new one, never a prefix.
"""
from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterable, Iterator

import tensorflow as tf

Content = str | bytes | Iterable[str]


def _temporary_name(path: str) -> str:
    return f"{path}.{os.getpid()}.{uuid.uuid4().hex[:8]}.incomplete"


@contextlib.contextmanager
def atomic_open(path: str, mode: str = "w") -> Iterator[tf.io.gfile.GFile]:
    """Opens a temporary file beside `path` that replaces `path` when the block ends normally.

    For outputs written as a stream (two files in step, a decompressed archive); if the block
    raises, the temporary file is removed and `path` keeps its old content.

    Args:
      path: target file (local or any tf.io.gfile scheme); its directory is created.
      mode: "w" (str, no newline translation) or "wb" (bytes).

    Yields:
      The open temporary file.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open: mode must be 'w' or 'wb', got {mode!r}")
    directory = os.path.dirname(path)
    if directory:
        tf.io.gfile.makedirs(directory)
    tmp = _temporary_name(path)
    try:
        with tf.io.gfile.GFile(tmp, mode) as f:
            yield f
        tf.io.gfile.rename(tmp, path, overwrite=True)
    except BaseException:
        if tf.io.gfile.exists(tmp):
            tf.io.gfile.remove(tmp)
        raise


def atomic_write(path: str, content: Content) -> None:
    """Writes `content` to `path` through a temporary file renamed over it at the end.

    Args:
      path: target file (local or any tf.io.gfile scheme); its directory is created.
      content: a str (written as UTF-8 without newline translation), bytes, or an iterable of
        str chunks written one after the other (for large outputs such as decodes).
    """
    with atomic_open(path, "wb" if isinstance(content, bytes) else "w") as f:
        if isinstance(content, (str, bytes)):
            f.write(content)
        else:
            for chunk in content:
                f.write(chunk)


def atomic_write_lines(path: str, lines: Iterable[str], delimiter: str = "\n") -> None:
    """Writes each line followed by `delimiter`, atomically (see `atomic_write`)."""
    atomic_write(path, (line + delimiter for line in lines))
