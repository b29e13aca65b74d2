"""t2t-exporter: `run.py --mode=export`.

Reads t2t-exporter's flags and runs `t2t_lite.export.export` (whose docstring describes the
SavedModel and its signatures), or with `--export_format=ctranslate2` writes a CTranslate2
model directory with `t2t_lite.export.ct2`.
"""
from __future__ import annotations

import os
import time

from absl import logging

from t2t_lite.decoding import alignment, decode_hparams, runs, text_batches
from t2t_lite.errors import UserError
from t2t_lite.export.export import ServingModule, export, graph_vocabulary
from t2t_lite.utils import validation


def main(flags) -> None:
    """run.py `--mode=export`: writes the SavedModel (see the module docstring) and prints
    its path. (Programs that want the path call `ServingModule` and `export` directly.)

    Args:
      flags: parsed absl flags (problem, data_dir, output_dir, checkpoint_path, export_dir,
        hparams_set, hparams, model, decode_hparams); problem, hparams_set, data_dir and
        model default to the run's flags.json, as in decode mode.
    """
    if getattr(flags, "export_format", "saved_model") == "ctranslate2":
        export_ctranslate2(flags)
        return
    spec = runs.resolve("export", flags.output_dir, flags.problem, flags.hparams_set,
                        flags.data_dir, flags.model)
    export_dir = flags.export_dir or (
        os.path.join(flags.output_dir, "export") if flags.output_dir else None)
    if export_dir:
        validation.check_output_not_input("export_dir", export_dir, {
            "output_dir": flags.output_dir, "data_dir": spec.data_dir,
            "checkpoint_path": flags.checkpoint_path})
        validation.check_output_not_protected(
            "export_dir", export_dir,
            validation.run_folders(flags.output_dir, flags.checkpoint_path), spec.data_dir)
        validation.check_writable_dir("export_dir", export_dir)
    logging.info("Export step 1 of 2: loading the model and building the graph encoders")
    with runs.one_line_errors():
        decode_hp = decode_hparams.decode_hparams(flags.decode_hparams or "")
    run = runs.open_run(spec, flags.hparams)
    checkpoint, model = runs.restore_model(run, flags.checkpoint_path)
    inputs_vocab = graph_vocabulary(run.encoders.get("inputs"))
    targets_vocab = graph_vocabulary(run.encoders.get("targets"))
    if inputs_vocab is None or targets_vocab is None:
        logging.warning("%s does not use subword or SentencePiece encoders for inputs and "
                        "targets: "
                        "exporting the encode_decode_ids signature only", spec.problem_name)
    with runs.one_line_errors():
        module = ServingModule(model, inputs_vocab, targets_vocab, decode_hp,
                               text_batches.input_length_limit(decode_hp), run.target_space_id,
                               subword_segmenter=flags.export_subword_segmenter)
    export_dir = flags.export_dir or os.path.join(
        flags.output_dir or os.path.dirname(checkpoint), "export")
    start = time.time()
    logging.info("Export step 2 of 2: tracing the signatures and writing the SavedModel "
                 "(tens of seconds on a CPU) ...")
    path = export(module, export_dir)
    logging.info("Export step 2 of 2 done in %.0f s", time.time() - start)
    logging.info("Exported %s to %s", checkpoint, path)
    print(f"SavedModel written to {path}")


def export_ctranslate2(flags) -> str:
    """`--mode=export --export_format=ctranslate2`: writes the CTranslate2 directory of the
    run's (or --checkpoint_path's) model (`t2t_lite.export.ct2.export`) and prints its path.

    Args:
      flags: absl FLAGS (problem, data_dir, output_dir, checkpoint_path, hparams_set, hparams,
        model, export_dir, quantization, ct2_max_position); problem, hparams_set, data_dir and
        model default to the run's flags.json.

    Returns:
      The directory written (default `<output_dir>/ctranslate2`).
    """
    from t2t_lite.export import ct2

    if len(runs.ensemble_paths(flags.checkpoint_path)) > 1:
        raise UserError("--export_format=ctranslate2 exports one model, not an ensemble "
                        f"(--checkpoint_path={flags.checkpoint_path}); the SavedModel "
                        "export serves ensembles")
    spec = runs.resolve("export", flags.output_dir, flags.problem, flags.hparams_set,
                        flags.data_dir, flags.model)
    run = runs.open_run(spec, flags.hparams)
    checkpoint, model = runs.restore_model(run, flags.checkpoint_path)
    encoders = run.encoders
    model_dir = ct2.default_model_dir(flags.export_dir, flags.output_dir, checkpoint)
    validation.check_output_not_input("export_dir", model_dir, {
        "output_dir": flags.output_dir, "checkpoint_path": flags.checkpoint_path,
        "data_dir": spec.data_dir})
    validation.check_output_not_protected(
        "export_dir", model_dir, validation.run_folders(flags.output_dir, checkpoint),
        spec.data_dir)
    try:  # the decoder layer of word alignments (return_attention) is fixed at export
        layer = alignment.layer(decode_hparams.decode_hparams(flags.decode_hparams or ""))
    except ValueError as e:
        raise UserError(str(e)) from None
    path = ct2.export(model, model_dir,
                      encoders.get("inputs", encoders["targets"]), encoders["targets"],
                      run.target_space_id,
                      quantization=flags.quantization, max_position=flags.ct2_max_position,
                      alignment_layer=-1 if layer is None else layer)
    logging.info("Exported %s to %s", checkpoint, path)
    print(f"CTranslate2 model written to {path}")
    return path
