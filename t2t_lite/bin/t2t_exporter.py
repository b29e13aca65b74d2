"""t2t-exporter: `run.py --mode=export`.

Reads t2t-exporter's flags and runs `t2t_lite.utils.export` (whose docstring describes the
SavedModel and its signatures).
"""
from __future__ import annotations

import os

from absl import logging

from t2t_lite import registry
from t2t_lite.utils import decoding
from t2t_lite.utils.export import ServingModule, export, subtoken_strings


def main(flags) -> None:
    """run.py `--mode=export`: writes the SavedModel (see the module docstring) and prints
    its path. (Programs that want the path call `ServingModule` and `export` directly.)

    Args:
      flags: parsed absl flags (problem, data_dir, output_dir, checkpoint_path, export_dir,
        hparams_set, hparams, model, decode_hparams); problem, hparams_set, data_dir and
        model default to the run's flags.json, as in decode mode.
    """
    run_flags = decoding.read_run_flags(flags.output_dir)
    problem_name = flags.problem or run_flags.get("problem")
    hparams_set = flags.hparams_set or run_flags.get("hparams_set")
    data_dir = flags.data_dir or run_flags.get("data_dir")
    model_name = flags.model or run_flags.get("model") or "transformer"
    if not problem_name:
        raise SystemExit("--mode=export needs --problem (its vocabulary goes into the model), "
                         "or an --output_dir whose flags.json names it")
    try:
        decode_hp = decoding.decode_hparams(flags.decode_hparams or "")
        hparams = decoding.load_hparams(flags.output_dir, hparams_set, flags.hparams)
        problem = registry.problem(problem_name)
        problem_hparams = problem.get_hparams(hparams, data_dir=data_dir)
        checkpoint = decoding.checkpoint_to_restore(flags.checkpoint_path, flags.output_dir)
        model = decoding.load_model(model_name, hparams, problem_hparams, checkpoint)
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
        raise SystemExit(str(e)) from None
    export_dir = flags.export_dir or os.path.join(
        flags.output_dir or os.path.dirname(checkpoint), "export")
    path = export(module, export_dir)
    logging.info("Exported %s to %s", checkpoint, path)
    print(f"SavedModel written to {path}")
