"""Model selection: t2t's early-stopping rule (hand cases and a run.py run that stops where
the rule says, remembering the evaluations of an earlier session), keep-best checkpoints past
rotation, and average / decode / export reading output_dir/best."""
import json
import os
import shutil

import pytest

from t2t_lite.training import early_stopping, keep_best
from t2t_lite.training.early_stopping import EarlyStopping, has_metric_plateaued
from tests.run_py import run, steps, train_flags


@pytest.mark.parametrize("steps_, values, num_steps, delta, decrease, expected", [
    # One evaluation, or none N steps before the newest: never.
    ([100], [1.0], 100, 0.1, True, False),
    ([100, 200], [1.0, 1.0], 150, 0.1, True, False),
    # Reference = the last evaluation at least N steps back (step 100 for 300 - 200).
    ([100, 200, 300], [1.0, 0.95, 0.92], 200, 0.1, True, True),
    ([100, 200, 300], [1.0, 0.95, 0.85], 200, 0.1, True, False),
    # Not the best value: a worse reference and a recovery count as an improvement.
    ([100, 200, 300, 400], [0.5, 1.0, 0.95, 0.85], 200, 0.1, True, False),
    ([100, 200, 300, 400], [0.5, 1.0, 0.95, 0.91], 200, 0.1, True, True),
    # delta 0: t2t never stops (the reference improves on itself by 0, not < 0).
    ([100, 200, 300], [1.0, 1.0, 1.0], 100, 0.0, True, False),
    # Maximizing (--noeval_early_stopping_metric_minimize): BLEU up by 0.5 over 200 steps.
    ([100, 200, 300], [20.0, 20.3, 20.5], 200, 1.0, False, True),
    ([100, 200, 300], [20.0, 20.3, 21.5], 200, 1.0, False, False),
])
def test_has_metric_plateaued_is_t2ts_rule(steps_, values, num_steps, delta, decrease, expected):
    assert has_metric_plateaued(steps_, values, num_steps, delta, decrease) is expected


def test_early_stopping_state_is_the_runs_and_survives_a_new_process(tmp_path):
    first = EarlyStopping(str(tmp_path), "loss", 200, 0.1, True)
    assert not first.update(100, {"loss": 1.0})
    assert not first.update(200, {"loss": 0.75, "other": 5.0})
    assert not first.update(250, {"other": 1.0})  # no loss: nothing changes
    # A new process (a resumed run) reads the history and stops on its second evaluation.
    second = EarlyStopping(str(tmp_path), "loss", 200, 0.1, True)
    assert second.history == [(100, 1.0), (200, 0.75)]
    assert not second.update(300, {"loss": 0.6875})  # reference 1.0 (step 100): 0.3125 better
    assert second.update(400, {"loss": 0.71875})  # reference 0.75 (step 200): at most 0.0625
    assert second.stop_message == ("Early stopping at step 400: loss improved by less than "
                                   "0.1 over 200 steps; best 0.6875 at step 300")
    state = json.loads((tmp_path / early_stopping.STATE_FILE).read_text())
    assert state["stopped"] == {"step": 400, "metric": "loss", "best_value": 0.6875,
                                "best_step": 300}
    # A resume from an older checkpoint evaluates step 300 again: the later history goes.
    third = EarlyStopping(str(tmp_path), "loss", 200, 0.1, True)
    assert not third.update(300, {"loss": 0.5})
    assert third.history == [(100, 1.0), (200, 0.75), (300, 0.5)]
    # Values are kept as float32, as in the event files t2t's hook reads.
    assert not third.update(400, {"loss": 0.1})
    assert third.history[-1] == (400, 0.10000000149011612)


@pytest.mark.parametrize("content", [b"\x89PNG\r\n\x1a\n\xff\xfe junk", b'{"history": ',
                                     b"[1, 2]", b'{"history": {"loss": [[1, "x"]]}}'])
def test_a_damaged_early_stopping_state_is_one_line_naming_the_file(tmp_path, content):
    from t2t_lite.errors import UserError

    path = tmp_path / early_stopping.STATE_FILE
    path.write_bytes(content)
    with pytest.raises(UserError) as raised:
        EarlyStopping(str(tmp_path), "loss", 200, 0.1, True)
    message = str(raised.value)
    assert message.startswith(f"{path} ") and message.endswith(
        "; remove it to start the early-stopping history afresh")
    assert "\n" not in message


@pytest.mark.slow
@pytest.mark.parametrize("state_file", ["early_stopping", "best"])
def test_run_py_junk_selection_state_is_one_line_naming_it_before_anything_is_written(
        tiny_run_trained, tmp_path, state_file):
    from tests.conftest import error_line
    from tests.run_py import snapshot

    output_dir = tmp_path / "run"
    shutil.copytree(tiny_run_trained, output_dir)
    if state_file == "best":
        (output_dir / "best").mkdir()
        path = output_dir / "best" / keep_best.INDEX_FILE
    else:
        path = output_dir / early_stopping.STATE_FILE
    path.write_bytes(b"\xff\xfe\x00junk")
    before = snapshot(output_dir)
    flags = train_flags(tiny_run_trained.parent / "data", output_dir, "--train_steps=8",
                        "--local_eval_frequency=2", "--eval_steps=1",
                        "--eval_early_stopping_steps=4", "--keep_best_checkpoints=2")
    flags[0] = "--mode=train_and_eval"
    line = error_line(run(*flags, cwd=tmp_path))
    assert line.startswith(f"error: {path} does not parse ("), line
    assert snapshot(output_dir) == before


def test_resolve_metric_names():
    available = ["loss", "metrics-p/targets/accuracy", "metrics-p/targets/accuracy_top5",
                 "BLEU", "chrF2"]
    assert early_stopping.resolve_metric("accuracy", available) == "metrics-p/targets/accuracy"
    assert early_stopping.resolve_metric("bleu", available) == "BLEU"
    assert early_stopping.resolve_metric("chrf", available) == "chrF2"
    with pytest.raises(ValueError, match="'ter' is not a metric of this run; use one of BLEU"):
        early_stopping.resolve_metric("ter", available)
    assert early_stopping.lower_is_better("loss") and early_stopping.lower_is_better("TER")
    assert not early_stopping.lower_is_better("BLEU")


def _fake_write(prefix: str) -> None:
    for suffix in (".index", ".data-00000-of-00001"):
        with open(prefix + suffix, "w") as f:
            f.write(prefix)


def test_keep_best_keeps_the_n_best_with_its_index(tmp_path):
    (tmp_path / "hparams.json").write_text("{}")
    best = keep_best.BestCheckpoints(str(tmp_path), 2, "BLEU", minimize=False)
    kept = [best.consider(step, {"BLEU": value}, _fake_write)
            for step, value in [(100, 10.0), (200, 12.0), (300, 11.0), (400, 9.0), (500, 11.0)]]
    assert kept == [True, True, True, False, False]  # 11.0 at 500 only ties the worst kept
    folder = tmp_path / "best"
    assert sorted(os.listdir(folder)) == [
        "best_checkpoints.json", "checkpoint", "ckpt-200.data-00000-of-00001", "ckpt-200.index",
        "ckpt-300.data-00000-of-00001", "ckpt-300.index", "hparams.json"]
    assert json.loads((folder / "best_checkpoints.json").read_text()) == {
        "metric": "BLEU", "minimize": False, "checkpoints": {"200": 12.0, "300": 11.0}}
    assert keep_best.ranked(str(folder)) == [str(folder / "ckpt-200"), str(folder / "ckpt-300")]
    assert (folder / "checkpoint").read_text().startswith('model_checkpoint_path: "ckpt-200"')
    assert not best.consider(600, {"loss": 0.1}, _fake_write)  # not its metric
    with pytest.raises(ValueError, match="keeps the best by BLEU"):
        keep_best.BestCheckpoints(str(tmp_path), 2, "loss", minimize=True)


def test_selection_flags_are_checked_against_the_runs_metrics():
    import types

    from t2t_lite.bin import t2t_trainer
    from t2t_lite.errors import UserError

    flags = types.SimpleNamespace(
        problem="algorithmic_reverse_binary40_test", schedule=None, metrics="bleu",
        eval_early_stopping_steps=4, eval_early_stopping_metric="loss",
        keep_best_checkpoints=0, best_checkpoint_metric="loss")
    with pytest.raises(UserError, match="need evaluations: use --mode=train_and_eval"):
        t2t_trainer._check_selection_flags(flags, "train")
    t2t_trainer._check_selection_flags(flags, "train_and_eval")
    flags.eval_early_stopping_metric = "metrics-x/targets/accuracy"  # its last part counts
    t2t_trainer._check_selection_flags(flags, "train_and_eval")
    flags.keep_best_checkpoints, flags.best_checkpoint_metric = 2, "bleu"
    with pytest.raises(UserError, match="--best_checkpoint_metric=bleu: not a metric of this "
                                        "run; use one of accuracy, "):
        t2t_trainer._check_selection_flags(flags, "train_and_eval")
    flags.schedule = "train_eval_and_decode"
    t2t_trainer._check_selection_flags(flags, "train_and_eval")
    flags.keep_best_checkpoints = -1
    with pytest.raises(UserError, match="--keep_best_checkpoints=-1"):
        t2t_trainer._check_selection_flags(flags, "train_and_eval")


@pytest.mark.slow
def test_run_stops_where_t2ts_rule_says_and_keeps_the_best_past_rotation(tiny_run_trained,
                                                                       tmp_path):
    output_dir = tmp_path / "run"
    shutil.copytree(tiny_run_trained, output_dir)
    # An earlier session's evaluations at steps 2 and 4 (values injected): at step 10 the
    # reference is step 2's 0.0 (the last one at least 8 steps back), which no later loss
    # improves on, so t2t's rule stops there; a run that forgot them would go on to step 14.
    (output_dir / early_stopping.STATE_FILE).write_text(
        json.dumps({"history": {"loss": [[2, 0.0], [4, 0.0]]}}))
    flags = train_flags(tiny_run_trained.parent / "data", output_dir, "--train_steps=20",
                        "--local_eval_frequency=2", "--eval_steps=2",
                        "--eval_early_stopping_steps=8", "--eval_early_stopping_metric_delta=0.01",
                        "--keep_best_checkpoints=2", "--best_checkpoint_metric=loss",
                        "--keep_checkpoint_max=1")
    flags[0] = "--mode=train_and_eval"
    result = run(*flags, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    history = json.loads((output_dir / early_stopping.STATE_FILE).read_text())["history"]["loss"]
    stop = next(s for i, (s, _) in enumerate(history) if has_metric_plateaued(
        [h[0] for h in history[:i + 1]], [h[1] for h in history[:i + 1]], 8, 0.01))
    assert stop == 10 and [h[0] for h in history] == [2, 4, 6, 8, 10]
    assert ("Early stopping at step 10: loss improved by less than 0.01 over 8 steps; best 0 "
            "at step 2") in result.stdout
    assert steps(output_dir) == [10]  # saved at the stop; --keep_checkpoint_max=1 rotated
    card = json.loads((output_dir / "run_card.json").read_text())["selection"]
    assert card["stopped at step"] == 10 and card["best step"] == 2

    # Keep-best: the 2 lowest losses of this session's evaluations (6, 8, 10), past rotation.
    losses = {str(s): v for s, v in history if s >= 6}
    index = json.loads((output_dir / "best" / keep_best.INDEX_FILE).read_text())["checkpoints"]
    expected = sorted(losses, key=lambda s: (losses[s], int(s)))[:2]
    assert sorted(index) == sorted(expected) and card["kept (step: value)"] == index
    best_first = keep_best.ranked(str(output_dir / "best"))
    assert [os.path.basename(p) for p in best_first] == [f"ckpt-{s}" for s in expected]
    assert any(s != "10" for s in expected)  # at least one rotated out of output_dir

    # Decode and export restore the best (the same runs.checkpoint_to_restore); average
    # takes the best N.
    from t2t_lite.decoding import runs

    assert runs.checkpoint_to_restore(str(output_dir / "best"), None) == best_first[0]
    inputs = tmp_path / "in.txt"
    inputs.write_text("0 1 1\n1 0\n")
    result = run("--mode=decode", f"--output_dir={output_dir}",
                 f"--checkpoint_path={output_dir / 'best'}", f"--decode_from_file={inputs}",
                 f"--decode_to_file={tmp_path / 'out.txt'}", f"--decode_reference={inputs}",
                 "--metrics=bleu,chrf,ter", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    bleu = json.loads((output_dir / "run_card.json").read_text())["bleu"]
    assert bleu["checkpoint step"] == int(best_first[0].rsplit("-", 1)[1])
    assert bleu["chrF2"].startswith("chrF2|nrefs:1|") and bleu["TER"].startswith("TER|")
    result = run("--mode=average", f"--output_dir={output_dir}", "--average_best=2",
                 cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    names = sorted(os.path.basename(p) for p in best_first)
    assert f"Averaged 2 checkpoints: {', '.join(sorted(names, key=lambda n: int(n[5:])))}" \
        in result.stdout
