"""Public layers rebuild from their config: `from_config(get_config())` gives a layer with the
same config and weight paths that, given the same weights, computes the same outputs."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.hparams_lib import create_hparams
from t2t_lite.layers import common_attention, common_layers, modalities
from t2t_lite.models import transformer_layers as transformer
from t2t_lite.models.transformer import Transformer

D, H, L = 8, 2, 5


def _args(**overrides):
    hp = create_hparams(
        "transformer_tiny",
        f"hidden_size={D},num_heads={H},filter_size=16,layer_prepostprocess_dropout=0.0",
    )
    return {**transformer.layer_args(hp), **overrides}


def _clone(layer):
    """A layer rebuilt from `layer`'s config, built the same way and given its weights."""
    config = layer.get_config()
    clone = type(layer).from_config(config)
    assert clone.get_config() == config
    if hasattr(layer, "_rebuild"):
        layer._rebuild(clone)
    else:
        clone.build()
    assert [w.path for w in clone.weights] == [w.path for w in layer.weights]
    for target, source in zip(clone.weights, layer.weights):
        target.assign(source)
    return clone


def _x(*shape, seed=0):
    return tf.constant(np.random.default_rng(seed).normal(size=shape), tf.float32)


def _built(layer, shape):
    layer.build(shape)
    layer._rebuild = lambda clone: clone.build(shape)
    return layer


CASES = {
    "LayerNorm": lambda: (_built(common_layers.LayerNorm(1e-5), (None, None, D)),
                          lambda layer: layer(_x(2, L, D))),
    "LayerPrepostprocess": lambda: (
        _built(common_layers.LayerPrepostprocess("dan", 0.0, "", "layer", 1e-6), (None, None, D)),
        lambda layer: layer(_x(2, L, D), previous_value=_x(2, L, D, seed=1))),
    "DenseReluDense": lambda: (
        _built(common_layers.DenseReluDense(16, D, dropout=0.0), (None, None, D)),
        lambda layer: layer(_x(2, L, D))),
    "MultiheadAttention": lambda: (
        _built(common_attention.MultiheadAttention(H, D, key_depth=4, value_depth=6),
               (None, None, D)),
        lambda layer: layer(_x(2, L, D), memory=_x(2, 3, D, seed=1))),
    "ShardedWeights": lambda: (
        _built(modalities.ShardedWeights(11, D, 3, name="softmax"), None),
        lambda layer: layer()),
    "SymbolModality": lambda: (
        _built(modalities.SymbolModality(13, 11, D, num_shards=2, share_softmax=False,
                                         vocab_divisor=4), None),
        lambda layer: layer.top(layer(tf.constant([[1, 5, 10, 0]])))),
    "TargetSpaceEmbedding": lambda: (
        _built(transformer.TargetSpaceEmbedding(D, "glorot_uniform"), None),
        lambda layer: layer(tf.constant([3, 7]))),
    "TransformerEncoderLayer": lambda: (
        transformer.TransformerEncoderLayer(**_args(), name="layer_0"),
        lambda layer: layer(_x(2, L, D), tf.zeros([2, 1, 1, L]))),
    "TransformerDecoderLayer": lambda: (
        transformer.TransformerDecoderLayer(**_args(layer_preprocess_sequence="n",
                                                    layer_postprocess_sequence="da"),
                                            name="layer_1"),
        lambda layer: layer(_x(2, L, D), _x(2, 3, D, seed=1),
                            common_attention.attention_bias_lower_triangle(L),
                            tf.zeros([2, 1, 1, 3]))),
    "TransformerEncoder": lambda: (
        transformer.TransformerEncoder(2, **_args(layer_preprocess_sequence="n",
                                                  layer_postprocess_sequence="da")),
        lambda layer: layer(_x(2, L, D), tf.zeros([2, 1, 1, L]))),
    "TransformerDecoder": lambda: (
        transformer.TransformerDecoder(2, **_args()),
        lambda layer: layer(_x(2, L, D), _x(2, 3, D, seed=1),
                            common_attention.attention_bias_lower_triangle(L),
                            tf.zeros([2, 1, 1, 3]))),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_from_config_rebuilds_an_equal_layer(case):
    keras.utils.set_random_seed(1)
    layer, run = CASES[case]()
    if not layer.built:
        layer.build()
    expected = run(layer)
    clone = _clone(layer)
    assert layer.weights
    np.testing.assert_allclose(run(clone), expected, rtol=1e-6, atol=1e-6)


def test_dropout_clone_drops_the_same_units():
    # Same rate, broadcast dims and (numbered) seed: the same stateless mask.
    layer = common_layers.Dropout(0.5, "1", name="dropout_0")
    clone = common_layers.Dropout.from_config(layer.get_config())
    x = _x(2, L, D)
    with common_layers.dropout_seed(tf.constant([3, 4])):
        np.testing.assert_array_equal(layer(x, training=True), clone(x, training=True))


def test_model_body_config_and_names():
    hp = create_hparams("transformer_tiny", f"hidden_size={D},num_heads={H},filter_size=16")
    model = Transformer(hp, 20, 20)
    config = model.body.get_config()
    assert config["num_encoder_layers"] == config["num_decoder_layers"] == 2
    assert {k: config[k] for k in transformer.LAYER_HPARAMS} == transformer.layer_args(hp)
    body = transformer.TransformerBody.from_config(config)
    body.build()
    # The model's own scope "transformer/" is all that differs.
    assert ["transformer/" + w.path for w in body.weights] == [
        w.path for w in model.body.weights]
    assert model.body.weights[0].path == "transformer/body/target_space_embedding/kernel"


def test_layer_args_reject_an_unsupported_ffn_layer():
    with pytest.raises(ValueError, match="ffn_layer='conv_hidden_relu'"):
        transformer.TransformerEncoderLayer(**_args(ffn_layer="conv_hidden_relu"))
