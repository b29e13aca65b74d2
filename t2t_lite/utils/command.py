"""The command the user ran, as help texts and hints name it: `t2t-lite` (the installed
console script), `python -m t2t_lite`, or `python run.py` (the repository's script, also the
name used when t2t_lite is called as a library)."""
from __future__ import annotations

import os
import sys

DEFAULT = "python run.py"


def name(argv0: str | None = None) -> str:
    """The command of this process, from its `sys.argv[0]` (or `argv0`).

    Returns:
      "t2t-lite", "python -m t2t_lite", or "python run.py" (the repository's script, by any
      path; also anything else: a test runner, a library caller).
    """
    argv0 = sys.argv[0] if argv0 is None else argv0
    base = os.path.basename(argv0)
    if base in ("t2t-lite", "t2t-lite.exe"):
        return "t2t-lite"
    if base == "__main__.py" and os.path.basename(os.path.dirname(argv0)) == "t2t_lite":
        return "python -m t2t_lite"
    return DEFAULT
