"""Scores of decodes recorded in a training run: the dev set decoded during training (t2t's
`train_eval_and_decode` schedule decodes it after each evaluation) and decode mode's BLEU
against `--decode_reference`; both are logged, written as summaries and to the run card's
"bleu" section (`run_card.record_bleu`).

The decoding itself is `t2t_lite.decoding.decoding`'s (which imports nothing of training/).
"""
from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any

from absl import logging

from t2t_lite.decoding import decoding
from t2t_lite.errors import UserError, one_line
from t2t_lite.hparams import HParams
from t2t_lite.training import run_card


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

    problem = decoding.unpacked_problem(problem)
    if not getattr(problem, "has_inputs", True):
        logging.info("train_eval_and_decode: %s has no inputs to decode", problem.name)
        return {}
    problem_hparams = problem.get_hparams(hparams, data_dir=data_dir)
    examples = problem.dataset(ModeKeys.PREDICT, data_dir, hparams, batch=False,
                               max_records=decode_hp.num_samples)
    infer_fn = decoding.make_infer_fn(model, decode_hp,
                                      int(problem_hparams.get("target_space_id", 0)))
    directory = os.path.join(output_dir, f"{decode_hp.summaries_log_dir}_eval")
    tf.io.gfile.makedirs(directory)
    output = decoding.decode_dataset_once(infer_fn, list(examples.as_numpy_iterator()),
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


def _checkpoint_step(path: str) -> int:
    match = re.search(r"-(\d+)$", path)
    return int(match.group(1)) if match else 0


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
