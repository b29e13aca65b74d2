"""Adafactor against the ORIGINAL tensor2tensor's (fixture written by
tests/fixtures/t2t_adafactor/make_fixture.py with t2t 1.15.7), and from hparams."""
import json
import pathlib

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.hparams_lib import create_hparams
from t2t_lite.training import adafactor, optimize

FIXTURE_DIR = pathlib.Path(__file__).resolve().parent / "fixtures" / "t2t_adafactor"


class _StepDependentRate(keras.optimizers.schedules.LearningRateSchedule):
    """The fixture's learning rate: 0.01 * (global step + 1)."""

    def __call__(self, step):
        return 0.01 * (tf.cast(step, tf.float32) + 1.0)


@pytest.fixture(scope="module")
def fixture():
    meta = json.loads((FIXTURE_DIR / "adafactor.json").read_text())
    return meta, np.load(FIXTURE_DIR / "adafactor.npz")


@pytest.mark.parametrize("config", ["default", "adam_decay_momentum_unfactored",
                                    "momentum_low_clip_exponent"])
def test_updates_and_slots_equal_t2t(fixture, config):
    meta, arrays = fixture
    hparams = create_hparams("transformer_tiny", "optimizer=adafactor")
    for name, value in meta["configs"][config].items():
        hparams.set_hparam(name, value)
    optimizer = optimize._adafactor_from_hparams(hparams, _StepDependentRate())
    names = list(meta["shapes"])
    variables = [tf.Variable(arrays[f"{config}/{n}/initial"]) for n in names]
    optimizer.build(variables)
    for step in range(meta["steps"]):
        optimizer.apply([tf.constant(arrays[f"{config}/{n}/grads"][step]) for n in names],
                        variables)
        for n, v in zip(names, variables):
            np.testing.assert_allclose(v.numpy(), arrays[f"{config}/{n}/after_{step + 1}"],
                                       rtol=0, atol=1e-6, err_msg=f"{n} after {step + 1}")
    for n, v in zip(names, variables):
        slots = optimizer.slots(v)
        expected = {key.split("/")[1] for key in meta["slot_names"][config] if
                    key.startswith(n + "/")}
        assert set(slots) == expected
        for slot, var in slots.items():
            np.testing.assert_allclose(var.numpy(), arrays[f"{config}/{n}/slot_{slot}"],
                                       rtol=1e-5, atol=1e-8, err_msg=f"{n}/{slot}")


@pytest.mark.parametrize("config", ["default", "momentum_low_clip_exponent"])
def test_t2t_slot_names(fixture, config):
    meta, _ = fixture
    hparams = dict(create_hparams("transformer_tiny").values(), **meta["configs"][config])
    for n, shape in meta["shapes"].items():
        names = adafactor.t2t_slot_names(n, shape, hparams["optimizer_adafactor_beta1"],
                                         hparams["optimizer_adafactor_factored"])
        assert names == {key.split("/")[1]: value
                         for key, value in meta["slot_names"][config].items()
                         if key.startswith(n + "/")}


def test_factored_slots_are_row_and_column_sized():
    optimizer = adafactor.Adafactor(0.1)
    matrix, cube, vector = tf.Variable(tf.ones([6, 4])), tf.Variable(tf.ones([2, 3, 4])), \
        tf.Variable(tf.ones([5]))
    optimizer.build([matrix, cube, vector])
    assert {k: tuple(v.shape) for k, v in optimizer.slots(matrix).items()} == {
        "vr": (6,), "vc": (4,)}
    assert {k: tuple(v.shape) for k, v in optimizer.slots(cube).items()} == {
        "vr": (2, 3), "vc": (2, 4)}
    assert {k: tuple(v.shape) for k, v in optimizer.slots(vector).items()} == {"v": (5,)}


@pytest.mark.parametrize("override,message", [
    ("optimizer_adafactor_decay_type=Adam", "decay_type='Adam'"),
    ("optimizer_adafactor_beta1=1.0", "beta1=1.0"),
    ("optimizer_adafactor_clipping_threshold=0.0", "clipping_threshold=0.0"),
])
def test_bad_adafactor_hparams_are_one_line(override, message):
    hparams = create_hparams("transformer_tiny", f"optimizer=adafactor,{override}")
    with pytest.raises(optimize.OptimizerError, match=message):
        optimize.optimizer_from_hparams(hparams)
