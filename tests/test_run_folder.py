"""A run only touches its own folder: outputs never replace a run's or the data's files,
one process wins a stale lock, every text input reads the same with or without a BOM, `~`
means the same to every mode, and the run card goes through file_io."""
from __future__ import annotations

import json
import multiprocessing
import os
import subprocess

import pytest

from t2t_lite.errors import UserError
from t2t_lite.utils import run_lock, validation


def _dead_pid() -> int:
    """The pid of a process that has exited (a killed run's, in a stale lock)."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


HELD, REFUSED = 10, 11


def _race(directory: str, barrier) -> None:
    """A racer: waits for the others, tries the lock, holds it until every racer tried;
    exits HELD or REFUSED."""
    from absl import logging

    logging.set_verbosity(logging.ERROR)
    barrier.wait()
    try:
        lock = run_lock.RunLock(directory).acquire()
    except UserError:
        barrier.wait()
        os._exit(REFUSED)
    barrier.wait()  # every racer has tried while this one holds the lock
    lock.release()
    os._exit(HELD)


@pytest.mark.slow
def test_stale_lock_takeover_has_exactly_one_winner(tmp_path):
    context = multiprocessing.get_context("fork")
    outcomes = []
    for trial in range(20):
        directory = tmp_path / f"run{trial}"
        directory.mkdir()
        (directory / run_lock.LOCK_NAME).write_text(json.dumps(
            {"host": run_lock.socket.gethostname(), "pid": _dead_pid(), "start_time": 1.0}))
        racers = 2 + trial % 3
        barrier = context.Barrier(racers)
        processes = [context.Process(target=_race, args=(str(directory), barrier))
                     for _ in range(racers)]
        for process in processes:
            process.start()
        for process in processes:
            process.join(60)
        outcomes.append(sorted({HELD: "held", REFUSED: "refused"}.get(p.exitcode, p.exitcode)
                               for p in processes))
        assert not (directory / run_lock.LOCK_NAME).exists()  # the winner released it
    assert outcomes == [["held"] + ["refused"] * (1 + t % 3) for t in range(20)]


def test_run_card_goes_through_file_io(tmp_path, monkeypatch):
    import tensorflow as tf

    from t2t_lite.training import run_card

    monkeypatch.chdir(tmp_path)
    run = f"ram://run_card_{os.getpid()}/run"
    run_card.update(run, "training", {"steps": 4})
    card = run_card.update(run, "eval", {"loss": 1.5})
    assert run_card.read(run) == card and card["training"]["steps"] == 4
    assert json.loads(tf.io.gfile.GFile(f"{run}/run_card.json").read()) == card
    assert "| loss | 1.5 |" in tf.io.gfile.GFile(f"{run}/run_card.md").read()
    assert os.listdir(tmp_path) == []  # no local folder named "ram:"
