"""Subword dropout at datagen (MaxMatch-dropout over t2t's longest-match subword split).

Not t2t's: its encoder is deterministic. Checked here: rate 0 is t2t's encoding, every
sampled segmentation decodes to the text, the pass-over probability on a hand-built vocab,
reproducibility, and datagen writing N re-segmented passes of the training split with the
dev split unchanged.
"""
import collections
import os
import random

import pytest
import tensorflow as tf

from t2t_lite.bin import t2t_datagen
from t2t_lite.data_generators import datagen, generator_utils
from t2t_lite.data_generators.text_encoder import SubwordTextEncoder
from t2t_lite.problems import algorithmic, translate_files
from tests.test_translate import _decoded_split, _flags, _lines, _write


def _hand_vocab():
    # "abc_" is one subtoken; every other piece of "abc" is single characters.
    enc = SubwordTextEncoder()
    enc._init_subtokens_from_list(
        ["<pad>_", "<EOS>_", "abc_", "a", "b", "c", "_", "\\", "u", ";"] + list("0123456789"))
    enc._init_alphabet_from_tokens(["abc", "_\\u;0123456789"])
    return enc


def test_pass_over_probability_on_a_hand_built_vocab():
    enc = _hand_vocab()
    abc, a, b, c, end = (enc.all_subtoken_strings.index(s) for s in ("abc_", "a", "b", "c", "_"))
    assert enc.encode("abc") == [abc]
    rng = random.Random(0)
    draws = [tuple(enc.encode_with_dropout("abc", 0.3, rng)) for _ in range(20000)]
    counts = collections.Counter(draws)
    # Only two splits exist: the whole token (kept with probability 0.7) or its characters
    # (single characters are never passed over).
    assert set(counts) == {(abc,), (a, b, c, end)}
    assert abs(counts[(abc,)] / len(draws) - 0.7) < 0.015


def test_rate_zero_is_t2t_encoding_and_every_sample_decodes(t2t_fixtures, wmt_toy_dir):
    enc = SubwordTextEncoder(str(t2t_fixtures / "vocab.translate_toy_ende1k.1024.subwords"))
    lines = _lines(wmt_toy_dir / "train.de", 0, 200) + ["a_b \\ ü ☃ 12;3"]
    rng = random.Random(5)
    longer = 0
    for line in lines:
        assert enc.encode_with_dropout(line, 0.0, rng) == enc.encode(line)
        ids = enc.encode_with_dropout(line, 0.2, rng)
        assert enc.decode(ids) == line
        assert all(2 <= i < enc.vocab_size for i in ids)
        assert len(ids) >= len(enc.encode(line))
        longer += len(ids) > len(enc.encode(line))
    assert longer > 150  # most sentences get another segmentation at rate 0.2
    same_seed = [enc.encode_with_dropout(s, 0.2, random.Random(9)) for s in lines[:20]]
    assert same_seed == [enc.encode_with_dropout(s, 0.2, random.Random(9)) for s in lines[:20]]
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        enc.encode_with_dropout("x", 1.0, rng)


def _records(data_dir, split):
    out = []
    for name in sorted(os.listdir(data_dir)):
        if name.startswith(f"translate_files-{split}-"):
            for record in generator_utils.read_records(os.path.join(data_dir, name)):
                feats = tf.train.Example.FromString(record).features.feature
                out.append((tuple(feats["inputs"].int64_list.value),
                            tuple(feats["targets"].int64_list.value)))
    return out


def test_datagen_writes_resegmented_passes_and_an_unchanged_dev(wmt_toy_dir, tmp_path):
    src = {k: str(tmp_path / f"{k}.txt") for k in ("train_src", "train_tgt", "dev_src", "dev_tgt")}
    for key, (name, stop) in {"train_src": ("train.en", 60), "train_tgt": ("train.de", 60),
                              "dev_src": ("dev.en", 10), "dev_tgt": ("dev.de", 10)}.items():
        _write(src[key], _lines(wmt_toy_dir / name, 0, stop))
    dirs = {}
    for tag, extra in (("plain", {}),
                       ("dropout", {"subword_dropout": 0.2, "subword_dropout_copies": 3})):
        dirs[tag] = tmp_path / tag
        t2t_datagen.main(_flags(problem="translate_files", data_dir=str(dirs[tag]),
                                tmp_dir=str(tmp_path / "tmp"), approx_vocab_size=300,
                                **src, **extra))
    vocab = "vocab.translate_files.300.subwords"
    assert (dirs["plain"] / vocab).read_bytes() == (dirs["dropout"] / vocab).read_bytes()
    assert sorted(_records(dirs["plain"], "dev")) == sorted(_records(dirs["dropout"], "dev"))
    encoder = SubwordTextEncoder(str(dirs["dropout"] / vocab))
    pairs = collections.Counter(zip(_lines(src["train_src"]), _lines(src["train_tgt"])))
    decoded = _decoded_split(str(dirs["dropout"]), "translate_files", "train", encoder)
    assert decoded == collections.Counter({p: 3 * n for p, n in pairs.items()})
    plain = set(_records(dirs["plain"], "train"))
    resegmented = _records(dirs["dropout"], "train")
    assert len(resegmented) == 180
    assert sum(r not in plain for r in resegmented) > 90
    # Same settings, same data: each pass draws from its own seeded generator.
    t2t_datagen.main(_flags(problem="translate_files", data_dir=str(tmp_path / "again"),
                            tmp_dir=str(tmp_path / "tmp"), approx_vocab_size=300, **src,
                            subword_dropout=0.2, subword_dropout_copies=3))
    assert sorted(_records(tmp_path / "again", "train")) == sorted(resegmented)


def test_bad_settings_are_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match=r"--subword_dropout=1.5: must be in \[0, 1\)"):
        translate_files.TranslateFiles().set_subword_dropout(1.5, 2)
    with pytest.raises(ValueError, match="--subword_dropout_copies=0"):
        translate_files.TranslateFiles().set_subword_dropout(0.1, 0)
    with pytest.raises(ValueError, match="needs --subword_dropout > 0"):
        datagen.configure_problem("translate_files", subword_dropout_copies=4)
    with pytest.raises(ValueError, match="does not apply to algorithmic_identity_binary40"):
        datagen.configure_problem("algorithmic_identity_binary40", subword_dropout=0.1)
    assert algorithmic  # registers the algorithmic problems
    assert os.listdir(tmp_path) == []
