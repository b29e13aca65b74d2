"""Relative position self-attention (t2t's self_attention_type=dot_product_relative, Shaw et
al. 2018): the relative positions matrix, the attention against a direct formula and its
decoding row, a checkpoint of the ORIGINAL t2t (tests/fixtures/t2t_relative, made by its
make_fixture.py with tensor2tensor 1.15.7) imported and run, cached against slow decoding,
the hparams sets, and the exports."""
import json
import pathlib

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import hparams_support, registry
from t2t_lite.decoding import decode_hparams
from t2t_lite.errors import UserError
from t2t_lite.export import export
from t2t_lite.hparams_lib import create_hparams
from t2t_lite.layers import common_attention
from t2t_lite.models import t2t_checkpoint
from t2t_lite.models.transformer import Transformer
from t2t_lite.training import t2t_import

FIXTURE = pathlib.Path(__file__).resolve().parent / "fixtures" / "t2t_relative"
TINY = "hidden_size=16,filter_size=32,num_heads=2,max_relative_position=2"


def _tiny(overrides: str = "", seed: int = 5, vocab: int = 13) -> Transformer:
    keras.utils.set_random_seed(seed)
    hp = create_hparams("transformer_relative_tiny", ",".join(filter(None, [TINY, overrides])))
    return Transformer(hp, vocab, vocab)


# --- The pieces, by hand ----------------------------------------------------------------------

def test_relative_positions_matrix_is_clipped_key_minus_query_plus_max():
    matrix = common_attention._generate_relative_positions_matrix(5, 5, 2).numpy()
    # Row i, column j: clip(j - i, -2, 2) + 2.
    assert matrix.tolist() == [[2, 3, 4, 4, 4],
                               [1, 2, 3, 4, 4],
                               [0, 1, 2, 3, 4],
                               [0, 0, 1, 2, 3],
                               [0, 0, 0, 1, 2]]
    # Fewer queries than keys: the queries are the last positions.
    assert common_attention._generate_relative_positions_matrix(2, 4, 1).numpy().tolist() == [
        [0, 0, 1, 2], [0, 0, 0, 1]]


def test_cache_row_is_the_last_row_of_the_full_matrix():
    for length in (1, 3, 7):
        full = common_attention._generate_relative_positions_matrix(length, length, 2).numpy()
        row = common_attention._generate_relative_positions_matrix(1, length, 2, cache=True)
        assert row.numpy().tolist() == full[-1:].tolist()
        # The fixed-size cache's row at step length - 1 is the same.
        at_step = common_attention._relative_positions_matrix_at_step(length, length - 1, 2)
        assert at_step.numpy().tolist() == full[-1:].tolist()
    assert common_attention._relative_positions_matrix_at_step(6, 2, 2).numpy().tolist() == [
        [0, 1, 2, 3, 4, 4]]


def _reference_attention(q, k, v, bias, keys_table, values_table, m):
    """The attention written out: logits[i, j] = q_i . (k_j + aK[clip(j - i)])."""
    length_q, length_k = q.shape[2], k.shape[2]
    first = length_k - length_q
    rel = np.clip(np.arange(length_k)[None, :] - (first + np.arange(length_q))[:, None], -m, m) + m
    a_k, a_v = keys_table[rel], values_table[rel]  # [Lq, Lk, d]
    logits = np.einsum("bhid,bhjd->bhij", q, k) + np.einsum("bhid,ijd->bhij", q, a_k) + bias
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return np.einsum("bhij,bhjd->bhid", weights, v) + np.einsum("bhij,ijd->bhid", weights, a_v)


def test_attention_equals_the_formula_and_its_cache_row_the_last_row():
    rng = np.random.default_rng(0)
    b, h, length, d, m = 2, 3, 6, 4, 2
    q, k, v = (rng.standard_normal([b, h, length, d]).astype(np.float32) for _ in range(3))
    keys_table, values_table = (rng.standard_normal([2 * m + 1, d]).astype(np.float32)
                                for _ in range(2))
    bias = common_attention.attention_bias_lower_triangle(length).numpy()
    out, weights = common_attention.dot_product_attention_relative(
        q, k, v, bias, m, keys_table, values_table)
    expected = _reference_attention(q, k, v, bias, keys_table, values_table, m)
    np.testing.assert_allclose(out.numpy(), expected, atol=1e-5)
    assert weights.shape == (b, h, length, length)
    np.testing.assert_allclose(weights.numpy().sum(-1), 1.0, atol=1e-6)
    # Decoding: the last query alone against all keys (t2t's cache branch).
    last, _ = common_attention.dot_product_attention_relative(
        q[:, :, -1:], k, v, None, m, keys_table, values_table, cache=True)
    np.testing.assert_allclose(last.numpy(), out.numpy()[:, :, -1:], atol=1e-5)
    # A fixed-size cache of 8 slots at step 3: the masked slots 4..7 get no weight.
    slots = np.concatenate([k[:, :, :4], rng.standard_normal([b, h, 4, d])], axis=2)
    values = np.concatenate([v[:, :, :4], rng.standard_normal([b, h, 4, d])], axis=2)
    mask = np.where(np.arange(8) <= 3, 0.0, -1e9).reshape([1, 1, 1, 8]).astype(np.float32)
    step, _ = common_attention.dot_product_attention_relative(
        q[:, :, 3:4], slots.astype(np.float32), values.astype(np.float32), mask, m,
        keys_table, values_table, cache=True, decode_step=3)
    np.testing.assert_allclose(step.numpy(), out.numpy()[:, :, 3:4], atol=1e-5)


def test_max_relative_position_zero_is_refused_as_in_t2t():
    with pytest.raises(ValueError, match="should be > 0"):
        common_attention.dot_product_attention_relative(
            tf.zeros([1, 1, 2, 2]), tf.zeros([1, 1, 2, 2]), tf.zeros([1, 1, 2, 2]), None, 0,
            tf.zeros([1, 2]), tf.zeros([1, 2]))


# --- The original t2t's checkpoint ------------------------------------------------------------

@pytest.fixture(scope="module")
def t2t_relative():
    """(t2t_lite model with the fixture checkpoint imported, the fixture's arrays, its json)."""
    meta = json.loads((FIXTURE / "relative.json").read_text())
    overrides = ",".join(f"{k}={v}" for k, v in meta["overrides"].items())
    hp = create_hparams(meta["hparams_set"], overrides)
    model = t2t_checkpoint.load_model(str(FIXTURE / "ckpt"), hp)
    return model, dict(np.load(FIXTURE / "relative.npz")), meta


def test_t2t_checkpoint_imports_with_its_relative_embeddings(t2t_relative):
    model, _, meta = t2t_relative
    names = t2t_checkpoint.t2t_variable_map(model)
    t2t_names = {n: s for n, s in meta["variables"] if n != "global_step"}
    assert {n: list(v.shape) for n, v in names.items()} == t2t_names
    relative = sorted(n for n in names if "relative_positions" in n)
    assert len(relative) == 8  # keys and values, 2 encoder + 2 decoder self-attentions
    assert all("/self_attention/multihead_attention/dot_product_attention_relative/" in n
               for n in relative)
    assert t2t_names[relative[0]] == [2 * 3 + 1, 32 // 4]
    # The weight paths are t2t's names too.
    assert set(relative) <= {w.path for w in model.weights}


def test_import_t2t_run_directory_keeps_the_relative_hparams(t2t_relative, tmp_path):
    """import_t2t's run directory: hparams.json records pos=None and the relative settings,
    and a model rebuilt from it restores the checkpoint and gives t2t's logits."""
    model, data, meta = t2t_relative
    path = t2t_import.import_checkpoint(str(FIXTURE / "ckpt"), model.hparams,
                                        str(tmp_path / "run"))
    stored = json.loads((tmp_path / "run" / "hparams.json").read_text())
    assert (stored["pos"], stored["self_attention_type"], stored["max_relative_position"]) == (
        None, "dot_product_relative", 3)
    hp = create_hparams(meta["hparams_set"], hparams_json_path=str(tmp_path / "run" /
                                                                  "hparams.json"))
    restored = Transformer(hp, 20, 20)
    tf.train.Checkpoint(step=tf.Variable(0, dtype=tf.int64), model=restored).restore(
        path).assert_existing_objects_matched()
    logits = restored({"inputs": data["inputs"], "targets": data["targets"],
                       "target_space_id": data["target_space_id"]})
    np.testing.assert_allclose(logits.numpy(), data["logits"], atol=1e-5)


def test_logits_equal_t2t(t2t_relative):
    model, data, _ = t2t_relative
    logits = model({"inputs": data["inputs"], "targets": data["targets"],
                    "target_space_id": data["target_space_id"]})
    np.testing.assert_allclose(logits.numpy(), data["logits"], atol=1e-5)


def test_greedy_and_beam_decodes_equal_t2t(t2t_relative):
    model, data, meta = t2t_relative
    features = {"inputs": data["inputs"], "target_space_id": data["target_space_id"]}
    length = meta["decode_length"]
    # t2t decodes relative models greedily with its slow path, which runs every step with a
    # batch > 1: force_decode_length, cached and slow.
    for use_cache in (True, False):
        greedy = model.infer(features, decode_length=length, force_decode_length=True,
                             use_cache=use_cache)
        assert greedy["outputs"].numpy().tolist() == data["greedy_outputs"].tolist()
    beam = model.infer(features, decode_length=length, beam_size=meta["beam_size"],
                       alpha=meta["alpha"])
    assert beam["outputs"].numpy().tolist() == data["beam_outputs"].tolist()
    np.testing.assert_allclose(beam["scores"].numpy(), data["beam_scores"], atol=1e-5)
    top = model.infer(features, decode_length=length, beam_size=meta["beam_size"],
                      alpha=meta["alpha"], top_beams=meta["beam_size"])
    assert top["outputs"].numpy().tolist() == data["top_beams_outputs"].tolist()
    np.testing.assert_allclose(top["scores"].numpy(), data["top_beams_scores"], atol=1e-5)
    # The greedy and beam decodes differ (the fixture is not degenerate).
    assert data["greedy_outputs"][0].tolist() != data["beam_outputs"][0].tolist()


# --- Decoding -----------------------------------------------------------------------------

@pytest.mark.parametrize("jit_compile", [False, pytest.param(True, marks=pytest.mark.slow)])
@pytest.mark.parametrize("beam_size", [1, 3])
def test_cached_decoding_equals_full_recompute(beam_size, jit_compile):
    """Fast decoding (growing caches, which beam search reorders; with XLA fixed-size caches)
    equals recomputing the whole decoder on each prefix, past the clipping distance (2)."""
    model = _tiny("initializer_gain=4.0", seed=1)  # larger weights: varied decodes
    features = {"inputs": tf.constant([[3, 7, 9, 4, 1], [5, 11, 1, 0, 0]])}
    kwargs = {"decode_length": 6, "beam_size": beam_size, "top_beams": beam_size,
              "force_decode_length": True}
    slow = model.infer(features, use_cache=False, **kwargs)
    fast = model.infer(features, jit_compile=jit_compile, **kwargs)
    assert slow["outputs"].shape[-1] == 11
    assert fast["outputs"].numpy().tolist() == slow["outputs"].numpy().tolist()
    np.testing.assert_allclose(fast["scores"].numpy(), slow["scores"].numpy(), atol=1e-4)
    # Not one repeated token: the decodes exercise the positions.
    assert len(set(slow["outputs"].numpy().ravel().tolist())) > 2


def test_training_reaches_the_relative_embeddings():
    model = _tiny("attention_dropout=0.1")
    features = {"inputs": tf.constant([[3, 7, 9, 1]]), "targets": tf.constant([[4, 8, 1]])}
    tables = [w for w in model.trainable_weights if "relative_positions" in w.path]
    assert len(tables) == 8
    with tf.GradientTape() as tape:
        num, den = model.training_loss(features, 0.1, training=True)
    assert float(den) == 3.0
    grads = tape.gradient(num, tables)
    assert all(g is not None and float(tf.reduce_sum(tf.abs(g))) > 0 for g in grads)


# --- Hparams ------------------------------------------------------------------------------

def test_relative_sets_have_t2t_values():
    base, big = create_hparams("transformer_base"), create_hparams("transformer_big")
    relative = create_hparams("transformer_relative")
    assert (relative.pos, relative.self_attention_type, relative.max_relative_position) == (
        None, "dot_product_relative", 20)
    assert relative.values() == dict(base.values(), pos=None,
                                     self_attention_type="dot_product_relative",
                                     max_relative_position=20)
    tiny = create_hparams("transformer_relative_tiny")
    assert (tiny.num_hidden_layers, tiny.hidden_size, tiny.filter_size, tiny.num_heads) == (
        2, 128, 512, 4)
    assert create_hparams("transformer_relative_big").values() == dict(
        big.values(), pos=None, self_attention_type="dot_product_relative",
        max_relative_position=20)
    assert {"transformer_relative", "transformer_relative_tiny",
            "transformer_relative_big"} <= set(registry.list_hparams())


@pytest.mark.parametrize("override, message", [
    ("self_attention_type=dot_product_relative_v2",
     "hparams.self_attention_type='dot_product_relative_v2' is not supported"),
    ("self_attention_type=local_mask_right",
     "hparams.self_attention_type='local_mask_right' is not supported"),
    ("max_relative_position=0", "hparams.max_relative_position=0 is not supported"),
])
def test_unimplemented_values_are_refused_by_name(override, message):
    hp = create_hparams("transformer_relative_tiny", override)
    with pytest.raises(ValueError, match=message) as info:
        hparams_support.check_supported(hp)
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match=message):
        Transformer(hp, 10, 10)


def test_heads_share_and_add_relative_to_values_change_nothing_as_in_t2t():
    """t2t 1.15's dot_product_relative reads neither (only the _v2 and local types do)."""
    reference = _tiny()
    features = {"inputs": tf.constant([[3, 7, 9, 1]]), "targets": tf.constant([[4, 8, 6, 1]])}
    expected = reference(features).numpy()
    for override in ("heads_share_relative_embedding=true", "add_relative_to_values=true"):
        model = _tiny(override)
        assert [(w.path, w.shape) for w in model.weights] == [
            (w.path, w.shape) for w in reference.weights]
        model.set_weights(reference.get_weights())
        np.testing.assert_array_equal(model(features).numpy(), expected)


def test_layers_rebuild_from_their_config():
    layer = _tiny().body.encoder.layer_0
    config = layer.get_config()
    assert (config["self_attention_type"], config["max_relative_position"]) == (
        "dot_product_relative", 2)
    attention = layer.self_attention
    copy = type(attention).from_config(attention.get_config())
    copy.build()
    assert isinstance(copy, common_attention.MultiheadAttentionRelative)
    assert [tuple(w.shape) for w in copy.weights] == [tuple(w.shape) for w in attention.weights]


def test_attention_key_and_value_depths_must_match():
    with pytest.raises(ValueError, match="attention_key_channels == attention_value_channels"):
        _tiny("attention_value_channels=8")


# --- Exports ------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("beam_size", [1, 2])
def test_saved_model_decodes_as_the_model(tmp_path, beam_size):
    model = _tiny()
    inputs = tf.constant([[3, 7, 9, 4, 1], [5, 11, 1, 0, 0]])
    module = export.ServingModule(
        model, None, None,
        decode_hparams.decode_hparams(f"beam_size={beam_size},extra_length=4"), None, 0)
    path = export.export(module, str(tmp_path / f"beam{beam_size}"))
    loaded = tf.saved_model.load(path)
    served = loaded.signatures["encode_decode_ids"](inputs)
    expected = model.infer({"inputs": inputs}, decode_length=4, beam_size=beam_size)
    outputs = expected["outputs"].numpy()
    after_eos = np.cumsum(outputs == 1, axis=-1) - (outputs == 1) > 0
    assert served["outputs"].numpy().tolist() == np.where(after_eos, 0, outputs).tolist()
    np.testing.assert_allclose(served["scores"].numpy(), expected["scores"].numpy(),
                               atol=1e-5)


def test_ctranslate2_export_refuses_relative_attention():
    from t2t_lite.export import ct2

    model = _tiny()
    with pytest.raises(UserError, match="self_attention_type=dot_product_relative") as info:
        ct2.check_exportable(model.hparams)
    assert "\n" not in str(info.value)
