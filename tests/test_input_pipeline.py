"""Problem.dataset: t2t's bucketing tables, token budgets, coverage, sharding, replicas."""
import bisect
import collections
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.data_generators import data_reader, generator_utils, problem
from t2t_lite.hparams import HParams
from t2t_lite.hparams_lib import create_hparams

# T2T_REFERENCE.md §5.3 [verified against t2t 1.15.7].
BOUNDARIES_256 = [
    8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 22, 24, 26, 28, 30, 33, 36, 39, 42, 46,
    50, 55, 60, 66, 72, 79, 86, 94, 103, 113, 124, 136, 149, 163, 179, 196, 215, 236,
]
BATCH_SIZES_4096_256 = [
    420, 420, 315, 315, 315, 315, 252, 252, 252, 210, 210, 210, 180, 180, 140, 140, 140, 126,
    105, 105, 105, 90, 84, 70, 70, 63, 60, 45, 45, 45, 42, 36, 36, 30, 30, 21, 21, 21, 20, 18,
    15, 15,
]
BATCH_SIZES_2048_256 = [
    240, 180, 180, 180, 144, 144, 144, 120, 120, 120, 90, 90, 90, 90, 80, 72, 72, 60, 60, 48,
    48, 48, 40, 40, 36, 30, 30, 24, 24, 20, 20, 18, 18, 16, 15, 12, 12, 10, 10, 9, 8, 8,
]

NUM_TRAIN_SHARDS = 4
NUM_EXAMPLES = 1200


class IdsProblem(problem.Problem):
    """Int sequences already on disk; vocab 100, space ids 3 -> 8 (to see `_rev` swaps)."""

    registered_name = "test_ids_problem"

    def hparams(self, defaults, model_hparams):
        defaults.vocab_size = {"inputs": 100, "targets": 120}
        defaults.modality = {"inputs": "symbol", "targets": "symbol"}
        defaults.input_space_id = 3
        defaults.target_space_id = 8


def _examples(n: int, seed: int) -> list[dict]:
    """Sequences of ids 2..99 ending with EOS; lengths 1..300 so some exceed max_length."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        longest = 301 if rng.random() < 0.1 else 60
        len_in, len_tgt = rng.integers(1, longest, size=2)
        out.append({
            "inputs": rng.integers(2, 100, size=len_in - 1).tolist() + [1],
            "targets": rng.integers(2, 100, size=len_tgt - 1).tolist() + [1],
        })
    return out


def _key(inputs, targets):
    as_list = [x.numpy().tolist() if hasattr(x, "numpy") else list(x) for x in (inputs, targets)]
    return tuple(as_list[0]), tuple(as_list[1])


def _unpad(row):
    row = [int(x) for x in row]
    while row and row[-1] == 0:
        row.pop()
    return tuple(row)


def _rows(batch):
    inputs, targets = batch["inputs"].numpy(), batch["targets"].numpy()
    return [(_unpad(i), _unpad(t)) for i, t in zip(inputs, targets)]


@pytest.fixture(scope="module")
def ids_data(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("ids_data"))
    prob = IdsProblem()
    train = _examples(NUM_EXAMPLES, seed=1)
    dev = _examples(300, seed=2)
    generator_utils.generate_files(
        iter(train), prob.training_filepaths(data_dir, NUM_TRAIN_SHARDS, shuffled=True))
    generator_utils.generate_files(iter(dev), prob.dev_filepaths(data_dir, 1, shuffled=True))
    return data_dir, train, dev


def _hparams(batch_size=512, max_length=64, **kw):
    hp = create_hparams("transformer_tiny")
    hp.batch_size = batch_size
    hp.max_length = max_length
    for name, value in kw.items():
        setattr(hp, name, value)
    return hp


def _length(inputs, targets):
    return max(len(inputs), len(targets))


# --- Batching scheme -----------------------------------------------------------------------

def test_bucket_boundaries_match_t2t():
    assert data_reader.bucket_boundaries(256, 8, 1.1) == BOUNDARIES_256
    assert data_reader.bucket_boundaries(512, 8, 1.1) == BOUNDARIES_256 + [
        259, 284, 312, 343, 377, 414, 455, 500]


@pytest.mark.parametrize("batch_size,expected", [
    (4096, BATCH_SIZES_4096_256), (2048, BATCH_SIZES_2048_256)])
def test_batch_sizes_match_t2t_tables(batch_size, expected):
    scheme = data_reader.batching_scheme(batch_size, 256, 8, 1.1)
    assert scheme["boundaries"] == BOUNDARIES_256
    assert scheme["batch_sizes"] == expected
    assert scheme["max_length"] == 10**9  # no filtering unless drop_long_sequences


def test_batching_scheme_from_hparams_and_multipliers():
    hp = create_hparams("transformer_base")
    assert data_reader.hparams_to_batching_scheme(hp)["batch_sizes"] == BATCH_SIZES_4096_256
    doubled = data_reader.hparams_to_batching_scheme(hp, shard_multiplier=2)
    assert doubled["batch_sizes"] == [2 * b for b in BATCH_SIZES_4096_256]
    # parsing_english_ptb8k's batch_size_multiplier 256: boundaries x256, raw sizes
    # 4096 // (8 * 256) = 2 then 1; window max(HCN <= 6) = 6, divisors keep 2 and 1.
    long = data_reader.hparams_to_batching_scheme(hp, length_multiplier=256)
    assert long["boundaries"] == [256 * b for b in BOUNDARIES_256]
    assert long["batch_sizes"] == [2] + [1] * 41
    # max_length 0 means batch_size.
    assert data_reader.batching_scheme(64, 0, 8, 1.1)["boundaries"] == data_reader.bucket_boundaries(
        64)


# --- Reading -------------------------------------------------------------------------------

def test_eval_epoch_yields_every_example_exactly_once(ids_data):
    data_dir, _, dev = ids_data
    hp = _hparams(batch_size=512, max_length=64)
    scheme = data_reader.hparams_to_batching_scheme(hp)
    seen = collections.Counter()
    for batch in IdsProblem().dataset(problem.ModeKeys.EVAL, data_dir, hp):
        assert batch["inputs"].dtype == tf.int32
        rows = _rows(batch)
        seen.update(rows)
        # Each feature is padded to its own longest example, with zeros.
        assert batch["inputs"].shape[1] == max(len(i) for i, _ in rows)
        assert batch["targets"].shape[1] == max(len(t) for _, t in rows)
        # One bucket per batch, never more sentences than that bucket's batch size.
        buckets = {bisect.bisect_right(scheme["boundaries"], _length(*r)) for r in rows}
        assert len(buckets) == 1
        assert len(rows) <= scheme["batch_sizes"][buckets.pop()]
    # Eval drops nothing, even examples longer than max_length (t2t).
    assert seen == collections.Counter(_key(e["inputs"], e["targets"]) for e in dev)
    assert any(_length(*k) > 64 for k in seen)


def test_train_batches_respect_token_budget_and_max_length(ids_data):
    data_dir, _, _ = ids_data
    hp = _hparams(batch_size=512, max_length=64)
    scheme = data_reader.hparams_to_batching_scheme(hp)
    prob = IdsProblem()
    num_batches = 0
    for batch in prob.dataset(problem.ModeKeys.TRAIN, data_dir, hp, seed=3).take(150):
        rows = _rows(batch)
        longest = max(_length(*r) for r in rows)
        padded = max(batch["inputs"].shape[1], batch["targets"].shape[1])
        assert padded == longest <= 64
        assert len(rows) * padded <= 512
        bucket = bisect.bisect_right(scheme["boundaries"], longest)
        # Training repeats forever, so every batch is a full batch of its bucket.
        assert len(rows) == scheme["batch_sizes"][bucket]
        num_batches += 1
    assert num_batches == 150


def test_pad_to_bucket_boundaries_gives_one_shape_per_bucket(ids_data):
    data_dir, _, _ = ids_data
    hp = _hparams(batch_size=512, max_length=64)
    scheme = data_reader.hparams_to_batching_scheme(hp)
    prob = IdsProblem()
    plain = prob.dataset(problem.ModeKeys.TRAIN, data_dir, hp, seed=3).take(60)
    padded = prob.dataset(problem.ModeKeys.TRAIN, data_dir, hp, seed=3,
                          pad_to_bucket_boundaries=True).take(60)
    shapes, buckets = set(), set()
    for a, b in zip(plain, padded):
        rows = _rows(a)
        assert _rows(b) == rows  # same examples; only more zero padding
        bucket = bisect.bisect_right(scheme["boundaries"], max(_length(*r) for r in rows))
        if bucket < len(scheme["boundaries"]):
            expected = scheme["boundaries"][bucket] - 1
            assert b["inputs"].shape[1] == b["targets"].shape[1] == expected
        shapes.add(tuple(b["inputs"].shape))
        buckets.add(bucket)
    # One shape per bucket: fewer distinct shapes than with per-batch lengths.
    assert len(shapes) == len(buckets) < len({tuple(a["inputs"].shape) for a in plain})


def test_train_single_pass_keeps_exactly_the_examples_within_length(ids_data):
    data_dir, train, _ = ids_data
    hp = _hparams(batch_size=512, max_length=64, min_length=3)
    seen = collections.Counter()
    for batch in IdsProblem().dataset(problem.ModeKeys.TRAIN, data_dir, hp, repeat=False):
        seen.update(_rows(batch))
    expected = collections.Counter(
        _key(e["inputs"], e["targets"]) for e in train
        if 3 <= _length(e["inputs"], e["targets"]) <= 64)
    assert seen == expected
    assert len(expected) < len(train)  # the filter did drop something


def test_train_shuffles_and_seed_is_reproducible(ids_data):
    data_dir, _, _ = ids_data
    hp = _hparams()

    def first_rows(seed):
        ds = IdsProblem().dataset(problem.ModeKeys.TRAIN, data_dir, hp, seed=seed)
        return [r for b in ds.take(5) for r in _rows(b)]

    assert first_rows(7) == first_rows(7)
    assert first_rows(7) != first_rows(8)


def test_unbatched_examples_and_fixed_batch_size(ids_data):
    data_dir, _, dev = ids_data
    prob = IdsProblem()
    examples = list(prob.dataset(problem.ModeKeys.EVAL, data_dir, _hparams(), batch=False))
    assert [_key(e["inputs"], e["targets"]) for e in examples] == [
        _key(e["inputs"], e["targets"]) for e in dev]
    hp = _hparams(batch_size=32, use_fixed_batch_size=True)
    sizes = [b["inputs"].shape[0] for b in prob.dataset(problem.ModeKeys.EVAL, data_dir, hp)]
    assert sizes == [32] * (300 // 32) + [300 % 32]


def test_rev_problem_swaps_features_and_hparams(ids_data):
    data_dir, _, dev = ids_data
    hp = _hparams()
    rev = IdsProblem(was_reversed=True)
    rows = collections.Counter(
        r for b in rev.dataset(problem.ModeKeys.EVAL, data_dir, hp) for r in _rows(b))
    assert rows == collections.Counter(_key(e["targets"], e["inputs"]) for e in dev)
    p_hp = rev.get_hparams(hp)
    assert p_hp.vocab_size == {"inputs": 120, "targets": 100}
    assert (p_hp.input_space_id, p_hp.target_space_id) == (8, 3)
    assert p_hp.was_reversed


def test_max_seq_length_truncates_inputs_and_targets(ids_data):
    data_dir, _, dev = ids_data
    hp = _hparams(max_input_seq_length=5, max_target_seq_length=3)
    examples = IdsProblem().dataset(problem.ModeKeys.EVAL, data_dir, hp, batch=False)
    got = [_key(e["inputs"], e["targets"]) for e in examples]
    assert got == [_key(e["inputs"][:5], e["targets"][:3]) for e in dev]


def test_input_context_splits_files_and_records(ids_data):
    data_dir, train, dev = ids_data
    hp = _hparams()
    prob = IdsProblem()
    for split, expected in (("train", train), ("eval", dev)):
        # 4 train files split by file; the single dev file split by record.
        parts = []
        for index in range(2):
            ctx = tf.distribute.InputContext(
                num_input_pipelines=2, input_pipeline_id=index, num_replicas_in_sync=2)
            ds = prob.dataset(
                problem.ModeKeys.EVAL, data_dir, hp, input_context=ctx, dataset_split=split)
            parts.append(collections.Counter(r for b in ds for r in _rows(b)))
        assert parts[0] and parts[1]
        assert not set(parts[0]) & set(parts[1])
        assert parts[0] + parts[1] == collections.Counter(
            _key(e["inputs"], e["targets"]) for e in expected)


def test_missing_shards_error_names_pattern_and_datagen(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"test_ids_problem-dev\*.*--mode=datagen"):
        IdsProblem().dataset(problem.ModeKeys.EVAL, str(tmp_path), _hparams())


def test_default_hparams_without_optional_fields(ids_data):
    data_dir, _, dev = ids_data
    hp = HParams(batch_size=256)  # no max_length, bucketing or shuffle fields: t2t defaults
    count = sum(b["inputs"].shape[0] for b in IdsProblem().dataset("eval", data_dir, hp))
    assert count == len(dev)


_REPLICA_SCRIPT = textwrap.dedent("""
    import json, sys
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    sys.path.insert(0, sys.argv[2])
    from test_input_pipeline import IdsProblem, _hparams, _rows
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    contexts = []

    def dataset_fn(mode):
        def fn(ctx):
            contexts.append((ctx.num_input_pipelines, ctx.num_replicas_in_sync))
            return IdsProblem().dataset(mode, sys.argv[1], _hparams(), input_context=ctx, seed=1)
        return fn

    result = {"replicas": strategy.num_replicas_in_sync, "eval": [[], []], "train": [[], []]}
    for mode, steps in (("eval", None), ("train", 20)):
        dist = strategy.distribute_datasets_from_function(dataset_fn(mode))
        for step, batch in enumerate(dist):
            if steps is not None and step == steps:
                break
            for r, (i, t) in enumerate(zip(strategy.experimental_local_results(batch["inputs"]),
                                           strategy.experimental_local_results(batch["targets"]))):
                rows = _rows({"inputs": i, "targets": t})
                result[mode][r].append([list(map(list, row)) for row in rows])
    result["contexts"] = contexts
    print("RESULT" + json.dumps(result))
""")


@pytest.mark.slow
def test_mirrored_strategy_two_replicas_share_the_data(ids_data, tmp_path):
    data_dir, _, dev = ids_data
    script = tmp_path / "replicas.py"
    script.write_text(_REPLICA_SCRIPT)
    tests_dir = pathlib.Path(__file__).parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(tests_dir.parent)] + os.environ.get("PYTHONPATH", "").split(os.pathsep)))
    out = subprocess.run(
        [sys.executable, str(script), data_dir, str(tests_dir)], capture_output=True, text=True,
        env=env, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.split("RESULT", 1)[1])
    assert result["replicas"] == 2
    assert all(c == [1, 2] for c in result["contexts"])
    # Eval: each replica gets its own batches; together every dev example exactly once.
    per_replica = [
        collections.Counter(_key(*row) for batch in batches for row in batch)
        for batches in result["eval"]]
    assert sum(len(b) for b in result["eval"][0]) and sum(len(b) for b in result["eval"][1])
    assert per_replica[0] + per_replica[1] == collections.Counter(
        _key(e["inputs"], e["targets"]) for e in dev)
    # Train: every replica batch is a full per-replica token-budget batch (512 tokens).
    for batches in result["train"]:
        assert len(batches) == 20
        for rows in batches:
            longest = max(_length(*r) for r in rows)
            assert longest <= 64 and len(rows) * longest <= 512
