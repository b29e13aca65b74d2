"""Path flags given relative to the current directory are read there, never joined twice.

tf.train.get_checkpoint_state joins the state file's entries with the directory it is given;
code that joined them again read `run/run/ckpt-N` for a relative --output_dir=run, so resuming,
decoding, exporting and averaging refused a healthy run as "no readable checkpoint".
(Relative --train_src/--train_tgt/--dev_src/--dev_tgt: tests/test_datagen_safety.py.)
"""
import tensorflow as tf

from t2t_lite.training import avg_checkpoints
from t2t_lite.utils import checkpoint_guard


def _two_checkpoints(directory) -> None:
    variable = tf.Variable([1.0, 2.0])
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=variable), str(directory), 5)
    manager.save(checkpoint_number=3)
    variable.assign([5.0, 6.0])
    manager.save(checkpoint_number=7)


def test_relative_output_dir_finds_its_checkpoints(tmp_path, monkeypatch):
    _two_checkpoints(tmp_path / "run")
    monkeypatch.chdir(tmp_path)
    assert checkpoint_guard.checkpoints_newest_first("run") == ["run/ckpt-7", "run/ckpt-3"]
    assert checkpoint_guard.newest_good_checkpoint("run") == "run/ckpt-7"
    assert avg_checkpoints.last_checkpoints("run", 2) == ["run/ckpt-3", "run/ckpt-7"]
    # An absolute directory gives the same checkpoints, absolute.
    assert checkpoint_guard.newest_good_checkpoint(str(tmp_path / "run")) == str(
        tmp_path / "run" / "ckpt-7")
    reader = tf.train.load_checkpoint(checkpoint_guard.newest_good_checkpoint("run"))
    assert reader.get_tensor("v/.ATTRIBUTES/VARIABLE_VALUE").tolist() == [5.0, 6.0]


def test_relative_output_dir_falls_back_past_a_damaged_newest(tmp_path, monkeypatch):
    _two_checkpoints(tmp_path / "run")
    data = next((tmp_path / "run").glob("ckpt-7.data-*"))
    data.write_bytes(data.read_bytes()[:4])
    monkeypatch.chdir(tmp_path)
    assert checkpoint_guard.newest_good_checkpoint("run") == "run/ckpt-3"
