"""Reading the text files that decoding reads: t2t's input records (`--decode_from_file`)
and the target prefixes beside them (`--decode_prefix_file`). Pure Python (no TensorFlow)."""
from __future__ import annotations

import os

from t2t_lite import file_io
from t2t_lite.errors import UserError


def normalize_record(record: str) -> str:
    """A decode input as decoding reads it: without surrounding whitespace (a CRLF line's
    "\r" included). Every record of `--decode_from_file` (after the file's leading
    byte-order mark is dropped) and every sentence sent to the server (`--mode=serve`) goes
    through it, so that a sentence gets the same translation either way."""
    return record.strip()


def read_inputs(filename: str, delimiter: str = "\n") -> list[str]:
    """The records of `filename` as t2t reads them.

    Args:
      filename: UTF-8 text file.
      delimiter: record separator.

    Returns:
      Records split on `delimiter`, each normalised (`normalize_record`), a final empty
      record dropped.

    Raises:
      UserError: the file is not UTF-8, naming file:line.
    """
    with open(filename, "rb") as f:
        data = f.read()
    try:
        text = file_io.strip_bom(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise UserError(f"{filename}:{line}: invalid UTF-8 (byte 0x{data[e.start]:02x} at "
                        f"column {column}); decode input must be UTF-8 text") from e
    records = [normalize_record(record) for record in text.split(delimiter)]
    if records and not records[-1]:
        records.pop()
    return records


def read_prefixes(prefix_file: str | None, filename: str, count: int,
                  delimiter: str = "\n") -> list[str] | None:
    """The target prefixes of `--decode_prefix_file`, one per input record (None without).

    Raises:
      FileNotFoundError, ValueError: one line naming the file (missing, or another number of
        records than the `count` of `--decode_from_file=filename`).
    """
    if not prefix_file:
        return None
    if not os.path.isfile(prefix_file):
        raise FileNotFoundError(f"--decode_prefix_file={prefix_file}: no such file")
    prefixes = read_inputs(prefix_file, delimiter)
    if len(prefixes) != count:
        raise ValueError(f"--decode_prefix_file={prefix_file} has {len(prefixes)} lines, "
                         f"--decode_from_file={filename} {count}: give one prefix "
                         "(or an empty line) per input line")
    return prefixes
