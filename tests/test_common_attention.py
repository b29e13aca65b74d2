"""common_attention against the t2t fixtures (timing.npz) and a numpy multi-head attention."""
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.layers import common_attention, common_layers, fused_ops


@pytest.fixture(scope="module")
def timing(t2t_fixtures):
    return dict(np.load(t2t_fixtures / "timing.npz"))


@pytest.mark.parametrize("key, args", [
    ("timing_50_512", {"length": 50, "channels": 512}),
    ("timing_7_64", {"length": 7, "channels": 64}),
    ("timing_20_33", {"length": 20, "channels": 33}),
    ("timing_7_64_start3", {"length": 7, "channels": 64, "start_index": 3}),
    ("timing_10_16_min2_max100", {"length": 10, "channels": 16, "min_timescale": 2.0,
                                      "max_timescale": 100.0}),
])
def test_timing_signal_matches_t2t(timing, key, args):
    signal = common_attention.get_timing_signal_1d(**args)
    assert signal.dtype == tf.float32 and signal.shape == timing[key].shape
    np.testing.assert_allclose(signal, timing[key], atol=1e-6)


@pytest.mark.parametrize("name", ["add_timing", "add_timing_odd"])
def test_add_timing_signal_matches_t2t(timing, name):
    out = common_attention.add_timing_signal_1d(tf.constant(timing[name + "_input"]))
    np.testing.assert_allclose(out, timing[name + "_output"], atol=1e-6)


def test_timing_signal_reference_rows():
    # T2T_REFERENCE §2.4: concatenated sines then cosines; odd C gets a trailing zero.
    s8 = common_attention.get_timing_signal_1d(3, 8).numpy()[0]
    np.testing.assert_allclose(s8[0], [0, 0, 0, 0, 1, 1, 1, 1], atol=1e-6)
    np.testing.assert_allclose(
        s8[1], [0.841471, 0.046399, 0.002154, 0.0001, 0.540302, 0.998923, 0.999998, 1.0],
        atol=1e-6)
    s7 = common_attention.get_timing_signal_1d(3, 7).numpy()[0]
    np.testing.assert_allclose(
        s7[1], [0.841471, 0.01, 0.0001, 0.540302, 0.99995, 1.0, 0.0], atol=1e-6)


def test_biases_and_padding_match_t2t(timing):
    np.testing.assert_allclose(
        common_attention.attention_bias_lower_triangle(5), timing["lower_triangle_5"], atol=1e-6)
    np.testing.assert_allclose(
        common_attention.attention_bias_ignore_padding(timing["padding_mask"]),
        timing["ignore_padding_bias"], atol=1e-6)
    np.testing.assert_allclose(
        common_attention.embedding_to_padding(timing["embedding_for_padding"]),
        timing["embedding_to_padding"], atol=1e-6)


def test_lower_triangle_values():
    bias = common_attention.attention_bias_lower_triangle(3).numpy()[0, 0]
    np.testing.assert_array_equal(bias, [[0, -1e9, -1e9], [0, 0, -1e9], [0, 0, 0]])


def test_split_and_combine_heads_roundtrip():
    x = tf.reshape(tf.range(2 * 3 * 8, dtype=tf.float32), [2, 3, 8])
    heads = common_attention.split_heads(x, 4)
    assert heads.shape == (2, 4, 3, 2)
    # Head j holds channels 2j, 2j+1.
    np.testing.assert_array_equal(heads[0, 1, 0], x[0, 0, 2:4])
    np.testing.assert_array_equal(common_attention.combine_heads(heads), x)


def np_attention(query, memory, wq, wk, wv, wo, heads, bias):
    def split(t):
        b, n, d = t.shape
        return t.reshape(b, n, heads, d // heads).transpose(0, 2, 1, 3)

    q, k, v = split(query @ wq), split(memory @ wk), split(memory @ wv)
    q = q * (q.shape[-1] ** -0.5)
    logits = q @ k.transpose(0, 1, 3, 2) + bias
    w = np.exp(logits - logits.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    out = (w @ v).transpose(0, 2, 1, 3)
    return out.reshape(out.shape[0], out.shape[1], -1) @ wo


@pytest.fixture(scope="module")
def attention():
    layer = common_attention.MultiheadAttention(num_heads=2, hidden_size=8)
    layer.build()
    return layer


def _kernels(layer):
    return [w.numpy() for w in (layer.q.kernel, layer.k.kernel, layer.v.kernel,
                                layer.output_transform.kernel)]


def test_multihead_attention_matches_numpy(attention):
    rng = np.random.default_rng(0)
    query = rng.normal(size=(2, 3, 8)).astype(np.float32)
    memory = rng.normal(size=(2, 5, 8)).astype(np.float32)
    padding = np.array([[0, 0, 0, 1, 1], [0, 0, 0, 0, 0]], np.float32)
    bias = common_attention.attention_bias_ignore_padding(padding)
    got = attention(query, memory=memory, bias=bias).numpy()
    want = np_attention(query, memory, *_kernels(attention), 2, bias.numpy())
    np.testing.assert_allclose(got, want, atol=1e-5)
    # Self-attention (fused q/k/v matmul) equals the separate projections.
    causal = common_attention.attention_bias_lower_triangle(3)
    np.testing.assert_allclose(
        attention(query, bias=causal),
        np_attention(query, query, *_kernels(attention), 2, causal.numpy()), atol=1e-5)
    assert [w.path for w in attention.weights] == [
        f"multihead_attention/{n}/kernel" for n in ("q", "k", "v", "output_transform")]


def test_self_attention_cache_equals_full_causal_attention(attention):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 4, 8)).astype(np.float32)
    full = attention(x, bias=common_attention.attention_bias_lower_triangle(4)).numpy()
    max_len = 6  # more slots than steps: unwritten slots must get zero weight
    cache = {"k": tf.zeros([2, 2, max_len, 4]), "v": tf.zeros([2, 2, max_len, 4])}
    for i in range(4):
        bias = tf.reshape(tf.where(tf.range(max_len) <= i, 0.0, -1e9), [1, 1, 1, max_len])
        y, cache = attention(x[:, i:i + 1], bias=bias, cache=cache, decode_step=i)
        assert cache["k"].shape == (2, 2, max_len, 4)
        np.testing.assert_allclose(y[:, 0], full[:, i], atol=1e-5)
    np.testing.assert_array_equal(cache["k"][:, :, 4:], 0.0)
    # A growing cache (no decode_step, no bias) appends a position per step and gives the
    # same outputs and, at the end, the written slots of the fixed cache.
    grown = {"k": tf.zeros([2, 2, 0, 4]), "v": tf.zeros([2, 2, 0, 4])}
    for i in range(4):
        y, grown = attention(x[:, i:i + 1], cache=grown)
        assert grown["k"].shape == (2, 2, i + 1, 4)
        np.testing.assert_allclose(y[:, 0], full[:, i], atol=1e-5)
    np.testing.assert_array_equal(grown["v"], cache["v"][:, :, :4])


@pytest.mark.parametrize("block", [1, 2, 100])
def test_beam_slot_storage_equals_a_reordered_cache(attention, block):
    """Beam search's slot storage (keys stay in the slot that wrote them, a slot mask picks
    each hypothesis' history) gives the outputs of a growing cache whose rows are copied to
    their new beams after every step, with random parents (2 sentences, 3 beams), whether
    the positions are settled every step, every 2 steps or never."""
    rng = np.random.default_rng(4)
    batch, beams, steps = 2, 3, 5
    rows = batch * beams
    reordered = {"k": tf.zeros([rows, 2, 0, 4]), "v": tf.zeros([rows, 2, 0, 4])}
    empty = tf.zeros([batch, 2, beams, 0, 4])
    storage = {"k": empty, "v": empty, "k_recent": empty, "v_recent": empty}
    slot_ids = tf.zeros([rows, 0, 1], tf.int32)
    own_slot = tf.reshape(tf.range(rows) % beams, [rows, 1, 1])
    for _ in range(steps):
        x = rng.normal(size=(rows, 1, 8)).astype(np.float32)
        expected, reordered = attention(x, cache=reordered)
        slot_ids = tf.concat([slot_ids, own_slot], axis=1)
        mask = common_attention.beam_slot_mask(slot_ids, beams, tf.float32)
        assert mask.shape == (batch, 1, beams, beams, slot_ids.shape[1])
        got, cache = attention(x, cache=dict(storage, slot_mask=mask))
        np.testing.assert_allclose(got, expected, atol=1e-6)
        storage = {part: cache[part] for part in storage}
        # Settled every 2 positions: steps see 0-1 recent and 0-4 settled positions.
        storage = common_attention.settle_beam_slots({"layer": storage}, block)["layer"]
        parents = (rng.integers(0, beams, size=(batch, beams))
                   + np.arange(batch)[:, None] * beams).reshape(-1)
        reordered = {name: tf.gather(t, parents) for name, t in reordered.items()}
        slot_ids = tf.gather(slot_ids, parents)
    assert storage["k"].shape[3] + storage["k_recent"].shape[3] == steps
    assert storage["k"].shape[3] == (steps // block) * block


def test_memory_kv_equals_memory(attention):
    rng = np.random.default_rng(2)
    query = rng.normal(size=(2, 1, 8)).astype(np.float32)
    memory = rng.normal(size=(2, 5, 8)).astype(np.float32)
    kv = attention.compute_memory_kv(memory)
    assert kv["k"].shape == (2, 2, 5, 4)
    np.testing.assert_allclose(
        attention(query, memory_kv=kv), attention(query, memory=memory), atol=1e-6)


def test_memory_kv_of_beams_reads_the_untiled_memory(attention):
    """Beam search's query rows b * K + k attend to memory row b (projected once, untiled):
    the same as tiling the memory and its padding bias to every beam, and returned weights
    keep the per-row [B * K, H, Lq, Lm] layout."""
    rng = np.random.default_rng(3)
    beams = 3
    query = rng.normal(size=(2 * beams, 1, 8)).astype(np.float32)
    memory = rng.normal(size=(2, 5, 8)).astype(np.float32)
    bias = common_attention.attention_bias_ignore_padding(
        tf.constant([[0, 0, 0, 1, 1], [0, 0, 0, 0, 0]], tf.float32))
    tiled_memory, tiled_bias = (tf.repeat(t, beams, axis=0) for t in (memory, bias))
    expected = attention(query, memory=tiled_memory, bias=tiled_bias)
    got, weights = attention(query, bias=bias, memory_kv=attention.compute_memory_kv(memory),
                             return_attention_scores=True)
    np.testing.assert_allclose(got, expected, atol=1e-6)
    weights = weights.numpy()
    assert weights.shape == (2 * beams, 2, 1, 5)
    np.testing.assert_array_equal(weights[:beams, :, :, 3:], 0.0)  # row 0's padding
    assert (weights[beams:] > 0).all()


def test_attention_scores_are_refused_with_a_decode_cache(attention):
    cache = {"k": tf.zeros([1, 2, 0, 4]), "v": tf.zeros([1, 2, 0, 4])}
    with pytest.raises(ValueError, match="return_attention_scores is for calls without"):
        attention(tf.zeros([1, 1, 8]), cache=cache, return_attention_scores=True)


def test_attention_dropout_broadcast_and_errors():
    layer = common_attention.MultiheadAttention(2, 8, dropout=0.5, dropout_broadcast_dims="0")
    layer.build()
    x = tf.random.normal([3, 4, 8])
    np.testing.assert_allclose(layer(x), layer(x, training=False))
    assert not np.allclose(layer(x, training=True), layer(x))
    with pytest.raises(ValueError, match="hidden_size=8 is not divisible by hparams.num_heads=3"):
        common_attention.MultiheadAttention(3, 8)


def test_small_tensor_permutations_equal_transposes():
    """The decode step's permutations (a gather over merged axes; head splits of one
    position) give exactly what tf.transpose gives."""
    rng = np.random.default_rng(5)
    x = tf.constant(rng.normal(size=(3, 4, 5, 2, 6)).astype(np.float32))
    np.testing.assert_array_equal(common_attention._swap_axes_1_2(x),
                                  tf.transpose(x, [0, 2, 1, 3, 4]))
    one_position = tf.constant(rng.normal(size=(6, 1, 8)).astype(np.float32))
    heads = common_attention.split_heads(one_position, 2)
    np.testing.assert_array_equal(
        heads, tf.transpose(tf.reshape(one_position, [6, 1, 2, 4]), [0, 2, 1, 3]))
    np.testing.assert_array_equal(common_attention.combine_heads(heads), one_position)
    grouped = common_attention._group_beams(tf.reshape(x, [12, 5, 2, 6]), 2)
    assert grouped.shape == (6, 5, 4, 6)
    np.testing.assert_array_equal(
        common_attention._ungroup_beams(grouped, 2), tf.reshape(x, [12, 5, 2, 6]))


@pytest.mark.parametrize("noise_shape", [None, [2, 1, 5, 7]])
def test_softmax_dropout_matmul_equals_the_three_ops_in_value_and_gradient(noise_shape):
    logits = tf.random.normal([2, 3, 5, 7], seed=1) * 2
    v = tf.random.normal([2, 3, 7, 4], seed=2)
    upstream = tf.random.normal([2, 3, 5, 4], seed=3)
    seed = tf.constant([5, 6], tf.int64)
    shape = None if noise_shape is None else tf.constant(noise_shape)
    results = []
    for fused in (False, True):
        with tf.GradientTape() as tape:
            tape.watch([logits, v])
            if fused:
                mask = fused_ops.stateless_scaled_mask(
                    tf.shape(logits) if shape is None else shape, 0.4, seed)
                out = fused_ops.softmax_dropout_matmul(logits, v, mask)
            else:
                out = tf.matmul(fused_ops.stateless_dropout(
                    tf.nn.softmax(logits), 0.4, seed, shape), v)
            total = tf.reduce_sum(out * upstream)
        results.append([out.numpy()] + [g.numpy() for g in tape.gradient(total, [logits, v])])
    for got, want in zip(results[1], results[0]):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_attention_layer_fused_and_plain_give_the_same_values_and_gradients():
    """`fused=False` runs softmax, the Dropout layer and matmul as plain ops: the same mask
    (the dropout layer's own stateless draw) and the same values as the fused kernel."""
    x = tf.random.normal([2, 5, 8], seed=4)
    bias = common_attention.attention_bias_lower_triangle(5)
    results, weights = [], None
    for fused in (True, False):
        layer = common_attention.MultiheadAttention(2, 8, dropout=0.5, fused=fused)
        layer.build()
        weights = weights or layer.get_weights()
        layer.set_weights(weights)
        with common_layers.dropout_seed(tf.constant([2, 8], tf.int64)), \
                tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, bias=bias, training=True)
            total = tf.reduce_sum(y * y)
        grads = tape.gradient(total, [x] + layer.trainable_variables)
        results.append([y.numpy()] + [g.numpy() for g in grads])
    no_dropout = common_attention.MultiheadAttention(2, 8, fused=True)
    no_dropout.build()
    no_dropout.set_weights(weights)
    # Dropout was active (a 0.5 mask changes the output).
    assert not np.allclose(results[0][0], no_dropout(x, bias=bias).numpy(), atol=1e-3)
    for got, want in zip(results[1], results[0]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
