"""Text encoders against tensor2tensor: the t2t-written vocab and ids, escaping, round trips,
vocab file format and errors, Token/Byte/base encoders."""
import json
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from t2t_lite.data_generators import text_encoder
from t2t_lite.data_generators.text_encoder import (
    ByteTextEncoder,
    SubwordTextEncoder,
    TextEncoder,
    TokenTextEncoder,
    VocabFileError,
)

VOCAB_NAME = "vocab.translate_toy_ende1k.1024.subwords"
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=50)
TRICKY_TEXT = st.lists(
    st.sampled_from(list("ab_\\u;019 \n\t\r\x00\x7fé☃😀\u3013\u2028") + ["  ", "\\u", "\\9;"]),
    max_size=30,
).map("".join)
SPACES = st.builds(lambda a, n, b: a + " " * n + b, st.sampled_from(["", "a", "."]),
                   st.integers(0, 300), st.sampled_from(["", "b", "!"]))


@pytest.fixture(scope="module")
def fixture_vocab(t2t_fixtures):
    return SubwordTextEncoder(str(t2t_fixtures / VOCAB_NAME))


@pytest.fixture(scope="module")
def small_vocab():
    lines = ["The cat sat on the mat.", "Der Hund_2 läuft \\ schnell!", "the the the cat"] * 3
    return SubwordTextEncoder.build_from_generator(lines, 60, max_subtoken_length=200)


def test_reserved_ids():
    assert (text_encoder.PAD, text_encoder.EOS) == ("<pad>", "<EOS>")
    assert (text_encoder.PAD_ID, text_encoder.EOS_ID) == (0, 1)
    assert text_encoder.RESERVED_TOKENS == ["<pad>", "<EOS>"]
    assert text_encoder.NUM_RESERVED_TOKENS == 2


def test_fixture_vocab_loads(fixture_vocab, t2t_fixtures):
    assert fixture_vocab.vocab_size == 1018
    strings = fixture_vocab.all_subtoken_strings
    assert strings[:6] == ("<pad>_", "<EOS>_", "_", ", _", "._", "s_")
    assert json.loads((t2t_fixtures / "model_A.json").read_text())["vocab_size"] == 1018


@pytest.mark.parametrize("npz", ["model_A.npz", "model_A_trained.npz"])
def test_fixture_ids_are_reproduced(fixture_vocab, t2t_fixtures, npz):
    examples = json.loads((t2t_fixtures / "model_A.json").read_text())["examples"]
    data = np.load(t2t_fixtures / npz)
    for key, texts in (("inputs", examples["source_text"]), ("targets", examples["target_text"])):
        rows = data[key]
        assert rows.shape[0] == len(texts) == 3
        for row, text in zip(rows, texts):
            ids = fixture_vocab.encode(text) + [text_encoder.EOS_ID]
            padded = ids + [text_encoder.PAD_ID] * (rows.shape[1] - len(ids))
            assert padded == row.tolist()
            assert fixture_vocab.decode(ids[:-1]) == text
            assert fixture_vocab.decode(row.tolist(), strip_extraneous=True) == text


def _write_vocab(path, subtokens, quote="'"):
    path.write_text("".join(f"{quote}{s}{quote}\n" for s in subtokens), encoding="utf-8")
    return str(path)


def test_reference_examples_greedy_longest_match(tmp_path):
    # T2T_REFERENCE.md §6.3 [verified, en-de 8k vocab]; this vocab holds the same pieces.
    pieces = ["<pad>_", "<EOS>_", "Hel", "lo_", "world_", "._", "a_", "\\u_", "b_", "x_", ";_",
              "y_", "He", "wor", "l", "o", "H", "e", "w", "r", "d", ".", "a", "b", "x", "y",
              "\\", "u", "_", ";", "9", "7", "3", "1"]
    enc = SubwordTextEncoder(_write_vocab(tmp_path / "v", pieces))
    for text, expected in [
        ("Hello world.", ["Hel", "lo_", "world_", "._"]),
        ("a_b", ["a_", "\\u_", "b_"]),
        ("x☃y", ["x_", "\\", "9", "7", "3", "1", ";_", "y_"]),
    ]:
        ids = enc.encode(text)
        assert enc.decode_list(ids) == expected
        assert enc.decode(ids) == text


def test_escape_and_unescape():
    alphabet = frozenset("abc") | text_encoder._ESCAPE_CHARS
    escape = text_encoder._escape_token
    assert escape("abc", alphabet) == "abc_"
    assert escape("a_b", alphabet) == "a\\ub_"
    assert escape("a\\b", alphabet) == "a\\\\b_"
    assert escape("x☃", alphabet) == "\\120;\\9731;_"
    assert escape("\n", alphabet | {"\n"}) == "\\10;_"  # "\n" is always escaped
    for token in ["abc", "a_b", "a\\b", "x☃", "\n", "\\u", "\\\\u", "_\\9;_"]:
        assert text_encoder._unescape_token(escape(token, alphabet)) == token
    # Invalid code points become U+3013, as in t2t.
    assert text_encoder._unescape_token("\\99999999;_") == "\u3013"
    with pytest.raises(TypeError):
        escape(b"bytes", alphabet)


@settings(max_examples=200, deadline=None)
@given(st.one_of(ANY_TEXT, TRICKY_TEXT, SPACES))
def test_round_trip_fixture_vocab(fixture_vocab, text):
    ids = fixture_vocab.encode(text)
    assert all(0 <= i < fixture_vocab.vocab_size for i in ids)
    assert fixture_vocab.decode(ids) == text


@settings(max_examples=200, deadline=None)
@given(st.one_of(ANY_TEXT, TRICKY_TEXT, SPACES))
def test_round_trip_built_vocab(small_vocab, text):
    assert small_vocab.decode(small_vocab.encode(text)) == text
    assert small_vocab.decode(small_vocab.encode_without_tokenizing(text)) == text


def test_encode_details(fixture_vocab):
    text = "Die Aussprache ist geschlossen."
    ids = fixture_vocab.encode(text)
    assert fixture_vocab.encode(text) == ids  # cached tokens give the same ids
    assert fixture_vocab.encode(text.encode("utf-8")) == ids
    assert fixture_vocab.encode("") == []
    assert 1 not in ids  # no EOS from the encoder
    # Ids outside [0, V) decode to nothing; numpy ids work.
    assert fixture_vocab.decode([-1, *ids, 5000]) == text
    assert fixture_vocab.decode(np.array(ids, dtype=np.int64)) == text
    assert fixture_vocab.decode_list([0, 1, 9999]) == ["<pad>_", "<EOS>_", ""]
    assert fixture_vocab.decode(ids + [1, 0, 0], strip_extraneous=True) == text


def test_store_to_file_reproduces_t2t_file(fixture_vocab, t2t_fixtures, tmp_path):
    out = tmp_path / "copy.subwords"
    fixture_vocab.store_to_file(str(out))
    assert out.read_bytes() == (t2t_fixtures / VOCAB_NAME).read_bytes()
    assert os.listdir(tmp_path) == ["copy.subwords"]  # no temporary file left behind
    # Unquoted, the subtokens with surrounding spaces (" _", "- ") would be lost on loading.
    with pytest.raises(ValueError, match="' _' cannot be stored"):
        fixture_vocab.store_to_file(str(tmp_path / "plain"), add_single_quotes=False)


def test_store_unquoted_round_trip(tmp_path):
    # No token here has surrounding spaces, so the unquoted format can hold every subtoken.
    vocab = SubwordTextEncoder.build_from_generator(["the cat_2 sat", "the dog sat"] * 4, 30)
    path = tmp_path / "plain.subwords"
    vocab.store_to_file(str(path), add_single_quotes=False)
    assert path.read_text(encoding="utf-8").splitlines()[:2] == ["<pad>_", "<EOS>_"]
    again = SubwordTextEncoder(str(path))
    assert again.all_subtoken_strings == vocab.all_subtoken_strings
    text = "The dog_2 sät"
    assert again.encode(text) == vocab.encode(text)
    assert again.decode(again.encode(text)) == text


def test_store_to_file_refuses_unstorable_subtoken(tmp_path):
    enc = SubwordTextEncoder()
    enc._init_subtokens_from_list(["<pad>_", "<EOS>_", "a\nb", "a"])
    with pytest.raises(ValueError, match="cannot be stored"):
        enc.store_to_file(str(tmp_path / "v"))
    assert os.listdir(tmp_path) == []


def test_old_format_vocab_loads(tmp_path):
    # Vocabs written before Jul 2018 start with unescaped '<pad>', '<EOS>'.
    enc = SubwordTextEncoder(
        _write_vocab(tmp_path / "old", ["<pad>", "<EOS>", "hi_", "h", "i", "_", "\\", "u", ";"]
                     + list("0123456789"))
    )
    assert enc.all_subtoken_strings[:2] == ("<pad>", "<EOS>")
    assert enc.encode("hi") == [2]
    assert enc.decode(enc.encode("hi ih_")) == "hi ih_"
    # Double quotes are accepted too, as in t2t.
    dq = SubwordTextEncoder(_write_vocab(tmp_path / "dq", ["<pad>_", "<EOS>_", "x"], quote='"'))
    assert dq.all_subtoken_strings == ("<pad>_", "<EOS>_", "x")


@pytest.mark.parametrize(
    "content, message",
    [
        (b"'<pad>_'\n'<EOS>_'\n'abc\n'd'\n", r"bad:3: malformed line"),
        (b"'<pad>_'\n'<EOS>_'\n\n'd'\n", r"bad:3: malformed line ''.*empty line"),
        (b"'<pad>_'\n'<EOS>_'\n''\n", r"bad:3: malformed line .*empty subtoken"),
        (b"'<pad>_'\n'<EOS>_'\n'a'\n'b'\n'a'\n",
         r"bad:5: duplicate subtoken 'a' \(first on line 3"),
        (b"'<pad>_'\n'<EOS>_'\n'caf\xe9_'\n", r"bad:3: not valid UTF-8"),
        (b"", r"bad: the vocab file has no subtokens"),
    ],
)
def test_bad_vocab_files_name_file_and_line(tmp_path, content, message):
    path = tmp_path / "bad"
    path.write_bytes(content)
    with pytest.raises(VocabFileError, match=message):
        SubwordTextEncoder(str(path))


def test_missing_vocab_file(tmp_path):
    with pytest.raises(VocabFileError, match="not found"):
        SubwordTextEncoder(str(tmp_path / "absent"))


def test_token_text_encoder_from_list_and_file(tmp_path):
    enc = TokenTextEncoder(None, vocab_list=["<EOS>", "the", "cat", "UNK"], replace_oov="UNK")
    assert enc.vocab_size == 5
    assert enc.encode("  the cat dog ") == [2, 3, 4]
    assert enc.decode([2, 3, 99]) == "the cat ID_99"
    assert enc.decode_list([0, 1]) == ["<pad>", "<EOS>"]
    path = tmp_path / "tokens"
    enc.store_to_file(str(path))
    assert path.read_text() == "<pad>\n<EOS>\nthe\ncat\nUNK\n"
    rev = TokenTextEncoder(str(path), reverse=True)
    assert rev.encode("the cat") == [3, 2]
    assert rev.decode([3, 2]) == "the cat"
    with pytest.raises(KeyError):
        rev.encode("dog")
    with pytest.raises(ValueError, match="replace_oov"):
        TokenTextEncoder(str(path), replace_oov="<unk>")


@pytest.mark.parametrize(
    "content, message",
    [(b"<pad>\n<EOS>\nthe\nthe\n", r"tok:4: duplicate token 'the' \(first on line 3"),
     (b"<pad>\n<EOS>\n\nthe\n", r"tok:3: empty line"),
     (b"<pad>\n<EOS>\n\xff\n", r"tok:3: not valid UTF-8")],
)
def test_bad_token_vocab_files(tmp_path, content, message):
    path = tmp_path / "tok"
    path.write_bytes(content)
    with pytest.raises(VocabFileError, match=message):
        TokenTextEncoder(str(path))


def test_byte_and_base_encoders():
    enc = ByteTextEncoder()
    assert enc.vocab_size == 258
    assert enc.encode("hé") == [ord("h") + 2, 0xC3 + 2, 0xA9 + 2]
    assert enc.decode(enc.encode("hé☃")) == "hé☃"
    assert enc.decode([0, ord("a") + 2, 1]) == "<pad>a<EOS>"
    assert enc.decode([ord("a") + 2, 1, 0], strip_extraneous=True) == "a"
    assert enc.decode([0xFF + 2]) == "\ufffd"  # invalid UTF-8 is replaced
    assert enc.decode_list([1, 99]) == [b"<EOS>", bytes([97])]
    base = TextEncoder()
    assert base.encode("3 0 7") == [5, 2, 9]
    assert base.decode([5, 2, 1]) == "3 0 <EOS>"
    assert base.decode([5, 2, 1, 0], strip_extraneous=True) == "3 0"


@settings(max_examples=100, deadline=None)
@given(st.one_of(ANY_TEXT, TRICKY_TEXT))
def test_regex_split_equals_t2t_loop(fixture_vocab, text):
    # The trie regex and t2t's loop (used for vocabularies with very long subtokens) agree.
    loop = SubwordTextEncoder()
    loop.__dict__.update(fixture_vocab.__dict__)
    loop._split_regex = None
    loop._cache = {}
    assert loop.encode(text) == fixture_vocab.encode(text)


def test_unencodable_alphabet_character_is_reported(tmp_path):
    # '<' is in this vocab's alphabet (from '<pad>') but is not a subtoken by itself.
    enc = SubwordTextEncoder(
        _write_vocab(tmp_path / "v", ["<pad>", "<EOS>", "a", "_", "\\", "u", ";"]
                     + list("0123456789"))
    )
    assert enc.decode(enc.encode("a ☃")) == "a ☃"
    with pytest.raises(ValueError, match="'<' of the escaped token '<_'"):
        enc.encode("<")


def test_load_from_file_object(fixture_vocab, t2t_fixtures):
    enc = SubwordTextEncoder()
    with open(t2t_fixtures / VOCAB_NAME, encoding="utf-8", newline="\n") as f:
        enc._load_from_file_object(f)  # t2t's method name, for ported code
    assert enc.all_subtoken_strings == fixture_vocab.all_subtoken_strings
