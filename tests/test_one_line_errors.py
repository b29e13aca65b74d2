"""The last cases of issue 40's table, each one line with nothing half-written: a full disk
during a checkpoint save or datagen, a read-only output_dir or one below a file, a
`run.lock` holding `null`, Ctrl-C or SIGTERM in datagen, BLEU of empty files, a decode line
too long for memory, a changed data shard on resume, a missing or wrong-length
`--decode_reference`, bad `--decode_hparams` of train_eval_and_decode, and every library
error class.

Most tests call the library or a tool's function in-process with the failure simulated at
library level (an `OSError(ENOSPC)` or TensorFlow's `ResourceExhaustedError` raised from the
write); run.py subprocesses only where the user-facing path is the point (BLEU, datagen on a
real full disk or stopped by a real SIGTERM), and those before TensorFlow does any work.
"""
from __future__ import annotations

import errno
import hashlib
import importlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import types

import pytest

from t2t_lite import errors
from t2t_lite.errors import RunStopped, UserError, report_user_errors
from t2t_lite.utils import run_lock
from tests.conftest import REPO_ROOT, error_line, small_disk
from tests.run_py import PROBLEM, TINY, run

ENOSPC_TEXT = "No space left on device"


def _tree(path: pathlib.Path) -> dict[str, str]:
    """{relative path: sha256} of every file below `path` (what is on disk)."""
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def _flags(**values):
    """A namespace of every t2t_lite flag at its default, with `values` set (as absl's
    FLAGS would hold them)."""
    from t2t_lite import flags as t2t_flags

    names = {f.name: f.default for f in t2t_flags.FLAGS.get_flags_for_module("t2t_lite.flags")}
    names.update(values)
    return types.SimpleNamespace(**names)


def _train_flags(data_dir, output_dir, **values):
    """The flags of a tiny training run of PROBLEM (tests/run_py.py's) as a namespace."""
    settings = {"mode": "train", "problem": PROBLEM, "hparams_set": "transformer_tiny",
                "hparams": TINY, "data_dir": str(data_dir), "output_dir": str(output_dir),
                "train_steps": 6, "save_checkpoints_steps": 2, "log_step_count_steps": 2,
                "random_seed": 1}
    return _flags(**{**settings, **values})


# --- every error class is one line -------------------------------------------------------------
def _error_classes() -> list[tuple[str, str]]:
    """(module, class) of every `class ...Error(` defined in the package's source."""
    found = []
    for path in sorted((REPO_ROOT / "t2t_lite").rglob("*.py")):
        module = ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts)
        for name in re.findall(r"^class (\w+Error)\(", path.read_text(), re.MULTILINE):
            found.append((module, name))
    return found


def test_every_library_error_class_is_reported_in_one_line(capsys):
    classes = _error_classes()
    names = {name for _, name in classes}
    assert {"VocabFileError", "TreeError", "LearningRateError", "T2TCheckpointError",
            "CorpusError", "HParamsError", "RegistryError", "DataError"} <= names
    for module, name in classes:
        cls = getattr(importlib.import_module(module), name)
        assert issubclass(cls, errors.user_error_types()), f"{module}.{name}"
        with pytest.raises(SystemExit) as exit_info, report_user_errors():
            raise cls("vocab.txt:3: duplicate\nsubtoken 'a'")
        assert exit_info.value.code == 1
        assert capsys.readouterr().err == "error: vocab.txt:3: duplicate subtoken 'a'\n", name


# --- a full disk, a read-only path ----------------------------------------------------------------
def test_storage_problems_are_recognised_with_their_path():
    import tensorflow as tf

    assert errors.storage_problem(OSError(errno.ENOSPC, ENOSPC_TEXT, "/d/x")) == (
        "no space left on device", "/d/x")
    assert errors.storage_problem(OSError(errno.EROFS, "Read-only file system", "/ro/f")) == (
        "read-only file system", "/ro/f")
    saved = tf.errors.ResourceExhaustedError(
        None, None, "{{function_node __wrapped__SaveV2}} /run/ckpt-6_temp/part-00000-of-00001"
                    f".data-00000-of-00001.tempstate78774; {ENOSPC_TEXT} [Op:SaveV2]")
    assert errors.storage_problem(saved) == (
        "no space left on device", "/run/ckpt-6_temp/part-00000-of-00001.data-00000-of-00001")
    below = tf.errors.FailedPreconditionError(None, None, "/tmp/afile is not a directory")
    assert errors.storage_problem(below) == (
        "a path component is a file, not a directory", "/tmp/afile")
    # TensorFlow's own texts for a relative --output_dir=run on a read-only file system.
    made = tf.errors.PermissionDeniedError(None, None, "run/eval2; Read-only file system")
    assert errors.storage_problem(made) == ("read-only file system", "run/eval2")
    events = tf.errors.PermissionDeniedError(None, None, (
        "{{function_node __wrapped__CreateSummaryFileWriter_device_/job:localhost/replica:0/"
        "task:0/device:CPU:0}} run/eval/events.out.tfevents.17.vm.21.0.v2; Read-only file "
        "system\n\tCreating writable file run/eval/events.out.tfevents.17.vm.21.0.v2\n\tCould "
        "not initialize events writer. [Op:CreateSummaryFileWriter] name: "))
    assert errors.storage_problem(events) == (
        "read-only file system", "run/eval/events.out.tfevents.17.vm.21.0.v2")
    remote = tf.errors.PermissionDeniedError(None, None, "Error: gs://b/run/x; Permission denied")
    assert errors.storage_problem(remote) == ("permission denied", "gs://b/run/x")
    # No path before the reason: none named (never a word of the message).
    bare = tf.errors.PermissionDeniedError(None, None, "Could not open file: Permission denied")
    assert errors.storage_problem(bare) == ("permission denied", None)
    # Running out of memory is no storage problem; nor is any other OSError.
    assert errors.storage_problem(tf.errors.ResourceExhaustedError(None, None, "OOM")) is None
    assert errors.storage_problem(OSError(errno.ENOENT, "No such file", "/x")) is None
    assert errors.storage_problem(ValueError(ENOSPC_TEXT)) is None


def test_a_storage_problem_anywhere_is_one_line_and_ctrl_c_one_stopped_line(capsys):
    with pytest.raises(SystemExit) as exit_info, report_user_errors():
        raise OSError(errno.ENOSPC, ENOSPC_TEXT, "/data/vocab.txt.123.0a1b2c3d.incomplete")
    assert exit_info.value.code == 1
    err = capsys.readouterr().err  # file_io's temporary name: the file meant is named
    assert err.startswith("error: no space left on device: /data/vocab.txt; that file was "
                          "not written") and err.count("\n") == 1
    with pytest.raises(SystemExit) as exit_info, report_user_errors():
        raise KeyboardInterrupt
    assert exit_info.value.code == 130  # training's stop convention (distribution.py)
    err = capsys.readouterr().err
    assert err.startswith("stopped: SIGINT received: ") and err.count("\n") == 1
    with pytest.raises(OSError), report_user_errors():  # other errors pass through
        raise OSError(errno.ENOENT, "No such file", "/x")


def test_checkpoint_save_on_a_full_disk_keeps_the_last_checkpoint_and_removes_its_partial_files(
        tiny_run_trained, tmp_path):
    import tensorflow as tf

    from t2t_lite.training.trainer_lib import Trainer

    output_dir = shutil.copytree(tiny_run_trained, tmp_path / "run")
    before = _tree(output_dir)

    class FullDisk:
        """`CheckpointManager.save` on a full disk: partial shards in ckpt-6_temp, a partial
        ckpt-6.index, TensorFlow's temporary state file, then SaveV2's error."""

        def save(self, checkpoint_number):
            temp = output_dir / f"ckpt-{checkpoint_number}_temp"
            temp.mkdir()
            (temp / "part-00000-of-00001.data-00000-of-00001.tempstate1").write_bytes(b"x" * 99)
            (output_dir / f"ckpt-{checkpoint_number}.index").write_bytes(b"partial")
            (output_dir / "checkpoint.tmp0123abcd").write_text("partial")
            raise tf.errors.ResourceExhaustedError(
                None, None, f"{temp}/part-00000-of-00001.data-00000-of-00001.tempstate1; "
                            f"{ENOSPC_TEXT} [Op:SaveV2]")

    trainer = types.SimpleNamespace(step=6, chief=True,
                                    config=types.SimpleNamespace(output_dir=str(output_dir)))
    with pytest.raises(UserError) as raised:
        Trainer._save(trainer, FullDisk())
    assert str(raised.value) == (
        f"no space left on device: {output_dir}/ckpt-6_temp/part-00000-of-00001.data-00000-of-"
        "00001; checkpoint ckpt-4 kept; ckpt-6 not written (its partial files removed); make "
        f"room in --output_dir={output_dir} and run the same command to resume at step 4")
    assert _tree(output_dir) == before  # nothing half-written, nothing lost


def test_read_only_output_dir_and_output_dir_below_a_file_are_refused_before_anything(
        tiny_run_data_dir, tmp_path, monkeypatch):
    from t2t_lite.bin import t2t_trainer
    from t2t_lite.utils import validation

    (tmp_path / "afile").write_text("x")
    with pytest.raises(UserError, match=re.escape(
            f"--output_dir={tmp_path}/afile/run: {tmp_path}/afile is a file, not a directory")):
        t2t_trainer.main(_train_flags(tiny_run_data_dir, tmp_path / "afile" / "run"), "train")
    assert (tmp_path / "afile").read_text() == "x"

    def read_only(dir=None):
        raise OSError(errno.EROFS, "Read-only file system", dir)

    # Root writes through permission bits: the file system's refusal is simulated.
    monkeypatch.setattr(validation.tempfile, "TemporaryFile", read_only)
    output_dir = tmp_path / "ro"
    output_dir.mkdir()
    with pytest.raises(UserError, match=re.escape(
            f"--output_dir={output_dir}: cannot write in {output_dir} (Read-only file system)")):
        t2t_trainer.main(_train_flags(tiny_run_data_dir, output_dir), "train")
    assert not os.listdir(output_dir)


@pytest.mark.slow
def test_eval_of_a_read_only_run_names_the_file_not_written(tiny_run_trained, tmp_path):
    from tests.conftest import read_only_view

    shutil.copytree(tiny_run_trained, tmp_path / "source" / "run")
    with read_only_view(tmp_path / "source", tmp_path / "ro") as view:
        before = _tree(view)
        # A relative --output_dir: TensorFlow names the file as it was given.
        result = run("--mode=eval", "--output_dir=run", "--eval_steps=1", cwd=view)
        assert error_line(result) == (
            "error: read-only file system: run/eval; that file was not written, the files "
            "written before it are whole; make room (or choose a writable directory) and run "
            "the same command again")
        assert _tree(view) == before


def test_run_lock_holding_null_or_malformed_json_is_taken_over(tmp_path):
    from t2t_lite.utils import run_lock

    lock_file = tmp_path / run_lock.LOCK_NAME
    for content in ("null", "[1, 2]", "{not json"):
        lock_file.write_text(content)
        run_lock.refuse_if_held(str(tmp_path))  # no holder named: nothing to refuse
        lock = run_lock.acquire(str(tmp_path))
        assert json.loads(lock_file.read_text())["pid"] == os.getpid(), content
        lock.release()
        assert not lock_file.exists()


# --- datagen --------------------------------------------------------------------------------------
@pytest.fixture
def half_generated(tiny_run_data_dir, tmp_path):
    """A copy of the tiny problem's data whose train split lost its marker (a datagen to
    finish), and the problem."""
    from t2t_lite import registry

    # Without the readers' lock file that runs training on the shared data leave behind.
    data_dir = shutil.copytree(tiny_run_data_dir, tmp_path / "data",
                               ignore=shutil.ignore_patterns(run_lock.READERS_LOCK_NAME))
    problem = registry.problem(PROBLEM)
    (data_dir / f"{problem.dataset_filename()}.train.complete.json").unlink()
    return data_dir, problem


@pytest.mark.parametrize("stop", ["full disk", "ctrl-c"])
def test_datagen_stopped_midway_removes_the_partial_split_and_keeps_the_complete_one(
        half_generated, tmp_path, monkeypatch, stop):
    from t2t_lite.data_generators import datagen

    data_dir, problem = half_generated
    base = problem.dataset_filename()
    dev = {n: d for n, d in _tree(data_dir).items() if "-dev-" in n or ".dev." in n}

    def generate_data(data_dir_, tmp_dir, max_cases=None):
        partial = data_dir / f"{base}-train-00000-of-00001.incomplete"
        partial.write_bytes(b"x" * 100)
        if stop == "ctrl-c":
            raise KeyboardInterrupt
        raise OSError(errno.ENOSPC, ENOSPC_TEXT, str(partial))

    monkeypatch.setattr(problem, "generate_data", generate_data)
    expected = (f"{PROBLEM} in --data_dir={data_dir}: the complete dev split(s) kept, the "
                "partial train split(s) removed")
    with pytest.raises(RunStopped if stop == "ctrl-c" else UserError) as raised:
        datagen.generate_locked(problem, str(data_dir), str(tmp_path / "tmp"))
    if stop == "ctrl-c":
        assert (raised.value.exit_code, raised.value.label) == (130, "stopped")
        assert str(raised.value) == (f"SIGINT received: datagen stopped; {expected}; run the "
                                     "same command to finish")
    else:
        assert str(raised.value) == (
            f"no space left on device: {data_dir}/{base}-train-00000-of-00001.incomplete; "
            f"{expected}; make room (or choose a writable --data_dir) and run the same command "
            "to finish")
    assert _tree(data_dir) == dev  # no train file, no lock; dev unchanged


def test_datagen_stopped_by_sigterm_midway_is_one_line_and_leaves_no_partial_split(tmp_path):
    from t2t_lite.data_generators import data_marker
    from tests.run_py import env

    data_dir = tmp_path / "data"
    # A real SIGTERM, sent to itself by datagen after 10 examples of the first split.
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "run.py"), "--mode=datagen", f"--problem={PROBLEM}",
         f"--data_dir={data_dir}", f"--tmp_dir={tmp_path / 'tmp'}"], cwd=tmp_path,
        env={**env(), data_marker.KILL_AT_ENV: "generate:SIGTERM"}, capture_output=True,
        text=True, timeout=300, check=False)
    assert result.returncode == 143, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("stopped: ")]
    assert lines == [result.stderr.rstrip().splitlines()[-1]]
    # The shard being written is removed where it was being written (generator_utils).
    assert lines[0] == (f"stopped: SIGTERM received: datagen stopped; {PROBLEM} in "
                        f"--data_dir={data_dir}: no split complete; run the same command to "
                        "finish")
    assert not data_dir.exists() or _tree(data_dir) == {}


def test_datagen_on_a_real_full_disk_is_one_line(tmp_path):
    with small_disk(tmp_path / "disk", "40k") as mount:
        result = run("--mode=datagen", f"--problem={PROBLEM}", f"--data_dir={mount}",
                     f"--tmp_dir={tmp_path / 'tmp'}", cwd=tmp_path)
        assert error_line(result) == (
            f"error: no space left on device: {mount}/{PROBLEM}-train-00000-of-00001.incomplete;"
            f" {PROBLEM} in --data_dir={mount}: no split complete; make room (or choose a "
            "writable --data_dir) and run the same command to finish")
        assert os.listdir(mount) == []


# --- a damaged shard on resume ------------------------------------------------------------------
def _flip_bytes(path: pathlib.Path, offset: int = 5000) -> None:
    """Same size, other content: 8 bytes inverted (a record's payload)."""
    with open(path, "r+b") as f:
        f.seek(offset)
        data = f.read(8)
        f.seek(offset)
        f.write(bytes(b ^ 0xFF for b in data))


def test_a_same_size_damaged_shard_is_refused_before_the_resume_writes_anything(
        tiny_run_data_dir, tiny_run_trained, tmp_path):
    from t2t_lite.bin import t2t_trainer
    from t2t_lite.errors import DataError

    data_dir = shutil.copytree(tiny_run_data_dir, tmp_path / "data")  # keeps the times
    output_dir = shutil.copytree(tiny_run_trained, tmp_path / "run")
    shard = data_dir / f"{PROBLEM}-train-00000-of-00001"
    size = shard.stat().st_size
    _flip_bytes(shard)
    assert shard.stat().st_size == size
    before = _tree(output_dir)
    with pytest.raises(DataError) as raised:
        t2t_trainer.main(_train_flags(data_dir, output_dir), "train")
    assert str(raised.value) == (
        f"Damaged data: {shard} was changed since datagen wrote it (same size, other content: "
        "its sha256 differs from the marker's); datagen regenerates the train split: python "
        f"run.py --mode=datagen --problem={PROBLEM} --data_dir={data_dir}")
    assert _tree(output_dir) == before  # flags.json, hparams.json, run card, checkpoints


def test_a_damaged_record_is_named_for_markers_without_hashes(tiny_run_data_dir, tmp_path):
    from t2t_lite.data_generators import data_marker

    data_dir = shutil.copytree(tiny_run_data_dir, tmp_path / "data")
    shard = data_dir / f"{PROBLEM}-train-00000-of-00001"
    assert data_marker.find_damaged_shard([str(shard)]) is None
    _flip_bytes(shard)
    found = data_marker.find_damaged_shard([str(shard)])
    assert re.fullmatch(re.escape(str(shard)) + r": corrupted record at \d+", found), found


# --- decode --------------------------------------------------------------------------------------
def _decode_flags(output_dir, **values):
    """--mode=decode's flags as a namespace."""
    return _flags(mode="decode", output_dir=str(output_dir), **values)


def test_decode_reference_missing_or_of_another_length_is_refused_before_decoding(
        tiny_run_trained, tmp_path, monkeypatch):
    from t2t_lite.bin import t2t_decoder
    from t2t_lite.decoding import runs

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded before the reference was checked")

    monkeypatch.setattr(runs, "open_run", no_model)
    inputs = tmp_path / "in.txt"
    inputs.write_text("0 1\n1 0\n")
    out = tmp_path / "out.txt"
    with pytest.raises(UserError, match=re.escape(
            f"--decode_reference={tmp_path}/nope.txt: no such file")):
        t2t_decoder.main(_decode_flags(tiny_run_trained, decode_from_file=str(inputs),
                                       decode_to_file=str(out),
                                       decode_reference=str(tmp_path / "nope.txt")))
    reference = tmp_path / "ref.txt"
    reference.write_text("1 0\n")
    with pytest.raises(UserError) as raised:
        t2t_decoder.main(_decode_flags(tiny_run_trained, decode_from_file=str(inputs),
                                       decode_to_file=str(out),
                                       decode_hparams=f"decode_reference={reference}"))
    assert str(raised.value) == (
        f"--decode_reference={reference} has 1 lines but --decode_from_file={inputs} has 2 "
        "records to decode: give the reference of that input, one line per record")
    assert sorted(os.listdir(tmp_path)) == ["in.txt", "ref.txt"]


def test_report_bleu_with_another_line_count_is_an_error(tmp_path):
    from t2t_lite.training import dev_decode

    (tmp_path / "ref.txt").write_text("a b\n")
    (tmp_path / "hyp.txt").write_text("a b\nc\n")
    with pytest.raises(UserError, match=r"has 1 lines but .* has 2; .* \(the decodes are kept "
                                        r"in .*hyp\.txt\)$"):
        dev_decode.report_bleu(str(tmp_path / "ref.txt"), str(tmp_path / "hyp.txt"), None, "x-1")


def test_a_decode_line_too_long_for_memory_is_named_with_the_max_input_size_that_fits(
        tmp_path, monkeypatch):
    from t2t_lite.bin import t2t_decoder
    from t2t_lite.data_generators import text_encoder
    from t2t_lite.decoding import decode_hparams, text_batches
    from t2t_lite.hparams import HParams
    from t2t_lite.utils import validation

    gib = 2**30
    monkeypatch.setattr(validation, "available_memory", lambda: gib)
    inputs = tmp_path / "in.txt"
    inputs.write_text("0 1\n" + "1 0 " * 20000 + "\n1 1 0\n")  # line 2: 40,000 ids + EOS
    hparams = HParams(hidden_size=16, num_heads=2, num_hidden_layers=1)
    problem_hparams = types.SimpleNamespace(vocab_size={"targets": 4})
    encoders = {"inputs": text_encoder.TextEncoder(), "targets": text_encoder.TextEncoder()}

    def check(overrides=""):
        t2t_decoder._check_decode_memory(
            _decode_flags(None, decode_from_file=str(inputs)), hparams, problem_hparams,
            decode_hparams.decode_hparams(overrides), encoders)

    def estimate(length):  # 3 lines per batch, beam 4, extra_length 100
        return validation.decode_memory_estimate(4, 3, 4, length + 100, 16, 2, 1,
                                                 input_length=length)

    with pytest.raises(UserError) as raised:
        check()
    fits = 4096
    assert estimate(fits) <= gib < estimate(2 * fits)
    assert re.fullmatch(
        re.escape(f"--decode_from_file={inputs}:2: this input is 40001 ids long (with EOS); "
                  "decoding it (beam_size=4 x 3 lines per batch x vocab 4 x 40101 steps) needs "
                  "about ") + r"[\d.]+" + re.escape(
            f" GiB, more than the 1.0 GiB of memory available; cut inputs with "
            f"--decode_hparams=max_input_size={fits} (t2t's: keeps the first {fits - 1} ids), "
            "or split the line"), str(raised.value)), str(raised.value)
    check(f"max_input_size={fits}")  # cut as decoding cuts it: fits
    assert text_batches.longest_input(inputs.read_text().splitlines(), encoders["inputs"],
                                      fits) == (2, fits)
    # The input terms: the encoder's B x H x L x L attention dominates a long line.
    assert estimate(40001) - validation.decode_memory_estimate(4, 3, 4, 40101, 16, 2, 1) \
        >= 4 * 3 * 2 * 2 * 40001 ** 2


def test_train_eval_and_decode_refuses_bad_decode_hparams_before_training(
        tiny_run_data_dir, tmp_path):
    from t2t_lite.bin import t2t_trainer

    output_dir = tmp_path / "run"
    flags = _train_flags(tiny_run_data_dir, output_dir, mode=None,
                         schedule="train_eval_and_decode")
    with pytest.raises(UserError, match=r"^--decode_hparams: beam_size=0 must be >= 1$"):
        t2t_trainer.main(_train_flags(tiny_run_data_dir, output_dir, mode=None,
                                      schedule="train_eval_and_decode",
                                      decode_hparams="beam_size=0"), "train_and_eval")
    flags.decode_reference = str(tmp_path / "nope.txt")
    with pytest.raises(UserError, match=r"^--decode_reference=.*nope\.txt: no such file$"):
        t2t_trainer.main(flags, "train_and_eval")
    assert not output_dir.exists()


# --- BLEU -----------------------------------------------------------------------------------------
def test_bleu_of_empty_files_is_one_line(tmp_path):
    (tmp_path / "hyp.txt").write_text("")
    (tmp_path / "ref.txt").write_text("")
    line = error_line(run("--mode=bleu", "--translation=hyp.txt", "--reference=ref.txt",
                          cwd=tmp_path))
    assert line == "error: BLEU: ref.txt and hyp.txt hold no lines: nothing to score"
