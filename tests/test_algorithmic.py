"""Algorithmic problems: t2t's data stream, invariants of every task, shards, datagen main."""
import filecmp
import os
import types

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import registry
from t2t_lite.bin import t2t_datagen
from t2t_lite.data_generators import datagen, generator_utils, problem


def _t2t_identity(nbr_symbols, max_length, nbr_cases):
    """t2t's identity generator, one scalar draw per symbol, as t2t wrote it."""
    for _ in range(nbr_cases):
        length = np.random.randint(max_length) + 1
        inputs = [np.random.randint(nbr_symbols) for _ in range(length)]
        yield {"inputs": inputs, "targets": inputs}


def _t2t_addition(base, max_length, nbr_cases):
    """t2t's addition generator with scalar digit draws."""
    def number(length):
        if length == 1:
            return [np.random.randint(base)]
        return [np.random.randint(base) for _ in range(length - 1)] + [
            np.random.randint(base - 1) + 1]

    for _ in range(nbr_cases):
        l1 = np.random.randint(max_length // 2) + 1
        l2 = np.random.randint(max_length - l1 - 1) + 1
        n1, n2 = number(l1), number(l2)
        total = sum(d * base**i for i, d in enumerate(n1)) + sum(
            d * base**i for i, d in enumerate(n2))
        digits = []
        while True:
            digits.append(total % base)
            total //= base
            if not total:
                break
        yield {"inputs": n1 + [base] + n2, "targets": digits}


@pytest.mark.parametrize("name,reference", [
    ("algorithmic_identity_decimal40", _t2t_identity),
    ("algorithmic_addition_decimal40", _t2t_addition),
    ("algorithmic_addition_binary40", _t2t_addition),
])
def test_generators_draw_t2t_stream(name, reference):
    prob = registry.problem(name)
    np.random.seed(429459)
    ours = list(prob.generator(prob.num_symbols, 40, 300))
    np.random.seed(429459)
    theirs = list(reference(prob.num_symbols, 40, 300))
    assert ours == theirs


def _num(digits, base):
    return sum(int(d) * base**i for i, d in enumerate(digits))


def test_every_task_computes_its_function():
    np.random.seed(3)
    for name in registry.list_problems():
        if not name.startswith("algorithmic_") or "nlplike32k" in name:
            continue
        prob = registry.problem(name)
        base = prob.num_symbols
        max_length = prob.train_length
        for case in prob.generator(base, max_length, 50):
            x, y = [int(v) for v in case["inputs"]], [int(v) for v in case["targets"]]
            assert 1 <= len(x) <= max_length or "nlplike" in name
            if "identity" in name:
                assert y == x
            elif "reverse" in name:
                assert y == x[::-1]
            elif "shift" in name:
                assert y == [v + 10 for v in x] and max(x) < 10
            elif "sort" in name:
                assert y == sorted(x) and max(x) < base
            elif "addition" in name or "multiplication" in name:
                sep = x.index(base)
                a, b = _num(x[:sep], base), _num(x[sep + 1:], base)
                assert _num(y, base) == (a + b if "addition" in name else a * b)
                assert y[-1] != 0 or y == [0]
            else:
                pytest.fail(f"no check for {name}")


def test_t2t_sizes_lengths_and_small_variants():
    reverse = registry.problem("algorithmic_reverse_decimal40")
    assert (reverse.train_length, reverse.dev_length, reverse.train_size, reverse.dev_size,
            reverse.num_shards) == (40, 400, 100000, 10000, 10)
    small = registry.problem("algorithmic_reverse_decimal40_small")
    assert (small.train_length, small.dev_length, small.train_size, small.dev_size) == (
        40, 40, 100000, 1000)
    test = registry.problem("algorithmic_reverse_binary40_test")
    assert (test.train_length, test.dev_length, test.train_size, test.dev_size,
            test.num_shards) == (10, 10, 1000, 100, 1)
    sort = registry.problem("algorithmic_sort_problem")
    assert (sort.num_symbols, sort.train_length, sort.dev_length) == (20, 10, 20)
    assert sort.eval_metrics()[-1] == "edit_distance"
    assert registry.problem("algorithmic_shift_decimal40").dev_length == 80


def _read(path):
    out = []
    for record in generator_utils.read_records(path):
        feats = tf.train.Example.FromString(record).features.feature
        out.append((list(feats["inputs"].int64_list.value),
                    list(feats["targets"].int64_list.value)))
    return out


def test_generate_data_shifts_ids_appends_eos_and_names_shards(tmp_path):
    prob = registry.problem("algorithmic_reverse_binary40_test")
    np.random.seed(429459)
    prob.generate_data(str(tmp_path), None)
    assert sorted(os.listdir(tmp_path)) == [
        "algorithmic_reverse_binary40_test-dev-00000-of-00001",
        "algorithmic_reverse_binary40_test-train-00000-of-00001"]
    train = _read(str(tmp_path / "algorithmic_reverse_binary40_test-train-00000-of-00001"))
    dev = _read(str(tmp_path / "algorithmic_reverse_binary40_test-dev-00000-of-00001"))
    assert (len(train), len(dev)) == (1000, 100)
    np.random.seed(429459)
    expected = list(prob.generator(2, 10, 1000))
    for (inputs, targets), case in zip(train, expected):  # written in order, no shuffle step
        assert inputs == [v + 2 for v in case["inputs"]] + [1]
        assert targets == [v + 2 for v in case["targets"]] + [1]
    hp = prob.get_hparams()
    assert hp.vocab_size == {"inputs": 4, "targets": 4}
    assert (hp.input_space_id, hp.target_space_id) == (
        problem.SpaceID.DIGIT_0, problem.SpaceID.DIGIT_1) == (10, 11)


def test_arithmetic_separator_is_inside_the_vocab(tmp_path):
    prob = registry.problem("algorithmic_addition_decimal40")
    prob.generate_data(str(tmp_path), None, max_cases=200)
    vocab = prob.get_hparams().vocab_size["inputs"]
    assert vocab == 13  # t2t's 12 plus the separator (see the module docstring)
    train = [ex for f in sorted(os.listdir(tmp_path)) if "-train-" in f
             for ex in _read(str(tmp_path / f))]
    assert len(train) == 200
    assert max(max(i) for i, _ in train) == 12 and min(min(i) for i, _ in train) >= 1


def test_dataset_reads_generated_algorithmic_data(tmp_path):
    prob = registry.problem("algorithmic_identity_decimal40_small")
    prob.generate_data(str(tmp_path), None, max_cases=300)
    hp = registry.hparams("transformer_tiny")
    hp.batch_size = 1024
    count = 0
    for batch in prob.dataset(problem.ModeKeys.EVAL, str(tmp_path), hp):
        np.testing.assert_array_equal(batch["inputs"].numpy(), batch["targets"].numpy())
        count += batch["inputs"].shape[0]
    assert count == 300


def _flags(**kw):
    defaults = types.SimpleNamespace(
        problem=None, data_dir=None, tmp_dir=None, random_seed=None, max_cases=0,
        exclude_problems="", only_list=False, num_shards=0)
    return types.SimpleNamespace(**{**vars(defaults), **kw})


def test_datagen_main_is_seeded_and_reproducible(tmp_path, capsys):
    for d in ("a", "b"):
        t2t_datagen.main(_flags(problem="algorithmic_reverse_binary40_test",
                            data_dir=str(tmp_path / d), tmp_dir=str(tmp_path / "tmp")))
    out = capsys.readouterr().out
    assert "Generating problems:\n    algorithmic_reverse_binary40_test" in out
    assert "[datagen] algorithmic_reverse_binary40_test: done in" in out
    for name in os.listdir(tmp_path / "a"):
        assert filecmp.cmp(tmp_path / "a" / name, tmp_path / "b" / name, shallow=False)
    # t2t-datagen's default seed 429459 gives t2t's data: the first example drawn with it.
    np.random.seed(429459)
    first = next(registry.problem("algorithmic_reverse_binary40_test").generator(2, 10, 1))
    train = _read(str(tmp_path / "a" / "algorithmic_reverse_binary40_test-train-00000-of-00001"))
    assert train[0][0] == [v + 2 for v in first["inputs"]] + [1]


def test_datagen_problem_selection_and_flag_errors(tmp_path, capsys):
    assert datagen.select_problems("algorithmic_addition*") == [
        "algorithmic_addition_binary40", "algorithmic_addition_decimal40"]
    assert datagen.select_problems(
        "algorithmic_addition*", exclude="binary") == ["algorithmic_addition_decimal40"]
    assert datagen.select_problems("translate_files,algorithmic_sort_problem") == [
        "algorithmic_sort_problem", "translate_files"]
    assert datagen.select_problems("translate_ende_wmt32k_rev") == ["translate_ende_wmt32k"]
    with pytest.raises(ValueError, match="(?s)selects no registered problem.*translate_files"):
        datagen.select_problems("no_such_problem")
    t2t_datagen.main(_flags(problem="algorithmic_*", only_list=True, data_dir=str(tmp_path / "x")))
    assert "algorithmic_sort_problem" in capsys.readouterr().out
    assert not os.path.exists(tmp_path / "x")
    with pytest.raises(ValueError, match="--num_shards should not be set"):
        t2t_datagen.main(_flags(problem="algorithmic_sort_problem", num_shards=3))
    with pytest.raises(ValueError, match="--approx_vocab_size does not apply"):
        datagen.configure_problem("algorithmic_sort_problem", approx_vocab_size=100)
    with pytest.raises(ValueError, match="do not apply to algorithmic_sort_problem"):
        datagen.configure_problem("algorithmic_sort_problem", source_files={"train_src": "a"})
