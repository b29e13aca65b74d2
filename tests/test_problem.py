"""Text2TextProblem datagen: t2t's files and shards, round trips, strict errors, hparams."""
import collections
import filecmp
import os
import random

import pytest
import tensorflow as tf

from t2t_lite import registry
from t2t_lite.data_generators import generator_utils, problem, text_encoder, text_problems
from t2t_lite.data_generators.text_problems import CorpusError

NUM_PAIRS = 250


class ToyTmpdir(text_problems.Text2textTmpdir):
    """Text2textTmpdir over a few hundred toy WMT pairs, small vocab."""

    registered_name = "toy_tmpdir"

    @property
    def default_approx_vocab_size(self):
        return 2**8


class ToyEnde1k(text_problems.Text2TextProblem):
    """The problem that made the fixture vocab: every toy train pair, en line then de line."""

    registered_name = "translate_toy_ende1k"

    def __init__(self, toy_dir, **kw):
        super().__init__(**kw)
        self.toy_dir = toy_dir

    @property
    def default_approx_vocab_size(self):
        return 2**10

    @property
    def is_generate_per_split(self):
        return True

    def generate_samples(self, data_dir, tmp_dir, dataset_split):
        split = "train" if dataset_split == problem.DatasetSplit.TRAIN else "dev"
        return text_problems.text2text_txt_iterator(
            os.path.join(self.toy_dir, f"{split}.en"), os.path.join(self.toy_dir, f"{split}.de"))


def _read_lines(path, n=None):
    with open(path, encoding="utf-8") as f:
        lines = [line.strip() for line in f]
    return lines[:n] if n else lines


@pytest.fixture()
def toy_tmp(tmp_path, wmt_toy_dir):
    """tmp_dir holding Text2textTmpdir's files: 250 train pairs, 40 eval pairs."""
    tmp_dir = tmp_path / "tmp"
    tmp_dir.mkdir()
    for split, src, n in (("train", "train", NUM_PAIRS), ("eval", "dev", 40)):
        for side, lang in (("inputs", "en"), ("targets", "de")):
            lines = _read_lines(wmt_toy_dir / f"{src}.{lang}", n)
            (tmp_dir / f"{side}.{split}.txt").write_text("\n".join(lines) + "\n")
    return tmp_dir


def _records(path):
    return [tf.train.Example.FromString(r) for r in generator_utils.read_records(str(path))]


def _decoded(paths, encoder):
    pairs = []
    for path in paths:
        for ex in _records(path):
            inputs = list(ex.features.feature["inputs"].int64_list.value)
            targets = list(ex.features.feature["targets"].int64_list.value)
            assert inputs[-1] == text_encoder.EOS_ID and targets[-1] == text_encoder.EOS_ID
            assert text_encoder.EOS_ID not in inputs[:-1] + targets[:-1]
            pairs.append((encoder.decode(inputs[:-1]), encoder.decode(targets[:-1])))
    return pairs


def test_generate_data_writes_t2t_shards_that_read_back(toy_tmp, tmp_path):
    data_dir = tmp_path / "data"
    prob = ToyTmpdir()
    random.seed(429459)
    prob.generate_data(str(data_dir), str(toy_tmp))
    names = sorted(os.listdir(data_dir))
    train = [f"toy_tmpdir-train-{i:05d}-of-00100" for i in range(100)]
    assert names == sorted(train + ["toy_tmpdir-dev-00000-of-00001", "vocab.toy_tmpdir.256.subwords"])
    encoders = prob.feature_encoders(str(data_dir))
    encoder = encoders["inputs"]
    assert encoders["targets"] is encoder  # one shared vocab
    # Round robin: example k went to shard k mod 100 (shuffling keeps per-file counts).
    counts = [len(generator_utils.read_records(str(data_dir / f))) for f in train]
    assert counts == [3 if i < NUM_PAIRS % 100 else 2 for i in range(100)]
    expected = list(zip(_read_lines(toy_tmp / "inputs.train.txt"),
                        _read_lines(toy_tmp / "targets.train.txt")))
    got = _decoded([data_dir / f for f in train], encoder)
    assert collections.Counter(got) == collections.Counter(expected)
    dev = _decoded([data_dir / "toy_tmpdir-dev-00000-of-00001"], encoder)
    assert sorted(dev) == sorted(zip(_read_lines(toy_tmp / "inputs.eval.txt"),
                                     _read_lines(toy_tmp / "targets.eval.txt")))
    # Shuffled within the file: not the written (round-robin) order.
    first_shard = _decoded([data_dir / train[0]], encoder)
    assert first_shard != [expected[0], expected[100], expected[200]]


def test_seeded_generation_is_reproducible_and_outputs_are_kept(toy_tmp, tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    for d in dirs:
        random.seed(429459)
        ToyTmpdir().generate_data(str(d), str(toy_tmp))
    for name in os.listdir(dirs[0]):
        assert filecmp.cmp(dirs[0] / name, dirs[1] / name, shallow=False), name
    # Existing final shards are kept: a second run rewrites nothing.
    stamp = {n: os.path.getmtime(dirs[0] / n) for n in os.listdir(dirs[0])}
    ToyTmpdir().generate_data(str(dirs[0]), str(toy_tmp))
    assert stamp == {n: os.path.getmtime(dirs[0] / n) for n in os.listdir(dirs[0])}


def test_max_cases_caps_each_split(toy_tmp, tmp_path):
    data_dir = tmp_path / "data"
    ToyTmpdir().generate_data(str(data_dir), str(toy_tmp), max_cases=30)
    train = sum(len(generator_utils.read_records(str(data_dir / f)))
                for f in os.listdir(data_dir) if "-train-" in f)
    dev = len(generator_utils.read_records(str(data_dir / "toy_tmpdir-dev-00000-of-00001")))
    assert (train, dev) == (30, 30)


def _corrupt(path, line_number, new_bytes):
    lines = path.read_bytes().split(b"\n")
    lines[line_number - 1] = new_bytes
    path.write_bytes(b"\n".join(lines))


@pytest.mark.parametrize("case", ["length", "utf8", "missing", "empty"])
def test_bad_input_names_file_and_line_and_writes_nothing(case, toy_tmp, tmp_path):
    data_dir = tmp_path / "data"
    inputs = toy_tmp / "targets.train.txt"
    if case == "length":
        lines = _read_lines(inputs)[:-7]
        inputs.write_text("\n".join(lines) + "\n")
        match = r"targets\.train\.txt has 243 lines but .*inputs\.train\.txt continues at line 244"
    elif case == "utf8":
        _corrupt(inputs, 200, "caf\u00e9 au lait".encode("latin-1"))
        match = r"targets\.train\.txt:200: not valid UTF-8 \(byte 0xe9 at column 4\)"
    elif case == "missing":
        inputs.unlink()
        match = r"targets\.train\.txt: no such file"
    else:
        for name in ("inputs.train.txt", "targets.train.txt"):
            (toy_tmp / name).write_text("\n\n  \n")
        match = r"Empty corpus.*inputs\.train\.txt and .*targets\.train\.txt"
    with pytest.raises(CorpusError, match=match):
        ToyTmpdir().generate_data(str(data_dir), str(toy_tmp))
    assert os.listdir(data_dir) == []


def test_failure_in_dev_split_removes_train_shards_and_vocab(toy_tmp, tmp_path):
    data_dir = tmp_path / "data"
    _corrupt(toy_tmp / "inputs.eval.txt", 3, b"\xff\xfe")
    with pytest.raises(CorpusError, match=r"inputs\.eval\.txt:3: not valid UTF-8"):
        ToyTmpdir().generate_data(str(data_dir), str(toy_tmp))
    assert os.listdir(data_dir) == []


def test_generate_files_round_robin_and_atomic(tmp_path):
    paths = [str(tmp_path / f"x-train-{i:05d}-of-00003") for i in range(3)]
    cases = [{"inputs": [i + 2, 1], "targets": [1]} for i in range(7)]
    assert generator_utils.generate_files(iter(cases), paths) == 7
    firsts = [[ex.features.feature["inputs"].int64_list.value[0] - 2 for ex in _records(p)]
              for p in paths]
    assert firsts == [[0, 3, 6], [1, 4], [2, 5]]

    def failing():
        yield {"inputs": [5, 1], "targets": [1]}
        raise RuntimeError("boom")

    other = [str(tmp_path / f"y-train-{i:05d}-of-00002") for i in range(2)]
    with pytest.raises(RuntimeError):
        generator_utils.generate_files(failing(), other)
    assert not [f for f in os.listdir(tmp_path) if f.startswith("y-")]
    with pytest.raises(ValueError, match="Empty generated field"):
        generator_utils.to_example({"inputs": []})


def test_text2text_problem_hparams_encoders_and_metrics(toy_tmp, tmp_path):
    data_dir = tmp_path / "data"
    ToyTmpdir().generate_data(str(data_dir), str(toy_tmp))
    prob = ToyTmpdir()
    hp = prob.get_hparams(data_dir=str(data_dir))
    encoders = prob.feature_encoders(str(data_dir))
    size = encoders["targets"].vocab_size
    assert hp.vocab_size == {"inputs": size, "targets": size}
    assert (hp.input_space_id, hp.target_space_id) == (0, 0)
    assert hp.stop_at_eos and hp.loss_multiplier == 1.0 and hp.batch_size_multiplier == 1
    assert hp.vocabulary["inputs"].vocab_size == size
    assert prob.eval_metrics() == [
        "accuracy", "accuracy_top5", "accuracy_per_sequence", "neg_log_perplexity",
        "approx_bleu_score", "rouge_2_fscore", "rouge_L_fscore"]
    assert problem.Problem().eval_metrics() == prob.eval_metrics()[:4]
    with pytest.raises(FileNotFoundError, match=r"vocab\.toy_tmpdir\.256\.subwords not found"):
        ToyTmpdir().feature_encoders(str(tmp_path))


def test_registry_builds_t2t_names_and_rev():
    for name in ("translate_ende_wmt32k", "translate_ende_wmt8k", "translate_ende_wmt_bpe32k",
                 "translate_enfr_wmt32k", "translate_enfr_wmt_small32k", "translate_files",
                 "algorithmic_reverse_decimal40", "algorithmic_sort_problem"):
        prob = registry.problem(name)
        assert prob.name == name and not prob.was_reversed
    rev = registry.problem("translate_ende_wmt32k_rev")
    assert rev.was_reversed and rev.name == "translate_ende_wmt32k"
    assert rev.vocab_filename == "vocab.translate_ende_wmt32k.32768.subwords"


def test_modes_and_filepatterns(tmp_path):
    prob = ToyTmpdir()
    assert (problem.ModeKeys.TRAIN, problem.ModeKeys.EVAL, problem.ModeKeys.PREDICT) == (
        "train", "eval", "infer")
    assert prob.filepattern("/d", "train") == "/d/toy_tmpdir-train*"
    assert prob.filepattern("/d", "infer") == "/d/toy_tmpdir-dev*"
    assert prob.filepattern("/d", "test", shard=3) == "/d/toy_tmpdir-test-00003*"
    assert prob.training_filepaths("/d", 2, shuffled=False) == [
        "/d/toy_tmpdir-unshuffled-train-00000-of-00002",
        "/d/toy_tmpdir-unshuffled-train-00001-of-00002"]


def test_vocab_built_like_t2t_equals_fixture(wmt_toy_dir, t2t_fixtures, tmp_path):
    prob = ToyEnde1k(str(wmt_toy_dir))
    prob.get_or_create_vocab(str(tmp_path), None)
    built = tmp_path / "vocab.translate_toy_ende1k.1024.subwords"
    assert filecmp.cmp(built, t2t_fixtures / "vocab.translate_toy_ende1k.1024.subwords",
                       shallow=False)
