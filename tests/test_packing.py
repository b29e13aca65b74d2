"""Packed examples (t2t's `*_packed` problems and `pack_dataset`): the packer, the model's
attention confined to each example with per-example positions, and reading packed data."""
import random

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.data_generators import generator_utils
from t2t_lite.hparams_lib import create_hparams
from t2t_lite.layers import common_attention
from t2t_lite.models.transformer import Transformer
from t2t_lite.problems import translate_files

VOCAB = 20


def _model():
    tf.keras.utils.set_random_seed(4)
    hp = create_hparams("transformer_tiny", "hidden_size=16,filter_size=32,num_heads=2,"
                        "symbol_modality_num_shards=2")
    return Transformer(hp, VOCAB, VOCAB)


def test_timing_signal_given_positions_equals_the_plain_one_per_segment():
    x = tf.zeros([1, 7, 8])
    position = tf.constant([[0, 1, 2, 0, 1, 0, 0]])
    signal = common_attention.add_timing_signal_1d_given_position(x, position).numpy()[0]
    plain = common_attention.get_timing_signal_1d(3, 8).numpy()[0]
    np.testing.assert_allclose(signal[:3], plain, atol=1e-6)
    np.testing.assert_allclose(signal[3:5], plain[:2], atol=1e-6)
    np.testing.assert_allclose(signal[5], plain[0], atol=1e-6)


def test_same_segment_bias():
    bias = common_attention.attention_bias_same_segment(
        tf.constant([[1, 1, 2, 0]]), tf.constant([[1, 2, 2]])).numpy()
    assert bias.shape == (1, 1, 4, 3)
    np.testing.assert_array_equal(bias[0, 0] == 0, [[1, 0, 0], [1, 0, 0], [0, 1, 1], [0, 0, 0]])


def _packed(*pairs):
    """One packed row (t2t's layout) of (inputs, targets) id lists that end with EOS."""
    (row,) = list(generator_utils.pack_examples(
        [{"inputs": list(i), "targets": list(t)} for i, t in pairs], True, packed_length=64,
        spacing=0))
    return {k: tf.constant([v]) for k, v in row.items()}


def test_packed_row_keeps_examples_apart():
    model = _model()
    first = ([3, 4, 5, 1], [6, 7, 1])
    second = ([8, 9, 1], [10, 11, 12, 1])
    other_first = ([13, 14, 15, 16, 17, 1], [18, 1])
    packed = model(_packed(first, second), training=False).numpy()[0]
    alone = model({"inputs": tf.constant([first[0]]), "targets": tf.constant([first[1]])},
                  training=False).numpy()[0]
    # The first example of a row is computed exactly as on its own.
    np.testing.assert_allclose(packed[:3], alone, atol=1e-5)
    # The second one does not depend on what the first one is (only on its final EOS, which
    # t2t's shift of the whole row feeds in as its first decoder input), nor on its length:
    # its positions restart at 0.
    other = model(_packed(other_first, second), training=False).numpy()[0]
    np.testing.assert_allclose(packed[3:7], other[2:6], atol=1e-5)
    second_alone = model({"inputs": tf.constant([second[0]]),
                          "targets": tf.constant([second[1]])}, training=False).numpy()[0]
    assert np.abs(packed[3:7] - second_alone).max() > 1e-3  # the EOS "GO" input


def test_pack_examples_is_t2ts_first_fit_over_a_queue():
    examples = [{"inputs": [5] * n, "targets": [6] * m}
                for n, m in ((3, 2), (4, 4), (2, 2), (6, 1), (1, 1))]
    packed = list(generator_utils.pack_examples(examples, True, packed_length=8, spacing=0,
                                                queue_size=2))
    # (3,2) opens A; (4,4) fits A (7 inputs, 6 targets); (2,2) does not: opens B; (6,1) fits
    # B (8 inputs); (1,1) fits A, the first pack with room.
    assert [p["inputs_segmentation"] for p in packed] == [
        [1, 1, 1, 2, 2, 2, 2, 3], [1, 1, 2, 2, 2, 2, 2, 2]]
    assert packed[0]["targets_position"] == [0, 1, 0, 1, 2, 3, 0]
    assert packed[1]["inputs"] == [5] * 8 and packed[1]["targets"] == [6, 6, 6]
    # A queue of one pack: a pack is emitted as soon as an example does not fit it.
    packed = list(generator_utils.pack_examples(examples, True, packed_length=8, spacing=0,
                                                queue_size=1))
    assert [p["targets_segmentation"] for p in packed] == [
        [1, 1, 2, 2, 2, 2], [1, 1, 2], [1]]
    # Spacing zeros between examples (t2t's default 2) have segment and position 0.
    (spaced,) = generator_utils.pack_examples(examples[:2], True, packed_length=16)
    assert spaced["inputs"] == [5, 5, 5, 0, 0, 5, 5, 5, 5]
    assert spaced["inputs_segmentation"] == [1, 1, 1, 0, 0, 2, 2, 2, 2]
    assert spaced["inputs_position"] == [0, 1, 2, 0, 0, 0, 1, 2, 3]


# --- Packed data: the *_packed problems' datagen and pack_dataset -------------------------
_PACKED_LENGTH = 128


class _ToyPacked(translate_files.TranslateFiles):
    """translate_files with t2t's packing at datagen (as translate_ende_wmt32k_packed)."""

    registered_name = "toy_packed"

    @property
    def packed_length(self) -> int:
        return _PACKED_LENGTH

    @property
    def use_vocab_from_other_problem(self):
        return translate_files.TranslateFiles(approx_vocab_size=self._approx_vocab_size)


@pytest.fixture(scope="module")
def toy_problems(wmt_toy_dir, tmp_path_factory):
    """(data_dir, unpacked problem, packed problem) over the first 400 toy pairs (vocab ~2^10:
    examples of 30-130 subtokens)."""
    tmp_path = tmp_path_factory.mktemp("packed")
    for name in ("train.en", "train.de", "dev.en", "dev.de"):
        text = (wmt_toy_dir / name).read_text(encoding="utf-8").split("\n")
        keep = 400 if name.startswith("train") else 100
        (tmp_path / name).write_text("\n".join(text[:keep]) + "\n", encoding="utf-8")
    data_dir = str(tmp_path / "data")
    problems = []
    for cls in (translate_files.TranslateFiles, _ToyPacked):
        prob = cls(approx_vocab_size=2**10)
        prob.set_source_files(str(tmp_path / "train.en"), str(tmp_path / "train.de"),
                              str(tmp_path / "dev.en"), str(tmp_path / "dev.de"))
        random.seed(1)
        prob.generate_data(data_dir, str(tmp_path / "tmp"))
        problems.append(prob)
    return (data_dir, *problems)


def _unpack(rows):
    """Original (inputs, targets) examples of packed rows, via their segmentation."""
    examples = []
    for row in rows:
        for segment in sorted(set(row["targets_segmentation"].tolist()) - {0}):
            pick = {k: row[k][row[k + "_segmentation"] == segment].tolist()
                    for k in ("inputs", "targets")}
            examples.append((tuple(pick["inputs"]), tuple(pick["targets"])))
            for k in ("inputs", "targets"):
                positions = row[k + "_position"][row[k + "_segmentation"] == segment]
                assert positions.tolist() == list(range(len(positions)))
    return examples


def _examples(prob, data_dir, hp, mode="eval"):
    """Every example of `mode`'s split, unbatched (training: one pass, files in order)."""
    return list(prob.dataset(mode, data_dir, hp, batch=False, shuffle_files=False,
                             repeat=False).as_numpy_iterator())


def _longest(pair) -> int:
    return max(len(pair[0]), len(pair[1]))


def test_packed_problem_holds_the_unpacked_examples(toy_problems):
    data_dir, plain, packed = toy_problems
    assert packed.vocab_filename == plain.vocab_filename == "vocab.translate_files.1024.subwords"
    hp = create_hparams("transformer_tiny")
    for mode in ("train", "eval"):
        rows = _examples(packed, data_dir, hp, mode)
        pairs = [(tuple(e["inputs"].tolist()), tuple(e["targets"].tolist()))
                 for e in _examples(plain, data_dir, hp, mode)]
        assert len(rows) < 0.7 * len(pairs)
        assert any(_longest(pair) > _PACKED_LENGTH for pair in pairs)
        # An example longer than packed_length is a pack of its own (t2t's); training drops it
        # with every sequence longer than the problem's max_length (packed_length).
        if mode == "train":
            pairs = [pair for pair in pairs if _longest(pair) <= _PACKED_LENGTH]
            assert max(_longest((r["inputs"], r["targets"])) for r in rows) <= _PACKED_LENGTH
        else:
            assert all(len(set(r["targets_segmentation"].tolist())) == 1 for r in rows
                       if _longest((r["inputs"], r["targets"])) > _PACKED_LENGTH)
        assert sorted(_unpack(rows)) == sorted(pairs)


def test_pack_dataset_packs_on_the_fly_to_max_length(toy_problems):
    data_dir, plain, _ = toy_problems
    hp = create_hparams("transformer_tiny", "max_length=96,pack_dataset=true")
    rows = _examples(plain, data_dir, hp)
    originals = _examples(plain, data_dir, create_hparams("transformer_tiny"))
    assert len(rows) < 0.8 * len(originals)
    assert max(_longest((r["inputs"], r["targets"])) for r in rows) <= 96
    # Examples longer than max_length are cut to it, as t2t's pack_dataset does.
    assert any(_longest((e["inputs"], e["targets"])) > 96 for e in originals)
    assert sorted(_unpack(rows)) == sorted(
        (tuple(e["inputs"][:96].tolist()), tuple(e["targets"][:96].tolist())) for e in originals)
    batches = list(plain.dataset("eval", data_dir, hp).as_numpy_iterator())
    assert all("targets_position" in b and "inputs_segmentation" in b for b in batches)


def _toy_trainer(problem, data_dir, output_dir, hparams, train_steps):
    from t2t_lite.training import trainer_lib

    vocab = problem.get_hparams(hparams, data_dir=data_dir).vocab_size["targets"]
    config = trainer_lib.RunConfig(
        output_dir=str(output_dir), train_steps=train_steps, eval_steps=0,
        log_step_count_steps=train_steps, random_seed=3, num_decode_examples=0)
    tf.keras.utils.set_random_seed(3)
    return trainer_lib.Trainer(lambda: Transformer(hparams, vocab, vocab), hparams, problem,
                               data_dir, config)


@pytest.mark.slow
def test_packed_training_matches_unpacked_training_on_unpacked_eval(toy_problems, tmp_path):
    """Trained on the packed problem, the model's loss on the UNPACKED dev set is that of the
    same model trained on the unpacked problem, within the noise of two training runs."""
    data_dir, plain, packed = toy_problems
    hparams = create_hparams(
        "transformer_tiny", "hidden_size=64,filter_size=128,num_heads=2,num_hidden_layers=1,"
        "batch_size=1024,learning_rate_warmup_steps=40,learning_rate_constant=1.0,"
        f"max_length={_PACKED_LENGTH}")
    steps = 120
    losses = {}
    for name, problem in (("plain", plain), ("packed", packed)):
        trainer = _toy_trainer(problem, data_dir, tmp_path / name, hparams, steps)
        trainer.train()
        if name == "plain":
            losses["initial"] = _toy_trainer(plain, data_dir, tmp_path / "init", hparams,
                                             steps).evaluate()["loss"]
        evaluator = _toy_trainer(plain, data_dir, tmp_path / name, hparams, steps)
        assert evaluator.restore() == steps
        losses[name] = evaluator.evaluate()["loss"]
    learned = losses["initial"] - losses["plain"]
    assert learned > 1.0, losses
    assert abs(losses["packed"] - losses["plain"]) < 0.1 * learned, losses


def test_decoding_reads_the_unpacked_dev_set_of_a_packed_problem():
    from t2t_lite import registry
    from t2t_lite.decoding import decoding

    packed = registry.problem("translate_ende_wmt8k_packed")
    assert packed.packed_length == 256
    assert decoding.unpacked_problem(packed).name == "translate_ende_wmt8k"
    assert packed.vocab_filename == registry.problem("translate_ende_wmt8k").vocab_filename
    plain = registry.problem("translate_ende_wmt8k")
    assert decoding.unpacked_problem(plain) is plain
