"""run.py's `import_t2t` mode: an original tensor2tensor checkpoint -> a t2t_lite run directory,
with the optimizer state when the checkpoint holds that of hparams.optimizer.

The weights go through `t2t_lite.models.t2t_checkpoint` (t2t names, all-or-nothing checks).
The optimizer state maps exactly for Adafactor (`adafactor.t2t_slot_names`) and Adam (TF1's
`<w>/Adam`, `<w>/Adam_1`; its beta powers are Keras' bias corrections at the update count):
`load_t2t_optimizer_state` assigns it to the optimizer a training run builds
(`optimize.OptimizerState`), with the checkpoint's global_step as its update count, and
`import_checkpoint` saves that optimizer under the trainer's checkpoint names, so that
`--mode=train` on the new run directory resumes at t2t's step with t2t's slots.
"""
from __future__ import annotations

import json
import os
import re

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from t2t_lite import file_io
from t2t_lite.hparams import HParams
from t2t_lite.models import t2t_checkpoint
from t2t_lite.models.transformer import Transformer
from t2t_lite.training import adafactor, optimize
from t2t_lite.utils import run_metadata

# t2t's `optimize_loss(name="training")` variable scope holds its optimizer's slots and beta
# powers; a train op built outside it (a hand-made TF1 graph) leaves them unscoped.
_OPTIMIZER_SCOPES = ("training/", "")
# Optimizer state of any t2t optimizer (TF1 slots, TF2 LazyAdam), to say it is not imported.
_SLOT_RE = re.compile(r".*/(Adam|Adam_1|Momentum|Adafactor\w*|LazyAdam\w*)(/.*)?|"
                      r"training/LazyAdam/.*")
# hparams.optimizer values whose t2t state maps exactly onto t2t_lite's optimizer.
IMPORTED_OPTIMIZERS = ("adafactor", "adam", "true_adam")


def _log_unread_state(prefix: str, shapes: dict, optimizer: str) -> None:
    """Says that the checkpoint's optimizer state, if it has any, is not imported."""
    others = sorted(n for n in shapes if _SLOT_RE.fullmatch(n))
    if others:
        logging.warning("%s holds optimizer state that hparams.optimizer=%s does not read (e.g. "
                        "%s): the optimizer starts afresh", prefix, optimizer, others[0])


def _t2t_optimizer_names(model: Transformer, optimizer) -> dict[str, keras.Variable] | None:
    """t2t checkpoint name (without t2t's "training/" scope) -> t2t_lite optimizer variable,
    for the optimizers whose t2t state maps exactly; None for the others.

    Adafactor: `t2t_slot_names` per weight. Adam (t2t's `true_adam`, and `adam`, whose TF1
    LazyAdamOptimizer keeps the same slots and takes dense gradients from the symbol
    modality): `<weight>/Adam` is Keras' first moment, `<weight>/Adam_1` its second.
    """
    if isinstance(optimizer, adafactor.Adafactor):
        names = {}
        for name, var in t2t_checkpoint.t2t_variable_map(model).items():
            slots = optimizer.slots(var)
            for slot, t2t_name in adafactor.t2t_slot_names(
                    name, var.shape, optimizer.beta1, optimizer.factored).items():
                names[t2t_name] = slots[slot]
        return names
    if isinstance(optimizer, keras.optimizers.Adam) and model.hparams.optimizer in (
            "adam", "true_adam"):
        names = {}
        for name, var in t2t_checkpoint.t2t_variable_map(model).items():
            index = optimizer._get_variable_index(var)
            names[f"{name}/Adam"] = optimizer._momentums[index]
            names[f"{name}/Adam_1"] = optimizer._velocities[index]
        return names
    return None


def load_t2t_optimizer_state(model: Transformer, optimizer: keras.optimizers.Optimizer,
                             checkpoint_path: str) -> bool:
    """Assigns a t2t checkpoint's optimizer state to `optimizer`, all or nothing.

    `optimizer` is the one a t2t_lite training run builds for the model's hparams
    (`optimize.OptimizerState(...).optimizer`, built on `model.trainable_variables`). Its slots
    take t2t's values and its update count (`iterations`, the step Adafactor's decay and
    Adam's bias correction read) takes the checkpoint's `global_step`, so that training goes
    on exactly as t2t's would.

    Args:
      model: the Transformer the checkpoint's weights were loaded into.
      optimizer: the optimizer of hparams.optimizer adafactor, adam or true_adam (others:
        nothing is read).
      checkpoint_path: t2t checkpoint prefix or directory.

    Returns:
      Whether optimizer state was read: False when the checkpoint holds none of this
      optimizer (a checkpoint of another optimizer is logged).

    Raises:
      t2t_checkpoint.T2TCheckpointError: the checkpoint holds part of the state, or slots of
        other shapes (listing them); `optimizer` is left unchanged.
    """
    prefix = t2t_checkpoint.resolve_checkpoint(checkpoint_path)
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    wanted = _t2t_optimizer_names(model, inner)
    scope = next((s for s in _OPTIMIZER_SCOPES
                  if wanted and any(s + name in shapes for name in wanted)), None)
    if scope is None:
        _log_unread_state(prefix, shapes, model.hparams.optimizer)
        return False
    missing = sorted(scope + n for n in wanted if scope + n not in shapes)
    mismatched = sorted(
        f"{scope}{name}: checkpoint {list(shapes[scope + name])} vs optimizer {list(var.shape)}"
        for name, var in wanted.items()
        if scope + name in shapes and tuple(shapes[scope + name]) != tuple(var.shape))
    if missing or mismatched:
        parts = [t2t_checkpoint.format_names("Missing from the checkpoint", missing),
                 t2t_checkpoint.format_names("Shape mismatches", mismatched)]
        hint = (" (optimizer_adafactor_beta1 and optimizer_adafactor_factored set which slots "
                "there are)" if isinstance(inner, adafactor.Adafactor) else "")
        raise t2t_checkpoint.T2TCheckpointError(
            f"t2t checkpoint {prefix} holds {model.hparams.optimizer} state that does not "
            f"match the optimizer{hint}:\n" + "\n".join(p for p in parts if p))
    values = {name: reader.get_tensor(scope + name) for name in wanted}
    for name, var in wanted.items():
        var.assign(values[name].astype(np.dtype(var.dtype)))
    if reader.has_tensor("global_step"):
        inner.iterations.assign(int(reader.get_tensor("global_step")))
    return True


def import_checkpoint(checkpoint_path: str, hparams: HParams, output_dir: str) -> str:
    """Converts an original t2t checkpoint into a t2t_lite checkpoint.

    Writes `tf.train.Checkpoint(step=global_step, model=model)` under `output_dir` (prefix
    "ckpt", managed by tf.train.CheckpointManager) plus `hparams.json` and `t2t_import.json`.
    When the checkpoint holds the state of hparams.optimizer (adafactor, adam, true_adam:
    `load_t2t_optimizer_state`) the checkpoint also has `optimizer=` (and the other objects of
    a training run's `OptimizerState.checkpoint_objects`), named as the trainer names them, so
    that `--mode=train` on output_dir resumes at global_step with t2t's slots (with
    activation_dtype=float16 the loss scale starts at its initial value). Nothing is written
    if the checkpoint does not match the hparams.

    Args:
      checkpoint_path: the t2t checkpoint (prefix or directory).
      hparams: the hparams it was trained with.
      output_dir: the new t2t_lite run directory.

    Returns:
      The path of the written checkpoint.
    """
    source = t2t_checkpoint.resolve_checkpoint(checkpoint_path)
    model = t2t_checkpoint.load_model(source, hparams)
    reader = tf.train.load_checkpoint(source)
    step = 0
    if reader.has_tensor("global_step"):
        step = int(reader.get_tensor("global_step"))
    with_optimizer, objects = False, {}
    if hparams.optimizer in IMPORTED_OPTIMIZERS:
        # The optimizer the trainer builds, on the same variables in the same order; its
        # learning-rate schedule is not saved, so train_steps (which the trainer adds) is moot.
        opt_hparams = hparams.copy()
        if "train_steps" not in opt_hparams:
            opt_hparams.add_hparam("train_steps", max(step, 1))
        state = optimize.OptimizerState(opt_hparams)
        state.build(model.trainable_variables)
        with_optimizer = load_t2t_optimizer_state(model, state.optimizer, source)
        if with_optimizer:
            objects = state.checkpoint_objects()
    else:
        # Other optimizers (t2t's yellow_fin, adam_w, ... included): the weights only, as a
        # run that only decodes needs no optimizer t2t_lite can build.
        _log_unread_state(source, reader.get_variable_to_shape_map(), hparams.optimizer)
    tf.io.gfile.makedirs(output_dir)
    checkpoint = tf.train.Checkpoint(step=tf.Variable(step, dtype=tf.int64), model=model,
                                     **objects)
    manager = tf.train.CheckpointManager(checkpoint, output_dir, max_to_keep=None,
                                         checkpoint_name="ckpt")
    path = manager.save(checkpoint_number=step)
    run_metadata.save_hparams(output_dir, model.hparams)
    file_io.atomic_write(
        os.path.join(output_dir, "t2t_import.json"),
        json.dumps({
            "t2t_checkpoint": source,
            "global_step": step,
            "optimizer_state": hparams.optimizer if with_optimizer else None,
            "input_vocab_size": model.input_vocab_size,
            "target_vocab_size": model.target_vocab_size,
        }, indent=1, sort_keys=True),
    )
    return path
