"""Crashes and bad input through run.py as a user meets them (issue 10, training/decoding).

Each test runs run.py in a subprocess on a tiny algorithmic problem and checks the exit
status, the one `error: ...` line, and that nothing was left behind or lost.
"""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.utils import checkpoint_guard
from tests.conftest import REPO_ROOT
from tests.conftest import error_line as _error_line
from tests.run_py import PROBLEM, TINY
from tests.run_py import env as _env
from tests.run_py import run as _run
from tests.run_py import steps as _steps
from tests.run_py import train_flags as _train_flags


def _listed_steps(output_dir) -> list[int]:
    """The steps of the checkpoints the run's `checkpoint` state file lists, ascending."""
    state = tf.train.get_checkpoint_state(str(output_dir))
    return sorted(checkpoint_guard.step_of(p) for p in state.all_model_checkpoint_paths)


@pytest.fixture
def data_dir(tiny_run_data_dir):
    """The tiny problem's data (made once per test session, conftest.py)."""
    return tiny_run_data_dir


@pytest.fixture
def trained(tiny_run_trained):
    """A run with checkpoints at steps 2 and 4, made once per session (copy it before
    changing it)."""
    return tiny_run_trained


def _copy(trained, tmp_path):
    return shutil.copytree(trained, tmp_path / "run")


@pytest.mark.parametrize("flags, message", [
    (["--train_steps=-5"], "error: --train_steps=-5: must be >= 1"),
    (["--worker_startup_timeout_secs=0"], "error: --worker_startup_timeout_secs=0: must be >= 1"),
    (["--hparams=hidden_size=-32"], "error: hparams hidden_size=-32: must be > 0"),
    (["--hparams=batch_size=0"], "error: hparams batch_size=0: must be > 0"),
    (["--hparams=relu_dropout=1.0"], "error: hparams relu_dropout=1.0: must be in [0, 1)"),
    (["--hparams=clip_grad_norm=-1.0"], "error: hparams clip_grad_norm=-1.0: must be >= 0"),
    (["--hparams=sampling_keep_top_p=1.5"],
     "error: hparams sampling_keep_top_p=1.5: must be in (0, 1]"),
    (["--hparams=weight_dtype=bfloat16"],
     ("error: hparams.weight_dtype='bfloat16' is not supported by t2t_lite (t2t: bfloat16 "
      "weights (TPU)); leave it at 'float32'")),
    (["--hparams=activation_dtype=float64"],
     ("error: hparams activation_dtype='float64' is not supported; use float32, float16 or "
      "bfloat16")),
    (["--hparams=hidden_sise=32"], "hidden_sise"),
    (["--hparams_set=transformer_tinyy"], "transformer_tinyy"),
    (["--problem=algorithmic_nope"], "algorithmic_nope"),
])
def test_bad_values_fail_in_one_line_and_write_nothing(data_dir, tmp_path, flags, message):
    output_dir = tmp_path / "out"
    result = _run(*_train_flags(data_dir, output_dir, "--train_steps=2"), *flags, cwd=tmp_path)
    assert message in _error_line(result)
    assert not output_dir.exists()  # no hparams.json, flags.json, events or empty dir


@pytest.mark.slow
def test_missing_data_dir_and_output_dir_file(tmp_path):
    (tmp_path / "afile").write_text("x")
    result = _run(*_train_flags(tmp_path / "absent", tmp_path / "out"), cwd=tmp_path)
    assert "--data_dir=" in _error_line(result) and "--mode=datagen" in result.stderr
    assert not (tmp_path / "out").exists()
    result = _run(*_train_flags(tmp_path, tmp_path / "afile"), cwd=tmp_path)
    assert "is a file, not a directory" in _error_line(result)
    result = _run("--mode=train", f"--problem={PROBLEM}", "--hparams_set=transformer_tiny",
                  f"--output_dir={tmp_path / 'out'}", cwd=tmp_path)
    assert _error_line(result) == "error: --data_dir is required for " \
                                  "--mode=train/eval/train_and_eval"


@pytest.mark.slow
def test_diverged_training_stops_and_keeps_only_finite_checkpoints(data_dir, trained, tmp_path):
    output_dir = _copy(trained, tmp_path)
    result = _run(*_train_flags(data_dir, output_dir, "--train_steps=40",
                                "--keep_checkpoint_max=2",
                                f"--hparams={TINY},learning_rate_constant=1e30"), cwd=tmp_path)
    line = _error_line(result)
    assert line.startswith("error: training diverged: the ")
    assert " at step " in line and "last good checkpoint" in line
    steps = _steps(output_dir)
    assert steps and steps[0] >= 2 and len(steps) <= 2 and steps[-1] < 40
    for step in steps:
        reader = tf.train.load_checkpoint(str(output_dir / f"ckpt-{step}"))
        for name in reader.get_variable_to_shape_map():
            value = reader.get_tensor(name)
            if np.issubdtype(np.asarray(value).dtype, np.floating):
                assert np.isfinite(value).all(), (step, name)


@pytest.mark.slow
def test_second_run_refuses_then_stale_lock_of_killed_run_is_taken_over(data_dir, tmp_path):
    output_dir = tmp_path / "run"
    first = subprocess.Popen(
        [sys.executable, str(REPO_ROOT / "run.py"),
         *_train_flags(data_dir, output_dir, "--train_steps=100000")],
        cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 240
        while not _steps(output_dir) and time.time() < deadline and first.poll() is None:
            time.sleep(0.5)
        assert _steps(output_dir), "the first run saved no checkpoint"
        second = _run(*_train_flags(data_dir, output_dir, "--train_steps=100000"), cwd=tmp_path)
        line = _error_line(second)
        assert f"in use by another run (pid {first.pid} on host " in line
        assert first.poll() is None  # the first run goes on
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert (output_dir / "run.lock").exists()
    (output_dir / "ckpt-999_temp").mkdir()  # as a save killed midway leaves it
    # The run resumes from the newest readable checkpoint on disk, listed in the `checkpoint`
    # state file or not (a kill between writing ckpt-N's files and listing it).
    resume_at = checkpoint_guard.step_of(checkpoint_guard.newest_good_checkpoint(str(output_dir)))
    assert resume_at == max(s for s in _steps(output_dir)
                            if checkpoint_guard.damage(str(output_dir / f"ckpt-{s}")) is None)
    third = _run(*_train_flags(data_dir, output_dir, f"--train_steps={resume_at + 2}"),
                 cwd=tmp_path)
    assert third.returncode == 0, third.stderr[-3000:]
    assert "Taking over the stale lock" in third.stderr
    assert f"global step {resume_at}" in third.stderr  # resumed
    assert not (output_dir / "ckpt-999_temp").exists()
    assert not (output_dir / "run.lock").exists()  # released at exit
    assert _listed_steps(output_dir)[-1] == resume_at + 2


@pytest.mark.slow
def test_a_killed_trainer_still_a_zombie_does_not_hold_its_run(data_dir, trained, tmp_path):
    """SIGKILL, then the same command at once: the killed trainer is not reaped (this test
    holds its Popen without waiting, as a PID 1 that does not reap would), yet its lock is
    stale."""
    output_dir = _copy(trained, tmp_path)
    first = subprocess.Popen(
        [sys.executable, str(REPO_ROOT / "run.py"),
         *_train_flags(data_dir, output_dir, "--train_steps=100000")],
        cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 240
        while (max(_steps(output_dir)) <= 4 and time.time() < deadline
               and first.poll() is None):
            time.sleep(0.5)
        assert max(_steps(output_dir)) > 4, "the first run saved no checkpoint"
        lock = json.loads((output_dir / "run.lock").read_text())
        assert lock["pid"] == first.pid
        first.send_signal(signal.SIGKILL)
        with open(f"/proc/{first.pid}/stat", "rb"):  # not reaped: the pid still exists
            pass
        resume_at = checkpoint_guard.step_of(
            checkpoint_guard.newest_good_checkpoint(str(output_dir)))
        again = _run(*_train_flags(data_dir, output_dir, f"--train_steps={resume_at + 2}"),
                     cwd=tmp_path)
        with open(f"/proc/{first.pid}/stat", "rb") as f:  # still a zombie throughout
            assert f.read().rpartition(b")")[2].split()[0] == b"Z"
    finally:
        first.kill()
        first.wait()
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Taking over the stale lock" in again.stderr
    assert f"pid {first.pid} on host" in again.stderr
    assert _listed_steps(output_dir)[-1] == resume_at + 2
    assert not (output_dir / "run.lock").exists()


@pytest.mark.slow
def test_damaged_newest_checkpoint_falls_back_in_decode_and_train(data_dir, trained, tmp_path):
    output_dir = _copy(trained, tmp_path)
    with open(output_dir / "ckpt-4.data-00000-of-00001", "r+b") as f:
        f.truncate(100)
    inputs = tmp_path / "in.txt"
    inputs.write_text("0 1 1\n1 0\n")  # the binary problem's symbols
    decode = ["--mode=decode", f"--output_dir={output_dir}", f"--decode_from_file={inputs}",
              f"--decode_to_file={tmp_path / 'out.txt'}"]
    result = _run(*decode, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ckpt-4 damaged" in result.stderr and "falling back to" in result.stderr
    assert len((tmp_path / "out.txt").read_text().splitlines()) == 2

    result = _run(*_train_flags(data_dir, output_dir, "--train_steps=4"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "falling back to" in result.stderr and "global step 2" in result.stderr
    assert _steps(output_dir)[-1] == 4
    assert checkpoint_guard.damage(str(output_dir / "ckpt-4")) is None  # saved anew

    for step in _steps(output_dir):
        with open(output_dir / f"ckpt-{step}.data-00000-of-00001", "r+b") as f:
            f.truncate(100)
    line = _error_line(_run(*decode, cwd=tmp_path))
    assert line.startswith(f"error: no readable checkpoint in {output_dir}: ")
    line = _error_line(_run("--mode=average", f"--output_dir={output_dir}", "--n=2",
                            cwd=tmp_path))
    assert line.startswith(f"error: checkpoint {output_dir}/ckpt-") and "damaged" in line
    assert not (output_dir / "avg").exists()


@pytest.mark.slow
# A garbled file is repaired the same way (tests/test_checkpoint_guard.py).
@pytest.mark.parametrize("state", ["deleted", "emptied"])
def test_lost_state_file_resumes_from_the_newest_checkpoint_on_disk(data_dir, trained, tmp_path,
                                                                     state):
    output_dir = _copy(trained, tmp_path)
    kept = (output_dir / "ckpt-4.data-00000-of-00001").read_bytes()
    state_file = output_dir / "checkpoint"
    state_file.unlink()
    if state == "emptied":
        state_file.write_bytes(b"")
    result = _run(*_train_flags(data_dir, output_dir, "--train_steps=6",
                                "--keep_checkpoint_max=2"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "global step 4" in result.stderr  # resumed, not started from scratch
    lines = [line for line in result.stderr.splitlines() if f"{state_file} " in line]
    assert len(lines) == 1, result.stderr[-3000:]
    assert "rewritten from the checkpoints on disk (ckpt-2, ckpt-4)" in lines[0]
    # The state file lists the old checkpoints too, so rotation removed the oldest, ckpt-2.
    assert _steps(output_dir) == _listed_steps(output_dir) == [4, 6]
    assert (output_dir / "ckpt-4.data-00000-of-00001").read_bytes() == kept


@pytest.mark.slow
def test_decode_and_warm_start_with_other_hparams_fail_naming_variables(data_dir, trained,
                                                                        tmp_path):
    inputs = tmp_path / "in.txt"
    inputs.write_text("0 1 1\n")
    out = tmp_path / "out.txt"
    two_layers = TINY.replace("num_hidden_layers=1", "num_hidden_layers=2")
    # The run's own --hparams are checked before the checkpoint (test_run_record.py); a
    # checkpoint named alone is checked variable by variable.
    line = _error_line(_run("--mode=decode", f"--checkpoint_path={trained}/ckpt-4",
                            f"--problem={PROBLEM}", f"--data_dir={data_dir}",
                            "--hparams_set=transformer_tiny", f"--hparams={two_layers}",
                            f"--decode_from_file={inputs}", f"--decode_to_file={out}",
                            cwd=tmp_path))
    assert line.startswith(f"error: --checkpoint_path={trained}/ckpt-4 does not match the "
                           "model: model variables missing from the checkpoint: "
                           "transformer/body/decoder/layer_1/")
    assert "hparams.json has num_hidden_layers=1, the model num_hidden_layers=2" in line
    assert not out.exists()
    line = _error_line(_run(*_train_flags(data_dir, tmp_path / "warm", "--train_steps=2",
                                          f"--warm_start_from={trained}"),
                            f"--hparams={two_layers}", cwd=tmp_path))
    assert line.startswith(f"error: --warm_start_from={trained}/ckpt-4: ")
    assert "missing from the checkpoint: transformer/body/decoder/layer_1/" in line
    assert not glob.glob(str(tmp_path / "warm" / "ckpt-*"))


def test_export_reads_the_then_newest_checkpoint_when_its_own_vanishes(data_dir, trained,
                                                                      tmp_path, monkeypatch):
    from t2t_lite.decoding import runs

    output_dir = _copy(trained, tmp_path)
    load_model, read = runs.load_model, []

    def rotated_load_model(model_name, hparams, problem_hparams, path):
        read.append(os.path.basename(path))
        if len(read) == 1:  # a training run beside the export rotates it away
            for name in glob.glob(path + ".*"):
                os.remove(name)
        return load_model(model_name, hparams, problem_hparams, path)

    monkeypatch.setattr(runs, "load_model", rotated_load_model)
    run = runs.open_run(runs.resolve("export", str(output_dir), data_dir=str(data_dir)))
    path, model = runs.restore_model(run)
    assert read == ["ckpt-4", "ckpt-2"] and path == str(output_dir / "ckpt-2")
    reader = tf.train.load_checkpoint(path)
    for name, variable in checkpoint_guard.match_model(model, reader)["plan"].values():
        np.testing.assert_array_equal(variable.numpy(), reader.get_tensor(name))


@pytest.mark.slow
def test_decode_input_and_output_problems_are_one_line(trained, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"2 3 4\n3 \xff 2\n")
    out = tmp_path / "out.txt"
    common = ["--mode=decode", f"--output_dir={trained}"]
    line = _error_line(_run(*common, f"--decode_from_file={bad}", f"--decode_to_file={out}",
                            cwd=tmp_path))
    assert line == f"error: {bad}:2: invalid UTF-8 (byte 0xff at column 3); decode input " \
                   "must be UTF-8 text"
    assert not out.exists()
    good = tmp_path / "good.txt"
    good.write_text("2 3\n")
    (tmp_path / "afile").write_text("x")
    line = _error_line(_run(*common, f"--decode_from_file={good}",
                            f"--decode_to_file={tmp_path / 'afile' / 'out.txt'}", cwd=tmp_path))
    assert "--decode_to_file=" in line and "is a file, not a directory" in line
    line = _error_line(_run(*common, f"--decode_from_file={good}", "--decode_hparams=beam_size=0",
                            cwd=tmp_path))
    assert line == "error: --decode_hparams: beam_size=0 must be >= 1"
    # "2" is no symbol of the binary problem: its id 4 is outside the 4-entry vocabulary.
    line = _error_line(_run(*common, f"--decode_from_file={good}", f"--decode_to_file={out}",
                            cwd=tmp_path))
    assert line.startswith(f"error: --decode_from_file={good} holds token id 4 but the "
                           "model's vocabulary has only 4 entries (ids 0..3)")
    assert not out.exists()


def test_token_id_outside_the_vocabulary_is_one_sentence():
    from t2t_lite.errors import UserError
    from t2t_lite.utils import validation

    message = (r"^the data holds token id 134 but the model's vocabulary has only 3 entries "
               r"\(ids 0\.\.2\)")
    explain = validation.explain_ids_out_of_vocab
    with pytest.raises(UserError, match=message), explain("the data", "regenerate it"):
        tf.gather(tf.zeros([3, 2]), tf.constant([[134]]))
    # Other errors pass through.
    with pytest.raises(tf.errors.InvalidArgumentError), explain("the data", "regenerate it"):
        tf.reshape(tf.zeros([3]), [2])


def test_run_lock_refuses_a_live_holder_and_takes_over_a_dead_one(tmp_path):
    import json
    import socket

    from t2t_lite.errors import UserError
    from t2t_lite.utils import run_lock

    lock_file = tmp_path / run_lock.LOCK_NAME
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    lock_file.write_text(json.dumps({"host": socket.gethostname(), "pid": int(dead.stdout),
                                     "start_time": 0}))
    lock = run_lock.acquire(str(tmp_path))  # stale: taken over
    assert json.loads(lock_file.read_text())["pid"] == os.getpid()
    lock.release()
    assert not lock_file.exists()
    lock_file.write_text(json.dumps({"host": socket.gethostname(), "pid": 1,
                                     "start_time": 0}))  # a live process
    with pytest.raises(UserError, match=r"is in use by another run \(pid 1 on host "):
        run_lock.acquire(str(tmp_path))
    lock_file.write_text(json.dumps({"host": "elsewhere", "pid": int(dead.stdout)}))
    with pytest.raises(UserError, match="on host elsewhere"):  # never taken from another host
        run_lock.refuse_if_held(str(tmp_path))


@pytest.mark.slow
def test_decode_outputs_never_inputs_and_bounds_are_one_line_before_any_work(trained, tmp_path):
    inputs = tmp_path / "in.txt"
    inputs.write_text("0 1 1\n1 0\n")
    common = ["--mode=decode", f"--output_dir={trained}"]
    line = _error_line(_run(*common, f"--decode_from_file={inputs}",
                            "--decode_to_file=./in.txt", cwd=tmp_path))
    assert line == (f"error: --decode_to_file=./in.txt is the same file as --decode_from_file="
                    f"{inputs}: the output would replace the input; choose another "
                    "--decode_to_file")
    assert inputs.read_bytes() == b"0 1 1\n1 0\n"
    # Refused before the model is built (an attempt runs for minutes into an OOM): the
    # subprocess's timeout is the guard.
    line = _error_line(_run(*common, f"--decode_from_file={inputs}",
                            "--decode_hparams=beam_size=10000", cwd=tmp_path, timeout=120))
    assert re.fullmatch(r"error: --decode_hparams: decoding beam_size=10000 x 2 lines per batch "
                        r"x vocab 4 x 104 steps needs about [\d.]+ GiB, more than the "
                        r"[\d.]+ GiB of memory available; lower beam_size \(or batch_size, "
                        r"extra_length\)", line)
    line = _error_line(_run(*common, f"--decode_from_file={inputs}",
                            "--decode_hparams=batch_size=-3", cwd=tmp_path))
    assert line == "error: --decode_hparams: batch_size=-3 must be >= 0"
    words = tmp_path / "words.txt"
    words.write_text("0 1\n1 one 0\n")
    line = _error_line(_run(*common, f"--decode_from_file={words}",
                            f"--decode_to_file={tmp_path / 'out.txt'}", cwd=tmp_path))
    assert line == (f"error: --decode_from_file={words}:2: 'one' is not a token id; this "
                    "problem's inputs are integer ids separated by spaces")
    assert not (tmp_path / "out.txt").exists()
    assert sorted(os.listdir(tmp_path)) == ["in.txt", "words.txt"]  # no temporary file left


def test_same_file_sees_through_links_and_relative_paths(tmp_path, monkeypatch):
    from t2t_lite.errors import UserError
    from t2t_lite.utils import validation

    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.txt").write_text("x")
    os.link(tmp_path / "a.txt", tmp_path / "hard.txt")
    os.symlink(tmp_path / "a.txt", tmp_path / "soft.txt")
    for other in ("a.txt", "./a.txt", str(tmp_path / "hard.txt"), "soft.txt"):
        assert validation.same_file(str(tmp_path / "a.txt"), other)
    assert not validation.same_file("a.txt", "b.txt")
    assert validation.same_file("new/../b.txt", "b.txt")  # neither exists yet
    (tmp_path / "run").mkdir()
    with pytest.raises(UserError, match=r"^--avg_output_dir=\./run is the same file as "
                                        r"--output_dir=run: the output would replace"):
        validation.check_output_not_input("avg_output_dir", "./run",
                                          {"checkpoint_path": None, "output_dir": "run"})
    validation.check_output_not_input("decode_to_file", "out.txt", {"decode_from_file": "a.txt"})


def test_decode_memory_estimate_grows_with_the_beam_squared_and_is_refused_over_memory():
    from t2t_lite.errors import UserError
    from t2t_lite.utils import validation

    def estimate(beam, slot_storage=True):
        return validation.decode_memory_estimate(beam, 32, 32768, 200, 512, 8, 6,
                                                 slot_storage=slot_storage)

    assert estimate(4) < 2 * 2**30  # transformer_base, beam 4, batch 32: fits any machine
    # The K x K slot attention: B x K x K x T x (3 H + 1) floats.
    assert estimate(400) - estimate(400, slot_storage=False) == 4 * 32 * 400 * 400 * 200 * 25
    validation.check_decode_memory(estimate(4), "beam 4", available=8 * 2**30)
    with pytest.raises(UserError, match=r"needs about 2\.0 GiB, more than the 1\.0 GiB of "
                                        r"memory available; lower beam_size"):
        validation.check_decode_memory(2 * 2**30, "beam 4", available=2**30)
    assert validation.available_memory() > 0


@pytest.mark.parametrize("overrides, message", [
    ("batch_size=-3", "batch_size=-3 must be >= 0"),
    ("shards=0", "shards=0 must be >= 1"),
    ("shards=2,shard_id=2", "shard_id=2 must be < shards=2"),
    ("num_samples=0", "num_samples=0 decodes nothing"),
    ("num_samples=-2", "num_samples=-2 must be >= -1"),
])
def test_decode_hparams_out_of_range_are_refused_by_name(overrides, message):
    from t2t_lite.decoding import decode_hparams

    with pytest.raises(ValueError, match=f"^--decode_hparams: {re.escape(message)}"):
        decode_hparams.decode_hparams(overrides)
