"""SentencePiece vocabularies and parents' vocabularies, at library level (no TensorFlow):
the encoder's ids and round trip, sampling, datagen's flags, and the warm-start check that
refuses a vocabulary other than the parent's. The run through datagen, training, decoding
and both exports is tests/test_sentencepiece_run.py."""
import io
import json
import random

import pytest

from tests.conftest import require_extra

sentencepiece = require_extra("sentencepiece", "sentencepiece")

from t2t_lite.data_generators import sentencepiece_encoder, text_encoder, vocab_sources
from t2t_lite.errors import UserError
from t2t_lite.utils import run_metadata

# Words and characters a model trained on LINES has not seen (byte fallback encodes them).
UNSEEN = "Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich ☃ 日本語 ﬁ"


@pytest.fixture(scope="module")
def lines(wmt_toy_dir):
    return (wmt_toy_dir / "train.en").read_text(encoding="utf-8").split("\n")[:200]


@pytest.fixture(scope="module")
def bpe_model(lines, tmp_path_factory):
    path = tmp_path_factory.mktemp("sp") / "bpe.model"
    return sentencepiece_encoder.train_model(lines, str(path), 400, model_type="bpe")


def test_own_model_keeps_t2t_reserved_ids_and_round_trips(bpe_model, lines):
    assert bpe_model.offset == 0
    assert bpe_model.all_subtoken_strings[:3] == ("<pad>", "</s>", "<unk>")
    for text in lines[:50] + [UNSEEN, "  two   spaces  "]:
        ids = bpe_model.encode(text)
        assert min(ids) >= text_encoder.NUM_RESERVED_TOKENS and max(ids) < bpe_model.vocab_size
        assert 2 not in ids  # nothing is <unk>: byte fallback
        # SentencePiece keeps the text (no normalization), whitespace runs made one space.
        assert bpe_model.decode(ids) == " ".join(text.split())
    # EOS and PAD (and ids outside the vocabulary) add nothing, as in decoded rows.
    ids = bpe_model.encode("The debate is closed.")
    assert bpe_model.decode(ids + [text_encoder.EOS_ID, 0, 0, 10**6]) == "The debate is closed."


def test_unigram_model_round_trips(lines, tmp_path):
    encoder = sentencepiece_encoder.train_model(lines, str(tmp_path / "u.model"), 400)
    assert encoder.filename == str(tmp_path / "u.model")
    assert all(encoder.decode(encoder.encode(t)) == " ".join(t.split()) for t in lines[:50])


def test_model_with_sentencepiece_default_ids_is_shifted_by_two(lines, tmp_path):
    # SentencePiece's defaults: <unk> 0, <s> 1, </s> 2, no pad; t2t's 0 and 1 come first.
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model,
                                             vocab_size=300, model_type="bpe", minloglevel=2)
    path = tmp_path / "default.model"
    path.write_bytes(model.getvalue())
    processor = sentencepiece.SentencePieceProcessor(model_file=str(path))
    encoder = sentencepiece_encoder.SentencePieceEncoder(str(path))
    assert encoder.offset == 2 and encoder.vocab_size == processor.get_piece_size() + 2
    assert encoder.all_subtoken_strings[:5] == ("<pad>", "<EOS>", "<unk>", "<s>", "</s>")
    text = lines[3]
    assert encoder.encode(text) == [i + 2 for i in processor.encode(text)]
    assert encoder.decode([0, 1] + encoder.encode(text)) == processor.decode(processor.encode(text))


def test_sampling_is_reproducible_varied_and_invertible(bpe_model, lines):
    def sampled(seed):
        rng = random.Random(seed)
        return [bpe_model.encode_with_dropout(t, 0.3, rng) for t in lines[:20]]

    first = sampled(0)
    assert first == sampled(0)
    assert first != sampled(1)
    assert first != [bpe_model.encode(t) for t in lines[:20]]
    assert [bpe_model.decode(ids) for ids in first] == [" ".join(t.split()) for t in lines[:20]]
    assert bpe_model.encode_with_dropout(lines[0], 0.0, random.Random(0)) == bpe_model.encode(
        lines[0])


def test_not_a_model_is_one_line_naming_the_file(tmp_path):
    path = tmp_path / "vocab.model"
    path.write_text("'<pad>'\n'<EOS>'\n", encoding="utf-8")
    with pytest.raises(text_encoder.VocabFileError, match=f"{path}: not a SentencePiece model"):
        sentencepiece_encoder.SentencePieceEncoder(str(path))
    subwords = tmp_path / "vocab.subwords"
    subwords.write_text("'<pad>'\n'<EOS>'\n'a_'\n", encoding="utf-8")
    assert isinstance(sentencepiece_encoder.encoder_from_file(str(subwords)),
                      text_encoder.SubwordTextEncoder)


@pytest.mark.parametrize("kwargs, message", [
    ({"sentencepiece_model": "m.model"}, "--sentencepiece_model needs --vocab_type=sentencepiece"),
    ({"target_sentencepiece_model": "m.model", "vocab_type": "sentencepiece"},
     "--target_sentencepiece_model needs --sentencepiece_model"),
    ({"separate": True}, "need --vocab_type=sentencepiece"),
    ({"vocab_type": "sentencepiece", "sentencepiece_model": "absent.model"},
     "--sentencepiece_model=.*absent.model: no such file"),
    ({"vocab_from": "run", "approx_vocab_size": 8192}, "--vocab_from takes the parent's"),
    ({"vocab_from": "no_such_run"}, "--vocab_from=no_such_run: no such run folder"),
])
def test_contradicting_vocab_flags_are_one_line(kwargs, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match=message):
        vocab_sources.datagen_settings(**kwargs)


def test_given_models_and_training_settings(bpe_model, tmp_path):
    settings, size = vocab_sources.datagen_settings("sentencepiece", approx_vocab_size=4000,
                                                    model_type="bpe", separate=True)
    assert (settings.sentencepiece, settings.separate, settings.model_type, size) == (
        True, True, "bpe", 4000)
    assert settings.flags() == {"--vocab_type": "sentencepiece",
                                "--sentencepiece_model_type": "bpe",
                                "--sentencepiece_separate": True}
    settings, _ = vocab_sources.datagen_settings("sentencepiece", bpe_model.filename)
    assert settings.given == {"inputs": bpe_model.filename, "targets": bpe_model.filename}
    assert not settings.separate
    assert settings.input_files() == {"--sentencepiece_model": [bpe_model.filename],
                                      "--target_sentencepiece_model": [bpe_model.filename]}
    assert vocab_sources.datagen_settings(None, approx_vocab_size=8192) == (None, 8192)


def _run_record(run_dir, vocab_files: dict) -> None:
    """A parent run folder whose run_inputs.json records `vocab_files` (feature -> path)."""
    encoders = {feature: type("E", (), {"filename": str(path)})()
                for feature, path in vocab_files.items()}
    from t2t_lite.data_generators import data_marker

    run_dir.mkdir()
    (run_dir / "run_inputs.json").write_text(
        json.dumps(data_marker.run_inputs(encoders, None, None)), encoding="utf-8")


def test_vocab_from_a_run_gives_its_files_by_feature(tmp_path):
    inputs, targets = tmp_path / "in.model", tmp_path / "out.model"
    inputs.write_bytes(b"inputs model")
    targets.write_bytes(b"targets model")
    _run_record(tmp_path / "parent", {"inputs": inputs, "targets": targets})
    assert vocab_sources.parent_vocabulary(str(tmp_path / "parent")) == {
        "inputs": str(inputs), "targets": str(targets)}
    (tmp_path / "parent" / "ckpt-600.index").write_bytes(b"")
    assert vocab_sources.parent_vocabulary(str(tmp_path / "parent" / "ckpt-600")) == {
        "inputs": str(inputs), "targets": str(targets)}
    targets.write_bytes(b"changed")
    with pytest.raises(UserError, match="its targets vocabulary .*out.model changed since"):
        vocab_sources.parent_vocabulary(str(tmp_path / "parent"))


def test_subword_parent_keeps_its_size_in_the_childs_vocab_name(tmp_path):
    vocab = tmp_path / "vocab.translate_ende_wmt8k.8192.subwords"
    vocab.write_text("'<pad>'\n'<EOS>'\n'a_'\n", encoding="utf-8")
    settings, size = vocab_sources.datagen_settings(vocab_from=str(vocab))
    assert size == 8192 and not settings.sentencepiece
    assert settings.input_files() == {"--vocab_from (inputs)": [str(vocab)],
                                      "--vocab_from (targets)": [str(vocab)]}
    with pytest.raises(UserError, match="--vocab_type=sentencepiece but --vocab_from=.* has a "
                                        "subwords vocabulary"):
        vocab_sources.datagen_settings("sentencepiece", vocab_from=str(vocab))


def test_warm_start_refuses_another_vocabulary_in_one_line_naming_both(tmp_path):
    parent_vocab, child_vocab = tmp_path / "parent.subwords", tmp_path / "child.subwords"
    parent_vocab.write_text("'<pad>'\n'<EOS>'\n'a_'\n", encoding="utf-8")
    child_vocab.write_text("'<pad>'\n'<EOS>'\n'b_'\n", encoding="utf-8")
    _run_record(tmp_path / "parent", {"inputs": parent_vocab, "targets": parent_vocab})
    from t2t_lite.data_generators import data_marker

    def child_inputs(path):
        encoder = type("E", (), {"filename": str(path)})()
        return data_marker.run_inputs({"inputs": encoder, "targets": encoder}, None, None)

    with pytest.raises(UserError) as error:
        run_metadata.check_parent_vocabulary(str(tmp_path / "parent" / "ckpt-600"),
                                             child_inputs(child_vocab))
    message = str(error.value)
    assert "\n" not in message
    assert f"the inputs vocabulary {child_vocab} " in message
    assert f"is not the parent's {parent_vocab} " in message
    assert f"--vocab_from={tmp_path / 'parent'} " in message
    # The same content under another name (datagen --vocab_from's copy) is the parent's.
    copy = tmp_path / "vocab.translate_files.3.subwords"
    copy.write_bytes(parent_vocab.read_bytes())
    run_metadata.check_parent_vocabulary(str(tmp_path / "parent"), child_inputs(copy))


def test_data_dir_with_a_subword_vocab_and_a_model_is_refused(bpe_model, tmp_path):
    from t2t_lite import registry

    problem = registry.problem("translate_files")
    (tmp_path / "vocab.translate_files.sentencepiece.model").write_bytes(
        bpe_model.model_proto)
    encoders = problem.feature_encoders(str(tmp_path))
    assert encoders["inputs"] is encoders["targets"]
    assert encoders["inputs"].model_proto == bpe_model.model_proto
    (tmp_path / "vocab.translate_files.32768.subwords").write_text("'<pad>'\n'<EOS>'\n")
    with pytest.raises(UserError, match="holds two vocabularies of translate_files: "
                                        ".*32768.subwords and .*sentencepiece.model"):
        registry.problem("translate_files").feature_encoders(str(tmp_path))


@pytest.mark.parametrize("name", ["translate_ende_wmt_bpe32k", "translate_ende_wmt8k_packed",
                                  "algorithmic_reverse_binary40_test"])
def test_problems_with_a_fixed_vocabulary_refuse_sentencepiece(name):
    from t2t_lite.data_generators import datagen

    settings, _ = vocab_sources.datagen_settings("sentencepiece", approx_vocab_size=8000)
    with pytest.raises(ValueError, match=f"--vocab_type / --vocab_from do not apply to {name}"):
        datagen.configure_problem(name, vocab_settings=settings)
    assert datagen.configure_problem("translate_enfr_wmt32k", vocab_settings=settings
                                     ).vocab_filenames == [
        "vocab.translate_enfr_wmt32k.sentencepiece.model"]


def test_attention_pictures_label_each_id_with_its_piece(bpe_model):
    from t2t_lite.visualization import attention_viz

    ids = bpe_model.encode("The debate is closed.") + [text_encoder.EOS_ID]
    labels = attention_viz.token_labels(bpe_model, ids)
    assert "".join(labels[:-1]).replace("▁", " ").strip() == "The debate is closed."
    assert labels[-1] == "</s>"  # EOS: the model's own id 1


def test_attention_pictures_show_the_words_sentencepiece_pieces_form(bpe_model):
    """The readable labels join SentencePiece's pieces into their words the same way: the
    text of the labels, joiners removed and words spaced, is the line."""
    from t2t_lite.visualization import attention_viz

    line = "The debate is closed."
    ids = bpe_model.encode(line) + [text_encoder.EOS_ID]
    labels = attention_viz.piece_labels(bpe_model, ids)
    assert labels[-1] == "</s>" and not any("▁" in label for label in labels)
    words, starts = [], [0] + attention_viz.word_starts(labels[:-1])
    for begin, end in zip(starts, starts[1:] + [len(labels) - 1]):
        words.append("".join(label.strip(attention_viz.JOINER) for label in labels[begin:end]))
    assert " ".join(words) == line
    pieces = attention_viz.token_labels(bpe_model, ids)[:-1]
    assert len(pieces) > len(words)  # some word is cut into pieces, and joined back
