"""Vocabulary building: t2t's exact output (fixture file), sizes, determinism, a differential
check against a plain transcription of t2t's algorithm, and the generator_utils helpers."""
import gzip
import hashlib
import io
import logging
import os
import pathlib
import subprocess
import sys
import tarfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from t2t_lite.data_generators import generator_utils, text_encoder
from t2t_lite.data_generators.text_encoder import SubwordTextEncoder
from tests.conftest import load_script

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
VOCAB_NAME = "vocab.translate_toy_ende1k.1024.subwords"
# sha256 of the 2**13 vocab file that the plain transcription of t2t's algorithm
# (bench/bench_text_encoder.py, which reproduces the 2**10 t2t fixture byte for byte) writes
# for the same corpus: 8085 subtokens.
SHA256_8K = "87f9afc99ecbf240be56ba8269dedc4e44b10fdce824b0e3514fdfa1faec93b1"


def _load_plain():
    return load_script(REPO_ROOT / "bench" / "bench_text_encoder.py", "bench_text_encoder")


@pytest.fixture(scope="module")
def plain():
    """The plain transcription of t2t's algorithm kept in the benchmark script."""
    return _load_plain()


def translate_lines(wmt_toy_dir):
    """What a translate problem feeds its vocab generator: each pair's .en line then .de line."""
    with open(wmt_toy_dir / "train.en", encoding="utf-8") as en, open(
        wmt_toy_dir / "train.de", encoding="utf-8"
    ) as de:
        for source, target in zip(en, de):
            yield source.strip()
            yield target.strip()


def test_build_reproduces_t2t_fixture_vocab(wmt_toy_dir, t2t_fixtures, tmp_path):
    # Text2TextProblem.get_or_create_vocab: approx_vocab_size 2**10, max_subtoken_length 200,
    # reserved tokens RESERVED_TOKENS.
    data_dir = tmp_path / "data"
    vocab = generator_utils.get_or_generate_vocab_inner(
        str(data_dir), VOCAB_NAME, 2**10, translate_lines(wmt_toy_dir),
        max_subtoken_length=200, reserved_tokens=text_encoder.RESERVED_TOKENS,
    )
    assert vocab.vocab_size == 1018
    written = (data_dir / VOCAB_NAME).read_bytes()
    assert written == (t2t_fixtures / VOCAB_NAME).read_bytes()
    assert os.listdir(data_dir) == [VOCAB_NAME]  # no temporary file left behind


@pytest.mark.slow
def test_build_8k_size_and_output(wmt_toy_dir, tmp_path):
    vocab = SubwordTextEncoder.build_from_generator(
        translate_lines(wmt_toy_dir), 2**13, max_subtoken_length=200
    )
    # t2t's bisection ends at min_count 20 with the size closest to 8192 among its probes.
    assert vocab.vocab_size == 8085
    assert abs(vocab.vocab_size - 2**13) < 0.02 * 2**13
    path = tmp_path / "vocab8k"
    vocab.store_to_file(str(path))
    assert hashlib.sha256(path.read_bytes()).hexdigest() == SHA256_8K


@pytest.mark.slow
def test_build_does_not_depend_on_hash_seed(wmt_toy_dir, t2t_fixtures, tmp_path):
    # t2t iterates sets of strings; the result must not depend on PYTHONHASHSEED.
    out = tmp_path / "vocab"
    script = (
        "import sys\n"
        "from t2t_lite.data_generators.text_encoder import SubwordTextEncoder\n"
        "def lines():\n"
        "    with open(sys.argv[1] + '/train.en', encoding='utf-8') as en, "
        "open(sys.argv[1] + '/train.de', encoding='utf-8') as de:\n"
        "        for a, b in zip(en, de):\n"
        "            yield a.strip()\n"
        "            yield b.strip()\n"
        "SubwordTextEncoder.build_from_generator(lines(), 1024, 200).store_to_file(sys.argv[2])\n"
    )
    env = dict(os.environ, PYTHONHASHSEED="12345", PYTHONPATH=str(REPO_ROOT))
    subprocess.run([sys.executable, "-c", script, str(wmt_toy_dir), str(out)], check=True,
                   env=env, cwd=tmp_path)
    assert out.read_bytes() == (t2t_fixtures / VOCAB_NAME).read_bytes()


TOKEN = st.text(
    st.sampled_from(list("aab_\\u;09 \n\té☃😀") + ["\U0010ffff"]), min_size=1, max_size=12
)


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(
    token_counts=st.dictionaries(TOKEN, st.integers(1, 6), max_size=25),
    min_count=st.sampled_from([1, 2, 3, 5, 0]),
    max_subtoken_length=st.sampled_from([None, 1, 2, 3, 4, 200]),
    num_iterations=st.integers(1, 4),
    reserved=st.sampled_from([None, ["<pad>", "<EOS>", "<UNK>"], ["<pad>", "<EOS>", "tok_x"]]),
)
def test_build_matches_plain_transcription(
    plain, token_counts, min_count, max_subtoken_length, num_iterations, reserved
):
    fast = SubwordTextEncoder()
    fast.build_from_token_counts(token_counts, min_count, num_iterations, reserved,
                                 max_subtoken_length)
    base = plain.PlainSubwordTextEncoder()
    base.build_from_token_counts(token_counts, min_count, num_iterations, reserved,
                                 max_subtoken_length)
    assert fast.all_subtoken_strings == base.all_subtoken_strings


@pytest.mark.slow
@settings(max_examples=15, deadline=None)
@given(
    lines=st.lists(st.text(st.sampled_from(list("abcab .,_-xyz")), max_size=30), max_size=40),
    target=st.integers(1, 60),
)
def test_bisection_matches_plain_transcription(plain, lines, target):
    fast = SubwordTextEncoder.build_from_generator(lines, target, max_subtoken_length=200)
    base = plain.PlainSubwordTextEncoder.build_from_generator(lines, target, 200)
    assert fast.all_subtoken_strings == base.all_subtoken_strings
    for line in lines:
        assert fast.encode(line) == base.encode(line)
        assert fast.decode(fast.encode(line)) == line


def test_build_argument_errors():
    counts = {"a": 1}
    with pytest.raises(ValueError, match="Lower bound"):
        SubwordTextEncoder.build_to_target_size(10, counts, 5, 1)
    with pytest.raises(ValueError, match="Target size must be positive"):
        SubwordTextEncoder.build_to_target_size(0, counts, 1, 5)
    with pytest.raises(ValueError, match="RESERVED_TOKENS must be a prefix"):
        SubwordTextEncoder.build_to_target_size(10, counts, 1, 5, reserved_tokens=["<EOS>"])


def test_empty_corpus_builds_alphabet_only_vocab():
    vocab = SubwordTextEncoder.build_from_generator([], 100)
    assert vocab.all_subtoken_strings[:2] == ("<pad>_", "<EOS>_")
    assert vocab.decode(vocab.encode("any text ☃")) == "any text ☃"


def test_get_or_generate_vocab_inner_reuses_existing_file(tmp_path):
    data_dir = tmp_path / "new" / "dir"

    def lines():
        yield from ["the cat sat", "the dog sat"] * 5

    first = generator_utils.get_or_generate_vocab_inner(str(data_dir), "v.subwords", 20, lines())
    stored = (data_dir / "v.subwords").read_bytes()

    def must_not_run():
        raise AssertionError("the generator is consumed although the vocab exists")
        yield

    again = generator_utils.get_or_generate_vocab_inner(
        str(data_dir), "v.subwords", 20, must_not_run()
    )
    assert again.all_subtoken_strings == first.all_subtoken_strings
    assert (data_dir / "v.subwords").read_bytes() == stored
    # No data_dir: built, not stored.
    unstored = generator_utils.get_or_generate_vocab_inner(None, "v.subwords", 20, lines())
    assert unstored.all_subtoken_strings == first.all_subtoken_strings


def test_generate_lines_for_vocab_sampling(tmp_path):
    (tmp_path / "c.txt").write_text("".join(f"l{i}\n" for i in range(10)))  # 30 bytes
    # skip = int(30 / 5 / 2) = 3: skip 3 lines, yield 1, ... until 5 characters were yielded.
    assert list(generator_utils.generate_lines_for_vocab(str(tmp_path), ["c.txt"], 5)) == [
        "l3", "l7"
    ]
    # A budget above half the file size reads every line.
    lines = list(generator_utils.generate_lines_for_vocab(str(tmp_path), ["c.txt"], 100))
    assert lines == [f"l{i}" for i in range(10)]


def test_generate_lines_for_vocab_t2t_sources(tmp_path):
    # t2t's [url, [lang_file, ...]]: files come out of the archive already in tmp_dir.
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in [("corpus/a.en", b" hello \n"), ("corpus/b.de.gz",
                                                          gzip.compress(b"hallo\n"))]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    (tmp_path / "corpus.tgz").write_bytes(buffer.getvalue())
    sources = [["http://example.com/corpus.tgz", ["corpus/a.en", "corpus/b.de.gz"]]]
    assert list(generator_utils.generate_lines_for_vocab(str(tmp_path), sources)) == [
        "hello", "hallo"
    ]
    assert not (tmp_path / "corpus" / "b.de").exists()  # read compressed, no gunzipped copy
    missing = [["http://example.com/other.tgz", ["other/x.en"]]]
    with pytest.raises(FileNotFoundError, match="fetch http://example.com/other.tgz"):
        list(generator_utils.generate_lines_for_vocab(str(tmp_path), missing))
    (tmp_path / "bad.txt").write_bytes(b"\xff\xfe\n")
    with pytest.raises(ValueError, match=r"bad\.txt: not valid UTF-8"):
        list(generator_utils.generate_lines_for_vocab(str(tmp_path), ["bad.txt"]))


def test_txt_and_tabbed_vocab_helpers(tmp_path):
    (tmp_path / "a.txt").write_text("the cat\nthe dog\n")
    (tmp_path / "pairs.tsv").write_text("the cat\tdie Katze\nno tab here\nthe dog\tder Hund\n")
    txt = generator_utils.get_or_generate_txt_vocab(
        str(tmp_path / "d1"), "v", 10, str(tmp_path / "*.txt")
    )
    direct = SubwordTextEncoder.build_from_generator(["the cat", "the dog"], 10)
    assert txt.all_subtoken_strings == direct.all_subtoken_strings
    tabbed = generator_utils.get_or_generate_tabbed_vocab(
        str(tmp_path / "d2"), str(tmp_path), "pairs.tsv", 1, "v", 10
    )
    direct = SubwordTextEncoder.build_from_generator(["die Katze", "der Hund"], 10)
    assert tabbed.all_subtoken_strings == direct.all_subtoken_strings


@pytest.mark.parametrize("count", [-1, 2.5])
def test_bad_token_counts(count):
    with pytest.raises(ValueError, match=r"non-negative integers; got .* for token 'b'"):
        SubwordTextEncoder.build_to_target_size(10, {"a": 3, "b": count}, 1, 5)


def test_a_vocabulary_build_logs_one_info_line(caplog):
    # The bisection's steps and iterations are DEBUG; a user reads one line per build.
    lines = ["the cat sat on the mat", "a dog sat on a log", "the end"] * 20
    with caplog.at_level(logging.INFO, logger="absl"):
        encoder = SubwordTextEncoder.build_from_generator(lines, 40)
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    # The token count's progress line, then the build's one line.
    assert len(info) == 2 and info[0].startswith("Counting vocab tokens: 60 lines"), info
    assert info[1].startswith(f"Built a subword vocabulary of {encoder.vocab_size} (target 40) in ")
