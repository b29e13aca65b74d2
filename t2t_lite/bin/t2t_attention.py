"""`run.py --mode=attention`: attention pictures of translations (t2t's visualisation).

Decodes each line of --decode_from_file (up to --attention_max_lines) with --decode_hparams,
then writes `<attention_dir>/line<k>_{encoder_self,decoder_self,encoder_decoder}.png` and
`line<k>.npz` (`t2t_lite.visualization.attention_viz`).
"""
from __future__ import annotations

import os
from typing import Any

from t2t_lite import file_io
from t2t_lite.data_generators.text_encoder import EOS_ID, PAD_ID
from t2t_lite.decoding import decode_hparams, decoding, runs, text_batches
from t2t_lite.errors import UserError
from t2t_lite.utils import validation
from t2t_lite.visualization import attention_viz


def main(flags: Any) -> list[str]:
    """Writes the pictures and prints their paths.

    Args:
      flags: absl FLAGS (output_dir, checkpoint_path, problem, data_dir, hparams_set, hparams,
        model, decode_hparams, decode_from_file, attention_dir, attention_max_lines); problem,
        hparams_set, data_dir and model default to the run's flags.json, as in decode mode.

    Returns:
      The files written.
    """
    if not flags.decode_from_file:
        raise UserError("--mode=attention needs --decode_from_file (the sentences to show)")
    source = os.path.expanduser(flags.decode_from_file)
    if not os.path.isfile(source):
        raise UserError(f"--decode_from_file={flags.decode_from_file}: no such file")
    if flags.attention_max_lines < 1:
        raise UserError(f"--attention_max_lines={flags.attention_max_lines}: must be >= 1")
    if len(runs.ensemble_paths(flags.checkpoint_path)) > 1:
        raise UserError("--mode=attention shows one model's attention, not an ensemble's "
                        f"(--checkpoint_path={flags.checkpoint_path})")
    spec = runs.resolve("attention", flags.output_dir, flags.problem, flags.hparams_set,
                        flags.data_dir, flags.model)
    out_dir = flags.attention_dir or (
        os.path.join(flags.output_dir, "attention") if flags.output_dir else None)
    if not out_dir:
        raise UserError("--mode=attention needs --attention_dir or --output_dir")
    validation.check_output_not_protected(
        "attention_dir", out_dir, validation.run_folders(flags.output_dir, flags.checkpoint_path),
        spec.data_dir)
    with runs.one_line_errors():
        decode_hp = decode_hparams.decode_hparams(flags.decode_hparams or "")
    run = runs.open_run(spec, flags.hparams)
    _, model = runs.restore_model(run, flags.checkpoint_path)
    encoders, target_space_id = run.encoders, run.target_space_id
    infer = decoding.make_infer_fn(model, decode_hp, target_space_id)
    with open(source, encoding=file_io.TEXT_ENCODING, errors="replace") as f:
        lines = [line.rstrip("\n") for line in f][:flags.attention_max_lines]
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for k, line in enumerate(lines):
        input_ids = text_batches.encode_input(line, encoders["inputs"], decode_hp.max_input_size)
        outputs, _ = infer([input_ids])
        output_ids = [int(i) for i in text_batches.save_until_eos(outputs.reshape(-1))]
        while output_ids and output_ids[-1] == PAD_ID:  # no EOS within the decode length
            output_ids.pop()
        output_ids.append(EOS_ID)
        weights = attention_viz.attention_weights(model, input_ids, output_ids,
                                                  target_space_id)
        written += attention_viz.plot_attention(
            weights, attention_viz.token_labels(encoders["inputs"], input_ids),
            attention_viz.token_labels(encoders["targets"], output_ids),
            os.path.join(out_dir, f"line{k}"))
        print(f"{line} -> {encoders['targets'].decode(output_ids[:-1])}")
    for path in written:
        print(f"Wrote {path}")
    return written
