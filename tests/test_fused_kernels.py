"""End to end: a tiny Transformer trained 5 steps with every dropout on and label smoothing,
with the hand-written kernels of `fused_ops` (hparams.use_fused_kernels=True) and with
plain TensorFlow ops (False), in float32, bfloat16 and float16 (loss scaling)."""
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.decoding import runs
from t2t_lite.export import export
from t2t_lite.hparams import HParams
from t2t_lite.training import trainer_lib
from tests.trainer_utils import VOCAB, ReverseProblem, model_fn, read_events, tiny_hparams

STEPS = 5
_RUNS: dict = {}


def _hparams(fused: bool, dtype: str) -> HParams:
    return tiny_hparams(dropout=0.2, label_smoothing=0.1, activation_dtype=dtype,
                        use_fused_kernels=fused)


def _run(tmp_path_factory, fused: bool, dtype: str = "float32",
         dropout_seed: int | None = None) -> tuple[np.ndarray, str]:
    """(the training loss of each of the STEPS steps, float64 [STEPS]; the run's directory
    with its last checkpoint); runs are cached."""
    key = (fused, dtype, dropout_seed)
    if key not in _RUNS:
        hparams = _hparams(fused, dtype)
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
        _RUNS[key] = np.array(losses), output_dir
    return _RUNS[key]


def _losses(tmp_path_factory, fused: bool, dtype: str = "float32",
            dropout_seed: int | None = None) -> np.ndarray:
    return _run(tmp_path_factory, fused, dtype, dropout_seed)[0]


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


@pytest.mark.slow
def test_a_bfloat16_run_decodes_and_serves_in_bfloat16(tmp_path_factory):
    output_dir = _run(tmp_path_factory, fused=True, dtype="bfloat16")[1]
    problem = ReverseProblem()
    model = runs.load_model("transformer", _hparams(True, "bfloat16"), problem.get_hparams(),
                                tf.train.latest_checkpoint(output_dir))
    assert model.body.decoder.layer_0.self_attention.compute_dtype == "bfloat16"
    inputs = tf.constant(problem.data["eval"]["inputs"][:4])
    for beam_size in (1, 3):
        result = model.infer({"inputs": inputs}, decode_length=3, beam_size=beam_size)
        ids = result["outputs"].numpy()
        assert ids.shape[0] == 4 and ((ids >= 0) & (ids < VOCAB)).all()
        assert np.isfinite(result["scores"].numpy()).all()
    module = export.ServingModule(
        model, None, None, HParams(beam_size=3, alpha=0.6, extra_length=3, return_beams=False),
        max_input_length=None, target_space_id=0)
    path = export.export(module, str(tmp_path_factory.mktemp("export")))
    served = tf.saved_model.load(path).signatures["encode_decode_ids"](inputs=inputs)
    expected = module.encode_decode_ids(inputs)
    np.testing.assert_array_equal(served["outputs"], expected["outputs"])
    np.testing.assert_allclose(served["scores"], expected["scores"], rtol=1e-6)
