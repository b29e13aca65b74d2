"""The translation recipe (recipes/translate_toy_ende.py) end to end, a few steps of a tiny model.

The full recipe takes ~45 minutes; this runs the same commands (datagen, train_and_eval,
decode, BLEU, averaging, decode of the average) so that the path cannot rot.
"""
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT


@pytest.mark.slow
def test_quick_recipe_runs_every_step_and_prints_its_numbers(wmt_toy_dir, tmp_path):
    work = tmp_path / "work"
    proc = subprocess.run(
        [sys.executable, "recipes/translate_toy_ende.py", "--quick", f"--work_dir={work}",
         f"--corpus={wmt_toy_dir}", "--dev_lines=5"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    # Every step ran, as the command a user would type.
    for mode in ("datagen", "train_and_eval", "decode", "bleu", "average"):
        assert re.search(rf"^\$ .*run\.py --mode={mode}\b", out, re.MULTILINE), mode
    last = out.strip().splitlines()[-1]
    m = re.fullmatch(r"RESULT translate_toy_ende: steps (\d+) \| dev loss ([0-9.]+) acc ([0-9.]+)"
                     r" \| sacreBLEU ([0-9.]+) \(avg3 ([0-9.]+)\) \| t2t BLEU cased ([0-9.]+) \|.*"
                     r"total [0-9.]+ min", last)
    assert m, last
    assert int(m.group(1)) == 12
    assert 0 < float(m.group(2)) < 10 and 0 <= float(m.group(3)) <= 1
    # Two evaluations (steps 6 and 12), as --eval_every says.
    assert re.search(r"^\s+6\s+[0-9.]+\s+[0-9.]+$", out, re.MULTILINE)
    for name in ("dev.last.decodes", "dev.avg3.decodes"):
        lines = (work / name).read_text(encoding="utf-8").splitlines()
        assert len(lines) == 5, name
    assert (work / "avg3").is_dir() and os.listdir(work / "train")
