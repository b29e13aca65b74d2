"""Datagen for big corpora: cleaning filters counted, gzip/xz inputs, N-worker shards.

Library-level tests on hand-made corpora (tiny vocabs), one run.py check before TensorFlow.
"""
import collections
import gzip
import json
import lzma
import subprocess
import sys

import pytest

from t2t_lite.data_generators import corpus_filters, corpus_io
from t2t_lite.errors import UserError
from tests.conftest import REPO_ROOT, error_line

# (source, target, the filter that drops it or None) with every filter on
# (min 2 tokens, max 6, ratio 2, copies, duplicates, languages en,ru).
HAND_MADE = [
    ("the cat sat", "кошка сидела там", None),
    ("   ", "пусто", "empty"),                              # whitespace only source
    ("a dog", "", "empty"),
    ("hi", "привет мир", "too_short"),
    ("one two three four five six seven", "раз два", "too_long"),
    ("one two three four five", "раз два", "length_ratio"),
    ("same text here", "same text here", "copy"),
    ("the cat sat", "the cat sat too", "wrong_script"),     # target is not Cyrillic
    ("кошка сидит тут", "кошка сидит тут ещё", "wrong_script"),  # source is not Latin
    ("the cat sat", "кошка сидела там", "duplicate"),
    ("42 , 17 .", "42 , 17 .", "copy"),
    ("cats : 42 !", "кошки : 42 !", None),
    ("a sentence with Москва", "предложение с Москвой", None),  # 1 of 5 words: still Latin
]


def _settings():
    return corpus_filters.parse_settings(min_length=2, max_length=6, length_ratio=2.0,
                                         copies=True, duplicates=True, languages="en,ru")


def test_each_filter_counts_its_own_bad_lines():
    counts = collections.Counter()
    pairs = [(s.strip(), t.strip()) for s, t, _ in HAND_MADE]
    kept = list(corpus_filters.filter_pairs(pairs, _settings(), counts))
    assert kept == [(s.strip(), t.strip()) for s, t, why in HAND_MADE if why is None]
    expected = collections.Counter(why for _, _, why in HAND_MADE if why)
    assert {r: counts[r] for r in corpus_filters.DROP_REASONS} == {
        r: expected[r] for r in corpus_filters.DROP_REASONS}
    assert counts["read"] == len(HAND_MADE) and counts["kept"] == 3
    line = corpus_filters.summary_line("p", counts)
    assert line == ("[datagen] p: filters kept 3 of 13 training pairs; dropped: empty 2, "
                    "too_short 1, too_long 1, length_ratio 1, copy 2, wrong_script 2, "
                    "duplicate 1")


def test_default_settings_drop_only_empty_pairs():
    counts = collections.Counter()
    pairs = [(s.strip(), t.strip()) for s, t, _ in HAND_MADE]
    kept = list(corpus_filters.filter_pairs(pairs, corpus_filters.parse_settings(), counts))
    assert len(kept) == len(HAND_MADE) - 2 and counts["empty"] == 2
    assert not corpus_filters.parse_settings().active


@pytest.mark.parametrize("kwargs, flag", [
    ({"max_length": -1}, "--filter_max_length=-1"),
    ({"min_length": 9, "max_length": 3}, "--filter_min_length=9"),
    ({"length_ratio": 0.5}, "--filter_length_ratio=0.5"),
    ({"languages": "en"}, "--filter_languages=en"),
    ({"languages": "en,xx"}, "no script known for xx"),
])
def test_bad_filter_values_are_one_line_naming_the_flag(kwargs, flag):
    with pytest.raises(UserError, match=flag) as error:
        corpus_filters.parse_settings(**kwargs)
    assert "\n" not in str(error.value)


def test_script_heuristic():
    assert corpus_filters.script_matches("Grüße aus Köln", ("LATIN",))
    assert not corpus_filters.script_matches("Привет, мир", ("LATIN",))
    assert corpus_filters.script_matches("東京は大きい", ("CJK", "HIRAGANA", "KATAKANA"))
    assert corpus_filters.script_matches("2024 - 17 %", ("GREEK",))  # no letters: kept


def _write_compressed(tmp_path, name, text):
    plain = tmp_path / name
    plain.write_bytes(text)
    (tmp_path / (name + ".gz")).write_bytes(gzip.compress(text))
    (tmp_path / (name + ".xz")).write_bytes(lzma.compress(text))
    return [str(tmp_path / (name + suffix)) for suffix in ("", ".gz", ".xz")]


def test_gzip_and_xz_inputs_read_like_plain_ones(tmp_path):
    from t2t_lite.data_generators import data_marker, generator_utils, text_problems

    text = "".join(f"line {i} ünïcode\n" for i in range(3000)).encode() + b"last, no newline"
    plain, gz, xz = _write_compressed(tmp_path, "a.txt", text)
    assert [corpus_io.compression(p) for p in (plain, gz, xz)] == [None, "gzip", "xz"]
    lines = list(text_problems.txt_line_iterator(plain))
    for path in (gz, xz):
        assert list(text_problems.txt_line_iterator(path)) == lines
        assert text_problems.count_lines(path) == 3001 == len(lines)
        assert corpus_io.text_size(path) == len(text)
        assert data_marker.fingerprint([path])["lines"] == 3001
        # t2t's vocab sample spaces lines by the text's size: the same lines as from plain.
        assert (list(generator_utils.generate_lines_for_vocab("", [path], 2000))
                == list(generator_utils.generate_lines_for_vocab("", [plain], 2000)))
    bad = tmp_path / "bad.gz"
    bad.write_bytes(gzip.compress(b"ok\n\xff\n"))
    with pytest.raises(text_problems.CorpusError, match=r"bad\.gz:2: not valid UTF-8"):
        list(text_problems.txt_line_iterator(str(bad)))


def _corpus(tmp_path):
    """A small parallel corpus with bad lines of each kind; (src files, tgt files)."""
    src, tgt = [], []
    for i in range(400):
        src.append(f"the {i % 37} cats sat on mat number {i}")
        tgt.append(f"die {i % 37} Katzen sassen auf Matte Nummer {i}")
    src[5], tgt[7] = "  ", ""                       # empty pairs
    src[9] = tgt[9] = "copy copy copy"              # a copy
    src[11], tgt[11] = src[10], tgt[10]             # a duplicate
    src[13] = "one two three four five six seven eight nine ten eleven twelve"  # too long
    tgt[15] = "Это не немецкий текст вовсе"         # wrong script
    join = "\n".join
    return (_write_compressed(tmp_path, "train.en", (join(src) + "\n").encode()),
            _write_compressed(tmp_path, "train.de", (join(tgt) + "\n").encode()))


def _datagen(tmp_path, name, src, tgt, dev_src, dev_tgt, workers, filters):
    from t2t_lite.data_generators import datagen

    problem = datagen.configure_problem(
        "translate_files", approx_vocab_size=300,
        source_files={"train_src": src, "train_tgt": tgt, "dev_src": dev_src,
                      "dev_tgt": dev_tgt},
        filters=filters, num_workers=workers)
    data_dir, tmp_dir = tmp_path / name, tmp_path / (name + "_tmp")
    datagen.generate_locked(problem, str(data_dir), str(tmp_dir))
    shards = {p.name: p.read_bytes() for p in sorted(data_dir.iterdir())}
    return problem, shards


@pytest.mark.slow
def test_workers_and_compressed_inputs_give_byte_identical_shards(tmp_path):
    (src, src_gz, src_xz), (tgt, tgt_gz, tgt_xz) = _corpus(tmp_path)
    filters = corpus_filters.parse_settings(max_length=10, duplicates=True, copies=True,
                                            languages="en,de")
    one, shards = _datagen(tmp_path, "w1", src, tgt, src, tgt, 1, filters)
    assert len([n for n in shards if "-train-" in n]) == 4
    assert dict(one.filter_counts) == {"read": 400, "kept": 394, "empty": 2, "copy": 1,
                                       "duplicate": 1, "too_long": 1, "wrong_script": 1}
    two, shards_2 = _datagen(tmp_path, "w3", src_gz, tgt_xz, src_xz, tgt_gz, 3, filters)
    assert two.datagen_stats["train"]["workers"] == 3
    assert shards_2.keys() == shards.keys()
    for name in shards:
        if not name.endswith(".json"):  # markers name the input files
            assert shards_2[name] == shards[name], name
    assert two.datagen_stats["train"]["examples"] == 394


def test_fast_writer_matches_generate_files(tmp_path):
    from t2t_lite.data_generators import generator_utils, parallel_datagen, text_encoder
    from t2t_lite.data_generators.text_problems import text2text_generate_encoded

    encoder = text_encoder.ByteTextEncoder()
    samples = [{"inputs": f"x{i}" * (i % 7 + 1), "targets": "ÿ" * (i % 5 + 1)} for i in range(50)]
    old = [str(tmp_path / f"old-{s}") for s in range(4)]
    generator_utils.generate_files(
        text2text_generate_encoded([dict(s) for s in samples], encoder), old, max_cases=45)
    for workers in (1, 3):
        new = [str(tmp_path / f"new{workers}-{s}") for s in range(4)]
        count = parallel_datagen.write_split(lambda: iter(samples), encoder, True, new,
                                             max_cases=45, workers=workers)
        assert count == 45
        for a, b in zip(old, new):
            with open(a, "rb") as fa, open(b, "rb") as fb:
                assert fa.read() == fb.read()


def test_run_py_refuses_bad_datagen_flags_before_tensorflow(tmp_path):
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "run.py"), "--mode=datagen",
         "--problem=translate_files", f"--data_dir={tmp_path / 'd'}",
         "--filter_length_ratio=0.5"],
        check=False, capture_output=True, text=True, timeout=120)
    assert "--filter_length_ratio=0.5" in error_line(result)
    assert not (tmp_path / "d").exists()


def test_report_entry_and_line(tmp_path):
    from t2t_lite.data_generators import datagen_report

    entry = {"workers": 2, "filters": None, "splits": {"train": {
        "prepare_s": 0.0, "vocab_s": 1.5, "encode_s": 4.0, "examples": 1000, "workers": 2}},
        "training_pairs": {"read": 1010, "kept": 1000,
                           "dropped": {"empty": 4, "duplicate": 6, "copy": 0}},
        "total_s": 6.0}
    line = datagen_report.write(str(tmp_path), "p", entry)
    assert line == (f"[datagen] p: {tmp_path}/datagen_report.json: kept 1000 of 1010 "
                    "training pairs (dropped: empty 4, duplicate 6); train: vocab 1.5s, "
                    "encoding 4.0s with 2 worker(s) (250 examples/s)")
    datagen_report.write(str(tmp_path), "q", entry)
    assert sorted(json.loads((tmp_path / "datagen_report.json").read_text())) == ["p", "q"]
