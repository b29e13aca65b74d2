"""Benchmark: t2t_lite's text encoders against a plain transcription of tensor2tensor's code.

The baseline below (`plain_*`, `PlainSubwordTextEncoder`) is a direct, unoptimised
transcription of t2t 1.15's tokenizer.py / text_encoder.py algorithm: a Python set of every
letter/number code point built at import, a character-by-character tokenizer, escaping and
greedy splitting of every token in every iteration, and a dict entry for every counted
substring. It reproduces the tensor2tensor-written fixture vocab byte for byte, and the
tests (tests/test_vocab_building.py) compare t2t_lite's builds with it.

Measured in the same run, on the toy WMT corpus (train.en + train.de, each pair's English line
then its German line, as a translate problem feeds its vocab generator):
  1. token counting (the tokenizer over all lines);
  2. vocab building with build_from_generator at each target size (max_subtoken_length=200
     by default, as Text2TextProblem passes), checking that both give the same subtokens;
  3. encoding throughput (lines/s) of every line with the fixture vocab, first pass (empty
     token cache) and second pass, checking identical ids.
CPU time of this process (time.process_time) is reported next to wall time because the
machine may be shared.

Usage:
  python bench/bench_text_encoder.py [--data_dir ../shared/data/wmt_toy_ende]
      [--vocab ../shared/fixtures/t2t/vocab.translate_toy_ende1k.1024.subwords]
      [--sizes 1024,8192] [--max_subtoken_length 200|none]
"""
from __future__ import annotations

import argparse
import collections
import os
import pathlib
import re
import sys
import time
import unicodedata

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = REPO_ROOT.parent / "shared"

# --------------------------------------------------------------------------------------------
# Baseline: plain transcription of t2t's algorithm.

_PLAIN_IMPORT_START = time.process_time()
PLAIN_ALPHANUMERIC_CHAR_SET = {
    chr(i)
    for i in range(sys.maxunicode)
    if unicodedata.category(chr(i)).startswith("L") or unicodedata.category(chr(i)).startswith("N")
}
PLAIN_ALNUM_SET_SECONDS = time.process_time() - _PLAIN_IMPORT_START
PLAIN_RESERVED_TOKENS = ["<pad>", "<EOS>"]
_PLAIN_ESCAPE_CHARS = set("\\_u;0123456789")
_PLAIN_UNESCAPE_REGEX = re.compile(r"\\u|\\\\|\\([0-9]+);")


def plain_tokenize(text: str) -> list[str]:
    """t2t's tokenizer.encode, character by character."""
    if not text:
        return []
    ret = []
    token_start = 0
    is_alnum = [c in PLAIN_ALPHANUMERIC_CHAR_SET for c in text]
    for pos in range(1, len(text)):
        if is_alnum[pos] != is_alnum[pos - 1]:
            token = text[token_start:pos]
            if token != " " or token_start == 0:
                ret.append(token)
            token_start = pos
    ret.append(text[token_start:])
    return ret


def plain_detokenize(tokens: list[str]) -> str:
    """t2t's tokenizer.decode."""
    token_is_alnum = [t[0] in PLAIN_ALPHANUMERIC_CHAR_SET for t in tokens]
    ret = []
    for i, token in enumerate(tokens):
        if i > 0 and token_is_alnum[i - 1] and token_is_alnum[i]:
            ret.append(" ")
        ret.append(token)
    return "".join(ret)


def plain_escape_token(token: str, alphabet: set[str]) -> str:
    """t2t's _escape_token."""
    token = token.replace("\\", "\\\\").replace("_", "\\u")
    ret = [c if c in alphabet and c != "\n" else f"\\{ord(c)};" for c in token]
    return "".join(ret) + "_"


def plain_unescape_token(escaped_token: str) -> str:
    """t2t's _unescape_token."""

    def match(m):
        if m.group(1) is None:
            return "_" if m.group(0) == "\\u" else "\\"
        try:
            return chr(int(m.group(1)))
        except (ValueError, OverflowError):
            return "\u3013"

    trimmed = escaped_token.removesuffix("_")
    return _PLAIN_UNESCAPE_REGEX.sub(match, trimmed)


class PlainSubwordTextEncoder:
    """t2t's SubwordTextEncoder, transcribed without optimisation."""

    def __init__(self, filename: str | None = None):
        self._alphabet: set[str] = set()
        if filename is not None:
            with open(filename, encoding="utf-8", newline="\n") as f:
                strings = []
                for line in f:
                    s = line.strip()
                    if (s.startswith("'") and s.endswith("'")) or (
                        s.startswith('"') and s.endswith('"')
                    ):
                        s = s[1:-1]
                    strings.append(s)
            self._init_subtokens_from_list(strings)
            self._alphabet = {c for s in strings for c in s} | _PLAIN_ESCAPE_CHARS

    @property
    def vocab_size(self) -> int:
        return len(self._all_subtoken_strings)

    @property
    def all_subtoken_strings(self) -> tuple[str, ...]:
        return tuple(self._all_subtoken_strings)

    def encode(self, s: str) -> list[int]:
        ret = []
        for token in plain_tokenize(s):
            ret.extend(self._token_to_subtoken_ids(token))
        return ret

    def decode(self, ids: list[int]) -> str:
        concatenated = "".join(
            self._all_subtoken_strings[i] if 0 <= i < self.vocab_size else "" for i in ids
        )
        tokens = []
        for t in concatenated.split("_"):
            if t:
                unescaped = plain_unescape_token(t + "_")
                if unescaped:
                    tokens.append(unescaped)
        return plain_detokenize(tokens)

    def _token_to_subtoken_ids(self, token: str) -> list[int]:
        cache_location = hash(token) % self._cache_size
        cache_key, cache_value = self._cache[cache_location]
        if cache_key == token:
            return cache_value
        ret = [
            self._subtoken_string_to_id[s]
            for s in self._escaped_token_to_subtoken_strings(
                plain_escape_token(token, self._alphabet)
            )
        ]
        self._cache[cache_location] = (token, ret)
        return ret

    def _escaped_token_to_subtoken_strings(self, escaped_token: str) -> list[str]:
        ret = []
        start = 0
        token_len = len(escaped_token)
        while start < token_len:
            for end in range(min(token_len, start + self._max_subtoken_len), start, -1):
                subtoken = escaped_token[start:end]
                if subtoken in self._subtoken_string_to_id:
                    ret.append(subtoken)
                    start = end
                    break
            else:
                raise AssertionError("Token substring not found in subtoken vocabulary.")
        return ret

    def _init_subtokens_from_list(self, subtoken_strings, reserved_tokens=None):
        reserved_tokens = reserved_tokens or []
        self._all_subtoken_strings = reserved_tokens + subtoken_strings
        self._max_subtoken_len = max(len(s) for s in subtoken_strings)
        self._subtoken_string_to_id = {
            s: i + len(reserved_tokens) for i, s in enumerate(subtoken_strings) if s
        }
        self._cache_size = 2**20
        self._cache = [(None, None)] * self._cache_size

    @classmethod
    def build_from_generator(cls, generator, target_size, max_subtoken_length=None,
                             reserved_tokens=None):
        token_counts = collections.defaultdict(int)
        for item in generator:
            for tok in plain_tokenize(item):
                token_counts[tok] += 1
        return cls.build_to_target_size(target_size, token_counts, 1, 1e3,
                                        max_subtoken_length, reserved_tokens)

    @classmethod
    def build_to_target_size(cls, target_size, token_counts, min_val, max_val,
                             max_subtoken_length=None, reserved_tokens=None, num_iterations=4):
        if reserved_tokens is None:
            reserved_tokens = PLAIN_RESERVED_TOKENS

        def bisect(min_val, max_val):
            present_count = (max_val + min_val) // 2
            subtokenizer = cls()
            subtokenizer.build_from_token_counts(token_counts, present_count, num_iterations,
                                                 reserved_tokens, max_subtoken_length)
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

        return bisect(min_val, max_val)

    def build_from_token_counts(self, token_counts, min_count, num_iterations=4,
                                reserved_tokens=None, max_subtoken_length=None):
        if reserved_tokens is None:
            reserved_tokens = PLAIN_RESERVED_TOKENS
        self._alphabet = {c for t in list(token_counts) + list(reserved_tokens) for c in t}
        self._alphabet |= _PLAIN_ESCAPE_CHARS
        self._init_subtokens_from_list(list(self._alphabet), reserved_tokens=reserved_tokens)
        min_count = max(min_count, 1)
        for _ in range(num_iterations):
            subtoken_counts = collections.defaultdict(int)
            for token, count in token_counts.items():
                escaped_token = plain_escape_token(token, self._alphabet)
                subtokens = self._escaped_token_to_subtoken_strings(escaped_token)
                start = 0
                for subtoken in subtokens:
                    last_position = len(escaped_token) + 1
                    if max_subtoken_length is not None:
                        last_position = min(last_position, start + max_subtoken_length)
                    for end in range(start + 1, last_position):
                        subtoken_counts[escaped_token[start:end]] += count
                    start += len(subtoken)
            len_to_subtoken_strings = []
            for subtoken_string, count in subtoken_counts.items():
                lsub = len(subtoken_string)
                if count >= min_count:
                    while len(len_to_subtoken_strings) <= lsub:
                        len_to_subtoken_strings.append(set())
                    len_to_subtoken_strings[lsub].add(subtoken_string)
            new_subtoken_strings = []
            for lsub in range(len(len_to_subtoken_strings) - 1, 0, -1):
                for subtoken_string in len_to_subtoken_strings[lsub]:
                    count = subtoken_counts[subtoken_string]
                    if count >= min_count:
                        if subtoken_string not in self._alphabet:
                            new_subtoken_strings.append((count, subtoken_string))
                        for prefix_len in range(1, lsub):
                            subtoken_counts[subtoken_string[:prefix_len]] -= count
            new_subtoken_strings.extend((subtoken_counts.get(a, 0), a) for a in self._alphabet)
            new_subtoken_strings.sort(reverse=True)
            new_subtoken_strings = [subtoken for _, subtoken in new_subtoken_strings]
            if reserved_tokens:
                escaped = [plain_escape_token(t, self._alphabet) for t in reserved_tokens]
                new_subtoken_strings = escaped + new_subtoken_strings
            self._init_subtokens_from_list(new_subtoken_strings)


# --------------------------------------------------------------------------------------------
# Measurement.


def read_pairs(data_dir: pathlib.Path) -> list[str]:
    """train.en / train.de lines, each pair's English line first (stripped)."""
    with open(data_dir / "train.en", encoding="utf-8") as en, open(
        data_dir / "train.de", encoding="utf-8"
    ) as de:
        lines = []
        for a, b in zip(en, de):
            lines.append(a.strip())
            lines.append(b.strip())
    return lines


def timed(fn, *args):
    """(result, cpu seconds, wall seconds) of fn(*args)."""
    cpu, wall = time.process_time(), time.perf_counter()
    result = fn(*args)
    return result, time.process_time() - cpu, time.perf_counter() - wall


def row(name: str, base: tuple[float, float], fast: tuple[float, float], same: bool) -> str:
    return (
        f"{name:<34} {base[0]:9.2f} {base[1]:9.2f} {fast[0]:9.3f} {fast[1]:9.3f} "
        f"{base[0] / max(fast[0], 1e-9):8.1f}x  {'identical' if same else 'DIFFERENT'}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", default=str(SHARED / "data" / "wmt_toy_ende"))
    parser.add_argument(
        "--vocab",
        default=str(SHARED / "fixtures" / "t2t" / "vocab.translate_toy_ende1k.1024.subwords"),
    )
    parser.add_argument("--sizes", default="1024,8192", help="target vocab sizes to build")
    parser.add_argument(
        "--max_subtoken_length", default="200", help="an integer, or 'none' for no bound"
    )
    args = parser.parse_args()

    # TensorFlow (which text_encoder imports to write vocab files through tf.io.gfile) is
    # imported first: the row compares the encoders' own import cost.
    import tensorflow  # noqa: F401

    import_start = time.process_time()
    sys.path.insert(0, str(REPO_ROOT))
    from t2t_lite.data_generators import text_encoder, tokenizer

    fast_import = time.process_time() - import_start
    lines = read_pairs(pathlib.Path(args.data_dir))
    dev = pathlib.Path(args.data_dir)
    with open(dev / "dev.en", encoding="utf-8") as f:
        dev_lines = [line.strip() for line in f]
    all_ok = True
    print(f"corpus: {len(lines)} lines (train.en/train.de pairs); CPU count {os.cpu_count()}")
    print(f"{'':<34} {'plain cpu':>9} {'wall':>9} {'fast cpu':>9} {'wall':>9} {'cpu ratio':>9}")
    print(
        f"{'import (alnum table vs module)':<34} {PLAIN_ALNUM_SET_SECONDS:9.2f} {'':>9} "
        f"{fast_import:9.3f}"
    )

    def count_plain():
        counts = collections.Counter()
        for line in lines:
            counts.update(plain_tokenize(line))
        return counts

    def count_fast():
        counts = collections.Counter()
        for line in lines:
            counts.update(tokenizer.encode(line))
        return counts

    base, b_cpu, b_wall = timed(count_plain)
    fast, f_cpu, f_wall = timed(count_fast)
    all_ok &= base == fast
    print(row("token counting", (b_cpu, b_wall), (f_cpu, f_wall), base == fast))

    max_len = None if args.max_subtoken_length.lower() == "none" else int(args.max_subtoken_length)
    for size in [int(s) for s in args.sizes.split(",") if s]:
        base, b_cpu, b_wall = timed(
            PlainSubwordTextEncoder.build_from_generator, iter(lines), size, max_len
        )
        fast, f_cpu, f_wall = timed(
            text_encoder.SubwordTextEncoder.build_from_generator, iter(lines), size, max_len
        )
        same = base.all_subtoken_strings == fast.all_subtoken_strings
        all_ok &= same
        print(row(f"build vocab {size} (-> {fast.vocab_size})", (b_cpu, b_wall), (f_cpu, f_wall),
                  same))

    encode_lines = lines + dev_lines
    plain_enc = PlainSubwordTextEncoder(args.vocab)
    fast_enc = text_encoder.SubwordTextEncoder(args.vocab)
    for label in ("encode, 1st pass (cold cache)", "encode, 2nd pass (warm cache)"):
        base, b_cpu, b_wall = timed(lambda: [plain_enc.encode(s) for s in encode_lines])
        fast, f_cpu, f_wall = timed(lambda: [fast_enc.encode(s) for s in encode_lines])
        same = base == fast
        all_ok &= same
        print(row(label, (b_cpu, b_wall), (f_cpu, f_wall), same))
        print(
            f"{'  lines/s (cpu)':<34} {len(encode_lines) / b_cpu:9.0f} {'':>9} "
            f"{len(encode_lines) / f_cpu:9.0f}"
        )
    ids = [fast_enc.encode(s) for s in encode_lines]
    base, b_cpu, b_wall = timed(lambda: [plain_enc.decode(x) for x in ids])
    fast, f_cpu, f_wall = timed(lambda: [fast_enc.decode(x) for x in ids])
    same = base == fast == encode_lines
    all_ok &= same
    print(row("decode (and == original text)", (b_cpu, b_wall), (f_cpu, f_wall), same))
    print(f"{'  lines/s (cpu)':<34} {len(ids) / b_cpu:9.0f} {'':>9} {len(ids) / f_cpu:9.0f}")
    print("all outputs identical" if all_ok else "MISMATCH between baseline and t2t_lite")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
