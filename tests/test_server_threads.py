"""The server's intra-op threads (`t2t_lite.serving.threads`): each decode worker's share of
the cores, set in TensorFlow before its runtime starts (the server process's own check of
the wiring and of /v1/models is in test_server.py and test_server_limits.py)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from t2t_lite.serving import threads
from tests.conftest import REPO_ROOT
from tests.run_py import env


@pytest.mark.parametrize("workers, cores, expected", [
    (2, 2, 1),  # a worker per core: each op on its worker's thread
    (1, 2, 2),  # one worker: every core (TensorFlow's default)
    (4, 2, 1),  # more workers than cores: at least 1
    (2, 8, 4),
    (3, 8, 2),
    (0, 4, 4),  # no workers given: as one
])
def test_each_worker_gets_its_share_of_the_cores(workers, cores, expected):
    assert threads.choose(workers, cores) == expected


def test_default_workers_are_decode_modes_parallel_batches():
    assert [threads.default_workers(False, cores) for cores in (1, 2, 3, 4, 8, 64)] == [
        1, 2, 3, 4, 4, 4]
    assert threads.default_workers(True, 8) == 1


CONFIGURE = """
import sys
sys.path.insert(0, sys.argv[1])
import tensorflow as tf
from t2t_lite.decoding import decoding
from t2t_lite.serving import threads
chosen = threads.configure(int(sys.argv[2]), int(sys.argv[3]))
(tf.constant([1.0]) + 1.0).numpy()  # the runtime starts with the setting
print(chosen, tf.config.threading.get_intra_op_parallelism_threads(), decoding.usable_cores())
try:
    threads.configure(chosen + 1, 0)
except RuntimeError:
    print("refused after start")
"""


def _configure(requested: int, workers: int) -> list[str]:
    result = subprocess.run([sys.executable, "-c", CONFIGURE, str(REPO_ROOT), str(requested),
                             str(workers)], env=env(), capture_output=True, text=True,
                            timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.split("\n")


@pytest.mark.slow
def test_configure_sets_tensorflow_before_its_runtime_starts():
    # Asked for: TensorFlow's runtime runs with it; changing it afterwards is refused.
    first, second = _configure(3, 0)[:2]
    assert first.split()[:2] == ["3", "3"]
    assert second == "refused after start"
    # Chosen: the usable cores over one worker, all of them.
    chosen, in_use, cores = (int(n) for n in _configure(0, 1)[0].split())
    assert chosen == in_use == cores
