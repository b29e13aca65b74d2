"""Text encoders with tensor2tensor's ids, vocab files and vocabulary-building algorithm.

* `TextEncoder`: base class (whitespace-separated integers, id = int + 2).
* `ByteTextEncoder`: UTF-8 bytes, id = byte + 2.
* `TokenTextEncoder`: one token per vocab line.
* `SubwordTextEncoder`: t2t's invertible subword encoder; a vocab file written by tensor2tensor
  loads unchanged and gives the same ids, and `build_from_generator` / `build_to_target_size`
  produce byte-identical vocab files.

Encoding a string with `SubwordTextEncoder` (t2t's algorithm):
1. split it with `tokenizer.encode` (alphanumeric / non-alphanumeric runs);
2. escape each token: `\\` -> `\\\\`, `_` -> `\\u`, characters outside the vocab's alphabet (and
   `\\n`) -> `\\<decimal code point>;`, then append the end-of-token mark `_`;
3. split each escaped token greedily, left to right, into the longest vocab subtokens.
No EOS is added; reserved ids are PAD_ID = 0 and EOS_ID = 1.

Speed (same outputs as t2t; measured in bench/bench_text_encoder.py against a plain
transcription of t2t's code, see bench/README.md):
* building: `vocab_builder.BuildCorpus` counts on the escaped tokens' sorted distinct
  suffixes instead of t2t's dict of all substrings (see that module); escaping and the first
  iteration are shared by all builds of the `min_count` bisection.
* encoding: one regex call tokenizes a line; tokens are cached; an unseen token is split by
  a regex whose alternatives form a trie of the subtokens (t2t's longest match, in C).
"""
from __future__ import annotations

import collections
import itertools
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence

from absl import logging

from t2t_lite import file_io
from t2t_lite.data_generators import tokenizer, vocab_builder
from t2t_lite.errors import UserError

# Reserved tokens for padding and end of sequence; every encoder keeps these ids.
PAD = "<pad>"
EOS = "<EOS>"
RESERVED_TOKENS = [PAD, EOS]
NUM_RESERVED_TOKENS = len(RESERVED_TOKENS)
PAD_ID = RESERVED_TOKENS.index(PAD)  # 0
EOS_ID = RESERVED_TOKENS.index(EOS)  # 1
RESERVED_TOKENS_BYTES = [bytes(PAD, "ascii"), bytes(EOS, "ascii")]

# '\u' -> '_', '\\' -> '\', '\213;' -> chr(213).
_UNESCAPE_REGEX = re.compile(r"\\u|\\\\|\\([0-9]+);")
_ESCAPE_CHARS = frozenset("\\_u;0123456789")
# Characters that always need the slow escaping path.
_SPECIAL_CHARS = frozenset("\\_\n")
# Bound on the per-token encode cache (t2t uses a table of 2**20 slots).
_CACHE_MAX_ENTRIES = 2**20


class VocabFileError(UserError):
    """A vocabulary file that cannot be used; the message names the file and line. A
    `UserError` (so a ValueError, as in t2t): entry points print it as one line."""


def native_to_unicode(s: str | bytes) -> str:
    """Returns `s` as `str` (UTF-8-decodes bytes), like t2t's helper of the same name."""
    return s if isinstance(s, str) else s.decode("utf-8")


def to_unicode(s: str | bytes, ignore_errors: bool = False) -> str:
    """Decodes UTF-8 bytes to `str` (invalid bytes dropped if `ignore_errors`)."""
    if isinstance(s, str):
        return s
    return s.decode("utf-8", errors="ignore" if ignore_errors else "strict")


def strip_ids(ids: Iterable[int], ids_to_strip: Sequence[int]) -> list[int]:
    """Removes trailing ids that are in `ids_to_strip` (e.g. EOS and padding).

    Args:
      ids: a sequence of ids, [T].
      ids_to_strip: ids to remove from the end.

    Returns:
      the ids without that tail, [T'] with T' <= T.
    """
    ids = list(ids)
    while ids and ids[-1] in ids_to_strip:
        ids.pop()
    return ids


def decode_until_stop(encoder: TextEncoder, ids) -> str:
    """The text of `ids` up to the first EOS or padding (a decoded or padded row).

    Args:
      encoder: the vocabulary's encoder.
      ids: a numpy array or eager tensor of ids that flattens to [T].
    """
    ids = [int(i) for i in (ids.numpy() if hasattr(ids, "numpy") else ids).reshape(-1)]
    for stop in (EOS_ID, PAD_ID):
        if stop in ids:
            ids = ids[: ids.index(stop)]
    return encoder.decode(ids)


def _read_vocab_lines(filename: str) -> list[tuple[int, str]]:
    """Reads a vocab file strictly as UTF-8, split on "\\n" only (as tf.gfile does).

    Returns:
      (1-based line number, line without its "\\n") for every line.

    Raises:
      VocabFileError: the file is missing or a line is not valid UTF-8.
    """
    try:
        with open(filename, "rb") as f:
            data = f.read()
    except FileNotFoundError as e:
        raise VocabFileError(f"File {filename} not found") from e
    raw_lines = data.split(b"\n")
    if raw_lines and raw_lines[-1] == b"":
        raw_lines.pop()  # the terminator of the last line, not an empty line
    lines = []
    for lineno, raw in enumerate(raw_lines, start=1):
        try:
            lines.append((lineno, raw.decode("utf-8")))
        except UnicodeDecodeError as e:
            raise VocabFileError(
                f"{filename}:{lineno}: not valid UTF-8 ({e.reason} at byte {e.start}); vocab "
                "files must be UTF-8"
            ) from e
    return lines


class TextEncoder:
    """Base encoder: whitespace-separated integers <-> ids shifted by the reserved ids."""

    def __init__(self, num_reserved_ids: int = NUM_RESERVED_TOKENS):
        self._num_reserved_ids = num_reserved_ids

    @property
    def num_reserved_ids(self) -> int:
        """Number of ids at the start of the vocabulary that are reserved (PAD, EOS)."""
        return self._num_reserved_ids

    def encode(self, s: str) -> list[int]:
        """Converts a string of whitespace-separated integers to ids.

        Args:
          s: e.g. "3 0 7".

        Returns:
          the integers plus `num_reserved_ids`, [T]. No EOS is appended.
        """
        return [int(w) + self._num_reserved_ids for w in s.split()]

    def decode(self, ids: Sequence[int], strip_extraneous: bool = False) -> str:
        """Converts ids back to a human-readable string.

        Args:
          ids: [T] ids.
          strip_extraneous: drop trailing reserved ids (EOS, PAD) first.

        Returns:
          the space-joined `decode_list(ids)`.
        """
        if strip_extraneous:
            ids = strip_ids(ids, list(range(self._num_reserved_ids or 0)))
        return " ".join(self.decode_list(ids))

    def decode_list(self, ids: Sequence[int]) -> list[str]:
        """Converts each id to its string (reserved ids to "<pad>" / "<EOS>").

        Args:
          ids: [T] ids.

        Returns:
          [T] strings.
        """
        decoded_ids = []
        for id_ in ids:
            if 0 <= id_ < self._num_reserved_ids:
                decoded_ids.append(RESERVED_TOKENS[int(id_)])
            else:
                decoded_ids.append(id_ - self._num_reserved_ids)
        return [str(d) for d in decoded_ids]

    @property
    def vocab_size(self) -> int:
        """Number of ids, reserved ones included."""
        raise NotImplementedError()


class ByteTextEncoder(TextEncoder):
    """Encodes each UTF-8 byte as byte + `num_reserved_ids` (vocab size 258)."""

    def encode(self, s: str) -> list[int]:
        """Encodes `s` as UTF-8 bytes shifted by the reserved ids.

        Args:
          s: any string.

        Returns:
          [number of UTF-8 bytes] ids in [2, 258).
        """
        numres = self._num_reserved_ids
        return [c + numres for c in s.encode("utf-8")]

    def decode(self, ids: Sequence[int], strip_extraneous: bool = False) -> str:
        """Decodes ids to text; reserved ids become the bytes of "<pad>" / "<EOS>".

        Args:
          ids: [T] ids.
          strip_extraneous: drop trailing reserved ids first.

        Returns:
          the UTF-8 text (invalid sequences replaced by U+FFFD).
        """
        if strip_extraneous:
            ids = strip_ids(ids, list(range(self._num_reserved_ids or 0)))
        return b"".join(self.decode_list(ids)).decode("utf-8", "replace")

    def decode_list(self, ids: Sequence[int]) -> list[bytes]:
        """Converts each id to its byte string (reserved ids to b"<pad>" / b"<EOS>").

        Args:
          ids: [T] ids.

        Returns:
          [T] `bytes` objects.
        """
        numres = self._num_reserved_ids
        decoded = []
        for id_ in ids:
            if 0 <= id_ < numres:
                decoded.append(RESERVED_TOKENS_BYTES[int(id_)])
            else:
                decoded.append(bytes([int(id_) - numres]))
        return decoded

    @property
    def vocab_size(self) -> int:
        """256 byte values plus the reserved ids."""
        return 2**8 + self._num_reserved_ids


class TokenTextEncoder(TextEncoder):
    """Whitespace tokens <-> ids from a user-supplied vocabulary (file or list).

    From a file: one token per line (stripped), id = line index; the file must hold the reserved
    tokens itself. From a list: "<pad>", "<EOS>" first, then the list without them.
    """

    def __init__(
        self,
        vocab_filename: str | None,
        reverse: bool = False,
        vocab_list: Sequence[str] | None = None,
        replace_oov: str | None = None,
        num_reserved_ids: int = NUM_RESERVED_TOKENS,
    ):
        """Loads the vocabulary.

        Args:
          vocab_filename: vocab file to read; if None, `vocab_list` is used.
          reverse: reverse the id order when encoding and decoding.
          vocab_list: the tokens, when there is no file.
          replace_oov: token (in the vocab) that replaces out-of-vocabulary tokens; if None,
            encoding an unknown token raises KeyError.
          num_reserved_ids: number of reserved ids.

        Raises:
          VocabFileError: bad vocab file (names the file and line).
          ValueError: neither a file nor a list, or `replace_oov` is not in the vocabulary.
        """
        super().__init__(num_reserved_ids=num_reserved_ids)
        self._reverse = reverse
        self._replace_oov = replace_oov
        self.filename = vocab_filename or None  # the file a run records the hash of
        if vocab_filename:
            self._init_vocab_from_file(vocab_filename)
        elif vocab_list is not None:
            self._init_vocab_from_list(vocab_list)
        else:
            raise ValueError("TokenTextEncoder needs vocab_filename or vocab_list")
        if replace_oov is not None and replace_oov not in self._token_to_id:
            raise ValueError(f"replace_oov={replace_oov!r} is not in the vocabulary")

    def encode(self, s: str) -> list[int]:
        """Converts a space-separated string of tokens to ids.

        Args:
          s: the text; it is stripped and split on whitespace.

        Returns:
          [number of tokens] ids (reversed if `reverse`).

        Raises:
          KeyError: an unknown token and no `replace_oov`.
        """
        tokens = s.strip().split()
        if self._replace_oov is not None:
            tokens = [t if t in self._token_to_id else self._replace_oov for t in tokens]
        ret = [self._token_to_id[tok] for tok in tokens]
        return ret[::-1] if self._reverse else ret

    def decode(self, ids: Sequence[int], strip_extraneous: bool = False) -> str:
        """Space-joins `decode_list(ids)` (t2t ignores `strip_extraneous` here too)."""
        return " ".join(self.decode_list(ids))

    def decode_list(self, ids: Sequence[int]) -> list[str]:
        """Converts ids to tokens; an unknown id n becomes "ID_n".

        Args:
          ids: [T] ids.

        Returns:
          [T] tokens (in reversed order if `reverse`).
        """
        seq = reversed(ids) if self._reverse else ids
        return [self._safe_id_to_token(i) for i in seq]

    @property
    def vocab_size(self) -> int:
        """Number of tokens, reserved ones included."""
        return len(self._id_to_token)

    def _safe_id_to_token(self, idx: int) -> str:
        return self._id_to_token.get(idx, f"ID_{idx}")

    def _init_vocab_from_file(self, filename: str) -> None:
        tokens = []
        first_line = {}
        for lineno, line in _read_vocab_lines(filename):
            token = line.strip()
            if not token:
                raise VocabFileError(
                    f"{filename}:{lineno}: empty line; a token vocab has one token per line"
                )
            if token in first_line:
                raise VocabFileError(
                    f"{filename}:{lineno}: duplicate token {token!r} (first on line "
                    f"{first_line[token]}); every token must appear once"
                )
            first_line[token] = lineno
            tokens.append(token)
        self._init_vocab(tokens, add_reserved_tokens=False)

    def _init_vocab_from_list(self, vocab_list: Sequence[str]) -> None:
        self._init_vocab([t for t in vocab_list if t not in RESERVED_TOKENS])

    def _init_vocab(self, tokens: Iterable[str], add_reserved_tokens: bool = True) -> None:
        self._id_to_token = {}
        start = 0
        if add_reserved_tokens:
            self._id_to_token.update(enumerate(RESERVED_TOKENS))
            start = len(RESERVED_TOKENS)
        self._id_to_token.update(enumerate(tokens, start=start))
        self._token_to_id = {v: k for k, v in self._id_to_token.items()}

    def store_to_file(self, filename: str) -> None:
        """Writes one token per line (reserved tokens included), atomically.

        Args:
          filename: destination path.
        """
        file_io.atomic_write_lines(
            filename, (self._id_to_token[i] for i in range(len(self._id_to_token)))
        )


def _escape_token(token: str, alphabet: frozenset[str] | set[str]) -> str:
    """Escapes underscores, backslashes and characters outside `alphabet`; appends "_".

    Args:
      token: a token (no restriction on its characters).
      alphabet: the vocabulary's characters.

    Returns:
      the escaped token; its only "_" is the last character.

    Raises:
      TypeError: `token` is not a `str` (t2t raises ValueError).
    """
    if not isinstance(token, str):
        raise TypeError(f"Expected string type for token, got {type(token)}")
    # Fast path, same result: nothing to replace and every character in the alphabet.
    if alphabet.issuperset(token) and _SPECIAL_CHARS.isdisjoint(token):
        return token + "_"
    token = token.replace("\\", "\\\\").replace("_", "\\u")
    ret = [c if c in alphabet and c != "\n" else f"\\{ord(c)};" for c in token]
    return "".join(ret) + "_"


def _unescape_match(m: re.Match) -> str:
    if m.group(1) is None:
        return "_" if m.group(0) == "\\u" else "\\"
    try:
        return chr(int(m.group(1)))
    except (ValueError, OverflowError):
        return "\u3013"  # GETA MARK, t2t's stand-in for an undefined character


def _unescape_token(escaped_token: str) -> str:
    """Inverse of `_escape_token` (a trailing "_" is removed first).

    Args:
      escaped_token: an escaped token.

    Returns:
      the original token; invalid code points become U+3013.
    """
    trimmed = escaped_token.removesuffix("_")
    if "\\" not in trimmed:
        return trimmed
    return _UNESCAPE_REGEX.sub(_unescape_match, trimmed)


def _build_corpus(
    token_counts: Mapping[str, int],
    reserved_tokens: Sequence[str],
    max_subtoken_length: int | None,
) -> vocab_builder.BuildCorpus:
    """Escapes the tokens once and indexes them for the builds of a bisection."""
    # A str is an iterable of its characters, so the union runs in C.
    alphabet = frozenset().union(*token_counts, *reserved_tokens, _ESCAPE_CHARS)
    escaped = [_escape_token(token, alphabet) for token in token_counts]
    return vocab_builder.BuildCorpus(token_counts, escaped, alphabet, max_subtoken_length)


# Placeholder for "the split regex was not compiled yet" (None means it cannot be used).
_NOT_BUILT = object()
# Longer subtokens nest the trie regex so deeply that compiling it may exceed Python's
# recursion limit; such vocabularies use t2t's plain loop.
_MAX_REGEX_SUBTOKEN_LEN = 200


def _longest_match_regex(subtokens: Iterable[str], max_len: int) -> re.Pattern | None:
    """A regex whose findall() gives t2t's greedy longest-match split, or None.

    The alternatives form a trie: at a node, at most one child matches the next character,
    and a node that ends a subtoken makes its children optional, so backtracking stops at the
    deepest subtoken on the path, i.e. the longest match at that position.
    """
    if max_len > _MAX_REGEX_SUBTOKEN_LEN:
        return None
    root: dict = {}
    for s in subtokens:
        node = root
        for ch in s:
            node = node.setdefault(ch, {})
        node[""] = {}  # "" (never a character) marks the end of a subtoken

    def pattern(node: dict) -> str:
        alternatives = [re.escape(ch) + pattern(child) for ch, child in sorted(node.items()) if ch]
        if not alternatives:
            return ""
        if len(alternatives) == 1 and "" not in node:
            return alternatives[0]
        body = "(?:" + "|".join(alternatives) + ")"
        return body + "?" if "" in node else body

    try:
        return re.compile(pattern(root))
    except RecursionError:
        return None


def _check_reserved_tokens(reserved_tokens: Sequence[str]) -> None:
    for default, proposed in zip(RESERVED_TOKENS, reserved_tokens):
        if default != proposed:
            raise ValueError("RESERVED_TOKENS must be a prefix of reserved_tokens.")


class SubwordTextEncoder(TextEncoder):
    """t2t's invertible subword encoder (see the module docstring for the algorithm)."""

    def __init__(self, filename: str | None = None):
        """Creates an empty encoder, or loads a vocab file written by t2t or `store_to_file`.

        Args:
          filename: vocab file (one subtoken per line, optionally in single or double quotes;
            id = line index). Both '<pad>_'/'<EOS>_' and the older '<pad>'/'<EOS>' first lines
            load with ids 0 and 1.

        Raises:
          VocabFileError: missing file, empty/unterminated-quote line, duplicate subtoken or
            non-UTF-8 bytes; the message names the file and line.
        """
        self._alphabet: frozenset[str] = frozenset()
        self._all_subtoken_strings: list[str] = []
        self.filename = filename
        if filename is not None:
            self._load_from_file(filename)
        super().__init__()

    def encode(self, s: str | bytes) -> list[int]:
        """Converts text to subtoken ids (no EOS).

        Args:
          s: text (`str`, or UTF-8 `bytes`).

        Returns:
          [T] ids in [0, vocab_size).
        """
        tokens = tokenizer.encode(native_to_unicode(s))
        # Cache lookups and the concatenation run in C in one pass; a line with an unseen
        # token takes the slow path once (its tokens are cached for the next lines).
        try:
            return list(itertools.chain.from_iterable(map(self._cache.__getitem__, tokens)))
        except KeyError:
            return list(itertools.chain.from_iterable(map(self._token_to_subtoken_ids, tokens)))

    def encode_with_dropout(self, s: str | bytes, dropout: float, rng) -> list[int]:
        """Converts text to subtoken ids with MaxMatch-dropout (no EOS).

        Subword regularization for a longest-match encoder (Hiraoka, 2022): at each position
        of an escaped token, every vocab subtoken longer than one character that would be
        the longest match is passed over with probability `dropout`, so the next longest
        match is tried; single characters are never passed over, so every token stays
        encodable. `dropout=0` gives `encode(s)`; `decode` inverts every result. Not t2t's:
        its encoder is deterministic; this gives training data several segmentations of
        each sentence (datagen's `--subword_dropout`).

        Args:
          s: text (`str`, or UTF-8 `bytes`).
          dropout: probability in [0, 1) of passing over a candidate subtoken.
          rng: a `random.Random` (its `random()` draws the decisions).

        Returns:
          [T] ids in [0, vocab_size), T >= len(encode(s)).
        """
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"subword dropout must be in [0, 1), got {dropout}")
        if dropout == 0.0:
            return self.encode(s)
        to_id = self._subtoken_string_to_id
        ids: list[int] = []
        for token in tokenizer.encode(native_to_unicode(s)):
            pieces = self._longest_match_split(_escape_token(token, self._alphabet),
                                               pass_over=lambda: rng.random() < dropout)
            ids.extend(to_id[piece] for piece in pieces)
        return ids

    def encode_without_tokenizing(self, token_text: str | bytes) -> list[int]:
        """Encodes `token_text` as one token (no tokenizer split).

        Args:
          token_text: the token.

        Returns:
          [T] ids.
        """
        return list(self._token_to_subtoken_ids(native_to_unicode(token_text)))

    def decode(self, ids: Sequence[int], strip_extraneous: bool = False) -> str:
        """Converts subtoken ids back to text; ids outside [0, vocab_size) are ignored.

        Args:
          ids: [T] ids (EOS is not special here: callers cut at EOS first).
          strip_extraneous: drop trailing PAD/EOS ids first.

        Returns:
          the text; `decode(encode(s)) == s` for every string s.
        """
        if strip_extraneous:
            ids = strip_ids(ids, list(range(self._num_reserved_ids or 0)))
        return tokenizer.decode(self._subtoken_ids_to_tokens(ids))

    def decode_list(self, ids: Sequence[int]) -> list[str]:
        """Maps each id to its subtoken string ("" outside [0, vocab_size)).

        Args:
          ids: [T] ids.

        Returns:
          [T] subtoken strings (escaped form, e.g. "world_").
        """
        return [self._subtoken_id_to_subtoken_string(i) for i in ids]

    @property
    def vocab_size(self) -> int:
        """Number of subtokens, reserved ones included."""
        return len(self._all_subtoken_strings)

    @property
    def all_subtoken_strings(self) -> tuple[str, ...]:
        """The subtoken strings in id order."""
        return tuple(self._all_subtoken_strings)

    def _token_to_subtoken_ids(self, token: str) -> tuple[int, ...]:
        ids = self._cache.get(token)
        if ids is None:
            ids = tuple(self._escaped_token_to_subtoken_ids(_escape_token(token, self._alphabet)))
            if len(self._cache) >= _CACHE_MAX_ENTRIES:
                self._cache.clear()
            self._cache[token] = ids
        return ids

    def _subtoken_ids_to_tokens(self, subtokens: Sequence[int]) -> list[str]:
        strings = self._all_subtoken_strings
        size = len(strings)
        concatenated = "".join([strings[i] if 0 <= i < size else "" for i in subtokens])
        ret = []
        for piece in concatenated.split("_"):
            if piece:
                unescaped = _unescape_token(piece + "_")
                if unescaped:
                    ret.append(unescaped)
        return ret

    def _subtoken_id_to_subtoken_string(self, subtoken: int) -> str:
        if 0 <= subtoken < self.vocab_size:
            return self._all_subtoken_strings[subtoken]
        return ""

    def _escaped_token_to_subtoken_strings(self, escaped_token: str) -> list[str]:
        """Greedy left-to-right longest-match split of an escaped token (t2t's)."""
        if self._split_regex is _NOT_BUILT:
            self._split_regex = _longest_match_regex(
                self._subtoken_string_to_id, self._max_subtoken_len
            )
        if self._split_regex is not None:
            pieces = self._split_regex.findall(escaped_token)
            # findall skips a character that starts no subtoken; then the pieces fall short
            # and t2t's loop (`_longest_match_split`) reports it.
            if sum(map(len, pieces)) == len(escaped_token):
                return pieces
        return self._longest_match_split(escaped_token)

    def _longest_match_split(self, escaped_token: str, pass_over=None) -> list[str]:
        """t2t's loop: left to right, the longest vocab subtoken at each position. With
        `pass_over` (a callable drawing True/False), a match longer than one character is
        skipped when it returns True and the next longest is tried (MaxMatch-dropout)."""
        ret = []
        start = 0
        n = len(escaped_token)
        while start < n:
            for end in range(min(n, start + self._max_subtoken_len), start, -1):
                subtoken = escaped_token[start:end]
                if subtoken in self._subtoken_string_to_id and not (
                        pass_over is not None and end - start > 1 and pass_over()):
                    ret.append(subtoken)
                    start = end
                    break
            else:
                raise ValueError(
                    f"character {escaped_token[start]!r} of the escaped token "
                    f"{escaped_token!r} is in the alphabet of vocab {self.filename!r} but is "
                    "not a subtoken by itself, so it cannot be encoded; a vocab built by t2t "
                    "always contains each alphabet character"
                )
        return ret

    def _escaped_token_to_subtoken_ids(self, escaped_token: str) -> list[int]:
        to_id = self._subtoken_string_to_id
        return [to_id[s] for s in self._escaped_token_to_subtoken_strings(escaped_token)]

    @classmethod
    def build_from_generator(
        cls,
        generator: Iterable[str],
        target_vocab_size: int,
        max_subtoken_length: int | None = None,
        reserved_tokens: Sequence[str] | None = None,
    ) -> SubwordTextEncoder:
        """Builds a vocabulary of about `target_vocab_size` subtokens from generated text.

        Args:
          generator: yields text (e.g. the training inputs and targets in turn).
          target_vocab_size: desired vocab size (a problem's `approx_vocab_size`; t2t's
            argument name).
          max_subtoken_length: subtokens get at most `max_subtoken_length - 1` characters;
            None: unbounded (quadratic in the longest token). Text2TextProblem passes 200.
          reserved_tokens: tokens with the first ids; `RESERVED_TOKENS` must be a prefix.

        Returns:
          the encoder whose size is closest to `target_vocab_size` in t2t's min_count bisection.
        """
        from t2t_lite.utils import progress

        token_counts: collections.Counter = collections.Counter()
        for item in progress.track(generator, None, "Counting vocab tokens", "lines"):
            token_counts.update(tokenizer.encode(native_to_unicode(item)))
        return cls.build_to_target_size(
            target_vocab_size,
            token_counts,
            1,
            1e3,
            max_subtoken_length=max_subtoken_length,
            reserved_tokens=reserved_tokens,
        )

    @classmethod
    def build_to_target_size(
        cls,
        target_size: int,
        token_counts: Mapping[str, int],
        min_val: float,
        max_val: float,
        max_subtoken_length: int | None = None,
        reserved_tokens: Sequence[str] | None = None,
        num_iterations: int = 4,
    ) -> SubwordTextEncoder:
        """Bisects on `min_count` in [min_val, max_val] for a vocab size near `target_size`.

        A size within 1% of the target is accepted at once; otherwise the search recurses
        toward the target and keeps whichever of the two encoders is closer (t2t's rule).

        Args:
          target_size: desired vocab size.
          token_counts: token -> count (tokens as `tokenizer.encode` produces them).
          min_val: lower bound of min_count.
          max_val: upper bound of min_count.
          max_subtoken_length: see `build_from_generator`.
          reserved_tokens: see `build_from_generator`.
          num_iterations: refinement iterations per build.

        Returns:
          a SubwordTextEncoder.

        Raises:
          ValueError: `min_val > max_val` or `target_size < 1`.
        """
        if min_val > max_val:
            raise ValueError(
                "Lower bound for the minimum token count is greater than the upper bound."
            )
        if target_size < 1:
            raise ValueError("Target size must be positive.")
        if reserved_tokens is None:
            reserved_tokens = RESERVED_TOKENS
        _check_reserved_tokens(reserved_tokens)
        corpus = _build_corpus(token_counts, reserved_tokens, max_subtoken_length)

        # Each bisection step builds a whole vocabulary; at most this many are needed.
        max_steps = int(max_val - min_val + 1).bit_length() + 1
        steps = [0]

        def bisect(min_val, max_val):
            present_count = (max_val + min_val) // 2
            steps[0] += 1
            logging.debug("Vocab build step %d (of at most %d): trying min_count %d",
                          steps[0], max_steps, present_count)
            subtokenizer = cls()
            subtokenizer._build_from_corpus(corpus, present_count, num_iterations, reserved_tokens)
            # Being within 1% of the target size is ok.
            is_ok = abs(subtokenizer.vocab_size - target_size) * 100 < target_size
            if is_ok or min_val >= max_val or present_count < 2:
                return subtokenizer
            if subtokenizer.vocab_size > target_size:
                other = bisect(present_count + 1, max_val)
            else:
                other = bisect(min_val, present_count - 1)
            if abs(other.vocab_size - target_size) < abs(subtokenizer.vocab_size - target_size):
                return other
            return subtokenizer

        built = bisect(min_val, max_val)
        # One line per vocabulary build; each step's and iteration's lines are at DEBUG.
        logging.info("Built a subword vocabulary of %d (target %d) in %d bisection steps",
                     built.vocab_size, target_size, steps[0])
        return built

    def build_from_token_counts(
        self,
        token_counts: Mapping[str, int],
        min_count: float,
        num_iterations: int = 4,
        reserved_tokens: Sequence[str] | None = None,
        max_subtoken_length: int | None = None,
    ) -> None:
        """Builds the vocabulary from token counts with a fixed `min_count` (t2t's algorithm).

        Each iteration splits every escaped token with the current vocabulary, counts every
        substring that starts at a split point (weighted by the token's count), keeps the
        substrings with count >= min_count from the longest down (subtracting a kept string's
        count from its proper prefixes), adds every alphabet character, and sorts by (count,
        string) descending after the escaped reserved tokens.

        Args:
          token_counts: token -> count.
          min_count: keep substrings counted at least this often (values < 1 act as 1).
          num_iterations: refinement iterations.
          reserved_tokens: see `build_from_generator`.
          max_subtoken_length: see `build_from_generator`.

        Raises:
          ValueError: `RESERVED_TOKENS` is not a prefix of `reserved_tokens`.
        """
        if reserved_tokens is None:
            reserved_tokens = RESERVED_TOKENS
        _check_reserved_tokens(reserved_tokens)
        corpus = _build_corpus(token_counts, reserved_tokens, max_subtoken_length)
        self._build_from_corpus(corpus, min_count, num_iterations, reserved_tokens)

    def _build_from_corpus(
        self,
        corpus: vocab_builder.BuildCorpus,
        min_count: float,
        num_iterations: int,
        reserved_tokens: Sequence[str],
    ) -> None:
        reserved_tokens = [native_to_unicode(t) for t in reserved_tokens]
        alphabet = corpus.alphabet
        self._alphabet = alphabet
        # Sorted for a reproducible order (t2t uses set order); only num_iterations=0 shows it.
        self._init_subtokens_from_list(sorted(alphabet), reserved_tokens=reserved_tokens)
        min_count = max(min_count, 1)
        escaped_reserved = [_escape_token(t, alphabet) for t in reserved_tokens]
        # Universe slices of the subtokens every vocabulary holds besides the kept ones.
        fixed_intervals = corpus.intervals_of(itertools.chain(alphabet, escaped_reserved))
        intervals = None
        for i in range(num_iterations):
            logging.debug("Iteration %d", i)
            if i == 0:
                # The first split is into single characters whatever min_count is.
                if corpus.first_weights is None:
                    corpus.first_weights = corpus.split_weights(
                        corpus.intervals_of(self._subtoken_string_to_id)
                    )
                weights = corpus.first_weights
            else:
                weights = corpus.split_weights(intervals)
            kept, char_counts, kept_intervals = corpus.select_subtokens(weights, min_count)
            # Every alphabet character stays, so every string can be encoded.
            new_subtokens = kept + [(char_counts.get(a, 0), a) for a in alphabet]
            new_subtokens.sort(reverse=True)
            self._init_subtokens_from_list(escaped_reserved + [s for _, s in new_subtokens])
            intervals = vocab_builder.merge_intervals(fixed_intervals, kept_intervals)
            logging.debug("vocab_size = %d", self.vocab_size)

    def _init_subtokens_from_list(
        self, subtoken_strings: list[str], reserved_tokens: Sequence[str] | None = None
    ) -> None:
        """Sets the vocabulary: `reserved_tokens` (not matchable) then `subtoken_strings`."""
        reserved_tokens = list(reserved_tokens or [])
        self._all_subtoken_strings = reserved_tokens + list(subtoken_strings)
        # As in t2t, the reserved tokens passed here do not count for the longest match.
        self._max_subtoken_len = max(map(len, subtoken_strings))
        offset = len(reserved_tokens)
        self._subtoken_string_to_id = {
            s: i + offset for i, s in enumerate(subtoken_strings) if s
        }
        # Compiled on first use: vocabulary building does not need it.
        self._split_regex: re.Pattern | None | object = _NOT_BUILT
        self._cache: dict[str, tuple[int, ...]] = {}

    def _init_alphabet_from_tokens(self, tokens: Iterable[str]) -> None:
        self._alphabet = frozenset(c for token in tokens for c in token) | _ESCAPE_CHARS

    def _load_from_file(self, filename: str) -> None:
        self._load_from_lines(_read_vocab_lines(filename), filename)

    def _load_from_file_object(self, f: Iterable[str | bytes]) -> None:
        """Loads from an open file (t2t's method); lines are numbered from 1."""
        name = getattr(f, "name", "<file object>")
        lines = []
        for lineno, line in enumerate(f, start=1):
            if isinstance(line, bytes):
                try:
                    line = line.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise VocabFileError(f"{name}:{lineno}: not valid UTF-8 ({e.reason})") from e
            lines.append((lineno, line.rstrip("\n")))
        self._load_from_lines(lines, name)

    def _load_from_lines(self, lines: list[tuple[int, str]], filename: str) -> None:
        subtoken_strings = []
        first_line: dict[str, int] = {}
        quoted_file = None
        for lineno, line in lines:
            s = line.strip()
            if not s:
                raise VocabFileError(f"{filename}:{lineno}: malformed line {line!r}: empty line")
            # Some vocab files wrap subtokens in quotes, others do not (t2t's rule).
            quoted = len(s) >= 2 and s[0] == s[-1] and s[0] in "'\""
            if quoted_file is None:
                quoted_file = quoted
            if quoted_file and not quoted:
                raise VocabFileError(
                    f"{filename}:{lineno}: malformed line {line!r}: the file wraps subtokens "
                    "in quotes (like 'the_') but this line is not wrapped; is it truncated?"
                )
            if quoted:
                s = s[1:-1]
            if not s:
                raise VocabFileError(
                    f"{filename}:{lineno}: malformed line {line!r}: empty subtoken"
                )
            if s in first_line:
                raise VocabFileError(
                    f"{filename}:{lineno}: duplicate subtoken {s!r} (first on line "
                    f"{first_line[s]}); every subtoken must appear once"
                )
            first_line[s] = lineno
            subtoken_strings.append(s)
        if not subtoken_strings:
            raise VocabFileError(f"{filename}: the vocab file has no subtokens")
        self._init_subtokens_from_list(subtoken_strings)
        self._init_alphabet_from_tokens(subtoken_strings)

    def store_to_file(self, filename: str, add_single_quotes: bool = True) -> None:
        """Writes the vocabulary in t2t's format (one subtoken per line), atomically.

        Args:
          filename: destination path (written under a temporary name, then renamed).
          add_single_quotes: wrap each subtoken in single quotes, as t2t does by default.

        Raises:
          ValueError: a subtoken that this format cannot hold (a newline, or, without
            quotes, surrounding whitespace).
        """
        for s in self._all_subtoken_strings:
            if "\n" in s or (not add_single_quotes and s != s.strip()):
                raise ValueError(
                    f"subtoken {s!r} cannot be stored in {filename} "
                    f"(add_single_quotes={add_single_quotes})"
                )
        if add_single_quotes:
            lines: Iterator[str] = ("'" + s + "'" for s in self._all_subtoken_strings)
        else:
            lines = iter(self._all_subtoken_strings)
        file_io.atomic_write_lines(filename, lines)
