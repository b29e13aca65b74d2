"""Stopping training with a signal, single process: Ctrl-C (SIGINT) and SIGTERM save a
checkpoint at the current step, print one `stopped:` line and exit with 130 / 143; the next
run resumes at exactly that step. (Several workers: tests/test_multi_worker_faults.py.)
"""
import os
import signal
import time

import pytest

from tests.test_distributed import _env, _log, _start, _stop


def _wait_for(log_path, text, process, timeout=240):
    """Waits until `text` is in the log; returns the log."""
    deadline = time.time() + timeout
    while True:
        log = _log(log_path, tail=10**6)
        if text in log:
            return log
        assert process.poll() is None, log[-3000:]
        assert time.time() < deadline, f"{text!r} not logged in {timeout} s"
        time.sleep(0.2)


def _stop_line(log: str) -> str:
    """The last line, which must be the only `stopped:` line, with no traceback."""
    assert "Traceback" not in log, log[-3000:]
    lines = [line for line in log.splitlines() if line.startswith("stopped: ")]
    assert len(lines) == 1 and log.rstrip().endswith(lines[0]), log[-3000:]
    return lines[0]


@pytest.mark.slow
def test_sigint_then_sigterm_save_the_current_step_and_resume_there(tmp_path):
    output_dir = tmp_path / "run"
    args = ["--output_dir", str(output_dir), "--train_steps", "100000",
            "--save_checkpoints_steps", "100000"]
    # Ctrl-C after a few steps: no periodic checkpoint exists, the stop saves one.
    log_path = tmp_path / "first.log"
    process = _start(args, _env(), log_path)
    try:
        _wait_for(log_path, "step 3/100000", process)
        process.send_signal(signal.SIGINT)
        sent = time.time()
        assert process.wait(timeout=60) == 130
        assert time.time() - sent < 60
    finally:
        _stop(process)
    line = _stop_line(_log(log_path))
    step = int(line.split(" at step ")[1].split(";")[0])
    assert step >= 3
    assert line == (f"stopped: SIGINT received: saved {output_dir}/ckpt-{step} at step {step}; "
                    f"run the same command again to resume at step {step}")
    assert (output_dir / f"ckpt-{step}.index").exists()

    # The restart resumes at that step; SIGTERM (a scheduler's notice) stops it the same way.
    log_path = tmp_path / "second.log"
    process = _start(args, _env(), log_path)
    try:
        log = _wait_for(log_path, f"step {step + 2}/100000", process)
        assert f"Resuming training at global step {step}:" in log
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 143
    finally:
        _stop(process)
    line = _stop_line(_log(log_path))
    later = int(line.split(" at step ")[1].split(";")[0])
    assert line.startswith(f"stopped: SIGTERM received: saved {output_dir}/ckpt-{later} ")
    assert later >= step + 2 and (output_dir / f"ckpt-{later}.index").exists()
    assert not os.path.exists(output_dir / "tmp_worker")
