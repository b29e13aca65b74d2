"""Checkpoint averaging (`--mode=average`): means, newest step, object-graph restore."""
import os
import types

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.bin import t2t_avg_all
from t2t_lite.errors import UserError
from t2t_lite.training import avg_checkpoints


def _make_objects():
    """A small Keras model with an Adam optimizer whose slots exist, plus a step counter."""
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dense(1)])
    optimizer = keras.optimizers.Adam(learning_rate=0.1)
    optimizer.build(model.trainable_variables)
    step = tf.Variable(0, dtype=tf.int64)
    return model, optimizer, step


def _set_all(model, optimizer, value: float):
    """Sets every model weight and optimizer slot to a distinct value derived from `value`."""
    for i, var in enumerate(model.weights):
        var.assign(np.full(var.shape, value + i, np.float32))
    for i, var in enumerate(optimizer.variables):
        if "float" in str(var.dtype):
            var.assign(np.full(var.shape, 10 * value + i, np.float32))


@pytest.fixture()
def run_dir(tmp_path):
    """A run directory with three CheckpointManager checkpoints at steps 100, 200, 300 whose
    float values are 1, 2, 4 (+ per-variable offsets), plus hparams.json."""
    model, optimizer, step = _make_objects()
    ckpt = tf.train.Checkpoint(step=step, model=model, optimizer=optimizer)
    manager = tf.train.CheckpointManager(ckpt, str(tmp_path), max_to_keep=5,
                                         checkpoint_name="ckpt")
    for value, s in ((1.0, 100), (2.0, 200), (4.0, 300)):
        _set_all(model, optimizer, value)
        step.assign(s)
        optimizer.iterations.assign(s)
        manager.save(checkpoint_number=s)
    (tmp_path / "hparams.json").write_text('{"hidden_size": 2}')
    return tmp_path


def test_last_checkpoints_oldest_first(run_dir):
    paths = avg_checkpoints.last_checkpoints(str(run_dir), 2)
    assert [os.path.basename(p) for p in paths] == ["ckpt-200", "ckpt-300"]
    assert len(avg_checkpoints.last_checkpoints(str(run_dir), 10)) == 3


def test_average_of_two_restores_into_fresh_objects(run_dir, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("x") / "avg")
    paths = avg_checkpoints.last_checkpoints(str(run_dir), 2)
    prefix = avg_checkpoints.average_checkpoints(paths, out)
    assert prefix == os.path.join(out, "ckpt-300")
    assert tf.train.latest_checkpoint(out) == prefix
    assert os.path.exists(os.path.join(out, "hparams.json"))

    model, optimizer, step = _make_objects()
    _set_all(model, optimizer, -50.0)
    ckpt = tf.train.Checkpoint(step=step, model=model, optimizer=optimizer)
    ckpt.restore(tf.train.latest_checkpoint(out)).assert_consumed()

    # Mean of the checkpoints with values 2 and 4: 3 (+ offsets); slots 10*3 (+ offsets).
    for i, var in enumerate(model.weights):
        np.testing.assert_array_equal(np.array(var), np.full(var.shape, 3.0 + i, np.float32))
    float_slots = [v for v in optimizer.variables if "float" in str(v.dtype)]
    assert float_slots, "Adam should have float slot variables"
    for i, var in enumerate(optimizer.variables):
        if "float" in str(var.dtype):
            np.testing.assert_array_equal(np.array(var), np.full(var.shape, 30.0 + i, np.float32))
    # Integer state comes from the newest checkpoint, not the mean (250).
    assert int(step.numpy()) == 300
    assert int(optimizer.iterations.numpy()) == 300


def test_mean_of_all_keys_keeps_dtypes(run_dir, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("y") / "avg")
    paths = avg_checkpoints.last_checkpoints(str(run_dir), 3)
    avg_checkpoints.average_checkpoints(paths, out)
    reader = tf.train.load_checkpoint(out)
    readers = [tf.train.load_checkpoint(p) for p in paths]
    dtypes = readers[0].get_variable_to_dtype_map()
    assert reader.get_variable_to_dtype_map() == dtypes
    for key, dtype in dtypes.items():
        if dtype.is_floating:
            values = [r.get_tensor(key).astype(np.float64) for r in readers]
            expected = (sum(values) / 3).astype(np.float32)
        else:  # step, iterations, save_counter, the object graph: the newest's.
            expected = readers[-1].get_tensor(key)
        assert np.array_equal(reader.get_tensor(key), expected), key


def test_float64_accumulation(tmp_path):
    # 2^24 + 1 + 1 in float32 loses both ones (mean 5592405.5); in float64 the mean is
    # 16777218 / 3 = 5592406 exactly after rounding to float32.
    var = tf.Variable([0.0, 0.5], dtype=tf.float32)
    half = tf.Variable(np.float16(0.0))
    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(v=var, h=half), str(tmp_path / "run"), max_to_keep=3,
        checkpoint_name="ckpt")
    for value in (2.0**24, 1.0, 1.0):
        var.assign([value, 0.5])
        half.assign(np.float16(value if value < 100 else 3.0))
        manager.save()
    prefix = avg_checkpoints.average_checkpoints(manager.checkpoints, str(tmp_path / "avg"))
    restored = tf.Variable([9.0, 9.0], dtype=tf.float32)
    restored_half = tf.Variable(np.float16(9.0))
    tf.train.Checkpoint(v=restored, h=restored_half).restore(prefix).assert_consumed()
    np.testing.assert_array_equal(restored.numpy(), np.float32([5592406.0, 0.5]))
    assert restored_half.dtype == tf.float16
    assert restored_half.numpy() == np.float16(5.0 / 3.0)


def test_replaces_previous_average_and_refuses_bad_dirs(run_dir):
    out = os.path.join(str(run_dir), "avg")
    avg_checkpoints.average_checkpoints(avg_checkpoints.last_checkpoints(str(run_dir), 3), out)
    avg_checkpoints.average_checkpoints(avg_checkpoints.last_checkpoints(str(run_dir), 1), out)
    reader = tf.train.load_checkpoint(out)
    newest = tf.train.load_checkpoint(os.path.join(str(run_dir), "ckpt-300"))
    for key, dtype in newest.get_variable_to_dtype_map().items():
        if dtype.is_floating:
            np.testing.assert_array_equal(reader.get_tensor(key), newest.get_tensor(key))
    assert not [e for e in os.listdir(str(run_dir)) if ".tmp-" in e or ".old-" in e]

    with pytest.raises(ValueError, match="contains the checkpoints"):
        avg_checkpoints.average_checkpoints(
            avg_checkpoints.last_checkpoints(str(run_dir), 2), str(run_dir))
    other = run_dir / "not_avg"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="notes.txt"):
        avg_checkpoints.average_checkpoints(
            avg_checkpoints.last_checkpoints(str(run_dir), 2), str(other))
    assert (other / "notes.txt").read_text() == "keep me"


def test_errors_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match="No checkpoints"):
        avg_checkpoints.last_checkpoints(str(tmp_path), 2)
    with pytest.raises(ValueError, match="--n=0"):
        avg_checkpoints.last_checkpoints(str(tmp_path), 0)


def test_main_default_output_dir(run_dir, capsys):
    flags = types.SimpleNamespace(output_dir=str(run_dir), n=2, avg_output_dir=None)
    t2t_avg_all.main(flags)
    printed = capsys.readouterr().out
    assert "ckpt-200, ckpt-300" in printed
    assert tf.train.latest_checkpoint(os.path.join(str(run_dir), "avg")).endswith("ckpt-300")


def test_main_refuses_the_run_directory_as_output_before_any_work(run_dir):
    before = sorted(os.listdir(str(run_dir)))
    flags = types.SimpleNamespace(output_dir=str(run_dir), n=2,
                                  avg_output_dir=str(run_dir) + "/.")
    with pytest.raises(UserError, match=r"^--avg_output_dir=.* is the same file as "
                                        r"--output_dir=.*: the output would replace the input"):
        t2t_avg_all.main(flags)
    assert sorted(os.listdir(str(run_dir))) == before


@pytest.mark.slow
def test_run_py_average_mode(run_dir, tmp_path_factory):
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("cli") / "averaged"
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run(
        [sys.executable, "run.py", "--mode=average", f"--output_dir={run_dir}", "--n=2",
         f"--avg_output_dir={out}"], check=False, cwd=repo, capture_output=True,
        text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Averaged 2 checkpoints: ckpt-200, ckpt-300" in result.stdout
    reader = tf.train.load_checkpoint(str(out))
    first = tf.train.load_checkpoint(os.path.join(str(run_dir), "ckpt-200"))
    second = tf.train.load_checkpoint(os.path.join(str(run_dir), "ckpt-300"))
    for key, dtype in first.get_variable_to_dtype_map().items():
        if dtype.is_floating:
            expected = (first.get_tensor(key).astype(np.float64)
                        + second.get_tensor(key).astype(np.float64)) / 2
            np.testing.assert_array_equal(reader.get_tensor(key), expected.astype(np.float32))


def test_average_to_a_filesystem_without_directory_renames(run_dir):
    # TensorFlow's in-memory ram:// filesystem, like gs://, cannot rename a directory with
    # its files: the average is written file by file, the `checkpoint` state last.
    out = f"ram://avg_test_{os.getpid()}/avg"
    paths = avg_checkpoints.last_checkpoints(str(run_dir), 3)
    first = avg_checkpoints.average_checkpoints(paths, out)
    assert first == f"{out}/ckpt-300"
    newest = tf.train.load_checkpoint(paths[-1])
    assert tf.train.latest_checkpoint(out) == first
    # (ram:// reports every path prefix as a directory, so tf.train.load_checkpoint would
    # look for a directory; the reader takes the prefix as it is.)
    averaged = tf.compat.v1.train.NewCheckpointReader(first)
    expected = avg_checkpoints.average_tensors(paths)
    for key in newest.get_variable_to_dtype_map():
        np.testing.assert_array_equal(averaged.get_tensor(key), expected[key])
    assert sorted(tf.io.gfile.listdir(out)) == [
        "checkpoint", "ckpt-300.data-00000-of-00001", "ckpt-300.index", "hparams.json"]
    # A second average replaces the first; an earlier average's other files are removed.
    avg_checkpoints.average_checkpoints(paths[:2], out)
    assert tf.train.latest_checkpoint(out) == f"{out}/ckpt-200"
    assert sorted(tf.io.gfile.listdir(out)) == [
        "checkpoint", "ckpt-200.data-00000-of-00001", "ckpt-200.index", "hparams.json"]
    with pytest.raises(ValueError, match="contains the checkpoints"):
        avg_checkpoints.average_checkpoints([f"{out}/ckpt-200"], f"ram://avg_test_{os.getpid()}")


def test_average_beside_rotation_cleans_killed_averages_and_follows_umask(
        run_dir, tmp_path_factory, monkeypatch, capsys):
    import shutil
    import socket
    import stat
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("beside") / "avg"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    host = socket.gethostname()
    killed = [out.parent / f".avg.tmp-{host}-{int(dead.stdout)}-0badc0de",
              out.parent / f".avg.old.tmp-{host}-{int(dead.stdout)}-0badc0de"]
    live = out.parent / f".avg.tmp-{host}-{os.getpid()}-0badc0de"  # a concurrent average
    for folder in (*killed, live):
        folder.mkdir()
    os.remove(run_dir / "checkpoint")  # found on disk all the same
    average_tensors, read = avg_checkpoints.average_tensors, []

    def rotating_average_tensors(paths):
        read.append([os.path.basename(p) for p in paths])
        if len(read) == 1:  # training saves ckpt-400 and rotates the oldest chosen away
            for name in os.listdir(run_dir):
                if name.startswith("ckpt-300."):
                    shutil.copy(run_dir / name, run_dir / name.replace("300", "400"))
                if name.startswith("ckpt-200."):
                    os.remove(run_dir / name)
        return average_tensors(paths)

    monkeypatch.setattr(avg_checkpoints, "average_tensors", rotating_average_tensors)
    umask = os.umask(0o027)
    try:
        t2t_avg_all.main(types.SimpleNamespace(output_dir=str(run_dir), n=2,
                                               avg_output_dir=str(out)))
    finally:
        os.umask(umask)
    assert read == [["ckpt-200", "ckpt-300"], ["ckpt-300", "ckpt-400"]]
    assert "Averaged 2 checkpoints: ckpt-300, ckpt-400" in capsys.readouterr().out
    assert tf.train.latest_checkpoint(str(out)).endswith("ckpt-400")
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o750  # not mkdtemp's 0700
    assert not any(folder.exists() for folder in killed) and live.exists()


def test_damaged_newest_falls_back_to_the_newest_readable(run_dir, caplog):
    with open(run_dir / "ckpt-300.data-00000-of-00001", "r+b") as f:
        f.truncate(100)
    with caplog.at_level("WARNING"):
        paths, values = avg_checkpoints.average_newest(str(run_dir), 2)
    assert [os.path.basename(p) for p in paths] == ["ckpt-100", "ckpt-200"]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and warnings[0].startswith("Checkpoint(s) ckpt-300 damaged")
    first = tf.train.load_checkpoint(str(run_dir / "ckpt-100"))
    second = tf.train.load_checkpoint(str(run_dir / "ckpt-200"))
    floats = [k for k, d in first.get_variable_to_dtype_map().items()
              if d.is_floating and k != "_CHECKPOINTABLE_OBJECT_GRAPH"]
    assert floats
    for key in floats:
        np.testing.assert_array_equal(
            values[key], (first.get_tensor(key) + second.get_tensor(key)) / 2)


def test_main_averages_the_checkpoint_path_run_not_the_output_dir(run_dir, tmp_path_factory,
                                                                  capsys):
    other = tmp_path_factory.mktemp("other")
    out = tmp_path_factory.mktemp("out") / "avg"
    flags = types.SimpleNamespace(output_dir=str(other), n=2, avg_output_dir=str(out),
                                  checkpoint_path=str(run_dir))
    t2t_avg_all.main(flags)
    assert "Averaged 2 checkpoints: ckpt-200, ckpt-300" in capsys.readouterr().out
    # A checkpoint prefix: the --n newest up to its step.
    flags.checkpoint_path = str(run_dir / "ckpt-200")
    t2t_avg_all.main(flags)
    assert "Averaged 2 checkpoints: ckpt-100, ckpt-200" in capsys.readouterr().out
    assert tf.train.latest_checkpoint(str(out)).endswith("ckpt-200")
    flags.checkpoint_path = f"{run_dir},{run_dir}"
    with pytest.raises(UserError, match="not an ensemble's"):
        t2t_avg_all.main(flags)


def test_main_refuses_an_output_holding_the_run(run_dir):
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    flags = types.SimpleNamespace(output_dir=str(run_dir), n=2,
                                  avg_output_dir=str(run_dir.parent), checkpoint_path=None)
    with pytest.raises(UserError, match=r"^--avg_output_dir=\S+ is or contains "
                                        r"--output_dir=\S+: writing it would replace that"):
        t2t_avg_all.main(flags)
    flags.avg_output_dir = str(run_dir / "hparams.json")
    with pytest.raises(UserError, match=r"hparams.json, a file of the run --output_dir="):
        t2t_avg_all.main(flags)
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before
