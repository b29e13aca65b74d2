"""A run only touches its own folder: outputs never replace a run's or the data's files,
one process wins a stale lock, every text input reads the same with or without a BOM, `~`
means the same to every mode, and the run card goes through file_io."""
from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import subprocess
import sys

import pytest

from t2t_lite.errors import UserError
from t2t_lite.utils import run_lock, validation
from tests.conftest import REPO_ROOT


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


def _until_zombie(pid: int) -> None:
    """Returns once `pid` (a child killed and not waited for) is a zombie: SIGKILL is
    delivered asynchronously; the child stays a zombie until its Popen is waited for."""
    for _ in range(100000):
        with open(f"/proc/{pid}/stat", "rb") as f:
            if f.read().rpartition(b")")[2].split()[0] == b"Z":
                return
    raise AssertionError(f"pid {pid} never became a zombie")


def test_a_zombie_lock_holder_is_a_dead_holder(tmp_path):
    child = subprocess.Popen(["sleep", "60"])
    try:
        assert run_lock.pid_alive(child.pid)
        child.kill()
        _until_zombie(child.pid)  # killed, not reaped: kill(pid, 0) still succeeds
        os.kill(child.pid, 0)
        assert not run_lock.pid_alive(child.pid)
        (tmp_path / run_lock.LOCK_NAME).write_text(json.dumps(
            {"host": run_lock.socket.gethostname(), "pid": child.pid, "start_time": 1.0}))
        run_lock.refuse_if_held(str(tmp_path))  # no refusal
        lock = run_lock.acquire(str(tmp_path))
        assert json.loads((tmp_path / run_lock.LOCK_NAME).read_text())["pid"] == os.getpid()
        lock.release()
    finally:
        child.wait()
    assert run_lock.pid_alive(os.getpid())


def _gfile_text(path: str) -> str:
    import tensorflow as tf

    with tf.io.gfile.GFile(path) as f:
        return f.read()


def _gfile_write(path: str, text: str) -> None:
    import tensorflow as tf

    if tf.io.gfile.exists(path):  # ram:// appends to an existing file
        tf.io.gfile.remove(path)
    with tf.io.gfile.GFile(path, "w") as f:
        f.write(text)


def test_a_lock_on_a_path_with_a_scheme_is_never_taken_over(tmp_path):
    import socket
    import time

    import tensorflow as tf

    # TensorFlow's in-memory filesystem stands in for gs://: a scheme, no flock.
    directory = f"ram://{tmp_path}/run"
    tf.io.gfile.makedirs(directory)
    path = f"{directory}/{run_lock.LOCK_NAME}"
    dead = {"host": socket.gethostname(), "pid": _dead_pid(), "start_time": 1.0}
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(1.0))
    advice = ("and a lock on a path with a scheme is never taken over (no atomic create "
              "there: two runs could both take it); remove the lock file if that run is gone, "
              "then run the same command again")
    for content, named in (
            (json.dumps(dead), (f"names a run that no longer runs (pid {dead['pid']} on host "
                                f"{dead['host']}, started {started})")),
            ("null", "names no run (empty or not a JSON object)")):
        _gfile_write(path, content)
        with pytest.raises(UserError) as refused:
            run_lock.acquire(directory)
        assert str(refused.value) == f"the lock {path} {named}, {advice}"
        assert _gfile_text(path) == content  # left as it was
    tf.io.gfile.remove(path)
    lock = run_lock.acquire(directory)  # no lock: taken, and released
    assert json.loads(_gfile_text(path))["pid"] == os.getpid()
    with pytest.raises(UserError, match=rf"^{directory} is in use by another run \(pid "):
        _acquire_as_another_process(directory)
    lock.release()
    assert not tf.io.gfile.exists(path)


def _acquire_as_another_process(directory: str) -> None:
    """`RunLock.acquire` as a process of another pid would call it."""
    other = run_lock.RunLock(directory)
    other.holder = {**other.holder, "pid": other.holder["pid"] + 1}
    other.acquire()


def test_readers_of_a_data_dir_with_a_scheme_leave_notes_that_overwrite_respects(tmp_path):
    import socket

    import tensorflow as tf

    data_dir = f"ram://{tmp_path}/data"
    tf.io.gfile.makedirs(data_dir)
    assert run_lock.refuse_if_read(data_dir) is None  # never read: no note
    assert run_lock.hold_data_dir(data_dir) is None  # a training run reads it
    note = f"{data_dir}/{run_lock.READERS_LOCK_NAME}.{socket.gethostname()}.{os.getpid()}"
    assert json.loads(_gfile_text(note))["pid"] == os.getpid()
    with pytest.raises(UserError, match=rf"^--overwrite_data: a training run may read "
                                        rf"--data_dir={data_dir} \(pid {os.getpid()} on host "
                                        rf".*; its note {note}\); "):
        run_lock.refuse_if_read(data_dir)
    assert tf.io.gfile.exists(note)
    # Another host's note: its run cannot be checked from here.
    _gfile_write(note, json.dumps({"host": "elsewhere", "pid": os.getpid(), "start_time": 0}))
    with pytest.raises(UserError, match=r"\(pid \d+ on host elsewhere, "):
        run_lock.refuse_if_read(data_dir)
    # A killed run's note on this host: removed, the overwrite goes ahead.
    _gfile_write(note, json.dumps({"host": socket.gethostname(), "pid": _dead_pid(),
                                   "start_time": 0}))
    assert run_lock.refuse_if_read(data_dir) is None
    assert tf.io.gfile.listdir(data_dir) == []


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


# --- Outputs never replace what a run is made of ----------------------------------------------
@pytest.fixture()
def run_and_data(tmp_path):
    """A run folder and a data folder with the files datagen and training write."""
    run, data = tmp_path / "run", tmp_path / "data"
    run.mkdir()
    data.mkdir()
    for name in ("hparams.json", "flags.json", "checkpoint", "ckpt-2.index",
                 "ckpt-2.data-00000-of-00001", "run_card.md", "run.lock"):
        (run / name).write_text(name)
    for name in ("vocab.p.8192.subwords", "p-train-00000-of-00001", "p.train.complete.json"):
        (data / name).write_text(name)
    return run, data


@pytest.mark.parametrize("where, name", [
    ("run", "hparams.json"), ("run", "flags.json"), ("run", "ckpt-2.index"),
    ("run", "ckpt-9.index"), ("run", "run.lock"), ("run", "checkpoint"),
    ("data", "vocab.p.8192.subwords"), ("data", "p-train-00000-of-00001")])
def test_output_naming_a_run_or_data_file_is_refused(run_and_data, where, name):
    run, data = run_and_data
    folder = run if where == "run" else data
    flag = "--output_dir" if where == "run" else "--data_dir"
    with pytest.raises(UserError) as refused:
        validation.check_output_not_protected("decode_to_file", str(folder / name),
                                              validation.run_folders(str(run), None), str(data))
    line = str(refused.value)
    assert "\n" not in line and line.startswith(f"--decode_to_file={folder / name} is ")
    assert f"{flag}={folder}" in line and line.endswith("choose another --decode_to_file")


def test_outputs_beside_the_run_are_allowed_and_links_are_seen(run_and_data, tmp_path):
    run, data = run_and_data
    runs = validation.run_folders(str(run), None)
    for allowed in (run / "dev.decodes", run / "avg", run / "export", tmp_path / "out.txt"):
        validation.check_output_not_protected("decode_to_file", str(allowed), runs, str(data))
    os.link(data / "vocab.p.8192.subwords", tmp_path / "linked")
    with pytest.raises(UserError, match=r"is \S+/data/vocab.p.8192.subwords, a file of the data"):
        validation.check_output_not_protected("decode_to_file", str(tmp_path / "linked"), runs,
                                              str(data))
    for holder in (tmp_path, data):  # an export or average would replace the folder whole
        with pytest.raises(UserError, match=r"^--export_dir=\S+ is or contains --"):
            validation.check_output_not_protected("export_dir", str(holder), runs, str(data))
    # The checkpoint read (another run) is protected as the run's own files are.
    other = tmp_path / "other"
    other.mkdir()
    (other / "hparams.json").write_text("{}")
    with pytest.raises(UserError, match=r"--checkpoint_path=\S+/other/ckpt-4"):
        validation.check_output_not_protected(
            "decode_to_file", str(other / "hparams.json"),
            validation.run_folders(str(run), str(other / "ckpt-4")), str(data))


@pytest.mark.parametrize("export_dir", [None, "exported"])
def test_ctranslate2_decode_refuses_an_output_in_the_exported_model(run_and_data, tmp_path,
                                                                   export_dir):
    import types

    from t2t_lite import flags as t2t_flags
    from t2t_lite.bin import t2t_decoder

    run, _ = run_and_data
    model_dir = tmp_path / export_dir if export_dir else run / "ctranslate2"
    model_dir.mkdir()
    for name in ("model.bin", "config.json", "shared_vocabulary.json", "t2t_lite.json"):
        (model_dir / name).write_text(name)
    (tmp_path / "in.txt").write_text("a b\n")
    before = {p.name: p.read_bytes() for p in model_dir.iterdir()}
    label = f"--export_dir={model_dir}" if export_dir else (
        f"{model_dir} (--export_dir's default)")
    values = {f.name: f.default for f in t2t_flags.FLAGS.get_flags_for_module("t2t_lite.flags")}
    for name in ("model.bin", "shared_vocabulary.json"):
        values.update(decode_engine="ctranslate2", output_dir=str(run),
                      export_dir=str(model_dir) if export_dir else None,
                      decode_from_file=str(tmp_path / "in.txt"),
                      decode_to_file=str(model_dir / name))
        with pytest.raises(UserError) as refused:
            t2t_decoder.decode_ctranslate2(types.SimpleNamespace(**values))
        assert str(refused.value) == (
            f"--decode_to_file={model_dir / name} is {model_dir / name}, a file of the exported "
            f"model {label}: writing it would break it; choose another --decode_to_file")
    values["decode_to_file"] = str(model_dir)
    with pytest.raises(UserError, match=rf"^--decode_to_file={model_dir} is or contains "):
        t2t_decoder.decode_ctranslate2(types.SimpleNamespace(**values))
    assert {p.name: p.read_bytes() for p in model_dir.iterdir()} == before


# --- `~` and BOMs -------------------------------------------------------------------------------
def test_every_path_flag_expands_home(monkeypatch, tmp_path):
    import types

    from t2t_lite import flags

    monkeypatch.setenv("HOME", str(tmp_path))
    values = types.SimpleNamespace(**{name: f"~/{name}" for name in flags.PATH_FLAGS})
    values.checkpoint_path = "~/a, ~/b"
    values.data_dir = "gs://bucket/~x"
    flags.expand_user_paths(values)
    for name in flags.PATH_FLAGS:
        if name not in ("checkpoint_path", "data_dir"):
            assert getattr(values, name) == f"{tmp_path}/{name}"
    assert values.checkpoint_path == f"{tmp_path}/a,{tmp_path}/b"
    assert values.data_dir == "gs://bucket/~x"


def test_a_bom_is_dropped_from_every_text_input(tmp_path):
    from t2t_lite.data_generators import text_problems
    from t2t_lite.decoding import input_files, score_file
    from t2t_lite.evaluation import bleu_hook

    text = "the cat sat on the mat\nein Haus am See\n"
    plain, marked = tmp_path / "plain.txt", tmp_path / "bom.txt"
    plain.write_text(text, encoding="utf-8")
    marked.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    assert bleu_hook.bleu_wrapper(str(plain), str(marked)) == pytest.approx(1.0)
    assert bleu_hook.bleu_report(str(plain), str(marked))[1:] == [
        "BLEU_uncased = 100.00", "BLEU_cased = 100.00"]
    assert bleu_hook.read_lines(str(marked)) == bleu_hook.read_lines(str(plain))
    assert input_files.read_inputs(str(marked)) == ["the cat sat on the mat", "ein Haus am See"]
    assert list(text_problems.txt_line_iterator(str(marked))) == [
        "the cat sat on the mat", "ein Haus am See"]
    scores = tmp_path / "scores.txt"
    scores.write_bytes(b"\xef\xbb\xbfa b\tc d\n")
    assert score_file.read_score_file(str(scores)) == [("a b", "c d")]
    # Only a leading mark goes: one inside the text is the text's.
    assert input_files.read_inputs(str(plain)) == input_files.read_inputs(str(marked))
    inner = tmp_path / "inner.txt"
    inner.write_text("a\n\ufeffb\n", encoding="utf-8")
    assert input_files.read_inputs(str(inner)) == ["a", "\ufeffb"]


# --- run.py: one check per user-facing case (the session's tiny run, copied) -------------------
def _files(folder) -> dict:
    """name -> bytes of every file in `folder` (not below it)."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.slow
def test_run_py_copied_run_never_rotates_the_original(tiny_run_data_dir, tiny_run_trained,
                                                     tmp_path):
    from tests.run_py import run, steps, train_flags

    run_a, run_b = tmp_path / "A", tmp_path / "B"
    subprocess.run(["cp", "-a", str(tiny_run_trained), str(run_a)], check=True)
    names = [str(run_a / "ckpt-2"), str(run_a / "ckpt-4")]  # t2t's absolute paths
    (run_a / "checkpoint").write_text(
        f'model_checkpoint_path: "{names[-1]}"\n'
        + "".join(f'all_model_checkpoint_paths: "{n}"\n' for n in names))
    subprocess.run(["cp", "-a", str(run_a), str(run_b)], check=True)
    before = _files(run_a)
    result = run(*train_flags(tiny_run_data_dir, run_b, "--train_steps=6",
                              "--keep_checkpoint_max=2"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    warnings = [line for line in result.stderr.splitlines() if line.startswith("W")]
    outside = [line for line in warnings if "outside" in line]
    assert len(outside) == 1 and "ignored, never restored from or rotated" in outside[0], (
        warnings)
    assert "global step 4" in result.stderr  # resumed from B's own copy
    assert _files(run_a) == before
    assert steps(run_b) == [4, 6]  # B rotated its own ckpt-2 away
    assert str(run_a) not in (run_b / "checkpoint").read_text()


@pytest.mark.slow
def test_run_py_decode_refuses_to_overwrite_the_run_and_reads_bom_and_home(
        tiny_run_trained, tmp_path):
    from tests.conftest import error_line
    from tests.run_py import env

    run_dir = tmp_path / "home" / "trained"
    shutil.copytree(tiny_run_trained, run_dir)
    before = _files(run_dir)
    inputs = tmp_path / "in.txt"
    inputs.write_bytes("\ufeff0 1 1 0\n0 1 1 0\n".encode("utf-8"))

    def decode(output: str):
        return subprocess.run(
            [sys.executable, str(REPO_ROOT / "run.py"), "--mode=decode",
             "--output_dir=~/trained", f"--decode_from_file={inputs}",
             f"--decode_to_file={output}"],
            cwd=tmp_path, env=dict(env(), HOME=str(tmp_path / "home")), capture_output=True,
            text=True, timeout=300, check=False)

    line = error_line(decode("~/trained/hparams.json"))
    assert line == (f"error: --decode_to_file={run_dir}/hparams.json is {run_dir}/hparams.json, "
                    f"a file of the run --output_dir={run_dir}: writing it would break it; "
                    "choose another --decode_to_file")
    assert _files(run_dir) == before
    # With the BOM, line 1's first id read "\ufeff0", refused as no integer id.
    result = decode(str(tmp_path / "out.txt"))
    assert result.returncode == 0, result.stderr[-3000:]
    first, second = (tmp_path / "out.txt").read_text().split("\n")[:2]
    assert first == second


def test_run_py_bleu_of_a_bom_hypothesis_is_100(tmp_path):
    from tests.run_py import run

    text = "the cat sat on the mat\nein Haus am See\n"
    (tmp_path / "ref.txt").write_text(text, encoding="utf-8")
    (tmp_path / "hyp.txt").write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    result = run("--mode=bleu", "--translation=hyp.txt", "--reference=ref.txt", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[0].startswith("BLEU|")
    assert " = 100.00 100.0/100.0/100.0/100.0 " in result.stdout.splitlines()[0]
    assert result.stdout.splitlines()[1:] == ["BLEU_uncased = 100.00", "BLEU_cased = 100.00"]


@pytest.mark.slow
def test_run_py_average_of_another_run_falls_back_past_a_damaged_checkpoint(
        tiny_run_trained, tmp_path):
    from tests.run_py import run

    other = tmp_path / "other"
    shutil.copytree(tiny_run_trained, other)
    with open(other / "ckpt-4.data-00000-of-00001", "r+b") as f:
        f.truncate(100)
    mine = tmp_path / "mine"
    mine.mkdir()
    result = run("--mode=average", f"--output_dir={mine}", f"--checkpoint_path={other}",
                 "--n=2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    warnings = [line for line in result.stderr.splitlines() if "damaged" in line]
    assert len(warnings) == 1 and "ckpt-4 damaged" in warnings[0], result.stderr[-3000:]
    assert _short_of_n_warnings(result, "--n=2", other) == ["ckpt-2"]
    assert "Averaged 1 checkpoints: ckpt-2" in result.stdout
    assert (mine / "avg" / "ckpt-2.index").exists()


def _short_of_n_warnings(result, flag: str, where) -> list[str]:
    """The checkpoints named by the one warning that fewer than asked for were averaged."""
    lines = [line for line in result.stderr.splitlines() if " readable checkpoint(s) in " in line]
    assert len(lines) == 1, result.stderr[-3000:]
    head = f"{flag}: only "
    assert head in lines[0] and f" readable checkpoint(s) in {where}, averaging " in lines[0]
    return lines[0].split(", averaging ", 1)[1].split(" (an average")[0].split(", ")


@pytest.mark.slow
def test_run_py_average_warns_when_fewer_than_n_checkpoints_read(tiny_run_trained, tmp_path):
    from tests.run_py import run

    run_dir = tmp_path / "run"
    shutil.copytree(tiny_run_trained, run_dir)
    for path in run_dir.glob("ckpt-4.*"):  # removed by hand: not damaged, gone
        path.unlink()
    result = run("--mode=average", f"--output_dir={run_dir}", "--n=2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "damaged" not in result.stderr
    assert _short_of_n_warnings(result, "--n=2", run_dir) == ["ckpt-2"]
    assert "Averaged 1 checkpoints: ckpt-2" in result.stdout
    result = run("--mode=average", f"--output_dir={run_dir}", "--n=1",
                 f"--avg_output_dir={tmp_path / 'avg1'}", cwd=tmp_path)
    assert result.returncode == 0 and "readable checkpoint(s)" not in result.stderr


def _best_folder(run_dir) -> None:
    """A keep-best folder in `run_dir` as `--keep_best_checkpoints=2` leaves it: ckpt-4 the
    best by loss, then ckpt-2."""
    best = run_dir / "best"
    best.mkdir()
    for path in run_dir.glob("ckpt-*"):
        shutil.copy(path, best / path.name)
    for name in ("hparams.json", "flags.json", "run_inputs.json"):
        shutil.copy(run_dir / name, best / name)
    (best / "best_checkpoints.json").write_text(json.dumps(
        {"metric": "loss", "minimize": True, "checkpoints": {"2": 1.5, "4": 1.0}}))


@pytest.mark.slow
@pytest.mark.parametrize("harm", ["truncated", "data deleted", "none whole", "all deleted"])
def test_run_py_average_best_copes_with_a_damaged_or_deleted_best(tiny_run_trained, tmp_path,
                                                                  harm):
    from tests.conftest import error_line
    from tests.run_py import run

    run_dir = tmp_path / "run"
    shutil.copytree(tiny_run_trained, run_dir)
    _best_folder(run_dir)
    best = run_dir / "best"
    if harm == "truncated":
        with open(best / "ckpt-4.data-00000-of-00001", "r+b") as f:
            f.truncate(100)
    else:
        (best / "ckpt-4.data-00000-of-00001").unlink()
    if harm in ("none whole", "all deleted"):
        for path in best.glob("ckpt-2.*"):
            path.unlink()
    if harm == "all deleted":
        (best / "ckpt-4.index").unlink()
    result = run("--mode=average", f"--output_dir={run_dir}", "--average_best=2",
                 cwd=tmp_path)
    if harm == "none whole":
        assert error_line(result) == (f"error: --average_best=2: no checkpoint of {best} is "
                                      "whole (files of ckpt-4 are missing); restore them "
                                      "from a backup")
    if harm == "all deleted":
        assert error_line(result) == (f"error: --average_best=2: none of the checkpoints that "
                                      f"{best / 'best_checkpoints.json'} lists is in {best}; "
                                      "average the run's own with --n instead")
    if harm in ("none whole", "all deleted"):
        assert not (run_dir / "avg").exists()
        return
    assert result.returncode == 0, result.stderr[-3000:]
    damaged = [line for line in result.stderr.splitlines() if "damaged" in line]
    assert len(damaged) == (harm == "truncated"), result.stderr[-3000:]
    assert _short_of_n_warnings(result, "--average_best=2", best) == ["ckpt-2"]
    assert "Averaged 1 checkpoints: ckpt-2" in result.stdout
    assert (run_dir / "avg" / "ckpt-2.index").exists()
