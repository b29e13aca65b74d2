"""t2t-bleu: `run.py --mode=bleu --translation=HYP --reference=REF [--bleu_variant=both]
[--metrics=bleu,chrf,chrf++,ter] [--translation=A,B --paired_bootstrap=1000]`.

Prints t2t's BLEU and sacrebleu's (`t2t_lite.evaluation.bleu_hook.bleu_report`), sacreBLEU's
chrF2 / chrF2++ / TER, or sacreBLEU's paired bootstrap of several translations
(`t2t_lite.evaluation.mt_metrics`).
"""
from __future__ import annotations

from t2t_lite.errors import UserError, one_line
from t2t_lite.evaluation import mt_metrics
from t2t_lite.evaluation.bleu_hook import bleu_report, read_lines


def main(flags) -> None:
    """`run.py --mode=bleu --translation=HYP[,HYP2,...] --reference=REF`.

    Args:
      flags: absl FLAGS with `translation`, `reference`, `bleu_variant`, `metrics`,
        `paired_bootstrap`.
    """
    import os

    for name in ("translation", "reference"):
        if not getattr(flags, name):
            raise UserError(f"--mode=bleu needs --{name}=FILE")
    translations = [p.strip() for p in flags.translation.split(",") if p.strip()]
    for name, path in [("reference", flags.reference)] + [("translation", p) for p in translations]:
        if not os.path.isfile(path):
            raise UserError(f"--{name}={path}: no such file")
    bootstrap = getattr(flags, "paired_bootstrap", 0) or 0
    try:
        metrics = mt_metrics.parse_metrics(getattr(flags, "metrics", "bleu") or "bleu")
        if bootstrap < 0 or (bootstrap and len(translations) < 2):
            raise ValueError(f"--paired_bootstrap={bootstrap} needs a positive number of "
                             "resamples and two or more --translation=BASELINE,OTHER,... files")
        if len(translations) > 1 and not bootstrap:
            raise ValueError(f"--translation={flags.translation}: several translations are "
                             "compared with --paired_bootstrap=N (e.g. 1000); give one file "
                             "otherwise")
        if bootstrap:
            references = read_lines(flags.reference)
            systems = [(path, read_lines(path)) for path in translations]
            lines = mt_metrics.paired_bootstrap(references, systems, metrics, bootstrap)
        else:
            lines = bleu_report(flags.reference, translations[0], flags.bleu_variant, metrics)
    except ValueError as e:
        raise UserError(one_line(e)) from e
    for line in lines:
        print(line)
