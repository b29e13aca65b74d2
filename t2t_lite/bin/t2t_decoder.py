"""t2t-decoder: `run.py --mode=decode`.

Reads t2t-decoder's flags and runs `t2t_lite.utils.decoding` (whose docstring describes the
sources, the files written and the defaults taken from the training run).
"""
from __future__ import annotations

import os
import sys

from absl import logging

from t2t_lite import file_io
from t2t_lite.utils.decoding import (
    check_sampling,
    checkpoint_to_restore,
    decode_from_dataset,
    decode_from_file,
    decode_hparams,
    decode_interactively,
    load_hparams,
    load_model,
    make_infer_fn,
    read_run_flags,
    read_score_file,
    report_bleu,
    score_pairs,
    unpacked_problem,
)


def main(flags) -> None:
    """`run.py --mode=decode`: see the module docstring. Prints the decodes file written.

    Returns None: absl's app.run turns a returned value into the process exit status.

    Args:
      flags: absl FLAGS (output_dir, checkpoint_path, problem, data_dir, model, hparams_set,
        hparams, decode_hparams, decode_from_file, decode_to_file, decode_reference,
        decode_interactive, score_file, random_seed).
    """
    from t2t_lite import registry
    from t2t_lite.data_generators.problem import ModeKeys

    if flags.decode_interactive and flags.decode_from_file:
        raise SystemExit("--decode_interactive and --decode_from_file exclude each other")
    score_file = getattr(flags, "score_file", None)
    if score_file:
        score_file = os.path.expanduser(score_file)
        if not os.path.isfile(score_file):
            raise SystemExit(f"--score_file={score_file}: no such file")
        if not flags.decode_to_file:
            raise SystemExit("--score_file needs --decode_to_file for the scores")
    try:
        decode_hp = decode_hparams(flags.decode_hparams or "")
    except ValueError as e:
        raise SystemExit(str(e)) from None
    if getattr(flags, "random_seed", None) is not None:
        import keras

        keras.utils.set_random_seed(flags.random_seed)  # sampling_method=random
    run_flags = read_run_flags(flags.output_dir)
    problem_name = flags.problem or run_flags.get("problem")
    hparams_set = flags.hparams_set or run_flags.get("hparams_set")
    data_dir = flags.data_dir or run_flags.get("data_dir")
    model_name = flags.model or run_flags.get("model") or "transformer"
    if not problem_name:
        raise SystemExit("--mode=decode needs --problem (or an --output_dir whose flags.json "
                         "names it)")
    try:
        hparams = load_hparams(flags.output_dir, hparams_set, flags.hparams)
        problem = registry.problem(problem_name)
        problem_hparams = problem.get_hparams(hparams, data_dir=data_dir)
        check_sampling(hparams, decode_hp)
        checkpoint = checkpoint_to_restore(flags.checkpoint_path, flags.output_dir)
        model = load_model(model_name, hparams, problem_hparams, checkpoint)
        encoders = problem_hparams.vocabulary
        if score_file:
            scores = score_pairs(model, read_score_file(score_file), encoders,
                                 int(problem_hparams.get("target_space_id", 0)),
                                 float(problem_hparams.get("loss_multiplier", 1.0)))
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(str(e)) from None
    if score_file:
        file_io.atomic_write_lines(os.path.expanduser(flags.decode_to_file),
                                   [f"{score:.6f}" for score in scores])
        print(f"Scores of {len(scores)} lines written to {flags.decode_to_file}")
        return
    logging.info("Decoding with %s", checkpoint)
    infer_fn = make_infer_fn(model, decode_hp,
                             int(problem_hparams.get("target_space_id", 0)))
    name_parts = (model_name, str(hparams_set), problem_name)
    decode_to_file = flags.decode_to_file or decode_hp.decode_to_file or None
    reference = flags.decode_reference or decode_hp.decode_reference or None

    if flags.decode_interactive:
        decode_interactively(infer_fn, encoders, decode_hp, sys.stdin, sys.stdout)
        return
    if flags.decode_from_file:
        try:
            output = decode_from_file(infer_fn, flags.decode_from_file, encoders, decode_hp,
                                      decode_to_file, name_parts)
        except (FileNotFoundError, ValueError) as e:
            raise SystemExit(str(e)) from None
    else:
        if not data_dir:
            raise SystemExit("Decoding the dev set needs --data_dir (or --decode_from_file)")
        examples = unpacked_problem(problem).dataset(
            ModeKeys.PREDICT, data_dir, hparams, batch=False, max_records=decode_hp.num_samples)
        base = decode_to_file or os.path.join(flags.output_dir or ".", "dev")
        output = decode_from_dataset(infer_fn, examples.as_numpy_iterator(), encoders,
                                     decode_hp, base, name_parts)
    print(f"Decodes written to {output}")
    if reference:
        report_bleu(reference, output, flags.output_dir, checkpoint, decode_hp.summaries_log_dir)
