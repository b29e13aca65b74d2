"""Attention pictures of a translation (t2t's attention visualisation, as PNG and .npz).

t2t shipped a notebook that decodes a sentence and then shows the attention of the model over
that (input, output) pair: encoder self-attention, decoder self-attention and encoder-decoder
attention, per layer and head. Here the same weights come from one teacher-forced forward
pass over the input ids and the decoded ids (both ending in EOS), returned by the model
(`return_attention_scores=True`); each kind is one PNG per sentence (a row per
layer, a column per head, the subword tokens on the axes), and every matrix goes into one
.npz per sentence.
"""
from __future__ import annotations

import re
from typing import Any

import numpy as np

KINDS = {
    "encoder_self": ("encoder", "self_attention"),
    "decoder_self": ("decoder", "self_attention"),
    "encoder_decoder": ("decoder", "encdec_attention"),
}


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


def plot_attention(weights: dict[str, np.ndarray], input_tokens: list[str],
                   output_tokens: list[str], prefix: str) -> list[str]:
    """Writes `<prefix>_<kind>.png` for each kind and `<prefix>.npz` with every matrix.

    Args:
      weights: from `attention_weights`.
      input_tokens: a label per input position (subword strings, "<EOS>" last).
      output_tokens: a label per output position.
      prefix: path prefix of the files.

    Returns:
      The files written.
    """
    plt = _pyplot()
    axis_labels = {"encoder_self": (input_tokens, input_tokens),
                   "decoder_self": (output_tokens, output_tokens),
                   "encoder_decoder": (output_tokens, input_tokens)}
    written = []
    for kind, matrices in weights.items():
        rows, cols = matrices.shape[:2]
        query_labels, key_labels = axis_labels[kind]
        size = 0.25 * max(len(key_labels), 8) + 1.5
        figure, axes = plt.subplots(rows, cols, figsize=(size * cols, size * rows),
                                    squeeze=False, dpi=80)
        for layer in range(rows):
            for head in range(cols):
                ax = axes[layer][head]
                image = ax.imshow(matrices[layer, head], vmin=0.0, vmax=1.0, cmap="viridis")
                ax.set_title(f"layer {layer}, head {head}", fontsize=9)
                ax.set_xticks(range(len(key_labels)))
                ax.set_xticklabels(key_labels, rotation=90, fontsize=7)
                ax.set_yticks(range(len(query_labels)))
                ax.set_yticklabels(query_labels, fontsize=7)
        figure.suptitle(kind.replace("_", " ") + " attention (rows attend to columns)")
        figure.tight_layout()
        # One scale for every head (all are drawn on 0..1): the weights can be read off.
        figure.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label="attention weight")
        path = f"{prefix}_{kind}.png"
        figure.savefig(path)
        plt.close(figure)
        written.append(path)
    np.savez(f"{prefix}.npz", input_tokens=np.array(input_tokens),
             output_tokens=np.array(output_tokens), **weights)
    written.append(f"{prefix}.npz")
    return written


def token_labels(encoder: Any, ids: list[int]) -> list[str]:
    """One readable label per id (the subword string, `_` marking a word end)."""
    strings = getattr(encoder, "all_subtoken_strings", None)
    if strings is not None:
        return [strings[i] if 0 <= i < len(strings) else f"<{i}>" for i in ids]
    return [encoder.decode([i]) for i in ids]

