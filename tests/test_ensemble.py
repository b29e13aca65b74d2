"""Decoding with an ensemble of Transformers (`models/ensemble.py`): one member decodes as the
model itself; two members follow the averaged probabilities, checked against the members'
teacher-forced logits."""
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.models.ensemble import TransformerEnsemble
from tests.test_fast_decoding import INPUTS, random_model

POST_NORM = ",layer_preprocess_sequence=none,layer_postprocess_sequence=dan"


def _teacher_forced_log_mean(members, outputs):
    """log(mean_k p_k(y_t | y_<t)) of each output id, [B, T], from full forward passes."""
    probs = [tf.nn.softmax(m({"inputs": tf.constant(INPUTS), "targets": tf.constant(outputs)},
                             training=False)).numpy() for m in members]
    mean = np.mean(probs, axis=0)
    return np.log(np.take_along_axis(mean, outputs[..., None], axis=-1)[..., 0])


def _until_eos(row):
    """Length of a decode up to and including its first EOS (1)."""
    hits = np.flatnonzero(row == 1)
    return int(hits[0]) + 1 if len(hits) else len(row)


@pytest.fixture(scope="module")
def members():
    # Same vocabularies, different models: pre-norm and post-norm, other weights.
    return [random_model(vocab=(37, 29), seed=2),
            random_model(POST_NORM, vocab=(37, 29), seed=5)]


@pytest.mark.parametrize("beam_size, top_beams", [(1, 1), (3, 1), (3, 2)])
def test_an_ensemble_of_one_decodes_as_the_model(members, beam_size, top_beams):
    kwargs = {"decode_length": 9, "beam_size": beam_size, "top_beams": top_beams}
    alone = members[0].infer({"inputs": INPUTS}, **kwargs)
    ensemble = TransformerEnsemble(members[:1]).infer({"inputs": INPUTS}, **kwargs)
    np.testing.assert_array_equal(ensemble["outputs"], alone["outputs"])
    np.testing.assert_allclose(ensemble["scores"], alone["scores"], rtol=1e-5)


def test_a_model_twice_decodes_as_the_model(members):
    alone = members[1].infer({"inputs": INPUTS}, decode_length=9, beam_size=3)
    twice = TransformerEnsemble([members[1], members[1]]).infer(
        {"inputs": INPUTS}, decode_length=9, beam_size=3)
    np.testing.assert_array_equal(twice["outputs"], alone["outputs"])
    np.testing.assert_allclose(twice["scores"], alone["scores"], rtol=1e-5)


def test_greedy_ensemble_follows_the_averaged_probabilities(members):
    result = TransformerEnsemble(members).infer({"inputs": INPUTS}, decode_length=9)
    outputs = result["outputs"].numpy()
    probs = [tf.nn.softmax(m({"inputs": tf.constant(INPUTS), "targets": tf.constant(outputs)},
                             training=False)).numpy() for m in members]
    # Every id is the argmax of the members' mean teacher-forced probabilities ...
    np.testing.assert_array_equal(np.mean(probs, axis=0).argmax(-1), outputs)
    # ... which is not what either member alone would choose everywhere.
    assert any((p.argmax(-1) != outputs).any() for p in probs)
    log_mean = _teacher_forced_log_mean(members, outputs)
    expected = [log_mean[b, :_until_eos(outputs[b])].sum() for b in range(len(outputs))]
    np.testing.assert_allclose(result["scores"], expected, rtol=1e-4)


def test_beam_ensemble_scores_are_the_averaged_log_probabilities(members):
    alpha = 0.6
    result = TransformerEnsemble(members).infer({"inputs": INPUTS}, decode_length=20,
                                               beam_size=3, alpha=alpha)
    outputs = result["outputs"].numpy()
    log_mean = _teacher_forced_log_mean(members, outputs)
    for b in range(len(outputs)):
        length = _until_eos(outputs[b])
        # A finished hypothesis scores its length-normalised log-probability; a row with
        # none finished returns its alive hypothesis' raw log-probability (t2t's rule).
        finished = outputs[b, length - 1] == 1
        penalty = ((5.0 + length) / 6.0) ** alpha if finished else 1.0
        assert float(result["scores"][b]) == pytest.approx(log_mean[b, :length].sum() / penalty,
                                                    rel=1e-4)


def test_an_ensemble_decodes_inside_a_tf_function(members):
    ensemble = TransformerEnsemble(members)

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def serve(inputs):
        return ensemble.infer({"inputs": inputs}, decode_length=5, beam_size=2)

    eager = ensemble.infer({"inputs": INPUTS}, decode_length=5, beam_size=2)
    np.testing.assert_array_equal(serve(tf.constant(INPUTS))["outputs"], eager["outputs"])


def test_members_with_other_vocabularies_or_settings_are_refused(members):
    other = random_model(vocab=(37, 31), seed=1)
    with pytest.raises(ValueError, match=r"share their vocabularies.*\(37, 29\), \(37, 31\)"):
        TransformerEnsemble([members[0], other])


@pytest.mark.slow
def test_beam_slot_and_xla_decodes_equal_the_growing_cache_decode(members):
    # Every cache layout of the search (`search/driver.py`) on a two-model ensemble:
    # beam slots (the default of beam search) and XLA's fixed caches against t2t's growing
    # caches, reordered with the beams.
    ensemble = TransformerEnsemble(members)
    # One compilation (XLA's beam search of two members) is most of this test's time.
    kwargs = {"decode_length": 5, "beam_size": 3, "top_beams": 3}
    growing = ensemble.infer({"inputs": INPUTS}, beam_slots=False, **kwargs)
    for other in (ensemble.infer({"inputs": INPUTS}, **kwargs),
                  ensemble.infer({"inputs": INPUTS}, jit_compile=True, **kwargs)):
        np.testing.assert_array_equal(other["outputs"], growing["outputs"])
        np.testing.assert_allclose(other["scores"], growing["scores"], rtol=1e-5)
