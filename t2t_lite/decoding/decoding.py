"""Decoding: `run.py --mode=decode` (t2t-decoder, tensor2tensor's `utils/decoding.py`).

Three sources, as in t2t:

* `--decode_from_file=F`: the records of F (split on the `delimiter` decode hparam, stripped,
  a final empty record dropped) are stable-sorted by word count, longest first, cut into
  batches of `batch_size` (32 when 0), encoded with the problem's input encoder plus EOS
  (truncated to `max_input_size - 1` ids first when > 0) and 0-padded to the batch's longest;
  the decodes are cut at the first EOS, turned back into text and written in the input order,
  each followed by the delimiter, to `--decode_to_file` or t2t's default name
  `F.<model>.<hparams_set>.<problem>.beam<K>.alpha<a>.decodes`. With `return_beams` the K
  beams of a line are tab-joined (`text\\t%.2f` per beam with `write_beam_scores`).
  `--decode_reference=R` then prints BLEU (sacrebleu and t2t's; see `bleu_hook`) and writes
  t2t's decode-hook summary `BLEU` (uncased t2t BLEU x 100) to `<output_dir>/decode`.
* `--decode_interactive`: lines typed on standard input are decoded one at a time ("q" quits;
  t2t's prompt commands ns=, dl=, it= for sampling, decode length and input type are not
  offered: set extra_length in --decode_hparams).
* neither: the problem's dev split is decoded; `.decodes`, `.targets` and `.inputs` files are
  written side by side under `--decode_to_file` (default `<output_dir>/dev`) plus t2t's
  suffix. Examples are batched in file order by `batch_size` (32 when 0); t2t's token
  bucketing for batch_size 0 groups them differently, which changes a result only where the
  padded input length limits the decode length.

* `--score_file=F` (t2t-decoder's): no decoding; each line `input<TAB>target` of F gets its
  teacher-forced mean per-token loss (t2t's eval loss, no label smoothing), written as `%.6f`
  lines to `--decode_to_file`.

The decode length of a batch is its padded input length plus `extra_length` (t2t's rule, in
`Transformer.infer`). Every t2t decode hparam exists under its name; those that do not apply to
text decoding are refused by name when set (`UNSUPPORTED_DECODE_HPARAMS`), as are settings t2t
would silently ignore (force_decode_length or sampling_method=random with beam search).

The model, its hparams and its checkpoint come from the training run (`runs`):
`<output_dir>/hparams.json` (over `--hparams_set`, under `--hparams`), the latest checkpoint of
`--output_dir` or `--checkpoint_path` (a t2t_lite checkpoint or an original t2t one), and the
problem's vocabulary in `--data_dir`. `--problem`, `--hparams_set`, `--data_dir` default to
the run's `flags.json`.

The pure steps (`read_inputs`, `sort_inputs`, `batch_inputs`, `format_decodes`,
`decode_lines`, ...) take an `infer_fn(inputs int32 [B, L]) -> (outputs, scores)` so that they
work with any model.
"""
from __future__ import annotations

import os
import re
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TextIO

import numpy as np
from absl import logging

from t2t_lite import file_io, hparams_support
from t2t_lite.data_generators.text_encoder import EOS_ID
from t2t_lite.decoding import alignment
from t2t_lite.decoding.input_files import read_inputs, read_prefixes
from t2t_lite.errors import UserError, one_line
from t2t_lite.hparams import HParams
from t2t_lite.utils import progress

# outputs [B, T] or [B, K, T] int, scores [B] or [B, K] float, as numpy arrays.
InferFn = Callable[[np.ndarray], "tuple[np.ndarray, np.ndarray]"]


# t2t's decode hparams that do not apply to text decoding with t2t_lite: name -> why. Each is
# refused (one line naming it) when set to anything but t2t's default.
UNSUPPORTED_DECODE_HPARAMS = {
    "save_images": "image problems only",
    "min_length_ratio": "t2t declares it but never reads it",
    "eos_penalty": "t2t declares it but never reads it",
    "block_size": "blockwise parallel decoding models only",
    "guess_and_check_top_k": "blockwise parallel decoding models only",
    "guess_and_check_epsilon": "blockwise parallel decoding models only",
    "insertion_parallel": "insertion models only",
    "decode_timeout_mins": "continuous decoding of new checkpoints is not implemented",
    "display_decoded_images": "image problems only",
    "multiproblem_task_id": "multi-problem models only",
    "frames_per_second": "video problems only",
    "border_percent": "video problems only",
    "max_display_outputs": "video problems only",
    "max_display_decodes": "video problems only",
    "vgg_ckpt_path": "video problems only",
    "mlperf_decode_step": "MLPerf compliance logging only",
    "mlperf_threshold": "MLPerf compliance logging only",
    "mlperf_success": "MLPerf compliance logging only",
    "export_extra_infer_outputs": "t2t-exporter's extra infer() outputs are not exported",
}


def _t2t_decode_hparams() -> HParams:
    """t2t's `decoding.decode_hparams()` defaults, every one of them."""
    return HParams(
        save_images=False,
        log_results=True,
        extra_length=100,
        min_length_ratio=0.0,
        batch_size=0,
        beam_size=4,
        alpha=0.6,
        eos_penalty=0.0,
        block_size=0,
        guess_and_check_top_k=0,
        guess_and_check_epsilon=-1,
        insertion_parallel=False,
        return_beams=False,
        write_beam_scores=False,
        max_input_size=-1,
        identity_output=False,
        num_samples=-1,
        delimiter="\n",
        decode_to_file="",
        decode_reference="",
        decode_in_memory=False,
        decode_timeout_mins=240,
        summaries_log_dir="decode",
        shards=1,
        shard_id=0,
        shards_start_offset=0,
        shard_google_format=False,
        num_decodes=1,
        force_decode_length=False,
        display_decoded_images=False,
        multiproblem_task_id=-1,
        frames_per_second=10,
        skip_eos_postprocess=False,
        border_percent=2,
        max_display_outputs=10,
        max_display_decodes=5,
        vgg_ckpt_path="",
        mlperf_decode_step=0.0,
        mlperf_threshold=25.0,
        mlperf_success=False,
        export_extra_infer_outputs="",
    )


def decode_hparams(overrides: str = "") -> HParams:
    """t2t's decode hparams (T2T reference §7.1) with `--decode_hparams` applied.

    Every t2t decode hparam exists under its name. Those that apply to text decoding have
    t2t's meaning: beam_size, alpha, extra_length, batch_size, return_beams,
    write_beam_scores, max_input_size, num_samples, delimiter, decode_to_file,
    decode_reference, shards, shard_id, shards_start_offset, shard_google_format,
    log_results, num_decodes, force_decode_length, skip_eos_postprocess, identity_output,
    summaries_log_dir, and decode_in_memory (t2t_lite always decodes in memory, the only
    thing t2t's flag changes for text). The others (`UNSUPPORTED_DECODE_HPARAMS`) are refused
    when set to anything but their default. t2t_lite's own `return_alignment` and
    `alignment_layer` (`alignment.DECODE_HPARAMS`) join the set when `overrides` sets them.

    Args:
      overrides: "beam_size=4,alpha=0.6,..." (t2t's override syntax).

    Returns:
      HParams.

    Raises:
      ValueError: one line naming a bad, unknown or unsupported decode hparam.
    """
    hp = _t2t_decode_hparams()
    if overrides:
        alignment.parse_decode_hparams(hp, overrides)
    defaults = _t2t_decode_hparams()
    for name, reason in UNSUPPORTED_DECODE_HPARAMS.items():
        if hp.get(name) != defaults.get(name):
            raise ValueError(
                f"--decode_hparams: {name}={hp.get(name)!r} is not supported ({reason}); "
                f"leave it at {defaults.get(name)!r}")
    for name, low in (("beam_size", 1), ("extra_length", 0), ("num_decodes", 1),
                      ("batch_size", 0), ("shards", 1), ("shard_id", 0),
                      ("shards_start_offset", 0), ("num_samples", -1)):
        if hp.get(name) < low:
            raise ValueError(f"--decode_hparams: {name}={hp.get(name)} must be >= {low}")
    if hp.shard_id >= hp.shards:
        raise ValueError(f"--decode_hparams: shard_id={hp.shard_id} must be < shards="
                         f"{hp.shards}")
    if hp.num_samples == 0:
        raise ValueError("--decode_hparams: num_samples=0 decodes nothing; use -1 (all) or a "
                         "positive count")
    if hp.force_decode_length and hp.beam_size > 1:
        raise ValueError("--decode_hparams: force_decode_length=True applies to greedy decoding "
                         f"(beam_size=1), as in t2t; beam_size={hp.beam_size} ignores it")
    return hp


def check_sampling(model_hparams: HParams, decode_hp: HParams) -> None:
    """Refuses sampling settings that would have no effect (t2t's beam search ignores them).

    Args:
      model_hparams: with sampling_method, sampling_temp, sampling_keep_top_k,
        sampling_keep_top_p.
      decode_hp: decode hparams (beam_size).

    Raises:
      ValueError: one line naming the setting.
    """
    method = hparams_support.hparam(model_hparams, "sampling_method")
    if method not in ("argmax", "random"):
        raise ValueError(f"hparams.sampling_method={method!r} is not supported; use 'argmax' "
                         "or 'random' ('random_per_example' reads temperatures from the input "
                         "examples, which text decoding does not have)")
    top_k = hparams_support.hparam(model_hparams, "sampling_keep_top_k")
    if top_k != -1 and top_k <= 0:
        raise ValueError(f"hparams.sampling_keep_top_k={top_k} must be -1 (all) or positive")
    top_p = hparams_support.hparam(model_hparams, "sampling_keep_top_p")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"hparams.sampling_keep_top_p={top_p} must be in (0, 1] (1: all)")
    if method == "random" and decode_hp.beam_size > 1:
        raise ValueError("hparams.sampling_method=random applies to greedy decoding: set "
                         f"beam_size=1 in --decode_hparams (beam_size={decode_hp.beam_size} "
                         "ignores sampling, as in t2t)")


# ------------------------------------------------------------------------------ pure steps
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


# Measured on 2 cores (bench/bench_parallel_decode.py); more batches at once only add
# memory where the ops already spread over many cores.
MAX_AUTO_PARALLEL_BATCHES = 4


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask; os.cpu_count() elsewhere)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_parallel_batches() -> int:
    """Batches to decode at a time by default: one per usable CPU core, at most
    `MAX_AUTO_PARALLEL_BATCHES` (each batch holds its own decoder state); 1 when a GPU is
    visible."""
    import tensorflow as tf

    if tf.config.list_logical_devices("GPU"):
        return 1
    return min(usable_cores(), MAX_AUTO_PARALLEL_BATCHES)


def _decoded_batches(batches: Iterator[np.ndarray], infer_fn: InferFn,
                     parallel_batches: int) -> Iterator[tuple[np.ndarray, tuple]]:
    """Yields (batch, infer_fn(batch)) in batch order, decoding up to `parallel_batches`
    batches at a time on threads (TensorFlow releases the GIL while a decode runs).

    At most one batch waits decoded or queued beyond those being decoded.
    """
    if parallel_batches <= 1:
        for batch in batches:
            yield batch, infer_fn(batch)
        return
    with ThreadPoolExecutor(max_workers=parallel_batches, thread_name_prefix="decode") as pool:
        pending = deque()
        for batch in batches:
            pending.append((batch, pool.submit(infer_fn, batch)))
            if len(pending) > parallel_batches:
                batch, future = pending.popleft()
                yield batch, future.result()
        while pending:
            batch, future = pending.popleft()
            yield batch, future.result()


class _Pair(tuple):
    """(inputs [B, L], prefixes [B, P]) whose len() is the batch's number of rows."""

    def __len__(self) -> int:
        return len(self[0])


def decode_lines(lines: Sequence[str], infer_fn: InferFn, inputs_encoder: Any,
                 targets_encoder: Any, decode_hp: HParams,
                 parallel_batches: int = 1, nbest: list | None = None,
                 prefixes: Sequence[str] | None = None,
                 alignments: list | None = None) -> list[str]:
    """Decodes `lines` as t2t's decode_from_file does and returns the results in input order.

    Args:
      lines: input records (already stripped).
      infer_fn: `fn(int32 [B, L]) -> (outputs, scores)` (see `format_decodes`); with
        `parallel_batches` > 1 it is called from several threads at once, so it must not
        depend on call order (true of argmax and beam search, not of seeded sampling).
      inputs_encoder: encodes the records.
      targets_encoder: decodes the outputs.
      decode_hp: decode hparams (batch_size, max_input_size, return_beams,
        write_beam_scores, log_results).
      parallel_batches: batches decoded at the same time (1: one after the other). A beam
        step's ops are too small to keep 2 cores busy, so on CPU one batch per core decodes
        a file faster; the output is the same.
      nbest: a list that receives, in the order of `lines`, each line's beams as
        (text, score) pairs (`beam_texts`), for `nbest_lines`.
      prefixes: target prefixes parallel to `lines` (encoded with `targets_encoder`, "":
        none), passed to `infer_fn(inputs, prefixes=int32 [B, P])`.
      alignments: a list that receives each line's Pharaoh alignment, in the order of
        `lines` (`alignment.alignment_lines`; `infer_fn` then returns the attention third).

    Returns:
      One output record per line, in the order of `lines`.
    """
    sorted_inputs, sorted_keys = sort_inputs(lines)
    batch_size = decode_hp.batch_size or 32
    decodes, beams, aligned = [], [], []
    start_time = time.time()
    batches = batch_inputs(sorted_inputs, inputs_encoder, batch_size, decode_hp.max_input_size)
    call = infer_fn
    if prefixes is not None:
        sorted_prefixes = follow_sort(prefixes, sorted_keys)
        prefix_batches = (pad_batch([targets_encoder.encode(text) for text in
                                     sorted_prefixes[start: start + batch_size]])
                          for start in range(0, len(lines), batch_size))
        # Each item is (inputs, prefixes); the progress bar counts the inputs' rows.
        batches = (_Pair(pair) for pair in zip(batches, prefix_batches))
        call = lambda pair: infer_fn(pair[0], prefixes=pair[1])
    decoded = _decoded_batches(batches, call, parallel_batches)
    for number, (batch, result) in enumerate(progress.track(
            decoded, len(lines), "Decoding", "lines", size=lambda item: len(item[0]))):
        outputs, scores = result[:2]
        if alignments is not None:
            aligned.extend(alignment.alignment_lines(
                batch[0] if prefixes is not None else batch, outputs, result[2],
                inputs_encoder, targets_encoder))
        records = format_decodes(outputs, scores, targets_encoder, **format_options(decode_hp))
        if nbest is not None:
            beams.extend(beam_texts(outputs, scores, targets_encoder,
                                    decode_hp.skip_eos_postprocess, decode_hp.identity_output))
        if decode_hp.log_results:  # t2t's pairs, at DEBUG (`--verbosity=1`) to keep logs short
            for row, record in enumerate(records):
                logging.debug("Inference results INPUT: %s",
                              sorted_inputs[number * batch_size + row])
                logging.debug("Inference results OUTPUT: %s", record)
        decodes.extend(records)
    duration = time.time() - start_time
    if lines:
        logging.info("Decoded %d records in %.2f s (%.2f records/s)", len(lines), duration,
                     len(lines) / max(duration, 1e-9))
    if nbest is not None:
        nbest.extend(beams[sorted_keys[i]] for i in range(len(lines)))
    if alignments is not None:
        alignments.extend(aligned[sorted_keys[i]] for i in range(len(lines)))
    return [decodes[sorted_keys[i]] for i in range(len(lines))]


def add_shard_to_filename(filename: str, decode_hp: HParams) -> str:
    """t2t's shard suffix when decoding one of several shards: `%.3d`, or
    `-%05d-of-%05d` with shard_google_format."""
    if decode_hp.shards > 1:
        shard_id = decode_hp.shard_id + decode_hp.shards_start_offset
        if decode_hp.shard_google_format:
            return f"{filename}-{shard_id:05d}-of-{decode_hp.shards:05d}"
        return f"{filename}{shard_id:03d}"
    return filename


def decode_filename(base: str, model_name: str, hparams_set: str, problem_name: str,
                    decode_hp: HParams) -> str:
    """t2t's default decode file name `<base>.<model>.<hparams_set>.<problem>.beam<K>.
    alpha<a>.decodes` (unchanged when `base` already ends that way)."""
    base = add_shard_to_filename(base, decode_hp)
    suffix = f"beam{decode_hp.beam_size}.alpha{decode_hp.alpha}.decodes"
    if suffix in base:
        return base
    return f"{base}.{model_name}.{hparams_set}.{problem_name}.{suffix}"


# ------------------------------------------------------------------------------ the sources
def decode_from_file(infer_fn: InferFn, filename: str, encoders: dict, decode_hp: HParams,
                     decode_to_file: str | None, name_parts: tuple[str, str, str],
                     parallel_batches: int = 1, prefix_file: str | None = None) -> str:
    """t2t's decode_from_file: decodes the records of `filename` and writes them.

    Args:
      infer_fn: see `decode_lines`.
      filename: input file (t2t's `%.3d` shard suffix is added when shards > 1).
      encoders: {"inputs": encoder (optional), "targets": encoder}.
      decode_hp: decode hparams.
      decode_to_file: output file (+ shard suffix), or None for t2t's default name.
      name_parts: (model name, hparams_set, problem name) for the default name.
      parallel_batches: see `decode_lines`.
      prefix_file: target prefixes, one line per input line (`--decode_prefix_file`).

    Returns:
      The path written.
    """
    if decode_hp.num_decodes != 1:
        raise ValueError("--decode_hparams: num_decodes applies to decoding the dev set (no "
                         "--decode_from_file), as in t2t; a file is decoded once")
    filename = add_shard_to_filename(filename, decode_hp)
    if not os.path.isfile(filename):
        raise FileNotFoundError(f"--decode_from_file={filename}: no such file")
    lines = read_inputs(filename, decode_hp.delimiter)
    check_id_inputs(lines, encoders.get("inputs", encoders["targets"]),
                    f"--decode_from_file={filename}", decode_hp.delimiter)
    prefixes = read_prefixes(prefix_file, filename, len(lines), decode_hp.delimiter)
    # With t2t's return_beams and write_beam_scores, also fairseq's / Marian's n-best file.
    nbest = [] if decode_hp.return_beams and decode_hp.write_beam_scores else None
    aligned = None if alignment.layer(decode_hp) is None else []
    decodes = decode_lines(lines, infer_fn, encoders.get("inputs", encoders["targets"]),
                           encoders["targets"], decode_hp, parallel_batches, nbest=nbest,
                           prefixes=prefixes, alignments=aligned)
    if decode_to_file:
        output = add_shard_to_filename(decode_to_file, decode_hp)
    else:
        output = decode_filename(filename, *name_parts, decode_hp)
    file_io.atomic_write_lines(output, decodes, decode_hp.delimiter)
    logging.info("Wrote %d decodes to %s", len(decodes), output)
    if nbest is not None:
        file_io.atomic_write_lines(output + ".nbest", nbest_lines(nbest))
        logging.info("Wrote the n-best list to %s.nbest", output)
    if aligned is not None:
        file_io.atomic_write_lines(output + ".align", aligned)
    return output


def decode_interactively(infer_fn: InferFn, encoders: dict, decode_hp: HParams,
                         input_stream: TextIO, output_stream: TextIO) -> int:
    """Decodes each line read from `input_stream` until end of input or a line "q".

    Prints the decode (with return_beams: one `"text"\\tScore:%f` line per beam, as t2t logs
    them) to `output_stream`; a line that the input encoder cannot read (a word where ids are
    expected) gets one `error: stdin:N: ...` line on stderr and is skipped.

    Returns:
      The number of lines decoded.
    """
    inputs_encoder = encoders.get("inputs", encoders["targets"])
    count = 0
    prompt = input_stream.isatty() if hasattr(input_stream, "isatty") else False
    line_number = 0
    while True:
        if prompt:
            sys.stderr.write("INTERACTIVE MODE: type a source line ('q' quits)\n> ")
            sys.stderr.flush()
        line = input_stream.readline()
        line_number += 1
        if not line or line.strip() == "q":
            return count
        text = line.strip()
        if not text:
            continue
        try:
            check_id_inputs([text], inputs_encoder, "stdin", first_line=line_number)
        except UserError as e:
            # One bad line does not end the session: say why and read the next.
            sys.stderr.write(f"error: {e}\n")
            continue
        batch = pad_batch([encode_input(text, inputs_encoder, decode_hp.max_input_size)])
        outputs, scores = infer_fn(batch)[:2]
        if decode_hp.return_beams:
            beams = np.asarray(outputs).reshape(-1, np.asarray(outputs).shape[-1])
            beam_scores = np.asarray(scores).reshape(-1)
            for k, beam in enumerate(beams):
                beam_text = encoders["targets"].decode(save_until_eos(beam))
                output_stream.write(f'"{beam_text}"\tScore:{beam_scores[k]:f}\n')
        else:
            record = format_decodes(
                outputs, scores, encoders["targets"],
                skip_eos_postprocess=decode_hp.skip_eos_postprocess,
                identity_output=decode_hp.identity_output)[0]
            output_stream.write(record + "\n")
        output_stream.flush()
        count += 1


def decode_examples(infer_fn: InferFn, examples: Iterable[dict], encoders: dict,
                    decode_hp: HParams) -> tuple[list[str], list[str], list[str]]:
    """Decodes encoded examples (dicts of int [L] "inputs" and "targets", ids ending in EOS)
    in order, in batches of `batch_size` (32 when 0).

    Returns:
      (decodes, targets, inputs) as text, one per example.
    """
    batch_size = decode_hp.batch_size or 32
    inputs_encoder = encoders.get("inputs", encoders["targets"])
    decodes, targets, inputs = [], [], []
    chunk: list[dict] = []

    def flush():
        batch = pad_batch([list(np.asarray(ex["inputs"]).reshape(-1)) for ex in chunk])
        outputs, scores = infer_fn(batch)[:2]
        decodes.extend(format_decodes(outputs, scores, encoders["targets"],
                                      **format_options(decode_hp)))
        for ex in chunk:
            if decode_hp.identity_output:
                inputs.append(" ".join(str(i) for i in np.asarray(ex["inputs"]).reshape(-1)))
                targets.append(" ".join(str(i) for i in np.asarray(ex.get("targets", []))
                                        .reshape(-1)))
                continue
            inputs.append(inputs_encoder.decode(save_until_eos(ex["inputs"])))
            targets.append(encoders["targets"].decode(save_until_eos(ex["targets"]))
                           if "targets" in ex else "")
        chunk.clear()

    for example in examples:
        chunk.append(example)
        if len(chunk) == batch_size:
            flush()
    if chunk:
        flush()
    return decodes, targets, inputs


def decode_from_dataset(infer_fn: InferFn, examples: Iterable[dict], encoders: dict,
                        decode_hp: HParams, base: str,
                        name_parts: tuple[str, str, str]) -> str:
    """Decodes dev examples and writes `.decodes`, `.targets`, `.inputs` files (t2t's names).

    Args:
      infer_fn: see `decode_lines`.
      examples: encoded examples (see `decode_examples`).
      encoders: {"inputs": encoder (optional), "targets": encoder}.
      decode_hp: decode hparams.
      base: file name base (t2t's `decode_to_file`).
      name_parts: (model name, hparams_set, problem name).

    With num_decodes = N > 1 the examples are decoded N times (t2t's "number of times to go
    over the dataset", which differ when sampling); as in t2t each pass rewrites the same
    files, so they hold the last pass.

    Returns:
      The `.decodes` path.
    """
    examples = list(examples)
    for decode_id in range(decode_hp.num_decodes):
        if decode_hp.num_decodes > 1:
            logging.info("Decoding pass %d of %d", decode_id + 1, decode_hp.num_decodes)
        output = _decode_dataset_once(infer_fn, examples, encoders, decode_hp, base, name_parts)
    return output


def _decode_dataset_once(infer_fn: InferFn, examples: list[dict], encoders: dict,
                         decode_hp: HParams, base: str,
                         name_parts: tuple[str, str, str]) -> str:
    decodes, targets, inputs = decode_examples(infer_fn, examples, encoders, decode_hp)
    output = decode_filename(base, *name_parts, decode_hp)
    parts = output.split(".")
    parts[-1] = "targets"
    target_file = ".".join(parts)
    parts[-1] = "inputs"
    input_file = ".".join(parts)
    file_io.atomic_write_lines(target_file, targets, decode_hp.delimiter)
    file_io.atomic_write_lines(input_file, inputs, decode_hp.delimiter)
    file_io.atomic_write_lines(output, decodes, decode_hp.delimiter)
    logging.info("Wrote %d decodes to %s (and .targets, .inputs)", len(decodes), output)
    return output


def unpacked_problem(problem: Any) -> Any:
    """For a `*_packed` problem, its registered unpacked problem (whose dev examples come one
    per row, as decoding needs; t2t swaps them the same way), else `problem`."""
    from t2t_lite import registry

    if problem.name.endswith("_packed"):
        unpacked = problem.name[: -len("_packed")]
        if unpacked in registry.list_problems():
            return registry.problem(unpacked)
    return problem


def decode_dev_and_bleu(model: Any, problem: Any, hparams: HParams, data_dir: str,
                        decode_hp: HParams, output_dir: str, step: int,
                        name_parts: tuple[str, str, str],
                        reference: str | None = None) -> float | None:
    """`decode_dev_and_score` with t2t's BLEU alone; returns BLEU x 100 or None."""
    return decode_dev_and_score(model, problem, hparams, data_dir, decode_hp, output_dir, step,
                                name_parts, reference).get("BLEU")


def decode_dev_and_score(model: Any, problem: Any, hparams: HParams, data_dir: str,
                         decode_hp: HParams, output_dir: str, step: int,
                         name_parts: tuple[str, str, str], reference: str | None = None,
                         metrics: Sequence[str] = ("bleu",)) -> dict[str, float]:
    """Decodes the dev set with the current weights and logs its BLEU: what t2t's
    `train_eval_and_decode` schedule does after each evaluation.

    The dev examples of `problem` (its unpacked problem for a `*_packed` one, as t2t swaps
    them; never packed by `pack_dataset`) are decoded with `decode_hp` and written as
    `<output_dir>/decode_eval/dev-<step>` + t2t's suffix (`.decodes`, `.targets`,
    `.inputs`). BLEU (t2t's uncased `bleu_wrapper`, x 100) compares the decodes with
    `reference` when given (t2t's decode_reference), else with the `.targets` file (the dev
    targets as text); it is logged and written as the `BLEU` scalar at `step` to
    `<output_dir>/decode_eval` (t2t's `<summaries_log_dir>_eval`), with sacreBLEU's other
    `metrics` (chrF2, chrF2++, TER; `mt_metrics.SCALAR_NAMES`) beside it, and to the run
    card's "bleu" section.

    Args:
      model: a model with `infer` (the Transformer).
      problem: the training problem.
      hparams: model hparams.
      data_dir: the problem's data.
      decode_hp: decode hparams (--decode_hparams).
      output_dir: the training run's directory.
      step: global step of the weights.
      name_parts: (model name, hparams_set, problem name) for the file names.
      reference: optional reference file, one line per dev example.
      metrics: `mt_metrics.METRICS` names besides t2t's BLEU (logged always).

    Returns:
      {"BLEU": BLEU x 100, "chrF2": ..., ...}; {} when the problem has no inputs to decode or
      the scores cannot be computed (logged).
    """
    import tensorflow as tf

    from t2t_lite.data_generators.problem import ModeKeys
    from t2t_lite.evaluation import bleu_hook, mt_metrics

    problem = unpacked_problem(problem)
    if not getattr(problem, "has_inputs", True):
        logging.info("train_eval_and_decode: %s has no inputs to decode", problem.name)
        return {}
    problem_hparams = problem.get_hparams(hparams, data_dir=data_dir)
    examples = problem.dataset(ModeKeys.PREDICT, data_dir, hparams, batch=False,
                               max_records=decode_hp.num_samples)
    infer_fn = make_infer_fn(model, decode_hp, int(problem_hparams.get("target_space_id", 0)))
    directory = os.path.join(output_dir, f"{decode_hp.summaries_log_dir}_eval")
    tf.io.gfile.makedirs(directory)
    output = _decode_dataset_once(infer_fn, list(examples.as_numpy_iterator()),
                                  problem_hparams.vocabulary, decode_hp,
                                  os.path.join(directory, f"dev-{step}"), name_parts)
    reference = reference or output[: -len("decodes")] + "targets"
    try:
        scores = {"BLEU": 100 * float(bleu_hook.bleu_wrapper(reference, output))}
        others = mt_metrics.corpus_scores(bleu_hook.read_lines(reference),
                                          bleu_hook.read_lines(output),
                                          [m for m in metrics if m != "bleu"])
    except ValueError as e:
        logging.warning("No BLEU at step %d: %s", step, e)
        return {}
    scores.update(mt_metrics.scalars(others))
    from t2t_lite.training import run_card

    run_card.record_bleu(output_dir, step, reference, output,
                         [f"BLEU_uncased = {scores['BLEU']:6.2f}",
                          *mt_metrics.score_lines(others)])
    logging.info("Decode at step %d: %s (%s against %s)", step,
                 ", ".join(f"{k} = {v:.2f}" for k, v in scores.items()), output, reference)
    writer = tf.summary.create_file_writer(directory)
    with writer.as_default():
        for name, value in scores.items():
            tf.summary.scalar(name, value, step=step)
    writer.close()
    return scores


# ------------------------------------------------------------------------------ the model
def make_infer_fn(model: Any, decode_hp: HParams, target_space_id: int = 0,
                  jit_compile: bool = False) -> InferFn:
    """Wraps `model.infer` (Transformer API) as an `infer_fn` on numpy batches.

    `jit_compile` decodes with the XLA-compiled decoder (`Transformer.infer`), one
    compilation per bucket of batch shapes.
    """
    import tensorflow as tf

    top_beams = decode_hp.beam_size if decode_hp.return_beams else 1
    layer = alignment.layer(decode_hp)
    if jit_compile and decode_hp.beam_size == 1 and model.hparams.sampling_method == "random":
        raise ValueError("--xla_compile decodes with argmax or beam search; it does not "
                         "sample (hparams sampling_method=random)")

    def infer_fn(inputs: np.ndarray, prefixes: np.ndarray | None = None,
                 input_lengths: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        features = {"inputs": tf.constant(inputs, tf.int32), "target_space_id": target_space_id}
        if prefixes is not None:
            features["prefixes"] = tf.constant(prefixes, tf.int32)
        if input_lengths is not None:  # [B]: a decode length per row (driver.infer)
            features["input_lengths"] = tf.constant(input_lengths, tf.int32)
        result = model.infer(
            features,
            decode_length=decode_hp.extra_length, beam_size=decode_hp.beam_size,
            alpha=decode_hp.alpha, top_beams=top_beams,
            force_decode_length=decode_hp.force_decode_length, jit_compile=jit_compile,
            **({} if layer is None else {"alignment_layer": layer}))
        return tuple(np.asarray(result[name]) for name in ("outputs", "scores", "attention")
                     if name in result)

    return infer_fn


def _checkpoint_step(path: str) -> int:
    match = re.search(r"-(\d+)$", path)
    return int(match.group(1)) if match else 0


def check_reference(reference: str, records: int | None, source: str) -> None:
    """Refuses `--decode_reference` before anything is decoded: a missing file, or one whose
    line count differs from the number of records to decode (t2t's `bleu_wrapper` asserts
    equal counts after the decode; here it is known before).

    Args:
      reference: the reference file.
      records: how many records will be decoded (one output line each); None: unknown.
      source: what holds the records, for the message ("--decode_from_file=F").

    Raises:
      UserError: naming the reference, its line count and the input's.
    """
    from t2t_lite.evaluation import bleu_hook

    if not os.path.isfile(reference):
        raise UserError(f"--decode_reference={reference}: no such file")
    if records is None:
        return
    lines = len(bleu_hook.read_lines(reference))
    if lines != records:
        raise UserError(f"--decode_reference={reference} has {lines} lines but {source} has "
                        f"{records} records to decode: give the reference of that input, one "
                        "line per record")


def report_bleu(reference: str, decodes_file: str, output_dir: str | None,
                checkpoint: str, summaries_log_dir: str = "decode",
                metrics: Sequence[str] = ("bleu",)) -> None:
    """Prints BLEU of the decodes (and sacreBLEU's other `metrics`), writes t2t's decode-hook
    `BLEU` summary (and chrF2 / chrF2++ / TER) and the run card's "bleu" section.

    Raises:
      UserError: the reference and the decodes differ in line count (t2t asserts).
    """
    from t2t_lite.evaluation import bleu_hook, mt_metrics

    try:
        lines = bleu_hook.bleu_report(reference, decodes_file, metrics=metrics)
    except ValueError as e:
        raise UserError(f"{one_line(e)} (the decodes are kept in {decodes_file})") from e
    for line in lines:
        print(line)
    if output_dir:
        from t2t_lite.training import run_card
        run_card.record_bleu(output_dir, _checkpoint_step(checkpoint), reference, decodes_file,
                             lines)
        import tensorflow as tf

        scores = {}
        if "bleu" in metrics:
            scores["BLEU"] = 100 * float(bleu_hook.bleu_wrapper(reference, decodes_file))
        others = [m for m in metrics if m != "bleu"]
        if others:
            scores.update(mt_metrics.scalars(mt_metrics.corpus_scores(
                bleu_hook.read_lines(reference), bleu_hook.read_lines(decodes_file), others)))
        writer = tf.summary.create_file_writer(os.path.join(output_dir, summaries_log_dir))
        with writer.as_default():
            for name, value in scores.items():
                # The reference named in the summary: `--mode=plot` says which file was scored.
                tf.summary.scalar(name, value, step=_checkpoint_step(checkpoint),
                                  description=reference)
        writer.close()
