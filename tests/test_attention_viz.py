"""Attention pictures: the recorded weights are the model's own, pictures are written."""
import pathlib

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.hparams import create_hparams
from t2t_lite.layers import common_attention
from t2t_lite.models.transformer import Transformer
from t2t_lite.utils import attention_viz
from tests.conftest import require_extra


@pytest.fixture(scope="module")
def model():
    hparams = create_hparams("transformer_tiny",
                             "hidden_size=16,filter_size=16,num_heads=2,num_hidden_layers=2")
    return Transformer(hparams, 20, 20)


def test_recording_changes_nothing_and_gives_softmax_rows(model):
    features = {"inputs": tf.constant([[3, 4, 5, 1]]), "targets": tf.constant([[6, 7, 1]])}
    plain = model(features, training=False)
    with common_attention.record_attention_weights() as recorded:
        again = model(features, training=False)
    np.testing.assert_array_equal(plain.numpy(), again.numpy())
    assert len(recorded) == 6  # 2 encoder self, 2 decoder self, 2 encoder-decoder
    weights = attention_viz.attention_weights(model, [3, 4, 5, 1], [6, 7, 1])
    assert weights["encoder_self"].shape == (2, 2, 4, 4)
    assert weights["decoder_self"].shape == (2, 2, 3, 3)
    assert weights["encoder_decoder"].shape == (2, 2, 3, 4)
    for matrices in weights.values():
        np.testing.assert_allclose(matrices.sum(-1), 1.0, rtol=1e-5)
    # Decoder self-attention is causal: nothing above the diagonal.
    assert np.all(np.triu(weights["decoder_self"], k=1) < 1e-6)
    # Outside the block nothing is recorded.
    assert common_attention._RECORDED_WEIGHTS is None


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
