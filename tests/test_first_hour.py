"""A newcomer's first hour: answers in seconds (checks before TensorFlow is imported), flag
errors in one line, a warning when the learning-rate schedule leaves a short run untrained,
the first progress line early, shard counts that fit a small corpus (issue 45)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from t2t_lite.errors import UserError
from t2t_lite.hparams_lib import create_hparams
from tests.conftest import REPO_ROOT, error_line, load_script


@pytest.fixture(scope="module")
def no_tensorflow(tmp_path_factory):
    """A PYTHONPATH entry holding a `tensorflow` package whose import fails."""
    root = tmp_path_factory.mktemp("no_tf")
    (root / "tensorflow").mkdir()
    (root / "tensorflow" / "__init__.py").write_text(
        'raise ImportError("tensorflow was imported")\n')
    return root


def _run(cwd, no_tensorflow, *args: str) -> subprocess.CompletedProcess:
    """run.py in `cwd` with TensorFlow unimportable (a check after its import fails loudly)."""
    env = {**os.environ, "PYTHONPATH": str(no_tensorflow)}
    env.pop("TF_CONFIG", None)
    return subprocess.run([sys.executable, str(REPO_ROOT / "run.py"), *args], cwd=cwd, env=env,
                          check=False, capture_output=True, text=True, timeout=120)


TRAIN = ("--mode=train_and_eval", "--problem=translate_files", "--hparams_set=transformer_tiny",
         "--data_dir=dta", "--output_dir=run")


def _shards(directory, *tags: str) -> None:
    directory.mkdir(exist_ok=True)
    for tag in tags:
        (directory / f"translate_files-{tag}-00000-of-00001").write_bytes(b"")


def test_missing_data_dir_names_the_datagen_flags_the_problem_needs(tmp_path, no_tensorflow):
    line = error_line(_run(tmp_path, no_tensorflow, *TRAIN))
    assert line == (
        "error: --data_dir=dta: no such directory (make the data first: python run.py "
        "--mode=datagen --problem=translate_files --data_dir=dta --train_src=... "
        "--train_tgt=... --dev_src=... --dev_tgt=...)")
    assert os.listdir(tmp_path) == []  # nothing written


def test_data_dir_without_the_dev_shards_is_refused(tmp_path, no_tensorflow):
    _shards(tmp_path / "dta", "train")
    line = error_line(_run(tmp_path, no_tensorflow, *TRAIN))
    assert line.startswith("error: No data files match dta/translate_files-dev*. Generate them "
                           "first: python run.py --mode=datagen --problem=translate_files")
    # --mode=train reads only the train split.
    line = error_line(_run(tmp_path, no_tensorflow, "--mode=train", *TRAIN[1:],
                           "--hparams=hidden_sise=8"))
    assert line == "error: Unknown hparam 'hidden_sise'; did you mean hidden_size, moe_hidden_sizes?"


def test_hparam_values_and_supported_values_are_checked(tmp_path, no_tensorflow):
    _shards(tmp_path / "dta", "train", "dev")
    line = error_line(_run(tmp_path, no_tensorflow, *TRAIN, "--hparams=hidden_size=-4"))
    assert line.startswith("error: hparams hidden_size=-4: must be > 0")
    line = error_line(_run(tmp_path, no_tensorflow, *TRAIN,
                           "--hparams=self_attention_type=local"))
    assert line.startswith("error: hparams.self_attention_type='local' is not supported")
    line = error_line(_run(tmp_path, no_tensorflow, *TRAIN, "--train_steps=0"))
    assert line == "error: --train_steps=0: must be >= 1"
    assert sorted(os.listdir(tmp_path)) == ["dta"]


def test_a_second_run_on_a_locked_output_dir_is_refused_in_seconds(tmp_path, no_tensorflow):
    _shards(tmp_path / "dta", "train", "dev")
    (tmp_path / "run").mkdir()
    holder = {"host": socket.gethostname(), "pid": os.getpid(), "start_time": time.time()}
    (tmp_path / "run" / "run.lock").write_text(json.dumps(holder))
    start = time.time()
    line = error_line(_run(tmp_path, no_tensorflow, *TRAIN))
    assert line.startswith(f"error: run is in use by another run (pid {os.getpid()} on host ")
    assert time.time() - start < 60  # TensorFlow was never imported: the fake one would fail


def test_the_embedded_default_run_checks_its_lock_before_tensorflow(tmp_path, no_tensorflow):
    run_dir = tmp_path / "t2t_train" / "algorithmic_identity_decimal40_small" / "transformer_tiny"
    run_dir.mkdir(parents=True)
    holder = {"host": socket.gethostname(), "pid": os.getpid(), "start_time": time.time()}
    (run_dir / "run.lock").write_text(json.dumps(holder))
    line = error_line(_run(tmp_path, no_tensorflow))
    assert line.startswith(f"error: {run_dir} is in use by another run (pid {os.getpid()} ")


def test_decode_without_a_checkpoint_is_refused(tmp_path, no_tensorflow):
    (tmp_path / "run").mkdir()
    line = error_line(_run(tmp_path, no_tensorflow, "--mode=decode", "--problem=translate_files",
                           "--hparams_set=transformer_tiny", "--output_dir=run"))
    assert line == "error: No checkpoint in --output_dir=run; train first or give --checkpoint_path"
    (tmp_path / "run" / "ckpt-2.index").write_bytes(b"")  # present: the tool's turn (needs TF)
    result = _run(tmp_path, no_tensorflow, "--mode=decode", "--problem=translate_files",
                  "--hparams_set=transformer_tiny", "--output_dir=run")
    assert "tensorflow was imported" in result.stderr


def test_unknown_flag_is_one_error_line_with_absl_suggestion_and_help_exits_0(
        tmp_path, no_tensorflow):
    result = _run(tmp_path, no_tensorflow, "--hparam_set=transformer_tiny")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.splitlines() == [
        ("error: Unknown command line flag 'hparam_set'. Did you mean: hparams_set ? "
         "(python run.py --help lists the flags)")]
    result = _run(tmp_path, no_tensorflow, "--help")
    assert result.returncode == 0 and "--hparams_set" in result.stdout


# ------------------------------------------------------------- the learning-rate warning
def test_short_run_warning_names_the_rate_and_the_fix():
    from t2t_lite.training import learning_rate

    warning = learning_rate.short_run_warning(create_hparams("transformer_tiny", ""), 400)
    # 2.0 * (399 / 8000) / sqrt(8000) / sqrt(128): the rate of the run's last update.
    assert "reaches only 9.9e-05 at the last step" in warning
    assert "peaks at step 8000" in warning
    assert "--hparams=learning_rate_warmup_steps=80" in warning
    fixed = create_hparams("transformer_tiny", "learning_rate_warmup_steps=80")
    assert learning_rate.short_run_warning(fixed, 400) is None
    # A constant rate never warns; an exponential decay to ~0 for most of the run does.
    assert learning_rate.short_run_warning(
        create_hparams("transformer_tiny", "learning_rate_schedule=constant"), 10) is None
    decaying = create_hparams("transformer_tiny", "learning_rate_schedule=constant*exp_decay,"
                              "learning_rate_warmup_steps=0,learning_rate_decay_steps=10,"
                              "learning_rate_decay_rate=0.01")
    warning = learning_rate.short_run_warning(decaying, 1000)
    assert warning.startswith("learning rate: the schedule keeps the rate under a tenth of its "
                              "peak (2 at step 0) for most of this run of 1000 steps")


def test_no_warning_for_the_embedded_default_nor_the_recipes():
    from t2t_lite.bin import default_run
    from t2t_lite.training import learning_rate

    default = create_hparams(default_run.DEFAULT_HPARAMS_SET, default_run.CPU_OVERRIDES)
    for steps in (750, default_run.MAX_TRAIN_STEPS):  # where it stops now, and its budget
        assert learning_rate.short_run_warning(default, steps) is None
    translate = load_script(REPO_ROOT / "recipes" / "translate_toy_ende.py", "recipe_translate")
    parse = load_script(REPO_ROOT / "recipes" / "parse_ptb_sample.py", "recipe_parse")
    for preset in (translate.T2T_RECIPE, translate.TUNED, parse.DEFAULTS):
        hparams = create_hparams(preset["hparams_set"], preset["hparams"])
        assert learning_rate.short_run_warning(hparams, preset["train_steps"]) is None, preset


def test_training_warns_and_reports_its_first_step(tiny_run_trained):
    # The shared 4-step run (tests/conftest.py): transformer_tiny's 8,000-step warmup.
    stderr = (tiny_run_trained.parent / "trained.stderr").read_text(encoding="utf-8")
    warnings = [line for line in stderr.splitlines() if "] learning rate: " in line]
    assert len(warnings) == 1 and warnings[0].startswith("W")
    assert "this run ends at step 4 but the schedule peaks at step 8000" in warnings[0]
    first = [line for line in stderr.splitlines() if "the first step took" in line]
    assert len(first) == 1 and "step 1/4: the first step took " in first[0]
    assert "progress lines every 2 steps, the first after ~30 s" in first[0]


def test_first_step_line():
    from t2t_lite.utils import progress

    assert progress.first_step_line(1, 400, 61.24, 100, 30.0) == (
        "step 1/400: the first step took 61.2 s (tracing and compiling it); progress lines "
        "every 100 steps, the first after ~30 s")
    assert progress.first_step_line(5, 9, 2.0, 1, None).endswith("progress lines every 1 steps")


# --------------------------------------------------------------------------- datagen
def _lines(path, count: int) -> str:
    path.write_text("".join(f"line {i}\n" for i in range(count)), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("lines,shards", [(1, 1), (300, 3), (9000, 90), (20000, 100)])
def test_the_users_train_files_get_a_shard_count_fitting_their_size(tmp_path, lines, shards):
    from t2t_lite import registry

    problem = registry.problem("translate_files")
    assert [s["shards"] for s in problem.dataset_splits] == [100, 1]  # t2t's
    train = _lines(tmp_path / "train.txt", lines)
    dev = _lines(tmp_path / "dev.txt", 3)
    problem.set_source_files(train, train, dev, dev)
    assert [s["shards"] for s in problem.dataset_splits] == [shards, 1]


def test_a_failing_datagen_leaves_no_empty_data_dir(tmp_path):
    from t2t_lite import registry
    from t2t_lite.data_generators import datagen

    problem = registry.problem("translate_files")  # no source files, no compiled ones
    with pytest.raises(UserError, match="no --train_src/--train_tgt files given"):
        datagen.generate_locked(problem, str(tmp_path / "dta"), str(tmp_path / "tmp"))
    assert not (tmp_path / "dta").exists()
    (tmp_path / "kept").mkdir()  # a data_dir the user made stays
    with pytest.raises(UserError):
        datagen.generate_locked(problem, str(tmp_path / "kept"), str(tmp_path / "tmp"))
    assert (tmp_path / "kept").is_dir()


# ------------------------------------------------------------------ pictures and log lines
def test_bleu_picture_names_the_file_scored(tmp_path):
    import tensorflow as tf

    from t2t_lite.visualization import plots

    writer = tf.summary.create_file_writer(str(tmp_path / "decode"))
    with writer.as_default():  # as dev_decode.report_bleu writes it
        tf.summary.scalar("BLEU", 12.5, step=300, description="/data/newstest2014.de")
    writer.close()
    title, curves = plots.bleu_curves(str(tmp_path), [], [(300, 12.5)])
    assert title == "BLEU of the decodes"  # not "Dev": a test file was scored
    assert curves == {"--mode=decode against newstest2014.de": [(300, 12.5)]}
    title, curves = plots.bleu_curves(str(tmp_path), [(100, 3.0)], [])
    assert title == "Dev BLEU (train_eval_and_decode)"
    assert curves == {"dev set (train_eval_and_decode)": [(100, 3.0)]}


def _saved_figures(monkeypatch) -> list:
    import matplotlib.figure

    saved = []
    original = matplotlib.figure.Figure.savefig

    def savefig(figure, *args, **kwargs):
        saved.append(figure)
        return original(figure, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    return saved


def test_a_one_point_curve_shows_its_value_and_heatmaps_have_a_colour_bar(
        tmp_path, monkeypatch):
    import numpy as np

    from t2t_lite.visualization import attention_viz, plots
    from tests.conftest import require_extra

    require_extra("matplotlib", "viz")
    saved = _saved_figures(monkeypatch)
    plots._line_plot(plots._pyplot(), str(tmp_path / "one.png"), "t", "BLEU",
                     {"decode": [(300, 12.5)]})
    assert [text.get_text() for text in saved[0].axes[0].texts] == ["12.5"]
    weights = {"encoder_self": np.full((2, 2, 3, 3), 1 / 3, np.float32)}
    attention_viz.plot_attention(weights, ["a", "b", "<EOS>"], ["x"], str(tmp_path / "a"))
    heads, bar = saved[1].axes[:4], saved[1].axes[4:]
    assert len(heads) == 4 and len(bar) == 1 and bar[0].get_ylabel() == "attention weight"


def test_eval_lines_are_short():
    from t2t_lite.evaluation import metrics

    prefix = "metrics-algorithmic_identity_decimal40_small/targets/"
    results = {"loss": 0.1058, prefix + "accuracy": 1.0, prefix + "accuracy_per_sequence": 1.0,
               prefix + "accuracy_top5": 1.0, prefix + "neg_log_perplexity": -0.1058}
    assert metrics.eval_lines(750, results) == [
        ("Eval at step 750: loss = 0.1058, accuracy = 1.0000, accuracy_per_sequence = 1.0000, "
         "accuracy_top5 = 1.0000, neg_log_perplexity = -0.1058")]
    translation = {prefix + name: 0.5 for name in (
        "accuracy", "accuracy_per_sequence", "accuracy_top5", "approx_bleu_score",
        "neg_log_perplexity", "rouge_2_fscore", "rouge_L_fscore")}
    lines = metrics.eval_lines(4800, {"loss": 4.165, **translation})
    assert [len(line) < 150 for line in lines] == [True, True]
    assert lines[1].startswith("Eval at step 4800 (cont.): ")
    assert ", ".join(line.split(": ", 1)[1] for line in lines).count(" = ") == 8
    assert metrics.eval_lines(3, {"loss": 2.0}) == ["Eval at step 3: loss = 2.0000"]


def test_routine_tensorflow_info_lines_are_dropped(caplog):
    import logging

    from t2t_lite import quiet_start

    quiet_start.drop_routine_info_lines()
    absl_logger, board = logging.getLogger("absl"), logging.getLogger("tensorboard")
    with caplog.at_level(logging.INFO):
        absl_logger.info("Sharding callback duration: %s microseconds", 84295)
        board.info("No path found after %s", "/run/events.out")
        absl_logger.info("Saved checkpoint %s", "ckpt-2")
        absl_logger.warning("Sharding callback duration: %s", "a warning still shows")
    assert [r.getMessage() for r in caplog.records] == [
        "Saved checkpoint ckpt-2", "Sharding callback duration: a warning still shows"]
