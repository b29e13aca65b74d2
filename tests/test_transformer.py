"""The Transformer against t2t: fixture logits / greedy ids / eval loss, variable names and
parameter counts (§2.11), and a numpy re-implementation of §2 for both layouts."""
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import registry
from t2t_lite.hparams_lib import create_hparams
from t2t_lite.layers import common_layers
from t2t_lite.models import t2t_checkpoint
from t2t_lite.models.transformer import Transformer

CHECKPOINTS = [("ckpt_A", "model_A.npz"), ("ckpt_A_trained", "model_A_trained.npz")]


@pytest.fixture(scope="module", params=CHECKPOINTS, ids=[c for c, _ in CHECKPOINTS])
def loaded(request, t2t_fixtures):
    ckpt, npz = request.param
    model = t2t_checkpoint.load_model(str(t2t_fixtures / ckpt), create_hparams("transformer_tiny"))
    return model, dict(np.load(t2t_fixtures / npz))


def test_fixture_logits(loaded):
    model, data = loaded
    logits = model({"inputs": data["inputs"], "targets": data["targets"],
                    "target_space_id": data["target_space_id"]})
    assert logits.dtype == tf.float32 and logits.shape == (3, 16, 1018)
    np.testing.assert_allclose(logits, data["logits"][:, :, 0, 0, :], atol=1e-4, rtol=0)
    # t2t-style 4-D ids give the same logits.
    logits4 = model({"inputs": data["inputs"][:, :, None, None],
                     "targets": data["targets"][:, :, None, None]})
    np.testing.assert_allclose(logits4, logits, atol=1e-6)


def test_fixture_greedy_decode(loaded):
    model, data = loaded
    out = model.infer({"inputs": data["inputs"]}, decode_length=20)
    assert out["outputs"].dtype == tf.int32
    np.testing.assert_array_equal(out["outputs"], data["greedy_outputs"])
    np.testing.assert_allclose(out["scores"], data["greedy_scores"], atol=1e-4, rtol=1e-5)


def test_fixture_eval_loss(t2t_fixtures):
    model = t2t_checkpoint.load_model(
        str(t2t_fixtures / "ckpt_A_trained"), create_hparams("transformer_tiny"))
    data = np.load(t2t_fixtures / "model_A_trained.npz")
    logits = model({"inputs": data["inputs"], "targets": data["targets"]})
    num, den = common_layers.padded_cross_entropy(logits, data["targets"], 0.0)
    np.testing.assert_allclose(num / den, data["loss_eval"], atol=1e-5)


def test_training_loss_skips_padding_logits_with_the_same_loss_and_gradients(t2t_fixtures):
    model = t2t_checkpoint.load_model(
        str(t2t_fixtures / "ckpt_A_trained"), create_hparams("transformer_tiny"))
    data = np.load(t2t_fixtures / "model_A_trained.npz")
    features = {"inputs": data["inputs"], "targets": data["targets"]}
    assert (data["targets"] == 0).any()  # padded rows: the case the shortcut is for
    with tf.GradientTape(persistent=True) as tape:
        num, den = model.training_loss(features, 0.1)
        ref_num, ref_den = common_layers.padded_cross_entropy(
            model(features), data["targets"], 0.1)
    assert float(den) == float(ref_den) == (data["targets"] != 0).sum()
    np.testing.assert_allclose(num, ref_num, rtol=1e-6)
    variables = model.trainable_variables
    for got, want in zip(tape.gradient(num, variables), tape.gradient(ref_num, variables)):
        np.testing.assert_allclose(tf.convert_to_tensor(got), tf.convert_to_tensor(want),
                                   atol=1e-5, rtol=1e-4)
    # The eval loss of t2t's fixture (no smoothing) through the same path.
    num, den = model.training_loss(features, 0.0)
    np.testing.assert_allclose(num / den, data["loss_eval"], atol=1e-5)


def test_weight_paths_are_t2t_names(t2t_fixtures):
    model = Transformer(create_hparams("transformer_tiny"), 1018, 1018)
    expected = [v["name"] for v in json.loads(
        (t2t_fixtures / "ckpt_A_variables.json").read_text()) if v["trainable"]]
    assert [w.path for w in model.trainable_weights] == expected
    name_map = t2t_checkpoint.t2t_variable_map(model)
    assert sorted(name_map) == sorted(expected)
    assert all(var.path == name for name, var in name_map.items())


def _param_count(v, d, f, n, pre_norm=True):
    # T2T_REFERENCE §2.11.
    count = v * d + 32 * d + n * (4 * d * d + 2 * d * f + f + 5 * d)
    count += n * (8 * d * d + 2 * d * f + f + 7 * d)
    return count + (4 * d if pre_norm else 0)


def test_parameter_count_formula_tiny():
    model = Transformer(create_hparams("transformer_tiny"), 1018, 1018)
    assert model.count_params() == _param_count(1018, 128, 512, 2)
    v1 = Transformer(create_hparams("transformer_tiny", "layer_preprocess_sequence=none,"
                                    "layer_postprocess_sequence=dan"), 1018, 1018)
    assert v1.count_params() == _param_count(1018, 128, 512, 2, pre_norm=False)


@pytest.mark.slow
@pytest.mark.parametrize("hparams_set, expected, tensors", [
    ("transformer_base", 61_378_560, 201),
    ("transformer_base_v1", 61_376_512, 197),
])
def test_parameter_count_base(hparams_set, expected, tensors):
    model = Transformer(create_hparams(hparams_set), 33708, 33708)
    assert model.count_params() == expected
    assert len(model.trainable_weights) == tensors


def test_registered_and_vocab_sharing_rules():
    assert registry.model("transformer") is Transformer
    hp = create_hparams("transformer_tiny", "symbol_modality_num_shards=3")
    different = Transformer(hp, 50, 40)
    # t2t turns sharing off silently when the vocab sizes differ.
    assert not different.hparams.shared_embedding_and_softmax_weights
    assert sorted({w.path.split("/")[1] + "/" + w.path.split("/")[2]
                   for w in different.weights if "symbol_modality" in w.path}) == [
        "symbol_modality_40_128/softmax", "symbol_modality_40_128/target_emb",
        "symbol_modality_50_128/input_emb"]
    shards = [w.shape[0] for w in different.weights if "input_emb" in w.path]
    assert shards == [17, 17, 16]
    logits = different({"inputs": np.array([[3, 4, 1]]), "targets": np.array([[5, 1]])})
    assert logits.shape == (1, 2, 40)


def test_padding_embeds_to_zero_and_decoder_is_causal():
    model = Transformer(create_hparams("transformer_tiny", "symbol_modality_num_shards=2"), 30, 30)
    np.testing.assert_array_equal(model.modality.bottom(tf.constant([[0, 5]]))[0, 0], 0.0)
    inputs = tf.constant([[4, 5, 6, 1]])
    a = model({"inputs": inputs, "targets": tf.constant([[7, 8, 9, 1]])}).numpy()
    b = model({"inputs": inputs, "targets": tf.constant([[7, 8, 3, 2]])}).numpy()
    # Position t sees targets < t only (shifted right, causal bias).
    np.testing.assert_allclose(a[:, :3], b[:, :3], atol=1e-5)
    assert not np.allclose(a[:, 3], b[:, 3])
    # Input padding does not change the logits.
    padded = model({"inputs": tf.constant([[4, 5, 6, 1, 0, 0]]),
                    "targets": tf.constant([[7, 8, 9, 1]])}).numpy()
    np.testing.assert_allclose(padded, a, atol=1e-5)


def test_dropout_only_in_training():
    model = Transformer(create_hparams("transformer_tiny", "symbol_modality_num_shards=2"), 30, 30)
    features = {"inputs": tf.constant([[4, 5, 6, 1]]), "targets": tf.constant([[7, 8, 9, 1]])}
    np.testing.assert_array_equal(model(features), model(features, training=False))
    assert not np.allclose(model(features, training=True), model(features))


# ----------------------------------------------------------------------------------------------
# A numpy re-implementation of T2T_REFERENCE §2, driven by t2t variable names only.

def _np_ln(x, w, scope):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return ((x - mean) / np.sqrt(var + 1e-6) * w[scope + "/layer_norm/layer_norm_scale"]
            + w[scope + "/layer_norm/layer_norm_bias"])


def _np_timing(length, channels):
    n = channels // 2
    inv = np.exp(np.arange(n) * -np.log(1e4) / max(n - 1, 1))
    t = np.arange(length)[:, None] * inv[None]
    return np.concatenate([np.sin(t), np.cos(t)], 1)


def _np_mha(x, m, w, scope, heads, bias):
    def split(t):
        return t.reshape(t.shape[0], t.shape[1], heads, -1).transpose(0, 2, 1, 3)
    q = split(x @ w[scope + "/q/kernel"])
    k, v = split(m @ w[scope + "/k/kernel"]), split(m @ w[scope + "/v/kernel"])
    logits = (q * q.shape[-1] ** -0.5) @ k.transpose(0, 1, 3, 2) + bias
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = (p @ v).transpose(0, 2, 1, 3)
    return o.reshape(x.shape) @ w[scope + "/output_transform/kernel"]


def _np_sublayer(x, fn, w, scope, pre_norm):
    if pre_norm:  # "n" / "da"
        return x + fn(_np_ln(x, w, scope + "/layer_prepostprocess"))
    return _np_ln(x + fn(x), w, scope + "/layer_postprocess")  # "none" / "dan"


def _np_ffn(x, w, scope):
    h = np.maximum(x @ w[scope + "/conv1/kernel"] + w[scope + "/conv1/bias"], 0)
    return h @ w[scope + "/conv2/kernel"] + w[scope + "/conv2/bias"]


def np_transformer(w, inputs, targets, heads, layers, pre_norm, shared):
    d = w["transformer/body/target_space_embedding/kernel"].shape[1]

    def matrix(prefix):
        names = sorted((n for n in w if n.startswith(prefix)), key=lambda n: int(n.split("_")[-1]))
        return np.concatenate([w[n] for n in names])

    scopes = ("shared", "shared", "shared") if shared else ("input_emb", "target_emb", "softmax")
    emb_in, emb_out, softmax = (
        matrix(next(n for n in w if f"/{s}/" in n).rsplit("/", 1)[0] + "/") for s in scopes)
    x = emb_in[inputs] * d**0.5 * (inputs != 0)[..., None]
    enc_bias = ((inputs == 0) * -1e9)[:, None, None, :]
    x = x + w["transformer/body/target_space_embedding/kernel"][0] + _np_timing(x.shape[1], d)
    for i in range(layers):
        s = f"transformer/body/encoder/layer_{i}"
        x = _np_sublayer(x, lambda z, s=s: _np_mha(
            z, z, w, s + "/self_attention/multihead_attention", heads, enc_bias),
            w, s + "/self_attention", pre_norm)
        x = _np_sublayer(x, lambda z, s=s: _np_ffn(z, w, s + "/ffn"), w, s + "/ffn", pre_norm)
    enc = _np_ln(x, w, "transformer/body/encoder/layer_prepostprocess") if pre_norm else x
    shifted = np.pad(targets, [[0, 0], [1, 0]])[:, :-1]
    y = emb_out[shifted] * d**0.5 * (shifted != 0)[..., None] + _np_timing(targets.shape[1], d)
    t = targets.shape[1]
    causal = np.triu(np.full((t, t), -1e9), 1)[None, None]
    for i in range(layers):
        s = f"transformer/body/decoder/layer_{i}"
        y = _np_sublayer(y, lambda z, s=s: _np_mha(
            z, z, w, s + "/self_attention/multihead_attention", heads, causal),
            w, s + "/self_attention", pre_norm)
        y = _np_sublayer(y, lambda z, s=s: _np_mha(
            z, enc, w, s + "/encdec_attention/multihead_attention", heads, enc_bias),
            w, s + "/encdec_attention", pre_norm)
        y = _np_sublayer(y, lambda z, s=s: _np_ffn(z, w, s + "/ffn"), w, s + "/ffn", pre_norm)
    if pre_norm:
        y = _np_ln(y, w, "transformer/body/decoder/layer_prepostprocess")
    return y @ softmax.T


@pytest.mark.parametrize("sequences, pre_norm", [("n,da", True), ("none,dan", False)])
@pytest.mark.parametrize("vocab", [(23, 23), (23, 19)])
def test_numpy_reference_both_layouts(sequences, pre_norm, vocab):
    pre, post = sequences.split(",")
    hp = create_hparams(
        "transformer_tiny",
        f"hidden_size=16,filter_size=24,num_heads=2,num_hidden_layers=2,"
        f"symbol_modality_num_shards=4,layer_preprocess_sequence={pre},"
        f"layer_postprocess_sequence={post}")
    model = Transformer(hp, *vocab)
    rng = np.random.default_rng(0)
    weights = {}
    for name, var in t2t_checkpoint.t2t_variable_map(model).items():
        # Non-trivial layer norm parameters so that misplaced norms show.
        value = rng.normal(size=var.shape).astype(np.float32) * (0.3 if var.ndim == 2 else 1)
        var.assign(value)
        weights[name] = value.astype(np.float64)
    has_final = any("encoder/layer_prepostprocess" in n for n in weights)
    assert has_final == pre_norm
    assert any("/layer_postprocess/" in n for n in weights) == (not pre_norm)
    inputs = np.array([[3, 7, 2, 9, 1], [4, 5, 1, 0, 0]])
    targets = np.array([[6, 2, 8, 1], [11, 1, 0, 0]])
    got = model({"inputs": inputs, "targets": targets}).numpy()
    want = np_transformer(weights, inputs, targets, 2, 2, pre_norm, shared=vocab[0] == vocab[1])
    np.testing.assert_allclose(got, want, atol=2e-4, rtol=2e-4)


def test_tf_checkpoint_round_trip_saves_every_weight(tmp_path):
    hp = create_hparams("transformer_tiny", "symbol_modality_num_shards=3,num_hidden_layers=3")
    model = Transformer(hp, 40, 30)
    path = tf.train.Checkpoint(model=model).save(str(tmp_path / "ckpt"))
    saved = [n for n, _ in tf.train.list_variables(path) if n.startswith("model/")]
    assert len(saved) == len(model.weights)
    restored = Transformer.from_config(model.get_config())
    tf.train.Checkpoint(model=restored).restore(path).assert_consumed()
    for a, b in zip(model.weights, restored.weights):
        assert a.path == b.path
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_initialization_follows_t2t_and_draws_every_variable_independently():
    keras.utils.set_random_seed(7)
    model = Transformer(create_hparams("transformer_tiny", "initializer_gain=2.0"), 1018, 1018)
    kernels = {w.path: w.numpy() for w in model.trainable_weights if w.ndim == 2}
    arrays = list(kernels.values())
    # Keras 3 reuses the values of an unseeded initializer instance; each variable must differ.
    assert all(not np.array_equal(a, b) for i, a in enumerate(arrays) for b in arrays[i + 1:]
               if a.shape == b.shape)
    q = kernels["transformer/body/encoder/layer_0/self_attention/multihead_attention/q/kernel"]
    conv1 = kernels["transformer/body/decoder/layer_1/ffn/conv1/kernel"]
    # uniform_unit_scaling: U(-a, a), a = sqrt(3 * gain / ((fan_in + fan_out) / 2)).
    for kernel, fan_avg in ((q, 128), (conv1, (128 + 512) / 2)):
        limit = np.sqrt(3 * 2.0 / fan_avg)
        assert np.abs(kernel).max() <= limit and np.abs(kernel).max() > 0.98 * limit
        np.testing.assert_allclose(kernel.std(), limit / np.sqrt(3), rtol=0.05)
    embedding = model.modality.target_emb.matrix().numpy()
    np.testing.assert_allclose(embedding.std(), 128**-0.5, rtol=0.03)
    for w in model.trainable_weights:
        if w.path.endswith(("layer_norm_scale", "layer_norm_bias", "/bias")):
            assert (w.numpy() == (1.0 if w.path.endswith("scale") else 0.0)).all()
    keras.utils.set_random_seed(7)
    again = Transformer(create_hparams("transformer_tiny", "initializer_gain=2.0"), 1018, 1018)
    np.testing.assert_array_equal(again.trainable_weights[20].numpy(),
                                  model.trainable_weights[20].numpy())


@pytest.mark.slow
def test_mixed_bfloat16_policy_runs_and_stays_close():
    hp = create_hparams("transformer_tiny", "symbol_modality_num_shards=2")
    reference = Transformer(hp, 40, 40)
    features = {"inputs": tf.constant([[4, 5, 6, 1]]), "targets": tf.constant([[7, 8, 9, 1]])}
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        mixed = Transformer(hp, 40, 40)
        mixed.set_weights(reference.get_weights())
        logits = mixed(features)
        decoded = mixed.infer({"inputs": features["inputs"]}, decode_length=3)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert logits.dtype == tf.float32
    np.testing.assert_allclose(logits, reference(features), atol=0.25)
    assert decoded["outputs"].shape == (1, 7)


@pytest.mark.parametrize("override, message", [
    ("unidirectional_encoder=True", "unidirectional_encoder=True is not supported"),
    ("causal_decoder_self_attention=False", "causal_decoder_self_attention=False"),
    ("num_heads=3", "hidden_size=128 is not divisible by hparams.num_heads=3"),
    ("ffn_layer=conv_hidden_relu", "ffn_layer='conv_hidden_relu' is not supported"),
    ("norm_type=batch", "norm_type='batch' is not supported"),
    ("self_attention_type=dot_product_relative_v2",
     "self_attention_type='dot_product_relative_v2' is not supported"),
    ("self_attention_type=dot_product_relative",
     "max_relative_position=0 is not supported with self_attention_type=dot_product_relative"),
    ("proximity_bias=True", "proximity_bias=True is not supported"),
    ("prepend_mode=prepend_inputs_full_attention", "prepend_mode='prepend_inputs_full_attention"),
    ("pos=emb", "pos='emb' is not supported"),
])
def test_unsupported_hparams_fail_early(override, message):
    with pytest.raises(ValueError, match=message):
        Transformer(create_hparams("transformer_tiny", override), 20, 20)


def test_more_shards_than_symbols_gives_empty_shards_as_t2t():
    """Every transformer_* set has 16 shards; a 12-symbol problem gets 4 zero-row shards."""
    from t2t_lite.layers.modalities import shard_sizes

    assert shard_sizes(12, 16) == [1] * 12 + [0] * 4
    assert shard_sizes(1018, 16) == [64] * 10 + [63] * 6
    hp = create_hparams("transformer_tiny", "hidden_size=32,filter_size=64,num_heads=2")
    model = Transformer(hp, 12, 12)
    features = {"inputs": tf.constant([[3, 4, 5, 1]]), "targets": tf.constant([[5, 4, 1]])}
    assert model(features).shape == (1, 3, 12)
    shapes = [tuple(w.shape) for w in model.weights if "/shared/weights_" in w.path]
    assert shapes == [(1, 32)] * 12 + [(0, 32)] * 4
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(features, training=True))
    assert all(g is not None for g in tape.gradient(loss, model.trainable_variables))


def test_symbol_dropout_layer_zeroes_ids_at_its_rate_without_rescaling():
    """t2t's `dropout_no_scaling(ids, 1 - symbol_dropout)`: ids become 0, others unchanged."""
    layer = common_layers.SymbolDropout(0.3, name="symbol_dropout")
    ids = tf.concat([tf.random.uniform([400, 50], 1, 1000, tf.int32, seed=1),
                     tf.zeros([400, 10], tf.int32)], axis=1)
    np.testing.assert_array_equal(layer(ids, training=False), ids)
    with common_layers.dropout_seed(tf.constant([3, 4], tf.int64)):
        dropped = layer(ids, training=True).numpy()
        again = layer(ids, training=True).numpy()
    with common_layers.dropout_seed(tf.constant([3, 5], tf.int64)):
        other = layer(ids, training=True).numpy()
    ids = ids.numpy()
    kept = dropped != 0
    np.testing.assert_array_equal(dropped[kept], ids[kept])
    assert not dropped[:, 50:].any()  # padding stays padding
    assert abs(1.0 - kept[:, :50].mean() - 0.3) < 0.01  # 20,000 draws
    np.testing.assert_array_equal(dropped, again)  # the mask is a function of the seed
    assert (dropped != other).mean() > 0.3
    assert common_layers.SymbolDropout.from_config(layer.get_config()).rate == 0.3


def _symbol_dropout_model(rate):
    """transformer_tiny with symbol dropout only (every other dropout 0)."""
    hp = create_hparams("transformer_tiny", f"symbol_dropout={rate},layer_prepostprocess_dropout=0,"
                        "attention_dropout=0,relu_dropout=0,hidden_size=32,filter_size=64")
    return Transformer(hp, 30, 30)


def test_symbol_dropout_masks_dropped_source_tokens_as_padding():
    """A dropped source id embeds to zero and t2t takes zero embeddings for padding: training
    logits equal eval logits on the inputs with those ids set to 0."""
    model = _symbol_dropout_model(0.4)
    model.targets_symbol_dropout.rate = 0.0  # the source side alone
    features = {"inputs": tf.constant([[4, 5, 6, 7, 8, 9, 10, 1], [11, 12, 13, 1, 0, 0, 0, 0]]),
                "targets": tf.constant([[7, 8, 9, 1], [5, 4, 1, 0]])}
    seed = tf.constant([7, 8], tf.int64)
    with common_layers.dropout_seed(seed):
        logits = model(features, training=True)
        dropped = model.inputs_symbol_dropout(features["inputs"], training=True)
    assert 0 < int(tf.reduce_sum(tf.cast(
        tf.not_equal(dropped, features["inputs"]), tf.int32)))  # something was dropped
    expected = model({"inputs": dropped, "targets": features["targets"]}, training=False)
    np.testing.assert_allclose(logits, expected, atol=1e-6)
    assert np.abs(logits - model(features, training=False)).max() > 1e-3


def test_symbol_dropout_on_targets_leaves_the_timing_signal_and_the_labels():
    model = _symbol_dropout_model(0.5)
    shifted = tf.constant([[0, 7, 8, 9, 10, 11, 12, 13]])
    with common_layers.dropout_seed(tf.constant([1, 2], tf.int64)):
        x = model._decoder_input(shifted, training=True)
        dropped = model.targets_symbol_dropout(shifted, training=True).numpy()[0]
    eval_x = model._decoder_input(shifted, training=False).numpy()[0]
    timing_only = model._decoder_input(tf.zeros_like(shifted), training=False).numpy()[0]
    drop = (dropped == 0) & (shifted.numpy()[0] != 0)
    assert drop.any() and not drop.all()
    np.testing.assert_allclose(x[0][drop], timing_only[drop], atol=1e-6)
    np.testing.assert_allclose(x[0][~drop], eval_x[~drop], atol=1e-6)
    # The loss still scores every real target token.
    features = {"inputs": tf.constant([[4, 5, 6, 1]]), "targets": tf.constant([[7, 8, 9, 1, 0]])}
    with common_layers.dropout_seed(tf.constant([1, 2], tf.int64)):
        _, den = model.training_loss(features, 0.1, training=True)
    assert float(den) == 4.0


def test_symbol_dropout_changes_nothing_outside_training():
    model = _symbol_dropout_model(0.5)
    plain = _symbol_dropout_model(0.0)
    plain.set_weights(model.get_weights())
    inputs = tf.constant([[4, 5, 6, 7, 1]])
    np.testing.assert_array_equal(model.infer({"inputs": inputs}, decode_length=4)["outputs"],
                                  plain.infer({"inputs": inputs}, decode_length=4)["outputs"])
    features = {"inputs": inputs, "targets": tf.constant([[7, 8, 1]])}
    np.testing.assert_array_equal(model(features), plain(features))
