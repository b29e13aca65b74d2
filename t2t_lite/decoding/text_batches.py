"""Text records to id batches and decoded ids back to text, as t2t-decoder does them; used by
decode mode (`decoding.decode_lines`), the exports' checks and the translation server.

* in: `sort_inputs` (t2t's stable sort by word count, longest first; `follow_sort` puts
  parallel lists in that order), `encode_input` (the problem's input encoder plus EOS,
  truncated to `max_input_size - 1` ids first when > 0: `input_length_limit`),
  `pad_batch` / `batch_inputs` (0-padded int32 [B, L] batches), `check_id_inputs` (records
  of id-reading encoders), `longest_input` (the memory estimate before a model loads);
* out: `save_until_eos`, `beam_texts`, `format_decodes` (t2t's output records: the best beam,
  or the K beams tab-joined, with `write_beam_scores` their scores; `format_options` selects
  them from the decode hparams), `nbest_lines` (fairseq's / Marian's n-best lines).

Pure numpy and Python (no TensorFlow), so that they work with any model.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from t2t_lite.data_generators.text_encoder import EOS_ID
from t2t_lite.errors import UserError
from t2t_lite.hparams import HParams


def check_id_inputs(records: Sequence[str], encoder: Any, source: str,
                    delimiter: str = "\n", first_line: int = 1) -> None:
    """Refuses a record holding a token that is not an integer id, when the problem's input
    encoder reads ids (t2t's plain `TextEncoder`, e.g. the algorithmic problems).

    Args:
      records: the records of `read_inputs`.
      encoder: the problem's input encoder (other encoders accept any text).
      source: where they come from, for the message: "--decode_from_file=F", "stdin".
      delimiter: the record separator (records are lines when it is "\n").
      first_line: the line number of the first record.

    Raises:
      UserError: "--decode_from_file=F:2: 'x' is not a token id; ...".
    """
    from t2t_lite.data_generators import text_encoder

    if type(encoder).encode is not text_encoder.TextEncoder.encode:
        return
    for number, record in enumerate(records, start=first_line):
        for token in record.split():
            try:
                int(token)
            except ValueError:
                where = f"{number}" if delimiter == "\n" else f" record {number}"
                raise UserError(
                    f"{source}:{where}: {token!r} is not a token id; "
                    "this problem's inputs are integer ids separated by spaces") from None


def sort_inputs(inputs: Sequence[str]) -> tuple[list[str], list[int]]:
    """Stable sort by number of whitespace-separated words, longest first (t2t's order).

    Args:
      inputs: records in file order.

    Returns:
      (sorted_inputs, sorted_keys): sorted_keys[i] = position of input i in sorted_inputs.
    """
    order = sorted(range(len(inputs)), key=lambda i: -len(inputs[i].split()))
    sorted_keys = [0] * len(inputs)
    for position, index in enumerate(order):
        sorted_keys[index] = position
    return [inputs[i] for i in order], sorted_keys


def follow_sort(items: Sequence | None, sorted_keys: Sequence[int]) -> list | None:
    """`items` parallel to the inputs, put in the inputs' sorted order (`sort_inputs`'s
    `sorted_keys`); None stays None."""
    if items is None:
        return None
    ordered = [None] * len(items)
    for index, position in enumerate(sorted_keys):
        ordered[position] = items[index]
    return ordered


def input_length_limit(decode_hp: HParams) -> int | None:
    """The one input-length rule of decode mode and export (t2t's `max_input_size`).

    Args:
      decode_hp: decode hparams.

    Returns:
      `max_input_size` when > 0: an input longer than that is cut to its first
      `max_input_size - 1` ids plus EOS; else None: inputs are never cut (t2t's default).
    """
    return int(decode_hp.max_input_size) if decode_hp.max_input_size > 0 else None


def longest_input(records: Sequence[str], encoder: Any, max_input_size: int = -1,
                  candidates: int = 64) -> tuple[int, int]:
    """The record that encodes longest and its length in ids with EOS, as decoded (cut by
    `max_input_size` when > 0), for the memory estimate before the model loads.

    Only the `candidates` records longest in characters are encoded (a subword or id never
    spans less than one character), so a large file is not encoded twice.

    Args:
      records: the records of `read_inputs`.
      encoder: the problem's input encoder.
      max_input_size: see `encode_input`.
      candidates: how many records to encode.

    Returns:
      (record number from 1, length); (0, 0) for no records.
    """
    longest = sorted(range(len(records)), key=lambda i: -len(records[i]))[:candidates]
    best = (0, 0)
    for index in longest:
        length = len(encode_input(records[index], encoder, max_input_size))
        if length > best[1]:
            best = (index + 1, length)
    return best


def encode_input(text: str, encoder: Any, max_input_size: int = -1) -> list[int]:
    """`encoder.encode(text)`, truncated to `max_input_size - 1` ids when > 0, plus EOS."""
    ids = list(encoder.encode(text))
    if max_input_size > 0:
        ids = ids[: max_input_size - 1]
    return ids + [EOS_ID]


def pad_batch(id_lists: Sequence[Sequence[int]]) -> np.ndarray:
    """int32 [B, max length] with each list right-padded with 0."""
    length = max(len(ids) for ids in id_lists)
    batch = np.zeros((len(id_lists), length), np.int32)
    for row, ids in enumerate(id_lists):
        batch[row, : len(ids)] = ids
    return batch


def batch_inputs(sorted_inputs: Sequence[str], encoder: Any, batch_size: int,
                 max_input_size: int = -1) -> Iterator[np.ndarray]:
    """Yields the encoded batches of t2t's `_decode_batch_input_fn`, in order.

    Args:
      sorted_inputs: records, already sorted.
      encoder: the problem's input encoder (`.encode(str) -> list[int]`).
      batch_size: records per batch.
      max_input_size: see `encode_input`.

    Yields:
      int32 [B, L] batches (B = batch_size except possibly the last), each row ending in EOS
      before its padding.
    """
    for start in range(0, len(sorted_inputs), batch_size):
        chunk = sorted_inputs[start: start + batch_size]
        yield pad_batch([encode_input(text, encoder, max_input_size) for text in chunk])


def save_until_eos(ids: np.ndarray) -> np.ndarray:
    """The ids before the first EOS (all of them when there is none), flattened."""
    ids = np.asarray(ids).reshape(-1)
    eos = np.flatnonzero(ids == EOS_ID)
    return ids[: eos[0]] if eos.size else ids


def beam_texts(outputs: np.ndarray, scores: np.ndarray | None, targets_encoder: Any,
               skip_eos_postprocess: bool = False,
               identity_output: bool = False) -> list[list[tuple[str, float | None]]]:
    """The (text, score) of every beam of every batch row, best first.

    Args:
      outputs: int [B, T] (one beam per row) or [B, K, T].
      scores: float [B] or [B, K], or None (scores then None).
      targets_encoder, skip_eos_postprocess, identity_output: as `format_decodes`.

    Returns:
      B lists of K (text, score) pairs.
    """

    def text(ids) -> str:
        if identity_output:
            return " ".join(str(i) for i in np.asarray(ids).reshape(-1))
        ids = np.asarray(ids).reshape(-1) if skip_eos_postprocess else save_until_eos(ids)
        return targets_encoder.decode(ids)

    outputs = np.asarray(outputs)
    if outputs.ndim == 2:  # beam_size 1: one beam per row
        outputs = outputs[:, None, :]
    if scores is not None:
        scores = np.asarray(scores).reshape(outputs.shape[:2])
    return [[(text(beam), None if scores is None else float(scores[row][k]))
             for k, beam in enumerate(beams)] for row, beams in enumerate(outputs)]


def format_decodes(outputs: np.ndarray, scores: np.ndarray | None, targets_encoder: Any,
                   return_beams: bool = False, write_beam_scores: bool = False,
                   skip_eos_postprocess: bool = False,
                   identity_output: bool = False) -> list[str]:
    """One output record per batch row, as t2t writes them.

    Args:
      outputs: int [B, T], or [B, K, T] for several beams (best first).
      scores: float [B] or [B, K] (needed with write_beam_scores).
      targets_encoder: `.decode(ids) -> str`.
      return_beams: tab-join the K beams of a row.
      write_beam_scores: with return_beams, follow each beam by "\\t%.2f" of its score.
      skip_eos_postprocess: decode every id, not only those before the first EOS.
      identity_output: write the ids as space-separated numbers instead of text (all of
        them, as t2t's identity_output does).

    Returns:
      B strings.
    """
    outputs = np.asarray(outputs)
    if not return_beams and outputs.ndim == 3:  # several beams but only the best is wanted
        outputs, scores = outputs[:, 0], None
    if not return_beams:
        scores = None
    rows = beam_texts(outputs, scores, targets_encoder, skip_eos_postprocess, identity_output)
    if not return_beams:
        return [beams[0][0] for beams in rows]
    if write_beam_scores and scores is None:
        raise ValueError("write_beam_scores needs the model's scores")
    if write_beam_scores:
        return ["\t".join(f"{t}\t{score:.2f}" for t, score in beams) for beams in rows]
    return ["\t".join(t for t, _ in beams) for beams in rows]


def nbest_lines(beams_by_line: Sequence[Sequence[tuple[str, float]]]) -> list[str]:
    """fairseq's and Marian's n-best lines: `index ||| text ||| score` for every beam of
    every input line (index 0-based, in input order, beams best first)."""
    return [f"{index} ||| {text} ||| {score:.6f}"
            for index, beams in enumerate(beams_by_line) for text, score in beams]


def format_options(decode_hp: HParams) -> dict:
    """The `format_decodes` keyword arguments that the decode hparams select."""
    return {"return_beams": decode_hp.return_beams,
            "write_beam_scores": decode_hp.write_beam_scores,
            "skip_eos_postprocess": decode_hp.skip_eos_postprocess,
            "identity_output": decode_hp.identity_output}
