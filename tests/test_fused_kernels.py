"""End to end: a tiny Transformer trained 5 steps with every dropout on and label smoothing,
with the hand-written kernels of `fused_ops` (hparams.use_fused_kernels=True) and with
plain TensorFlow ops (False), in float32, bfloat16 and float16 (loss scaling)."""
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.utils import trainer_lib
from tests.trainer_utils import ReverseProblem, model_fn, read_events, tiny_hparams

STEPS = 5
_RUNS: dict = {}


def _losses(tmp_path_factory, fused: bool, dtype: str = "float32",
            dropout_seed: int | None = None) -> np.ndarray:
    """The training loss of each of the STEPS steps (float64 [STEPS]); runs are cached."""
    key = (fused, dtype, dropout_seed)
    if key not in _RUNS:
        hparams = tiny_hparams(dropout=0.2, label_smoothing=0.1, activation_dtype=dtype,
                               use_fused_kernels=fused)
        output_dir = str(tmp_path_factory.mktemp("run"))
        tf.keras.utils.set_random_seed(1)  # the same initial weights in every run
        trainer = trainer_lib.Trainer(
            model_fn(hparams), hparams, ReverseProblem(), "",
            trainer_lib.RunConfig(output_dir=output_dir, train_steps=STEPS,
                                  log_step_count_steps=1, random_seed=1,
                                  num_decode_examples=0))
        assert trainer.model.body.encoder.layer_0.ffn.fused is fused
        if dropout_seed is not None:
            trainer.dropout_base_seed = dropout_seed  # other masks, same data and weights
        trainer.train()
        losses = [float(v) for _, v in sorted(read_events(output_dir)["loss"])]
        assert len(losses) == STEPS and np.isfinite(losses).all()
        _RUNS[key] = np.array(losses)
    return _RUNS[key]


@pytest.mark.slow
def test_float32_fused_and_plain_train_to_the_same_losses_with_the_same_masks(
        tmp_path_factory):
    fused = _losses(tmp_path_factory, fused=True)
    plain = _losses(tmp_path_factory, fused=False)
    np.testing.assert_allclose(plain, fused, rtol=1e-5)
    # The masks matter: other masks (another dropout seed) give other losses from the first
    # step on, so equal losses at every step mean equal masks on both paths.
    other_masks = _losses(tmp_path_factory, fused=True, dropout_seed=2)
    assert abs(other_masks[0] - fused[0]) > 1e-3 * fused[0]


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("fused", [True, False])
def test_half_precision_stays_within_its_tolerance_of_float32(tmp_path_factory, dtype, fused):
    reference = _losses(tmp_path_factory, fused=True)
    half = _losses(tmp_path_factory, fused=fused, dtype=dtype)
    np.testing.assert_allclose(half, reference, rtol=2e-2)
