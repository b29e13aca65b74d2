"""t2t's subword vocabulary builder, fast: the index of escaped tokens that every build counts on.

`text_encoder.SubwordTextEncoder.build_*` escape the tokens and drive t2t's iterations; this
module does the counting and the selection of each iteration with the same results as t2t's
dicts of all substrings (vocab files stay byte-identical; bench/bench_text_encoder.py
measures it against a transcription of t2t's code):
* the escaped tokens' distinct suffixes are sorted once (`BuildCorpus`), so every count that
  t2t keeps in a dict of all substrings is a difference of prefix sums over a slice of that
  sorted list;
* the greedy split of all tokens is a numpy walk over per-suffix longest-match lengths;
* candidates are grown one character at a time only below prefixes that reach `min_count`
  (a longer string is never counted more often);
* the prefix subtraction is passed up the prefix tree once per candidate;
* escaping and the first iteration are shared by all builds of the `min_count` bisection.
"""
from __future__ import annotations

import bisect
import collections
import numbers
from collections.abc import Iterable, Mapping, Sequence

import numpy as np


class BuildCorpus:
    """Index of the escaped tokens of one `token_counts`, shared by the builds of a bisection.

    Everything t2t counts is a prefix of a suffix of an escaped token: the substrings counted at
    a split point s of a token are the prefixes of `escaped[s:]` no longer than
    `max_subtoken_length - 1`. So the distinct suffixes of all escaped tokens are sorted once
    ("the universe"): the suffixes that start with a string x form one slice of it, a count is a
    difference of prefix sums of per-suffix weights, and the greedy split of every token is a
    walk over per-suffix "longest subtoken" lengths, done for all tokens at once with numpy.
    The alphabet depends only on the tokens and reserved tokens, so escaping (which t2t redoes
    every iteration) is done once, and the first iteration (always single characters) is shared.
    """

    def __init__(
        self,
        token_counts: Mapping[str, int],
        escaped: Sequence[str],
        alphabet: frozenset[str],
        max_subtoken_length: int | None,
    ):
        """Indexes the escaped tokens.

        Args:
          token_counts: token -> count (non-negative integers).
          escaped: the escaped form of each token of `token_counts`, in its order (with the
            end-of-token mark, as `text_encoder._escape_token` gives it).
          alphabet: the alphabet the tokens were escaped with.
          max_subtoken_length: subtokens get at most `max_subtoken_length - 1` characters;
            None: unbounded.

        Raises:
          ValueError: a count that is not a non-negative integer.
        """
        self.alphabet = alphabet
        # Counted substrings are at most `span` long; longer common prefixes are irrelevant.
        self.span = None if max_subtoken_length is None else max_subtoken_length - 1
        self.token_len = np.array([len(e) for e in escaped], dtype=np.int64)
        self.token_count = np.array(list(token_counts.values()))
        if self.token_count.size and (
            self.token_count.dtype.kind not in "iu" or self.token_count.min() < 0
        ):
            bad = next(
                (t, c) for t, c in token_counts.items()
                if not isinstance(c, numbers.Integral) or c < 0
            )
            raise ValueError(
                f"token counts must be non-negative integers; got {bad[1]!r} for token "
                f"{bad[0]!r}"
            )
        self.token_count = self.token_count.astype(np.int64)
        self.token_start = np.zeros(len(escaped), dtype=np.int64)
        np.cumsum(self.token_len[:-1], out=self.token_start[1:])
        # Every (token, position) suffix, token after token.
        slices = [slice(i, None) for i in range(int(self.token_len.max(initial=0)))]
        suffixes: list[str] = []
        for e in escaped:
            suffixes.extend(map(e.__getitem__, slices[: len(e)]))
        self.universe = sorted(set(suffixes))
        rank = {suffix: r for r, suffix in enumerate(self.universe)}
        self.position_rank = np.fromiter(
            map(rank.__getitem__, suffixes), dtype=np.int64, count=len(suffixes)
        )
        del suffixes, rank
        self.suffix_len = np.fromiter(map(len, self.universe), dtype=np.int64)
        self.lcp = self._adjacent_common_prefix_lengths(escaped)
        # string -> [lo, hi): the slice of the universe whose suffixes start with it.
        self._ranges: dict[str, tuple[int, int]] = {}
        self.first_weights: np.ndarray | None = None

    def _adjacent_common_prefix_lengths(self, escaped: Sequence[str]) -> np.ndarray:
        """lcp[r] = common prefix length of universe[r - 1] and universe[r]; lcp[0] = 0.

        Compared on the code points of all tokens laid end to end, each followed by its own
        negative sentinel (equal to nothing), one character offset at a time for all pairs.
        """
        size = len(self.universe)
        lcp = np.zeros(size, dtype=np.int64)
        if size < 2:
            return lcp
        codes = np.frombuffer("".join(escaped).encode("utf-32-le"), dtype=np.uint32)
        ends = self.token_start + self.token_len
        flat = np.insert(codes.astype(np.int64), ends, -1 - np.arange(len(ends)))
        # A position of each suffix in `flat` (there is one sentinel before each later token).
        token_of_position = np.repeat(np.arange(len(ends)), self.token_len)
        where = np.empty(size, dtype=np.int64)
        where[self.position_rank] = np.arange(len(self.position_rank)) + token_of_position
        left, right = where[:-1], where[1:]
        limit = int(self.suffix_len.max()) if self.span is None else self.span
        pairs = np.arange(size - 1)
        offset = 0
        while pairs.size and offset < limit:
            pairs = pairs[flat[left[pairs] + offset] == flat[right[pairs] + offset]]
            offset += 1
            lcp[pairs + 1] = offset
        return lcp

    def range_of(self, s: str) -> tuple[int, int]:
        """The slice [lo, hi) of the universe whose suffixes start with `s` (may be empty)."""
        r = self._ranges.get(s)
        if r is None:
            n = len(s)
            lo = bisect.bisect_left(self.universe, s)
            hi = bisect.bisect_right(self.universe, s, lo, key=lambda u: u[:n])
            r = self._ranges[s] = (lo, hi)
        return r

    def intervals_of(self, strings: Iterable[str]) -> dict[int, list[tuple[int, int]]]:
        """Universe slices of `strings`, grouped by string length (see `split_weights`)."""
        intervals: dict[int, list[tuple[int, int]]] = collections.defaultdict(list)
        for s in strings:
            intervals[len(s)].append(self.range_of(s))
        return intervals

    def split_weights(self, intervals: Mapping[int, Sequence]) -> np.ndarray:
        """Sum of token counts per suffix at which t2t's greedy split starts a subtoken.

        Args:
          intervals: for each subtoken length, the universe slices of the vocabulary's
            subtokens of that length, as [n, 2] rows [lo, hi) (array or list of pairs).

        Returns:
          int64 [U] weights, U = number of distinct suffixes.
        """
        size = len(self.universe)
        # longest[r]: length of the longest subtoken that starts suffix r. A longer subtoken's
        # slice lies inside each of its prefixes' slices, and the slices of equally long
        # subtokens are disjoint, so filling them from the shortest length up leaves the
        # longest match, as t2t's greedy split takes it.
        longest = np.zeros(size, dtype=np.int64)
        for length in sorted(intervals):
            bounds = np.asarray(intervals[length], dtype=np.int64).reshape(-1, 2)
            lo, hi = bounds[:, 0], bounds[:, 1]
            sizes = hi - lo
            total = int(sizes.sum())
            if total:
                first = np.concatenate(([0], np.cumsum(sizes)[:-1]))
                longest[np.repeat(lo - first, sizes) + np.arange(total)] = length
        active = np.flatnonzero(self.token_len > 0)
        offset = np.zeros(len(self.token_len), dtype=np.int64)
        ranks, counts = [], []
        while active.size:
            r = self.position_rank[self.token_start[active] + offset[active]]
            step = longest[r]
            if not step.all():
                bad = self.universe[int(r[np.argmin(step)])]
                raise AssertionError(f"Token substring {bad!r} not found in subtoken vocabulary.")
            ranks.append(r)
            counts.append(self.token_count[active])
            offset[active] += step
            active = active[offset[active] < self.token_len[active]]
        if not ranks:
            return np.zeros(size, dtype=np.int64)
        # Float sums of integer counts are exact below 2**53.
        weights = np.bincount(
            np.concatenate(ranks), weights=np.concatenate(counts), minlength=size
        )
        return np.rint(weights).astype(np.int64)

    def select_subtokens(
        self, weights: np.ndarray, min_count: float
    ) -> tuple[list[tuple[int, str]], dict[str, int], dict[int, np.ndarray]]:
        """One t2t selection step: the kept subtokens and the alphabet's remaining counts.

        t2t counts every substring x (len(x) <= span) of every window: count(x) = the weights of
        the suffixes that start with x, i.e. a slice of the universe. It then walks the
        candidates (count >= min_count) from the longest down, keeps those whose remaining
        count is still >= min_count and subtracts a kept string's remaining count from each of
        its proper prefixes. Here the candidates are found level by level (length 1, 2, ...;
        count(x + y) <= count(x), so only candidate groups are extended), and the subtraction
        is passed from each candidate to its parent (x[:-1]) once, all with numpy.

        Args:
          weights: int64 [U] split-point weights.
          min_count: the build's threshold.

        Returns:
          [(remaining count, subtoken)] for the kept subtokens longer than one character,
          {character: remaining count} for the characters that start some suffix, and
          {length: [n, 2] universe slices} of the kept subtokens.
        """
        size = len(self.universe)
        if not size or (self.span is not None and self.span <= 0):
            return [], {}, {}
        cumulative = np.zeros(size + 1, dtype=np.int64)
        np.cumsum(weights, out=cumulative[1:])
        levels = []  # per length: (lo, hi, count) of the groups kept for the next step
        active = np.arange(size, dtype=np.int64)
        length = 1
        while self.span is None or length <= self.span:
            active = active[self.suffix_len[active] >= length]
            if not active.size:
                break
            # Members of a group are adjacent in the universe and share `length` characters.
            new_group = np.ones(active.size, dtype=bool)
            new_group[1:] = (active[1:] != active[:-1] + 1) | (self.lcp[active[1:]] < length)
            starts = np.flatnonzero(new_group)
            sizes = np.diff(np.append(starts, active.size))
            lo = active[starts]
            hi = lo + sizes
            count = cumulative[hi] - cumulative[lo]
            candidate = count >= min_count
            if length == 1:
                levels.append((lo, hi, count))  # every character's count is used
            elif candidate.any():
                levels.append((lo[candidate], hi[candidate], count[candidate]))
            else:
                break
            active = active[np.repeat(candidate, sizes)]
            length += 1

        kept: list[tuple[int, str]] = []
        kept_intervals: dict[int, np.ndarray] = {}
        removed = np.zeros(len(levels[-1][0]), dtype=np.int64)
        for depth in range(len(levels), 0, -1):
            lo, hi, count = levels[depth - 1]
            remaining = count - removed
            keep = remaining >= min_count
            if depth == 1:
                chars = [self.universe[i][0] for i in lo.tolist()]
                return kept, dict(zip(chars, remaining.tolist())), kept_intervals
            universe = self.universe
            kept_lo = lo[keep]
            strings = [universe[i][:depth] for i in kept_lo.tolist()]
            kept.extend(zip(remaining[keep].tolist(), strings))
            kept_intervals[depth] = np.stack([kept_lo, hi[keep]], axis=1)
            # Everything removed below a group, plus its own remaining count if kept, is
            # removed from its parent (the group one level up that contains it).
            passed = removed + np.where(keep, remaining, 0)
            parent_lo = levels[depth - 2][0]
            parent = np.searchsorted(parent_lo, lo, side="right") - 1
            removed = np.rint(
                np.bincount(parent, weights=passed, minlength=len(parent_lo))
            ).astype(np.int64)
        return kept, {}, kept_intervals


def merge_intervals(*groups: Mapping[int, Sequence]) -> dict[int, np.ndarray]:
    """Concatenates {length: [n, 2] universe slices} mappings length by length."""
    lengths = set().union(*groups)
    return {
        length: np.concatenate(
            [np.asarray(g.get(length, []), dtype=np.int64).reshape(-1, 2) for g in groups]
        )
        for length in lengths
    }
