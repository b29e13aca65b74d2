"""The overfitting hint: the rule on hand-made histories, the watch's one line per best step,
and a real training run whose dev loss rises while its training loss falls."""
from __future__ import annotations

import numpy as np
import pytest

from t2t_lite.training import overfitting
from t2t_lite.training.overfitting import Evaluation, OverfittingWatch


def _history(dev, training, every=500):
    return [Evaluation(every * (k + 1), d, t) for k, (d, t) in enumerate(zip(dev, training))]


@pytest.mark.parametrize("dev,training,expected", [
    # Two rises in a row while training falls: the hint.
    ([4.50, 4.37, 4.35, 4.43, 4.51], [4.0, 3.6, 3.3, 3.1, 2.9], True),
    # One rise only (4.35 -> 4.43): not yet.
    ([4.50, 4.37, 4.35, 4.43], [4.0, 3.6, 3.3, 3.1], False),
    # Both rise: the run diverges or its learning rate is too high, not overfitting.
    ([4.35, 4.43, 4.51], [3.3, 3.4, 3.5], False),
    # Training loss flat at one of the two: not "falls".
    ([4.35, 4.43, 4.51], [3.3, 3.3, 3.2], False),
    # A dev loss that stays put is not a rise.
    ([4.35, 4.35, 4.51], [3.3, 3.2, 3.1], False),
    # The rule reads the last three only: a rise long ago then a fall says nothing.
    ([4.0, 4.1, 4.2, 4.1], [3.0, 2.9, 2.8, 2.7], False),
    # Too few evaluations.
    ([4.35, 4.43], [3.3, 3.2], False),
])
def test_the_rule_on_hand_made_histories(dev, training, expected):
    assert overfitting.is_overfitting(_history(dev, training)) is expected


def test_no_training_loss_yet_is_no_hint():
    history = _history([4.35, 4.43, 4.51], [None, 3.2, 3.1])
    assert not overfitting.is_overfitting(history)


def test_the_line_names_the_best_step_its_checkpoint_and_the_flags():
    history = _history([4.50, 4.37, 4.35, 4.43, 4.51], [4.0, 3.6, 3.3, 3.1, 2.9])
    assert overfitting.best_evaluation(history).step == 1500
    line = overfitting.hint_line(history, "run/ckpt-1500", 500)
    assert line == (
        "The model may be overfitting: dev loss rose at two evaluations in a row "
        "(4.35 -> 4.43 -> 4.51 at steps 1500-2500) while training loss fell (3.3 -> 3.1 -> "
        "2.9). Best so far: dev loss 4.35 at step 1500 (run/ckpt-1500; decode it with "
        "--checkpoint_path=run/ckpt-1500). --keep_best_checkpoints=1 keeps the best checkpoint "
        "in output_dir/best; --eval_early_stopping_steps=1000 (t2t's early stopping, "
        "--eval_early_stopping_metric=loss) stops training when the dev loss no longer "
        "improves.")
    # Rotated away; the run already keeps its best and stops early: said, not suggested.
    line = overfitting.hint_line(history, None, 500, keep_best=2, early_stopping_steps=2000)
    assert "(its checkpoint is no longer kept: --keep_checkpoint_max)" in line
    assert line.endswith(
        "--keep_best_checkpoints=2 keeps it in output_dir/best (decode with "
        "--checkpoint_path=output_dir/best); --eval_early_stopping_steps=2000 stops the run "
        "when its metric no longer improves.")


def test_the_watch_says_it_once_per_best_step(tmp_path):
    (tmp_path / "ckpt-1000.index").write_bytes(b"")
    watch = OverfittingWatch(str(tmp_path), 500)
    said = []
    # Training losses of the progress lines between evaluations (means taken per evaluation).
    for step, training, dev in [(500, [5.0, 4.6], 4.6), (1000, [4.2, 4.0], 4.3),
                                (1500, [3.8, 3.6], 4.4), (2000, [3.4, 3.2], 4.5),
                                (2500, [3.1, 3.0], 4.6),  # still rising: nothing new
                                (3000, [2.9], 4.2), (3500, [2.8], 4.1),  # a new best
                                (4000, [2.7], 4.15), (4500, [2.6], 4.2)]:  # rises again
        for loss in training:
            watch.training_loss(loss)
        line = watch.evaluation(step, dev)
        if line:
            said.append((step, line))
    assert [step for step, _ in said] == [2000, 4500]
    assert "Best so far: dev loss 4.3 at step 1000 (" + str(tmp_path / "ckpt-1000") in said[0][1]
    assert "(4.3 -> 4.4 -> 4.5 at steps 1000-2000)" in said[0][1]
    assert "training loss fell (4.1 -> 3.7 -> 3.3)" in said[0][1]  # the means
    assert "dev loss 4.1 at step 3500 (its checkpoint is no longer kept" in said[1][1]
    # An evaluation without a progress line since the one before reuses the last loss.
    assert watch.history[-1].training_loss == 2.6


@pytest.mark.slow
def test_a_training_run_whose_dev_loss_rises_says_so(tmp_path, caplog):
    """Through the trainer: real steps and progress lines, real evaluations every 10 steps,
    whose dev loss is made to mirror the training loss (10 minus the mean of the progress
    losses since the evaluation before), so that it rises exactly while training falls, as
    an overfitting run's does. The hint comes once per best step, the first when the rule
    first holds, naming the best evaluation, its checkpoint and the flags."""
    import logging as std_logging

    from t2t_lite.training import trainer_lib
    from tests.trainer_utils import ReverseProblem, model_fn, tiny_hparams

    hparams = tiny_hparams(0.0)
    config = trainer_lib.RunConfig(output_dir=str(tmp_path), train_steps=60, eval_steps=0,
                                   local_eval_frequency=10, log_step_count_steps=5,
                                   random_seed=1, num_decode_examples=0)
    trainer = trainer_lib.Trainer(model_fn(hparams), hparams, ReverseProblem(16), "", config)
    since_eval = []
    note_training = trainer.overfitting.training_loss

    def training_loss(loss):
        since_eval.append(loss)
        note_training(loss)

    real_evaluate = trainer.evaluate

    def evaluate():
        results = dict(real_evaluate())
        results["loss"] = 10.0 - sum(since_eval) / len(since_eval)
        since_eval.clear()
        return results

    trainer.overfitting.training_loss = training_loss
    trainer.evaluate = evaluate
    with caplog.at_level(std_logging.WARNING):
        trainer.train(eval_every=10)
    history = trainer.overfitting.history
    steps = [e.step for e in history]
    assert steps == list(range(10, 61, 10))
    for evaluation in history:  # the watch read the same losses as the evaluations
        assert evaluation.dev_loss == pytest.approx(10.0 - evaluation.training_loss)
    hints = [r.getMessage() for r in caplog.records
             if r.getMessage().startswith("The model may be overfitting")]
    expected_at = [e.step for k, e in enumerate(history)
                   if overfitting.is_overfitting(history[:k + 1])]
    training = [e.training_loss for e in history]
    # A fresh model's loss falls over its first 30 steps: the rule holds at step 30.
    assert expected_at and expected_at[0] == 30, training
    bests = [overfitting.best_evaluation(history[:steps.index(at) + 1]) for at in expected_at]
    assert len(hints) == len({best.step for best in bests})
    assert "at steps 10-30)" in hints[0]
    assert f"Best so far: dev loss {history[0].dev_loss:.4g} at step 10" in hints[0]
    assert f"--checkpoint_path={tmp_path / 'ckpt-10'}" in hints[0]
    assert "--keep_best_checkpoints=1" in hints[0]


# ------------------------------------------------- decode and export: which checkpoint, ranked
def _run_with_dev_losses(run_dir, losses: dict[int, float], checkpoints=()):
    """A run folder as training leaves it: eval/ events with these dev losses (and other eval
    scalars), empty checkpoint files of these steps."""
    import tensorflow as tf

    from t2t_lite.training.summaries import write_scalars

    writer = tf.summary.create_file_writer(str(run_dir / "eval"))
    for step, loss in losses.items():
        write_scalars(writer, {"loss": loss, "metrics-p/targets/accuracy": 0.5}, step)
    writer.close()
    for step in checkpoints:
        (run_dir / f"ckpt-{step}.index").write_bytes(b"")
    return run_dir


def test_the_checkpoint_note_ranks_the_checkpoint_by_dev_loss(tmp_path):
    from t2t_lite.decoding import checkpoint_note

    run_dir = _run_with_dev_losses(tmp_path / "run", {500: 4.5, 1000: 4.25, 1500: 4.375,
                                                      2000: 4.5}, checkpoints=(1000, 2000))
    assert checkpoint_note.dev_losses(str(run_dir)) == {500: 4.5, 1000: 4.25, 1500: 4.375,
                                                        2000: 4.5}
    assert checkpoint_note.describe(f"{run_dir}/ckpt-2000") == (
        f"{run_dir}/ckpt-2000 (step 2000: dev loss 4.5; the run's best dev loss is 4.25 at "
        f"step 1000: --checkpoint_path={run_dir}/ckpt-1000)")
    assert checkpoint_note.describe(f"{run_dir}/ckpt-1000", str(run_dir)) == (
        f"{run_dir}/ckpt-1000 (step 1000: the best dev loss of the run's 4 evaluations, 4.25)")
    (run_dir / "ckpt-1000.index").unlink()  # rotated away
    assert checkpoint_note.describe(f"{run_dir}/ckpt-2500") == (
        f"{run_dir}/ckpt-2500 (step 2500: no evaluation at this step; the run's best dev loss "
        "is 4.25 at step 1000: its checkpoint is no longer kept; --keep_best_checkpoints=1 "
        "keeps the best while training)")
    # No evaluations, an ensemble: the checkpoint named, nothing more.
    assert checkpoint_note.describe(f"{tmp_path}/other/ckpt-4") == f"{tmp_path}/other/ckpt-4"
    both = f"{run_dir}/ckpt-2000,{run_dir}/ckpt-1500"
    assert checkpoint_note.describe(both) == both


def test_the_checkpoint_note_reads_a_cut_event_file_and_the_keep_best_folder(tmp_path):
    import json

    from t2t_lite.decoding import checkpoint_note

    run_dir = _run_with_dev_losses(tmp_path, {10: 3.0, 20: 2.0})
    (events,) = (tmp_path / "eval").glob("events.out.tfevents.*")
    with open(events, "ab") as f:  # a record being written when decode reads
        f.write(b"\x30\x00\x00\x00\x00\x00\x00\x00partial")
    assert checkpoint_note.dev_losses(str(run_dir)) == {10: 3.0, 20: 2.0}
    # A keep-best folder ranks by the metric it keeps for (here BLEU, higher is better).
    (tmp_path / "best").mkdir()
    (tmp_path / "best" / "best_checkpoints.json").write_text(json.dumps(
        {"metric": "BLEU", "minimize": False, "checkpoints": {"10": 20.5, "20": 18.0}}))
    assert checkpoint_note.describe(f"{tmp_path}/ckpt-20") == (
        f"{tmp_path}/ckpt-20 (step 20: BLEU 18; the run's best BLEU is 20.5 at step 10: "
        f"--checkpoint_path={tmp_path / 'best'})")
    assert checkpoint_note.describe(f"{tmp_path}/best/ckpt-10") == (
        f"{tmp_path}/best/ckpt-10 (step 10: the best BLEU of the run, 20.5, kept in "
        f"{tmp_path / 'best'})")


@pytest.mark.slow
def test_decode_says_which_checkpoint_it_read_and_that_a_better_one_exists(
        tiny_run_trained, tmp_path):
    """Through run.py: the newest checkpoint is decoded (as before), and the line says the
    run's best dev loss is at step 2 with the flag that reads it."""
    import shutil

    from tests.run_py import run

    run_dir = tmp_path / "run"
    shutil.copytree(tiny_run_trained, run_dir)
    _run_with_dev_losses(run_dir, {2: 1.5, 4: 2.5})
    source = tmp_path / "in.txt"
    source.write_text("0 1 1\n")
    result = run("--mode=decode", f"--output_dir={run_dir}", "--decode_hparams=beam_size=1",
                 f"--decode_from_file={source}", f"--decode_to_file={tmp_path / 'out.txt'}",
                 cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    (line,) = [line for line in result.stderr.splitlines() if "Decoding with" in line]
    assert line.endswith(
        f"Decoding with {run_dir}/ckpt-4 (step 4: dev loss 2.5; the run's best dev loss is 1.5 "
        f"at step 2: --checkpoint_path={run_dir}/ckpt-2)")
