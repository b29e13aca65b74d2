"""Every USED hparam does what `hparams_support.USED` says, and NO_EFFECT ones change nothing.

`MEANINGS` gives each USED hparam another valid value and an observer: a function of the
hparams that shows the effect (the tiny model's variables, its eval or training logits under
a fixed dropout seed, its decodes, the learning rate, one optimizer update, the input
pipeline's batches, the trainer's evaluation). Changing the hparam from the tiny set's value
must change what the observer sees; where the change has a simple form (a shape, a length, a
count, a name) the entry checks that form too, and where a meaning says what must stay as it
is (dropout is off in eval, an initializer changes no shapes), it names observers that must
not change. Every observer gives the same result twice for the same hparams, so a difference
comes from the hparam.
"""
from __future__ import annotations

import tempfile
from collections.abc import Callable
from typing import Any, NamedTuple

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import hparams_support
from t2t_lite.data_generators import generator_utils, problem
from t2t_lite.hparams import HParams
from t2t_lite.layers import common_layers
from t2t_lite.models.transformer import Transformer
from t2t_lite.training import learning_rate, optimize, trainer_lib
from tests.test_hparams_support import other_value
from tests.trainer_utils import VOCAB, ReverseProblem, model_fn, read_events, tiny_hparams

FEATURES = {
    "inputs": tf.constant([[3, 4, 5, 6, 1], [7, 8, 1, 0, 0]]),
    "targets": tf.constant([[5, 4, 3, 1], [9, 2, 1, 0]]),
}
DROPOUT_SEED = tf.constant([7, 9], tf.int64)


def _hparams(**overrides) -> HParams:
    """transformer_tiny at hidden size 16, one layer (`tiny_hparams`), then `overrides`."""
    hp = tiny_hparams(hidden_size=16, filter_size=32)
    for name, value in overrides.items():
        setattr(hp, name, value)
    return hp


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    if isinstance(a, dict) or isinstance(b, dict):
        return (isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys()
                and all(_same(a[k], b[k]) for k in a))
    if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
        return (isinstance(a, (tuple, list)) and isinstance(b, (tuple, list))
                and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b)))
    if isinstance(a, (np.ndarray, float)) or isinstance(b, (np.ndarray, float)):
        a, b = np.asarray(a), np.asarray(b)
        return a.shape == b.shape and np.allclose(a, b, rtol=1e-5, atol=1e-6)
    return a == b


# --- Observers ------------------------------------------------------------------------------

class _ModelView(NamedTuple):
    variables: tuple
    values: tuple
    eval_logits: np.ndarray
    train_logits: np.ndarray
    loss: tuple


def _model_view(hp: HParams) -> _ModelView:
    """One tiny model built from fixed seeds, seen through what the hparams may change."""
    keras.utils.set_random_seed(0)
    model = Transformer(hp, VOCAB, VOCAB)
    with common_layers.dropout_seed(DROPOUT_SEED):
        train_logits = model(FEATURES, training=True).numpy()
    num, den = model.training_loss(FEATURES, hp.label_smoothing, training=False)
    return _ModelView(
        variables=tuple((w.path, tuple(w.shape)) for w in model.weights),
        values=tuple(w.numpy() for w in model.weights),
        eval_logits=model(FEATURES, training=False).numpy(),
        train_logits=train_logits,
        loss=(float(num), float(den)),
    )


def variables(hp):
    """Paths and shapes of the model's weights."""
    return _cached(_model_view, hp).variables


def weight_values(hp):
    """Initial values of the model's weights (same seed)."""
    return _cached(_model_view, hp).values


def eval_logits(hp):
    """Logits of FEATURES in eval mode."""
    return _cached(_model_view, hp).eval_logits


def train_logits(hp):
    """Logits of FEATURES in training mode under a fixed dropout seed."""
    return _cached(_model_view, hp).train_logits


def training_loss(hp):
    """The model's training loss of FEATURES (no dropout) with hparams.label_smoothing, as the
    trainer computes it."""
    return _cached(_model_view, hp).loss


def distinct_decodes(hp):
    """How many different outputs greedy decoding gives for 16 copies of one input."""
    keras.utils.set_random_seed(0)
    model = Transformer(hp, VOCAB, VOCAB)
    tf.random.set_seed(1)
    outputs = model.infer({"inputs": tf.constant([[3, 4, 5, 6, 1]] * 16)}, decode_length=4)
    return len({tuple(row) for row in outputs["outputs"].numpy().tolist()})


def learning_rates(hp):
    """The learning rate at a few steps."""
    schedule = learning_rate.learning_rate_schedule(hp)
    return np.array([float(schedule(step)) for step in (0, 5, 50, 500, 5000, 50000)])


_W0 = np.arange(1.0, 13.0, dtype=np.float32).reshape(3, 4) / 10.0
_B0 = np.array([0.5, -0.2, 0.1], np.float32)
_GRADS = [
    [np.random.RandomState(seed).normal(size=shape).astype(np.float32)
     for shape in ((3, 4), (3,))]
    for seed in range(3)
]


def weights_after_updates(hp):
    """A [3, 4] and a [3] weight after three micro-batches of fixed gradients at a constant
    learning rate of 0.1 (`OptimizerState`, as the trainer drives it)."""
    hp = hp.copy()
    hp.learning_rate_schedule = "constant"
    hp.learning_rate_constant = 0.1
    w, b = tf.Variable(_W0), tf.Variable(_B0)
    state = optimize.OptimizerState(hp)
    state.build([w, b])
    for step, grads in enumerate(_GRADS):
        grads = [tf.constant(g) for g in grads]
        if state.is_update_step(step):
            state.apply(grads, [w, b])
        else:
            state.accumulate(grads)
    return np.concatenate([w.numpy().ravel(), b.numpy()])


def loss_scale(hp):
    """The optimizer's initial loss scale (None without one)."""
    state = optimize.OptimizerState(hp)
    state.build([tf.Variable(_B0)])
    scale = state.loss_scale
    return None if scale is None else float(scale.numpy())


def clipped_gradient(hp):
    """A gradient of norm 5 after the trainer's clipping with hparams.clip_grad_norm."""
    (grad,), _ = optimize.clip_by_global_norm([tf.constant([3.0, 4.0])], hp.clip_grad_norm)
    return grad.numpy()


def weight_decay_loss(hp):
    """The weight-decay term the trainer adds to the loss of the tiny model."""
    keras.utils.set_random_seed(0)
    model = Transformer(hp, VOCAB, VOCAB)
    return float(optimize.weight_decay(hp.weight_decay, model.trainable_variables))


def _trainer(hp, output_dir):
    keras.utils.set_random_seed(1)
    config = trainer_lib.RunConfig(output_dir=str(output_dir), eval_steps=1,
                                   num_decode_examples=0, random_seed=1)
    return trainer_lib.Trainer(model_fn(hp), hp, ReverseProblem(), "", config)


def trainer_dtypes(hp, tmp_dir):
    """The dtype policy of the trainer's model and its loss scale (None without one)."""
    trainer = _trainer(hp, tmp_dir)
    scale = trainer.optimizer.loss_scale
    return trainer.model.dtype_policy.name, None if scale is None else float(scale.numpy())


def training_summary_tags(hp, tmp_dir):
    """The tags of the TensorBoard summaries of two training steps (progress at each)."""
    output_dir = tempfile.mkdtemp(dir=tmp_dir)
    keras.utils.set_random_seed(1)
    config = trainer_lib.RunConfig(output_dir=output_dir, train_steps=2, log_step_count_steps=1,
                                   num_decode_examples=0, random_seed=1)
    trainer_lib.Trainer(model_fn(hp), hp, ReverseProblem(), "", config).train()
    return sorted(read_events(output_dir))


def evaluation(hp, tmp_dir):
    """The trainer's evaluation (loss and metrics by name) of one eval batch."""
    return _trainer(hp, tmp_dir).evaluate()


class _LengthsProblem(problem.Problem):
    """Examples of input lengths 1..20 and target lengths 1..19 (ids 2..11 and EOS)."""

    registered_name = "test_hparams_meaning_lengths"


def _lengths_examples():
    rng = np.random.RandomState(0)
    return [{"inputs": rng.randint(2, VOCAB, size=i % 20).tolist() + [1],
             "targets": rng.randint(2, VOCAB, size=(7 * i) % 19).tolist() + [1]}
            for i in range(60)]


def _batches(dataset) -> tuple:
    return tuple(tuple(sorted((k, v.numpy().tolist()) for k, v in b.items())) for b in dataset)


def eval_batches(hp, data_dir):
    """The input pipeline's eval batches (feature -> padded ids)."""
    return _batches(_LengthsProblem().dataset(problem.ModeKeys.EVAL, data_dir, hp))


def train_batches(hp, data_dir):
    """One seeded training pass of the input pipeline, in order."""
    return _batches(_LengthsProblem().dataset(problem.ModeKeys.TRAIN, data_dir, hp,
                                              repeat=False, seed=0))


def train_examples(hp, data_dir):
    """The (inputs, targets) rows of `train_batches` without padding, in any order."""
    rows = []
    for batch in train_batches(hp, data_dir):
        features = dict(batch)
        for inputs, targets in zip(features["inputs"], features["targets"]):
            rows.append((tuple(np.trim_zeros(inputs, "b")), tuple(np.trim_zeros(targets, "b"))))
    return tuple(sorted(rows))


# Observers that need a directory: the trainer's output or the problem's data.
_NEEDS_DIR = {trainer_dtypes: "output", evaluation: "output", training_summary_tags: "output",
              eval_batches: "data", train_batches: "data", train_examples: "data"}


class _Entry(NamedTuple):
    other: Any
    observer: Callable
    base: dict | None = None  # overrides of the tiny set under which both values are seen
    same: tuple = ()
    # (seen at the set's value, seen at `other`) -> whether the change is the one meant.
    expect: Callable[[Any, Any], bool] | None = None


def _shapes(view: tuple, suffix: str) -> list[tuple]:
    return [shape for path, shape in view if path.endswith(suffix)]


def _has(view: tuple, part: str) -> bool:
    return any(part in path for path, _ in view)


def _embedding_rows(view: tuple) -> int:
    return sum(shape[0] for path, shape in view if "/shared/weights_" in path)


def _lengths(batches: tuple, feature: str) -> list[int]:
    return [len(np.trim_zeros(row, "b")) for batch in batches for row in dict(batch)[feature]]


def _longest(batches: tuple) -> int:
    return max(_lengths(batches, "inputs") + _lengths(batches, "targets"))


def _example_lengths(examples: tuple) -> list[int]:
    return [max(len(inputs), len(targets)) for inputs, targets in examples]


_DATA = {"batch_size": 64, "max_length": 12, "min_length_bucket": 4}
_LEGACY = {"learning_rate_schedule": "legacy"}
_EXP_DECAY = {"learning_rate_schedule": "constant*exp_decay", "learning_rate_decay_rate": 0.5,
              "learning_rate_warmup_steps": 0}
_ADAFACTOR = {"optimizer": "adafactor"}
_SAMPLING = {"sampling_method": "random"}
_MULTISTEP = {"optimizer": "multistep_adam", "optimizer_multistep_accumulate_steps": 1}

MEANINGS: dict[str, _Entry] = {
    "activation_dtype": _Entry("float16", trainer_dtypes, expect=lambda b, o: (
        b == ("float32", None) and o == ("mixed_float16", 2.0**15))),
    "attention_dropout": _Entry(0.0, train_logits, same=(eval_logits,)),
    "attention_dropout_broadcast_dims": _Entry("0", train_logits, same=(eval_logits,)),
    "attention_key_channels": _Entry(8, variables, expect=lambda b, o: (
        set(_shapes(b, "/k/kernel")) == {(16, 16)} and set(_shapes(o, "/k/kernel")) == {(16, 8)})),
    "attention_value_channels": _Entry(8, variables, expect=lambda b, o: (
        set(_shapes(o, "/v/kernel")) == {(16, 8)}
        and set(_shapes(o, "/output_transform/kernel")) == {(8, 16)})),
    "batch_shuffle_size": _Entry(0, train_batches, _DATA, same=(train_examples,)),
    "batch_size": _Entry(32, eval_batches, _DATA, expect=lambda b, o: (
        len(o) > len(b) and sorted(_lengths(o, "inputs")) == sorted(_lengths(b, "inputs")))),
    "clip_grad_norm": _Entry(1.0, clipped_gradient, expect=lambda b, o: (
        np.isclose(np.linalg.norm(b), 5.0) and np.isclose(np.linalg.norm(o), 1.0))),
    "eval_drop_long_sequences": _Entry(True, eval_batches, _DATA, expect=lambda b, o: (
        _longest(o) <= 12 < _longest(b))),
    "eval_run_autoregressive": _Entry(True, evaluation),
    "filter_size": _Entry(24, variables, expect=lambda b, o: (
        set(_shapes(o, "/conv1/kernel")) == {(16, 24)})),
    "hidden_size": _Entry(32, variables, expect=lambda b, o: (
        set(_shapes(o, "/shared/weights_0")) == {(3, 32)})),
    "initializer": _Entry("uniform", weight_values, same=(variables,)),
    "initializer_gain": _Entry(2.0, weight_values, same=(variables,)),
    "label_smoothing": _Entry(0.0, training_loss, same=(eval_logits,)),
    "layer_postprocess_sequence": _Entry("dan", variables),
    "layer_prepostprocess_dropout": _Entry(0.0, train_logits, same=(eval_logits,)),
    "layer_prepostprocess_dropout_broadcast_dims": _Entry("1", train_logits,
                                                          same=(eval_logits,)),
    "layer_preprocess_sequence": _Entry("none", variables),
    "learning_rate": _Entry(0.5, learning_rates, _LEGACY),
    "learning_rate_constant": _Entry(1.0, learning_rates),
    "learning_rate_cosine_cycle_steps": _Entry(1000, learning_rates,
                                               dict(_LEGACY, learning_rate_decay_scheme="cosine")),
    "learning_rate_decay_rate": _Entry(0.9, learning_rates, _EXP_DECAY),
    "learning_rate_decay_scheme": _Entry("exp", learning_rates, _LEGACY),
    "learning_rate_decay_staircase": _Entry(True, learning_rates,
                                            dict(_EXP_DECAY, learning_rate_decay_steps=3000)),
    "learning_rate_decay_steps": _Entry(1000, learning_rates, _EXP_DECAY),
    "learning_rate_minimum": _Entry(0.01, learning_rates, expect=lambda b, o: (
        min(b) < 0.01 and np.allclose(o, np.maximum(b, 0.01)))),
    "learning_rate_schedule": _Entry("constant", learning_rates),
    "learning_rate_warmup_steps": _Entry(100, learning_rates),
    "length_bucket_step": _Entry(2.0, eval_batches, _DATA),
    "max_input_seq_length": _Entry(4, eval_batches, _DATA, expect=lambda b, o: (
        max(_lengths(o, "inputs")) == 4 < max(_lengths(b, "inputs"))
        and sorted(_lengths(o, "targets")) == sorted(_lengths(b, "targets")))),
    "max_length": _Entry(8, train_examples, _DATA, expect=lambda b, o: (
        max(_example_lengths(o)) <= 8 < max(_example_lengths(b)))),
    "max_target_seq_length": _Entry(4, eval_batches, _DATA, expect=lambda b, o: (
        max(_lengths(o, "targets")) == 4 < max(_lengths(b, "targets")))),
    "min_length": _Entry(5, train_examples, _DATA, expect=lambda b, o: (
        min(_example_lengths(o)) >= 5 > min(_example_lengths(b)))),
    "max_relative_position": _Entry(
        3, variables, {"self_attention_type": "dot_product_relative", "max_relative_position": 2},
        expect=lambda b, o: (
            _shapes(b, "relative_positions_keys/embeddings")[0][0] == 5
            and _shapes(o, "relative_positions_keys/embeddings")[0][0] == 7)),
    "min_length_bucket": _Entry(2, eval_batches, _DATA),
    "mixed_precision_optimizer_init_loss_scale": _Entry(
        2, loss_scale, {"activation_dtype": "float16"}, expect=lambda b, o: (b, o) == (2.0**15, 2.0)),
    "multiply_embedding_mode": _Entry("none", eval_logits, same=(variables,)),
    "norm_epsilon": _Entry(1.0, eval_logits, same=(variables,)),
    "norm_type": _Entry("none", variables, expect=lambda b, o: (
        _has(b, "layer_norm") and not _has(o, "layer_norm"))),
    "num_decoder_layers": _Entry(2, variables, expect=lambda b, o: (
        _has(o, "decoder/layer_1/") and not _has(o, "encoder/layer_1/"))),
    "num_encoder_layers": _Entry(2, variables, expect=lambda b, o: (
        _has(o, "encoder/layer_1/") and not _has(o, "decoder/layer_1/"))),
    "num_heads": _Entry(4, eval_logits, same=(variables,)),
    "num_hidden_layers": _Entry(2, variables, expect=lambda b, o: (
        _has(o, "encoder/layer_1/") and _has(o, "decoder/layer_1/"))),
    "optimizer": _Entry("sgd", weights_after_updates),
    "optimizer_adafactor_beta1": _Entry(0.9, weights_after_updates, _ADAFACTOR),
    "optimizer_adafactor_beta2": _Entry(0.5, weights_after_updates,
                                        dict(_ADAFACTOR, optimizer_adafactor_decay_type="adam")),
    "optimizer_adafactor_clipping_threshold": _Entry(0.01, weights_after_updates, _ADAFACTOR),
    "optimizer_adafactor_decay_type": _Entry("adam", weights_after_updates, _ADAFACTOR),
    "optimizer_adafactor_factored": _Entry(False, weights_after_updates, _ADAFACTOR),
    "optimizer_adafactor_memory_exponent": _Entry(0.5, weights_after_updates, _ADAFACTOR),
    "optimizer_adafactor_multiply_by_parameter_scale": _Entry(False, weights_after_updates,
                                                              _ADAFACTOR),
    "optimizer_adam_beta1": _Entry(0.5, weights_after_updates),
    "optimizer_adam_beta2": _Entry(0.5, weights_after_updates),
    "optimizer_adam_epsilon": _Entry(1.0, weights_after_updates),
    "optimizer_momentum_momentum": _Entry(0.5, weights_after_updates, {"optimizer": "momentum"}),
    "optimizer_momentum_nesterov": _Entry(True, weights_after_updates, {"optimizer": "momentum"}),
    "optimizer_multistep_accumulate_steps": _Entry(2, weights_after_updates, _MULTISTEP),
    "overload_eval_metric_name": _Entry("my_metrics", evaluation, expect=lambda b, o: (
        any("my_metrics" in k for k in o) and not any("my_metrics" in k for k in b))),
    "pack_dataset": _Entry(True, eval_batches, _DATA, expect=lambda b, o: (
        "targets_segmentation" in dict(o[0]) and "targets_segmentation" not in dict(b[0]))),
    "pos": _Entry("none", eval_logits, same=(variables,)),
    "relu_dropout": _Entry(0.0, train_logits, same=(eval_logits,)),
    "relu_dropout_broadcast_dims": _Entry("1", train_logits, same=(eval_logits,)),
    "sampling_keep_top_k": _Entry(1, distinct_decodes, _SAMPLING,
                                  expect=lambda b, o: b > 1 and o == 1),
    "sampling_method": _Entry("random", distinct_decodes, expect=lambda b, o: b == 1 and o > 1),
    "sampling_temp": _Entry(0.0, distinct_decodes, _SAMPLING,
                            expect=lambda b, o: b > 1 and o == 1),
    "self_attention_type": _Entry(
        "dot_product_relative", variables, {"max_relative_position": 2}, expect=lambda b, o: (
            _has(o, "self_attention/multihead_attention/dot_product_attention_relative/")
            and not _has(o, "encdec_attention/multihead_attention/dot_product_attention_relative")
            and not _has(b, "relative_positions"))),
    "shared_embedding": _Entry(True, variables, {"shared_embedding_and_softmax_weights": False}),
    "shared_embedding_and_softmax_weights": _Entry(False, variables),
    "summarize_grads": _Entry(True, training_summary_tags, expect=lambda b, o: (
        any(t.startswith("gradients/") for t in o)
        and not any(t.startswith("gradients/") for t in b))),
    "summarize_vars": _Entry(True, training_summary_tags, expect=lambda b, o: (
        any(t.startswith("training_variables/") for t in o)
        and not any(t.startswith("training_variables/") for t in b))),
    "symbol_dropout": _Entry(0.5, train_logits, same=(eval_logits,)),
    "symbol_modality_num_shards": _Entry(2, variables, expect=lambda b, o: (
        len(_shapes(o, "")) - len(_shapes(b, "")) == -2)),
    "use_fixed_batch_size": _Entry(True, eval_batches, _DATA, expect=lambda b, o: (
        [len(dict(batch)["inputs"]) for batch in o] == [60] and len(b) > 1)),
    "use_target_space_embedding": _Entry(False, variables, expect=lambda b, o: (
        _has(b, "target_space_embedding") and not _has(o, "target_space_embedding"))),
    "vocab_divisor": _Entry(8, variables, expect=lambda b, o: (
        (_embedding_rows(b), _embedding_rows(o)) == (12, 16))),
    "weight_decay": _Entry(0.1, weight_decay_loss, expect=lambda b, o: b == 0.0 < o),
}


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("lengths_data"))
    prob = _LengthsProblem()
    examples = _lengths_examples()
    generator_utils.generate_files(iter(examples),
                                   prob.training_filepaths(data_dir, 1, shuffled=True))
    generator_utils.generate_files(iter(examples), prob.dev_filepaths(data_dir, 1, shuffled=True))
    return {"data": data_dir, "output": tmp_path_factory.mktemp("trainer")}


_RESULTS: dict = {}


def _cached(function: Callable, hp: HParams, *args) -> Any:
    """`function(hp, *args)`, computed once per hparams values (observers share the builds)."""
    key = (function.__name__, hp.to_json(), args)
    if key not in _RESULTS:
        _RESULTS[key] = function(hp, *args)
    return _RESULTS[key]


def _observe(observer: Callable, hp: HParams, dirs) -> Any:
    args = (str(dirs[_NEEDS_DIR[observer]]),) if observer in _NEEDS_DIR else ()
    return _cached(observer, hp, *args)


def test_every_used_hparam_has_a_behavioural_check():
    assert sorted(MEANINGS) == sorted(hparams_support.USED)


# The observers that read one shared model build are checked once, as that build.
_MODEL_VIEW_FIELDS = {variables, weight_values, eval_logits, train_logits, training_loss}
_COMPUTATIONS = sorted(
    ({e.observer for e in MEANINGS.values()} | {o for e in MEANINGS.values() for o in e.same})
    - _MODEL_VIEW_FIELDS | {_model_view}, key=lambda f: f.__name__)


@pytest.mark.parametrize("observer", _COMPUTATIONS, ids=lambda f: f.__name__)
def test_observers_see_the_same_thing_twice(observer, dirs):
    hp = _hparams(**_DATA) if _NEEDS_DIR.get(observer) == "data" else _hparams()
    cached = dict(_RESULTS)
    results = []
    for _ in range(2):
        _RESULTS.clear()  # computed anew, the model build included
        results.append(_observe(observer, hp, dirs))
    _RESULTS.update(cached)
    assert _same(*results)


@pytest.mark.parametrize("name", sorted(MEANINGS))
def test_used_hparam_changes_what_it_means(name, dirs):
    entry = MEANINGS[name]
    base = _hparams(**(entry.base or {}))
    other = base.copy()
    setattr(other, name, entry.other)
    assert not _same(base.get(name), entry.other), name
    assert not _same(_observe(entry.observer, base, dirs),
                     _observe(entry.observer, other, dirs)), (name, hparams_support.USED[name])
    if entry.expect is not None:
        assert entry.expect(_observe(entry.observer, base, dirs),
                            _observe(entry.observer, other, dirs)), name
    for observer in entry.same:
        assert _same(_observe(observer, base, dirs), _observe(observer, other, dirs)), (
            name, observer.__name__)


@pytest.mark.parametrize("name", sorted(hparams_support.NO_EFFECT))
def test_no_effect_hparam_changes_no_number(name, dirs):
    base = _hparams()
    other = base.copy()
    setattr(other, name, other_value(base.get(name)))
    hparams_support.check_supported(other)
    for observer in (variables, weight_values, eval_logits, train_logits):
        assert _same(_observe(observer, base, dirs), _observe(observer, other, dirs)), (
            name, observer.__name__)
