"""`--warm_start_from`: initialise a model from a t2t_lite or an original t2t checkpoint.

t2t-trainer warm-starts every model variable from the checkpoint (Estimator's
`WarmStartSettings(vars_to_warm_start=".*")`), matched by variable name. Here:

* an original t2t checkpoint (variables named `transformer/...`) is matched through
  `t2t_checkpoint.t2t_variable_map`, the same name map that decoding uses;
* a t2t_lite checkpoint (a training run, an average or an import) is matched through its
  object graph: the variable reached by the same attribute path from the checkpoint's `model`
  as from the live model (`model/body/encoder/layer_0/...`).

Every model variable must be found with its shape and every model variable of the checkpoint
used, or the run stops with one line naming the first of those that were not (missing from
the checkpoint, of another shape, unused in the checkpoint; the full lists are logged by a
partial warm start); `allow_partial` (`--warm_start_partial`) loads what matches, but a
checkpoint that matches nothing is always an error. Nothing is assigned before the check.
Optimizer slots and the global step are never loaded: a warm-started run starts at step 0.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf
from absl import logging

from t2t_lite.errors import UserError
from t2t_lite.models import t2t_checkpoint
from t2t_lite.utils import checkpoint_guard


class WarmStartError(UserError):
    """A warm-start checkpoint that does not fit the model (one line for run.py; the full
    lists are logged)."""


@dataclasses.dataclass
class WarmStartReport:
    """What a warm start loaded.

    Attributes:
      checkpoint: the checkpoint prefix read.
      kind: "t2t" (original tensor2tensor) or "t2t_lite".
      loaded: model variable names (t2t names) assigned from the checkpoint.
      missing: model variables the checkpoint does not have.
      mismatched: "name: checkpoint [shape] vs model [shape]" for variables of another shape.
      unused: checkpoint model variables that the model does not have.
    """

    checkpoint: str
    kind: str
    loaded: list[str]
    missing: list[str]
    mismatched: list[str]
    unused: list[str]

    @property
    def complete(self) -> bool:
        """Whether every model variable was loaded."""
        return not self.missing and not self.mismatched

    def not_loaded_summary(self) -> str:
        """The first few names of each list that did not load, on one line."""
        return "; ".join(f"{title}: {checkpoint_guard.names_text(names)}"
                         for title, names in self._lists() if names)

    def _lists(self) -> list[tuple[str, list[str]]]:
        return [("missing from the checkpoint", self.missing),
                ("of another shape", self.mismatched),
                ("in the checkpoint but not in the model", self.unused)]

    def not_loaded_text(self) -> str:
        """The lists of what did not load, one name per line."""
        parts = []
        for title, names in self._lists():
            if names:
                parts.append(f"{title} ({len(names)}):\n  " + "\n  ".join(names))
        return "\n".join(parts)


def resolve_checkpoint(path: str) -> str:
    """A checkpoint prefix from a prefix or a directory (its newest readable checkpoint,
    found on disk as `checkpoint_guard.newest_good_checkpoint` finds it)."""
    if tf.io.gfile.isdir(path):
        latest = checkpoint_guard.newest_good_checkpoint(path)
        if latest is None:
            raise WarmStartError(f"--warm_start_from={path}: no checkpoint in this directory")
        return latest
    if not tf.io.gfile.exists(path + ".index"):
        raise WarmStartError(f"--warm_start_from={path}: no {path}.index (give a checkpoint "
                             "prefix such as model.ckpt-1000, or its directory)")
    return path


def _plan_t2t(model, reader) -> tuple[dict, WarmStartReport]:
    shapes = reader.get_variable_to_shape_map()
    wanted = t2t_checkpoint.t2t_variable_map(model)
    available = {n for n in shapes if not t2t_checkpoint.is_ignored(n)}
    # t2t checkpoints key their tensors by the variables' t2t names.
    found = checkpoint_guard.match_shapes(
        {name: (name, variable) for name, variable in wanted.items()}, shapes)
    unused = sorted(available - set(wanted))
    return found["plan"], WarmStartReport("", "t2t", sorted(found["plan"]), found["missing"],
                                          found["mismatched"], unused)


def _plan_t2t_lite(model, reader) -> tuple[dict, WarmStartReport]:
    found = checkpoint_guard.match_model(model, reader)
    return found["plan"], WarmStartReport("", "t2t_lite", sorted(found["plan"]),
                                          found["missing"], found["mismatched"],
                                          found["unused"])


def warm_start(model, checkpoint_path: str, allow_partial: bool = False) -> WarmStartReport:
    """Assigns the model variables found in a t2t_lite or t2t checkpoint, after checking them.

    Args:
      model: a built model (t2t_lite's Transformer for t2t checkpoints).
      checkpoint_path: checkpoint prefix or directory (`--warm_start_from`).
      allow_partial: load what matches even if some model variables do not
        (`--warm_start_partial`).

    Returns:
      The WarmStartReport (also logged: counts, and every name that did not load).

    Raises:
      WarmStartError: no checkpoint; nothing matched; or, without allow_partial, some model
        variable missing or of another shape, or some checkpoint model variable unused (one
        line naming the first of each). The model is then left unchanged.
    """
    prefix = resolve_checkpoint(checkpoint_path)
    reader = tf.train.load_checkpoint(prefix)
    names = reader.get_variable_to_shape_map()
    if any(n.startswith(t2t_checkpoint.MODEL_SCOPE + "/") for n in names):
        plan, report = _plan_t2t(model, reader)
    elif checkpoint_guard.OBJECT_GRAPH_KEY in names:
        plan, report = _plan_t2t_lite(model, reader)
    else:
        raise WarmStartError(f"--warm_start_from={prefix}: neither a t2t_lite checkpoint (no "
                             f"object graph) nor a t2t one (no {t2t_checkpoint.MODEL_SCOPE}/... "
                             "variables)")
    report.checkpoint = prefix
    total = len(report.loaded) + len(report.missing) + len(report.mismatched)
    if not report.loaded:
        raise WarmStartError(f"--warm_start_from={prefix}: none of the model's {total} "
                             f"variables matched this {report.kind} checkpoint "
                             f"({report.not_loaded_summary()})")
    if not (report.complete and not report.unused) and not allow_partial:
        unused = (f" and {len(report.unused)} of its model variables are not the model's"
                  if report.unused else "")
        raise WarmStartError(
            f"--warm_start_from={prefix}: {total - len(report.loaded)} of the model's {total} "
            f"variables did not match this {report.kind} checkpoint{unused} "
            f"(--warm_start_partial loads the {len(report.loaded)} that do): "
            f"{report.not_loaded_summary()}")
    details = report.not_loaded_text()
    values = {name: reader.get_tensor(key) for name, (key, _) in plan.items()}
    for name, (_, variable) in plan.items():
        variable.assign(values[name].astype(np.dtype(variable.dtype)))
    logging.info("Warm-started %d of %d model variables from %s checkpoint %s",
                 len(report.loaded), total, report.kind, prefix)
    if details:
        logging.warning("Not warm-started:\n%s", details)
    return report
