"""Writing files so that a reader never sees half of one, on any filesystem TensorFlow knows.

Every file the library writes for a user (vocabularies, decodes, hparams.json, flags.json,
scores, data markers) goes through `atomic_write`: the content goes to a temporary name beside
the target and is renamed over it at the end, with `tf.io.gfile` so that `gs://`, `hdfs://`
and `ram://` paths work wherever TensorFlow's filesystem does. A crash leaves the old file or
the new one, never a prefix.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import posixpath
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

Content = str | bytes | Iterable[str]


class _LocalFiles:
    """The few `tf.io.gfile` calls used here, for local paths: writing a local file needs no
    TensorFlow (the CTranslate2 decode path runs without it)."""

    makedirs = staticmethod(lambda path: os.makedirs(path, exist_ok=True))
    exists = staticmethod(os.path.exists)
    isdir = staticmethod(os.path.isdir)
    remove = staticmethod(os.remove)

    @staticmethod
    def GFile(path: str, mode: str):
        # As GFile: text is UTF-8 without newline translation.
        if "b" in mode:
            return open(path, mode)
        return open(path, mode, encoding="utf-8", newline="")

    @staticmethod
    def rename(source: str, target: str, overwrite: bool = False) -> None:
        if not overwrite and os.path.exists(target):
            raise FileExistsError(target)
        os.replace(source, target)


def _gfile(path: str) -> Any:
    """`tf.io.gfile` for a path with a scheme (gs://, hdfs://, ram://...), else local files.

    TensorFlow is imported on the first such write, not with this module: text_encoder and
    decoding import file_io and also serve the CTranslate2 Translator, which runs without
    TensorFlow.
    """
    if "://" not in path:
        return _LocalFiles
    import tensorflow as tf

    return tf.io.gfile


def _temporary_name(path: str) -> str:
    return f"{path}.{os.getpid()}.{uuid.uuid4().hex[:8]}.incomplete"


@contextlib.contextmanager
def atomic_open(path: str, mode: str = "w") -> Iterator[Any]:
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
    gfile = _gfile(path)
    directory = os.path.dirname(path)
    if directory:
        gfile.makedirs(directory)
    tmp = _temporary_name(path)
    try:
        with gfile.GFile(tmp, mode) as f:
            yield f
        gfile.rename(tmp, path, overwrite=True)
    except BaseException:
        if gfile.exists(tmp):
            gfile.remove(tmp)
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


def sha256_of(path: str) -> str:
    """The hex sha256 of a file's bytes (local or gs://...), read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with _gfile(path).GFile(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def user_path(path: str | None) -> str | None:
    """`path` with a leading `~` expanded (a local path; gs://... and None as they are).

    The one path normaliser of the tools: every path flag goes through it before a mode
    runs (`t2t_lite.flags.expand_user_paths`), so `--output_dir=~/run` means the same to
    train, eval, decode, export, average and attention.
    """
    if not path or "://" in path:
        return path
    return os.path.expanduser(path)


def makedirs(path: str) -> None:
    """Creates folder `path` and its parents (local or any tf.io.gfile scheme)."""
    _gfile(path).makedirs(path)


def read_text(path: str) -> str | None:
    """The UTF-8 text of file `path` (local or any tf.io.gfile scheme); None when it does
    not exist."""
    gfile = _gfile(path)
    if not gfile.exists(path) or gfile.isdir(path):
        return None
    with gfile.GFile(path, "r") as f:
        return f.read()


def read_bytes(path: str) -> bytes:
    """The bytes of file `path` (local or any tf.io.gfile scheme).

    Raises:
      OSError (FileNotFoundError locally) when it cannot be read.
    """
    with _gfile(path).GFile(path, "rb") as f:
        return f.read()


# A byte-order mark: editors (Notepad, Excel's "UTF-8" export) start UTF-8 files with one.
BOM = "\ufeff"
# The encoding of every text file t2t_lite reads: UTF-8 with a leading BOM dropped.
TEXT_ENCODING = "utf-8-sig"


def strip_bom(text: str) -> str:
    """`text` without a leading byte-order mark (U+FEFF), as sacreBLEU's readers drop it.

    Every text input (decode inputs, BLEU hypotheses and references, score files, datagen's
    parallel files) goes through it, or is opened with `TEXT_ENCODING`: the mark would
    otherwise be part of line 1's first word (another translation, a BLEU of 74 for 100).
    """
    return text[1:] if text.startswith(BOM) else text


def is_inside(directory: str, path: str) -> bool:
    """Whether `path` lies in `directory` or a folder below it (lexically: `..` resolved, no
    symlink followed; URLs such as gs://b/run compared after their scheme)."""
    def parts(value: str) -> tuple[str, list[str]]:
        scheme, sep, rest = value.partition("://")
        if not sep:
            scheme, rest = "", value
        return scheme, [p for p in posixpath.normpath("/" + rest).split("/") if p]
    (scheme_dir, folder), (scheme_path, names) = parts(directory), parts(path)
    return scheme_dir == scheme_path and names[:len(folder)] == folder and (
        len(names) > len(folder))
