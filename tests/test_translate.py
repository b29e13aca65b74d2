"""Translation problems: toy WMT round trips, t2t's source layouts, TFDS (mocked), errors."""
import collections
import filecmp
import gzip
import io
import os
import random
import shutil
import tarfile
import types
from unittest import mock

import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from t2t_lite import registry
from t2t_lite.bin import t2t_datagen
from t2t_lite.data_generators import generator_utils, problem, text_encoder, translate
from t2t_lite.data_generators.text_problems import CorpusError
from t2t_lite.problems import translate_ende, translate_enfr, translate_files

FIXTURE_VOCAB = "vocab.translate_toy_ende1k.1024.subwords"


def _lines(path, start=0, stop=None):
    with open(path, encoding="utf-8") as f:
        return [line.strip() for line in f][start:stop]


def _write(path, lines):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))


def _decoded_split(data_dir, name, split, encoder):
    pairs = []
    for fname in sorted(os.listdir(data_dir)):
        if fname.startswith(f"{name}-{split}-"):
            for record in generator_utils.read_records(os.path.join(data_dir, fname)):
                feats = tf.train.Example.FromString(record).features.feature
                inputs = list(feats["inputs"].int64_list.value)
                targets = list(feats["targets"].int64_list.value)
                assert inputs[-1] == targets[-1] == text_encoder.EOS_ID
                pairs.append((encoder.decode(inputs[:-1]), encoder.decode(targets[:-1])))
    return collections.Counter(pairs)


def _flags(**kw):
    defaults = types.SimpleNamespace(
        problem=None, data_dir=None, tmp_dir=None, random_seed=None, max_cases=0,
        exclude_problems="", only_list=False, num_shards=0, approx_vocab_size=0,
        train_src=None, train_tgt=None, dev_src=None, dev_tgt=None, tfds_data_dir=None)
    return types.SimpleNamespace(**{**vars(defaults), **kw})


def test_ende_problem_defaults_are_t2t():
    prob = registry.problem("translate_ende_wmt32k")
    assert prob.approx_vocab_size == 2**15
    assert prob.vocab_filename == "vocab.translate_ende_wmt32k.32768.subwords"
    assert [s["shards"] for s in prob.dataset_splits] == [100, 1]
    assert registry.problem("translate_ende_wmt8k").vocab_filename == (
        "vocab.translate_ende_wmt8k.8192.subwords")
    assert prob.tfds_name == "wmt_t2t_translate/de-en"
    train = prob.source_data_files(problem.DatasetSplit.TRAIN)
    assert [os.path.basename(url) for url, _ in train] == [
        "training-parallel-nc-v13.tgz", "training-parallel-commoncrawl.tgz",
        "training-parallel-europarl-v7.tgz"]
    assert prob.source_data_files(problem.DatasetSplit.EVAL)[0][1] == (
        "dev/newstest2013.en", "dev/newstest2013.de")
    bpe = registry.problem("translate_ende_wmt_bpe32k")
    assert bpe.vocab_filename == "vocab.translate_ende_wmt_bpe32k.tokens"


def test_enfr_problem_defaults_are_t2t():
    sizes = {"translate_enfr_wmt32k": 2**15, "translate_enfr_wmt8k": 2**13,
             "translate_enfr_wmt_small32k": 2**15, "translate_enfr_wmt_small8k": 2**13}
    for name, size in sizes.items():
        prob = registry.problem(name)
        assert prob.approx_vocab_size == size
        small = "small" in name
        assert prob.tfds_name == (None if small else "wmt14_translate/fr-en")
        files = prob.source_data_files(problem.DatasetSplit.TRAIN)
        assert len(files) == (1 if small else 5)
    big = registry.problem("translate_enfr_wmt32k").source_data_files(problem.DatasetSplit.TRAIN)
    assert big[3][1] == ("giga-fren.release2.fixed.en.gz", "giga-fren.release2.fixed.fr.gz")


def test_ende_wmt32k_on_toy_compiled_files_round_trips(wmt_toy_dir, t2t_fixtures, tmp_path):
    tmp_dir, data_dir = tmp_path / "tmp", tmp_path / "data"
    for split, src in (("train", "train"), ("dev", "dev")):
        for ext, lang in (("lang1", "en"), ("lang2", "de")):
            os.makedirs(tmp_dir, exist_ok=True)
            shutil.copy(wmt_toy_dir / f"{src}.{lang}",
                        tmp_dir / f"translate_ende_wmt32k-compiled-{split}.{ext}")
    # The vocab-size override keeps the test fast; the fixture is t2t's 1k vocab of this corpus.
    os.makedirs(data_dir)
    shutil.copy(t2t_fixtures / FIXTURE_VOCAB, data_dir / "vocab.translate_ende_wmt32k.1024.subwords")
    prob = translate_ende.TranslateEndeWmt32k(approx_vocab_size=1024)
    random.seed(429459)
    prob.generate_data(str(data_dir), str(tmp_dir))
    files = os.listdir(data_dir)
    assert len([f for f in files if "-train-" in f]) == 100
    assert "translate_ende_wmt32k-dev-00000-of-00001" in files
    assert not [f for f in files if "unshuffled" in f or "incomplete" in f]
    encoder = prob.feature_encoders(str(data_dir))["inputs"]
    for split, src in (("train", "train"), ("dev", "dev")):
        expected = collections.Counter(
            zip(_lines(wmt_toy_dir / f"{src}.en"), _lines(wmt_toy_dir / f"{src}.de")))
        assert _decoded_split(str(data_dir), "translate_ende_wmt32k", split, encoder) == expected


def _tgz(path, members):
    """Writes a .tgz (or .tar) holding {name: lines}."""
    mode = "w:gz" if str(path).endswith(("gz", "tgz")) else "w"
    with tarfile.open(path, mode) as tar:
        for name, content in members.items():
            data = content if isinstance(content, bytes) else "".join(
                line + "\n" for line in content).encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_ende_from_t2t_raw_archives_compiles_like_t2t(wmt_toy_dir, tmp_path):
    tmp_dir, data_dir = tmp_path / "tmp", tmp_path / "data"
    os.makedirs(tmp_dir)
    en, de = _lines(wmt_toy_dir / "train.en"), _lines(wmt_toy_dir / "train.de")
    chunks = [(0, 100), (100, 200), (200, 300)]
    corpora = translate_ende._ENDE_TRAIN_DATASETS
    for (url, (f_en, f_de)), (a, b) in zip(corpora, chunks):
        src, tgt = en[a:b], de[a:b]
        if a == 0:  # whitespace is stripped; pairs with an empty side are dropped
            src[1], tgt[2], src[3] = "  " + src[1] + " ", "", "   "
        _tgz(tmp_dir / os.path.basename(url), {f_en: src, f_de: tgt})
    _tgz(tmp_dir / "dev.tgz", {"dev/newstest2013.en": _lines(wmt_toy_dir / "dev.en", 0, 30),
                               "dev/newstest2013.de": _lines(wmt_toy_dir / "dev.de", 0, 30)})
    prob = translate_ende.TranslateEndeWmt32k(approx_vocab_size=2**8)
    # t2t's vocab text comes from the raw corpus files (all of these small ones).
    vocab_lines = list(prob.generate_text_for_vocab(str(data_dir), str(tmp_dir)))
    assert vocab_lines[:4] == [en[0], en[1], en[2], ""]
    assert len(vocab_lines) == 600 and vocab_lines[100] == de[0]
    prob.generate_data(str(data_dir), str(tmp_dir))
    kept = [i for i in range(300) if i not in (2, 3)]
    compiled = tmp_dir / "translate_ende_wmt32k-compiled-train"
    assert _lines(f"{compiled}.lang1") == [en[i] for i in kept]
    assert _lines(f"{compiled}.lang2") == [de[i] for i in kept]
    encoder = prob.feature_encoders(str(data_dir))["targets"]
    got = _decoded_split(str(data_dir), "translate_ende_wmt32k", "train", encoder)
    assert got == collections.Counter((en[i], de[i]) for i in kept)
    assert sum(_decoded_split(str(data_dir), "translate_ende_wmt32k", "dev", encoder).values()) == 30


def test_raw_corpus_files_reads_giga_fren_compressed_and_reports_absence(tmp_path):
    entry = translate_enfr._ENFR_TRAIN_LARGE_DATA[3]
    assert translate.raw_corpus_files(str(tmp_path), [entry]) is None
    _tgz(tmp_path / "training-giga-fren.tar", {
        "giga-fren.release2.fixed.en.gz": gzip.compress(b"Hello .\n"),
        "giga-fren.release2.fixed.fr.gz": gzip.compress(b"Bonjour .\n")})
    (pair,) = translate.raw_corpus_files(str(tmp_path), [entry])
    # Read as they are (t2t gunzipped a copy next to each): no copy is made.
    assert pair == (str(tmp_path / "giga-fren.release2.fixed.en.gz"),
                    str(tmp_path / "giga-fren.release2.fixed.fr.gz"))
    assert not (tmp_path / "giga-fren.release2.fixed.fr").exists()
    assert list(translate.cleaned_pairs(*pair)) == [("Hello .", "Bonjour .")]
    # A copy gunzipped by an earlier t2t run is read when the .gz is gone.
    (tmp_path / "giga-fren.release2.fixed.en").write_text("Hi .\n")
    (tmp_path / "giga-fren.release2.fixed.en.gz").unlink()
    (pair,) = translate.raw_corpus_files(str(tmp_path), [entry])
    assert pair[0] == str(tmp_path / "giga-fren.release2.fixed.en")


def test_sgm_files_are_stripped_like_t2t(tmp_path):
    def sgm(lines):
        return ['<srcset setid="newstest2013" srclang="any">', '<doc sysid="ref" docid="1">',
                "<p>"] + [f'<seg id="{i + 1}">{s}</seg>' for i, s in enumerate(lines)] + [
                "</p>", "</doc>", "</srcset>"]

    _write(str(tmp_path / "dev.en.sgm"), sgm(["Hello world .", " spaced ", "x"]))
    _write(str(tmp_path / "dev.de.sgm"), sgm(["Hallo Welt .", "geraeumig", ""]))
    pairs = list(translate.cleaned_pairs(str(tmp_path / "dev.en.sgm"),
                                         str(tmp_path / "dev.de.sgm")))
    assert pairs == [("Hello world .", "Hallo Welt ."), ("spaced", "geraeumig")]


def test_datagen_flags_on_toy_files_give_t2t_vocab(wmt_toy_dir, t2t_fixtures, tmp_path):
    data_dir = tmp_path / "data"
    flags = _flags(problem="translate_ende_wmt32k", data_dir=str(data_dir),
                   tmp_dir=str(tmp_path / "tmp"), approx_vocab_size=1024, max_cases=50,
                   train_src=str(wmt_toy_dir / "train.en"), train_tgt=str(wmt_toy_dir / "train.de"),
                   dev_src=str(wmt_toy_dir / "dev.en"), dev_tgt=str(wmt_toy_dir / "dev.de"))
    t2t_datagen.main(flags)
    # The toy files fit t2t's vocab byte budget, so every line counts: t2t's vocab exactly.
    assert filecmp.cmp(data_dir / "vocab.translate_ende_wmt32k.1024.subwords",
                       t2t_fixtures / FIXTURE_VOCAB, shallow=False)
    # Training finds the vocab of the non-default size.
    prob = registry.problem("translate_ende_wmt32k")
    assert prob.get_hparams(data_dir=str(data_dir)).vocab_size["inputs"] == 1018


def test_translate_files_from_flags_with_sgm_dev(wmt_toy_dir, tmp_path):
    data_dir = tmp_path / "data"
    _write(str(tmp_path / "dev.en.sgm"), ["<p>"] + [
        f'<seg id="{i}">{s}</seg>' for i, s in enumerate(_lines(wmt_toy_dir / "dev.en", 0, 20))])
    _write(str(tmp_path / "dev.de.sgm"), ["<p>"] + [
        f'<seg id="{i}">{s}</seg>' for i, s in enumerate(_lines(wmt_toy_dir / "dev.de", 0, 20))])
    _write(str(tmp_path / "train.en"), _lines(wmt_toy_dir / "train.en", 0, 200))
    _write(str(tmp_path / "train.de"), _lines(wmt_toy_dir / "train.de", 0, 200))
    t2t_datagen.main(_flags(
        problem="translate_files", data_dir=str(data_dir), tmp_dir=str(tmp_path / "tmp"),
        approx_vocab_size=300, train_src=str(tmp_path / "train.en"),
        train_tgt=str(tmp_path / "train.de"), dev_src=str(tmp_path / "dev.en.sgm"),
        dev_tgt=str(tmp_path / "dev.de.sgm")))
    assert os.path.exists(data_dir / "vocab.translate_files.300.subwords")
    prob = registry.problem("translate_files")
    encoder = prob.feature_encoders(str(data_dir))["inputs"]
    dev = _decoded_split(str(data_dir), "translate_files", "dev", encoder)
    assert dev == collections.Counter(zip(_lines(wmt_toy_dir / "dev.en", 0, 20),
                                          _lines(wmt_toy_dir / "dev.de", 0, 20)))
    hp = create_small_hparams()
    batches = list(prob.dataset(problem.ModeKeys.EVAL, str(data_dir), hp))
    assert sum(int(b["inputs"].shape[0]) for b in batches) == 20


def create_small_hparams():
    from t2t_lite.hparams_lib import create_hparams

    hp = create_hparams("transformer_tiny")
    hp.batch_size = 1024
    return hp


def test_translate_files_needs_its_files(tmp_path):
    with pytest.raises(CorpusError, match=r"no --train_src/--train_tgt files given"):
        translate_files.TranslateFiles().generate_data(str(tmp_path / "d"), str(tmp_path))
    with pytest.raises(ValueError, match="give both files"):
        translate_files.TranslateFiles().set_source_files(train_src=__file__)
    with pytest.raises(CorpusError, match=r"nope\.en: no such file \(from --dev_src/--dev_tgt\)"):
        translate_files.TranslateFiles().set_source_files(dev_src="nope.en", dev_tgt=__file__)
    assert os.listdir(tmp_path / "d") == []


def test_no_source_error_lists_what_was_looked_for(tmp_path):
    prob = registry.problem("translate_enfr_wmt_small32k")
    with pytest.raises(CorpusError) as err:
        prob.generate_data(str(tmp_path / "data"), str(tmp_path))
    message = str(err.value)
    assert "translate_enfr_wmt_small32k-compiled-train.lang1/.lang2" in message
    assert "baseline-1M-enfr.tgz or baseline-1M-enfr/baseline-1M_train.en" in message
    assert os.listdir(tmp_path / "data") == []


def _toy_tfds(toy_dir):
    """A mocked `_as_dataset` serving the toy corpus as TFDS WMT examples."""
    calls = []

    def as_dataset(self, split, decoders=None, read_config=None, shuffle_files=False):
        calls.append((self.name, self.builder_config.name, str(split)))
        src = "train" if str(split) == "train" else "dev"
        n = 200 if src == "train" else 25
        return tf.data.Dataset.from_tensor_slices({
            "en": _lines(toy_dir / f"{src}.en", 0, n) + [""],
            "de": _lines(toy_dir / f"{src}.de", 0, n) + ["leer"],
        })

    return as_dataset, calls


def test_tfds_fallback_writes_compiled_files(wmt_toy_dir, tmp_path):
    tmp_dir, data_dir = tmp_path / "tmp", tmp_path / "data"
    os.makedirs(tmp_dir)
    as_dataset, calls = _toy_tfds(wmt_toy_dir)
    prob = translate_ende.TranslateEndeWmt32k(approx_vocab_size=2**8)
    with tfds.testing.mock_data(as_dataset_fn=as_dataset):
        prob.generate_data(str(data_dir), str(tmp_dir))
    assert calls == [("wmt_t2t_translate", "de-en", "train"),
                     ("wmt_t2t_translate", "de-en", "validation")]
    base = tmp_dir / "translate_ende_wmt32k-compiled-train"
    assert _lines(f"{base}.lang1") == _lines(wmt_toy_dir / "train.en", 0, 200)  # "" pair dropped
    assert _lines(f"{base}.lang2") == _lines(wmt_toy_dir / "train.de", 0, 200)
    encoder = prob.feature_encoders(str(data_dir))["inputs"]
    dev = _decoded_split(str(data_dir), "translate_ende_wmt32k", "dev", encoder)
    assert dev == collections.Counter(zip(_lines(wmt_toy_dir / "dev.en", 0, 25),
                                          _lines(wmt_toy_dir / "dev.de", 0, 25)))


def test_tfds_fallback_with_tfds_random_mock_for_enfr(tmp_path):
    prob = translate_enfr.TranslateEnfrWmt32k(approx_vocab_size=2**7)
    with tfds.testing.mock_data(num_examples=30):
        prob.generate_data(str(tmp_path / "data"), str(tmp_path))
    assert len(_lines(tmp_path / "translate_enfr_wmt32k-compiled-train.lang2")) == 30
    assert len(os.listdir(tmp_path / "data")) == 102


def test_tfds_download_failure_is_a_clear_error(tmp_path):
    prob = registry.problem("translate_ende_wmt32k")
    failing = mock.patch.object(tfds.core.DatasetBuilder, "download_and_prepare",
                                side_effect=ConnectionError("network is unreachable"))
    with failing, pytest.raises(CorpusError) as err:
        prob.generate_data(str(tmp_path / "data"), str(tmp_path))
    message = str(err.value)
    assert "wmt_t2t_translate/de-en" in message and "network is unreachable" in message
    assert "training-parallel-nc-v13.tgz" in message and "--train_src" in message
    assert sorted(os.listdir(tmp_path)) == ["data"] and os.listdir(tmp_path / "data") == []


def test_bpe32k_token_vocab_from_google_archive(tmp_path):
    tmp_dir, data_dir = tmp_path / "tmp", tmp_path / "data"
    os.makedirs(tmp_dir)
    tokens = ["the", "hou@@", "se", "is", "red", ".", "das", "Haus", "ist", "rot"]
    _tgz(tmp_dir / "wmt16_en_de.tar.gz", {
        "train.tok.clean.bpe.32000.en": ["the hou@@ se is red ."] * 3,
        "train.tok.clean.bpe.32000.de": ["das Haus ist rot ."] * 3,
        "newstest2013.tok.bpe.32000.en": ["the red hou@@ se ."],
        "newstest2013.tok.bpe.32000.de": ["das rote Haus ."],
        "vocab.bpe.32000": tokens,
    })
    prob = registry.problem("translate_ende_wmt_bpe32k")
    prob.generate_data(str(data_dir), str(tmp_dir))
    assert _lines(data_dir / "vocab.translate_ende_wmt_bpe32k.tokens") == (
        ["<pad>", "<EOS>"] + tokens + ["UNK"])
    encoder = prob.feature_encoders(str(data_dir))["targets"]
    assert encoder.encode("das rote Haus .") == [8, 12, 9, 7]  # "rote" is out of vocab: UNK = 12
    dev = _decoded_split(str(data_dir), "translate_ende_wmt_bpe32k", "dev", encoder)
    assert dev == collections.Counter({("the red hou@@ se .", "das UNK Haus ."): 1})


def test_bad_raw_corpus_leaves_no_compiled_file_and_no_shard(wmt_toy_dir, tmp_path):
    tmp_dir, data_dir = tmp_path / "tmp", tmp_path / "data"
    os.makedirs(tmp_dir)
    en, de = _lines(wmt_toy_dir / "train.en", 0, 50), _lines(wmt_toy_dir / "train.de", 0, 50)
    corpora = translate_ende._ENDE_TRAIN_DATASETS
    for i, (url, (f_en, f_de)) in enumerate(corpora):
        _tgz(tmp_dir / os.path.basename(url), {f_en: en, f_de: de[:-1] if i == 1 else de})
    _tgz(tmp_dir / "dev.tgz", {"dev/newstest2013.en": en[:5], "dev/newstest2013.de": de[:5]})
    prob = translate_ende.TranslateEndeWmt32k(approx_vocab_size=2**7)
    with pytest.raises(CorpusError, match=r"commoncrawl\.de-en\.de has 49 lines but .*"
                                          r"commoncrawl\.de-en\.en continues at line 50"):
        prob.generate_data(str(data_dir), str(tmp_dir))
    assert not [f for f in os.listdir(tmp_dir) if "compiled" in f]
    assert os.listdir(data_dir) == []


def test_non_utf8_user_file_is_named_with_its_line(wmt_toy_dir, tmp_path):
    data_dir = tmp_path / "data"
    _write(str(tmp_path / "train.en"), _lines(wmt_toy_dir / "train.en", 0, 100))
    lines = [line.encode("utf-8") for line in _lines(wmt_toy_dir / "train.de", 0, 100)]
    lines[41] = b"Stra\xdfe"  # latin-1
    (tmp_path / "train.de").write_bytes(b"\n".join(lines) + b"\n")
    prob = translate_files.TranslateFiles(approx_vocab_size=2**7)
    prob.set_source_files(str(tmp_path / "train.en"), str(tmp_path / "train.de"),
                          str(tmp_path / "train.en"), str(tmp_path / "train.en"))
    with pytest.raises(CorpusError, match=r"train\.de:42: not valid UTF-8 \(byte 0xdf at column 5\)"):
        prob.generate_data(str(data_dir), str(tmp_path))
    assert os.listdir(data_dir) == []


@pytest.mark.slow
def test_new_raw_archives_are_refused_then_overwrite_data_compiles_them_again(wmt_toy_dir,
                                                                              tmp_path):
    from t2t_lite.data_generators import datagen
    from t2t_lite.errors import UserError

    tmp_dir, data_dir = tmp_path / "tmp", tmp_path / "data"
    os.makedirs(tmp_dir)
    en, de = _lines(wmt_toy_dir / "train.en"), _lines(wmt_toy_dir / "train.de")

    def archives(start):
        for i, (url, (f_en, f_de)) in enumerate(translate_ende._ENDE_TRAIN_DATASETS):
            rows = slice(start + 20 * i, start + 20 * (i + 1))
            _tgz(tmp_dir / os.path.basename(url), {f_en: en[rows], f_de: de[rows]})
        _tgz(tmp_dir / "dev.tgz", {"dev/newstest2013.en": en[200:210],
                                   "dev/newstest2013.de": de[200:210]})

    def generate(**kwargs):
        prob = translate_ende.TranslateEndeWmt32k(approx_vocab_size=2**7)
        return datagen.generate_locked(prob, str(data_dir), str(tmp_dir), **kwargs)

    archives(0)
    assert generate()["train"]
    compiled = tmp_dir / "translate_ende_wmt32k-compiled-train.lang1"
    assert _lines(compiled)[0] == en[0]
    archives(100)  # new corpora; the compiled files of the old ones are still in tmp_dir
    with pytest.raises(UserError, match=r"made from other inputs: .*tmp_dir/training-parallel"
                                        r"-commoncrawl\.tgz \S+ changed \(sha256 "):
        generate()
    assert generate(overwrite=True)["train"]
    assert _lines(compiled)[0] == en[100]  # compiled again from the new archives
    assert generate() is None  # complete, made from these inputs
