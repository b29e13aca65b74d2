"""Fast cached decoding (K/V caches, one position per step; growing, or preallocated under
XLA) gives the ids of full-recompute decoding, for greedy and beam search, on random models
and the t2t fixture."""
import contextlib

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.hparams_lib import create_hparams
from t2t_lite.models import t2t_checkpoint
from t2t_lite.models.transformer import BEAM_SLOT_BLOCK, Transformer

TINY = "hidden_size=16,filter_size=32,num_heads=4,num_hidden_layers=2,symbol_modality_num_shards=3"
INPUTS = np.array([[5, 9, 3, 7, 11, 1], [4, 8, 2, 1, 0, 0], [6, 1, 0, 0, 0, 0]], np.int32)


# Beam cases of the random-model comparisons: one beam of the pre-norm default, and three of
# the post-norm ("none"/"dan") layout.
BEAM_CASES = [(1, ""), (3, ",layer_preprocess_sequence=none,layer_postprocess_sequence=dan")]


def random_model(overrides="", vocab=(31, 31), seed=0):
    keras.utils.set_random_seed(seed)
    model = Transformer(create_hparams("transformer_tiny", TINY + overrides), *vocab)
    # Larger weights than the initializers' give peaked, varied distributions (fewer
    # near-ties, more EOS) so that the comparison is meaningful.
    for var in model.trainable_weights:
        if var.ndim == 2:
            var.assign(var * 3.0)
    return model


@pytest.fixture(scope="module")
def trained(t2t_fixtures):
    model = t2t_checkpoint.load_model(
        str(t2t_fixtures / "ckpt_A_trained"), create_hparams("transformer_tiny"))
    return model, dict(np.load(t2t_fixtures / "model_A_trained.npz"))


@pytest.mark.parametrize("overrides, vocab", [
    ("", (31, 31)),
    (",layer_preprocess_sequence=none,layer_postprocess_sequence=dan", (37, 29)),
])
def test_cached_greedy_equals_full_recompute(overrides, vocab):
    model = random_model(overrides, vocab)
    fast = model.infer({"inputs": INPUTS}, decode_length=7)
    slow = model.infer({"inputs": INPUTS}, decode_length=7, use_cache=False)
    assert fast["outputs"].shape == (3, 6 + 7)
    np.testing.assert_array_equal(fast["outputs"], slow["outputs"])
    np.testing.assert_allclose(fast["scores"], slow["scores"], rtol=1e-5)
    # The greedy ids also re-score consistently under teacher forcing: each id is the argmax
    # of the teacher-forced logits at its position.
    logits = model({"inputs": tf.constant(INPUTS), "targets": fast["outputs"]}).numpy()
    np.testing.assert_array_equal(logits.argmax(-1), fast["outputs"])


@pytest.mark.slow
@pytest.mark.parametrize("top_beams, overrides", BEAM_CASES)
def test_cached_beam_equals_full_recompute(top_beams, overrides):
    model = random_model(overrides, vocab=(37, 29), seed=2)
    kwargs = {"decode_length": 20, "beam_size": 3, "alpha": 0.6, "top_beams": top_beams}
    fast = model.infer({"inputs": INPUTS}, **kwargs)
    slow = model.infer({"inputs": INPUTS}, use_cache=False, **kwargs)
    # Long enough for the beam-slot storage to settle its recent positions twice.
    assert fast["outputs"].shape[-1] > 2 * BEAM_SLOT_BLOCK
    expected_shape = (3,) if top_beams == 1 else (3, top_beams)
    assert fast["scores"].shape == expected_shape
    np.testing.assert_array_equal(fast["outputs"], slow["outputs"])
    np.testing.assert_allclose(fast["scores"], slow["scores"], rtol=1e-5)


@pytest.mark.slow
def test_fixture_full_recompute_and_beam(trained):
    model, data = trained
    slow = model.infer({"inputs": data["inputs"]}, decode_length=20, use_cache=False)
    np.testing.assert_array_equal(slow["outputs"], data["greedy_outputs"])
    np.testing.assert_allclose(slow["scores"], data["greedy_scores"], atol=1e-4)
    fast_beam = model.infer({"inputs": data["inputs"]}, decode_length=20, beam_size=4)
    slow_beam = model.infer({"inputs": data["inputs"]}, decode_length=20, beam_size=4,
                            use_cache=False)
    np.testing.assert_array_equal(fast_beam["outputs"], slow_beam["outputs"])
    # Beam search finds "Die Aussprache ist geschlossen." + EOS for row 2, 0-padded after EOS.
    row = fast_beam["outputs"][2].numpy()
    np.testing.assert_array_equal(row[:12], data["greedy_outputs"][2, :12])
    assert (row[12:] == 0).all()


def test_greedy_stops_when_every_row_has_eos(trained):
    model, data = trained
    # Rows 1 and 2 of the fixture emit EOS at steps 7 and 12: decoding stops after 12 steps.
    out = model.infer({"inputs": data["inputs"][1:]}, decode_length=20)
    np.testing.assert_array_equal(out["outputs"], data["greedy_outputs"][1:, :12])
    np.testing.assert_allclose(out["scores"], data["greedy_scores"][1:], atol=1e-4)


def test_infer_inside_an_outer_tf_function(trained):
    model, data = trained

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32),
                                  tf.TensorSpec([], tf.int32)])
    def serve(inputs, extra):
        return model.infer({"inputs": inputs}, decode_length=extra)

    out = serve(tf.constant(data["inputs"]), tf.constant(20))
    np.testing.assert_array_equal(out["outputs"], data["greedy_outputs"])


def test_top1_sampling_equals_greedy_and_cache_shapes():
    model = random_model(",sampling_method=random,sampling_temp=0.7,sampling_keep_top_k=1")
    greedy = random_model()
    greedy.set_weights(model.get_weights())
    np.testing.assert_array_equal(
        model.infer({"inputs": INPUTS}, decode_length=4)["outputs"],
        greedy.infer({"inputs": INPUTS}, decode_length=4)["outputs"])
    cache = model.init_decode_cache(3, 10)
    assert sorted(cache) == ["layer_0", "layer_1"]
    assert cache["layer_0"]["k"].shape == (3, 4, 10, 4)


def test_bad_decode_arguments():
    model = random_model()
    with pytest.raises(ValueError, match="top_beams=3 must be between 1 and beam_size=2"):
        model.infer({"inputs": INPUTS}, beam_size=2, top_beams=3)
    with pytest.raises(ValueError, match="beam_size must be an int >= 1"):
        model.infer({"inputs": INPUTS}, beam_size=0)


@pytest.mark.slow
def test_xla_compiled_greedy_equals_graph_greedy(trained):
    model, data = trained
    out = model.infer({"inputs": data["inputs"]}, decode_length=20, jit_compile=True)
    np.testing.assert_array_equal(out["outputs"], data["greedy_outputs"])
    np.testing.assert_allclose(out["scores"], data["greedy_scores"], atol=1e-4)
    # Early stop (rows 1 and 2 emit EOS) under XLA as well.
    early = model.infer({"inputs": data["inputs"][1:]}, decode_length=20, jit_compile=True)
    np.testing.assert_array_equal(early["outputs"], data["greedy_outputs"][1:, :12])
    with pytest.raises(ValueError, match="needs the cached decoder"):
        model.infer({"inputs": data["inputs"]}, use_cache=False, jit_compile=True)


@pytest.mark.slow
def test_xla_compiled_beam_equals_graph_beam(trained):
    model, data = trained
    # 3 rows of 17 ids run as a padded [4, 24] batch; the steps still follow the 17.
    graph = model.infer({"inputs": data["inputs"]}, decode_length=20, beam_size=4)
    xla = model.infer({"inputs": data["inputs"]}, decode_length=20, beam_size=4,
                      jit_compile=True)
    assert xla["outputs"].shape == graph["outputs"].shape
    np.testing.assert_array_equal(xla["outputs"], graph["outputs"])
    np.testing.assert_allclose(xla["scores"], graph["scores"], atol=1e-4)
    row = xla["outputs"][2].numpy()  # "Die Aussprache ist geschlossen." + EOS, 0-padded
    np.testing.assert_array_equal(row[:12], data["greedy_outputs"][2, :12])


@pytest.mark.parametrize("top_beams, overrides", BEAM_CASES)
def test_xla_beam_on_random_models(top_beams, overrides):
    model = random_model(overrides, vocab=(37, 29), seed=1)
    kwargs = {"decode_length": 5, "beam_size": 3, "alpha": 0.6, "top_beams": top_beams}
    graph = model.infer({"inputs": INPUTS}, **kwargs)
    xla = model.infer({"inputs": INPUTS}, jit_compile=True, **kwargs)
    assert xla["outputs"].shape == graph["outputs"].shape
    np.testing.assert_array_equal(xla["outputs"], graph["outputs"])
    np.testing.assert_allclose(xla["scores"], graph["scores"], rtol=1e-5)
    # A batch of one row and a batch of two reuse the bucket shapes [1, 8] and [2, 8].
    for rows in (INPUTS[:1], INPUTS[1:]):
        alone = model.infer({"inputs": rows}, jit_compile=True, **kwargs)
        expected = model.infer({"inputs": rows}, **kwargs)
        np.testing.assert_array_equal(alone["outputs"], expected["outputs"])


def test_xla_bucket_shapes():
    from t2t_lite.models.transformer import xla_batch_bucket, xla_length_bucket

    assert [xla_length_bucket(n) for n in (1, 8, 9, 13, 17, 25, 33, 49, 65, 97, 129)] == [
        8, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192]
    assert [xla_batch_bucket(n) for n in (1, 2, 3, 20, 32, 33)] == [1, 2, 4, 32, 32, 64]


def _loop_body_ops(concrete_function) -> list[str]:
    """Op types of the while-loop bodies in a traced decode (nested bodies included)."""
    library = {f.signature.name: f for f in concrete_function.graph.as_graph_def().library.function}
    return [node.op for name, function in library.items() if "body" in name
            for node in function.node_def]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("beam_size", [1, 3])
def test_the_decoding_loop_reads_no_weight_and_decodes_as_reading_them(dtype, beam_size,
                                                                         monkeypatch):
    from t2t_lite.utils import precision

    policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy({"float32": "float32", "bfloat16": "mixed_bfloat16"}[dtype])
    try:
        model = random_model(seed=3)
    finally:
        keras.config.set_dtype_policy(policy)
    config = {"decode_length": 5, "beam_size": beam_size}
    # Transformer.infer's key of the traced decoder: (beam, top beams, alpha, cache, EOS, force).
    key = (beam_size, 1, 0.6, True, 1, False)
    once = model.infer({"inputs": INPUTS}, **config)
    body_ops = _loop_body_ops(model._infer_functions[key].get_concrete_function())
    assert "MatMul" in body_ops or "BatchMatMulV2" in body_ops  # the decoder is in the loop
    # Every weight is read (and cast to bfloat16) once, before the loop: no read, and under
    # bfloat16 only the casts of activations, in the loop.
    assert "ReadVariableOp" not in body_ops
    # The same ids and scores as a decoder that reads its weights at every step.
    monkeypatch.setattr(precision, "weights_read_once",
                        lambda layer: contextlib.nullcontext)
    model._infer_functions.clear()
    every_step = model.infer({"inputs": INPUTS}, **config)
    assert "ReadVariableOp" in _loop_body_ops(model._infer_functions[key].get_concrete_function())
    np.testing.assert_array_equal(once["outputs"], every_step["outputs"])
    np.testing.assert_array_equal(once["scores"], every_step["scores"])
