"""t2t-trainer: `run.py --mode=train|eval|train_and_eval` (or t2t's `--schedule`).

Reads t2t-trainer's flags and runs `t2t_lite.utils.trainer_lib`.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import tensorflow as tf
from absl import logging

from t2t_lite import flags as t2t_flags
from t2t_lite import registry
from t2t_lite.hparams import create_hparams
from t2t_lite.utils import warm_start
from t2t_lite.utils.trainer_lib import (
    RunConfig,
    Trainer,
    create_strategy,
    is_chief,
    save_flags,
    save_hparams,
    setup_determinism,
)


def config_from_flags(flags_obj: Any) -> RunConfig:
    """RunConfig from t2t-trainer's flags."""
    return RunConfig(
        output_dir=os.path.expanduser(flags_obj.output_dir),
        train_steps=flags_obj.train_steps,
        eval_steps=flags_obj.eval_steps,
        local_eval_frequency=flags_obj.local_eval_frequency,
        save_checkpoints_steps=flags_obj.save_checkpoints_steps,
        keep_checkpoint_max=flags_obj.keep_checkpoint_max,
        log_step_count_steps=flags_obj.log_step_count_steps,
        random_seed=flags_obj.random_seed,
        deterministic=flags_obj.deterministic,
        eval_split="test" if flags_obj.eval_use_test_set else None,
        xla_compile=getattr(flags_obj, "xla_compile", False),
    )


def build_trainer(flags_obj: Any, strategy: tf.distribute.Strategy) -> Trainer:
    """Hparams (set -> output_dir/hparams.json -> --hparams), problem and model from flags."""
    for name in ("problem", "hparams_set", "output_dir", "data_dir"):
        if not getattr(flags_obj, name):
            raise ValueError(f"--{name} is required for --mode=train/eval/train_and_eval")
    config = config_from_flags(flags_obj)
    hparams = create_hparams(
        flags_obj.hparams_set, flags_obj.hparams,
        hparams_json_path=os.path.join(config.output_dir, "hparams.json"),
    )
    data_dir = os.path.expanduser(flags_obj.data_dir)
    problem = registry.problem(flags_obj.problem)
    if getattr(flags_obj, "generate_data", False):
        problem.generate_data(data_dir, os.path.expanduser(flags_obj.tmp_dir))
    problem_hparams = problem.get_hparams(hparams, data_dir=data_dir)
    vocab = problem_hparams.vocab_size
    model_cls = registry.model(flags_obj.model)
    input_vocab = vocab.get("inputs", vocab["targets"])

    def model_fn():
        return model_cls(hparams, input_vocab, vocab["targets"])

    if is_chief():
        save_hparams(config.output_dir, hparams)
        save_flags(config.output_dir, flags_obj)
    trainer = Trainer(model_fn, hparams, problem, data_dir, config, strategy)
    if flags_obj.warm_start_from and not tf.train.latest_checkpoint(config.output_dir):
        warm_start.warm_start(trainer.model, os.path.expanduser(flags_obj.warm_start_from),
                              allow_partial=getattr(flags_obj, "warm_start_partial", False))
    return trainer


def main(flags_obj: Any) -> dict[str, float]:
    """run.py's --mode=train|eval|train_and_eval (t2t-trainer's schedules).

    Args:
      flags_obj: absl FLAGS (t2t_lite.flags).

    Returns:
      The last evaluation results (eval modes) or training statistics (train).
    """
    strategy = create_strategy(flags_obj.worker_gpu, flags_obj.worker_replicas)
    setup_determinism(flags_obj.random_seed, flags_obj.deterministic)
    trainer = build_trainer(flags_obj, strategy)
    mode = flags_obj.mode or t2t_flags.SCHEDULES.get(flags_obj.schedule, "train_and_eval")
    if mode == "train":
        return trainer.train()
    if mode == "eval":
        if flags_obj.schedule == "continuous_eval":
            return trainer.continuous_eval()
        if not trainer.restore():
            logging.warning("No checkpoint in %s: evaluating the initial weights",
                            trainer.config.output_dir)
        return trainer.evaluate()
    after_eval = None
    if flags_obj.schedule == "train_eval_and_decode":
        after_eval = _dev_decoder(trainer, flags_obj)
    trainer.train(eval_every=trainer.config.local_eval_frequency, after_eval=after_eval)
    return trainer.last_eval_results


def _dev_decoder(trainer: Trainer, flags_obj: Any) -> Callable[[int], Any]:
    """t2t's train_eval_and_decode: after each eval the chief decodes the dev set with
    --decode_hparams and logs its BLEU (`decoding.decode_dev_and_bleu`)."""
    from t2t_lite.utils import decoding

    decode_hp = decoding.decode_hparams(flags_obj.decode_hparams or "")
    decoding.check_sampling(trainer.hparams, decode_hp)
    reference = flags_obj.decode_reference or decode_hp.decode_reference or None
    name_parts = (flags_obj.model, flags_obj.hparams_set, trainer.problem.name)

    def decode(step: int):
        if trainer.chief:
            return decoding.decode_dev_and_bleu(
                trainer.model, trainer.problem, trainer.hparams, trainer.data_dir, decode_hp,
                trainer.config.output_dir, step, name_parts, reference)
        return None

    return decode
