"""common_layers against t2t's formulas: layer norm, broadcast dropout, pre/post-process
sequences (hand-computed), dense_relu_dense and the padded cross-entropy reference (§3)."""
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.hparams_lib import create_hparams
from t2t_lite.layers import common_layers, fused_ops
from t2t_lite.utils import onednn


def np_layer_norm(x, scale=1.0, bias=0.0, eps=1e-6):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + bias


def test_layer_norm_matches_t2t_formula_and_names():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 3, 8)).astype(np.float32)
    norm = common_layers.LayerNorm(1e-6)
    norm.build(x.shape)
    scale = rng.normal(size=8).astype(np.float32)
    bias = rng.normal(size=8).astype(np.float32)
    norm.scale.assign(scale)
    norm.bias.assign(bias)
    np.testing.assert_allclose(norm(x), np_layer_norm(x, scale, bias), atol=1e-5)
    assert [w.path for w in norm.weights] == [
        "layer_norm/layer_norm_scale", "layer_norm/layer_norm_bias"]


def test_layer_norm_epsilon_is_t2t_not_keras():
    # Small variance makes epsilon visible: var = 1e-6, so rsqrt(var + 1e-6) = 1/sqrt(2e-6).
    x = np.array([[1.0, 1.002]], np.float32)
    out = common_layers.LayerNorm(1e-6)(x).numpy()
    np.testing.assert_allclose(out, [[-1 / np.sqrt(2), 1 / np.sqrt(2)]], rtol=1e-3)


@pytest.mark.parametrize("dims, rank, expected", [
    ("", 3, None),
    ("0", 3, [1, None, None]),
    ("0,1", 3, [1, 1, None]),
    ("-1", 4, [None, None, None, 1]),
    ("1,-2", 4, [None, 1, 1, None]),
])
def test_broadcast_noise_shape(dims, rank, expected):
    parsed = common_layers.comma_separated_string_to_integer_list(dims)
    assert common_layers.broadcast_noise_shape(rank, parsed) == expected


def test_bad_broadcast_dims_fail_clearly():
    with pytest.raises(ValueError, match="comma-separated integers"):
        common_layers.comma_separated_string_to_integer_list("0;1")
    with pytest.raises(ValueError, match="out of range"):
        common_layers.broadcast_noise_shape(3, [3])


def test_dropout_shares_mask_along_broadcast_dims():
    x = tf.ones([4, 6, 5])
    layer = common_layers.Dropout(0.5, "0,1", seed=3)
    y = layer(x, training=True).numpy()
    assert set(np.unique(y)) <= {0.0, 2.0}  # inverted scaling 1 / (1 - rate)
    # One mask per channel, the same for every batch row and position.
    assert (y == y[:1, :1, :]).all()
    assert 0 < (y == 0).sum() < y.size
    np.testing.assert_array_equal(layer(x, training=False), x)



@pytest.mark.parametrize("shape", [(5, 16), (3, 4, 16)])
def test_layer_norm_closed_form_gradient_equals_autodiff_of_t2t_formula(shape):
    rng = np.random.default_rng(1)
    # float64 and a variance near epsilon: the closed form must be the exact derivative.
    x = tf.constant(rng.normal(size=shape) * np.linspace(1e-3, 3, shape[-1]) + 2.0)
    scale, bias = (tf.constant(rng.normal(size=shape[-1])) for _ in range(2))
    upstream = tf.constant(rng.normal(size=shape))
    grads = []
    for fused in (False, True):
        with tf.GradientTape() as tape:
            tape.watch([x, scale, bias])
            y = common_layers.layer_norm_compute(x, 1e-6, scale, bias, fused)
            total = tf.reduce_sum(y * upstream)
        grads.append([g.numpy() for g in tape.gradient(total, [x, scale, bias])])
    for got, want in zip(grads[1], grads[0]):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_layer_norm_forward_is_t2t_formula_bit_for_bit_in_float32():
    rng = np.random.default_rng(2)
    x = tf.constant(rng.normal(size=(6, 32)).astype(np.float32))
    scale = tf.constant(rng.normal(size=32).astype(np.float32))
    bias = tf.constant(rng.normal(size=32).astype(np.float32))
    np.testing.assert_array_equal(common_layers.layer_norm_compute(x, 1e-6, scale, bias),
                                  common_layers.layer_norm_plain(x, scale, bias, 1e-6))


@pytest.mark.parametrize("rate", [0.1, 0.3, 0.5])
def test_stateless_dropout_rate_scaling_and_determinism(rate):
    x = tf.ones([301, 333])
    seed = tf.constant([7, 11], tf.int64)
    y = fused_ops.stateless_dropout(x, rate, seed).numpy()
    assert set(np.unique(y)) == {0.0, np.float32(1 / (1 - rate))}
    dropped = (y == 0).mean()
    # 100,233 units: 5 standard deviations of the binomial are < 0.008.
    assert abs(dropped - rate) < 5 * np.sqrt(rate * (1 - rate) / y.size)
    np.testing.assert_array_equal(fused_ops.stateless_dropout(x, rate, seed), y)
    other = fused_ops.stateless_dropout(x, rate, tf.constant([7, 12], tf.int64)).numpy()
    assert ((other == 0) != (y == 0)).mean() > rate  # another seed, another mask


def _lowbias32_reference(x: int) -> int:
    """Wellons' lowbias32 on a Python int, the published constants."""
    x ^= x >> 16
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    return x ^ (x >> 16)


def test_hashed_bits_match_a_python_reference_and_the_xla_kernel():
    seed = tf.constant([0x0123456789ABCDEF, -5], tf.int64)
    words = np.frombuffer(np.array([0x0123456789ABCDEF, -5], np.int64).tobytes(), np.uint32)
    bits = fused_ops.hashed_bits(tf.constant(3), tf.constant(7), seed).numpy()
    assert bits.dtype == np.uint32 and bits.shape == (3, 7)
    for n in range(21):
        counter = (n + int(words[0])) & 0xFFFFFFFF
        expected = _lowbias32_reference(
            (_lowbias32_reference(counter ^ int(words[1])) + int(words[2])) & 0xFFFFFFFF)
        assert bits.reshape(-1)[n] == expected
    # The compiled kernel draws the same mask as the plain ops, and the counter is the
    # unit's flat position: a [301, 333] mask is the [333 * 301] one reshaped.
    mask = fused_ops.stateless_keep_mask(tf.constant([301, 333]), 0.1, seed).numpy()
    plain = fused_ops.hashed_bits(tf.constant(301), tf.constant(333), seed).numpy()
    np.testing.assert_array_equal(mask, plain >= round(0.1 * 2**32))
    flat = fused_ops.stateless_keep_mask(tf.constant([301 * 333]), 0.1, seed).numpy()
    np.testing.assert_array_equal(mask.reshape(-1), flat)


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16, tf.float16])
def test_scaled_mask_is_the_scale_where_the_keep_mask_keeps_and_zero_elsewhere(dtype):
    seed = tf.constant([21, -4], tf.int64)
    shape = tf.constant([37, 3, 129])
    scaled = fused_ops.stateless_scaled_mask(shape, 0.3, seed, dtype)
    assert scaled.dtype == dtype and scaled.shape == (37, 3, 129)
    keep = fused_ops.stateless_keep_mask(shape, 0.3, seed).numpy()
    plain = fused_ops.hashed_bits(tf.constant(1), tf.constant(37 * 3 * 129), seed).numpy()
    np.testing.assert_array_equal(keep.reshape(-1), plain[0] >= round(0.3 * 2**32))
    scale = tf.cast(1 / 0.7, dtype).numpy()
    np.testing.assert_array_equal(scaled.numpy(), np.where(keep, scale, 0).astype(scale.dtype))


def test_mask_kernel_rows_bound_the_compiled_sizes_and_the_extra_units():
    units = np.unique(np.concatenate([np.arange(1, 5000), np.geomspace(5000, 2**26, 4000)]
                                     ).astype(np.int64))
    rows = np.array([int(fused_ops.mask_kernel_rows(tf.constant(int(n), tf.int32)))
                     for n in units])
    needed = -(-units // 1024)
    assert (rows >= needed).all() and (rows <= np.maximum(needed * 1.125, needed)).all()
    # 1..2**26 units: ceil(units / 1024) in 1..2**16, 8 sizes per octave above 8 rows.
    assert len(np.unique(rows)) <= 8 + 8 * 13


def test_stateless_keep_masks_of_nearby_seeds_are_unrelated():
    # Seeds as the layers get them (one step seed folded with salts 1..4): every pair of
    # masks agrees on a unit as often as independent draws would, p**2 + (1 - p)**2 = 0.82,
    # also when shifted by one unit (a counter-plus-key generator would repeat itself there).
    step_seed = tf.constant([42, 7], tf.int64)
    masks = [fused_ops.stateless_keep_mask(
        tf.constant([512, 256]), 0.1, tf.random.experimental.stateless_fold_in(step_seed, salt)
    ).numpy().reshape(-1) for salt in range(1, 5)]
    sd = np.sqrt(0.82 * 0.18 / masks[0].size)
    for i in range(4):
        for j in range(i + 1, 4):
            for shift in (0, 1):
                agree = (masks[i][shift:] == masks[j][:masks[j].size - shift]).mean()
                assert abs(agree - 0.82) < 5 * sd, (i, j, shift, agree)


def test_stateless_dropout_noise_shape_gradient_and_half_precision():
    seed = tf.constant([1, 2], tf.int64)
    y = fused_ops.stateless_dropout(tf.ones([4, 6, 5]), 0.5, seed, tf.constant([1, 1, 5]))
    assert (y.numpy() == y.numpy()[:1, :1, :]).all()
    assert 0 < (y.numpy() == 0).sum() < y.numpy().size
    x = tf.random.normal([9, 7])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = fused_ops.stateless_dropout(x, 0.25, seed)
        total = tf.reduce_sum(y)
    grad = tape.gradient(total, x).numpy()
    # The gradient passes exactly where the forward kept a unit, scaled as the forward.
    np.testing.assert_array_equal(grad != 0, y.numpy() != 0)
    np.testing.assert_allclose(grad[grad != 0], 1 / 0.75)
    for rate in (0.5, 0.1):
        half = fused_ops.stateless_dropout(tf.ones([64], tf.bfloat16), rate, seed)
        assert half.dtype == tf.bfloat16
        np.testing.assert_array_equal(
            half.numpy() == 0, fused_ops.stateless_dropout(tf.ones([64]), rate, seed) == 0)
    # Kept units are scaled by 1 / (1 - rate) rounded once to the tensor's dtype (float32
    # 1/0.9 rounds to bfloat16 1.109375 by way of float32, as tf.cast does).
    assert set(half.numpy()[half.numpy() != 0].astype(np.float32)) == {1.109375}



@pytest.mark.parametrize("broadcast_dims", ["", "0"])
def test_fused_relu_dropout_equals_the_two_ops_in_value_and_gradient(broadcast_dims):
    z = tf.random.normal([4, 6, 16], seed=5)
    upstream = tf.random.normal([4, 6, 16], seed=6)
    results = []
    for fused in (False, True):
        ffn = common_layers.DenseReluDense(16, 4, dropout=0.3,
                                           dropout_broadcast_dims=broadcast_dims, fused=fused)
        with common_layers.dropout_seed(tf.constant([3, 9], tf.int64)), \
                tf.GradientTape() as tape:
            tape.watch(z)
            mask = ffn.dropout.stateless_scaled_mask(z, training=True)
            if fused:
                y = fused_ops.relu_dropout(z, mask, 0.3)
            else:
                y = ffn.dropout(tf.nn.relu(z), training=True)
            total = tf.reduce_sum(y * upstream)
        results.append((y.numpy(), tape.gradient(total, z).numpy()))
    (y_ref, g_ref), (y, g) = results
    assert 0 < (y == 0).mean() < 1 and (g_ref == 0).any()
    np.testing.assert_array_equal(y, y_ref)
    np.testing.assert_array_equal(g, g_ref)
    # Outside training (or outside a dropout_seed context) there is no stateless mask.
    with common_layers.dropout_seed(tf.constant([3, 9], tf.int64)):
        assert ffn.dropout.stateless_scaled_mask(z, training=False) is None
    assert ffn.dropout.stateless_scaled_mask(z, training=True) is None


def _hand_sublayer_case(sequence_pre, sequence_post):
    """x = [1, 3] (d=2), sublayer f(z) = 2z, no dropout."""
    hp = create_hparams(
        "transformer_tiny",
        f"layer_preprocess_sequence={sequence_pre},layer_postprocess_sequence={sequence_post}",
    )
    pre = common_layers.layer_preprocess(hp.layer_preprocess_sequence)
    post = common_layers.layer_postprocess(hp.layer_postprocess_sequence)
    x = tf.constant([[[1.0, 3.0]]])
    pre.build(x.shape)
    post.build(x.shape)
    y = 2.0 * pre(x)
    return post(y, previous_value=x).numpy()[0, 0], pre, post


def test_post_norm_v1_is_layer_norm_of_residual_sum():
    # "none"/"dan": LN(x + f(x)) = LN([3, 9]) = [-1, 1] * 3 / sqrt(9 + 1e-6).
    out, pre, post = _hand_sublayer_case("none", "dan")
    np.testing.assert_allclose(out, [-3 / np.sqrt(9 + 1e-6), 3 / np.sqrt(9 + 1e-6)], rtol=1e-6)
    assert pre.norms == [] and [n.name for n in post.norms] == ["layer_norm"]
    assert post.name == "layer_postprocess"


def test_pre_norm_v2_is_residual_plus_sublayer_of_layer_norm():
    # "n"/"da": x + f(LN(x)) = [1, 3] + 2 * [-1, 1] / sqrt(1 + 1e-6).
    out, pre, post = _hand_sublayer_case("n", "da")
    r = 1 / np.sqrt(1 + 1e-6)
    np.testing.assert_allclose(out, [1 - 2 * r, 3 + 2 * r], rtol=1e-6)
    assert [n.name for n in pre.norms] == ["layer_norm"] and post.norms == []
    assert pre.name == "layer_prepostprocess"


def test_none_sequence_is_identity_and_dropout_position():
    layer = common_layers.LayerPrepostprocess("da", dropout_rate=0.5)
    x = tf.random.normal([2, 3, 4])
    y = tf.random.normal([2, 3, 4])
    out = layer(y, previous_value=x, training=True).numpy()
    # "da" adds the residual after dropout: each unit is x or x + 2y.
    delta = out - x.numpy()
    kept = np.isclose(delta, 2 * y.numpy(), atol=1e-5)
    dropped = np.isclose(delta, 0.0, atol=1e-6)
    assert (kept | dropped).all() and kept.any() and dropped.any()
    assert np.allclose(common_layers.LayerPrepostprocess("none")(y), y)


def test_repeated_norms_get_t2t_names():
    layer = common_layers.LayerPrepostprocess("ndn")
    layer.build((None, None, 4))
    assert [w.path for w in layer.weights] == [
        "layer_prepostprocess/layer_norm/layer_norm_scale",
        "layer_prepostprocess/layer_norm/layer_norm_bias",
        "layer_prepostprocess/layer_norm_1/layer_norm_scale",
        "layer_prepostprocess/layer_norm_1/layer_norm_bias",
    ]


def test_preprocess_rejects_residual_with_clear_error():
    hp = create_hparams("transformer_tiny", "layer_preprocess_sequence=an")
    with pytest.raises(ValueError, match="layer_preprocess_sequence='an'.*not allowed"):
        common_layers.layer_preprocess(hp.layer_preprocess_sequence)
    hp = create_hparams("transformer_tiny", "layer_postprocess_sequence=dx")
    with pytest.raises(ValueError, match="layer_postprocess_sequence='dx'"):
        common_layers.layer_postprocess(hp.layer_postprocess_sequence)


def test_dense_relu_dense():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 3, 4)).astype(np.float32)
    ffn = common_layers.DenseReluDense(6, 4)
    ffn.build(x.shape)
    w1, b1, w2, b2 = [w.numpy() for w in (ffn.conv1.kernel, ffn.conv1.bias,
                                          ffn.conv2.kernel, ffn.conv2.bias)]
    b1 += 0.1
    ffn.conv1.bias.assign(b1)
    expected = np.maximum(x @ w1 + b1, 0) @ w2 + b2
    np.testing.assert_allclose(ffn(x), expected, atol=1e-5)
    assert [w.path for w in ffn.weights] == [
        "ffn/conv1/kernel", "ffn/conv1/bias", "ffn/conv2/kernel", "ffn/conv2/bias"]


def test_shift_right():
    ids = tf.constant([[5, 6, 1, 0], [7, 1, 0, 0]])
    np.testing.assert_array_equal(
        common_layers.shift_right(ids), [[0, 5, 6, 1], [0, 7, 1, 0]])


REF_LOGITS = [[[2.0, 1.0, 0.5, -1.0], [0.1, 0.2, 3.0, 0.0], [1.0, 1.0, 1.0, 1.0]]]
REF_LABELS = [[1, 2, 0]]


@pytest.mark.parametrize("eps, num", [(0.1, 1.1185467), (0.0, 1.6484354)])
def test_padded_cross_entropy_reference_values(eps, num):
    got_num, got_den = common_layers.padded_cross_entropy(
        tf.constant(REF_LOGITS), tf.constant(REF_LABELS), eps)
    np.testing.assert_allclose(got_num, num, atol=1e-6)
    assert float(got_den) == 2.0


def test_padded_cross_entropy_equals_one_hot_definition():
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(3, 5, 11)).astype(np.float32) * 3
    labels = rng.integers(0, 11, size=(3, 5))
    eps, v = 0.1, 11
    q = np.full((3, 5, v), eps / (v - 1))
    np.put_along_axis(q, labels[..., None], 1 - eps, axis=-1)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    const = -((1 - eps) * np.log(1 - eps) + (v - 1) * eps / (v - 1) * np.log(eps / (v - 1)))
    xent = -(q * logp).sum(-1) - const
    weights = labels != 0
    num, den = common_layers.padded_cross_entropy(logits, labels, eps)
    np.testing.assert_allclose(num, (xent * weights).sum(), rtol=1e-5)
    assert float(den) == weights.sum()


AVX2_FLAGS = {"sse2", "avx", "avx2", "fma"}
AVX512_FLAGS = AVX2_FLAGS | {"avx512f", "avx512bw", "avx512vl", "avx512_bf16"}


@pytest.mark.parametrize("vocab_size,vocab_major", [
    (8192, True), (32768, True), (1024, True), (8085, False), (8000, False), (32000, False),
])
def test_chunk_loss_layout_follows_the_vocabulary_size(vocab_size, vocab_major):
    # Without AVX512 (or with the CPU unknown): vocab-major at multiples of 1024.
    assert fused_ops.vocab_major_logits(vocab_size, AVX2_FLAGS) is vocab_major
    assert fused_ops.vocab_major_logits(vocab_size, set()) is vocab_major


@pytest.mark.parametrize("vocab_size", [8192, 32768, 1024, 8085, 8000, 32000])
def test_chunk_loss_layout_is_position_major_on_avx512(vocab_size):
    assert fused_ops.vocab_major_logits(vocab_size, AVX512_FLAGS) is False


def test_chunk_loss_layout_reads_this_machines_flags():
    _, flags = onednn.cpu_info(onednn.read_cpuinfo())
    assert fused_ops.vocab_major_logits(8192) is ("avx512f" not in flags)


def test_padded_cross_entropy_gradient_is_softmax_minus_soft_target():
    logits = tf.Variable(tf.constant(REF_LOGITS))
    with tf.GradientTape() as tape:
        num, _ = common_layers.padded_cross_entropy(logits, tf.constant(REF_LABELS), 0.1)
    grad = tape.gradient(num, logits).numpy()[0]
    p = tf.nn.softmax(tf.constant(REF_LOGITS)).numpy()[0]
    q = np.full((3, 4), 0.1 / 3)
    q[0, 1] = q[1, 2] = 0.9
    np.testing.assert_allclose(grad[:2], p[:2] - q[:2], atol=1e-6)
    np.testing.assert_allclose(grad[2], 0.0)  # padding position carries no gradient


@pytest.mark.parametrize("vocab_major", [False, True])
@pytest.mark.parametrize("eps,row_scales", [
    (0.1, None), (0.0, None),
    # Rows whose exp overflows (x 40: logits ~ +-300) or underflows (all logits ~ -300)
    # in some chunks only: those chunks take the max-shifted path, the others not.
    (0.1, "mixed"), (0.0, "mixed"),
])
def test_fused_softmax_cross_entropy_matches_full_logits_in_value_and_gradients(
        eps, row_scales, vocab_major):
    rng = np.random.RandomState(3)
    x_values = rng.normal(size=[13, 8])
    matrix_values = rng.normal(size=[11, 8])
    if row_scales == "mixed":
        x_values[1] *= 40.0  # chunk 0: row 1's logits reach ~85, its sum ~1e37
        matrix_values[:, 0] = np.abs(matrix_values[:, 0]) + 5.0
        x_values[7] = 0.0
        x_values[7, 0] = -60.0  # chunk 1: every logit of row 7 <= -300, its terms all 0
    x = tf.constant(x_values, tf.float32)
    matrix = tf.constant(matrix_values, tf.float32)
    labels = tf.constant(rng.randint(1, 11, size=[13]), tf.int32)
    if row_scales == "mixed":
        logits = (x_values @ matrix_values.T).astype(np.float32)
        # Both outside the range in which a chunk is exponentiated unshifted; chunk 2 inside.
        assert np.exp(logits[1]).sum() > 2.0 ** 60 and np.exp(logits[7]).sum() < 2.0 ** -60
        assert 2.0 ** -60 < np.exp(logits[10:]).sum(axis=1).min() < 2.0 ** 60
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([x, matrix])
        # chunk_size 5: two full chunks and a ragged one of 3 rows.
        fused = fused_ops.softmax_cross_entropy(x, matrix, labels, eps, chunk_size=5,
                                                vocab_major=vocab_major)
        num, den = common_layers.padded_cross_entropy(
            tf.matmul(x, matrix, transpose_b=True), labels, eps)
        fused_scaled, num_scaled = 3.0 * fused, 3.0 * num
    assert float(den) == 13
    np.testing.assert_allclose(fused, num, rtol=1e-6)
    # A near one-hot row (row 1 of "mixed") forms p - q's products from parts that cancel
    # to float rounding of the matrix's entries (~6 here): 1e-5 of them, not of the result.
    atol = 1e-6 if row_scales is None else 1e-5
    for got, want in zip(tape.gradient(fused_scaled, [x, matrix]),
                         tape.gradient(num_scaled, [x, matrix])):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=atol)


@pytest.mark.parametrize("vocab_major", [False, True])
def test_fused_softmax_cross_entropy_in_bfloat16_follows_float32(vocab_major):
    """Half precision forms p = e / s and casts it for the matmuls, in either layout."""
    rng = np.random.RandomState(4)
    x = tf.constant(rng.normal(size=[13, 8]), tf.float32)
    matrix = tf.constant(rng.normal(size=[11, 8]) * 0.5, tf.float32)
    labels = tf.constant(rng.randint(1, 11, size=[13]), tf.int32)
    results = []
    for dtype in (tf.float32, tf.bfloat16):
        x_in = tf.cast(x, dtype)
        with tf.GradientTape() as tape:
            tape.watch([x_in, matrix])
            loss = fused_ops.softmax_cross_entropy(x_in, matrix, labels, 0.1, chunk_size=5,
                                                   vocab_major=vocab_major)
        d_x, d_matrix = tape.gradient(loss, [x_in, matrix])
        results.append([loss, tf.cast(d_x, tf.float32), d_matrix])
    for half, full in zip(results[1], results[0]):
        np.testing.assert_allclose(half, full, rtol=0.03, atol=0.03)
