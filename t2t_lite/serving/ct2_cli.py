"""run.py's CTranslate2 entry points: `--mode=export --export_format=ctranslate2` and
`--mode=decode --decode_engine=ctranslate2` (the library is `t2t_lite.serving.ct2`).

    python run.py --mode=export --export_format=ctranslate2 --problem=P --data_dir=D \
        --output_dir=RUN [--checkpoint_path=CKPT] [--export_dir=DIR] [--quantization=int8]
    python run.py --mode=decode --decode_engine=ctranslate2 --export_dir=DIR \
        --decode_from_file=src.txt --decode_to_file=out.txt \
        [--decode_hparams="beam_size=4,alpha=0.6"] [--ct2_compute_type=int8]

The export directory defaults to `<output_dir>/ctranslate2` (or beside the checkpoint); the
problem, hparams set and data_dir default to the run's flags.json, as in the other modes.
"""
from __future__ import annotations

import os

from absl import logging

from t2t_lite.errors import UserError
from t2t_lite.serving import ct2

# Decode hparams whose t2t meaning the CTranslate2 engine does not implement.
UNSUPPORTED_DECODE_HPARAMS = ("force_decode_length", "skip_eos_postprocess", "identity_output")


def ct2_dir(flags, checkpoint: str | None = None) -> str:
    """The CTranslate2 model directory: --export_dir, else <output_dir>/ctranslate2, else
    beside the checkpoint."""
    if flags.export_dir:
        return os.path.expanduser(flags.export_dir)
    if flags.output_dir:
        return os.path.join(flags.output_dir, "ctranslate2")
    if checkpoint:
        return os.path.join(os.path.dirname(checkpoint), "ctranslate2")
    raise UserError("--decode_engine=ctranslate2 needs --export_dir (the directory written by "
                    "--mode=export --export_format=ctranslate2) or --output_dir")


def export_main(flags) -> str:
    """`--mode=export --export_format=ctranslate2`: writes the CTranslate2 directory of the
    run's (or --checkpoint_path's) model and prints its path.

    Args:
      flags: absl FLAGS (problem, data_dir, output_dir, checkpoint_path, hparams_set, hparams,
        model, export_dir, quantization, ct2_max_position).

    Returns:
      The directory written.
    """
    from t2t_lite import registry
    from t2t_lite.utils import decoding

    run_flags = decoding.read_run_flags(flags.output_dir)
    problem_name = flags.problem or run_flags.get("problem")
    if not problem_name:
        raise UserError("--mode=export needs --problem (its vocabulary goes into the model), "
                        "or an --output_dir whose flags.json names it")
    try:
        hparams = decoding.load_hparams(flags.output_dir,
                                        flags.hparams_set or run_flags.get("hparams_set"),
                                        flags.hparams)
        problem = registry.problem(problem_name)
        problem_hparams = problem.get_hparams(
            hparams, data_dir=flags.data_dir or run_flags.get("data_dir"))
        checkpoint = decoding.checkpoint_to_restore(flags.checkpoint_path, flags.output_dir)
        model = decoding.load_model(flags.model or run_flags.get("model") or "transformer",
                                    hparams, problem_hparams, checkpoint)
    except (ValueError, FileNotFoundError) as e:
        if isinstance(e, UserError):
            raise
        raise UserError(str(e)) from None
    encoders = problem_hparams.vocabulary
    path = ct2.export(model, ct2_dir(flags, checkpoint),
                      encoders.get("inputs", encoders["targets"]), encoders["targets"],
                      int(problem_hparams.get("target_space_id", 0)),
                      quantization=flags.quantization, max_position=flags.ct2_max_position)
    logging.info("Exported %s to %s", checkpoint, path)
    print(f"CTranslate2 model written to {path}")
    return path


def decode_main(flags) -> str:
    """`--mode=decode --decode_engine=ctranslate2`: translates --decode_from_file with the
    CTranslate2 directory (t2t-decoder's batching, decode length and output format).

    Args:
      flags: absl FLAGS (export_dir or output_dir, decode_from_file, decode_to_file,
        decode_hparams, decode_reference, ct2_device, ct2_compute_type, ct2_intra_threads,
        ct2_patience, ct2_length_penalty).

    Returns:
      The decodes file written.
    """
    from t2t_lite.utils import bleu_hook, decoding

    try:
        decode_hp = decoding.decode_hparams(flags.decode_hparams or "")
    except ValueError as e:
        raise UserError(str(e)) from None
    for name in UNSUPPORTED_DECODE_HPARAMS:
        if decode_hp.get(name):
            raise UserError(f"--decode_hparams: {name}=True is not supported with "
                            "--decode_engine=ctranslate2; use --decode_engine=t2t_lite")
    if getattr(flags, "decode_interactive", False):
        raise UserError("--decode_interactive is not supported with --decode_engine=ctranslate2; "
                        "give --decode_from_file")
    if not flags.decode_from_file:
        raise UserError("--decode_engine=ctranslate2 decodes a file: give --decode_from_file")
    filename = decoding.add_shard_to_filename(os.path.expanduser(flags.decode_from_file),
                                              decode_hp)
    if not os.path.isfile(filename):
        raise UserError(f"--decode_from_file={filename}: no such file")
    translator = ct2.Translator(ct2_dir(flags), device=flags.ct2_device,
                                compute_type=flags.ct2_compute_type,
                                intra_threads=flags.ct2_intra_threads)
    lines = decoding.read_inputs(filename, decode_hp.delimiter)
    hypotheses = translator.translate(
        lines, beam_size=decode_hp.beam_size, alpha=decode_hp.alpha,
        extra_length=decode_hp.extra_length,
        num_hypotheses=decode_hp.beam_size if decode_hp.return_beams else 1,
        batch_size=decode_hp.batch_size or 32, max_input_size=decode_hp.max_input_size,
        patience=flags.ct2_patience, length_penalty=flags.ct2_length_penalty)
    records = ct2.decode_records(hypotheses, decode_hp.return_beams, decode_hp.write_beam_scores)
    decode_to_file = flags.decode_to_file or decode_hp.decode_to_file
    if decode_to_file:
        output = decoding.add_shard_to_filename(os.path.expanduser(decode_to_file), decode_hp)
    else:
        output = decoding.decode_filename(filename, "transformer", "ctranslate2", "file",
                                          decode_hp)
    decoding.write_records(output, records, decode_hp.delimiter)
    print(f"Decodes written to {output}")
    reference = flags.decode_reference or decode_hp.decode_reference
    if reference:
        for line in bleu_hook.bleu_report(reference, output):
            print(line)
    return output
