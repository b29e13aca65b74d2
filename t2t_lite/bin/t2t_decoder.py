"""t2t-decoder: `run.py --mode=decode`.

Reads t2t-decoder's flags and runs `t2t_lite.decoding.decoding` (whose docstring describes the
sources, the files written and the defaults taken from the training run), or with
`--decode_engine=ctranslate2` the CTranslate2 Translator of `t2t_lite.export.ct2` on the
directory that `--mode=export --export_format=ctranslate2` wrote.
"""
from __future__ import annotations

import os
import sys

from absl import logging

from t2t_lite import file_io, hparams_support
from t2t_lite.decoding import alignment, checkpoint_note, runs, threads
from t2t_lite.decoding.decode_hparams import check_sampling, decode_hparams
from t2t_lite.decoding.decoding import (
    add_shard_to_filename,
    check_reference,
    decode_filename,
    decode_from_dataset,
    decode_from_file,
    decode_interactively,
    default_parallel_batches,
    make_infer_fn,
    unpacked_problem,
)
from t2t_lite.decoding.input_files import read_inputs, read_prefixes
from t2t_lite.decoding.score_file import read_score_file, score_pairs
from t2t_lite.decoding.text_batches import check_id_inputs, longest_input
from t2t_lite.errors import UserError, one_line
from t2t_lite.evaluation import mt_metrics
from t2t_lite.hparams import HParams
from t2t_lite.training.dev_decode import report_bleu
from t2t_lite.utils import validation


def main(flags) -> None:
    """`run.py --mode=decode`: see the module docstring. Prints the decodes file written.

    Returns None: absl's app.run turns a returned value into the process exit status.

    Args:
      flags: absl FLAGS (output_dir, checkpoint_path, problem, data_dir, model, hparams_set,
        hparams, decode_hparams, decode_from_file, decode_to_file, decode_reference,
        decode_interactive, score_file, random_seed, xla_compile).
    """
    if getattr(flags, "decode_engine", "t2t_lite") == "ctranslate2":
        decode_ctranslate2(flags)
        return
    from t2t_lite.data_generators.problem import ModeKeys

    if flags.decode_interactive and flags.decode_from_file:
        raise UserError("--decode_interactive and --decode_from_file exclude each other")
    score_file = getattr(flags, "score_file", None)
    if score_file:
        score_file = os.path.expanduser(score_file)
        if not os.path.isfile(score_file):
            raise UserError(f"--score_file={score_file}: no such file")
        if not flags.decode_to_file:
            raise UserError("--score_file needs --decode_to_file for the scores")
    with runs.one_line_errors():
        decode_hp = decode_hparams(flags.decode_hparams or "")
    if alignment.layer(decode_hp) is not None and (score_file or not flags.decode_from_file):
        raise UserError("--decode_hparams: return_alignment=true writes <decodes>.align beside "
                        "the decodes of --decode_from_file: give --decode_from_file")
    if getattr(flags, "random_seed", None) is not None:
        import keras

        keras.utils.set_random_seed(flags.random_seed)  # sampling_method=random
    spec = runs.resolve("decode", flags.output_dir, flags.problem, flags.hparams_set,
                        flags.data_dir, flags.model)
    if len(runs.ensemble_paths(flags.checkpoint_path)) > 1:
        for name, used in (("score_file", score_file),
                           ("xla_compile", getattr(flags, "xla_compile", False))):
            if used:
                raise UserError(f"--{name} works with one model, not an ensemble "
                                f"(--checkpoint_path={flags.checkpoint_path})")
    _check_outputs_writable(flags, decode_hp, score_file, spec.data_dir)
    if not score_file and not flags.decode_interactive:
        _check_reference(flags, decode_hp)
    run = runs.open_run(spec, flags.hparams)
    hparams, problem, problem_hparams = run.hparams, run.problem, run.problem_hparams
    with runs.one_line_errors():
        check_sampling(hparams, decode_hp)
        if not score_file:
            _check_decode_memory(flags, hparams, problem_hparams, decode_hp,
                                 run.encoders)
    batches = 1
    if flags.decode_from_file and not score_file and not flags.decode_interactive:
        batches = parallel_batches(flags, hparams, decode_hp)
    if batches > 1:
        # Each parallel batch's ops on its share of the cores, set before the runtime
        # starts (the restore below starts it): 1.4x the sentences a second on 2 cores.
        logging.info("Decoding %d batches at a time, each op on %d intra-op thread(s)",
                     batches, threads.configure(0, batches))
    checkpoint, model = runs.restore_model(run, flags.checkpoint_path)
    encoders = run.encoders
    if score_file:
        with runs.one_line_errors():
            scores = score_pairs(model, read_score_file(score_file), encoders,
                                 run.target_space_id,
                                 float(problem_hparams.get("loss_multiplier", 1.0)))
        file_io.atomic_write_lines(os.path.expanduser(flags.decode_to_file),
                                   [f"{score:.6f}" for score in scores])
        print(f"Scores of {len(scores)} lines written to {flags.decode_to_file}")
        return
    logging.info("Decoding with %s", checkpoint_note.describe(checkpoint, flags.output_dir))
    with runs.one_line_errors():
        infer_fn = make_infer_fn(model, decode_hp, run.target_space_id,
                                 jit_compile=getattr(flags, "xla_compile", False))
    name_parts = (spec.model_name, str(spec.hparams_set), spec.problem_name)
    decode_to_file = flags.decode_to_file or decode_hp.decode_to_file or None
    reference = flags.decode_reference or decode_hp.decode_reference or None

    if flags.decode_interactive:
        decode_interactively(infer_fn, encoders, decode_hp, sys.stdin, sys.stdout)
        return
    if flags.decode_from_file:
        try:
            with validation.explain_ids_out_of_vocab(
                    f"--decode_from_file={flags.decode_from_file}",
                    "check that the input uses the problem's symbols and that the vocabulary "
                    "is the one the model was trained with"):
                output = decode_from_file(
                    infer_fn, flags.decode_from_file, encoders, decode_hp, decode_to_file,
                    name_parts, batches,
                    prefix_file=getattr(flags, "decode_prefix_file", None))
        except (FileNotFoundError, ValueError) as e:
            raise UserError(one_line(e)) from e
    else:
        if not spec.data_dir:
            raise UserError("Decoding the dev set needs --data_dir (or --decode_from_file)")
        examples = unpacked_problem(problem).dataset(
            ModeKeys.PREDICT, spec.data_dir, hparams, batch=False,
            max_records=decode_hp.num_samples)
        base = decode_to_file or os.path.join(flags.output_dir or ".", "dev")
        output = decode_from_dataset(infer_fn, examples.as_numpy_iterator(), encoders,
                                     decode_hp, base, name_parts)
    print(f"Decodes written to {output}")
    if reference:
        report_bleu(reference, output, flags.output_dir, checkpoint, decode_hp.summaries_log_dir,
                    mt_metrics.parse_metrics(getattr(flags, "metrics", "bleu")))


def parallel_batches(flags, hparams, decode_hp) -> int:
    """--decode_parallel_batches resolved: 0 means `default_parallel_batches()`; sampling
    always decodes one batch at a time (its random draws must follow the batch order to
    repeat per --random_seed)."""
    count = getattr(flags, "decode_parallel_batches", 1)
    if count < 0:
        raise UserError(f"--decode_parallel_batches={count}: must be >= 0")
    sampling = (decode_hp.beam_size == 1 and hparams.sampling_method == "random"
                and hparams.sampling_temp != 0.0)
    if sampling:
        return 1
    return count or default_parallel_batches()


def _ct2_records(hypotheses: list, return_beams: bool = False,
                 write_beam_scores: bool = False) -> list[str]:
    """t2t-decoder's output records of `ct2.Translator.translate`'s hypothesis lists: the
    best text, or with return_beams all hypotheses tab-joined (each followed by "\\t%.2f"
    of its score with write_beam_scores)."""
    records = []
    for row in hypotheses:
        if not return_beams:
            records.append(row[0].text)
            continue
        parts = [f"{h.text}\t{h.score:.2f}" if write_beam_scores else h.text for h in row]
        records.append("\t".join(parts))
    return records


def decode_ctranslate2(flags) -> str:
    """`--mode=decode --decode_engine=ctranslate2`: translates --decode_from_file with the
    CTranslate2 directory (t2t-decoder's batching, decode length and output format).

    Args:
      flags: absl FLAGS (export_dir or output_dir, decode_from_file, decode_to_file,
        decode_hparams, decode_reference, ct2_device, ct2_compute_type, ct2_inter_threads,
        ct2_intra_threads, ct2_patience, ct2_length_penalty).

    Returns:
      The decodes file written.
    """
    from t2t_lite.evaluation import bleu_hook
    from t2t_lite.export import ct2

    try:
        decode_hp = decode_hparams(flags.decode_hparams or "")
    except ValueError as e:
        raise UserError(str(e)) from None
    for name in ("force_decode_length", "skip_eos_postprocess", "identity_output"):
        if decode_hp.get(name):
            raise UserError(f"--decode_hparams: {name}=True is not supported with "
                            "--decode_engine=ctranslate2; use --decode_engine=t2t_lite")
    if getattr(flags, "decode_interactive", False):
        raise UserError("--decode_interactive is not supported with --decode_engine=ctranslate2; "
                        "give --decode_from_file")
    if not flags.decode_from_file:
        raise UserError("--decode_engine=ctranslate2 decodes a file: give --decode_from_file")
    filename = add_shard_to_filename(os.path.expanduser(flags.decode_from_file), decode_hp)
    if not os.path.isfile(filename):
        raise UserError(f"--decode_from_file={filename}: no such file")
    decode_to_file = flags.decode_to_file or decode_hp.decode_to_file
    if decode_to_file:
        output = add_shard_to_filename(os.path.expanduser(decode_to_file), decode_hp)
    else:
        output = decode_filename(filename, "transformer", "ctranslate2", "file",
                                          decode_hp)
    validation.check_output_not_input(
        "decode_to_file", output,
        {"decode_from_file": filename,
         "decode_reference": flags.decode_reference or decode_hp.decode_reference})
    model_dir = ct2.default_model_dir(flags.export_dir, flags.output_dir)
    validation.check_output_not_protected(
        "decode_to_file", output, validation.run_folders(flags.output_dir, None),
        models={f"--export_dir={flags.export_dir}" if flags.export_dir else
                f"{model_dir} (--export_dir's default)": model_dir})
    _check_reference(flags, decode_hp)
    translator = ct2.Translator(model_dir,
                                device=flags.ct2_device, compute_type=flags.ct2_compute_type,
                                inter_threads=flags.ct2_inter_threads,
                                intra_threads=flags.ct2_intra_threads)
    lines = read_inputs(filename, decode_hp.delimiter)
    try:
        prefixes = read_prefixes(getattr(flags, "decode_prefix_file", None), filename,
                                 len(lines), decode_hp.delimiter)
    except (FileNotFoundError, ValueError) as e:
        raise UserError(one_line(e)) from e
    sampling = _ct2_sampling(flags, decode_hp)
    hypotheses = translator.translate(
        lines, beam_size=decode_hp.beam_size, alpha=decode_hp.alpha,
        extra_length=decode_hp.extra_length,
        num_hypotheses=decode_hp.beam_size if decode_hp.return_beams else 1,
        batch_size=decode_hp.batch_size or 32, max_input_size=decode_hp.max_input_size,
        patience=flags.ct2_patience, length_penalty=flags.ct2_length_penalty, prefixes=prefixes,
        return_alignment=alignment.layer(decode_hp) is not None, **sampling)
    records = _ct2_records(hypotheses, decode_hp.return_beams, decode_hp.write_beam_scores)
    file_io.atomic_write_lines(output, records, decode_hp.delimiter)
    if alignment.layer(decode_hp) is not None:
        _write_ct2_alignments(translator, lines, hypotheses, decode_hp, output)
    print(f"Decodes written to {output}")
    reference = flags.decode_reference or decode_hp.decode_reference
    if reference:
        metrics = mt_metrics.parse_metrics(getattr(flags, "metrics", "bleu"))
        for line in bleu_hook.bleu_report(reference, output, metrics=metrics):
            print(line)
    return output


def _ct2_sampling(flags, decode_hp) -> dict:
    """CTranslate2's sampling options from the sampling hparams in --hparams (the engine
    has no run to read hparams from; `ct2.sampling_options`), seeded by --random_seed."""
    from t2t_lite.export import ct2

    items = [item for item in (getattr(flags, "hparams", "") or "").split(",")
             if item.strip().startswith("sampling_")]
    hparams = HParams(**{name: hparams_support.default(name) for name in (
        "sampling_method", "sampling_temp", "sampling_keep_top_k", "sampling_keep_top_p")})
    try:
        hparams.parse(",".join(items))
        check_sampling(hparams, decode_hp)
    except ValueError as e:
        raise UserError(one_line(e)) from None
    if getattr(flags, "random_seed", None) is not None:
        ct2.import_ctranslate2().set_random_seed(int(flags.random_seed))
    return ct2.sampling_options(hparams)


def _write_ct2_alignments(translator, lines, hypotheses, decode_hp, output) -> None:
    """`<output>.align`: the Pharaoh line of each line's best hypothesis from CTranslate2's
    attention (the layer chosen at export)."""
    cut = decode_hp.max_input_size - 1 if decode_hp.max_input_size > 0 else None
    aligned = [alignment.alignment_line(
        row[0].attention, translator.inputs_encoder.encode(line)[:cut], row[0].ids,
        translator.inputs_encoder, translator.targets_encoder) if row else ""
        for line, row in zip(lines, hypotheses)]
    file_io.atomic_write_lines(output + ".align", aligned)


def _decode_inputs(flags, decode_hp) -> tuple[str, list[str]] | None:
    """(path, records) of --decode_from_file (with its shard suffix) when it is a file."""
    if flags.decode_interactive or not flags.decode_from_file:
        return None
    filename = add_shard_to_filename(os.path.expanduser(flags.decode_from_file), decode_hp)
    if not os.path.isfile(filename):
        return None
    return filename, read_inputs(filename, decode_hp.delimiter)


def _batch_rows(flags, decode_hp, records: list[str] | None) -> int:
    """The most records one decoded batch holds: batch_size (32 when 0), or fewer when the
    input file has fewer records; 1 when decoding interactively."""
    if flags.decode_interactive:
        return 1
    rows = decode_hp.batch_size or 32
    if records is not None:
        rows = min(rows, max(1, len(records)))
    elif decode_hp.num_samples > 0:
        rows = min(rows, decode_hp.num_samples)
    return rows


def _check_decode_memory(flags, hparams, problem_hparams, decode_hp, encoders) -> None:
    """Refuses settings whose decode cannot fit in memory (`validation.check_decode_memory`)
    before the model is loaded. For --decode_from_file the longest input counts (cut by
    `max_input_size` as decoding cuts it); a line that alone does not fit is named with its
    number, its length and the `max_input_size` that would fit."""
    inputs = _decode_inputs(flags, decode_hp)
    rows = _batch_rows(flags, decode_hp, inputs and inputs[1])
    number, input_length = 0, 1  # the dev set or a typed line: at least EOS
    if inputs is not None:
        filename, records = inputs
        encoder = encoders.get("inputs", encoders["targets"])
        check_id_inputs(records, encoder, f"--decode_from_file={filename}", decode_hp.delimiter)
        number, input_length = longest_input(records, encoder, decode_hp.max_input_size)
        input_length = max(input_length, 1)
    vocab = problem_hparams.vocab_size["targets"]
    layers = hparams.get("num_decoder_layers") or hparams.num_hidden_layers

    def estimate(length: int) -> int:
        return validation.decode_memory_estimate(
            decode_hp.beam_size, rows, vocab, length + decode_hp.extra_length,
            hparams.hidden_size, hparams.num_heads, layers,
            slot_storage=not getattr(flags, "xla_compile", False), input_length=length)

    steps = input_length + decode_hp.extra_length
    what = (f"beam_size={decode_hp.beam_size} x {rows} lines per batch x vocab {vocab} "
            f"x {'at least ' if inputs is None else ''}{steps} steps")
    available = validation.available_memory()
    if inputs is None or available is None or estimate(input_length) <= available:
        validation.check_decode_memory(estimate(input_length), what, available)
        return
    fits = max((n for n in (2 ** k for k in range(40)) if n < input_length
                and estimate(n) <= available), default=0)
    if not fits:
        validation.check_decode_memory(estimate(input_length), what, available)
    raise UserError(
        f"--decode_from_file={inputs[0]}:{number}: this input is {input_length} ids long "
        f"(with EOS); decoding it ({what}) needs about {estimate(input_length) / 2**30:.1f} "
        f"GiB, more than the {available / 2**30:.1f} GiB of memory available; cut inputs with "
        f"--decode_hparams=max_input_size={fits} (t2t's: keeps the first {fits - 1} ids), or "
        "split the line")


def _check_reference(flags, decode_hp) -> None:
    """`decoding.check_reference` of --decode_reference (or the decode hparam) before the
    model is loaded: it must exist and, for --decode_from_file, have its record count."""
    reference = flags.decode_reference or decode_hp.decode_reference
    if not reference:
        return
    records, source = None, "the dev set"
    if flags.decode_from_file and decode_hp.delimiter == "\n":
        source = add_shard_to_filename(os.path.expanduser(flags.decode_from_file), decode_hp)
        if os.path.isfile(source):
            records = len(read_inputs(source, decode_hp.delimiter))
        source = f"--decode_from_file={source}"
    check_reference(os.path.expanduser(reference), records, source)


def _check_outputs_writable(flags, decode_hp, score_file, data_dir: str | None) -> None:
    """Refuses an output path that cannot be written, that is one of the inputs, or a file
    of the run, the checkpoint's run or the data_dir, before the model is loaded and
    anything is decoded."""
    decode_to_file = flags.decode_to_file or decode_hp.decode_to_file
    if flags.decode_interactive:
        return
    if decode_to_file:
        output = add_shard_to_filename(os.path.expanduser(decode_to_file), decode_hp)
        inputs = {"decode_from_file": flags.decode_from_file, "score_file": score_file,
                  "decode_reference": flags.decode_reference or decode_hp.decode_reference}
        if flags.decode_from_file:
            inputs["decode_from_file"] = add_shard_to_filename(
                os.path.expanduser(flags.decode_from_file), decode_hp)
        validation.check_output_not_input("decode_to_file", output, inputs)
        validation.check_output_not_protected(
            "decode_to_file", output,
            validation.run_folders(flags.output_dir, flags.checkpoint_path), data_dir)
        validation.check_writable_file("decode_to_file", os.path.expanduser(decode_to_file))
    elif flags.decode_from_file and not score_file:
        # The decodes go beside the input file (t2t's default name).
        validation.check_writable_dir(
            "decode_from_file", os.path.dirname(os.path.abspath(flags.decode_from_file)))
    elif flags.output_dir:
        validation.check_writable_dir("output_dir", flags.output_dir)
