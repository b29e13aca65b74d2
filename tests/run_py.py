"""run.py as a subprocess on a tiny algorithmic problem: the helpers the CLI failure tests
share (tests/test_failures.py, tests/test_run_metadata.py) and, in conftest.py, one tiny
trained run per test session."""
from __future__ import annotations

import glob
import os
import subprocess
import sys

from tests.conftest import REPO_ROOT

PROBLEM = "algorithmic_reverse_binary40_test"
# batch_shuffle_size: t2t's 512-batch shuffle buffer costs ~20 s of CPU before the first step
# on this 1,000-example problem; 4 keeps the shuffle exercised.
TINY = "hidden_size=16,filter_size=16,num_heads=2,num_hidden_layers=1,batch_shuffle_size=4"


def env() -> dict:
    """The environment of a run.py subprocess: quiet TensorFlow, no inherited TF_CONFIG."""
    values = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    values.pop("TF_CONFIG", None)
    return values


def run(*args: str, cwd, timeout: int = 300) -> subprocess.CompletedProcess:
    """Runs `python run.py args` in `cwd` (text output captured, no exception on failure)."""
    return subprocess.run([sys.executable, str(REPO_ROOT / "run.py"), *args], cwd=cwd,
                          env=env(), capture_output=True, text=True, timeout=timeout,
                          check=False)


def train_flags(data_dir, output_dir, *extra: str) -> list[str]:
    """The flags of a tiny training run on PROBLEM (a checkpoint every 2 steps)."""
    return ["--mode=train", f"--problem={PROBLEM}", f"--data_dir={data_dir}",
            "--hparams_set=transformer_tiny", f"--output_dir={output_dir}",
            f"--hparams={TINY}", "--log_step_count_steps=2", "--save_checkpoints_steps=2",
            "--random_seed=1", *extra]


def steps(output_dir) -> list[int]:
    """The steps of the checkpoints on disk in `output_dir`, ascending."""
    return sorted(int(p.rsplit("-", 1)[1].split(".")[0])
                  for p in glob.glob(os.path.join(str(output_dir), "ckpt-*.index")))


def snapshot(directory) -> dict[str, bytes]:
    """Every file under `directory` (relative path -> bytes), to compare before and after."""
    files = {}
    for root, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                files[os.path.relpath(path, directory)] = f.read()
    return files
