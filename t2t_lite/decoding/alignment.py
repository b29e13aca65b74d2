"""Word alignments from the encoder-decoder attention, in the Pharaoh format `i-j`.

What it is: attention, not a trained aligner. Row t of the attention of a decoder layer
(mean over its heads) is the distribution over the source subwords that the decoder read
when it produced target subword t. The pieces are merged to words (the whitespace-separated
words of the source line and of the output line): a word pair's weight is the attention
summed over the target word's pieces and the source word's pieces, and every target word
is linked to the source word of highest weight (EOS and padding take part in neither).
A line is `i-j` pairs (source word i, target word j, both 0-based) in the order of the
target words, space-separated, as fast_align and Marian write them.

Which piece belongs to which word comes from the encoder alone: piece k is in word
`len(words(decode(ids[:k + 1]))) - 1` (a piece that only adds whitespace joins the word
before it), so any encoder that decodes prefixes of its ids works (SubwordTextEncoder,
t2t's numeric TextEncoder, ...). `export.export` computes the same in the graph.

Pure numpy: importable before TensorFlow.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from t2t_lite.hparams import HParams

# ASCII whitespace splits words, as tf.strings.split does in the SavedModel's graph.
_WORD = re.compile(r"[^ \t\n\r\f\v]+")

# t2t_lite's own decode hparams of this feature: name -> default. They join the decode
# hparams only when `--decode_hparams` sets them, so that the set is t2t's otherwise.
DECODE_HPARAMS = {"return_alignment": False, "alignment_layer": -1}


def parse_decode_hparams(hp: HParams, overrides: str) -> HParams:
    """`hp.parse(overrides)` that also knows `return_alignment` (write
    `<decode_to_file>.align`) and `alignment_layer` (the decoder layer whose attention
    aligns; -1 = the last).

    Raises:
      ValueError: one line, alignment_layer without return_alignment=true (or a parse error).
    """
    for name, value in DECODE_HPARAMS.items():
        if re.search(rf"(^|,)\s*{name}\s*=", overrides) and name not in hp:
            hp.add_hparam(name, value)
    hp.parse(overrides)
    if "alignment_layer" in hp and not hp.get("return_alignment"):
        raise ValueError(f"--decode_hparams: alignment_layer={hp.alignment_layer} applies to "
                         "word alignments: add return_alignment=true")
    return hp


def layer(decode_hp: HParams) -> int | None:
    """The decoder layer that aligns, or None when no alignment is asked for."""
    if not decode_hp.get("return_alignment"):
        return None
    return int(decode_hp.get("alignment_layer", DECODE_HPARAMS["alignment_layer"]))


def word_count(text: str) -> int:
    """The number of whitespace-separated words of `text`."""
    return len(_WORD.findall(text))


def piece_words(encoder: Any, ids: Sequence[int]) -> np.ndarray:
    """The word of each piece of `ids` (see the module docstring).

    Args:
      encoder: `.decode(ids) -> str`.
      ids: subword ids without EOS or padding.

    Returns:
      int [len(ids)], the 0-based word index of each piece (-1: before the first word).
    """
    return np.array([word_count(encoder.decode(list(ids[: k + 1]))) - 1
                     for k in range(len(ids))], dtype=np.int64)


def hard_alignment(attention: np.ndarray, source_words: np.ndarray,
                   target_words: np.ndarray) -> list[tuple[int, int]]:
    """Links every target word to the source word it attended to most.

    Args:
      attention: float [T, L] (rows: target pieces, columns: source pieces; extra rows and
        columns beyond `target_words` / `source_words` are ignored).
      source_words: int [L'] word of each source piece (-1: none), L' <= L.
      target_words: int [T'] word of each target piece (-1: none), T' <= T.

    Returns:
      [(i, j)]: source word i, target word j, one pair per target word, by j.
    """
    source_words, target_words = np.asarray(source_words), np.asarray(target_words)
    sources = int(source_words.max(initial=-1)) + 1
    targets = int(target_words.max(initial=-1)) + 1
    if not sources or not targets:
        return []
    source_onehot = np.eye(sources + 1)[source_words][:, :sources]  # -1 -> zero row
    target_onehot = np.eye(targets + 1)[target_words][:, :targets]
    weights = np.asarray(attention, np.float64)[: len(target_words), : len(source_words)]
    by_word = target_onehot.T @ weights @ source_onehot  # [targets, sources]
    return [(int(i), j) for j, i in enumerate(by_word.argmax(axis=1))
            if target_onehot[:, j].any()]


def pharaoh(pairs: Sequence[tuple[int, int]]) -> str:
    """`i-j i-j ...` of (source, target) word pairs."""
    return " ".join(f"{i}-{j}" for i, j in pairs)


def _until(ids: Sequence[int], stops: tuple[int, ...]) -> list[int]:
    """The ids before the first of `stops`."""
    kept = []
    for i in np.asarray(ids).reshape(-1).tolist():
        if i in stops:
            break
        kept.append(int(i))
    return kept


def alignment_line(attention: np.ndarray, source_ids: Sequence[int],
                   target_ids: Sequence[int], inputs_encoder: Any, targets_encoder: Any) -> str:
    """The Pharaoh line of one output.

    Args:
      attention: float [T, L] (target pieces x source pieces, extra rows / columns ignored).
      source_ids: the input's subword ids without EOS.
      target_ids: the output's subword ids without EOS.
      inputs_encoder, targets_encoder: decode ids to text.

    Returns:
      `i-j ...`.
    """
    return pharaoh(hard_alignment(attention, piece_words(inputs_encoder, source_ids),
                                  piece_words(targets_encoder, target_ids)))


def alignment_lines(inputs: np.ndarray, outputs: np.ndarray, attention: np.ndarray,
                    inputs_encoder: Any, targets_encoder: Any, eos_id: int = 1) -> list[str]:
    """The Pharaoh line of every row of a decoded batch.

    Args:
      inputs: int [B, L] input ids (EOS, 0-padding).
      outputs: int [B, T] the decoded ids (or [B, K, T]: the best beam aligns).
      attention: float [B, T, L] the aligning layer's encoder-decoder attention, mean over
        its heads, of the best outputs (`model.infer(..., alignment_layer=l)["attention"]`).
      inputs_encoder, targets_encoder: decode ids to text.
      eos_id: the id that ends a row.

    Returns:
      B strings.
    """
    outputs = np.asarray(outputs)
    if outputs.ndim == 3:
        outputs = outputs[:, 0]
    # The source up to its EOS (then padding); the target as the decodes file has it
    # (`text_batches.save_until_eos`).
    return [alignment_line(attention[row], _until(source, (eos_id, 0)),
                           _until(target, (eos_id,)), inputs_encoder, targets_encoder)
            for row, (source, target) in enumerate(zip(inputs, outputs))]
