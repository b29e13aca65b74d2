"""Optimizer side of training: Adam against a hand-written TF1 Adam, multistep accumulation
(t2t semantics, and 4 x batch B == 1 x batch 4B), clipping, weight decay, initializers."""
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.errors import UserError
from t2t_lite.hparams_lib import create_hparams
from t2t_lite.layers import common_layers
from t2t_lite.training import optimize
from t2t_lite.training.learning_rate import learning_rate_schedule


def _numpy_tf1_adam(w, grads, lrs, beta1, beta2, eps):
    """TF1 AdamOptimizer: epsilon is added to the un-corrected sqrt(v)."""
    m, v = np.zeros_like(w), np.zeros_like(w)
    for t, (g, lr) in enumerate(zip(grads, lrs), start=1):
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        lr_t = lr * math.sqrt(1 - beta2**t) / (1 - beta1**t)
        w = w - lr_t * m / (np.sqrt(v) + eps)
    return w


def _numpy_paper_adam(w, grads, lrs, beta1, beta2, eps):
    """Algorithm 1 of the Adam paper: epsilon added to sqrt of the bias-corrected v."""
    m, v = np.zeros_like(w), np.zeros_like(w)
    for t, (g, lr) in enumerate(zip(grads, lrs), start=1):
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        w = w - lr * (m / (1 - beta1**t)) / (np.sqrt(v / (1 - beta2**t)) + eps)
    return w


def _hparams(name="transformer_base_v1", **overrides):
    hp = create_hparams(name)
    for key, value in overrides.items():
        setattr(hp, key, value)
    return hp


def _run(hp, w0, grads):
    """Applies `grads` one call each through OptimizerState; returns weights after each call."""
    var = tf.Variable(w0)
    state = optimize.OptimizerState(hp)
    state.build([var])
    history = []
    for step, g in enumerate(grads):
        if state.is_update_step(step):
            state.apply([tf.constant(g)], [var])
        else:
            state.accumulate([tf.constant(g)])
        history.append(var.numpy().copy())
    return history, state


@pytest.mark.parametrize("eps", [1e-9, 1e-3])
def test_adam_matches_tf1_adam_with_t2t_schedule(eps):
    # Noam (legacy) schedule: nonzero at step 0; small warmup so it changes quickly.
    hp = _hparams(learning_rate_warmup_steps=4, optimizer_adam_epsilon=eps)
    rng = np.random.default_rng(0)
    w0 = rng.normal(size=(4, 3)).astype(np.float32)
    grads = [rng.normal(scale=1e-3, size=(4, 3)).astype(np.float32) for _ in range(8)]
    history, _ = _run(hp, w0, grads)
    lrs = [float(learning_rate_schedule(hp)(t)) for t in range(8)]
    args = (hp.optimizer_adam_beta1, hp.optimizer_adam_beta2, eps)
    expected = _numpy_tf1_adam(w0.astype(np.float64), grads, lrs, *args)
    np.testing.assert_allclose(history[-1], expected, rtol=1e-5, atol=1e-7)
    if eps == 1e-3:  # gradients ~ eps: the two epsilon placements differ clearly
        paper = _numpy_paper_adam(w0.astype(np.float64), grads, lrs, *args)
        assert np.max(np.abs(history[-1] - paper)) > 1e-5


@pytest.mark.parametrize("fused", [True, False])
def test_use_fused_kernels_selects_tf1s_adam_kernel_or_keras_ops_with_the_same_updates(fused):
    hp = _hparams(learning_rate_warmup_steps=4, use_fused_kernels=fused)
    rng = np.random.default_rng(3)
    w0 = rng.normal(size=(40, 30)).astype(np.float32)
    grads = [rng.normal(scale=1e-2, size=w0.shape).astype(np.float32) for _ in range(6)]
    history, state = _run(hp, w0, grads)
    assert state.inner_optimizer.fused is fused
    lrs = [float(learning_rate_schedule(hp)(t)) for t in range(6)]
    expected = _numpy_tf1_adam(w0.astype(np.float64), grads, lrs, hp.optimizer_adam_beta1,
                               hp.optimizer_adam_beta2, hp.optimizer_adam_epsilon)
    np.testing.assert_allclose(history[-1], expected, rtol=1e-5, atol=1e-7)
    # The fused path is one ResourceApplyAdam per weight; the plain one has none.
    var = tf.Variable(w0)
    optimizer = optimize.optimizer_from_hparams(hp)
    optimizer.build([var])
    graph = tf.function(lambda g: optimizer.apply([g], [var])).get_concrete_function(
        tf.TensorSpec(w0.shape, tf.float32)).graph.as_graph_def()
    ops = [node.op for node in graph.node]
    ops += [node.op for function in graph.library.function for node in function.node_def]
    assert ops.count("ResourceApplyAdam") == (1 if fused else 0)


def test_multistep_updates_on_call_n_with_applied_update_bias_correction():
    n = 4
    hp = _hparams("transformer_base", optimizer="multistep_adam",
                  optimizer_multistep_accumulate_steps=n, learning_rate_warmup_steps=3,
                  optimizer_adam_epsilon=1e-6)
    rng = np.random.default_rng(1)
    w0 = rng.normal(size=(5,)).astype(np.float32)
    grads = [rng.normal(size=(5,)).astype(np.float32) for _ in range(2 * n)]
    history, state = _run(hp, w0, grads)
    # Calls 1..n-1 only accumulate.
    for k in range(n - 1):
        np.testing.assert_array_equal(history[k], w0)
    assert not np.allclose(history[n - 1], w0)
    # Updates at global steps n-1 and 2n-1 with the mean micro-gradient, lr = schedule(step)
    # (the schedule divides by n), Adam's t = number of applied updates (1, 2).
    sched = learning_rate_schedule(hp)
    lrs = [float(sched(n - 1)), float(sched(2 * n - 1))]
    assert lrs[0] == pytest.approx(float(learning_rate_schedule(_hparams("transformer_base",
                                   learning_rate_warmup_steps=3))((n - 1) / n)), rel=1e-6)
    mean_grads = [np.mean(grads[:n], axis=0), np.mean(grads[n:], axis=0)]
    expected = _numpy_tf1_adam(w0.astype(np.float64), mean_grads, lrs,
                               hp.optimizer_adam_beta1, hp.optimizer_adam_beta2, 1e-6)
    np.testing.assert_allclose(history[-1], expected, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(history[n], history[n - 1])
    assert int(state.inner_optimizer.iterations) == 2
    np.testing.assert_array_equal(state.accumulator.slots[0].numpy(), 0.0)


class _TinyLM(keras.Model):
    def __init__(self):
        super().__init__()
        self.emb = keras.layers.Embedding(12, 8)
        self.out = keras.layers.Dense(12)

    def call(self, ids):
        return self.out(tf.tanh(self.emb(ids)))


def _token_loss(model, ids, labels):
    logits = model(ids)
    weights = tf.cast(labels != 0, tf.float32)
    xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
    return tf.reduce_sum(xent * weights) / tf.maximum(tf.reduce_sum(weights), 1.0)


def _train(hp, batches, seed=3):
    keras.utils.set_random_seed(seed)
    model = _TinyLM()
    model(batches[0][0])
    state = optimize.OptimizerState(hp)
    state.build(model.trainable_variables)
    for step, (ids, labels) in enumerate(batches):
        with tf.GradientTape() as tape:
            loss = _token_loss(model, ids, labels)
        grads = tape.gradient(loss, model.trainable_variables)
        if state.is_update_step(step):
            state.apply(grads, model.trainable_variables)
        else:
            state.accumulate(grads)
    return [v.numpy() for v in model.trainable_variables]


def test_accumulating_4_batches_of_b_equals_one_batch_of_4b():
    rng = np.random.default_rng(2)
    n, b, t = 4, 2, 5
    # Every micro-batch has the same number of non-pad tokens (t2t averages micro-batch means).
    ids = rng.integers(1, 12, size=(2, n * b, t))
    labels = rng.integers(1, 12, size=(2, n * b, t))
    labels[:, :, -1] = 0
    base = {"learning_rate_schedule": "constant", "learning_rate_constant": 0.01}
    multi = _hparams("transformer_base", optimizer="multistep_adam",
                     optimizer_multistep_accumulate_steps=n, **base)
    single = _hparams("transformer_base", **base)
    micro = [(tf.constant(ids[u, k * b:(k + 1) * b]), tf.constant(labels[u, k * b:(k + 1) * b]))
             for u in range(2) for k in range(n)]
    big = [(tf.constant(ids[u]), tf.constant(labels[u])) for u in range(2)]
    got, want = _train(multi, micro), _train(single, big)
    after_one = _train(single, big[:1])
    for g, w, one in zip(got, want, after_one):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
        assert not np.allclose(g, one)  # the second update happened too


def test_clip_by_global_norm():
    grads = [tf.constant([3.0, 4.0]), None, tf.constant([12.0])]
    clipped, norm = optimize.clip_by_global_norm(grads, 6.5)
    assert float(norm) == pytest.approx(13.0)
    assert clipped[1] is None
    np.testing.assert_allclose(clipped[0], [1.5, 2.0], rtol=1e-6)
    np.testing.assert_allclose(clipped[2], [6.0], rtol=1e-6)
    unclipped, norm = optimize.clip_by_global_norm(grads, 0.0)
    assert unclipped[0] is grads[0] and float(norm) == pytest.approx(13.0)
    small, _ = optimize.clip_by_global_norm(grads, 100.0)
    np.testing.assert_allclose(small[0], [3.0, 4.0], rtol=1e-6)


def test_weight_decay_skips_only_1d_bias():
    layer = keras.layers.Dense(2, kernel_initializer="ones", bias_initializer="ones")
    layer.build((None, 3))
    scale = keras.Variable(np.full([2], 2.0, np.float32), name="layer_norm_scale")
    bias2d = keras.Variable(np.full([2, 2], 3.0, np.float32), name="bias")
    variables = [layer.kernel, layer.bias, scale, bias2d]
    # kernel: 6 * 1 / 2 = 3; bias skipped; scale: 2 * 4 / 2 = 4; 2-D "bias": 4 * 9 / 2 = 18.
    assert float(optimize.weight_decay(0.1, variables)) == pytest.approx(0.1 * (3 + 4 + 18))
    assert optimize.weight_decay(0.0, variables) == 0.0


@pytest.mark.parametrize("name,gain", [("uniform_unit_scaling", 1.0),
                                       ("uniform_unit_scaling", 2.0),
                                       ("uniform", 1.5), ("xavier", 1.0)])
def test_uniform_initializers_limits(name, gain):
    hp = _hparams(initializer=name, initializer_gain=gain)
    values = common_layers.get_variable_initializer(hp)((300, 500)).numpy()
    limit = {"uniform": 0.1 * gain, "xavier": math.sqrt(6 / 800)}.get(
        name, math.sqrt(3 * gain / 400))
    assert np.max(np.abs(values)) <= limit
    assert np.max(np.abs(values)) > 0.99 * limit
    assert np.std(values) == pytest.approx(limit / math.sqrt(3), rel=0.02)


def test_orthogonal_and_normal_unit_scaling_initializers():
    hp = _hparams("transformer_base", initializer="orthogonal", initializer_gain=1.5)
    w = common_layers.get_variable_initializer(hp)((64, 64)).numpy()
    np.testing.assert_allclose(w.T @ w, 2.25 * np.eye(64), atol=1e-4)
    hp = _hparams("transformer_base", initializer="normal_unit_scaling", initializer_gain=2.0)
    w = common_layers.get_variable_initializer(hp)((400, 600)).numpy()
    assert np.std(w) == pytest.approx(math.sqrt(2.0 / 500), rel=0.02)
    assert np.max(np.abs(w)) <= 2 * math.sqrt(2.0 / 500) / 0.87962566103423978 + 1e-6
    hp.initializer = ""
    assert common_layers.get_variable_initializer(hp) is None
    hp.initializer = "he_normal"
    with pytest.raises(UserError, match="he_normal"):
        common_layers.get_variable_initializer(hp)


def test_optimizer_choice_and_loss_scaling():
    hp = _hparams("transformer_base")
    opt = optimize.optimizer_from_hparams(hp)
    assert isinstance(opt, keras.optimizers.Adam)
    assert (opt.beta_1, opt.beta_2, opt.epsilon) == (0.9, 0.997, 1e-9)
    hp.activation_dtype = "float16"
    lso = optimize.optimizer_from_hparams(hp)
    assert isinstance(lso, keras.optimizers.LossScaleOptimizer)
    assert lso.initial_scale == 2.0**15 and lso.dynamic_growth_steps == 2000
    hp.optimizer = "adafactor"
    lso = optimize.optimizer_from_hparams(hp)
    assert isinstance(lso.inner_optimizer, optimize.Adafactor)
    hp.optimizer = "yellow_fin"
    with pytest.raises(optimize.OptimizerError, match="yellow_fin"):
        optimize.optimizer_from_hparams(hp)
    hp = _hparams("transformer_base", optimizer="multistep_adam")
    with pytest.raises(optimize.OptimizerError, match="accumulate_steps"):
        optimize.OptimizerState(hp)


def test_embedding_gradients_update_like_dense_adam():
    """A gathered row's Adam moments keep moving it after it leaves the batch (dense Adam, as
    t2t); LazyAdam on IndexedSlices would leave it alone."""
    hp = _hparams("transformer_base", learning_rate_schedule="constant",
                  learning_rate_constant=0.1)
    table = tf.Variable(np.ones([3, 2], np.float32))
    state = optimize.OptimizerState(hp)
    state.build([table])
    for row in (1, 2):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.gather(table, [row]))
        grad = tape.gradient(loss, [table])
        assert isinstance(grad[0], tf.IndexedSlices)
        state.apply(grad, [table])
        after = table.numpy().copy()
    assert np.all(after[0] == 1.0)
    assert np.all(after[1] < 1.0 - 0.1 - 1e-3)  # moved twice: by the gradient, then momentum


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_checkpoint_names_model_weights_under_the_model(tmp_path, dtype):
    hp = _hparams("transformer_base", activation_dtype=dtype)
    model = _TinyLM()
    model(tf.constant([[1, 2]]))
    state = optimize.OptimizerState(hp)
    state.build(model.trainable_variables)
    path = tf.train.Checkpoint(model=model, **state.checkpoint_objects()).write(
        str(tmp_path / "ckpt"))
    names = [n for n, _ in tf.train.list_variables(path)]
    assert "model/out/_kernel/.ATTRIBUTES/VARIABLE_VALUE" in names
    assert not any("_trainable_variables" in n for n in names)
    # Adam's slots are still saved, and restore into a fresh model + optimizer.
    assert any(n.startswith("optimizer/") and "_variables/" in n for n in names)
    model2 = _TinyLM()
    model2(tf.constant([[1, 2]]))
    state2 = optimize.OptimizerState(hp)
    state2.build(model2.trainable_variables)
    state.inner_optimizer._momentums[0].assign(tf.ones_like(state.inner_optimizer._momentums[0]))
    path = tf.train.Checkpoint(model=model, **state.checkpoint_objects()).save(
        str(tmp_path / "c2"))
    tf.train.Checkpoint(model=model2, **state2.checkpoint_objects()).restore(
        path).assert_consumed()
    for a, b in zip(model.trainable_variables, model2.trainable_variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_array_equal(state2.inner_optimizer._momentums[0].numpy(), 1.0)
