"""Training and evaluation (t2t-trainer's train / evaluate / train_and_evaluate schedules).

A custom loop under a tf.distribute strategy chosen from the machine (`create_strategy`):
the default strategy on one CPU or GPU, MirroredStrategy over `--worker_gpu` GPUs,
MultiWorkerMirroredStrategy when TF_CONFIG lists several workers. Each replica computes its
part of t2t's global loss `sum(num) / max(1, sum(den))` over ALL replicas (the token count is
all-reduced first), so the summed gradient is the gradient of the global per-token mean for
any number of replicas; gradients are summed over replicas once, then clipped (t2t's
`clip_grad_norm`) and applied (`t2t_lite.training.optimize`).

Dropout draws independent masks on every replica, worker and step: each replica's step
function seeds the stateless dropout of the model's layers with (--random_seed, global step,
replica id) (`common_layers.dropout_seed`), so masks are reproducible from --random_seed and
a resumed run draws the masks of an uninterrupted one without any RNG state in checkpoints.

Outputs in `output_dir`, as t2t's: checkpoints `ckpt-<n>` (tf.train.CheckpointManager: global
step, model, optimizer slots, multistep accumulators; with --deterministic
also the input pipeline position), `hparams.json` (sorted keys; on restart it overrides the hparams set, as in
t2t), `flags.json`, TensorBoard events (training scalars here, eval metrics in `eval/`).
Restarting resumes from the latest checkpoint.
"""
from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import random
import shutil
import time
import zlib
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from absl import logging
from tensorflow.python.util import deprecation

from t2t_lite import hparams_support, registry
from t2t_lite.data_generators import data_marker
from t2t_lite.data_generators.text_encoder import decode_until_stop
from t2t_lite.errors import RunStopped, UserError, storage_problem
from t2t_lite.evaluation import metrics as metrics_lib
from t2t_lite.hparams import HParams
from t2t_lite.hparams_lib import create_hparams
from t2t_lite.layers import common_layers, native_kernels
from t2t_lite.training import divergence_guard, optimize, run_card, summaries, warm_start
from t2t_lite.training.cluster_agreement import hparams_fingerprint
from t2t_lite.training.distribution import (  # noqa: F401 (create_strategy: trainer_lib's API)
    StopSignals, agree_across_workers,
    create_preemption_handler,
    create_strategy,
    is_chief,
    is_multi_worker,
    leave_cluster,
    lost_workers_are_one_line,
    stop_preemption_watchers,
    task_name,
    worker_scratch_dir,
)
from t2t_lite.utils import checkpoint_guard, precision, progress, run_lock, run_metadata, validation
from t2t_lite.utils import progress as progress_lib  # `progress` is a flag in _train_loop

TRAIN, EVAL = "train", "eval"
CHECKPOINT_PREFIX = "ckpt"
# t2t's `eval_autoregressive` decodes this many steps beyond the input length.
AUTOREGRESSIVE_EVAL_DECODE_LENGTH = 50


@dataclasses.dataclass
class RunConfig:
    """What a run does besides the model math (t2t-trainer's flags of the same names).

    Attributes:
      output_dir: checkpoints, hparams.json, flags.json and events.
      train_steps: total global steps (micro-batches, as t2t's global_step).
      eval_steps: eval batches per evaluation (0 = the whole eval set).
      local_eval_frequency: evaluate every this many steps (train_and_eval).
      save_checkpoints_steps: checkpoint every this many steps (None: local_eval_frequency).
      keep_checkpoint_max: checkpoints kept.
      log_step_count_steps: progress line and training summaries every this many steps.
      random_seed: seeds Python, NumPy, TensorFlow, Keras, the input pipeline and the
        dropout masks (None: a random seed per run).
      deterministic: TensorFlow op determinism (needs random_seed); also checkpoints the input
        pipeline position so that a resumed run sees the same batches.
      num_decode_examples: eval examples decoded greedily into text summaries (0 = none).
      decode_length: extra decode length for those examples (t2t's decode_length).
      eval_split: read this split for evaluation (e.g. "test"; None: the eval split).
      xla_compile: compile the training step with XLA; training batches are padded to
        their length bucket's boundary (one shape, one compilation, per bucket).
    """

    output_dir: str
    train_steps: int = 250000
    eval_steps: int = 100
    local_eval_frequency: int = 1000
    save_checkpoints_steps: int | None = None
    keep_checkpoint_max: int = 20
    log_step_count_steps: int = 100
    random_seed: int | None = None
    deterministic: bool = False
    num_decode_examples: int = 3
    decode_length: int = 50
    eval_split: str | None = None
    xla_compile: bool = False

    @property
    def checkpoint_every(self) -> int:
        return max(1, self.save_checkpoints_steps or self.local_eval_frequency)


class Trainer:
    """Trains and evaluates one model on one problem.

    Args:
      model_fn: () -> keras model; `model(features, training)` gives float32 logits
        [B, T, V] for features {"inputs": [B, L], "targets": [B, T], "target_space_id"}.
        Called under the strategy's scope and the hparams' mixed-precision policy. A model
        with `training_loss(features, label_smoothing, training, skip_padding) -> (num, den)`
        computes its training loss itself (the Transformer: with skip_padding, logits of
        non-padding positions only).
      hparams: model hparams.
      problem: a Problem (`dataset`, `get_hparams`, `eval_metrics`, `get_feature_encoders`).
      data_dir: the problem's data directory.
      config: RunConfig.
      strategy: tf.distribute strategy (default: the current one).
    """

    def __init__(
        self,
        model_fn: Callable[[], keras.Model],
        hparams: HParams,
        problem: Any,
        data_dir: str,
        config: RunConfig,
        strategy: tf.distribute.Strategy | None = None,
    ):
        self.hparams = hparams
        self.problem = problem
        self.data_dir = data_dir
        self.config = config
        self.strategy = strategy or tf.distribute.get_strategy()
        self.chief = is_chief()
        self.problem_hparams = problem.get_hparams(hparams, data_dir=data_dir)
        self.loss_multiplier = float(self.problem_hparams.get("loss_multiplier", 1.0))
        self.target_space_id = int(self.problem_hparams.get("target_space_id", 0))
        problem_name = problem.name + ("_rev" if getattr(problem, "was_reversed", False) else "")
        self.problem_name = (
            hparams_support.hparam(hparams, "overload_eval_metric_name") or problem_name)
        self.eval_metrics = metrics_lib.EvalMetrics(self.problem_name, problem.eval_metrics())

        # Schedules that need train_steps read it from the hparams, as in t2t (which adds it
        # in create_experiment); hparams.json keeps only the model's own hparams.
        opt_hparams = hparams.copy()
        if "train_steps" not in opt_hparams:
            opt_hparams.add_hparam("train_steps", config.train_steps)
        with self.strategy.scope(), precision.activation_policy(hparams):
            self.model = model_fn()
            if not self.model.trainable_variables:
                # A model that creates its weights on the first call: call it once on EOS ids.
                ones = tf.ones([1, 1], tf.int32)
                self.model(self._features({"inputs": ones, "targets": ones}), training=False)
            self.optimizer = optimize.OptimizerState(opt_hparams)
            self.optimizer.build(self.model.trainable_variables)
            self.global_step = tf.Variable(
                0, dtype=tf.int64, trainable=False, name="global_step",
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
            )
            # The first non-finite training step, kept on the device (never checkpointed) and
            # read only at progress lines, evaluations and saves: no host sync per step.
            self.divergence = divergence_guard.DivergenceRecord()
        # Created at the first summary, so that building a Trainer writes nothing.
        self._writers: dict[str, Any] = {}
        self._eval_step_fn = None
        self.run_lock = None  # set by create_trainer(lock=True)
        self.data_dir_lock = None  # likewise: data_dir's readers lock (run_lock)
        # The checkpoint of output_dir that this process has read whole (damage check):
        # restoring it later does not read it again.
        self._read_whole: str | None = None
        self.last_eval_results: dict[str, float] = {}
        self._stops_early = False
        # Dropout masks derive from this seed, the global step and the replica id.
        common_layers.number_dropout_layers(self.model)
        self.dropout_base_seed = (
            config.random_seed if config.random_seed is not None
            else random.SystemRandom().randrange(2**31))

    def _writer(self, name: str):
        """The chief's summary writer of output_dir ("train") or output_dir/eval; None
        on other workers."""
        if not self.chief:
            return None
        if name not in self._writers:
            directory = self.config.output_dir if name == TRAIN else os.path.join(
                self.config.output_dir, "eval")
            self._writers[name] = tf.summary.create_file_writer(directory)
            if name == TRAIN:  # the HParams dashboard's entry for this run
                summaries.write_hparams(self._writers[name], self.hparams.values(),
                                        self.config.output_dir)
        return self._writers[name]

    def _flush_summaries(self) -> None:
        """Writes out the events still buffered (before a multi-worker stop, whose process
        exits without the interpreter's teardown); a failing disk is reported elsewhere."""
        for writer in self._writers.values():
            with contextlib.suppress(tf.errors.OpError):
                writer.flush()

    @property
    def _train_writer(self):
        return self._writer(TRAIN)

    @property
    def _eval_writer(self):
        return self._writer(EVAL)

    @property
    def step(self) -> int:
        """The global step (micro-batches trained so far)."""
        return int(self.global_step.numpy())

    # --- Checkpoints ------------------------------------------------------------------------
    def _checkpoint(self, iterator=None) -> tf.train.Checkpoint:
        objects = {"step": self.global_step, "model": self.model,
                   **self.optimizer.checkpoint_objects()}
        # Non-trainable model state (none in the Transformer) is not reached by
        # tf.train.Checkpoint through Keras 3 layers: save it explicitly.
        if self.model.non_trainable_variables:
            objects["model_state"] = list(self.model.non_trainable_variables)
        if iterator is not None:
            objects["iterator"] = iterator
        return tf.train.Checkpoint(**objects)

    def _checkpoint_manager(self, iterator=None) -> tf.train.CheckpointManager:
        directory = self.config.output_dir
        if self.run_lock is not None:
            # The lock holder is the directory's only writer: a lost or damaged `checkpoint`
            # state file is rewritten from the checkpoints on disk, so that the manager
            # rotates them all and never saves over them from step 0.
            checkpoint_guard.repair_state_file(directory)
        if not self.chief:
            # Every MultiWorkerMirrored worker must save; only the chief's copy is kept. The
            # others write theirs to local scratch, never to the shared output_dir (whose
            # space, or a full disk, is the chief's).
            directory = worker_scratch_dir()
        return tf.train.CheckpointManager(
            self._checkpoint(iterator), directory, max_to_keep=self.config.keep_checkpoint_max,
            checkpoint_name=CHECKPOINT_PREFIX,
        )

    def restore(self, manager: tf.train.CheckpointManager | None = None) -> int:
        """Restores the newest readable checkpoint of output_dir (found on disk; if any);
        returns the global step.

        Args:
          manager: the training loop's manager (a resume: the optimizer state is restored
            too); None to restore the model and step for evaluation.

        Raises:
          UserError: output_dir holds checkpoints but none of them reads, or the newest does
            not match the model (one line naming the variables).
        """
        latest = self._newest_good_checkpoint()
        if latest:
            self._restore_strictly(manager.checkpoint if manager else self._checkpoint(),
                                   latest, resume=manager is not None)
            logging.info("Restored %s (global step %d)", latest, self.step)
        return self.step

    def check_resume(self) -> int:
        """A resume's check before anything is written (`create_trainer`): the newest
        readable checkpoint of output_dir must hold exactly the model's variables (names and
        shapes). Only its step is restored: `train` restores the rest, without reading the
        checkpoint for damage again. Silent: training repairs the state file and says so.

        Returns:
          The checkpoint's global step (0 without a checkpoint).

        Raises:
          UserError: as `restore`.
        """
        latest = self._newest_good_checkpoint(warn_state_file=False)
        if latest:
            checkpoint_guard.check_model_matches(self.model, latest, self.hparams,
                                                 _newest_name(latest))
            tf.train.Checkpoint(step=self.global_step).read(latest).expect_partial()
        return self.step

    def _newest_good_checkpoint(self, warn_state_file: bool = True) -> str | None:
        """`checkpoint_guard.newest_good_checkpoint` of output_dir, remembered, so that a
        checkpoint is read whole for damage once per process."""
        # A damaged newest checkpoint (a save cut short) falls back to the previous one.
        self._read_whole = checkpoint_guard.newest_good_checkpoint(
            self.config.output_dir, warn_state_file=warn_state_file,
            known_good=self._read_whole)
        return self._read_whole

    def _restore_strictly(self, checkpoint: tf.train.Checkpoint, path: str,
                          resume: bool = False) -> None:
        """Restores `path` after checking that its model variables are exactly the model's.

        A resume also needs the whole optimizer state (else one warning when there is none:
        an import has none); evaluation does not.
        """
        name = _newest_name(path)
        checkpoint_guard.check_model_matches(self.model, path, self.hparams, name)
        status = checkpoint.restore(path)
        status.expect_partial()
        if not resume:
            return
        if any(key.startswith("optimizer/") for key, _ in tf.train.list_variables(path)):
            # Every optimizer variable (slots, iterations, accumulators) must be found; an
            # input position missing from the checkpoint is not an error (the pipeline then
            # starts over, as without --deterministic).
            optimizer = tf.train.Checkpoint(**self.optimizer.checkpoint_objects()).restore(path)
            optimizer.expect_partial()
            checkpoint_guard.check_restore_status(optimizer, name)
        else:
            logging.warning("%s holds no optimizer state (an import or a hand-made checkpoint):"
                            " the optimizer starts afresh", path)

    def _save(self, manager: tf.train.CheckpointManager) -> None:
        try:
            path = manager.save(checkpoint_number=self.step)
        except Exception as e:
            problem = storage_problem(e)
            if problem is None or not self.chief:
                raise
            raise UserError(checkpoint_guard.failed_save_message(
                self.config.output_dir, self.step, problem, CHECKPOINT_PREFIX)) from e
        if not self.chief:
            # A non-chief worker's copy is written only because saving is a collective.
            shutil.rmtree(os.path.dirname(path), ignore_errors=True)
        else:
            logging.info("Saved checkpoint %s", path)

    def write_checkpoint(self, prefix: str) -> str:
        """Writes the weights, optimizer state and step at `prefix` (e.g. "run/best/ckpt-600"),
        outside the manager: no state file, never rotated (keep-best's copies)."""
        return self._checkpoint().write(prefix)

    def _save_unless_saved(self, manager: tf.train.CheckpointManager) -> str:
        """Saves the current step unless its checkpoint exists; returns the chief's path."""
        path = os.path.join(self.config.output_dir, f"{CHECKPOINT_PREFIX}-{self.step}")
        if not (manager.latest_checkpoint or "").endswith(f"{CHECKPOINT_PREFIX}-{self.step}"):
            self._save(manager)
        return path

    # --- Several workers --------------------------------------------------------------------
    @property
    def multi_worker(self) -> bool:
        """Whether this process is one of several MultiWorkerMirroredStrategy workers."""
        return is_multi_worker(self.strategy)

    def _task(self) -> str:
        resolver = self.strategy.cluster_resolver
        return task_name(resolver.task_type, resolver.task_id)

    def _check_same_state(self, step: int) -> None:
        """All workers must have restored the same step and checkpoint and read the same
        data: otherwise each trains its own model and the chief saves a mix. A collective:
        every worker calls it after restoring.

        Raises:
          UserError: (on every worker) naming what differs and the shared storage needed.
        """
        latest = self._newest_good_checkpoint() if step else ""
        marker = b""
        if hasattr(self.problem, "dataset_filename") and self.data_dir:
            from t2t_lite.data_generators import data_marker

            path = data_marker.marker_path(self.data_dir, self.problem.dataset_filename(),
                                           "train")
            if tf.io.gfile.exists(path):
                with tf.io.gfile.GFile(path, "rb") as f:
                    marker = f.read()
        local = tf.constant([step, zlib.crc32(os.path.basename(latest or "").encode()),
                             zlib.crc32(marker)], tf.int64)
        local_replicas = len(self.strategy.extended.worker_devices)

        def this_worker(context):
            del context
            return local

        values = self.strategy.experimental_distribute_values_from_function(this_worker)
        rows = self.strategy.gather(values, axis=0).numpy().reshape(-1, 3)[::local_replicas]
        if (rows == rows[0]).all():
            return
        steps = ", ".join(f"worker {i}: step {row[0]}" for i, row in enumerate(rows))
        what = ("restored different checkpoints (" + steps + "): --output_dir"
                if (rows[:, :2] != rows[0, :2]).any() else
                "read different training data (the train split's datagen marker differs): "
                "--data_dir")
        leave_cluster(self.strategy)
        raise UserError(f"the workers {what} must be the same shared storage for all workers "
                        "(a network file system or a bucket), not a local folder per host")

    def _preemption_handler(self, manager: tf.train.CheckpointManager, signals: StopSignals):
        """tf.distribute's PreemptionCheckpointHandler: a SIGINT/SIGTERM on any worker makes
        all workers save at the same step, then stop (`RunStopped`, the signal's exit code)."""
        def stop():
            path = os.path.join(self.config.output_dir, f"{CHECKPOINT_PREFIX}-{self.step}")
            if signals.received:
                cause = f"{signals.name} received"
            else:
                cause = "another worker received a stop signal (SIGTERM or SIGINT)"
            self._flush_summaries()
            leave_cluster(self.strategy)
            raise RunStopped(
                f"{cause}: all workers saved {path} at step {self.step}; start every worker "
                f"again with the same command to resume at step {self.step}",
                signals.exit_code, label="stopped", exit_now=True)

        return create_preemption_handler(
            self.strategy, signals, lambda: self._save_unless_saved(manager), stop,
            os.path.join(worker_scratch_dir(), "preemption_bookkeeping"))

    # --- Data ---------------------------------------------------------------------------------
    def distributed_dataset(self, mode: str):
        """The TRAIN or EVAL dataset of the problem, distributed over the strategy's replicas
        (each replica's batch is a dict of int tensors [B, T])."""
        kwargs = {"seed": self.config.random_seed} if mode == TRAIN else {}
        if (mode == TRAIN and self.config.xla_compile and "pad_to_bucket_boundaries"
                in inspect.signature(self.problem.dataset).parameters):
            # Few batch shapes, so that XLA compiles the step a few times only.
            kwargs["pad_to_bucket_boundaries"] = True
        if mode == EVAL and self.config.eval_split:
            kwargs["dataset_split"] = self.config.eval_split

        def dataset_fn(input_context):
            return self.problem.dataset(
                mode, self.data_dir, self.hparams, input_context=input_context, **kwargs
            )

        return self.strategy.distribute_datasets_from_function(dataset_fn)

    def _features(self, features: dict) -> dict:
        features = dict(features)
        features["target_space_id"] = tf.constant(self.target_space_id, tf.int32)
        return features

    # --- Train step -------------------------------------------------------------------------
    def replica_dropout_context(self):
        """Context (entered in replica context) in which the model's dropout layers draw
        this replica's masks for the current global step (see `common_layers.dropout_seed`)."""
        replica_id = tf.distribute.get_replica_context().replica_id_in_sync_group
        return common_layers.dropout_seed(common_layers.step_dropout_seed(
            self.dropout_base_seed, tf.convert_to_tensor(self.global_step), replica_id))

    def _replica_train_step(self, features: dict, update: bool, with_grads: bool) -> dict:
        ctx = tf.distribute.get_replica_context()
        replicas = ctx.num_replicas_in_sync
        variables = self.model.trainable_variables
        features = self._features(features)
        targets = features["targets"]
        with tf.GradientTape() as tape, self.replica_dropout_context():
            if hasattr(self.model, "training_loss"):
                # The model's own loss skips the logits of padding positions (same values).
                # XLA needs static shapes: keep the padding positions' logits there.
                num, den = self.model.training_loss(
                    features, self.hparams.label_smoothing, training=True,
                    skip_padding=not self.config.xla_compile)
            else:
                logits = self.model(features, training=True)
                num, den = common_layers.padded_cross_entropy(
                    logits, targets, self.hparams.label_smoothing
                )
            num = num * self.loss_multiplier
            global_den = ctx.all_reduce(tf.distribute.ReduceOp.SUM, den) if replicas > 1 else den
            loss = num / tf.maximum(global_den, 1.0)
            if self.hparams.weight_decay:
                # Added once to the global loss: each replica carries 1/replicas of it.
                loss += optimize.weight_decay(self.hparams.weight_decay, variables) / replicas
            scaled_loss = self.optimizer.optimizer.scale_loss(loss)
        grads = optimize.densify(tape.gradient(scaled_loss, variables))
        if replicas > 1:
            grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        scale = self.optimizer.loss_scale
        clip = self.hparams.clip_grad_norm
        if scale is None:
            grads, grad_norm = optimize.clip_by_global_norm(grads, clip)
        else:
            # Gradients are still loss-scaled: clipping at clip * scale equals clipping the
            # unscaled gradients at clip.
            scale = tf.cast(scale, tf.float32)
            grads, grad_norm = optimize.clip_by_global_norm(grads, clip and clip * scale)
            grad_norm = grad_norm / scale
        if update:
            self.optimizer.apply(grads, variables)
        else:
            self.optimizer.accumulate(grads)
        out = {"num": num, "den": den, "grad_norm": grad_norm}
        if with_grads:  # summarize_grads: the applied gradients, unscaled, by variable index
            out["grads"] = {str(i): g if scale is None else g / scale
                            for i, g in enumerate(grads) if g is not None}
        return out

    def _make_train_step(self, element_spec, update: bool, with_grads: bool = False):
        strategy = self.strategy

        # autograph=False: the step's control flow is explicit (tf ops, Python values), and
        # converting the model's source cost ~3.5 s of CPU at every start (bench/README.md).
        @tf.function(input_signature=[element_spec], jit_compile=self.config.xla_compile or None,
                     autograph=False)
        def train_step(features):
            with native_kernels.disabled(when=self.config.xla_compile):  # XLA: no custom ops
                out = strategy.run(self._replica_train_step, args=(features, update, with_grads))
            num = strategy.reduce(tf.distribute.ReduceOp.SUM, out["num"], axis=None)
            den = strategy.reduce(tf.distribute.ReduceOp.SUM, out["den"], axis=None)
            grad_norm = strategy.reduce(tf.distribute.ReduceOp.MEAN, out["grad_norm"], axis=None)
            loss = num / tf.maximum(den, 1.0)
            if self.optimizer.loss_scale is None:
                # float16 steps with non-finite values are skipped by the loss scaling (t2t's
                # behaviour); their weights are still checked before every save.
                self.divergence.record(self.global_step + 1, loss, grad_norm)
            self.global_step.assign_add(1)
            result = {"loss": loss, "tokens": den, "grad_norm": grad_norm}
            if with_grads:  # identical on every replica (summed over them): the first's
                result["grads"] = {i: strategy.experimental_local_results(g)[0]
                                   for i, g in out["grads"].items()}
            return result

        return train_step

    # --- Training loop ------------------------------------------------------------------------
    def train(
        self,
        eval_every: int | None = None,
        stop_when: Callable[[dict[str, float]], bool] | None = None,
        after_eval: Callable[[int], Any] | None = None,
    ) -> dict[str, float]:
        """Trains until `config.train_steps`, resuming from the latest checkpoint.

        Args:
          eval_every: evaluate every this many steps and at the end (None: never).
          stop_when: optional predicate on each evaluation's results; training stops early
            (after a checkpoint) when it returns True.
          after_eval: optional function of the global step called after each evaluation
            (train_eval_and_decode decodes the dev set there).

        Returns:
          The last training statistics ({"loss", "learning_rate", ...}).
        """
        config = self.config
        dataset = self.distributed_dataset(TRAIN)
        iterator = iter(dataset)
        manager = self._checkpoint_manager(iterator if config.deterministic else None)
        step = self.restore(manager)
        if self.multi_worker:
            self._check_same_state(step)
        if step:
            logging.info("Resuming training at global step %d: %s", step,
                         self._resumed_data_order())
        if step >= config.train_steps:
            logging.info("Global step %d >= train_steps %d: nothing to train", step,
                         config.train_steps)
            return {}
        summarize_grads = hparams_support.hparam(self.hparams, "summarize_grads")
        steps = self.train_step_fns = {
            (update, grads): self._make_train_step(iterator.element_spec, update, grads)
            for update in (True, False) for grads in {False, bool(summarize_grads)}}
        stats = summaries.TrainingStats(step)
        logging.info("Training from step %d to %d (the first step traces and compiles the "
                     "model: it takes longest)", step, config.train_steps)
        started = (step, time.time())  # for the run card
        self._stops_early = stop_when is not None  # the progress lines' ETA is an upper bound
        with StopSignals() as signals, lost_workers_are_one_line(
                self.strategy, self.config.output_dir, lambda: self.step, self._flush_summaries):
            preemption = self._preemption_handler(manager, signals) if self.multi_worker else None
            last = self._train_loop(steps, iterator, manager, stats, eval_every, stop_when,
                                    after_eval, signals, preemption)
            if preemption is not None:
                stop_preemption_watchers(preemption)
        if self.chief:
            run_card.record_training(config.output_dir, self.step, started[0],
                                     time.time() - started[1], last)
        return last

    def _train_loop(self, steps, iterator, manager, stats, eval_every, stop_when, after_eval,
                    signals: StopSignals, preemption) -> dict[str, float]:
        """Train's loop from the restored step to train_steps (or a stop); returns the last
        progress statistics."""
        config = self.config
        step = self.step
        last = {}
        first = progress_lib.FirstReport(step + 1, config.train_steps, config.log_step_count_steps)
        while step < config.train_steps:
            # t2t writes its summaries at the progress steps: the gradients of those steps.
            progress = ((step + 1) % config.log_step_count_steps == 0
                        or step + 1 == config.train_steps)
            update = self.optimizer.is_update_step(step)
            out = steps[update, progress and (update, True) in steps](next(iterator))
            step += 1
            stats.add(out)
            evaluate = eval_every and (step % eval_every == 0 or step == config.train_steps)
            save = step % config.checkpoint_every == 0 or step == config.train_steps
            if progress or evaluate or save:
                self.check_finite(manager, weights=save or evaluate)
            if progress:
                last = self._log_progress(stats, step, out.get("grads"))
            # Workers log at the same steps: no time-based report there.
            if first.after_step(step, logged=progress, timed=not self.multi_worker):
                stats.flush(step)  # the next line's steps/s and ETA leave the tracing out
            elif first.due():
                last = self._log_progress(stats, step)  # the time-based first report
            stop = False
            if evaluate:
                results = self.evaluate()
                if after_eval is not None:
                    after_eval(step)
                stop = stop_when is not None and stop_when(results)
            if save or stop:
                self._save(manager)
            if stop:
                logging.info("Stopping at step %d: the stop condition holds", step)
                break
            if preemption is not None:
                # All workers agree on the step; TensorFlow's handler calls its own deprecated
                # run counter there.
                with deprecation.silence():
                    preemption.save_checkpoint_if_preempted()
            elif signals.received:
                path = self._save_unless_saved(manager)
                raise RunStopped(f"{signals.name} received: saved {path} at step {step}; run "
                                 f"the same command again to resume at step {step}",
                                 signals.exit_code, label="stopped")
        return last

    def check_finite(self, manager: tf.train.CheckpointManager, weights: bool = True) -> None:
        """Stops training if a step since the start had a non-finite loss or gradient norm,
        or (with `weights`) if a weight is non-finite; called before every save, so that no
        non-finite checkpoint is ever written and rotation never removes the good ones.

        Raises:
          divergence_guard.TrainingDiverged: naming the step, the value and the last good
            checkpoint.
        """
        problem = self.divergence.problem()
        if problem is None and weights and not divergence_guard.all_finite(
                self.model.trainable_variables):
            problem = f"a model weight is non-finite at step {self.step}"
        if problem is not None:
            raise divergence_guard.TrainingDiverged(problem, manager.latest_checkpoint)

    def _resumed_data_order(self) -> str:
        """What a resumed run reads first (for the log line at resume)."""
        if self.config.deterministic:
            return "the input pipeline continues where the checkpoint left it (--deterministic)"
        if self.config.random_seed is not None:
            return ("the training data order restarts from its beginning: the batches of steps "
                    f"0, 1, ... of --random_seed={self.config.random_seed} are read again, as "
                    "in t2t (--deterministic restores the input position instead)")
        return ("the training data order restarts with a new random shuffle, as in t2t "
                "(--deterministic with --random_seed restores the input position instead)")

    def _log_progress(self, stats: summaries.TrainingStats, step: int, grads=None) -> dict[str, float]:
        values = stats.flush(step)
        values["learning_rate"] = float(self.optimizer.learning_rate(step - 1))
        logging.info(
            "step %d/%d: loss %.4f, lr %.3g, grad norm %.3g, %.0f tokens/s, %.2f steps/s, %s",
            step, self.config.train_steps, values["loss"], values["learning_rate"],
            values["global_norm/gradient_norm"], values["tokens/sec"],
            values["global_step/sec"], progress.training_eta(
                step, self.config.train_steps, values["global_step/sec"], self._stops_early),
        )
        scalars = dict(values)
        scalars["losses/training"] = values["loss"]
        summaries.write_scalars(self._train_writer, scalars, step)
        variables = self.model.trainable_variables
        if grads is not None:  # t2t's summarize_grads
            summaries.write_gradient_summaries(
                self._train_writer, [grads.get(str(i)) for i in range(len(variables))],
                [v.path for v in variables], step, bool(self.hparams.clip_grad_norm))
        if hparams_support.hparam(self.hparams, "summarize_vars"):
            summaries.write_variable_summaries(self._train_writer, variables, step)
        return values

    # --- Evaluation ---------------------------------------------------------------------------
    def _autoregressive_logits(self, features: dict) -> tf.Tensor:
        """t2t's `eval_run_autoregressive` logits: greedy decoding on the model's own outputs.

        Position t is predicted from the inputs and the model's argmax at positions < t (not
        the reference targets), as t2t's `_slow_greedy_infer`, which runs
        `len(inputs) + AUTOREGRESSIVE_EVAL_DECODE_LENGTH` steps; target positions beyond
        that get zero logits (t2t pads its logits with zeros to the targets' length).
        Quadratic in the target length, as t2t's.

        Args:
          features: eval features with "targets" int [B, T] (and "inputs" [B, L]).

        Returns:
          float32 logits [B, T, V].
        """
        targets = tf.cast(features["targets"], tf.int32)
        length = tf.shape(targets)[1]
        steps = length
        if "inputs" in features:
            steps = tf.minimum(length, tf.shape(features["inputs"])[1]
                               + AUTOREGRESSIVE_EVAL_DECODE_LENGTH)
        positions = tf.range(length)

        def step(t, ids, collected):
            logits = self.model(dict(features, targets=ids), training=False)
            current = logits[:, t]
            best = tf.argmax(current, axis=-1, output_type=tf.int32)
            ids = tf.where(positions[None, :] == t, best[:, None], ids)
            return t + 1, ids, collected.write(t, current)

        collected = tf.TensorArray(tf.float32, size=steps)
        _, _, collected = tf.while_loop(
            lambda t, *_: t < steps, step, (0, tf.zeros_like(targets), collected))
        logits = tf.transpose(collected.stack(), [1, 0, 2])
        return tf.pad(logits, [[0, 0], [0, length - steps], [0, 0]])

    def _replica_eval_step(self, features: dict) -> dict:
        features = self._features(features)
        targets = features["targets"]
        if hparams_support.hparam(self.hparams, "eval_run_autoregressive"):
            logits = self._autoregressive_logits(features)
        else:
            logits = self.model(features, training=False)
        num, den = common_layers.padded_cross_entropy(logits, targets, 0.0)
        out = {"num": num * self.loss_multiplier, "den": den,
               "metrics": self.eval_metrics.graph_sums(logits, targets)}
        if self.eval_metrics.host_metrics:
            out["outputs"] = tf.argmax(logits, axis=-1, output_type=tf.int32)
            out["targets"] = tf.cast(targets, tf.int32)
        return out

    def _make_eval_step(self, element_spec):
        strategy = self.strategy

        @tf.function(input_signature=[element_spec], autograph=False)  # as the train step
        def eval_step(features):
            out = strategy.run(self._replica_eval_step, args=(features,))
            summed = {
                key: strategy.reduce(tf.distribute.ReduceOp.SUM, out[key], axis=None)
                for key in ("num", "den")
            }
            summed["metrics"] = {
                k: strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None)
                for k, v in out["metrics"].items()
            }
            local = {
                key: strategy.experimental_local_results(out[key])
                for key in ("outputs", "targets") if key in out
            }
            return summed, local

        return eval_step

    def evaluate(self) -> dict[str, float]:
        """One pass of at most `eval_steps` eval batches with the current weights.

        Dropout is off and label smoothing 0 (t2t's eval mode). With
        `hparams.eval_run_autoregressive` the logits come from greedy decoding instead of
        teacher forcing (`_autoregressive_logits`); loss and metrics compare them with the
        targets (t2t's metrics do the same; t2t's reported loss is instead that of the model
        on its own outputs). Writes `loss` and the
        problem's `metrics-<problem>/targets/*` to output_dir/eval and a few greedy decodes.

        Returns:
          {"loss": mean batch loss, "metrics-...": value, ...}.
        """
        dataset = self.distributed_dataset(EVAL)
        iterator = iter(dataset)
        if self._eval_step_fn is None:
            self._eval_step_fn = self._make_eval_step(iterator.element_spec)
        self.eval_metrics.reset()
        batch_losses = []
        first_batch = None
        for index, features in enumerate(iterator):
            if self.config.eval_steps and index >= self.config.eval_steps:
                break
            if first_batch is None:
                first_batch = features
            summed, local = self._eval_step_fn(features)
            batch_losses.append(float(summed["num"]) / max(1.0, float(summed["den"])))
            self.eval_metrics.update_graph({k: v.numpy() for k, v in summed["metrics"].items()})
            for outputs, targets in zip(local.get("outputs", ()), local.get("targets", ())):
                self.eval_metrics.update_host(outputs.numpy(), targets.numpy())
        if self.eval_metrics.host_metrics and self.strategy.num_replicas_in_sync > 1:
            self._sum_host_metrics_over_workers()
        step = self.step
        results = {"loss": float(np.mean(batch_losses)) if batch_losses else 0.0}
        results.update(self.eval_metrics.results())
        for line in metrics_lib.eval_lines(step, results):
            logging.info("%s", line)
        summaries.write_scalars(self._eval_writer, results, step)
        if self.chief:
            run_card.record_eval(self.config.output_dir, step, results)
        if first_batch is not None and self.config.num_decode_examples:
            self._summarize_decodes(first_batch, step)
        self.last_eval_results = results
        return results

    def _sum_host_metrics_over_workers(self) -> None:
        """Adds up the host metrics' sums of all workers (each evaluated its own share of the
        eval set), so that every worker reports the metrics of the whole eval run, as the
        graph metrics already are. Every worker must call it (a collective)."""
        local = tf.constant(self.eval_metrics.host_sums(), tf.float64)
        local_replicas = len(self.strategy.extended.worker_devices)

        def one_copy_per_worker(context):
            # This worker's sums cover all its local replicas: only its first one adds them.
            first = context.replica_id_in_sync_group % local_replicas == 0
            return local if first else tf.zeros_like(local)

        values = self.strategy.experimental_distribute_values_from_function(one_copy_per_worker)
        total = self.strategy.reduce(tf.distribute.ReduceOp.SUM, values, axis=None)
        self.eval_metrics.set_host_sums(total.numpy())

    def decode_examples(self, features: dict, count: int) -> list[dict[str, str]]:
        """Greedy decodes of the first `count` examples of an eval batch, as text.

        Args:
          features: an eval batch (possibly per-replica) with "inputs" and "targets".
          count: number of examples.

        Returns:
          [{"inputs": str, "targets": str, "outputs": str}, ...] (empty if the model has no
          `infer` or the problem no inputs).
        """
        local = self.strategy.experimental_local_results(features)[0]
        if "inputs" not in local or not hasattr(self.model, "infer"):
            return []
        inputs = local["inputs"][:count]
        decoded = self.model.infer(
            {"inputs": inputs, "target_space_id": self.target_space_id},
            decode_length=self.config.decode_length,
        )["outputs"]
        encoders = self.problem.get_feature_encoders(self.data_dir)
        examples = []
        for i in range(int(tf.shape(inputs)[0])):
            examples.append({
                "inputs": decode_until_stop(encoders["inputs"], inputs[i]),
                "targets": decode_until_stop(encoders["targets"], local["targets"][i]),
                "outputs": decode_until_stop(encoders["targets"], decoded[i]),
            })
        return examples

    def _summarize_decodes(self, features: dict, step: int) -> None:
        examples = self.decode_examples(features, self.config.num_decode_examples)
        for i, ex in enumerate(examples):
            logging.info("Decode %d: inputs: %s | targets: %s | outputs: %s", i,
                         ex["inputs"], ex["targets"], ex["outputs"])
        self.summarize_decodes(examples, step)

    def summarize_decodes(self, examples: list[dict[str, str]], step: int) -> None:
        """Writes decoded examples ({"inputs", "targets", "outputs"} strings) as the eval
        dir's "decodes" text summary: a markdown table (chief only)."""
        if not examples:
            return
        lines = [f"| {ex['inputs']} | {ex['targets']} | {ex['outputs']} |" for ex in examples]
        table = "| inputs | targets | outputs |\n|---|---|---|\n" + "\n".join(lines)
        summaries.write_text(self._eval_writer, "decodes", table, step)

    def continuous_eval(self, timeout_secs: float = 600) -> dict[str, float]:
        """Evaluates each new checkpoint until one reaches train_steps (t2t's continuous_eval).

        Args:
          timeout_secs: stop after this long without a new checkpoint.

        Returns:
          The last evaluation's results.
        """
        checkpoint = self._checkpoint()
        for path in checkpoint_guard.new_checkpoints(self.config.output_dir, timeout_secs):
            self._restore_strictly(checkpoint, path)
            self.evaluate()
            if self.step >= self.config.train_steps:
                break
        return self.last_eval_results


def create_trainer(
    problem: Any,
    hparams_set: str,
    hparams_overrides: str,
    model_name: str,
    data_dir: str,
    config: RunConfig,
    strategy: tf.distribute.Strategy | None = None,
    warm_start_from: str | None = None,
    warm_start_partial: bool = False,
    flag_values: dict[str, Any] | None = None,
    lock: bool = False,
) -> Trainer:
    """A Trainer for `model_name` on `problem`, as t2t-trainer builds it.

    The hparams are the set, then `config.output_dir/hparams.json` (a restarted run keeps
    its hparams, as in t2t), then `hparams_overrides`. Check first, write after: a training
    run (`lock`) that resumes from a checkpoint must keep the problem, model, hparams set and
    the hparams that shape the checkpoint (`run_metadata.check_resume`); the model is built,
    the warm start or the checkpoint restored, and only then does the chief take the lock and
    write hparams.json, flags.json (when `flag_values` is given) and the run card (with a
    "history" entry for a resume). Evaluation (no `lock`) reads the run's files and writes
    only a run card setup section where there is none.

    Args:
      problem: a Problem instance whose data is in `data_dir`.
      hparams_set: registered hparams set name.
      hparams_overrides: "a=1,b=2" overrides ("" for none).
      model_name: registered model name.
      data_dir: the problem's data directory.
      config: RunConfig.
      strategy: tf.distribute strategy (default: the current one).
      warm_start_from: checkpoint (prefix or directory) to initialise the model from when
        output_dir holds no checkpoint yet.
      warm_start_partial: load the variables that match and keep the others' initial values.
      flag_values: the run's flags (name -> value) for flags.json.
      lock: a training run: the chief takes output_dir's run lock (`run_lock`, released at
        exit), removes the temporary folders of a killed save and writes the run's files.

    Returns:
      The Trainer (checked against the checkpoint, with its step, when it resumes a
      training run: `train` restores it).

    Raises:
      UserError: hparams out of range (`validation.check_hparams`), a resume that changes
        what output_dir was trained with, a damaged hparams.json / flags.json, output_dir
        locked by a live run.
    """
    hparams = create_hparams(hparams_set, hparams_overrides,
                             hparams_json_path=os.path.join(config.output_dir, "hparams.json"))
    validation.check_hparams(hparams)
    resume_from = checkpoint_guard.checkpoints_newest_first(config.output_dir) if lock else None
    changes = None
    if resume_from:  # on every worker: all of them stop, none waits for the chief
        problem_name = problem.name + ("_rev" if getattr(problem, "was_reversed", False)
                                       else "")
        changes = run_metadata.check_resume(
            config.output_dir, {"problem": problem_name, "model": model_name,
                                "hparams_set": hparams_set},
            hparams.values(), flag_values)
    problem_hparams = problem.get_hparams(hparams, data_dir=data_dir)
    vocab = problem_hparams.vocab_size
    # What gives the ids their meaning: a changed vocabulary is refused before anything is
    # written (`run_metadata.check_inputs`), a training run records it.
    dataset_filename = getattr(problem, "dataset_filename", None)
    inputs = data_marker.run_inputs(getattr(problem_hparams, "vocabulary", None) or {}, data_dir,
                                    dataset_filename() if dataset_filename else None)
    if resume_from:
        changes += run_metadata.check_inputs(config.output_dir, inputs, "train")
    elif warm_start_from and lock:
        run_metadata.check_parent_vocabulary(warm_start_from, inputs)
    if not resume_from and not lock:
        run_metadata.check_same_model(config.output_dir, hparams.values(), "eval")
        run_metadata.check_inputs(config.output_dir, inputs, "eval")
    model_cls = registry.model(model_name)
    input_vocab = vocab.get("inputs", vocab["targets"])

    def model_fn():
        return model_cls(hparams, input_vocab, vocab["targets"])

    # Every worker builds the same model from the same hparams (hparams.json included), and
    # all have passed their own checks, before the model's variables (collectives) exist.
    agree_across_workers(
        strategy or tf.distribute.get_strategy(), "hparams", hparams_fingerprint(hparams.values()),
        "every worker must resolve the same hparams: start them all with the same --hparams_set "
        "and --hparams, and one shared --output_dir (its hparams.json)")
    trainer = Trainer(model_fn, hparams, problem, data_dir, config, strategy)
    if warm_start_from and not checkpoint_guard.checkpoints_newest_first(config.output_dir):
        warm_start.warm_start(trainer.model, warm_start_from, allow_partial=warm_start_partial)
    if not is_chief():
        return trainer
    if not lock:
        run_card.record_setup(config.output_dir, problem, model_name, hparams_set,
                              hparams_overrides, hparams,
                              trainer.strategy.num_replicas_in_sync, training=False)
        return trainer
    if resume_from:
        # Before anything is written: a checkpoint that does not fit leaves the run's files
        # as they were (train restores it, with the input pipeline).
        trainer.check_resume()
    trainer.run_lock = run_lock.acquire(config.output_dir)
    trainer.data_dir_lock = run_lock.hold_data_dir(data_dir)  # no --overwrite_data meanwhile
    if resume_from and trainer.step >= config.train_steps:
        return trainer  # nothing to train (`train` says so): the run's files stay as they are
    checkpoint_guard.remove_temp_folders(config.output_dir, CHECKPOINT_PREFIX)
    run_metadata.save_hparams(config.output_dir, hparams)
    run_metadata.save_inputs(config.output_dir, inputs)
    if changes is not None:
        changes = run_card.with_replicas_change(config.output_dir, problem, hparams,
                                                trainer.strategy.num_replicas_in_sync, changes)
    run_card.record_setup(config.output_dir, problem, model_name, hparams_set,
                          hparams_overrides, hparams, trainer.strategy.num_replicas_in_sync,
                          training=True)
    if changes is not None:
        run_card.record_resume(config.output_dir, trainer.step, changes)
    if flag_values is not None:
        run_metadata.save_flags(config.output_dir, flag_values)
    return trainer


def _newest_name(path: str) -> str:
    """How errors name the checkpoint a run resumes from."""
    return f"{path} (the newest checkpoint of --output_dir)"
