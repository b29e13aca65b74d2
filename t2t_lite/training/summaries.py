"""The run's TensorBoard summaries: scalars and text (written with `tf.summary.write` and the
plugins' metadata, so that writing needs no tensorboard package), and the run's hparams in
the format of TensorBoard's HParams plugin, so the dashboard lists every run of a directory
with its settings next to its dev metrics.
"""
from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import tensorflow as tf
from tensorboard.plugins.hparams import api as hparams_api
from tensorflow.core.framework import summary_pb2


def _summary_metadata(plugin_name: str) -> summary_pb2.SummaryMetadata:
    return summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name=plugin_name)
    )


def write_scalars(writer, values: dict[str, float], step: int) -> None:
    """Writes TensorBoard scalars (the "scalars" plugin's format) and flushes.

    Args:
      writer: a tf.summary file writer, or None to do nothing.
      values: tag -> value.
      step: the global step.
    """
    if writer is None:
        return
    metadata = _summary_metadata("scalars")
    with writer.as_default():
        for name, value in values.items():
            tf.summary.write(name, tf.constant(value, tf.float32), step=step, metadata=metadata)
    writer.flush()


def write_text(writer, name: str, text: str, step: int) -> None:
    """Writes a TensorBoard text summary (markdown) and flushes.

    Args:
      writer: a tf.summary file writer, or None to do nothing.
      name: the tag.
      text: markdown.
      step: the global step.
    """
    if writer is None:
        return
    with writer.as_default():
        tf.summary.write(name, tf.constant(text), step=step, metadata=_summary_metadata("text"))
    writer.flush()


def _dashboard_value(value: Any) -> bool | int | float | str:
    """HParams plugin values are bool, number or string: lists and None become JSON text."""
    if isinstance(value, bool | int | float | str):
        return value
    return json.dumps(value)


def write_hparams(writer, hparams: dict[str, Any], run_name: str) -> None:
    """Writes the HParams plugin's session-start summary (step 0) for one run.

    Args:
      writer: a tf.summary file writer (the run's top directory), or None to do nothing.
      hparams: name -> value (every hparam of the run, overrides applied).
      run_name: the trial id shown in the dashboard (e.g. the output_dir).
    """
    if writer is None:
        return
    values = {name: _dashboard_value(value) for name, value in sorted(hparams.items())}
    with writer.as_default():
        hparams_api.hparams(values, trial_id=run_name)
    writer.flush()


def tf1_summary_name(path: str) -> str:
    """A variable's name in t2t's summary tags: the TF1 name with ":" replaced by "_"
    (`transformer/body/.../kernel:0` -> `transformer/body/.../kernel_0`, tf_slim's
    `variable.name.replace(":", "_")`).

    Args:
      path: the variable's path (Keras `variable.path`, t2t's name without ":0").
    """
    return path.removesuffix(":0") + "_0"


def write_gradient_summaries(writer, grads: list, paths: list[str], step: int,
                             clipped: bool) -> None:
    """t2t's `summarize_grads` (tf_slim optimize_loss's "gradients", "gradient_norm" and
    "global_gradient_norm" summaries) for the gradients an update applied.

    Writes, per variable with a gradient, the histogram `gradients/<name>` and the scalar
    `gradient_norm/<name>` (its L2 norm), and with gradient clipping the scalar
    `global_norm/clipped_gradient_norm` (the norm of all clipped gradients). The unclipped
    global norm, `global_norm/gradient_norm`, is among the trainer's progress scalars.

    Args:
      writer: the run's training summary writer, or None to do nothing.
      grads: the applied (clipped, unscaled) gradients, arrays or tensors of the variables'
        shapes; None for a variable without a gradient.
      paths: the variables' paths, aligned with `grads`.
      step: the global step the summaries belong to.
      clipped: whether gradient clipping is on (hparams.clip_grad_norm > 0).
    """
    if writer is None:
        return
    present = [(tf.convert_to_tensor(g, tf.float32), p) for g, p in zip(grads, paths)
               if g is not None]
    with writer.as_default():
        for grad, path in present:
            name = tf1_summary_name(path)
            tf.summary.histogram(f"gradients/{name}", grad, step=step)
            tf.summary.scalar(f"gradient_norm/{name}", tf.linalg.global_norm([grad]),
                              step=step)
        if clipped:
            tf.summary.scalar("global_norm/clipped_gradient_norm",
                              tf.linalg.global_norm([g for g, _ in present]), step=step)
    writer.flush()


def write_variable_summaries(writer, variables: list, step: int) -> None:
    """t2t's `summarize_vars` (`optimize.summarize_variables`): the histogram
    `training_variables/<name>` of every trainable variable (TF1 wrote `v.name` as the tag and
    its summary ops replaced the ":" of ":0" by "_").

    Args:
      writer: the run's training summary writer, or None to do nothing.
      variables: the trainable variables (with `.path`).
      step: the global step.
    """
    if writer is None:
        return
    with writer.as_default():
        for variable in variables:
            tf.summary.histogram(f"training_variables/{tf1_summary_name(variable.path)}",
                                 tf.cast(variable, tf.float32), step=step)
    writer.flush()


class TrainingStats:
    """Training statistics between two progress lines (t2t's names: loss,
    global_norm/gradient_norm, global_step/sec; and tokens/sec).

    Step outputs are kept as tensors and read only at `flush`, so that the host does not wait
    for every step to finish before dispatching the next one (on accelerators).
    """

    def __init__(self, step: int):
        self.start_step = step
        self.start_time = time.time()
        self.outputs: list[dict] = []

    def add(self, out: dict) -> None:
        """Keeps one step's outputs {"loss", "tokens", "grad_norm"} (scalar tensors)."""
        self.outputs.append(out)

    def flush(self, step: int) -> dict[str, float]:
        """The token-weighted loss, mean gradient norm and rates since the last flush
        (reading the kept tensors); starts the next interval at `step`."""
        values = {key: np.array([float(o[key]) for o in self.outputs])
                  for key in ("loss", "tokens", "grad_norm")}
        elapsed = max(time.time() - self.start_time, 1e-9)
        tokens = float(values["tokens"].sum())
        result = {
            "loss": float((values["loss"] * values["tokens"]).sum()) / max(tokens, 1.0),
            "global_norm/gradient_norm": float(values["grad_norm"].mean()),
            "global_step/sec": (step - self.start_step) / elapsed,
            "tokens/sec": tokens / elapsed,
        }
        self.__init__(step)
        return result
