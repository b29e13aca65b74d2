"""Attention pictures: the returned weights are the model's own, pictures are written, and
they are readable at real sentence lengths (narrow enough, labels that never overlap)."""
import concurrent.futures
import itertools
import pathlib
import struct

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.data_generators import text_encoder
from t2t_lite.hparams_lib import create_hparams
from t2t_lite.models.transformer import Transformer
from t2t_lite.visualization import attention_viz
from tests.conftest import require_extra


@pytest.fixture(scope="module")
def model():
    hparams = create_hparams("transformer_tiny",
                             "hidden_size=16,filter_size=16,num_heads=2,num_hidden_layers=2")
    return Transformer(hparams, 20, 20)


def test_returning_attention_scores_changes_nothing_and_gives_softmax_rows(model):
    features = {"inputs": tf.constant([[3, 4, 5, 1]]), "targets": tf.constant([[6, 7, 1]])}
    plain = model(features, training=False)
    again, scores = model(features, training=False, return_attention_scores=True)
    np.testing.assert_array_equal(plain.numpy(), again.numpy())
    # 2 encoder self, 2 decoder self, 2 encoder-decoder attentions.
    assert sorted(scores) == sorted(
        f"{stack}/layer_{i}/{kind}" for stack, kind in (
            ("decoder", "encdec_attention"), ("decoder", "self_attention"),
            ("encoder", "self_attention")) for i in range(2))
    weights = attention_viz.attention_weights(model, [3, 4, 5, 1], [6, 7, 1])
    assert weights["encoder_self"].shape == (2, 2, 4, 4)
    assert weights["decoder_self"].shape == (2, 2, 3, 3)
    assert weights["encoder_decoder"].shape == (2, 2, 3, 4)
    for matrices in weights.values():
        np.testing.assert_allclose(matrices.sum(-1), 1.0, rtol=1e-5)
    # Decoder self-attention is causal: nothing above the diagonal.
    assert np.all(np.triu(weights["decoder_self"], k=1) < 1e-6)


def test_attention_scores_are_per_call_while_other_threads_run(model):
    """Weights are returned by the call that asks for them: calls on other threads at the
    same time (decode_from_file's parallel batches) neither see nor change them."""
    features = {"inputs": tf.constant([[3, 4, 5, 1]]), "targets": tf.constant([[6, 7, 1]])}
    expected = attention_viz.attention_weights(model, [3, 4, 5, 1], [6, 7, 1])
    other = {"inputs": tf.constant([[8, 9, 1]]), "targets": tf.constant([[5, 1]])}
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        plain = [pool.submit(model, other, training=False) for _ in range(4)]
        pictures = [pool.submit(attention_viz.attention_weights, model, [3, 4, 5, 1],
                                [6, 7, 1]) for _ in range(4)]
        for future in plain:
            assert future.result().shape == (1, 2, 20)
        for future in pictures:
            for kind, matrices in future.result().items():
                np.testing.assert_allclose(matrices, expected[kind], rtol=1e-6)
    assert model(features, training=False).shape == (1, 3, 20)


def test_pictures_and_npz_are_written(model, tmp_path):
    require_extra("matplotlib", "viz")
    weights = attention_viz.attention_weights(model, [3, 4, 5, 1], [6, 7, 1])
    written = attention_viz.plot_attention(weights, ["a", "b", "c", "<EOS>"],
                                           ["x", "y", "<EOS>"], str(tmp_path / "line0"))
    assert [p.rsplit("/", 1)[1] for p in written] == [
        "line0_encoder_self.png", "line0_decoder_self.png", "line0_encoder_decoder.png",
        "line0.npz"]
    for path in written[:3]:
        data = pathlib.Path(path).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    saved = np.load(written[3])
    np.testing.assert_array_equal(saved["encoder_decoder"], weights["encoder_decoder"])
    assert list(saved["output_tokens"]) == ["x", "y", "<EOS>"]


# A subword vocabulary that cuts words into pieces as a 4k vocabulary cuts German: some
# words whole ("Die_"), some in pieces ("Bundes" "regierung_"), the rest letter by letter.
_PIECES = ["Die_", "die_", "hat_", "der_", "und_", "Bundes", "regierung_", "Ver", "ständ",
           "nis_", "Fin", "anz", "institut", "e_", "grenz", "über", "schreit", "end", "en_",
           "Union_", "._", ",_", "in_", "zu_"]
_SENTENCE = ("Die Bundesregierung hat die Verständnis der grenzüberschreitenden "
             "Finanzinstitute und die Verständnis der Union, die Bundesregierung, "
             "zu Finanzinstitute in der Union grenzüberschreitenden Bundesregierung.")


@pytest.fixture(scope="module")
def pieces_encoder(tmp_path_factory):
    alphabet = sorted(set(_SENTENCE + "\\_u;0123456789"))
    subtokens = ["<pad>", "<EOS>"] + _PIECES + alphabet
    vocab = tmp_path_factory.mktemp("pieces") / "vocab.subwords"
    vocab.write_text("".join(f"'{s}'\n" for s in subtokens), encoding="utf-8")
    return text_encoder.SubwordTextEncoder(str(vocab))


def test_piece_labels_show_the_words_the_pieces_form(pieces_encoder):
    ids = pieces_encoder.encode("Die Bundesregierung hat Verständnis.") + [text_encoder.EOS_ID]
    assert attention_viz.token_labels(pieces_encoder, ids) == [
        "Die_", "Bundes", "regierung_", "hat_", "Ver", "ständ", "nis_", "._", "<EOS>"]
    labels = attention_viz.piece_labels(pieces_encoder, ids)
    assert labels == [
        "Die", "Bundes·", "·regierung", "hat", "Ver·", "·ständ·", "·nis·", "·.", "<EOS>"]
    # Lines between words: before "Bundes", "hat", "Ver" and EOS.
    assert attention_viz.word_starts(labels) == [1, 3, 4, 8]
    # A piece that only ends its word (a lone "_" after "Bundes") is a visible blank.
    ids = pieces_encoder.encode("Bundes hat")
    assert attention_viz.token_labels(pieces_encoder, ids) == ["Bundes", "_", "hat_"]
    assert attention_viz.piece_labels(pieces_encoder, ids) == ["Bundes·", "·␣", "hat"]
    # One piece per word (t2t's numeric encoder): the pieces as they are, no joiner.
    numbers = text_encoder.TextEncoder()
    assert attention_viz.piece_labels(numbers, numbers.encode("3 0 7") + [1]) == [
        "3", "0", "7", "<EOS>"]


def _png_size(path) -> tuple[int, int]:
    header = pathlib.Path(path).read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", header[16:24])


def _overlaps(boxes: np.ndarray) -> list[tuple[int, int]]:
    """Pairs of [x0, y0, x1, y1] boxes that share more than a hair (0.5 px) of area."""
    x0, y0, x1, y1 = (boxes[:, k] for k in range(4))
    wide = np.minimum(x1[:, None], x1[None]) - np.maximum(x0[:, None], x0[None])
    high = np.minimum(y1[:, None], y1[None]) - np.maximum(y0[:, None], y0[None])
    clash = np.triu((wide > 0.5) & (high > 0.5), k=1)
    return list(zip(*np.nonzero(clash)))


@pytest.mark.parametrize("subwords,layers,heads", [(60, 4, 8), (100, 2, 4), (5, 2, 2)])
def test_a_real_length_picture_is_narrow_with_no_two_labels_overlapping(
        pieces_encoder, tmp_path, monkeypatch, subwords, layers, heads):
    """The encoder-decoder picture of a `subwords`-piece sentence: under 2,500 px wide, every
    drawn text's box (tick labels, titles, colour bars) inside the picture and apart from every
    other, each panel's colour bar beside it, the pieces labelled as words."""
    require_extra("matplotlib", "viz")
    import matplotlib.figure
    import matplotlib.text

    ids = (pieces_encoder.encode(_SENTENCE * 3)[:subwords - 1]) + [text_encoder.EOS_ID]
    assert len(ids) == subwords
    labels = attention_viz.piece_labels(pieces_encoder, ids)
    assert "Bundes·" in labels or subwords < 10
    rng = np.random.default_rng(0)
    raw = rng.gamma(0.3, size=(layers, heads, subwords - 3, subwords))
    weights = {"encoder_decoder": (raw / raw.sum(-1, keepdims=True)).astype(np.float32)}
    figures = []
    original = matplotlib.figure.Figure.savefig

    def savefig(figure, *args, **kwargs):
        figures.append(figure)
        return original(figure, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    written = attention_viz.plot_attention(weights, labels, labels[3:], str(tmp_path / "s"))
    width, height = _png_size(written[0])
    assert width < 2500
    figure = figures[0]
    assert (width, height) == tuple(round(v) for v in figure.bbox.size)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(figure)  # saved and closed: drawn again, as it was saved
    canvas.draw()
    renderer = canvas.get_renderer()
    texts = [t for t in figure.findobj(matplotlib.text.Text)
             if t.get_visible() and t.get_text().strip()]
    boxes = np.array([t.get_window_extent(renderer).extents for t in texts])
    shown = [t.get_text() for t in texts]
    # Every piece is drawn as a label once per panel (columns and rows of each layer).
    assert sum(text == labels[-1] for text in shown) == 2 * layers  # "<EOS>" on both axes
    assert shown.count(f"layer {layers - 1} (mean of {heads} heads)") == 1
    assert boxes[:, 0].min() >= 0 and boxes[:, 1].min() >= 0
    assert boxes[:, 2].max() <= width and boxes[:, 3].max() <= height
    clashes = _overlaps(boxes)
    assert not clashes, [(shown[i], shown[j]) for i, j in clashes[:5]]
    heatmaps = [ax for ax in figure.axes if ax.images]
    bars = [ax for ax in figure.axes if not ax.images]
    assert len(heatmaps) == len(bars) == layers
    for heat, bar in zip(heatmaps, bars):  # each bar just right of its own panel
        heat_box, bar_box = heat.get_window_extent(renderer), bar.get_window_extent(renderer)
        assert 0 < bar_box.x0 - heat_box.x1 < 20 and bar_box.y1 == pytest.approx(heat_box.y1)
        assert bar.get_ylabel() == "attention weight"
    # The panels of a layer are squares of at least 14 px a piece up to 100 pieces.
    cell = heatmaps[0].get_window_extent(renderer).width / subwords
    assert cell >= 14 - 1e-9
    for a, b in itertools.combinations(heatmaps, 2):
        assert not a.get_window_extent(renderer).overlaps(b.get_window_extent(renderer))
