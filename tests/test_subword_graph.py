"""The in-graph SubwordTextEncoder gives the Python SubwordTextEncoder's ids and text."""
import random
import sys

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from t2t_lite.data_generators import text_encoder, tokenizer
from t2t_lite.export import subword_graph

VOCAB = "vocab.translate_toy_ende1k.1024.subwords"

# Hard cases for the tokenizer, the escaping and the greedy split.
UNICODE_CASES = [
    "",
    " ",
    "   ",
    "The debate is closed.",
    "Hello  world ",
    "Dude - that's so cool.",
    "a_b",
    "__init__",
    "back\\slash \\u \\\\ \\12; \\n",
    "x\u2603y",
    "digits 0123456789 3.14159 1,000,000",
    "emoji \U0001F600\U0001F600 and flags \U0001F1E9\U0001F1EA!",
    "tab\there\nnewline\r\n",
    "\x00\x01\x7f\x84\x9f controls",
    "a" + " " * 60 + "b",
    " " * 40,
    "   leading and trailing   ",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
    "e\u0301 combining, \u00e9 precomposed",
    "\u3013 geta, \ufffd replacement, \u200b zero width",
    "\u05e9\u05dc\u05d5\u05dd right-to-left \u0645\u0631\u062d\u0628\u0627",
    "\U00010000\U0010fffd astral",
    "Stra\u00dfe \u2014 \u201equotes\u201c \u00ab\u00bb",
    "x" * 300,
    "_\\" * 50,
]


@pytest.fixture(scope="module")
def encoder(t2t_fixtures):
    return text_encoder.SubwordTextEncoder(str(t2t_fixtures / VOCAB))


@pytest.fixture(scope="module", params=subword_graph.SEGMENTERS)
def graph_encoder(encoder, request):
    return subword_graph.SubwordGraphEncoder(encoder.all_subtoken_strings,
                                             segmenter=request.param)


@pytest.fixture(scope="module")
def graph_encode(graph_encoder):
    # Graph mode, as in a SavedModel.
    return tf.function(lambda text: graph_encoder.encode(text),
                       input_signature=[tf.TensorSpec([None], tf.string)])


@pytest.fixture(scope="module")
def graph_decode(graph_encoder):
    return tf.function(lambda ids: graph_encoder.decode(ids),
                       input_signature=[tf.RaggedTensorSpec([None, None], tf.int32)])


def _ragged(id_lists):
    return tf.RaggedTensor.from_row_lengths(
        tf.constant([i for ids in id_lists for i in ids], tf.int32),
        tf.constant([len(ids) for ids in id_lists], tf.int64))


def _texts(tensor):
    return [t.decode("utf-8") for t in tensor.numpy()]


def test_alphanumeric_table_matches_tokenizer_for_every_code_point():
    bounds = subword_graph.alphanumeric_boundaries()
    code_points = np.arange(sys.maxunicode + 1)
    in_graph = np.searchsorted(bounds, code_points, side="right") % 2 == 1
    python = np.fromiter(
        (cp < sys.maxunicode and tokenizer.is_alphanumeric(chr(cp)) for cp in code_points),
        dtype=bool, count=code_points.size)
    assert np.array_equal(in_graph, python)
    # The graph op on the same table agrees with numpy (spot checks across planes).
    sample = tf.constant([48, 57, 58, 65, 95, 0x00e9, 0x2603, 0x4e2d, 0x1f600, 0x10fffd])
    assert subword_graph.is_alphanumeric(sample, tf.constant(bounds)).numpy().tolist() == [
        True, True, False, True, False, True, False, True, False, False]


def test_reference_examples(graph_encoder, encoder):
    # T2T reference §6.3: "a_b" -> tokens a | _ | b, escaped "a_", "\u_", "b_".
    ids = graph_encoder.encode(tf.constant(["a_b"])).to_list()[0]
    assert "".join(encoder.all_subtoken_strings[i] for i in ids) == "a_\\u_b_"
    # An out-of-alphabet character is escaped to its decimal code point.
    ids = graph_encoder.encode(tf.constant(["x\u2603y"])).to_list()[0]
    assert "".join(encoder.all_subtoken_strings[i] for i in ids) == "x_\\9731;_y_"
    assert _texts(graph_encoder.decode(_ragged([ids]))) == ["x\u2603y"]


def test_unicode_cases_match_python_and_round_trip(graph_encode, graph_decode, encoder):
    ids = graph_encode(tf.constant(UNICODE_CASES)).to_list()
    assert ids == [encoder.encode(text) for text in UNICODE_CASES]
    decoded = _texts(graph_decode(_ragged(ids)))
    assert decoded == [encoder.decode(i) for i in ids]
    assert decoded == UNICODE_CASES


def test_empty_batch(graph_encode, graph_decode):
    assert graph_encode(tf.constant([], tf.string)).to_list() == []
    assert graph_decode(_ragged([])).numpy().tolist() == []
    assert _texts(graph_decode(_ragged([[], []]))) == ["", ""]


def test_invalid_utf8_is_read_as_replacement_characters(graph_encode, encoder):
    raw = [b"ab\xffc", b"\xed\xa0\x80z", b"\xc3", b"ok \xe2\x82"]
    ids = graph_encode(tf.constant(raw)).to_list()
    assert ids == [encoder.encode(r.decode("utf-8", errors="replace")) for r in raw]


def test_dense_ids_and_out_of_range_ids(graph_encoder, encoder):
    v = encoder.vocab_size
    id_lists = [[-5, 3, v, 4, v + 100], [0, 0, 1]]
    expected = [encoder.decode(ids) for ids in id_lists]
    assert _texts(graph_encoder.decode(_ragged(id_lists))) == expected
    dense = tf.constant([[3, 4, 5]], tf.int32)
    assert _texts(graph_encoder.decode(dense)) == [encoder.decode([3, 4, 5])]


def test_random_id_sequences_decode_like_python(graph_decode, encoder):
    # Model outputs can be any id sequence, including broken escapes such as "\", "9", ";" or
    # "\99999999;" (-> U+3013) and "\0000065;" (-> "A").
    ids_of = {s: i for i, s in enumerate(encoder.all_subtoken_strings)}
    escape_ids = [ids_of[c] for c in "\\u;0123456789_" if c in ids_of]
    rng = random.Random(0)
    id_lists = [
        [rng.choice(escape_ids) if rng.random() < 0.6 else rng.randrange(-2, encoder.vocab_size + 2)
         for _ in range(rng.randrange(25))]
        for _ in range(2000)
    ]
    manual = [[ids_of["\\"]] + [ids_of["9"]] * 9 + [ids_of[";"], ids_of["_"]],
              [ids_of["\\"], ids_of["0"], ids_of["0"], ids_of["6"], ids_of["5"], ids_of[";"]]]
    id_lists += manual
    decoded = _texts(graph_decode(_ragged(id_lists)))
    assert decoded == [encoder.decode(ids) for ids in id_lists]
    assert decoded[-2:] == ["\u3013", "A"]


@pytest.mark.slow
def test_toy_corpus_matches_python_encoder(graph_encode, graph_decode, encoder, wmt_toy_dir):
    for name in ("train.en", "train.de", "dev.en", "dev.de"):
        lines = (wmt_toy_dir / name).read_text(encoding="utf-8").split("\n")
        expected = [encoder.encode(line) for line in lines]
        got = graph_encode(tf.constant(lines)).to_list()
        assert got == expected, name
        decoded = _texts(graph_decode(_ragged(expected)))
        assert decoded == [encoder.decode(ids) for ids in expected], name
        assert decoded == lines, name


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(max_size=40), max_size=8))
def test_random_text_matches_python_and_round_trips(graph_encode, graph_decode, encoder, texts):
    ids = graph_encode(tf.constant(texts, tf.string)).to_list()
    assert ids == [encoder.encode(text) for text in texts]
    assert _texts(graph_decode(_ragged(ids))) == texts


@pytest.mark.parametrize("max_length", [1, 2, 3, 7, 40])
def test_max_length_keeps_the_first_ids(graph_encoder, encoder, wmt_toy_dir, max_length):
    # The input is cut to a character prefix before encoding; the first ids must not change.
    dev = (wmt_toy_dir / "dev.en").read_text(encoding="utf-8").split("\n")
    texts = [" ".join(dev[:50]), " " * 3000, "\U0001F600" * 500, "a " * 800, "_\\" * 400,
             "x" * 5000, " a" * 500 + "  ", "\x00 " * 400, "ab" + " " * 30 + "cd" * 20]
    got = graph_encoder.encode(tf.constant(texts), max_length=max_length).to_list()
    assert got == [encoder.encode(text)[:max_length] for text in texts]


@pytest.mark.parametrize("segmenter", subword_graph.SEGMENTERS)
def test_old_style_reserved_tokens_and_built_vocab(tmp_path, segmenter):
    # A vocab built by the Python builder from unusual text, stored with old-style reserved
    # tokens ("<pad>", "<EOS>" without "_"), as t2t's shipped test vocabs are.
    lines = ["caf\u00e9 na\u00efve \u2603 snow", "under_score back\\slash", "12 34 5.6",
             "tab\tsep", "\U0001F600 emoji"] * 5
    built = text_encoder.SubwordTextEncoder.build_from_generator(iter(lines), 60)
    strings = ["<pad>", "<EOS>"] + list(built.all_subtoken_strings[2:])
    vocab_file = tmp_path / "vocab.old_style.subwords"
    vocab_file.write_text("".join(f"'{s}'\n" for s in strings), encoding="utf-8")
    python = text_encoder.SubwordTextEncoder(str(vocab_file))
    graph = subword_graph.SubwordGraphEncoder(python.all_subtoken_strings, segmenter=segmenter)
    texts = lines[:5] + ["unseen \u00fcml\u00e4ut <pad> <EOS>", "\U0001F601_\\"]
    ids = graph.encode(tf.constant(texts)).to_list()
    assert ids == [python.encode(text) for text in texts]
    assert _texts(graph.decode(_ragged(ids))) == texts


def test_vocab_checks():
    with pytest.raises(ValueError, match="empty vocabulary"):
        subword_graph.SubwordGraphEncoder([])
    # "é" only occurs inside "é_": t2t's encoder could not encode a lone "é".
    strings = ["<pad>_", "<EOS>_", "\u00e9_"] + list("\\_u;0123456789<>padEOS")
    with pytest.raises(ValueError, match="no single-character subtoken"):
        subword_graph.SubwordGraphEncoder(strings)


@pytest.mark.parametrize("segmenter", subword_graph.SEGMENTERS)
def test_duplicate_and_empty_subtokens_keep_t2t_ids(segmenter):
    # t2t's lookup skips empty strings and lets a later duplicate win: "ab_" is id 5, not 3.
    strings = ["<pad>_", "<EOS>_", "", "ab_", "b_", "ab_"] + list("\\_u;0123456789abEOSpd<>")
    python = text_encoder.SubwordTextEncoder()  # t2t's list initialisation (files refuse these)
    python._init_subtokens_from_list(strings)
    python._init_alphabet_from_tokens(strings)
    graph = subword_graph.SubwordGraphEncoder(python.all_subtoken_strings, segmenter=segmenter)
    texts = ["ab b ab", "abab ba", ""]
    assert graph.encode(tf.constant(texts)).to_list() == [python.encode(t) for t in texts]
    assert python.encode("ab")[0] == 5


def test_wordpiece_segmenter_refuses_a_clashing_vocabulary():
    strings = ["<pad>_", "<EOS>_", "_#x"] + list("\\_u;0123456789<>padEOS#x")
    with pytest.raises(ValueError, match="use the core segmenter"):
        subword_graph.SubwordGraphEncoder(strings, segmenter="tensorflow_text")
    with pytest.raises(ValueError, match="Unknown subword segmenter"):
        subword_graph.SubwordGraphEncoder(strings, segmenter="sentencepiece")
