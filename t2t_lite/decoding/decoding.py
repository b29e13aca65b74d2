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
`Transformer.infer`). The decode hparams and their checks are `decode_hparams`'s.

The model, its hparams and its checkpoint come from the training run (`runs`):
`<output_dir>/hparams.json` (over `--hparams_set`, under `--hparams`), the latest checkpoint of
`--output_dir` or `--checkpoint_path` (a t2t_lite checkpoint or an original t2t one), and the
problem's vocabulary in `--data_dir`. `--problem`, `--hparams_set`, `--data_dir` default to
the run's `flags.json`.

The drivers (`decode_lines`, `decode_from_file`, `decode_examples`, ...) take an
`infer_fn(inputs int32 [B, L]) -> (outputs, scores)` (`make_infer_fn` wraps a model's `infer`),
so that they work with any model; the text batching they use is `text_batches`'s. Decoding the
dev set during training, with its BLEU, is `t2t_lite.training.dev_decode`.
"""
from __future__ import annotations

import os
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TextIO

import numpy as np
from absl import logging

from t2t_lite import file_io
from t2t_lite.decoding import alignment
from t2t_lite.decoding.input_files import read_inputs, read_prefixes
from t2t_lite.decoding.text_batches import (
    batch_inputs,
    beam_texts,
    check_id_inputs,
    encode_input,
    follow_sort,
    format_decodes,
    format_options,
    nbest_lines,
    pad_batch,
    save_until_eos,
    sort_inputs,
)
from t2t_lite.errors import UserError
from t2t_lite.hparams import HParams
from t2t_lite.utils import progress

# outputs [B, T] or [B, K, T] int, scores [B] or [B, K] float, as numpy arrays.
InferFn = Callable[[np.ndarray], "tuple[np.ndarray, np.ndarray]"]


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
    visible. Asks for the physical devices, which does not start TensorFlow's runtime (its
    threads can still be set afterwards: `threads.configure`)."""
    import tensorflow as tf

    return parallel_batches(bool(tf.config.list_physical_devices("GPU")), usable_cores())


def parallel_batches(gpu: bool, cores: int) -> int:
    """`default_parallel_batches` for a machine with (`gpu`) or without a GPU and `cores`
    usable cores: 1 with a GPU, else one per core, at most `MAX_AUTO_PARALLEL_BATCHES`."""
    return 1 if gpu else max(1, min(cores, MAX_AUTO_PARALLEL_BATCHES))


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
        output = decode_dataset_once(infer_fn, examples, encoders, decode_hp, base, name_parts)
    return output


def decode_dataset_once(infer_fn: InferFn, examples: list[dict], encoders: dict,
                        decode_hp: HParams, base: str,
                        name_parts: tuple[str, str, str]) -> str:
    """Decodes `examples` once (`decode_examples`) and writes t2t's `.decodes`, `.targets`
    and `.inputs` files under `decode_filename(base, ...)`; returns the `.decodes` path."""
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
