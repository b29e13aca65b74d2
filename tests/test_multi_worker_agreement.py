"""What the workers of one run agree on before training (`cluster_agreement`), as run.py
processes of a two-worker cluster on localhost (tiny problem) and at library level:

* worker 1 started with another --train_steps: both workers stop before training with the
  same line naming the first difference, and nothing is trained;
* worker 1 with an empty --data_dir: it says so, and worker 0 gets the lost-worker line
  naming worker 1 (no traceback);
* the fingerprints: which flags count, the first difference in cluster order, hparams.
"""
import json
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO_ROOT
from tests.run_py import env, steps, train_flags
from tests.test_distributed import _free_ports, _log, _stop
from tests.test_multi_worker_faults import _last_line


def _start_workers(tmp_path, per_worker_flags, name="run"):
    """run.py training processes of one localhost cluster, one per flag list."""
    ports = _free_ports(len(per_worker_flags))
    spec = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    processes = []
    for index, flags in enumerate(per_worker_flags):
        log = tmp_path / f"{name}_worker{index}.log"
        with open(log, "w") as out:
            process = subprocess.Popen(
                [sys.executable, str(REPO_ROOT / "run.py"), *flags], cwd=tmp_path,
                env=dict(env(), TF_CONFIG=json.dumps(
                    {"cluster": spec, "task": {"type": "worker", "index": index}})),
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        process.log = log
        processes.append(process)
    return processes


def _finish(processes, timeout=300):
    """Waits for every process; returns their exit statuses (killing them all on timeout)."""
    deadline = time.time() + timeout
    try:
        while any(p.poll() is None for p in processes) and time.time() < deadline:
            time.sleep(0.3)
        return [p.poll() for p in processes]
    finally:
        for process in processes:
            _stop(process)


@pytest.mark.slow
def test_another_train_steps_on_one_worker_stops_both_before_training(
        tiny_run_data_dir, tmp_path):
    out = tmp_path / "run"
    flags = train_flags(tiny_run_data_dir, out)
    workers = _start_workers(tmp_path, [[*flags, "--train_steps=4"],
                                        [*flags, "--train_steps=6"]])
    assert _finish(workers) == [1, 1], [_log(w.log) for w in workers]
    for worker in workers:
        assert _last_line(worker, "error") == (
            "error: worker 1's --train_steps=6 differs from worker 0's 4: start every worker "
            "with the same flags (only TF_CONFIG's task differs)")
    assert steps(out) == []


@pytest.mark.slow
def test_a_peer_failing_before_training_gives_the_survivor_the_lost_worker_line(
        tiny_run_data_dir, tmp_path):
    out = tmp_path / "run"
    empty = tmp_path / "empty_data"
    empty.mkdir()
    workers = _start_workers(tmp_path, [train_flags(tiny_run_data_dir, out, "--train_steps=4"),
                                        train_flags(empty, out, "--train_steps=4")])
    assert _finish(workers) == [1, 1], [_log(w.log) for w in workers]
    assert str(empty) in _last_line(workers[1], "error")
    assert _last_line(workers[0], "error") == (
        "error: lost contact with worker 1 before training started (its process ended; its "
        "own log says why); worker 0 stops: no checkpoint was saved yet; start every worker "
        "again with the same command to resume there")
    assert steps(out) == []


def test_flag_fingerprint_keeps_the_flags_that_shape_the_run_only():
    from t2t_lite.training.cluster_agreement import flag_fingerprint

    values = {"train_steps": 40, "hparams": "batch_size=1280", "random_seed": None,
              "output_dir": "/mnt/a", "data_dir": "/mnt/d", "worker_startup_timeout_secs": 300,
              "decode_to_file": "x"}
    assert flag_fingerprint(values) == {"--hparams": "batch_size=1280", "--train_steps": "40",
                                        "--random_seed": ""}


def test_first_difference_names_the_first_differing_worker_and_setting():
    from t2t_lite.training.cluster_agreement import first_difference, hparams_fingerprint

    same = {"--train_steps": "40", "--hparams": ""}
    assert first_difference({"worker 0": same, "worker 1": dict(same)}) is None
    assert first_difference({"worker 0": same, "worker 1": same,
                             "worker 2": {"--train_steps": "60", "--hparams": "x=1"}}) == (
        "worker 2's --train_steps=60 differs from worker 0's 40")
    assert first_difference({"chief 0": same, "worker 0": {**same, "--hparams": "x=1"}}) == (
        "worker 0's --hparams=x=1 differs from chief 0's (empty)")
    # A name only one side has (another t2t_lite version on one host).
    assert first_difference({"worker 0": same, "worker 1": {**same, "--xla_compile": "True"}}
                            ) == "worker 1's --xla_compile=True differs from worker 0's " \
                                 "nothing (unset)"
    assert first_difference({"worker 0": same, "worker 1": {"--train_steps": "40"}}) == (
        "worker 1's --hparams (unset) differs from worker 0's (empty)")
    chief = hparams_fingerprint({"hidden_size": 512, "batch_size": 512})
    other = hparams_fingerprint({"hidden_size": 512, "batch_size": 1280})
    assert first_difference({"worker 0": chief, "worker 1": other}) == (
        "worker 1's hparams batch_size=1280 differs from worker 0's 512")
