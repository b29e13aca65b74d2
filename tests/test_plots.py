"""Curves as PNGs (t2t_lite.visualization.plots, `run.py --mode=plot`)."""
import os
import sys
import types

import pytest
import tensorflow as tf

from t2t_lite.bin import t2t_plot
from t2t_lite.errors import UserError
from t2t_lite.training.summaries import write_scalars
from t2t_lite.visualization import plots

METRIC = "metrics-p/targets/"


def _fake_run(run_dir, with_bleu=True):
    """Event files as training (train + eval/) and a decode with a reference write them."""
    train = tf.summary.create_file_writer(str(run_dir))
    dev = tf.summary.create_file_writer(str(run_dir / "eval"))
    for step in range(10, 101, 10):
        write_scalars(train, {"loss": 5.0 / step, "learning_rate": 1e-3 * min(1, step / 40)},
                      step)
        if step % 50 == 0:
            write_scalars(dev, {"loss": 6.0 / step, METRIC + "accuracy": step / 100,
                                METRIC + "accuracy_per_sequence": step / 200}, step)
    train.close()
    dev.close()
    if with_bleu:
        decode = tf.summary.create_file_writer(str(run_dir / "decode"))
        with decode.as_default():
            tf.summary.scalar("BLEU", 27.5, step=100)
        decode.close()


def test_read_scalars_round_trip(tmp_path):
    _fake_run(tmp_path)
    train = plots.read_scalars(str(tmp_path))
    assert train["loss"][0] == (10, pytest.approx(0.5))
    assert [step for step, _ in train["learning_rate"]] == list(range(10, 101, 10))
    dev = plots.read_scalars(str(tmp_path / "eval"))
    assert dev[METRIC + "accuracy"] == [(50, pytest.approx(0.5)), (100, pytest.approx(1.0))]
    assert plots.read_scalars(str(tmp_path / "decode"))["BLEU"] == [(100, pytest.approx(27.5))]


def test_plot_mode_writes_non_blank_pngs(tmp_path, capsys):
    _fake_run(tmp_path)
    written = t2t_plot.main(types.SimpleNamespace(output_dir=str(tmp_path)))
    names = sorted(os.path.basename(p) for p in written)
    assert names == ["dev_accuracy.png", "dev_bleu.png", "learning_rate.png", "loss.png"]
    for path in written:
        assert os.path.getsize(path) > 5000
        assert plots.pixel_spread(path) > 0.05  # not a blank canvas
    assert f"Wrote {tmp_path / 'plots' / 'loss.png'}" in capsys.readouterr().out


def test_no_bleu_no_bleu_picture(tmp_path):
    _fake_run(tmp_path, with_bleu=False)
    names = sorted(os.path.basename(p) for p in plots.plot_run(str(tmp_path)))
    assert "dev_bleu.png" not in names and "loss.png" in names


def test_empty_run_dir_and_missing_matplotlib_are_user_errors(tmp_path, monkeypatch):
    with pytest.raises(UserError, match="no TensorBoard scalars"):
        plots.plot_run(str(tmp_path))
    with pytest.raises(UserError, match="--output_dir"):
        t2t_plot.main(types.SimpleNamespace(output_dir=""))
    _fake_run(tmp_path)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
    with pytest.raises(UserError, match=r"pip install t2t_lite\[viz\]"):
        plots.plot_run(str(tmp_path))
    assert plots.plot_run_if_possible(str(tmp_path)) == []  # a finished run does not fail


def test_chrf_and_ter_pictures_when_decodes_logged_them(tmp_path):
    _fake_run(tmp_path, with_bleu=False)
    dev_decode = tf.summary.create_file_writer(str(tmp_path / "decode_eval"))
    with dev_decode.as_default():
        for step, (chrf, ter) in {50: (40.0, 70.0), 100: (45.0, 62.0)}.items():
            tf.summary.scalar("chrF2", chrf, step=step)
            tf.summary.scalar("TER", ter, step=step)
    dev_decode.close()
    names = sorted(os.path.basename(p) for p in plots.plot_run(str(tmp_path)))
    assert "dev_chrf.png" in names and "dev_ter.png" in names
    assert "dev_chrfpp.png" not in names and "dev_bleu.png" not in names
    assert plots.pixel_spread(str(tmp_path / "plots" / "dev_ter.png")) > 0.05
