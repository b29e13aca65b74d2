"""t2t-trainer: `run.py --mode=train|eval|train_and_eval` (or t2t's `--schedule`).

Reads t2t-trainer's flags and runs `t2t_lite.training.trainer_lib`.
"""
from __future__ import annotations

import os
import types
from collections.abc import Callable
from typing import Any

import tensorflow as tf
from absl import logging

from t2t_lite import registry
from t2t_lite.bin.early_checks import check_training_flags as check_flags
from t2t_lite.bin.early_checks import datagen_command
from t2t_lite.data_generators import datagen
from t2t_lite.decoding import runs
from t2t_lite.errors import UserError, one_line
from t2t_lite.evaluation import mt_metrics
from t2t_lite.training import learning_rate
from t2t_lite.training.cluster_agreement import flag_fingerprint
from t2t_lite.training.distribution import (
    agree_across_workers,
    peers_lost_before_training,
    setup_determinism,
)
from t2t_lite.training.trainer_lib import (
    EVAL,
    TRAIN,
    RunConfig,
    Trainer,
    create_strategy,
    create_trainer,
    is_chief,
    leave_cluster,
)
from t2t_lite.utils import checkpoint_guard, run_lock, run_metadata, validation
from t2t_lite.visualization import plots


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


def flag_values(flags_obj: Any) -> dict[str, Any]:
    """The t2t_lite flags (name -> value) of absl FLAGS, or the attributes of a namespace."""
    if hasattr(flags_obj, "get_flags_for_module"):
        return {f.name: f.value for f in flags_obj.get_flags_for_module("t2t_lite.flags")}
    return dict(vars(flags_obj))


def with_run_names(flags_obj: Any) -> Any:
    """`--mode=eval` of a run: --problem, --hparams_set, --data_dir and --model not given
    come from the run's flags.json (`runs.resolve`, as in decode and export).

    Returns:
      A namespace of the t2t_lite flags with those four filled in.
    """
    if not flags_obj.output_dir:
        raise UserError("--output_dir is required for --mode=train/eval/train_and_eval")
    spec = runs.resolve("eval", os.path.expanduser(flags_obj.output_dir), flags_obj.problem,
                        flags_obj.hparams_set, flags_obj.data_dir, flags_obj.model)
    values = flag_values(flags_obj)
    values.update(problem=spec.problem_name, hparams_set=spec.hparams_set,
                  data_dir=spec.data_dir, model=spec.model_name)
    return types.SimpleNamespace(**values)


def build_trainer(flags_obj: Any, strategy: tf.distribute.Strategy,
                  lock: bool = False, data_splits: tuple[str, ...] = ()) -> Trainer:
    """Hparams (set -> output_dir/hparams.json -> --hparams), problem and model from flags.

    With `lock` (training modes) a resume is checked against the run in output_dir, then the
    chief holds output_dir's run lock and writes hparams.json, flags.json and the run card;
    without it (eval) the run's files are only read. The data of `data_splits` (ModeKeys)
    is checked complete before anything is written.

    Raises:
      UserError / DataError: one line, with nothing written.
    """
    check_flags(flags_obj)
    config = config_from_flags(flags_obj)
    data_dir = os.path.expanduser(flags_obj.data_dir)
    problem = registry.problem(flags_obj.problem)
    if lock and checkpoint_guard.checkpoints_newest_first(config.output_dir):
        # Before looking for the data: resuming with another problem is refused as such.
        run_metadata.check_identity(config.output_dir, {
            "problem": flags_obj.problem, "model": flags_obj.model,
            "hparams_set": flags_obj.hparams_set})
    if not getattr(flags_obj, "generate_data", False) and not tf.io.gfile.isdir(data_dir):
        raise UserError(f"--data_dir={flags_obj.data_dir}: no such directory (make the data "
                        f"first: {datagen_command(flags_obj.problem, flags_obj.data_dir)})")
    if getattr(flags_obj, "generate_data", False):
        datagen.generate_locked(problem, data_dir, os.path.expanduser(flags_obj.tmp_dir))
    for split in data_splits:
        problem.data_filenames(data_dir, split)  # DataError: missing, incomplete, damaged
    warm_start_from = flags_obj.warm_start_from
    return create_trainer(
        problem, flags_obj.hparams_set, flags_obj.hparams, flags_obj.model, data_dir, config,
        strategy,
        warm_start_from=os.path.expanduser(warm_start_from) if warm_start_from else None,
        warm_start_partial=getattr(flags_obj, "warm_start_partial", False),
        flag_values=flag_values(flags_obj),
        lock=lock,
    )


def train(flags_obj: Any) -> dict[str, float]:
    """`--mode=train` (t2t's schedule "train"): trains until --train_steps."""
    return main(flags_obj, "train")


def evaluate(flags_obj: Any) -> dict[str, float]:
    """`--mode=eval` (t2t's "evaluate"; "continuous_eval" evaluates each new checkpoint)."""
    return main(flags_obj, "eval")


def train_and_eval(flags_obj: Any) -> dict[str, float]:
    """`--mode=train_and_eval` (t2t's "train_and_evaluate", "continuous_train_and_eval",
    "train_eval_and_decode")."""
    return main(flags_obj, "train_and_eval")


def main(flags_obj: Any, mode: str) -> dict[str, float]:
    """t2t-trainer's schedules: run.py has resolved --mode / --schedule into `mode`.

    Args:
      flags_obj: absl FLAGS (t2t_lite.flags).
      mode: "train", "eval" or "train_and_eval"; --schedule picks its variant
        (continuous_eval, train_eval_and_decode).

    Returns:
      The last evaluation results (eval modes) or training statistics (train).
    """
    if mode == "eval":
        flags_obj = with_run_names(flags_obj)
    check_flags(flags_obj)
    if flags_obj.schedule == "train_eval_and_decode":
        _check_dev_decode_flags(flags_obj)  # not after training has run
    _check_selection_flags(flags_obj, mode)
    if mode != "eval" and is_chief():
        # Before TensorFlow builds anything: a second run refuses within seconds, a
        # read-only output_dir in one line.
        run_lock.refuse_if_held(os.path.expanduser(flags_obj.output_dir))
        validation.check_writable_dir("output_dir", os.path.expanduser(flags_obj.output_dir))
    strategy = create_strategy(flags_obj.worker_gpu, flags_obj.worker_replicas,
                               getattr(flags_obj, "worker_startup_timeout_secs", 300))
    splits = {"train": (TRAIN,), "eval": (EVAL,), "train_and_eval": (TRAIN, EVAL)}[mode]
    with peers_lost_before_training(strategy, os.path.expanduser(flags_obj.output_dir)):
        # Before any data is read: every worker runs the same schedule to the same end.
        agree_across_workers(
            strategy, "flags", flag_fingerprint({**flag_values(flags_obj), "mode": mode}),
            "start every worker with the same flags (only TF_CONFIG's task differs)")
        setup_determinism(flags_obj.random_seed, flags_obj.deterministic)
        trainer = build_trainer(flags_obj, strategy, lock=mode != "eval", data_splits=splits)
    if mode != "eval" and trainer.chief and trainer.step < trainer.config.train_steps:
        warning = learning_rate.short_run_warning(trainer.hparams, trainer.config.train_steps)
        if warning:
            logging.warning("%s", warning)
    try:
        with validation.explain_ids_out_of_vocab(
                f"the data in --data_dir={flags_obj.data_dir}",
                "regenerate the data with --mode=datagen, or use the vocabulary file it was "
                "encoded with"):
            results = _run_schedule(trainer, flags_obj, mode)
    except tf.errors.DataLossError as e:
        raise _name_damaged_file(trainer, splits, e) from e
    leave_cluster(strategy)  # several workers leave together
    return results


def _name_damaged_file(trainer: Trainer, splits: tuple[str, ...],
                       error: tf.errors.DataLossError) -> Exception:
    """A DataError naming the shard behind a DataLossError (TensorFlow names no file)."""
    from t2t_lite.data_generators import data_marker
    from t2t_lite.errors import DataError

    files = [f for split in splits
             for f in trainer.problem.data_filenames(trainer.data_dir, split)]
    damaged = data_marker.find_damaged_shard(files)
    if damaged is None:
        return error
    return DataError(f"Damaged data: {damaged}; datagen regenerates it: python run.py "
                     f"--mode=datagen --problem={trainer.problem.name} "
                     f"--data_dir={trainer.data_dir}")


def _run_schedule(trainer: Trainer, flags_obj: Any, mode: str) -> dict[str, float]:
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
    decoded: dict[str, float] = {}  # the dev decodes' metrics of the current evaluation
    if flags_obj.schedule == "train_eval_and_decode":
        after_eval = _dev_decoder(trainer, flags_obj, decoded)
    start = trainer.step
    trainer.train(eval_every=trainer.config.local_eval_frequency, after_eval=after_eval,
                  stop_when=_model_selection(trainer, flags_obj, decoded))
    if trainer.chief and trainer.step > start:
        # PNGs of the curves (the [viz] extra); a run with nothing to train is left as it was.
        plots.plot_run_if_possible(trainer.config.output_dir)
    return trainer.last_eval_results


def _check_dev_decode_flags(flags_obj: Any) -> None:
    """Refuses train_eval_and_decode's --decode_hparams and reference before training starts.

    Raises:
      UserError: one line naming the decode hparam or the reference file.
    """
    from t2t_lite.decoding import decode_hparams, decoding

    with runs.one_line_errors():
        decode_hp = decode_hparams.decode_hparams(flags_obj.decode_hparams or "")
    reference = flags_obj.decode_reference or decode_hp.decode_reference
    if reference:
        # The dev set's record count is known only when it is read: existence checked here.
        decoding.check_reference(os.path.expanduser(reference), None, "the dev set")


def _dev_decoder(trainer: Trainer, flags_obj: Any,
                 decoded: dict[str, float]) -> Callable[[int], Any]:
    """t2t's train_eval_and_decode: after each eval the chief decodes the dev set with
    --decode_hparams and logs its BLEU and --metrics (`dev_decode.decode_dev_and_score`);
    they are put in `decoded` for early stopping and keep-best."""
    from t2t_lite.decoding import decode_hparams
    from t2t_lite.training import dev_decode

    decode_hp = decode_hparams.decode_hparams(flags_obj.decode_hparams or "")
    decode_hparams.check_sampling(trainer.hparams, decode_hp)
    reference = flags_obj.decode_reference or decode_hp.decode_reference or None
    name_parts = (flags_obj.model, flags_obj.hparams_set, trainer.problem.name)

    metrics = mt_metrics.parse_metrics(getattr(flags_obj, "metrics", "bleu"))

    def decode(step: int) -> None:
        if trainer.chief:
            decoded.update(dev_decode.decode_dev_and_score(
                trainer.model, trainer.problem, trainer.hparams, trainer.data_dir, decode_hp,
                trainer.config.output_dir, step, name_parts, reference, metrics))

    return decode


def _metric_names(trainer: Trainer, flags_obj: Any) -> list[str]:
    """The metrics a train_and_eval run reports after each evaluation: the eval loss and
    metrics, and with train_eval_and_decode its dev decodes' BLEU and --metrics."""
    from t2t_lite.evaluation import metrics as metrics_lib

    eval_metrics = trainer.eval_metrics
    names = ["loss"] + [metrics_lib.metric_name(eval_metrics.problem_name, m)
                        for m in eval_metrics.graph_metrics + eval_metrics.host_metrics]
    if flags_obj.schedule == "train_eval_and_decode":
        metrics = mt_metrics.parse_metrics(getattr(flags_obj, "metrics", "bleu"))
        names += ["BLEU"] + [mt_metrics.SCALAR_NAMES[m] for m in metrics]
    return names


def _check_selection_flags(flags_obj: Any, mode: str) -> None:
    """Refuses early-stopping / keep-best flags that cannot work, before anything is written:
    outside train_and_eval, or naming a metric that is neither the loss, one of the problem's
    eval metrics, nor (train_eval_and_decode) a decoding metric.

    Raises:
      UserError: naming the flag.
    """
    from t2t_lite.training import early_stopping

    asked = {"eval_early_stopping_metric": getattr(flags_obj, "eval_early_stopping_steps", None),
             "best_checkpoint_metric": getattr(flags_obj, "keep_best_checkpoints", 0)}
    if not any(asked.values()) or mode == "eval":
        return
    validation.check_positive({"eval_early_stopping_steps": asked["eval_early_stopping_metric"],
                               "keep_best_checkpoints": asked["best_checkpoint_metric"] or None})
    if mode != "train_and_eval":
        raise UserError("--eval_early_stopping_steps / --keep_best_checkpoints need "
                        "evaluations: use --mode=train_and_eval (or t2t's "
                        "--schedule=train_and_evaluate)")
    known = {"loss", *registry.problem(flags_obj.problem).eval_metrics()}
    if flags_obj.schedule == "train_eval_and_decode":
        metrics = mt_metrics.parse_metrics(getattr(flags_obj, "metrics", "bleu"))
        known |= {"BLEU", *early_stopping.DECODE_METRIC_NAMES,
                  *(mt_metrics.SCALAR_NAMES[m] for m in metrics)}
    for flag, wanted in asked.items():
        name = getattr(flags_obj, flag)
        if wanted and name not in known and name.rsplit("/", 1)[-1] not in known:
            raise UserError(f"--{flag}={name}: not a metric of this run; use one of "
                            f"{', '.join(sorted(known))} (bleu, chrf, chrf++, ter need "
                            "--schedule=train_eval_and_decode)")
    # The selection's state read before anything is written: a damaged file is one line
    # naming it, not a failure after the run's files were rewritten.
    output_dir = os.path.expanduser(getattr(flags_obj, "output_dir", None) or "")
    if not output_dir:
        return
    if asked["eval_early_stopping_metric"]:
        early_stopping.read_state(output_dir)
    if asked["best_checkpoint_metric"]:
        from t2t_lite.utils import best_checkpoints

        try:
            best_checkpoints.read_index(os.path.join(output_dir, best_checkpoints.BEST_DIR))
        except ValueError as e:
            raise UserError(one_line(e)) from e


def _model_selection(trainer: Trainer, flags_obj: Any,
                     decoded: dict[str, float]) -> Callable[[dict[str, float]], bool] | None:
    """Early stopping (t2t's flags) and keep-best as `Trainer.train`'s `stop_when`: after each
    evaluation (and dev decode) of the chief. None when neither is asked for.

    Raises:
      UserError: a metric the run does not report, or several workers (not supported).
    """
    from t2t_lite.training import early_stopping, keep_best, run_card

    steps = getattr(flags_obj, "eval_early_stopping_steps", None)
    keep = getattr(flags_obj, "keep_best_checkpoints", 0) or 0
    if not steps and not keep:
        return None
    if trainer.multi_worker:
        raise UserError("--eval_early_stopping_steps / --keep_best_checkpoints: not supported "
                        "with several workers yet; train on one host")
    available = _metric_names(trainer, flags_obj)
    output_dir = trainer.config.output_dir
    early = best = None
    try:
        flag = "eval_early_stopping_metric"
        if steps:
            metric = early_stopping.resolve_metric(flags_obj.eval_early_stopping_metric, available)
            early = early_stopping.EarlyStopping(
                output_dir, metric, steps, flags_obj.eval_early_stopping_metric_delta,
                flags_obj.eval_early_stopping_metric_minimize)
        flag = "best_checkpoint_metric"
        if keep:
            metric = early_stopping.resolve_metric(flags_obj.best_checkpoint_metric, available)
            best = keep_best.BestCheckpoints(output_dir, keep, metric,
                                             early_stopping.lower_is_better(metric))
    except UserError:
        raise  # a state file that does not read, named
    except ValueError as e:
        raise UserError(f"--{flag}={getattr(flags_obj, flag)}: {e}") from e

    def stop_when(results: dict[str, float]) -> bool:
        step, merged = trainer.step, {**results, **decoded}
        decoded.clear()
        card: dict[str, Any] = {}
        if best is not None:
            best.consider(step, merged, trainer.write_checkpoint)
            card.update(best.run_card_values())
        stop = early.update(step, merged) if early is not None else False
        if early is not None:
            card = {**early.run_card_values(), **card}
        run_card.record_selection(output_dir, card)
        if stop:
            print(early.stop_message, flush=True)
        return stop

    return stop_when
