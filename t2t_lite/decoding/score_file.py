"""t2t-decoder's `--score_file`: the teacher-forced loss of given (input, target) pairs,
instead of decoding."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from t2t_lite import file_io
from t2t_lite.decoding.text_batches import encode_input, pad_batch


def read_score_file(filename: str) -> list[tuple[str, str]]:
    """The (input, target) pairs of a `--score_file` (one `input<TAB>target` per line).

    Raises:
      ValueError: naming file:line of a line without exactly one tab.
    """
    pairs = []
    with open(filename, encoding=file_io.TEXT_ENCODING) as f:
        for number, line in enumerate(f, start=1):
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 2:
                raise ValueError(f"{filename}:{number}: expected 'input<TAB>target', got "
                                 f"{len(fields) - 1} tabs")
            pairs.append((fields[0].strip(), fields[1].strip()))
    return pairs


def score_pairs(model: Any, pairs: Sequence[tuple[str, str]], encoders: dict,
                target_space_id: int = 0, loss_multiplier: float = 1.0,
                batch_size: int = 32) -> list[float]:
    """t2t-decoder's `--score_file` scores: each pair's mean per-token loss.

    The loss is t2t's eval loss of the teacher-forced model on that one pair (no dropout, no
    label smoothing, EOS appended to both sides, times the problem's loss_multiplier).
    Pairs are run in padded batches; padding changes no pair's loss.

    Args:
      model: the Transformer (`model(features, training=False) -> logits [B, T, V]`).
      pairs: (input text, target text).
      encoders: {"inputs", "targets"} text encoders.
      target_space_id: the problem's target space id.
      loss_multiplier: the problem's loss_multiplier.
      batch_size: pairs per forward pass.

    Returns:
      One float per pair.
    """
    import tensorflow as tf

    from t2t_lite.layers import common_layers

    inputs_encoder = encoders.get("inputs", encoders["targets"])
    scores = []
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start: start + batch_size]
        inputs = pad_batch([encode_input(source, inputs_encoder) for source, _ in chunk])
        targets = pad_batch([encode_input(target, encoders["targets"]) for _, target in chunk])
        logits = model({"inputs": tf.constant(inputs), "targets": tf.constant(targets),
                        "target_space_id": tf.constant(target_space_id)}, training=False)
        for row in range(len(chunk)):
            num, den = common_layers.padded_cross_entropy(
                logits[row: row + 1], targets[row: row + 1], 0.0)
            scores.append(float(num) * loss_multiplier / max(float(den), 1.0))
    return scores
