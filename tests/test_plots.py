"""Curves as PNGs (t2t_lite.visualization.plots, `run.py --mode=plot`)."""
import os
import sys
import types

import pytest
import tensorflow as tf

from t2t_lite.bin import t2t_plot
from t2t_lite.errors import UserError
from t2t_lite.training.summaries import write_scalars
from t2t_lite.utils import extras
from t2t_lite.visualization import plots
from tests.conftest import require_extra

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
    with pytest.raises(UserError) as raised:  # the install command that fits (tests/test_extras)
        plots.plot_run(str(tmp_path))
    assert str(raised.value) == (
        "drawing pictures (--mode=plot, --mode=attention) needs the [viz] extra (matplotlib is not "
        f"installed): {extras.install_command('viz')}")
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


def test_a_one_point_curve_sits_on_a_readable_axis(tmp_path):
    """One evaluation at step 2,000: the x axis runs from step 0 past 2,000 in whole steps
    (not 1,900..2,100), y from 0 past the value, the value written beside the point; with two
    evaluations the axes are matplotlib's own again."""
    require_extra("matplotlib", "viz")
    plt = plots._pyplot()
    figure = plots.line_figure(plt, "Dev BLEU", "BLEU", {"dev set": [(2000, 2.56)]})
    axes = figure.axes[0]
    assert axes.get_xlim() == (0, 2500)
    assert axes.get_ylim() == pytest.approx((0, 2.56 * 1.3))
    ticks = [t for t in axes.get_xticks() if 0 <= t <= 2500]
    assert len(ticks) >= 3 and all(t == int(t) for t in ticks) and 2000 in ticks
    assert [text.get_text() for text in axes.texts] == ["2.56"]
    assert axes.get_xlabel() == "global step (one evaluation so far)"
    plt.close(figure)
    # A training curve and one dev point on a log scale: the steps differ, nothing forced.
    figure = plots.line_figure(plt, "Loss", "loss", {
        "training": [(100, 5.0), (200, 4.0)], "dev": [(200, 4.4)]}, log_y=True)
    assert figure.axes[0].get_xlim()[0] > 0 and figure.axes[0].get_xlabel() == "global step"
    plt.close(figure)
    # Only one step on a log scale: a decade around the values (loss at one step).
    figure = plots.line_figure(plt, "Loss", "loss", {
        "training": [(50, 5.0)], "dev": [(50, 6.0)]}, log_y=True)
    assert figure.axes[0].get_ylim() == pytest.approx((5.0 / 3, 18.0))
    assert figure.axes[0].get_xlim() == (0, 62.5)
    plt.close(figure)


def test_plot_mode_says_what_it_reads_and_counts_the_pictures(tmp_path, capsys):
    _fake_run(tmp_path)
    t2t_plot.main(types.SimpleNamespace(output_dir=str(tmp_path)))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"Reading the curves of {tmp_path}")
    assert lines[1:] == [f"Wrote {tmp_path / 'plots' / name} ({k}/4)" for k, name in enumerate(
        ["loss.png", "learning_rate.png", "dev_accuracy.png", "dev_bleu.png"], 1)]
