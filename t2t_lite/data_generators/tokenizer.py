"""tensor2tensor's invertible tokenizer (used by SubwordTextEncoder).

The text is split at every boundary between an alphanumeric character (Unicode category L* or
N*) and a non-alphanumeric one; a token that is exactly one space is dropped unless it is the
first or the last token, because decoding puts that space back between two alphanumeric tokens.

    encode("Dude - that's so cool.")
    -> ["Dude", " - ", "that", "'", "s", "so", "cool", "."]

t2t builds a Python set of every letter/number code point at import time (about 0.3 s) and then
classifies text one character at a time. Here the split is one C-level regular-expression scan:
for `str` patterns `[^\\W_]` is exactly `str.isalnum()`, and `str.isalnum()` is exactly "category
starts with L or N" for every code point (tests/test_tokenizer.py checks all of them against
`unicodedata`), so the tokens are t2t's without any table to build.
"""
from __future__ import annotations

import collections
import glob
import re
from collections.abc import Iterator

from absl import logging

# t2t's tokens in one findall: alphanumeric runs, non-alphanumeric runs of 2+ characters, and
# one-character non-alphanumeric runs except a lone space between two alphanumeric runs (the
# only token t2t drops). A lone space is matched only at the very start or end of the text; in
# the middle, no alternative matches it, so findall steps over it.
_TOKEN_RE = re.compile(r"[^\W_]+|[\W_]{2,}|[^\w ]|_|\A | \Z")


def is_alphanumeric(char: str) -> bool:
    """Whether `char` is in t2t's alphanumeric set (Unicode category L* or N*).

    Args:
      char: a string of length 1.

    Returns:
      True for letters and numbers.
    """
    return char.isalnum()


def encode(text: str) -> list[str]:
    """Splits a Unicode string into t2t tokens.

    Args:
      text: the string to split.

    Returns:
      the tokens, alternately alphanumeric and non-alphanumeric runs, without the single-space
      tokens that sit between two alphanumeric runs. `[]` for an empty string.
    """
    return _TOKEN_RE.findall(text)


def decode(tokens: list[str]) -> str:
    """Joins t2t tokens back into text (inverse of `encode`).

    Args:
      tokens: tokens as produced by `encode`.

    Returns:
      the concatenated tokens with one space inserted between any two neighbours that both start
      with an alphanumeric character.
    """
    ret = []
    prev_is_alnum = False
    for token in tokens:
        # token[:1] rather than token[0]: an empty token is simply not alphanumeric.
        is_alnum = token[:1].isalnum()
        if prev_is_alnum and is_alnum:
            ret.append(" ")
        ret.append(token)
        prev_is_alnum = is_alnum
    return "".join(ret)


def _open_text(filename: str):
    # newline="\n": split on "\n" only, as tf.gfile does; "\r" and other separators stay in lines.
    return open(filename, encoding="utf-8", newline="\n")


def _read_filepattern(
    filepattern: str, max_lines: int | None = None, split_on_newlines: bool = True
) -> Iterator[str]:
    """Yields the stripped lines (or whole contents) of the files matching a pattern.

    Args:
      filepattern: a glob pattern; matching files are read in sorted order.
      max_lines: if set (non-zero), stop after this many lines in total.
      split_on_newlines: yield stripped lines if True, else one string per file (cut after
        `max_lines` lines when that is set).

    Yields:
      lines or file contents.

    Raises:
      FileNotFoundError: when nothing matches `filepattern`.
      ValueError: when a file is not valid UTF-8 (names the file and line).
    """
    filenames = sorted(glob.glob(filepattern))
    if not filenames:
        raise FileNotFoundError(f"no file matches {filepattern!r}")
    lines_read = 0
    for filename in filenames:
        with _open_text(filename) as f:
            try:
                if split_on_newlines:
                    for line in f:
                        yield line.strip()
                        lines_read += 1
                        if max_lines and lines_read >= max_lines:
                            return
                elif max_lines:
                    doc = []
                    for line in f:
                        doc.append(line)
                        lines_read += 1
                        if lines_read >= max_lines:
                            yield "".join(doc)
                            return
                    yield "".join(doc)
                else:
                    yield f.read()
            except UnicodeDecodeError as e:
                raise ValueError(
                    f"{filename}: not valid UTF-8 near line {lines_read + 1}: {e}; "
                    "convert the file to UTF-8"
                ) from e


def corpus_token_counts(
    text_filepattern: str, corpus_max_lines: int | None, split_on_newlines: bool = True
) -> collections.Counter:
    """Counts the tokens of a text corpus, as t2t's `corpus_token_counts`.

    Args:
      text_filepattern: glob pattern of the text files (read in sorted order).
      corpus_max_lines: maximum total number of lines to read (0 or None: all).
      split_on_newlines: if True each stripped line is tokenized separately, otherwise each
        file's text as a whole.

    Returns:
      a Counter mapping token to count.
    """
    counts = collections.Counter()
    for doc in _read_filepattern(
        text_filepattern, max_lines=corpus_max_lines, split_on_newlines=split_on_newlines
    ):
        counts.update(encode(doc))
    return counts


def vocab_token_counts(text_filepattern: str, max_lines: int | None) -> dict[str, int]:
    """Reads `token,count` lines (a two-column CSV), as t2t's `vocab_token_counts`.

    Lines without a comma are skipped with a warning, as in t2t; the count is what follows the
    last comma.

    Args:
      text_filepattern: glob pattern of the CSV files.
      max_lines: maximum total number of lines to read (0 or None: all).

    Returns:
      a dict mapping token to count.

    Raises:
      ValueError: when a count is not an integer (names the line).
    """
    ret = {}
    for i, line in enumerate(_read_filepattern(text_filepattern, max_lines=max_lines)):
        if "," not in line:
            logging.warning("Malformed vocab line #%d '%s'", i, line)
            continue
        token, count = line.rsplit(",", 1)
        try:
            ret[token] = int(count)
        except ValueError as e:
            raise ValueError(
                f"{text_filepattern}: line #{i} {line!r}: the count after the last comma must "
                "be an integer"
            ) from e
    return ret
