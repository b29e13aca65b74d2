"""--warm_start_from: original t2t checkpoints (the fixture reproduces t2t's eval loss), t2t_lite
checkpoints through build_trainer, and refusals that list what did not match."""
import types

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import registry
from t2t_lite.bin import t2t_trainer
from t2t_lite.hparams import HParams
from t2t_lite.hparams_lib import create_hparams
from t2t_lite.models.transformer import Transformer
from t2t_lite.training import trainer_lib, warm_start
from tests.trainer_utils import IdEncoder

FIXTURE_VOCAB = 1018


class FixtureDevProblem:
    """The 3 dev pairs of the t2t fixture as a problem with one eval batch."""

    name = "translate_toy_fixture"
    was_reversed = False

    def __init__(self, npz):
        self.data = {"inputs": npz["inputs"], "targets": npz["targets"]}

    def get_hparams(self, model_hparams=None, data_dir=None):
        return HParams(vocab_size={"inputs": FIXTURE_VOCAB, "targets": FIXTURE_VOCAB},
                       target_space_id=0, loss_multiplier=1.0)

    def eval_metrics(self):
        return ["accuracy"]

    def get_feature_encoders(self, data_dir=None):
        return {"inputs": IdEncoder(), "targets": IdEncoder()}

    def dataset(self, mode, data_dir, hparams, input_context=None, seed=None):
        ds = tf.data.Dataset.from_tensor_slices(self.data)
        return (ds.repeat() if mode == "train" else ds).batch(3)


def test_t2t_checkpoint_warm_starts_to_t2t_eval_loss(t2t_fixtures, tmp_path):
    npz = np.load(t2t_fixtures / "model_A_trained.npz")
    hparams = create_hparams("transformer_tiny")
    config = trainer_lib.RunConfig(output_dir=str(tmp_path), eval_steps=1,
                                   num_decode_examples=0)
    trainer = trainer_lib.Trainer(lambda: Transformer(hparams, FIXTURE_VOCAB, FIXTURE_VOCAB),
                                  hparams, FixtureDevProblem(npz), "", config)
    from_scratch = trainer.evaluate()["loss"]
    report = warm_start.warm_start(trainer.model, str(t2t_fixtures / "ckpt_A_trained"))
    assert report.kind == "t2t" and report.complete and not report.unused
    assert len(report.loaded) == len(trainer.model.trainable_variables)
    loss = trainer.evaluate()["loss"]
    assert abs(loss - float(npz["loss_eval"])) < 1e-4, (loss, float(npz["loss_eval"]))
    assert abs(from_scratch - loss) > 1.0
    assert trainer.step == 0


def test_t2t_checkpoint_of_another_architecture_fails_with_the_list(t2t_fixtures):
    hparams = create_hparams("transformer_tiny", "filter_size=256")
    model = Transformer(hparams, FIXTURE_VOCAB, FIXTURE_VOCAB)
    before = [v.numpy() for v in model.trainable_variables]
    with pytest.raises(warm_start.WarmStartError) as info:
        warm_start.warm_start(model, str(t2t_fixtures / "ckpt_A_trained"))
    text = str(info.value)
    # conv1 kernel + bias and conv2 kernel in each of 2 encoder + 2 decoder layers.
    assert "12 of the model's" in text and "--warm_start_partial" in text
    # One line naming the first few (the logged warning of a partial start lists them all).
    assert "\n" not in text and "(+8 more)" in text
    assert ("transformer/body/decoder/layer_0/ffn/conv1/kernel: checkpoint [128, 512] vs "
            "model [128, 256]") in text
    for a, b in zip(before, model.trainable_variables):  # nothing assigned
        np.testing.assert_array_equal(a, b.numpy())
    report = warm_start.warm_start(model, str(t2t_fixtures / "ckpt_A_trained"),
                                   allow_partial=True)
    assert len(report.mismatched) == 12 and not report.missing
    assert len(report.loaded) == len(model.trainable_variables) - 12

    other = Transformer(create_hparams("transformer_tiny", "hidden_size=64,filter_size=256"),
                        100, 100)
    with pytest.raises(warm_start.WarmStartError, match="none of the model's"):
        warm_start.warm_start(other, str(t2t_fixtures / "ckpt_A_trained"), allow_partial=True)


def _flags(tmp_path, output, **overrides):
    values = {
        "problem": "algorithmic_reverse_binary40_test", "hparams_set": "transformer_tiny",
        "hparams": "hidden_size=32,filter_size=64,num_heads=2,symbol_modality_num_shards=4,"
                   "batch_shuffle_size=4",
        "output_dir": str(tmp_path / output), "data_dir": str(tmp_path / "data"),
        "model": "transformer", "generate_data": False, "tmp_dir": str(tmp_path / "tmp"),
        "train_steps": 2, "eval_steps": 1, "local_eval_frequency": 2,
        "save_checkpoints_steps": None, "keep_checkpoint_max": 3, "log_step_count_steps": 1,
        "random_seed": 1, "deterministic": False, "eval_use_test_set": False,
        "warm_start_from": None, "warm_start_partial": False,
    }
    values.update(overrides)
    return types.SimpleNamespace(**values)


@pytest.mark.slow
def test_t2t_lite_checkpoint_warm_start_through_build_trainer(tmp_path):
    registry.problem("algorithmic_reverse_binary40_test").generate_data(
        str(tmp_path / "data"), str(tmp_path / "tmp"))
    strategy = tf.distribute.get_strategy()
    first = t2t_trainer.build_trainer(_flags(tmp_path, "first"), strategy)
    first.train()
    trained = {v.path: v.numpy() for v in first.model.trainable_variables}

    second = t2t_trainer.build_trainer(
        _flags(tmp_path, "second", warm_start_from=str(tmp_path / "first")), strategy)
    assert second.step == 0
    for v in second.model.trainable_variables:
        np.testing.assert_array_equal(v.numpy(), trained[v.path], err_msg=v.path)

    with pytest.raises(warm_start.WarmStartError) as info:
        t2t_trainer.build_trainer(_flags(
            tmp_path, "third", warm_start_from=str(tmp_path / "first"),
            hparams="hidden_size=32,filter_size=64,num_heads=2,symbol_modality_num_shards=4,"
                    "num_hidden_layers=3"), strategy)
    text = str(info.value)
    assert "did not match this t2t_lite checkpoint" in text
    assert "missing from the checkpoint" in text
    assert "transformer/body/decoder/layer_2/" in text and "(+26 more)" in text
    partial = t2t_trainer.build_trainer(_flags(
        tmp_path, "fourth", warm_start_from=str(tmp_path / "first"), warm_start_partial=True,
        hparams="hidden_size=32,filter_size=64,num_heads=2,symbol_modality_num_shards=4,"
                "num_hidden_layers=3"), strategy)
    layer0 = "transformer/body/encoder/layer_0/ffn/conv1/kernel"
    np.testing.assert_array_equal(
        next(v for v in partial.model.trainable_variables if v.path == layer0).numpy(),
        trained[layer0])
