"""Checkpoint discovery on disk, the state file's repair, strict matching, stale temp folders."""
from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from t2t_lite import file_io
from t2t_lite.errors import UserError
from t2t_lite.utils import checkpoint_guard
from tests.trainer_utils import model_fn, tiny_hparams


def _save_steps(directory, steps, max_to_keep=5):
    """CheckpointManager checkpoints `ckpt-<step>` of one small variable; returns it."""
    variable = tf.Variable([0.0, 0.0])
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=variable), str(directory),
                                         max_to_keep=max_to_keep, checkpoint_name="ckpt")
    for step in steps:
        variable.assign([step, step])
        manager.save(checkpoint_number=step)
    return variable


def _names(paths):
    return [os.path.basename(p) for p in paths]


def test_discovery_orders_steps_numerically_and_skips_incomplete(tmp_path):
    _save_steps(tmp_path, [9, 10, 11, 12])
    os.remove(tmp_path / "ckpt-11.index")  # a save killed before its index
    os.remove(tmp_path / "ckpt-12.data-00000-of-00001")  # a copy that lost the data shard
    # An index whose data is in two shards, one of them missing.
    shutil.copy(tmp_path / "ckpt-10.index", tmp_path / "ckpt-13.index")
    shutil.copy(tmp_path / "ckpt-10.data-00000-of-00001", tmp_path / "ckpt-13.data-00000-of-00002")
    expected = [str(tmp_path / "ckpt-10"), str(tmp_path / "ckpt-9")]  # 10 after 9, not "1" < "9"
    assert checkpoint_guard.checkpoints_newest_first(str(tmp_path)) == expected
    assert not checkpoint_guard.is_complete(str(tmp_path / "ckpt-13"))
    os.remove(tmp_path / "checkpoint")  # the state file is only a hint
    assert checkpoint_guard.checkpoints_newest_first(str(tmp_path)) == expected
    assert checkpoint_guard.step_of(expected[0]) == 10


STATE_DAMAGE = {
    "missing": (None, "is missing"),
    "empty": ("", "is empty"),
    "garbage": ("model_checkpoint_path: \x00\x01 not a proto {", "does not parse"),
}


@pytest.mark.parametrize("damage", sorted(STATE_DAMAGE))
def test_damaged_state_file_warns_once_and_repair_keeps_rotation(tmp_path, caplog, damage):
    _save_steps(tmp_path, [10, 20, 30])
    content, reason = STATE_DAMAGE[damage]
    state_file = tmp_path / "checkpoint"
    os.remove(state_file)
    if content is not None:
        state_file.write_text(content)
    assert checkpoint_guard.read_state_file(str(tmp_path))[1].startswith(reason)
    with caplog.at_level(logging.WARNING):
        newest = checkpoint_guard.newest_good_checkpoint(str(tmp_path))
    assert newest == str(tmp_path / "ckpt-30")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and reason in warnings[0] and "ckpt-30" in warnings[0]

    assert checkpoint_guard.repair_state_file(str(tmp_path))
    state = tf.train.get_checkpoint_state(str(tmp_path))
    assert _names(state.all_model_checkpoint_paths) == ["ckpt-10", "ckpt-20", "ckpt-30"]
    assert not checkpoint_guard.repair_state_file(str(tmp_path))  # now consistent
    # A manager reading the repaired file saves after ckpt-30 and rotates the oldest away.
    data_20 = (tmp_path / "ckpt-20.data-00000-of-00001").read_bytes()
    _save_steps(tmp_path, [40], max_to_keep=3)
    assert _names(checkpoint_guard.checkpoints_newest_first(str(tmp_path))) == [
        "ckpt-40", "ckpt-30", "ckpt-20"]
    assert (tmp_path / "ckpt-20.data-00000-of-00001").read_bytes() == data_20


def test_state_file_naming_an_older_checkpoint_gives_the_newest_on_disk(tmp_path, caplog):
    _save_steps(tmp_path, [1, 2])
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "ckpt-1"\n'
                                         'all_model_checkpoint_paths: "ckpt-1"\n')
    with caplog.at_level(logging.WARNING):
        assert checkpoint_guard.newest_good_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-2")
    assert "names ckpt-1, but ckpt-2 on disk is newer" in caplog.text


def _model_checkpoint(directory, **hparams_overrides):
    """A built tiny Transformer, saved as `directory/ckpt-1` beside its hparams.json."""
    hparams = tiny_hparams(**hparams_overrides)
    model = model_fn(hparams)()
    ones = tf.ones([1, 3], tf.int32)
    model({"inputs": ones, "targets": ones, "target_space_id": tf.constant(0)})
    os.makedirs(directory, exist_ok=True)
    path = tf.train.Checkpoint(model=model).write(os.path.join(str(directory), "ckpt-1"))
    with open(os.path.join(str(directory), "hparams.json"), "w") as f:
        json.dump(hparams.values(), f)
    return model, hparams, path


def test_check_model_matches_names_unused_missing_and_reshaped_variables(tmp_path):
    _, _, two_layers = _model_checkpoint(tmp_path / "two", num_hidden_layers=2)
    one, one_hparams, one_layer = _model_checkpoint(tmp_path / "one")
    checkpoint_guard.check_model_matches(one, one_layer, one_hparams)  # its own: fine
    with pytest.raises(UserError) as info:
        checkpoint_guard.check_model_matches(one, two_layers, one_hparams)
    text = str(info.value)
    assert text.startswith(f"--checkpoint_path={two_layers} does not match the model: "
                           "checkpoint variables not used: model/body/decoder/layer_1/")
    assert "(+" in text and "\n" not in text
    assert "hparams.json has num_hidden_layers=2, the model num_hidden_layers=1" in text
    wider, wider_hparams, _ = _model_checkpoint(tmp_path / "wide", filter_size=128)
    with pytest.raises(UserError, match=r"of another shape: .*conv1/kernel: checkpoint "
                                        r"\[32, 64\] vs model \[32, 128\]"):
        checkpoint_guard.check_model_matches(wider, one_layer, wider_hparams)


def test_stale_temp_folders_go_and_live_ones_stay(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    host = socket.gethostname()
    names = {
        "dead": f".export.tmp-{host}-{int(dead.stdout)}-0badc0de",
        "live": f".export.tmp-{host}-{os.getpid()}-0badc0de",
        "other_host_new": ".export.tmp-elsewhere-1-0badc0de",
        "other_host_old": ".export.tmp-elsewhere-2-0badc0de",
        "unrelated": ".export.tmpfoo",
    }
    for name in names.values():
        (tmp_path / name).mkdir()
        (tmp_path / name / "saved_model.pb").write_text("partial")
    old = time.time() - checkpoint_guard.STALE_TEMP_SECS - 60
    os.utime(tmp_path / names["other_host_old"], (old, old))
    removed = checkpoint_guard.remove_stale_temp_dirs(str(tmp_path), "export")
    assert sorted(_names(removed)) == sorted([names["dead"], names["other_host_old"]])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [names["live"], names["other_host_new"], names["unrelated"]])
    assert checkpoint_guard.temp_dir_name("export").startswith(
        f".export.tmp-{host}-{os.getpid()}-")


def test_retry_if_vanished_reads_the_then_newest(tmp_path, caplog):
    _save_steps(tmp_path, [1, 2])
    calls = []

    def read(path):
        calls.append(os.path.basename(path))
        if len(calls) == 1:  # a training run rotates the chosen checkpoint away
            for name in os.listdir(tmp_path):
                if name.startswith("ckpt-2."):
                    os.remove(tmp_path / name)
        return tf.train.load_checkpoint(path).get_tensor("v/.ATTRIBUTES/VARIABLE_VALUE")

    with caplog.at_level(logging.WARNING):
        path, value = checkpoint_guard.retry_if_vanished(
            lambda: checkpoint_guard.checkpoints_newest_first(str(tmp_path))[0], read)
    assert calls == ["ckpt-2", "ckpt-1"] and path == str(tmp_path / "ckpt-1")
    assert list(value) == [1.0, 1.0] and "ckpt-2 vanished while it was read" in caplog.text

    def broken(_):
        calls.append("broken")
        raise ValueError("broken")

    # A checkpoint that is still there but fails is not read again.
    with pytest.raises(ValueError, match="broken"):
        checkpoint_guard.retry_if_vanished(lambda: path, broken)
    assert calls[2:] == ["broken"]


def test_trainer_resume_is_strict_and_warns_without_optimizer_state(tmp_path, caplog):
    from t2t_lite.training import trainer_lib
    from tests.trainer_utils import ReverseProblem

    def trainer(output_dir, **overrides):
        hparams = tiny_hparams(**overrides)
        return trainer_lib.Trainer(model_fn(hparams), hparams, ReverseProblem(), "",
                                   trainer_lib.RunConfig(output_dir=str(output_dir)))

    one = trainer(tmp_path / "run")
    one.global_step.assign(3)
    one._save(one._checkpoint_manager())
    with open(tmp_path / "run" / "hparams.json", "w") as f:
        json.dump(one.hparams.values(), f)
    two = trainer(tmp_path / "run", num_hidden_layers=2)
    mismatch = (r"ckpt-3 \(the newest checkpoint of --output_dir\) does not match the model: "
                r"model variables missing from the checkpoint: transformer/body/decoder/layer_1/")
    # create_trainer's check before anything is written refuses it as restore does.
    with pytest.raises(UserError, match=mismatch):
        two.check_resume()
    with pytest.raises(UserError, match=mismatch):
        two.restore(two._checkpoint_manager())
    assert two.step == 0  # nothing restored

    # A checkpoint of the model and step only (as import_t2t writes): resumed with a warning.
    tf.train.Checkpoint(step=one.global_step, model=one.model).write(
        str(tmp_path / "import" / "ckpt-3"))
    again = trainer(tmp_path / "import")
    with caplog.at_level(logging.WARNING):
        assert again.restore(again._checkpoint_manager()) == 3
    assert "holds no optimizer state" in caplog.text


def _copy_with_absolute_state(tmp_path, steps):
    """Run A (checkpoints `steps`, a TF1/t2t-style state file of absolute paths) and B, its
    `cp -a` copy; returns (A, B, A's files -> bytes)."""
    run_a, run_b = tmp_path / "A", tmp_path / "B"
    _save_steps(run_a, steps)
    names = [str(run_a / f"ckpt-{s}") for s in steps]
    (run_a / "checkpoint").write_text(
        f'model_checkpoint_path: "{names[-1]}"\n'
        + "".join(f'all_model_checkpoint_paths: "{n}"\n' for n in names))
    subprocess.run(["cp", "-a", str(run_a), str(run_b)], check=True)
    return run_a, run_b, {p.name: p.read_bytes() for p in run_a.iterdir()}


def test_state_file_paths_outside_the_run_are_ignored_and_never_rotated(tmp_path, caplog):
    run_a, run_b, a_files = _copy_with_absolute_state(tmp_path, [10, 20, 30])
    with caplog.at_level(logging.WARNING):
        assert checkpoint_guard.checkpoints_newest_first(str(run_b)) == [
            str(run_b / "ckpt-30"), str(run_b / "ckpt-20"), str(run_b / "ckpt-10")]
        assert checkpoint_guard.newest_good_checkpoint(str(run_b)) == str(run_b / "ckpt-30")
        assert checkpoint_guard.repair_state_file(str(run_b))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    outside = [w for w in warnings if "outside" in w]
    assert len(outside) == 1 and str(run_a / "ckpt-10") in outside[0], warnings
    state = tf.train.get_checkpoint_state(str(run_b))
    assert list(state.all_model_checkpoint_paths) == [
        str(run_b / "ckpt-10"), str(run_b / "ckpt-20"), str(run_b / "ckpt-30")]
    _save_steps(run_b, [40, 50], max_to_keep=2)  # B's rotation
    assert {p.name: p.read_bytes() for p in run_a.iterdir()} == a_files
    assert _names(checkpoint_guard.checkpoints_newest_first(str(run_b))) == ["ckpt-50", "ckpt-40"]


def test_state_file_naming_only_checkpoints_outside_is_removed_by_repair(tmp_path, caplog):
    run_a, run_b, a_files = _copy_with_absolute_state(tmp_path, [10, 20])
    for path in run_b.glob("ckpt-*"):
        path.unlink()  # B holds none of its own
    with caplog.at_level(logging.WARNING):
        assert checkpoint_guard.newest_good_checkpoint(str(run_b)) is None
        assert checkpoint_guard.repair_state_file(str(run_b))
    assert not (run_b / "checkpoint").exists()
    _save_steps(run_b, [1, 2, 3], max_to_keep=1)
    assert {p.name: p.read_bytes() for p in run_a.iterdir()} == a_files


def test_inside_compares_resolved_paths_and_schemes():
    assert file_io.is_inside("/r/B", "/r/B/ckpt-2")
    assert file_io.is_inside("/r/B/", "/r/B/sub/ckpt-2")
    assert not file_io.is_inside("/r/B", "/r/B/../A/ckpt-2")
    assert not file_io.is_inside("/r/B", "/r/BB/ckpt-2")
    assert not file_io.is_inside("/r/B", "/r/B")
    assert file_io.is_inside("gs://b/run", "gs://b/run/ckpt-2")
    assert not file_io.is_inside("gs://b/run", "/b/run/ckpt-2")


def test_own_absolute_paths_read_through_a_relative_dir_are_the_runs(tmp_path, monkeypatch,
                                                                     caplog):
    _copy_with_absolute_state(tmp_path, [10, 20])
    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.WARNING):
        assert _names(checkpoint_guard.checkpoints_newest_first("A")) == ["ckpt-20", "ckpt-10"]
    assert not [r for r in caplog.records if "outside" in r.getMessage()]
