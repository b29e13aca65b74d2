"""Attention pictures of a translation (t2t's attention visualisation, as PNG and .npz).

t2t shipped a notebook that decodes a sentence and then shows the attention of the model over
that (input, output) pair: encoder self-attention, decoder self-attention and encoder-decoder
attention, per layer and head. Here the same weights come from one teacher-forced forward
pass over the input ids and the decoded ids (both ending in EOS), returned by the model
(`return_attention_scores=True`); every matrix (each layer and head) goes into one .npz per
sentence, and each kind is one PNG per sentence.

The PNGs are made to be read at real sentence lengths (40-100 subwords): one panel per
layer, the mean of its heads (the per-head weights are in the .npz and on the serve page),
each panel with its own colour bar beside it; cells at least 14 px with labels that fit in
them, so that no two labels overlap; panels side by side up to `MAX_WIDTH_PX`, then in rows.
The axes are labelled with the pieces as the words they form (`piece_labels`: `Ver·` `·stand`
are two pieces of one word) and thin lines separate the words.
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
from typing import Any

import numpy as np

KINDS = {
    "encoder_self": ("encoder", "self_attention"),
    "decoder_self": ("decoder", "self_attention"),
    "encoder_decoder": ("decoder", "encdec_attention"),
}
# Marks the side of a piece where the rest of its word continues: "Ver·", "·stand".
JOINER = "·"
MAX_LABEL_CHARS = 16
# The widest picture: panels are laid out side by side up to this width, then in rows.
MAX_WIDTH_PX = 2400
DPI = 100
# Whitespace splits words, as in `decoding.alignment` (the words of the word alignments).
_WORD = re.compile(r"[^ \t\n\r\f\v]+")


def attention_weights(model: Any, input_ids: list[int], output_ids: list[int],
                      target_space_id: int = 0) -> dict[str, np.ndarray]:
    """The model's attention over one (input, output) pair, teacher-forced.

    Args:
      model: a t2t_lite Transformer.
      input_ids: the input ids, EOS included.
      output_ids: the output ids, EOS included.
      target_space_id: the problem's target space id.

    Returns:
      {"encoder_self": [N, H, L, L], "decoder_self": [N, H, T, T],
       "encoder_decoder": [N, H, T, L]} float32, N layers, H heads, L inputs, T outputs.
    """
    import tensorflow as tf

    features = {"inputs": tf.constant([input_ids], tf.int32),
                "targets": tf.constant([output_ids], tf.int32),
                "target_space_id": tf.constant(target_space_id, tf.int32)}
    _, scores = model(features, training=False, return_attention_scores=True)
    result = {}
    for kind, (stack, sublayer) in KINDS.items():
        layers = [(path, weights) for path, weights in scores.items()
                  if path.startswith(f"{stack}/") and path.endswith(f"/{sublayer}")]
        layers.sort(key=lambda item: int(re.search(r"layer_(\d+)", item[0]).group(1)))
        result[kind] = np.stack([np.asarray(w, np.float32)[0] for _, w in layers])
    return result


def _pyplot():
    from t2t_lite.visualization.plots import _pyplot as pyplot

    return pyplot()


def token_labels(encoder: Any, ids: list[int]) -> list[str]:
    """One raw label per id (the subword string, `_` marking a word end); the serve API's
    `source_pieces` / `target_pieces`."""
    strings = getattr(encoder, "all_subtoken_strings", None)
    if strings is not None:
        return [strings[i] if 0 <= i < len(strings) else f"<{i}>" for i in ids]
    return [encoder.decode([i]) for i in ids]


def piece_labels(encoder: Any, ids: list[int]) -> list[str]:
    """One readable label per id: the text the piece adds to the line, with `JOINER` on the
    side where its word goes on (`Ver·`, `·stand` for the pieces of "Verstand"; "That" for
    the one-piece word `That_`); reserved ids (EOS, padding) keep their names.

    Which pieces form a word follows `decoding.alignment.piece_words`: piece k belongs to word
    `len(words(decode(ids[:k + 1]))) - 1`, so any encoder that decodes prefixes of its ids
    works (subwords, SentencePiece, bytes, t2t's numeric encoder).

    Args:
      encoder: `.decode(ids) -> str` (and `num_reserved_ids`, default 2).
      ids: [T] ids, EOS included.

    Returns:
      [T] labels of at most MAX_LABEL_CHARS + 2 characters.
    """
    reserved = getattr(encoder, "num_reserved_ids", 2) or 0
    raw = token_labels(encoder, ids)
    texts, words = [], []  # per id: its text, its word (None for reserved ids)
    so_far: list[int] = []
    previous = ""
    for k, piece_id in enumerate(ids):
        if 0 <= piece_id < reserved:  # "<EOS>" (a subword vocab's "<EOS>_"), "</s>"
            name = raw[k]
            texts.append(name[:-1] if name.startswith("<") and name.endswith(">_") else name)
            words.append(None)
            continue
        so_far.append(int(piece_id))
        text = encoder.decode(so_far)
        added = text[len(previous):] if text.startswith(previous) else raw[k]
        previous = text
        # A piece that adds only whitespace, or nothing but ends a word (a subword vocab's
        # lone "_", SentencePiece's lone "▁"), shows "␣"; another empty one shows itself.
        blank = not added.strip() and (added or not raw[k].strip("_▁ "))
        texts.append("␣" if blank else added.strip() or raw[k])
        words.append(len(_WORD.findall(text)) - 1)
    labels = []
    for k, text in enumerate(texts):
        if len(text) > MAX_LABEL_CHARS:
            text = text[:MAX_LABEL_CHARS - 1] + "…"
        word = words[k]
        if word is not None and word >= 0:
            if k > 0 and words[k - 1] == word:
                text = JOINER + text
            if k + 1 < len(words) and words[k + 1] == word:
                text = text + JOINER
        labels.append(text)
    return labels


def word_starts(labels: list[str]) -> list[int]:
    """The positions where a new word starts (every label that does not begin with JOINER),
    the first position excluded: where the picture draws a line between words."""
    return [k for k in range(1, len(labels)) if not labels[k].startswith(JOINER)]


@dataclasses.dataclass(frozen=True)
class PanelGeometry:
    """Pixel sizes of one panel of an attention picture (heatmap, its labels, its colour bar).

    Horizontally: axis name, y labels, heatmap, colour bar; vertically: title, heatmap,
    x labels (turned upright), axis name. Every label fits in its cell: font height < cell.
    """
    cell: float
    font_pt: float
    y_labels: float  # width of the y tick labels with their pad
    x_labels: float  # height of the (rotated) x tick labels with their pad
    heat_width: float
    heat_height: float
    title: float = 26.0
    axis_name: float = 20.0
    colour_bar: float = 84.0  # gap, bar, tick labels, its label
    margin: float = 14.0

    @property
    def width(self) -> float:
        return (self.margin + self.axis_name + self.y_labels + self.heat_width
                + self.colour_bar + self.margin)

    @property
    def height(self) -> float:
        return (self.title + self.heat_height + self.x_labels + self.axis_name
                + self.margin)


def _escape(label: str) -> str:
    return label.replace("$", r"\$")  # a label is text, never mathtext


def _text_width(text: str, font_pt: float) -> float:
    """The width in pixels of `text` drawn in `font_pt` points (at DPI)."""
    from matplotlib.backends.backend_agg import RendererAgg
    from matplotlib.font_manager import FontProperties

    renderer = RendererAgg(10, 10, DPI)
    return renderer.get_text_width_height_descent(text, FontProperties(size=font_pt),
                                                  ismath=False)[0]


def panel_geometry(query_labels: list[str], key_labels: list[str]) -> PanelGeometry:
    """The geometry of a panel of len(query_labels) rows and len(key_labels) columns: cells
    of 14-32 px (fewer than 14 only where a panel of 14 px cells would not fit in
    MAX_WIDTH_PX), a font whose line height is under the cell, label widths measured."""
    from matplotlib.backends.backend_agg import RendererAgg
    from matplotlib.font_manager import FontProperties

    longest = max(len(query_labels), len(key_labels), 1)
    cell = min(32.0, max(14.0, 640.0 / longest))
    renderer = RendererAgg(10, 10, DPI)

    def measure(cell_px):
        # DejaVu Sans: a line (ascent + descent) is about 1.17 em; keep 2 px between lines.
        font_pt = (cell_px - 2.0) / 1.2 * 72.0 / DPI
        font = FontProperties(size=font_pt)

        def widest(labels):
            return max((renderer.get_text_width_height_descent(label, font, ismath=False)[0]
                        for label in labels), default=0.0)

        return font_pt, widest(query_labels) + 8.0, widest(key_labels) + 8.0

    font_pt, y_labels, x_labels = measure(cell)
    fixed = PanelGeometry(cell, font_pt, y_labels, x_labels, 0.0, 0.0).width
    if fixed + cell * len(key_labels) > MAX_WIDTH_PX:
        cell = max(8.0, (MAX_WIDTH_PX - fixed) / max(len(key_labels), 1))
        font_pt, y_labels, x_labels = measure(cell)
    return PanelGeometry(cell, font_pt, y_labels, x_labels, cell * len(key_labels),
                         cell * len(query_labels))


def attention_figure(matrices: np.ndarray, query_labels: list[str], key_labels: list[str],
                     title: str, query_name: str = "rows", key_name: str = "columns"):
    """The picture of one kind of attention: a panel per layer (the mean of its heads).

    Args:
      matrices: float [N, H, T, L] (N layers, H heads, T queries, L keys).
      query_labels: [T] labels of the rows (`piece_labels`).
      key_labels: [L] labels of the columns.
      title: the figure's title.
      query_name, key_name: what the rows and the columns are ("output pieces", ...).

    Returns:
      A matplotlib Figure (not saved; the caller saves and closes it), DPI dots per inch.
    """
    import matplotlib.colors

    plt = _pyplot()
    layers, heads = matrices.shape[:2]
    geometry = panel_geometry(query_labels, key_labels)
    columns = max(1, min(layers, int((MAX_WIDTH_PX - 20) // geometry.width)))
    rows = -(-layers // columns)
    header = 40.0
    # Whole pixels: the PNG is exactly the figure (texts' boxes are where they are drawn).
    width = float(math.ceil(max(columns * geometry.width, _text_width(title, 11) + 10.0)
                            + 20.0))
    height = float(math.ceil(header + rows * geometry.height + 10.0))
    figure = plt.figure(figsize=(width / DPI, height / DPI), dpi=DPI)
    figure.text(10.0 / width, 1.0 - 12.0 / height, title, fontsize=11, va="top")

    def box(left, top, w, h):  # pixels from the top-left -> figure fractions
        return [left / width, 1.0 - (top + h) / height, w / width, h / height]

    # Square root of the weight: spread-out attention stays visible; the bar reads weights.
    norm = matplotlib.colors.PowerNorm(gamma=0.5, vmin=0.0, vmax=1.0)
    g = geometry
    for layer in range(layers):
        left0 = 10.0 + (layer % columns) * g.width
        top0 = header + (layer // columns) * g.height
        heat_left = left0 + g.margin + g.axis_name + g.y_labels
        heat_top = top0 + g.title
        ax = figure.add_axes(box(heat_left, heat_top, g.heat_width, g.heat_height))
        mean = np.asarray(matrices[layer], np.float32).mean(axis=0)
        image = ax.imshow(mean, norm=norm, cmap="viridis", aspect="auto",
                          interpolation="nearest")
        ax.set_title(f"layer {layer} (mean of {heads} heads)", fontsize=9, pad=4)
        ax.set_xticks(range(len(key_labels)))
        ax.set_xticklabels([_escape(l) for l in key_labels], rotation=90,
                           fontsize=g.font_pt)
        ax.set_yticks(range(len(query_labels)))
        ax.set_yticklabels([_escape(l) for l in query_labels], fontsize=g.font_pt)
        ax.tick_params(length=2, pad=2)
        ax.set_xlabel(key_name, fontsize=8, labelpad=2)
        ax.set_ylabel(query_name, fontsize=8, labelpad=2)
        for k in word_starts(key_labels):
            ax.axvline(k - 0.5, color="white", linewidth=0.5, alpha=0.45)
        for k in word_starts(query_labels):
            ax.axhline(k - 0.5, color="white", linewidth=0.5, alpha=0.45)
        bar_axes = figure.add_axes(box(heat_left + g.heat_width + 8.0, heat_top, 12.0,
                                       min(g.heat_height, 320.0)))
        bar = figure.colorbar(image, cax=bar_axes, ticks=[0.0, 0.05, 0.2, 0.5, 1.0])
        bar.ax.tick_params(labelsize=7, length=2, pad=2)
        bar.set_label("attention weight", fontsize=7, labelpad=2)
    return figure


_TITLES = {"encoder_self": "Encoder self", "decoder_self": "Decoder self",
           "encoder_decoder": "Encoder-decoder"}
_AXES = {"encoder_self": ("input pieces", "input pieces"),
         "decoder_self": ("output pieces", "output pieces"),
         "encoder_decoder": ("output pieces", "input pieces")}


def plot_attention(weights: dict[str, np.ndarray], input_tokens: list[str],
                   output_tokens: list[str], prefix: str) -> list[str]:
    """Writes `<prefix>_<kind>.png` for each kind and `<prefix>.npz` with every matrix.

    Args:
      weights: from `attention_weights`.
      input_tokens: a label per input position (`piece_labels`, "<EOS>" last).
      output_tokens: a label per output position.
      prefix: path prefix of the files.

    Returns:
      The files written.
    """
    plt = _pyplot()
    labels = {"input pieces": input_tokens, "output pieces": output_tokens}
    written = []
    for kind, matrices in weights.items():
        query_name, key_name = _AXES[kind]
        title = (f"{_TITLES[kind]} attention: rows ({query_name}) attend to columns "
                 f"({key_name}); Ver{JOINER} {JOINER}stand: pieces of one word; "
                 f"each head: {os.path.basename(prefix)}.npz")
        figure = attention_figure(matrices, labels[query_name], labels[key_name], title,
                                  query_name, key_name)
        path = f"{prefix}_{kind}.png"
        figure.savefig(path, dpi=DPI)
        plt.close(figure)
        written.append(path)
    np.savez(f"{prefix}.npz", input_tokens=np.array(input_tokens),
             output_tokens=np.array(output_tokens), **weights)
    written.append(f"{prefix}.npz")
    return written
