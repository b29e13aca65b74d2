"""Attention pictures: the returned weights are the model's own, pictures are written."""
import concurrent.futures
import pathlib

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.hparams_lib import create_hparams
from t2t_lite.models.transformer import Transformer
from t2t_lite.visualization import attention_viz
from tests.conftest import require_extra


@pytest.fixture(scope="module")
def model():
    hparams = create_hparams("transformer_tiny",
                             "hidden_size=16,filter_size=16,num_heads=2,num_hidden_layers=2")
    return Transformer(hparams, 20, 20)


def test_returning_attention_scores_changes_nothing_and_gives_softmax_rows(model):
    features = {"inputs": tf.constant([[3, 4, 5, 1]]), "targets": tf.constant([[6, 7, 1]])}
    plain = model(features, training=False)
    again, scores = model(features, training=False, return_attention_scores=True)
    np.testing.assert_array_equal(plain.numpy(), again.numpy())
    # 2 encoder self, 2 decoder self, 2 encoder-decoder attentions.
    assert sorted(scores) == sorted(
        f"{stack}/layer_{i}/{kind}" for stack, kind in (
            ("decoder", "encdec_attention"), ("decoder", "self_attention"),
            ("encoder", "self_attention")) for i in range(2))
    weights = attention_viz.attention_weights(model, [3, 4, 5, 1], [6, 7, 1])
    assert weights["encoder_self"].shape == (2, 2, 4, 4)
    assert weights["decoder_self"].shape == (2, 2, 3, 3)
    assert weights["encoder_decoder"].shape == (2, 2, 3, 4)
    for matrices in weights.values():
        np.testing.assert_allclose(matrices.sum(-1), 1.0, rtol=1e-5)
    # Decoder self-attention is causal: nothing above the diagonal.
    assert np.all(np.triu(weights["decoder_self"], k=1) < 1e-6)


def test_attention_scores_are_per_call_while_other_threads_run(model):
    """Weights are returned by the call that asks for them: calls on other threads at the
    same time (decode_from_file's parallel batches) neither see nor change them."""
    features = {"inputs": tf.constant([[3, 4, 5, 1]]), "targets": tf.constant([[6, 7, 1]])}
    expected = attention_viz.attention_weights(model, [3, 4, 5, 1], [6, 7, 1])
    other = {"inputs": tf.constant([[8, 9, 1]]), "targets": tf.constant([[5, 1]])}
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        plain = [pool.submit(model, other, training=False) for _ in range(4)]
        pictures = [pool.submit(attention_viz.attention_weights, model, [3, 4, 5, 1],
                                [6, 7, 1]) for _ in range(4)]
        for future in plain:
            assert future.result().shape == (1, 2, 20)
        for future in pictures:
            for kind, matrices in future.result().items():
                np.testing.assert_allclose(matrices, expected[kind], rtol=1e-6)
    assert model(features, training=False).shape == (1, 3, 20)


def test_pictures_and_npz_are_written(model, tmp_path):
    require_extra("matplotlib", "viz")
    weights = attention_viz.attention_weights(model, [3, 4, 5, 1], [6, 7, 1])
    written = attention_viz.plot_attention(weights, ["a", "b", "c", "<EOS>"],
                                           ["x", "y", "<EOS>"], str(tmp_path / "line0"))
    assert [p.rsplit("/", 1)[1] for p in written] == [
        "line0_encoder_self.png", "line0_decoder_self.png", "line0_encoder_decoder.png",
        "line0.npz"]
    for path in written[:3]:
        data = pathlib.Path(path).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    saved = np.load(written[3])
    np.testing.assert_array_equal(saved["encoder_decoder"], weights["encoder_decoder"])
    assert list(saved["output_tokens"]) == ["x", "y", "<EOS>"]
