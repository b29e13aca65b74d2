"""t2t-bleu: `run.py --mode=bleu --translation=HYP --reference=REF [--bleu_variant=both]`.

Prints t2t's BLEU and sacrebleu's (`t2t_lite.evaluation.bleu_hook.bleu_report`).
"""
from __future__ import annotations

from t2t_lite.errors import UserError, one_line
from t2t_lite.evaluation.bleu_hook import bleu_report


def main(flags) -> None:
    """`run.py --mode=bleu --translation=HYP --reference=REF [--bleu_variant=both]`.

    Args:
      flags: absl FLAGS with `translation`, `reference`, `bleu_variant`.
    """
    import os

    for name in ("translation", "reference"):
        path = getattr(flags, name)
        if not path:
            raise UserError(f"--mode=bleu needs --{name}=FILE")
        if not os.path.isfile(path):
            raise UserError(f"--{name}={path}: no such file")
    try:
        lines = bleu_report(flags.reference, flags.translation, flags.bleu_variant)
    except ValueError as e:
        raise UserError(one_line(e)) from e
    for line in lines:
        print(line)
