"""Progress (t2t_lite.utils.progress): bars in a terminal, periodic log lines otherwise."""
import io
import logging

import numpy as np
import pytest

from t2t_lite.training import avg_checkpoints
from t2t_lite.utils import progress


def test_status_line_has_total_rate_and_eta():
    line = progress.status_line("Decoding", 120, 500, "lines", elapsed=40.0)
    # 3 lines/s, 380 left: 126.7 s.
    assert line == "Decoding: 120/500 lines (24%), 3 lines/s, ETA 0:02:06"
    assert progress.status_line("Writing", 10, None, "examples", 5.0) == \
        "Writing: 10 examples, 2 examples/s"


def test_training_eta_of_an_open_ended_run_is_an_upper_bound():
    assert progress.training_eta(1000, 4000, 2.0, stops_early=False) == "ETA 0:25:00"
    text = progress.training_eta(1000, 4000, 2.0, stops_early=True)
    assert text == "at most 0:25:00 to step 4000 (stops earlier at its target)"
    assert "ETA" not in text


def test_log_style_yields_items_and_logs_counts(monkeypatch, caplog):
    monkeypatch.setenv("T2T_LITE_PROGRESS", "log")
    caplog.set_level(logging.INFO)
    batches = [[1, 2], [3, 4], [5]]
    # interval 0: a line after every item, then the final one.
    assert list(progress.track(batches, 5, "Decoding", "lines", size=len, interval=0)) == batches
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Decoding")]
    assert lines[0].startswith("Decoding: 2/5 lines (40%)")
    assert lines[2].startswith("Decoding: 5/5 lines (100%)")
    assert lines[-1].startswith("Decoding: 5 lines in 0:00:00")


def test_bar_style_draws_a_tqdm_bar_with_the_total(monkeypatch, capsys):
    monkeypatch.setenv("T2T_LITE_PROGRESS", "bar")
    assert list(progress.track(range(7), 7, "Averaging", "variables")) == list(range(7))
    err = capsys.readouterr().err
    assert "Averaging" in err and "7/7" in err and "100%" in err


def test_style_follows_the_terminal(monkeypatch):
    monkeypatch.delenv("T2T_LITE_PROGRESS", raising=False)
    assert progress.style(io.StringIO()) == "log"

    class Tty(io.StringIO):
        def isatty(self):
            return True

    assert progress.style(Tty()) == "bar"
    monkeypatch.setenv("T2T_LITE_PROGRESS", "off")
    assert progress.style(Tty()) == "off"


def test_averaging_reports_its_variables(tmp_path, monkeypatch, caplog):
    import tensorflow as tf

    monkeypatch.setenv("T2T_LITE_PROGRESS", "log")
    caplog.set_level(logging.INFO)
    paths = []
    for i in range(2):
        checkpoint = tf.train.Checkpoint(a=tf.Variable(np.full([2], float(i))),
                                         b=tf.Variable(np.ones([3], np.float32)))
        paths.append(checkpoint.write(str(tmp_path / f"ckpt-{i}")))
    values = avg_checkpoints.average_tensors(paths)
    assert any(np.allclose(v, 0.5) for v in values.values() if np.shape(v) == (2,))
    done = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Averaging:")]
    assert done and done[-1].startswith(f"Averaging: {len(values)} variables in")


@pytest.mark.parametrize("count", [0, 3])
def test_off_style_is_silent(monkeypatch, caplog, capsys, count):
    monkeypatch.setenv("T2T_LITE_PROGRESS", "off")
    caplog.set_level(logging.INFO)
    assert list(progress.track(range(count), count, "X")) == list(range(count))
    assert not caplog.records and not capsys.readouterr().err
