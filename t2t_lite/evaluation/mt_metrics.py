"""sacreBLEU's corpus metrics beside BLEU: chrF2, chrF2++ and TER, with their signatures, and
sacreBLEU's paired bootstrap resampling of several translations of one reference.

`run.py --mode=bleu --metrics=bleu,chrf,chrf++,ter` prints a line per metric as sacreBLEU's
command line does (`score.format` with the signature); `--paired_bootstrap=B` with
`--translation=BASELINE,OTHER,...` prints `PairedTest`'s score, bootstrap mean, 95% CI and
p-value for each system and metric (sacreBLEU's own code: the same numbers as
`sacrebleu REF -i BASELINE OTHER --paired-bs --paired-bs-n B`, seed `SACREBLEU_SEED`,
default 12345). Decoding with a reference and in-training decoding log the same metrics to
TensorBoard under `SCALAR_NAMES`. No TensorFlow here.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

# --metrics names -> (sacrebleu metric class name, constructor arguments).
METRICS = {
    "bleu": ("BLEU", {}),
    "chrf": ("CHRF", {}),
    "chrf++": ("CHRF", {"word_order": 2}),
    "ter": ("TER", {}),
}
# TensorBoard / run card names, as sacreBLEU names the scores (BLEU is t2t's "BLEU" already).
SCALAR_NAMES = {"bleu": "sacreBLEU", "chrf": "chrF2", "chrf++": "chrF2++", "ter": "TER"}
# Lower is better for these (early stopping and keep-best pick the direction from it).
LOWER_IS_BETTER = ("ter", "TER")


def parse_metrics(text: str) -> tuple[str, ...]:
    """The metric names of a `--metrics` value ("bleu,chrf,chrf++,ter"), in the given order.

    Raises:
      UserError: an unknown name (naming it and the known ones) or none at all.
    """
    from t2t_lite.errors import UserError

    names = tuple(dict.fromkeys(n.strip().lower() for n in (text or "").split(",") if n.strip()))
    unknown = [n for n in names if n not in METRICS]
    if unknown or not names:
        what = f"unknown {', '.join(unknown)}" if unknown else "empty"
        raise UserError(f"--metrics={text}: {what}; choose from {','.join(METRICS)}")
    return names


def make_metric(name: str, references: Sequence[str] | None = None) -> Any:
    """A sacrebleu metric object for `name` of METRICS (one reference stream if given)."""
    from sacrebleu import metrics

    class_name, kwargs = METRICS[name]
    refs = None if references is None else [list(references)]
    return getattr(metrics, class_name)(references=refs, **kwargs)


def corpus_scores(references: Sequence[str], hypotheses: Sequence[str],
                  names: Sequence[str]) -> dict[str, tuple[Any, Any]]:
    """sacreBLEU's corpus scores of detokenized lines (one reference each).

    Args:
      references: reference lines.
      hypotheses: hypothesis lines, as many.
      names: METRICS names.

    Returns:
      name -> (sacrebleu Score (`.score`: BLEU and chrF in [0, 100], TER in [0, inf)), its
      Signature).

    Raises:
      ValueError: the line counts differ.
    """
    if len(references) != len(hypotheses):
        raise ValueError(f"{len(references)} references but {len(hypotheses)} hypotheses")
    out = {}
    for name in names:
        metric = make_metric(name)
        out[name] = (metric.corpus_score(list(hypotheses), [list(references)]),
                     metric.get_signature())
    return out


def score_lines(scores: dict[str, tuple[Any, Any]]) -> list[str]:
    """One line per score, "chrF2|nrefs:1|...|version:2.6.0 = 45.67" (sacreBLEU's CLI line)."""
    return [score.format(signature=str(signature), width=2)
            for score, signature in scores.values()]


def scalars(scores: dict[str, tuple[Any, Any]]) -> dict[str, float]:
    """SCALAR_NAMES -> score, for TensorBoard and the run card."""
    return {SCALAR_NAMES[name]: float(score.score) for name, (score, _) in scores.items()}


def paired_bootstrap(references: Sequence[str], systems: Sequence[tuple[str, Sequence[str]]],
                     names: Sequence[str], n_samples: int, width: int = 2) -> list[str]:
    """sacreBLEU's paired bootstrap resampling of each system against the first (baseline).

    Args:
      references: reference lines.
      systems: (name, hypothesis lines) pairs, the baseline first; at least two.
      names: METRICS names.
      n_samples: bootstrap resamples (sacreBLEU's --paired-bs-n).
      width: decimals, as sacreBLEU's --width.

    Returns:
      Lines: a header, then per metric its signature and one line per system,
      "<metric> <system> = score (mean ± 95% CI) [(p = p-value)[*]]" with sacreBLEU's
      cell text ("*": p < 0.05 at most).

    Raises:
      ValueError: fewer than two systems, or line counts that differ.
    """
    from sacrebleu.significance import PairedTest

    if len(systems) < 2:
        raise ValueError("paired bootstrap needs two or more translations (the first is the "
                         "baseline)")
    for system_name, lines in systems:
        if len(lines) != len(references):
            raise ValueError(f"{system_name} has {len(lines)} lines but the reference has "
                             f"{len(references)}")
    metrics = {name: make_metric(name, references) for name in names}
    named = [(f"Baseline: {systems[0][0]}", list(systems[0][1])),
             *[(n, list(lines)) for n, lines in systems[1:]]]
    test = PairedTest(named, metrics, references=None, test_type="bs", n_samples=n_samples)
    sacre_log = logging.getLogger("sacrebleu")
    level = sacre_log.level
    sacre_log.setLevel(logging.WARNING)  # its progress lines would come through absl's INFO
    try:
        signatures, results = test()
    finally:
        sacre_log.setLevel(level)
    header = (f"Paired bootstrap resampling (sacreBLEU), {test.n_samples} resamples: each "
              f"system against the baseline {systems[0][0]}")
    out = [header]
    system_names = results.pop("System")
    for score_name, values in results.items():
        out.append(f"{score_name} signature: {signatures[score_name].format()}")
        for system_name, result in zip(system_names, values):
            out.append(f"{score_name} {system_name} = {bootstrap_cell(result, width)}")
    return out


def bootstrap_cell(result: Any, width: int = 2) -> str:
    """sacreBLEU's table cell of one paired-test result: "98.63 (98.64 ± 0.58) (p = 0.0050)*"."""
    text = f"{result.score:.{width}f}"
    if result.mean is not None:
        text += f" ({result.mean:.{width}f} ± {result.ci:.{width}f})"
    if result.p_value is not None:
        text += f" (p = {result.p_value:.4f})" + ("*" if result.p_value <= 0.05 else "")
    return text
