"""t2t-exporter: `run.py --mode=export`.

Reads t2t-exporter's flags and runs `t2t_lite.utils.export` (whose docstring describes the
SavedModel and its signatures), or with `--export_format=ctranslate2` writes a CTranslate2
model directory with `t2t_lite.serving.ct2`.
"""
from __future__ import annotations

import os
import time
from typing import Any

from absl import logging

from t2t_lite import registry
from t2t_lite.errors import UserError, one_line
from t2t_lite.utils import checkpoint_guard, decoding, validation
from t2t_lite.utils.export import ServingModule, export, subtoken_strings


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
    run_flags = decoding.read_run_flags(flags.output_dir)
    problem_name = flags.problem or run_flags.get("problem")
    hparams_set = flags.hparams_set or run_flags.get("hparams_set")
    data_dir = flags.data_dir or run_flags.get("data_dir")
    model_name = flags.model or run_flags.get("model") or "transformer"
    export_dir = flags.export_dir or (
        os.path.join(flags.output_dir, "export") if flags.output_dir else None)
    if export_dir:
        validation.check_output_not_input("export_dir", export_dir, {
            "output_dir": flags.output_dir, "data_dir": data_dir,
            "checkpoint_path": flags.checkpoint_path})
        validation.check_writable_dir("export_dir", export_dir)
    if not problem_name:
        raise UserError("--mode=export needs --problem (its vocabulary goes into the model), "
                        "or an --output_dir whose flags.json names it")
    logging.info("Export step 1 of 2: loading the model and building the graph encoders")
    try:
        decode_hp = decoding.decode_hparams(flags.decode_hparams or "")
        hparams = decoding.load_hparams(flags.output_dir, hparams_set, flags.hparams)
        validation.check_hparams(hparams)
        problem = registry.problem(problem_name)
        problem_hparams = problem.get_hparams(hparams, data_dir=data_dir)
        checkpoint, model = restore_model(flags, model_name, hparams, problem_hparams)
        encoders = problem_hparams.vocabulary
        inputs_vocab = subtoken_strings(encoders.get("inputs"))
        targets_vocab = subtoken_strings(encoders.get("targets"))
        if inputs_vocab is None or targets_vocab is None:
            logging.warning("%s does not use SubwordTextEncoders for inputs and targets: "
                            "exporting the encode_decode_ids signature only", problem_name)
        module = ServingModule(model, inputs_vocab, targets_vocab, decode_hp,
                               decoding.input_length_limit(decode_hp),
                               int(problem_hparams.get("target_space_id", 0)),
                               subword_segmenter=flags.export_subword_segmenter)
    except (ValueError, FileNotFoundError) as e:
        raise UserError(one_line(e)) from e
    export_dir = flags.export_dir or os.path.join(
        flags.output_dir or os.path.dirname(checkpoint), "export")
    start = time.time()
    logging.info("Export step 2 of 2: tracing the signatures and writing the SavedModel "
                 "(tens of seconds on a CPU) ...")
    path = export(module, export_dir)
    logging.info("Export step 2 of 2 done in %.0f s", time.time() - start)
    logging.info("Exported %s to %s", checkpoint, path)
    print(f"SavedModel written to {path}")


def restore_model(flags, model_name: str, hparams, problem_hparams) -> tuple[str, Any]:
    """The model of `--checkpoint_path`, else of `--output_dir`'s newest checkpoint, strictly
    restored (`decoding.load_model`). Beside a training run that rotates its checkpoints, a
    checkpoint of `--output_dir` that vanishes while it is read is replaced by the then-newest
    one (`checkpoint_guard.retry_if_vanished`); the restored model holds its values in memory,
    so the export needs no checkpoint file after this.

    Returns:
      (the checkpoint prefix restored, the model).
    """
    def read(path: str):
        return decoding.load_model(model_name, hparams, problem_hparams, path)

    def discover() -> str:
        return decoding.checkpoint_to_restore(flags.checkpoint_path, flags.output_dir)

    if flags.checkpoint_path:  # the user's choice: no other checkpoint replaces it
        path = discover()
        return path, read(path)
    return checkpoint_guard.retry_if_vanished(discover, read)


def export_ctranslate2(flags) -> str:
    """`--mode=export --export_format=ctranslate2`: writes the CTranslate2 directory of the
    run's (or --checkpoint_path's) model (`t2t_lite.serving.ct2.export`) and prints its path.

    Args:
      flags: absl FLAGS (problem, data_dir, output_dir, checkpoint_path, hparams_set, hparams,
        model, export_dir, quantization, ct2_max_position); problem, hparams_set, data_dir and
        model default to the run's flags.json.

    Returns:
      The directory written (default `<output_dir>/ctranslate2`).
    """
    from t2t_lite.serving import ct2

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
        checkpoint, model = restore_model(
            flags, flags.model or run_flags.get("model") or "transformer", hparams,
            problem_hparams)
    except (ValueError, FileNotFoundError) as e:
        if isinstance(e, UserError):
            raise
        raise UserError(str(e)) from None
    encoders = problem_hparams.vocabulary
    model_dir = ct2.default_model_dir(flags.export_dir, flags.output_dir, checkpoint)
    validation.check_output_not_input("export_dir", model_dir, {
        "output_dir": flags.output_dir, "checkpoint_path": flags.checkpoint_path,
        "data_dir": flags.data_dir or run_flags.get("data_dir")})
    path = ct2.export(model, model_dir,
                      encoders.get("inputs", encoders["targets"]), encoders["targets"],
                      int(problem_hparams.get("target_space_id", 0)),
                      quantization=flags.quantization, max_position=flags.ct2_max_position)
    logging.info("Exported %s to %s", checkpoint, path)
    print(f"CTranslate2 model written to {path}")
    return path
