"""import_t2t with the optimizer state: t2t Transformer checkpoints trained with Adafactor and
with Adam (true_adam) by the ORIGINAL tensor2tensor (tests/fixtures/t2t_adafactor_transformer,
made by its make_fixture.py with tensor2tensor 1.15.7) import with their slots, the trainer
resumes them, and one more t2t_lite step gives t2t's next weights and slots."""
import json
import logging
import pathlib
import re
import types

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import registry
from t2t_lite.bin import import_t2t
from t2t_lite.errors import UserError
from t2t_lite.hparams import HParams
from t2t_lite.hparams_lib import create_hparams
from t2t_lite.models import t2t_checkpoint
from t2t_lite.models.transformer import Transformer
from t2t_lite.training import adafactor, t2t_import, trainer_lib
from t2t_lite.utils import run_metadata
from tests import run_py

FIXTURE = pathlib.Path(__file__).resolve().parent / "fixtures" / "t2t_adafactor_transformer"
META = json.loads((FIXTURE / "adafactor_transformer.json").read_text())
RUNS = META["runs"]  # "adafactor", "true_adam"
VOCAB = META["vocab_size"]
STEPS = META["steps"]
OPTIMIZER_SLOT_RE = re.compile(r".*/(Adafactor|Adam)(_\d+)?")


def _overrides(run: str) -> str:
    return ",".join(f"{k}={v}" for k, v in RUNS[run]["overrides"].items())


OVERRIDES = _overrides("adafactor")


class FixtureProblem:
    """The fixture's problem as the trainer sees it: vocab 20, target_space_id 1."""

    name = "t2t_adafactor_fixture"
    was_reversed = False

    def get_hparams(self, model_hparams=None, data_dir=None):
        return HParams(vocab_size={"inputs": VOCAB, "targets": VOCAB}, target_space_id=1,
                       loss_multiplier=1.0)

    def eval_metrics(self):
        return ["accuracy"]


def _resumed_trainer(output_dir) -> trainer_lib.Trainer:
    """What `--mode=train --output_dir=<import>` builds and restores: `create_trainer` as a
    training run (hparams: the set, then the import's hparams.json; the resume checks; the run
    lock) and the restore `train` starts with."""
    trainer = trainer_lib.create_trainer(
        FixtureProblem(), META["hparams_set"], "", "transformer", "",
        trainer_lib.RunConfig(output_dir=str(output_dir)), lock=True)
    trainer.restore(trainer._checkpoint_manager())
    trainer.run_lock.release()
    return trainer


def _t2t_checkpoint_values(run: str = "adafactor") -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(str(FIXTURE / RUNS[run]["checkpoint"]))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


@pytest.fixture(scope="module", params=list(RUNS))
def imported(request, tmp_path_factory):
    """(run name, the import's output_dir, its checkpoint path)."""
    run = request.param
    out = tmp_path_factory.mktemp(f"imported_{run}")
    path = t2t_import.import_checkpoint(str(FIXTURE / RUNS[run]["checkpoint"]),
                                        create_hparams(META["hparams_set"], _overrides(run)),
                                        str(out))
    return run, out, path


def _slot_names(trainer) -> dict[str, tf.Variable]:
    """t2t name -> the trainer's optimizer slot, under t2t's "training" scope. Adafactor: by
    `t2t_slot_names` (checked against t2t in test_adafactor); Adam: TF1's `<w>/Adam` (first
    moment) and `<w>/Adam_1` (second)."""
    optimizer = trainer.optimizer.inner_optimizer
    names = {}
    for name, var in t2t_checkpoint.t2t_variable_map(trainer.model).items():
        if isinstance(optimizer, adafactor.Adafactor):
            slots = optimizer.slots(var)
            for slot, t2t_name in adafactor.t2t_slot_names(name, var.shape, optimizer.beta1,
                                                           optimizer.factored).items():
                names[f"training/{t2t_name}"] = slots[slot]
        else:
            index = optimizer._get_variable_index(var)
            names[f"training/{name}/Adam"] = optimizer._momentums[index]
            names[f"training/{name}/Adam_1"] = optimizer._velocities[index]
    return names


def test_import_writes_every_slot_and_the_trainer_resumes_them(imported, caplog):
    run, out, path = imported
    assert path.endswith(f"ckpt-{STEPS}")
    info = json.loads((out / "t2t_import.json").read_text())
    assert (info["global_step"], info["optimizer_state"]) == (STEPS, run)
    with caplog.at_level(logging.WARNING):
        trainer = _resumed_trainer(out)
    assert "holds no optimizer state" not in caplog.text
    assert trainer.step == STEPS
    optimizer = trainer.optimizer.inner_optimizer
    assert int(optimizer.iterations.numpy()) == STEPS
    t2t = _t2t_checkpoint_values(run)
    slots = _slot_names(trainer)
    # Every slot t2t saved (Adafactor: m, vr/vc or v; Adam: m, v) is one of the trainer's,
    # and back.
    assert set(slots) == {n for n in t2t if OPTIMIZER_SLOT_RE.fullmatch(n)}
    for name, var in slots.items():
        np.testing.assert_array_equal(var.numpy(), t2t[name], err_msg=name)
    assert any(np.abs(t2t[n]).max() > 0 for n in slots if n.endswith(("/Adafactor", "/Adam")))
    for name, var in t2t_checkpoint.t2t_variable_map(trainer.model).items():
        np.testing.assert_array_equal(var.numpy(), t2t[name], err_msg=name)
    if run == "true_adam":
        # TF1's beta powers after STEPS updates are Keras' bias corrections at iterations =
        # global_step: beta ** (STEPS + 1).
        for power, beta in (("beta1_power", optimizer.beta_1), ("beta2_power",
                                                                  optimizer.beta_2)):
            np.testing.assert_allclose(t2t[f"training/{power}"], beta ** (STEPS + 1),
                                       rtol=1e-6)


def test_one_more_step_gives_t2t_next_weights_and_slots(imported):
    run, out, _ = imported
    trainer = _resumed_trainer(out)
    data = np.load(FIXTURE / RUNS[run]["next_step"])
    # The trainer's learning rate at the resumed step is t2t's (constant / sqrt(3)).
    np.testing.assert_allclose(float(trainer.optimizer.learning_rate(STEPS)),
                               data["learning_rate"], rtol=1e-6)
    out_step = trainer._replica_train_step(
        {"inputs": tf.constant(data["inputs"]), "targets": tf.constant(data["targets"])},
        update=True, with_grads=False)
    np.testing.assert_allclose(float(out_step["num"] / out_step["den"]), data["loss"],
                               rtol=1e-5)
    assert int(trainer.optimizer.inner_optimizer.iterations.numpy()) == STEPS + 1
    before = _t2t_checkpoint_values(run)
    moved = 0
    for name, var in t2t_checkpoint.t2t_variable_map(trainer.model).items():
        np.testing.assert_allclose(var.numpy(), data[name], rtol=0, atol=1e-5, err_msg=name)
        moved += not np.allclose(data[name], before[name], rtol=0, atol=1e-4)
    assert moved > len(before) // 10  # the step is not a no-op
    for name, var in _slot_names(trainer).items():
        np.testing.assert_allclose(var.numpy(), data[name], rtol=1e-5, atol=1e-7,
                                   err_msg=name)


def _write_t2t_style(prefix: pathlib.Path, tensors: dict[str, np.ndarray]) -> str:
    """A name-based (TF1-style) checkpoint with exactly these variables."""
    names = sorted(tensors)
    tf.raw_ops.SaveV2(prefix=str(prefix), tensor_names=names,
                      shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(tensors[n]) for n in names])
    return str(prefix)


def test_checkpoint_without_optimizer_state_imports_as_before(tmp_path, caplog):
    weights = {n: v for n, v in _t2t_checkpoint_values().items() if "Adafactor" not in n}
    prefix = _write_t2t_style(tmp_path / "model.ckpt-3", weights)
    out = tmp_path / "imported"
    path = t2t_import.import_checkpoint(prefix, create_hparams(META["hparams_set"], OVERRIDES),
                                        str(out))
    assert not [n for n, _ in tf.train.list_variables(path) if n.startswith("optimizer/")]
    assert json.loads((out / "t2t_import.json").read_text())["optimizer_state"] is None
    with caplog.at_level(logging.WARNING):
        trainer = _resumed_trainer(out)
    assert "holds no optimizer state" in caplog.text and trainer.step == STEPS
    for name, var in t2t_checkpoint.t2t_variable_map(trainer.model).items():
        np.testing.assert_array_equal(var.numpy(), weights[name], err_msg=name)


@pytest.mark.parametrize("optimizer", ["adam", "yellow_fin"])
def test_state_of_another_optimizer_is_left_out(tmp_path, caplog, optimizer):
    """Another hparams.optimizer on a checkpoint trained with Adafactor: the weights import,
    the Adafactor slots are not read (logged), and training starts afresh. yellow_fin (t2t's,
    not t2t_lite's): no optimizer is built, the import still serves decoding."""
    hparams = create_hparams(META["hparams_set"],
                             OVERRIDES.replace("optimizer=adafactor", f"optimizer={optimizer}"))
    with caplog.at_level(logging.WARNING):
        path = t2t_import.import_checkpoint(str(FIXTURE / "ckpt"), hparams,
                                            str(tmp_path / "out"))
    assert f"hparams.optimizer={optimizer} does not read" in caplog.text
    assert "Adafactor" in caplog.text
    assert not [n for n, _ in tf.train.list_variables(path) if n.startswith("optimizer/")]


def test_partial_or_mismatched_optimizer_state_writes_nothing(tmp_path):
    values = _t2t_checkpoint_values()
    dropped = "training/transformer/body/encoder/layer_0/ffn/conv1/kernel/Adafactor_2"
    del values[dropped]
    prefix = _write_t2t_style(tmp_path / "model.ckpt-3", values)
    hparams = create_hparams(META["hparams_set"], OVERRIDES)
    with pytest.raises(t2t_checkpoint.T2TCheckpointError,
                       match=f"Missing from the checkpoint \\(1\\):\n  {dropped}"):
        t2t_import.import_checkpoint(prefix, hparams, str(tmp_path / "partial"))
    assert not (tmp_path / "partial").exists()
    # beta1 0: t2t would have no `m`, so `<w>/Adafactor` would be `vr` (another shape).
    no_momentum = create_hparams(META["hparams_set"],
                                 OVERRIDES.replace("beta1=0.9", "beta1=0.0"))
    with pytest.raises(t2t_checkpoint.T2TCheckpointError,
                       match=r"conv1/kernel/Adafactor: checkpoint \[16, 32\] vs optimizer "
                             r"\[16\]"):
        t2t_import.import_checkpoint(str(FIXTURE / "ckpt"), no_momentum,
                                     str(tmp_path / "mismatch"))
    assert not (tmp_path / "mismatch").exists()


def test_import_t2t_mode_records_the_hparams_set_a_resume_keeps(tmp_path):
    """run.py --mode=import_t2t: flags.json names the hparams set and model, so that resuming
    with another set is refused in one line, and the same set resumes the optimizer state."""
    out = tmp_path / "run"
    import_t2t.main(types.SimpleNamespace(
        checkpoint_path=str(FIXTURE / "ckpt"), hparams_set=META["hparams_set"],
        hparams=OVERRIDES, output_dir=str(out)))
    assert json.loads((out / "flags.json").read_text()) == {
        "hparams_set": META["hparams_set"], "model": "transformer"}
    with pytest.raises(UserError, match="hparams_set 'transformer_tiny' -> 'transformer_base'"):
        run_metadata.check_identity(str(out), {"problem": FixtureProblem.name,
                                               "model": "transformer",
                                               "hparams_set": "transformer_base"})
    trainer = _resumed_trainer(out)
    assert int(trainer.optimizer.inner_optimizer.iterations.numpy()) == STEPS
    # Slots that do not fit the hparams: one line (run.py prints it as `error: ...`).
    with pytest.raises(UserError, match=r"^t2t checkpoint .* Shape mismatches \(\d+\): "
                                        r"[^\n]*$"):
        import_t2t.main(types.SimpleNamespace(
            checkpoint_path=str(FIXTURE / "ckpt"), hparams_set=META["hparams_set"],
            hparams=OVERRIDES.replace("beta1=0.9", "beta1=0.0"),
            output_dir=str(tmp_path / "other")))
    assert not (tmp_path / "other").exists()


@pytest.mark.slow
def test_run_py_trains_on_from_an_import_with_adafactor_state(tiny_run_data_dir, tmp_path):
    """run.py end to end: --mode=import_t2t of a t2t-named checkpoint with Adafactor slots
    (written here for run_py.PROBLEM's vocab), then --mode=train on the import resumes at its
    global step with the slots (no "starts afresh" warning) and saves the optimizer on."""
    hparams = create_hparams("transformer_tiny", f"{run_py.TINY},optimizer=adafactor")
    vocab = registry.problem(run_py.PROBLEM).get_hparams(hparams, str(tiny_run_data_dir))
    model = Transformer(hparams, vocab.vocab_size.get("inputs", vocab.vocab_size["targets"]),
                        vocab.vocab_size["targets"])
    rng = np.random.default_rng(0)
    tensors = {"global_step": np.int64(5)}
    for name, var in t2t_checkpoint.t2t_variable_map(model).items():
        tensors[name] = var.numpy()
        for slot, t2t_name in adafactor.t2t_slot_names(name, var.shape, 0.0, True).items():
            shape = {"vr": var.shape[:-1], "vc": var.shape[:-2] + var.shape[-1:]}.get(
                slot, var.shape)
            tensors[f"training/{t2t_name}"] = rng.uniform(0.01, 1.0, shape).astype(np.float32)
    prefix = _write_t2t_style(tmp_path / "model.ckpt-5", tensors)
    out = tmp_path / "imported"
    result = run_py.run("--mode=import_t2t", f"--checkpoint_path={prefix}",
                        "--hparams_set=transformer_tiny",
                        f"--hparams={run_py.TINY},optimizer=adafactor", f"--output_dir={out}",
                        cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    result = run_py.run(*run_py.train_flags(tiny_run_data_dir, out, "--train_steps=7"),
                        cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Resuming training at global step 5" in result.stderr
    assert "holds no optimizer state" not in result.stderr
    assert run_py.steps(out) == [5, 6, 7]
    reader = tf.train.load_checkpoint(str(out / "ckpt-7"))
    assert int(reader.get_tensor("optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE")) == 7
