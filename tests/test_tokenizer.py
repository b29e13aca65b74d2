"""t2t's invertible tokenizer: reference examples, exact alphanumeric set, round trips, counts."""
import sys
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from t2t_lite.data_generators import tokenizer

# Every code point, surrogates included (Python strings may hold them).
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=60)
# Characters at the alphanumeric / non-alphanumeric boundary, spaces and escapes.
TRICKY_TEXT = st.text(st.sampled_from(list("ab1٣_- .\\\n\t\u00a0é☃😀\u3013")), max_size=40)


def t2t_encode(text):
    """t2t's tokenizer.encode written out with unicodedata (the definition being ported)."""
    if not text:
        return []
    is_alnum = [unicodedata.category(c)[0] in "LN" for c in text]
    ret, start = [], 0
    for pos in range(1, len(text)):
        if is_alnum[pos] != is_alnum[pos - 1]:
            token = text[start:pos]
            if token != " " or start == 0:
                ret.append(token)
            start = pos
    ret.append(text[start:])
    return ret


@pytest.mark.parametrize(
    "text, tokens",
    [
        # T2T_REFERENCE.md §6.2 [verified].
        ("Dude - that's so cool.", ["Dude", " - ", "that", "'", "s", "so", "cool", "."]),
        ("Hello  world ", ["Hello", "  ", "world", " "]),
        ("", []),
        (" a", [" ", "a"]),  # a leading single space is kept
        ("a ", ["a", " "]),  # so is a trailing one
        (" ", [" "]),
        ("a b", ["a", "b"]),
        ("a_b", ["a", "_", "b"]),  # "_" is not alphanumeric
        ("x☃y", ["x", "☃", "y"]),
        ("٣٤ apples", ["٣٤", "apples"]),  # Arabic-Indic digits are N*
        ("日本語 テキスト", ["日本語", "テキスト"]),
    ],
)
def test_encode_examples(text, tokens):
    assert tokenizer.encode(text) == tokens
    assert tokenizer.decode(tokens) == text


def test_alphanumeric_set_is_categories_l_and_n_for_every_code_point():
    # t2t: {chr(i) for i in range(sys.maxunicode) if category starts with "L" or "N"}.
    mismatches = [
        i
        for i in range(sys.maxunicode + 1)
        if tokenizer.is_alphanumeric(chr(i)) != (
            i < sys.maxunicode and unicodedata.category(chr(i))[0] in "LN"
        )
    ]
    assert mismatches == []
    # The split regex agrees with the same classification on every code point.
    line = "".join(chr(i) for i in range(0, sys.maxunicode, 7))
    assert tokenizer.encode(line) == t2t_encode(line)


@settings(max_examples=300, deadline=None)
@given(st.one_of(ANY_TEXT, TRICKY_TEXT))
def test_encode_matches_t2t_definition_and_round_trips(text):
    tokens = tokenizer.encode(text)
    assert tokens == t2t_encode(text)
    assert tokenizer.decode(tokens) == text


def test_decode_inserts_space_only_between_alphanumeric_tokens():
    assert tokenizer.decode(["a", "b", ".", "c", " ", "d"]) == "a b.c d"
    assert tokenizer.decode([]) == ""


def _write(path, text, encoding="utf-8"):
    path.write_bytes(text.encode(encoding))
    return str(path)


def test_corpus_token_counts_lines_and_limits(tmp_path):
    _write(tmp_path / "b.txt", "the dog\n")
    _write(tmp_path / "a.txt", "  the cat  \nthe\r\n")
    counts = tokenizer.corpus_token_counts(str(tmp_path / "*.txt"), corpus_max_lines=None)
    assert counts == {"the": 3, "cat": 1, "dog": 1}
    # Files are read in sorted order, so the first 2 lines are a.txt's.
    counts = tokenizer.corpus_token_counts(str(tmp_path / "*.txt"), corpus_max_lines=2)
    assert counts == {"the": 2, "cat": 1}
    # Whole files: "  the cat  \nthe\r\n" keeps its newlines and spaces as tokens.
    counts = tokenizer.corpus_token_counts(
        str(tmp_path / "a.txt"), corpus_max_lines=0, split_on_newlines=False
    )
    assert counts == {"  ": 1, "the": 2, "cat": 1, "  \n": 1, "\r\n": 1}
    counts = tokenizer.corpus_token_counts(
        str(tmp_path / "a.txt"), corpus_max_lines=1, split_on_newlines=False
    )
    assert counts == {"  ": 1, "the": 1, "cat": 1, "  \n": 1}


def test_vocab_token_counts_csv(tmp_path):
    path = _write(tmp_path / "v.csv", "the,10\na,b,3\nno comma here\n_,2\n")
    assert tokenizer.vocab_token_counts(path, max_lines=None) == {"the": 10, "a,b": 3, "_": 2}
    assert tokenizer.vocab_token_counts(path, max_lines=1) == {"the": 10}
    bad = _write(tmp_path / "bad.csv", "the,ten\n")
    with pytest.raises(ValueError, match=r"bad\.csv.*'the,ten'"):
        tokenizer.vocab_token_counts(bad, max_lines=None)


def test_corpus_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing"):
        tokenizer.corpus_token_counts(str(tmp_path / "nothing*"), corpus_max_lines=None)
    path = _write(tmp_path / "latin1.txt", "ok\ncaf\u00e9\n", encoding="latin-1")
    with pytest.raises(ValueError, match=r"latin1\.txt.*UTF-8"):
        tokenizer.corpus_token_counts(path, corpus_max_lines=None)
