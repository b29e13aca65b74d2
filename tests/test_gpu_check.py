"""bench/gpu_check.sh in its small mode (what CI can run without a GPU): every row of the
table is printed, with a positive rate."""
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

DTYPES = ("float32", "bfloat16", "float16")


@pytest.mark.slow
def test_small_gpu_check_prints_every_row():
    result = subprocess.run(["bash", str(REPO_ROOT / "bench" / "gpu_check.sh"), "--small"],
                            capture_output=True, text=True, timeout=900, check=False,
                            env=dict(os.environ, PYTHON=sys.executable, CUDA_VISIBLE_DEVICES=""))
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {}
    for line in result.stdout.splitlines():
        match = re.fullmatch(r"(train|decode beam\d+) +(\w+) +(fused|plain|-) +(on|off) +"
                             r"([\d.]+) (steps/s|sentences/s)", line)
        if match:
            what, dtype, kernels, xla, rate, _ = match.groups()
            rows[what, dtype, kernels, xla] = float(rate)
    expected = [("train", dtype, kernels, xla) for dtype in DTYPES
                for kernels in ("fused", "plain") for xla in ("off", "on")]
    expected += [("decode beam2", dtype, "-", "off") for dtype in DTYPES]
    assert sorted(rows) == sorted(expected), result.stdout
    assert all(rate > 0 for rate in rows.values())
    assert "--small" in result.stdout.splitlines()[0]
    assert result.stdout.splitlines()[-1] == f"gpu_check done: {len(expected)} rows"
