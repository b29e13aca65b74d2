"""BLEU: tensor2tensor's `bleu_hook` (tokenized corpus BLEU, `t2t-bleu`) and sacrebleu.

Two numbers, because they answer different questions:

* t2t's BLEU (`compute_bleu`, `bleu_tokenize`, `bleu_wrapper`) reproduces what `t2t-bleu` and
  t2t's decode hook print: an mteval-v14 "international" tokenization of detokenized text,
  corpus BLEU with t2t's smoothing of zero n-gram matches.
* sacrebleu's detokenized corpus BLEU with its signature is the number to publish and
  compare across toolkits.

`run.py --mode=bleu --translation=HYP --reference=REF` prints both (`main`).
"""
from __future__ import annotations

import collections
import functools
import math
import re
import sys
import unicodedata
from collections.abc import Sequence

import numpy as np

from t2t_lite import file_io


def _get_ngrams(segment: Sequence, max_order: int) -> collections.Counter:
    """Counts every n-gram of `segment` for n = 1..max_order (tuples as keys)."""
    counts = collections.Counter()
    for order in range(1, max_order + 1):
        for start in range(len(segment) - order + 1):
            counts[tuple(segment[start:start + order])] += 1
    return counts


def compute_bleu(
    reference_corpus: Sequence[Sequence],
    translation_corpus: Sequence[Sequence],
    max_order: int = 4,
    use_bp: bool = True,
) -> np.float32:
    """Corpus BLEU of tokenized segments (t2t's `bleu_hook.compute_bleu`), in [0, 1].

    Clipped n-gram matches and hypothesis n-gram counts are summed over the corpus. An order
    with candidates but no match gets precision 1 / (2^j * count) for its j-th occurrence
    (t2t's smoothing); an order without candidates gets 0 and is left out of the geometric
    mean, whose divisor stays `max_order`.

    Args:
      reference_corpus: one reference per segment, each a list of tokens (any hashable).
      translation_corpus: the hypotheses, same number of segments.
      max_order: largest n-gram order.
      use_bp: apply the brevity penalty exp(1 - ref_len / hyp_len) when hyp_len < ref_len.

    Returns:
      BLEU as np.float32.
    """
    reference_length = 0
    translation_length = 0
    matches_by_order = [0] * max_order
    possible_matches_by_order = [0] * max_order
    for reference, translation in zip(reference_corpus, translation_corpus):
        reference_length += len(reference)
        translation_length += len(translation)
        ref_counts = _get_ngrams(reference, max_order)
        hyp_counts = _get_ngrams(translation, max_order)
        for ngram, count in ref_counts.items():
            matches_by_order[len(ngram) - 1] += min(count, hyp_counts[ngram])
        for ngram, count in hyp_counts.items():
            possible_matches_by_order[len(ngram) - 1] += count

    precisions = [0.0] * max_order
    smooth = 1.0
    for i in range(max_order):
        if possible_matches_by_order[i] > 0:
            if matches_by_order[i] > 0:
                precisions[i] = matches_by_order[i] / possible_matches_by_order[i]
            else:
                smooth *= 2
                precisions[i] = 1.0 / (smooth * possible_matches_by_order[i])

    geo_mean = 0.0
    if max(precisions) > 0:
        geo_mean = math.exp(sum(math.log(p) for p in precisions if p) / max_order)

    bp = 1.0
    if use_bp and reference_length:
        ratio = translation_length / reference_length
        if ratio <= 0.0:
            bp = 0.0
        elif ratio < 1.0:
            bp = math.exp(1 - 1.0 / ratio)
    return np.float32(geo_mean * bp)


def _property_chars(prefix: str) -> str:
    """All code points below sys.maxunicode whose Unicode category (Python's unicodedata, as
    t2t reads it) starts with `prefix` ("P", "S"), in code point order.

    t2t tests all 1.1M code points with unicodedata.category (seconds on a busy machine);
    here the `regex` module's C scanner finds the candidates with its own Unicode tables
    (\\p{P}, \\p{S}), each then kept only if unicodedata agrees: its tables are as new
    as or newer than Python's, so the characters it adds (assigned after Python's Unicode
    version) drop out. tests/test_bleu_hook.py checks equality with the full scan.
    """
    import regex

    code_points = np.arange(sys.maxunicode, dtype=np.uint32)
    code_points = code_points[(code_points < 0xD800) | (code_points > 0xDFFF)]  # surrogates
    every_char = code_points.tobytes().decode("utf-32-le")
    return "".join(c for c in regex.findall(r"\p{" + prefix + "}", every_char)
                   if unicodedata.category(c).startswith(prefix))


@functools.lru_cache(maxsize=1)
def _bleu_regexes() -> tuple[re.Pattern, re.Pattern, re.Pattern]:
    """(non-digit + punctuation, punctuation + non-digit, symbol) patterns, built once.

    t2t pastes the raw characters into a regex character class; there the backslash escapes
    the following "]" and so is not itself in the class. The backslash is left out here too,
    so that tokenization matches t2t's exactly (e.g. "a\\b" stays one token).
    """
    punctuation = re.escape(_property_chars("P").replace("\\", ""))
    symbols = re.escape(_property_chars("S"))
    return (
        re.compile(r"([^\d])([" + punctuation + r"])"),
        re.compile(r"([" + punctuation + r"])([^\d])"),
        re.compile(r"([" + symbols + r"])"),
    )


def bleu_tokenize(string: str) -> list[str]:
    """Tokenizes one line like mteval-v14's international tokenizer (t2t's `bleu_tokenize`).

    Splits off punctuation unless it sits between digits (1,000.5 stays whole; a final
    "2014." too, as in mteval) and every symbol character.

    Args:
      string: one line of detokenized text.

    Returns:
      The tokens.
    """
    nondigit_punct, punct_nondigit, symbol = _bleu_regexes()
    string = nondigit_punct.sub(r"\1 \2 ", string)
    string = punct_nondigit.sub(r" \1 \2", string)
    string = symbol.sub(r" \1 ", string)
    return string.split()


def _read_text(filename: str) -> str:
    # newline="" keeps the file's bytes as they are (t2t reads with tf.gfile, which does not
    # translate line endings).
    with open(filename, encoding=file_io.TEXT_ENCODING, newline="") as f:
        return f.read()


def bleu_wrapper(ref_filename: str, hyp_filename: str, case_sensitive: bool = False) -> np.float32:
    """t2t's BLEU of two files, one segment per line, in [0, 1] (t2t's `bleu_wrapper`).

    Both files are split on "\\n" and must give the same number of pieces (a trailing newline
    counts, as in t2t); lowercased unless `case_sensitive`; tokenized with `bleu_tokenize`.

    Args:
      ref_filename: reference translations.
      hyp_filename: hypotheses.
      case_sensitive: False lowercases both sides (t2t's BLEU_uncased).

    Returns:
      BLEU as np.float32.

    Raises:
      ValueError: the files differ in line count.
    """
    ref_lines = _read_text(ref_filename).split("\n")
    hyp_lines = _read_text(hyp_filename).split("\n")
    if len(ref_lines) != len(hyp_lines):
        raise ValueError(
            f"BLEU: {ref_filename} has {len(ref_lines)} lines but {hyp_filename} has "
            f"{len(hyp_lines)} (counting a trailing newline); give files with one translation "
            "per reference line"
        )
    if not case_sensitive:
        ref_lines = [line.lower() for line in ref_lines]
        hyp_lines = [line.lower() for line in hyp_lines]
    return compute_bleu(
        [bleu_tokenize(line) for line in ref_lines], [bleu_tokenize(line) for line in hyp_lines]
    )


def read_lines(filename: str) -> list[str]:
    """Lines of a UTF-8 file with trailing whitespace removed (and a leading BOM), as
    sacrebleu's CLI reads them."""
    with open(filename, encoding=file_io.TEXT_ENCODING, newline="\n") as f:
        return [line.rstrip() for line in f]


def sacrebleu_corpus_bleu(
    references: Sequence[str],
    hypotheses: Sequence[str],
    lowercase: bool = False,
    tokenize: str | None = None,
):
    """sacrebleu's corpus BLEU of detokenized lines (one reference each).

    Args:
      references: reference lines.
      hypotheses: hypothesis lines, same count.
      lowercase: sacrebleu's `-lc`.
      tokenize: sacrebleu tokenizer name; None = sacrebleu's default for the language (13a).

    Returns:
      (score, signature): the `sacrebleu.metrics.bleu.BLEUScore` (`.score` in [0, 100]) and
      its `BLEUSignature` (`str()` gives "nrefs:1|case:mixed|eff:no|tok:13a|...").
    """
    from sacrebleu.metrics import BLEU

    if len(references) != len(hypotheses):
        raise ValueError(
            f"sacrebleu: {len(references)} references but {len(hypotheses)} hypotheses"
        )
    metric = BLEU(lowercase=lowercase, tokenize=tokenize)
    score = metric.corpus_score(list(hypotheses), [list(references)])
    return score, metric.get_signature()


def bleu_report(ref_filename: str, hyp_filename: str, variant: str = "both",
                metrics: Sequence[str] = ("bleu",)) -> list[str]:
    """The lines `--mode=bleu` prints: sacrebleu's score with its signature, then t2t's
    tokenized BLEU (x100) as `t2t-bleu` prints it, then sacreBLEU's other `metrics` (chrF2,
    chrF2++, TER; `mt_metrics`), each with its signature.

    Args:
      ref_filename: reference file.
      hyp_filename: hypothesis file.
      variant: "both", "cased" or "uncased": which t2t BLEU lines to include.
      metrics: `mt_metrics.METRICS` names; without "bleu" no BLEU line is printed.

    Returns:
      Lines without newlines.
    """
    from t2t_lite.evaluation import mt_metrics

    references = read_lines(ref_filename)
    hypotheses = read_lines(hyp_filename)
    if len(references) != len(hypotheses):
        raise ValueError(
            f"BLEU: {ref_filename} has {len(references)} lines but {hyp_filename} has "
            f"{len(hypotheses)}; give files with one translation per reference line"
        )
    if not references:
        raise ValueError(f"BLEU: {ref_filename} and {hyp_filename} hold no lines: nothing to "
                         "score")
    lines = []
    if "bleu" in metrics:
        score, signature = sacrebleu_corpus_bleu(references, hypotheses)
        lines.append(score.format(signature=str(signature), width=2))
        if variant in ("uncased", "both"):
            bleu = 100 * bleu_wrapper(ref_filename, hyp_filename, case_sensitive=False)
            lines.append(f"BLEU_uncased = {bleu:6.2f}")
        if variant in ("cased", "both"):
            bleu = 100 * bleu_wrapper(ref_filename, hyp_filename, case_sensitive=True)
            lines.append(f"BLEU_cased = {bleu:6.2f}")
    others = [name for name in metrics if name != "bleu"]
    lines += mt_metrics.score_lines(mt_metrics.corpus_scores(references, hypotheses, others))
    return lines
