"""t2t's SubwordTextEncoder as TensorFlow graph ops, for SavedModels that take and return text.

t2t served ids only: clients had to run the Python `SubwordTextEncoder` in front of TensorFlow
Serving. `SubwordGraphEncoder` reproduces the Python encoder's `encode` and `decode` (T2T
reference §6.2, §6.3) with core TensorFlow ops only (`tf.strings`, ragged tensors, a
`StaticHashTable`), so a SavedModel that contains it runs wherever TensorFlow runs, without
Python or tensorflow-text.

Everything that depends on Python (Unicode categories from `unicodedata`, the vocabulary, its
alphabet) is computed when the encoder is built and stored in the graph as constants.

Encode, per batch element:
1. UTF-8 -> code points. Invalid UTF-8 bytes become U+FFFD (as Python's
   `bytes.decode("utf-8", errors="replace")`; t2t itself would raise).
2. Invertible tokenizer: a token starts at position 0 and wherever the alphanumeric flag (Unicode
   category L* or N*) changes; single-space tokens are dropped unless first or last.
3. Escaping: `\\` -> `\\\\`, `_` -> `\\u`, characters outside the vocabulary's alphabet and `\\n`
   -> `\\<decimal>;`, then the end-of-token marker `_`.
4. Greedy longest match, by one of two segmenters (`SEGMENTERS`):
   - "core" (default): for every position of every escaped token, all substrings of lengths
     1..max_subtoken_len are looked up at once in a hash table; the longest hit gives that
     position's subtoken. A `tf.while_loop` then walks each token from position 0 along those
     longest hits (all tokens of the batch advance together). Core TensorFlow ops only.
   - "tensorflow_text": tensorflow-text's `FastWordpieceTokenizer` (one C++ op, greedy
     longest-match-first, LinMaxMatch) on the escaped tokens. WordPiece tells a word's first
     piece from the others by a suffix indicator; t2t's subtokens do not, so every subtoken
     enters the WordPiece vocabulary twice, as itself and behind the indicator `_#`, which no
     t2t subtoken starts with (escaping leaves `_` only at a token's end, so the only subtoken
     starting with `_` is `_` itself). Same ids, about twice as fast (bench/README.md), but a
     SavedModel that uses it needs tensorflow-text's ops where it is loaded
     (`import tensorflow_text` in Python).
Decode: ids -> subtoken strings, concatenated, split on `_`, unescaped (`\\u`, `\\\\`, `\\N;`,
invalid -> U+3013), empty tokens dropped, tokens joined with one space between two tokens that
both start with an alphanumeric character.
"""
from __future__ import annotations

import functools
import sys
import unicodedata
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

# The characters t2t adds to every alphabet so that any string can be escaped.
ESCAPE_CHARS = "\\_u;0123456789"
# t2t's replacement for an escape `\N;` whose N is not a code point (U+3013 GETA MARK).
UNDEFINED_CHAR = "\u3013"
# What invalid UTF-8 input bytes become.
REPLACEMENT_CHAR = 0xFFFD

_ESCAPE_PATTERN = r"\\u|\\\\|\\[0-9]+;"
# Greedy segmenters of escaped tokens (see the module docstring).
SEGMENTERS = ("core", "tensorflow_text")
# WordPiece's marker of a non-initial piece: no t2t subtoken starts with it.
_WORDPIECE_SUFFIX_INDICATOR = "_#"
# Escaped tokens longer than this (in UTF-8 bytes) would be one unknown piece for WordPiece;
# `encode` refuses batches with such a token rather than give wrong ids.
_WORDPIECE_MAX_BYTES_PER_TOKEN = 1 << 20
_MAX_CODE_POINT = 0x10FFFF


@functools.lru_cache(maxsize=1)
def alphanumeric_boundaries() -> np.ndarray:
    """Code-point range boundaries of t2t's alphanumeric set, from this Python's unicodedata.

    t2t's set is every code point below `sys.maxunicode` whose category starts with L or N.

    Returns:
      int32 [2R]: sorted `[start_0, end_0, start_1, end_1, ...]` of the R half-open ranges
      `[start, end)` of alphanumeric code points; a code point c is alphanumeric iff the number
      of boundaries <= c is odd.
    """
    bounds = []
    inside = False
    for cp in range(sys.maxunicode):
        alnum = unicodedata.category(chr(cp))[0] in "LN"
        if alnum != inside:
            bounds.append(cp)
            inside = alnum
    if inside:
        bounds.append(sys.maxunicode)
    return np.asarray(bounds, dtype=np.int32)


def is_alphanumeric(code_points: tf.Tensor, boundaries: tf.Tensor) -> tf.Tensor:
    """Elementwise t2t alphanumeric test.

    Args:
      code_points: int32 [N] Unicode code points.
      boundaries: int32 [2R] from `alphanumeric_boundaries()`.

    Returns:
      bool [N].
    """
    index = tf.searchsorted(boundaries, code_points, side="right")
    return tf.math.floormod(index, 2) == 1


def _pick_separator(alphabet: set[str]) -> str:
    """A character that occurs in no subtoken, used to cut decoded strings at escapes."""
    candidates = [chr(c) for c in range(1, 32)] + [chr(c) for c in range(0xE000, 0xF900)]
    for char in candidates:
        if char not in alphabet and char not in ESCAPE_CHARS:
            return char
    raise ValueError("The vocabulary uses every control and private-use character; "
                     "SubwordGraphEncoder needs one of them as an internal separator.")


def _fast_wordpiece(strings: list[str], string_to_id: dict[str, int], separator: str):
    """tensorflow-text's FastWordpieceTokenizer whose piece k (mod len(strings)) is subtoken k.

    Args:
      strings: the vocabulary, id = index.
      string_to_id: t2t's lookup table (empty strings left out, a later duplicate wins).
      separator: a character outside the vocabulary's alphabet, for entries that must never
        match (ids that t2t's lookup never returns).

    Returns:
      A `tensorflow_text.FastWordpieceTokenizer` (int64 piece ids, no pretokenization).
    """
    try:
        import tensorflow_text
    except ImportError:
        raise ValueError("The tensorflow_text subword segmenter needs tensorflow-text: "
                         "pip install 'tensorflow-text' (or use the core segmenter)") from None
    # Entries that t2t's lookup never returns (empty strings, earlier duplicates) become
    # strings that cannot occur in an escaped token, keeping every id at its index.
    table = [s if s and string_to_id[s] == i else f"{separator}{i}"
             for i, s in enumerate(strings)]
    clashing = [s for s in table if s.startswith(_WORDPIECE_SUFFIX_INDICATOR)]
    if clashing:
        raise ValueError(f"Subtokens {clashing[:3]!r} start with {_WORDPIECE_SUFFIX_INDICATOR!r} "
                         "(no t2t-built vocabulary has such subtokens); use the core segmenter")
    unknown = f"{separator}unknown"
    vocab = table + [_WORDPIECE_SUFFIX_INDICATOR + s for s in table] + [unknown]
    return tensorflow_text.FastWordpieceTokenizer(
        vocab=vocab, suffix_indicator=_WORDPIECE_SUFFIX_INDICATOR,
        max_bytes_per_word=_WORDPIECE_MAX_BYTES_PER_TOKEN, token_out_type=tf.int64,
        unknown_token=unknown, no_pretokenization=True, support_detokenization=False)


class SubwordGraphEncoder(tf.Module):
    """In-graph twin of t2t's `SubwordTextEncoder` (same ids, same text).

    Saved with a SavedModel (it is a `tf.Module`): its hash table and constants travel with it.
    """

    def __init__(self, subtoken_strings: Sequence[str], name: str = "subword_graph_encoder",
                 segmenter: str = "core"):
        """Builds the graph tables from a vocabulary.

        Args:
          subtoken_strings: the vocabulary, id = index (the Python encoder's
            `all_subtoken_strings`, reserved tokens included).
          name: tf.Module name.
          segmenter: "core" (core TensorFlow ops) or "tensorflow_text" (tensorflow-text's
            FastWordpieceTokenizer; faster, and its ops must be loaded wherever the encoder
            runs).

        Raises:
          ValueError: the vocabulary is empty, or a character of its alphabet has no
            single-character subtoken (t2t's encoder would fail on it; every vocabulary t2t builds
            has them all).
        """
        super().__init__(name=name)
        if segmenter not in SEGMENTERS:
            raise ValueError(f"Unknown subword segmenter {segmenter!r}; one of {SEGMENTERS}")
        self.segmenter = segmenter
        strings = list(subtoken_strings)
        if not strings:
            raise ValueError("SubwordGraphEncoder got an empty vocabulary.")
        # t2t: {s: i for i, s in enumerate(strings) if s}; a later duplicate wins.
        string_to_id = {s: i for i, s in enumerate(strings) if s}
        alphabet = {c for s in strings for c in s} | set(ESCAPE_CHARS)
        missing = sorted(c for c in alphabet if c not in string_to_id)
        if missing:
            raise ValueError(
                f"Vocabulary alphabet characters {missing!r} have no single-character subtoken, "
                "so some inputs cannot be encoded; rebuild the vocabulary with t2t_lite's "
                "SubwordTextEncoder.build_to_target_size.")
        self.vocab_size = len(strings)
        self.max_subtoken_length = max(len(s) for s in strings)
        self._separator = _pick_separator(alphabet)
        self._subtoken_strings = tf.constant(strings, dtype=tf.string)
        self._alphabet = tf.constant(sorted(ord(c) for c in alphabet), dtype=tf.int32)
        self._alnum_boundaries = tf.constant(alphanumeric_boundaries())
        if segmenter == "tensorflow_text":
            self._wordpiece = _fast_wordpiece(strings, string_to_id, self._separator)
            return
        # One table for the greedy search: code = 2 * (id + 1) + extendable, where id is the
        # subtoken id (-1: only a prefix) and extendable says the string is a proper prefix of
        # a longer subtoken. Strings absent from the table get code 0.
        codes = {}
        for subtoken, subtoken_id in string_to_id.items():
            for end in range(1, len(subtoken)):
                codes[subtoken[:end]] = codes.get(subtoken[:end], 0) | 1
            codes[subtoken] = codes.get(subtoken, 0) | 2 * (subtoken_id + 1)
        self._prefix_table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(list(codes.keys()), dtype=tf.string),
                tf.constant(list(codes.values()), dtype=tf.int64)),
            default_value=0)

    # ------------------------------------------------------------------------------ encode
    def encode(self, text: tf.Tensor, max_length: int | None = None) -> tf.RaggedTensor:
        """Encodes sentences to subtoken ids like `SubwordTextEncoder.encode` (no EOS added).

        Args:
          text: string [B], UTF-8 (invalid bytes are read as U+FFFD).
          max_length: if set, keep only the first `max_length` ids of each sentence; the input
            is then also cut to a prefix of characters that provably yields those ids, so
            arbitrarily long inputs cost bounded time.

        Returns:
          int32 RaggedTensor [B, None].
        """
        text = tf.convert_to_tensor(text, dtype=tf.string)
        code_points = tf.strings.unicode_decode(
            text, "UTF-8", errors="replace", replacement_char=REPLACEMENT_CHAR)
        if max_length is not None:
            code_points = code_points[:, :self._chars_needed(max_length)]
        escaped, sentence = self._escaped_tokens(code_points)
        token_ids = self._segment(escaped)
        ids = tf.RaggedTensor.from_value_rowids(
            token_ids, sentence, nrows=tf.shape(text, out_type=tf.int64)[0])
        ids = ids.merge_dims(1, 2)
        if max_length is not None:
            ids = ids[:, :max_length]
        return ids

    def _chars_needed(self, max_length: int) -> int:
        """Input characters that determine the first `max_length` ids.

        Each id covers at least one escaped character, each input character gives at least one
        escaped character, at most one dropped single space separates two kept tokens, and the
        subtoken chosen at a position only looks `max_subtoken_length` characters ahead; the
        extra margin keeps the token containing the cut (whose end marker moves) out of reach.
        """
        return (max_length + 2) * (self.max_subtoken_length + 2)

    def _escaped_tokens(self, code_points: tf.RaggedTensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Tokenizes and escapes a batch.

        Args:
          code_points: int32 RaggedTensor [B, None].

        Returns:
          (escaped, sentence): string [M] escaped tokens (with the final `_`) of the whole batch
          in order, and int64 [M] the batch index of each.
        """
        chars = code_points.flat_values
        rows = code_points.value_rowids()
        position = (tf.range(tf.size(chars, out_type=tf.int64))
                     - tf.gather(code_points.row_starts(), rows))
        alnum = is_alphanumeric(chars, self._alnum_boundaries)
        previous = tf.concat([[False], alnum], axis=0)[:-1]
        starts = tf.where((position == 0) | (alnum != previous))[:, 0]
        sentence = tf.gather(rows, starts)
        first_char = tf.gather(chars, starts)
        tokens = tf.RaggedTensor.from_row_starts(self._escape_chars(chars), starts)
        is_first = tf.gather(position, starts) == 0
        is_last = sentence != tf.concat([sentence, [-1]], axis=0)[1:]
        single_space = (tokens.row_lengths() == 1) & (first_char == ord(" "))
        keep = ~single_space | is_first | is_last
        escaped = tf.strings.reduce_join(tokens, axis=1) + "_"
        return tf.boolean_mask(escaped, keep), tf.boolean_mask(sentence, keep)

    def _escape_chars(self, chars: tf.Tensor) -> tf.Tensor:
        """Escaped form of each character (without the end-of-token `_`).

        Args:
          chars: int32 [N] code points.

        Returns:
          string [N].
        """
        own = tf.strings.unicode_encode(chars[:, None], "UTF-8")
        numeric = "\\" + tf.strings.as_string(chars) + ";"
        index = tf.minimum(tf.searchsorted(self._alphabet, chars),
                           tf.size(self._alphabet) - 1)
        in_alphabet = (tf.gather(self._alphabet, index) == chars) & (chars != ord("\n"))
        escaped = tf.where(in_alphabet, own, numeric)
        escaped = tf.where(chars == ord("_"), "\\u", escaped)
        return tf.where(chars == ord("\\"), "\\\\", escaped)

    def _segment(self, escaped: tf.Tensor) -> tf.RaggedTensor:
        """Greedy longest-match segmentation of escaped tokens into subtoken ids.

        Args:
          escaped: string [M] escaped tokens.

        Returns:
          int32 RaggedTensor [M, None].
        """
        if self.segmenter == "tensorflow_text":
            return self._segment_wordpiece(escaped)
        chars = tf.strings.unicode_split(escaped, "UTF-8")
        char = chars.flat_values
        num_chars = tf.shape(char, out_type=tf.int64)[0]
        token_end = tf.gather(chars.row_limits(), chars.value_rowids())
        best_len, best_id = self._longest_matches(char, token_end)
        # The greedy path of a token visits start, next(start), next(next(start)), ... where
        # next(s) = s + best_len(s); the token's end (and anything past it) maps to a sink.
        sink = num_chars
        following = tf.range(num_chars) + best_len
        following = tf.where(following >= token_end, sink, following)
        chosen = self._greedy_path(
            tf.concat([following, [sink]], axis=0), chars.row_starts(), num_chars + 1)
        chosen = chosen[:-1]
        return tf.RaggedTensor.from_value_rowids(
            tf.boolean_mask(best_id, chosen),
            tf.boolean_mask(chars.value_rowids(), chosen),
            nrows=tf.shape(escaped, out_type=tf.int64)[0])

    def _segment_wordpiece(self, escaped: tf.Tensor) -> tf.RaggedTensor:
        """`_segment` by tensorflow-text's FastWordpieceTokenizer (same ids).

        Args:
          escaped: string [M] escaped tokens.

        Returns:
          int32 RaggedTensor [M, None].
        """
        too_long = tf.strings.length(escaped) > _WORDPIECE_MAX_BYTES_PER_TOKEN
        check = tf.debugging.Assert(
            ~tf.reduce_any(too_long),
            [f"an escaped token is longer than {_WORDPIECE_MAX_BYTES_PER_TOKEN} bytes"])
        with tf.control_dependencies([check]):
            pieces = self._wordpiece.tokenize(escaped)
        # Vocabulary entry k is subtoken k, entry vocab_size + k the same behind the indicator.
        ids = tf.math.floormod(tf.cast(pieces.flat_values, tf.int32), self.vocab_size)
        return pieces.with_flat_values(ids)

    def _longest_matches(self, char: tf.Tensor, token_end: tf.Tensor
                         ) -> tuple[tf.Tensor, tf.Tensor]:
        """The longest vocabulary subtoken starting at every position.

        All positions are extended one character per iteration, and a position stops as soon as
        its current string is no proper prefix of any subtoken, so the work is proportional to
        the length of the matches, not to `max_subtoken_length`.

        Args:
          char: string [S], the escaped characters of all tokens, one per element.
          token_end: int64 [S], for each position the flat index where its token ends.

        Returns:
          (best_len, best_id): int64 [S] length and int32 [S] id of the longest subtoken at
          each position (1 and the character's id at worst, as the constructor checks).
        """
        num_chars = tf.shape(char, out_type=tf.int64)[0]

        def extend(length, start, key, best_len, best_id):
            code = self._prefix_table.lookup(key)
            subtoken_id = tf.cast(code // 2 - 1, tf.int32)
            hit = tf.where(subtoken_id >= 0)
            best_len = tf.tensor_scatter_nd_update(
                best_len, tf.gather(start, hit), tf.fill(tf.shape(hit)[:1], length))
            best_id = tf.tensor_scatter_nd_update(
                best_id, tf.gather(start, hit), tf.gather_nd(subtoken_id, hit))
            keep = ((code % 2 == 1) & (start + length < tf.gather(token_end, start))
                    & (length < self.max_subtoken_length))
            start = tf.boolean_mask(start, keep)
            key = tf.boolean_mask(key, keep) + tf.gather(char, start + length)
            return length + 1, start, key, best_len, best_id

        _, _, _, best_len, best_id = tf.while_loop(
            lambda length, start, *_: tf.size(start) > 0,
            extend,
            (tf.constant(1, tf.int64), tf.range(num_chars), char,
             tf.zeros_like(token_end), tf.fill(tf.shape(char), -1)),
            shape_invariants=(tf.TensorShape([]), tf.TensorShape([None]),
                              tf.TensorShape([None]), tf.TensorShape([None]),
                              tf.TensorShape([None])))
        return best_len, best_id

    @staticmethod
    def _greedy_path(following: tf.Tensor, starts: tf.Tensor, size: tf.Tensor) -> tf.Tensor:
        """Marks every node reachable from `starts` by pointer doubling (log-many steps).

        After step k the marked set holds the first 2^k nodes of each path, because each marked
        node adds its 2^k-th successor; the loop stops when a step adds nothing.

        Args:
          following: int64 [size], the successor of each node (the sink points to itself).
          starts: int64 [M], the first node of each path.
          size: int64 scalar, the number of nodes.

        Returns:
          bool [size], True on the paths (and on the sink if a path reaches it).
        """
        def double(jump, marked, _):
            targets = tf.boolean_mask(jump, marked)
            reached = tf.math.unsorted_segment_max(
                tf.ones_like(targets, dtype=tf.int32), targets, size) > 0
            grown = marked | reached
            changed = tf.reduce_any(grown != marked)
            return tf.gather(jump, jump), grown, changed

        initial = tf.math.unsorted_segment_max(
            tf.ones_like(starts, dtype=tf.int32), starts, size) > 0
        _, marked, _ = tf.while_loop(
            lambda jump, marked, changed: changed, double,
            (following, initial, tf.constant(True)))
        return marked

    # ------------------------------------------------------------------------------ decode
    def decode(self, ids: tf.RaggedTensor) -> tf.Tensor:
        """Decodes ids to text like `SubwordTextEncoder.decode` (EOS and pads are not special).

        Args:
          ids: int RaggedTensor [B, None] (or a dense int Tensor [B, T], all of it decoded).
            Ids outside [0, vocab_size) decode to nothing.

        Returns:
          string [B].
        """
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.RaggedTensor.from_tensor(ids)
        ids = tf.cast(ids, tf.int32)
        valid = (ids >= 0) & (ids < self.vocab_size)
        strings = tf.ragged.map_flat_values(
            tf.gather, self._subtoken_strings, tf.clip_by_value(ids, 0, self.vocab_size - 1))
        strings = tf.ragged.map_flat_values(tf.where, valid, strings, "")
        concatenated = tf.strings.reduce_join(strings, axis=1)
        pieces = tf.strings.split(concatenated, "_")
        pieces = tf.ragged.boolean_mask(pieces, pieces != "")
        tokens = tf.ragged.map_flat_values(self._unescape, pieces)
        tokens = tf.ragged.boolean_mask(tokens, tokens != "")
        return self._join_tokens(tokens)

    def _unescape(self, pieces: tf.Tensor) -> tf.Tensor:
        """t2t's `_unescape_token` on pieces that contain no `_`.

        Args:
          pieces: string [P].

        Returns:
          string [P].
        """
        marked = tf.strings.regex_replace(
            pieces, _ESCAPE_PATTERN, self._separator + "\\0" + self._separator)
        chunks = tf.strings.split(marked, self._separator)
        chunk = chunks.flat_values
        # A chunk between separators is either one whole escape or text without escapes.
        numeric = tf.strings.regex_full_match(chunk, r"\\[0-9]+;")
        digits = tf.strings.regex_replace(chunk, r"^\\0*([0-9]+);$", "\\1")
        short = numeric & (tf.strings.length(digits) <= 7)
        code_point = tf.strings.to_number(tf.where(short, digits, "0"), out_type=tf.int32)
        defined = short & (code_point <= _MAX_CODE_POINT)
        # Python's chr() accepts surrogates; they are not valid UTF-8, so they become U+FFFD.
        char = tf.strings.unicode_encode(
            tf.where(defined, code_point, 0)[:, None], "UTF-8",
            errors="replace", replacement_char=REPLACEMENT_CHAR)
        result = tf.where(chunk == "\\u", "_", chunk)
        result = tf.where(chunk == "\\\\", "\\", result)
        result = tf.where(numeric, tf.where(defined, char, UNDEFINED_CHAR), result)
        return tf.strings.reduce_join(chunks.with_flat_values(result), axis=1)

    def _join_tokens(self, tokens: tf.RaggedTensor) -> tf.Tensor:
        """t2t's tokenizer.decode: one space between two tokens that start alphanumeric.

        Args:
          tokens: string RaggedTensor [B, None] of non-empty tokens.

        Returns:
          string [B].
        """
        first = tf.strings.substr(tokens.flat_values, 0, 1, unit="UTF8_CHAR")
        first_char = tf.strings.unicode_decode(
            first, "UTF-8", errors="replace", replacement_char=REPLACEMENT_CHAR).flat_values
        alnum = is_alphanumeric(first_char, self._alnum_boundaries)
        position = (tf.range(tf.size(alnum, out_type=tf.int64))
                    - tf.gather(tokens.row_starts(), tokens.value_rowids()))
        previous = tf.concat([[False], alnum], axis=0)[:-1]
        space = tf.where(alnum & previous & (position > 0), " ", "")
        return tf.strings.reduce_join(tokens.with_flat_values(space + tokens.flat_values),
                                      axis=1)
