"""A run's hparams.json, flags.json and run card are checked before they change (issue
"a run's state is never lost or silently changed"): resume refusals and history, read-only
eval, warm start and damaged files through run.py, and the hparams classification of
`run_metadata` against the variables a tiny model builds."""
from __future__ import annotations

import functools
import json
import os
import socket

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import registry
from t2t_lite.hparams_lib import create_hparams
from t2t_lite.training import optimize, run_card
from t2t_lite.utils import run_lock, run_metadata
from tests.run_py import PROBLEM, TINY
from tests.run_py import run as _run
from tests.run_py import snapshot as _snapshot
from tests.run_py import steps as _steps
from tests.run_py import train_flags as _train_flags
from tests.test_failures import _copy, _error_line

RUN_FILES = ("hparams.json", "flags.json", "run_card.json", "run_card.md")


@pytest.fixture
def data_dir(tiny_run_data_dir):
    """The tiny problem's data (made once per test session, conftest.py)."""
    return tiny_run_data_dir


@pytest.fixture
def trained(tiny_run_trained):
    """A run with checkpoints at steps 2 and 4, made once per session (copied before use)."""
    return tiny_run_trained


@pytest.mark.slow
def test_resume_that_changes_the_run_is_refused_and_changes_no_byte(data_dir, trained,
                                                                    tmp_path):
    output_dir = _copy(trained, tmp_path)
    before = _snapshot(output_dir)
    assert set(RUN_FILES) <= set(before)
    line = _error_line(_run(*_train_flags(data_dir, output_dir, "--train_steps=6",
                                          "--hparams=" + TINY.replace("layers=1", "layers=2")),
                            cwd=tmp_path))
    assert line.startswith(f"error: this run changes what {output_dir} was trained with: "
                           "num_hidden_layers 1 -> 2; train in another --output_dir")
    assert _snapshot(output_dir) == before

    # Another problem is refused before its (missing) data is looked for.
    line = _error_line(_run(*_train_flags(data_dir, output_dir, "--train_steps=6",
                                          "--problem=algorithmic_identity_binary40",
                                          "--hparams_set=transformer_small"), cwd=tmp_path))
    assert (f"trained with: problem '{PROBLEM}' -> 'algorithmic_identity_binary40', "
            "hparams_set 'transformer_tiny' -> 'transformer_small';") in line
    assert _snapshot(output_dir) == before


@pytest.mark.slow
def test_resume_with_safe_changes_is_recorded_in_the_history(data_dir, trained, tmp_path):
    output_dir = _copy(trained, tmp_path)
    # As if trained by two workers: this one-worker resume halves the global batch.
    card = json.loads((output_dir / "run_card.json").read_text())
    tokens = int(card["setup"]["global batch per update"].split()[0])
    card["setup"].update({"replicas": 2, "global batch per update": f"{2 * tokens} tokens"})
    (output_dir / "run_card.json").write_text(json.dumps(card))
    result = _run(*_train_flags(data_dir, output_dir, "--train_steps=6",
                                f"--hparams={TINY},learning_rate_constant=1.0"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert _steps(output_dir) == [2, 4, 6]
    history = json.loads((output_dir / "run_card.json").read_text())["history"]
    moved = f"replicas 2 -> 1 (global batch per update {2 * tokens} tokens -> {tokens} tokens)"
    assert history["1. resumed at step 4"] == ("learning_rate_constant 2.0 -> 1.0; "
                                               f"train_steps 4 -> 6; {moved}")
    assert f"This resume trains with {moved}" in result.stderr
    assert "## History (resumes)" in (output_dir / "run_card.md").read_text()
    assert json.loads((output_dir / "hparams.json").read_text())[
        "learning_rate_constant"] == 1.0
    assert json.loads((output_dir / "flags.json").read_text())["train_steps"] == 6


@pytest.mark.slow
def test_resume_on_data_made_again_says_so_in_one_line_and_the_card_keeps_it(
        data_dir, trained, tmp_path):
    import shutil

    output_dir = _copy(trained, tmp_path)
    new_data = tmp_path / "data"
    shutil.copytree(data_dir, new_data)
    flags = json.loads((output_dir / "flags.json").read_text())
    (output_dir / "flags.json").write_text(json.dumps(dict(flags, data_dir=str(new_data))))
    recorded = json.loads((output_dir / run_metadata.INPUTS_NAME).read_text())["data"]
    # The same problem's data made again, into the same folder, from another seed.
    made = _run("--mode=datagen", f"--problem={PROBLEM}", f"--data_dir={new_data}",
                "--overwrite_data", "--random_seed=7", cwd=tmp_path)
    assert made.returncode == 0, made.stderr[-3000:]
    result = _run(*_train_flags(new_data, output_dir, "--train_steps=6"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    now = json.loads((output_dir / run_metadata.INPUTS_NAME).read_text())["data"]
    changed = sorted(name for name in recorded if recorded[name] != now[name])
    assert changed  # the train split at least
    said = "; ".join(f"data {name} sha256 {recorded[name][:12]} -> {now[name][:12]}"
                     for name in changed)
    lines = [line for line in result.stderr.splitlines() if "data made again" in line]
    assert len(lines) == 1, result.stderr[-3000:]
    assert lines[0].endswith(f"This resume trains on data made again since the run's last "
                             f"session ({said}): the run card's History records it")
    history = json.loads((output_dir / "run_card.json").read_text())["history"]
    assert history["1. resumed at step 4"] == f"train_steps 4 -> 6; {said}"


@pytest.mark.slow
def test_nothing_to_train_writes_nothing(data_dir, trained, tmp_path):
    output_dir = _copy(trained, tmp_path)
    before = _snapshot(output_dir)
    for steps, mode in ((4, "train"), (2, "train"), (4, "train_and_eval")):
        # At the checkpoint's step, below it (another --train_steps), and with evaluations.
        flags = _train_flags(data_dir, output_dir, f"--train_steps={steps}")
        flags[0] = f"--mode={mode}"
        result = _run(*flags, cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-3000:]
        assert f"Global step 4 >= train_steps {steps}: nothing to train" in result.stderr
        assert _snapshot(output_dir) == before


@pytest.mark.slow
def test_eval_only_reads_the_run_even_beside_a_live_training(data_dir, trained, tmp_path):
    output_dir = _copy(trained, tmp_path)
    # The run lock of a live training (this process) does not stop eval, nor is it touched.
    lock = {"host": socket.gethostname(), "pid": os.getpid(), "start_time": 0}
    (output_dir / run_lock.LOCK_NAME).write_text(json.dumps(lock))
    before = {name: (output_dir / name).read_bytes() for name in
              ("hparams.json", "flags.json", run_lock.LOCK_NAME)}
    # Only the run: problem, hparams set, data_dir and model come from its flags.json.
    result = _run("--mode=eval", f"--output_dir={output_dir}", "--eval_steps=1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert {name: (output_dir / name).read_bytes() for name in before} == before
    card = json.loads((output_dir / "run_card.json").read_text())
    assert card["eval"]["step"] == 4 and card["training"]["global step"] == 4
    assert _steps(output_dir) == [2, 4]


@pytest.mark.slow
def test_warm_start_that_does_not_fit_writes_nothing(data_dir, trained, tmp_path):
    output_dir = tmp_path / "new"
    result = _run(*_train_flags(data_dir, output_dir, "--train_steps=2",
                                f"--warm_start_from={trained}",
                                "--hparams=" + TINY.replace("size=16", "size=32")),
                  cwd=tmp_path)
    line = _error_line(result)  # one line, no traceback
    assert line.startswith("error: ") and f"--warm_start_from={trained}" in line
    assert not output_dir.exists()  # no hparams.json, flags.json, run card or lock


@pytest.mark.slow
def test_damaged_hparams_or_flags_json_is_one_line_naming_it(data_dir, trained, tmp_path):
    output_dir = _copy(trained, tmp_path)
    hparams_json = output_dir / "hparams.json"
    hparams_json.write_bytes(hparams_json.read_bytes()[:40])  # cut off mid-write
    line = _error_line(_run(*_train_flags(data_dir, output_dir, "--train_steps=6"),
                            cwd=tmp_path))
    assert line.startswith(f"error: {hparams_json}: the run's hparams are damaged (invalid "
                           "JSON: ")
    assert line.endswith("restore the file from a copy of the run, or train in a new "
                         "--output_dir")
    assert _steps(output_dir) == [2, 4]

    (output_dir / "flags.json").write_text("[]")
    (tmp_path / "in.txt").write_text("0 1\n")
    hparams_json.write_bytes((trained / "hparams.json").read_bytes())
    line = _error_line(_run("--mode=decode", f"--output_dir={output_dir}",
                            f"--decode_from_file={tmp_path / 'in.txt'}", cwd=tmp_path))
    assert line.startswith(f"error: {output_dir / 'flags.json'}: the run's flags must be a "
                           "JSON object, not list")


def test_hparams_json_of_another_set_or_damaged_is_one_line_naming_it(tmp_path):
    from t2t_lite.errors import UserError

    path = tmp_path / "hparams.json"
    path.write_text('{"hidden_sise": 32}')
    with pytest.raises(UserError, match=rf"^{path}: Unknown hparam 'hidden_sise'.* use the "
                                        "set the run was trained with"):
        create_hparams("transformer_tiny", hparams_json_path=str(path))
    path.write_text('{"hidden_size": 3')
    with pytest.raises(UserError, match=rf"^{path}: the run's hparams are damaged \(invalid "
                                        r"JSON: Expecting ',' delimiter at line 1 column 18\)"):
        create_hparams("transformer_tiny", hparams_json_path=str(path))
    assert run_metadata.read_json_object(str(tmp_path / "absent.json"), "x") is None


def test_run_card_history_adds_one_entry_per_resume(tmp_path):
    run_card.record_eval(str(tmp_path), 4, {"loss": 1.5})
    run_card.record_resume(str(tmp_path), 4, ["train_steps 4 -> 6"])
    run_card.record_resume(str(tmp_path), 6, [])
    card = run_card.read(str(tmp_path))
    assert [key for key in card["history"] if key != "updated"] == [
        "1. resumed at step 4", "2. resumed at step 6"]
    assert card["history"]["2. resumed at step 6"] == "(no setting changed)"
    assert card["eval"]["loss"] == 1.5  # other sections kept
    assert "| 1. resumed at step 4 | train_steps 4 -> 6 |" in (
        tmp_path / run_card.MARKDOWN_NAME).read_text()


# --- The classification of the hparams ---------------------------------------------------------
_BASE = ("hidden_size=8,filter_size=8,num_heads=2,num_hidden_layers=1,symbol_modality_num_shards=1,"
         "batch_shuffle_size=4")
# A value other than transformer_tiny's for each hparam built below, among those t2t_lite
# supports; `_other_value` steps a number or flips a bool for the others.
_OTHER_VALUES = {
    "hidden_size": 16, "num_heads": 4, "vocab_divisor": 4, "attention_key_channels": 4,
    "attention_value_channels": 4, "num_encoder_layers": 2, "num_decoder_layers": 2, "norm_epsilon": 0.5,
    "layer_preprocess_sequence": "none", "layer_postprocess_sequence": "dan",
    "norm_type": "none", "optimizer": "multistep_adam", "pos": "none",
    "multiply_embedding_mode": "none", "learning_rate_schedule": "constant",
    "activation_dtype": "bfloat16", "self_attention_type": "dot_product_relative",
}
# Hparams whose effect shows only beside another setting: (extra base override).
_WHEN = {"shared_embedding": "shared_embedding_and_softmax_weights=False",
         "optimizer": "optimizer_multistep_accumulate_steps=2",
         "optimizer_multistep_accumulate_steps": "optimizer=multistep_adam,"
                                                 "optimizer_multistep_accumulate_steps=2",
         "self_attention_type": "max_relative_position=2",
         "max_relative_position": "self_attention_type=dot_product_relative,"
                                  "max_relative_position=2"}
# A sample of the hparams safe to change on resume (every name outside the two lists is).
_SAFE_SAMPLE = ("learning_rate_constant", "learning_rate_schedule", "learning_rate_warmup_steps",
                "batch_size", "label_smoothing", "relu_dropout", "optimizer_adam_beta2",
                "optimizer_multistep_accumulate_steps", "activation_dtype", "initializer_gain")
# Those with a single value in t2t_lite today: nothing to build.
_SINGLE_VALUE = ("ffn_layer",)


def _other_value(name, value):
    if name in _OTHER_VALUES:
        return _OTHER_VALUES[name]
    if isinstance(value, bool):
        return not value
    return value + 1 if isinstance(value, int) else value / 2


@functools.cache
def _base(overrides: str):
    """The tiny hparams with `overrides` and their `_build` (shared by the hparams tried)."""
    hparams = create_hparams("transformer_tiny", overrides)
    return hparams, _build(hparams)


def _build(hparams):
    """A tiny Transformer on 11 symbols, its logits for one example, and the checkpoint's
    variables {name: shape} (model weights, optimizer slots, gradient accumulators)."""
    keras.utils.set_random_seed(0)
    model = registry.model("transformer")(hparams, 11, 11)
    features = {"inputs": tf.constant([[2, 3, 4, 1]]), "targets": tf.constant([[5, 6, 1]]),
                "target_space_id": tf.constant(0)}
    logits = model(features, training=False)
    state = optimize.OptimizerState(hparams)
    state.build(model.trainable_variables)
    # The first path component is the model's unique name (transformer, transformer_1, ...).
    variables = {v.path.split("/", 1)[1]: tuple(v.shape) for v in model.variables}
    for v in state.optimizer.variables:
        variables["optimizer/" + v.name] = tuple(v.shape)
    for i, v in enumerate(state.accumulator.slots if state.accumulator else ()):
        variables[f"grad_acc/{i}"] = tuple(v.shape)
    return model, features, logits.numpy(), variables


def _effect(name):
    """What changing hparam `name` alone does to a tiny model: "changes variables",
    "changes computation" (same variables, other logits from the same weights) or "safe"."""
    base, (model, features, logits, variables) = _base(
        ",".join(filter(None, [_BASE, _WHEN.get(name)])))
    changed = base.copy()
    changed.set_hparam(name, _other_value(name, base.get(name)))
    other, _, _, other_variables = _build(changed)
    if other_variables != variables:
        return "changes variables"
    other.set_weights(model.get_weights())
    same = np.allclose(other(features, training=False).numpy(), logits, atol=1e-6)
    return "safe" if same else "changes computation"


@pytest.mark.slow
def test_hparams_classification_matches_the_variables_and_outputs_of_a_tiny_model():
    """Changed alone, each hparam of CHANGES_VARIABLES changes the checkpoint's variables,
    each of CHANGES_COMPUTATION keeps them but changes the logits of the same weights, and
    the safe ones change neither."""
    expected = {name: "changes variables" for name in run_metadata.CHANGES_VARIABLES}
    expected.update({name: "changes computation"
                     for name in run_metadata.CHANGES_COMPUTATION})
    expected.update({name: "safe" for name in _SAFE_SAMPLE})
    for name in _SINGLE_VALUE:
        del expected[name]
    assert {name: _effect(name) for name in expected} == expected


def _resume_many_times(output_dir: str, count: int) -> None:
    for step in range(count):
        run_card.record_resume(output_dir, step, [])


def test_concurrent_card_updates_are_not_lost(tmp_path):
    """A training run's and an eval's updates of the card at the same moment both land."""
    import multiprocessing

    writer = multiprocessing.get_context("fork").Process(
        target=_resume_many_times, args=(str(tmp_path), 40))
    writer.start()
    for step in range(40):
        run_card.record_eval(str(tmp_path), step, {"loss": 1.0})
    writer.join()
    assert writer.exitcode == 0
    card = run_card.read(str(tmp_path))
    assert len([key for key in card["history"] if key != "updated"]) == 40
    assert card["eval"]["step"] == 39
