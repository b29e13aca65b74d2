"""Reading a keep-best folder (`output_dir/best/`, written by `training/keep_best`): its
checkpoints ranked by the metric they were kept for.

The reading half lives here, beneath decoding (`decoding/runs` restores a keep-best folder's
best checkpoint) and the tools, which import nothing of training/.
"""
from __future__ import annotations

import json
import os
from typing import Any

BEST_DIR = "best"
INDEX_FILE = "best_checkpoints.json"
PREFIX = "ckpt"


def read_index(best_dir: str) -> dict[str, Any] | None:
    """`best_checkpoints.json` of a keep-best folder, or None when `best_dir` is not one."""
    path = os.path.join(best_dir, INDEX_FILE)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        try:
            return json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:  # junk bytes too: named
            raise ValueError(f"{path} does not parse ({e}); it is rewritten at the next "
                             "evaluation, or remove the folder") from e


def ranked(best_dir: str) -> list[str]:
    """The checkpoint prefixes of a keep-best folder, best first (equal values: earlier step
    first); [] when `best_dir` is not one. Only those whose files are there are listed."""
    index = read_index(best_dir)
    if not index:
        return []
    sign = 1 if index["minimize"] else -1
    entries = sorted(((int(s), float(v)) for s, v in index["checkpoints"].items()),
                     key=lambda sv: (sign * sv[1], sv[0]))
    paths = [os.path.join(best_dir, f"{PREFIX}-{s}") for s, _ in entries]
    return [p for p in paths if os.path.exists(p + ".index")]
