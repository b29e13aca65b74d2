"""`--warm_start_from`: initialise a model from a t2t_lite or an original t2t checkpoint.

t2t-trainer warm-starts every model variable from the checkpoint (Estimator's
`WarmStartSettings(vars_to_warm_start=".*")`), matched by variable name. Here:

* an original t2t checkpoint (variables named `transformer/...`) is matched through
  `t2t_checkpoint.t2t_variable_map`, the same name map that decoding uses;
* a t2t_lite checkpoint (a training run, an average or an import) is matched through its
  object graph: the variable reached by the same attribute path from the checkpoint's `model`
  as from the live model (`model/body/encoder/layer_0/...`).

Every model variable must be found with its shape, or the run stops with the list of those
that were not (missing from the checkpoint or of another shape) and of the checkpoint's
unused model variables; `allow_partial` (`--warm_start_partial`) loads what matches, but a
checkpoint that matches nothing is always an error. Nothing is assigned before the check.
Optimizer slots and the global step are never loaded: a warm-started run starts at step 0.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import keras
import numpy as np
import tensorflow as tf
from absl import logging
from tensorflow.core.protobuf import trackable_object_graph_pb2

from t2t_lite.utils import t2t_checkpoint

_OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
_VARIABLE_VALUE = "VARIABLE_VALUE"


class WarmStartError(ValueError):
    """A warm-start checkpoint that does not fit the model."""


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

    def not_loaded_text(self) -> str:
        """The lists of what did not load, one name per line."""
        parts = []
        for title, names in (("missing from the checkpoint", self.missing),
                             ("of another shape", self.mismatched),
                             ("in the checkpoint but not in the model", self.unused)):
            if names:
                parts.append(f"{title} ({len(names)}):\n  " + "\n  ".join(names))
        return "\n".join(parts)


def resolve_checkpoint(path: str) -> str:
    """A checkpoint prefix from a prefix or a directory holding a `checkpoint` file."""
    if tf.io.gfile.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if latest is None:
            raise WarmStartError(f"--warm_start_from={path}: no checkpoint in this directory")
        return latest
    if not tf.io.gfile.exists(path + ".index"):
        raise WarmStartError(f"--warm_start_from={path}: no {path}.index (give a checkpoint "
                             "prefix such as model.ckpt-1000, or its directory)")
    return path


def _is_variable(obj) -> bool:
    return isinstance(obj, (tf.Variable, keras.Variable))


def _model_variables(obj, path: tuple[str, ...] = (), seen=None) -> Iterator[tuple]:
    """(attribute path, variable) of every variable reachable from `obj` by tracking."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if _is_variable(obj):
        yield path, obj
        return
    children = getattr(obj, "_trackable_children", None)
    if children is None:
        return
    for name, child in sorted(children(save_type="checkpoint").items()):
        yield from _model_variables(child, path + (name,), seen)


def _checkpoint_variables(reader, root_child: str = "model") -> dict[tuple[str, ...], str]:
    """(attribute path below `root_child`) -> checkpoint key, from a checkpoint's object graph.

    A variable reachable by several paths (a shared matrix) is listed under each of them.
    """
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor(_OBJECT_GRAPH_KEY))
    start = [c.node_id for c in graph.nodes[0].children if c.local_name == root_child]
    keys: dict[tuple[str, ...], str] = {}
    pending = [(start[0], (), frozenset())] if start else []
    while pending:
        node_id, path, ancestors = pending.pop()
        node = graph.nodes[node_id]
        for attribute in node.attributes:
            if attribute.name == _VARIABLE_VALUE:
                keys[path] = attribute.checkpoint_key
        ancestors = ancestors | {node_id}
        pending.extend((c.node_id, path + (c.local_name,), ancestors)
                       for c in node.children if c.node_id not in ancestors)
    return keys


def _variable_name(variable) -> str:
    return getattr(variable, "path", None) or variable.name.removesuffix(":0")


def _plan_t2t(model, reader) -> tuple[dict, WarmStartReport]:
    shapes = reader.get_variable_to_shape_map()
    wanted = t2t_checkpoint.t2t_variable_map(model)
    available = {n for n in shapes if not t2t_checkpoint.is_ignored(n)}
    plan, missing, mismatched = {}, [], []
    for name, variable in sorted(wanted.items()):
        if name not in shapes:
            missing.append(name)
        elif tuple(shapes[name]) != tuple(variable.shape):
            mismatched.append(f"{name}: checkpoint {list(shapes[name])} vs model "
                              f"{list(variable.shape)}")
        else:
            plan[name] = (name, variable)
    unused = sorted(available - set(wanted))
    return plan, WarmStartReport("", "t2t", sorted(plan), missing, mismatched, unused)


def _plan_t2t_lite(model, reader) -> tuple[dict, WarmStartReport]:
    shapes = reader.get_variable_to_shape_map()
    keys = _checkpoint_variables(reader)
    plan, missing, mismatched, used = {}, [], [], set()
    for path, variable in _model_variables(model):
        name = _variable_name(variable)
        key = keys.get(path)
        if key is None:
            missing.append(name)
            continue
        used.add(key)
        if tuple(shapes[key]) != tuple(variable.shape):
            mismatched.append(f"{name}: checkpoint {list(shapes[key])} vs model "
                              f"{list(variable.shape)}")
        else:
            plan[name] = (key, variable)
    unused_paths = {}
    for path, key in sorted(keys.items()):
        if key not in used:
            unused_paths.setdefault(key, "model/" + "/".join(path))
    return plan, WarmStartReport("", "t2t_lite", sorted(plan), sorted(missing),
                                 sorted(mismatched), sorted(unused_paths.values()))


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
        variable missing or of another shape. The model is then left unchanged.
    """
    prefix = resolve_checkpoint(checkpoint_path)
    reader = tf.train.load_checkpoint(prefix)
    names = reader.get_variable_to_shape_map()
    if any(n.startswith(t2t_checkpoint.MODEL_SCOPE + "/") for n in names):
        plan, report = _plan_t2t(model, reader)
    elif _OBJECT_GRAPH_KEY in names:
        plan, report = _plan_t2t_lite(model, reader)
    else:
        raise WarmStartError(f"--warm_start_from={prefix}: neither a t2t_lite checkpoint (no "
                             f"object graph) nor a t2t one (no {t2t_checkpoint.MODEL_SCOPE}/... "
                             "variables)")
    report.checkpoint = prefix
    total = len(report.loaded) + len(report.missing) + len(report.mismatched)
    details = report.not_loaded_text()
    if not report.loaded:
        raise WarmStartError(f"--warm_start_from={prefix}: none of the model's {total} "
                             f"variables matched this {report.kind} checkpoint\n{details}")
    if not report.complete and not allow_partial:
        raise WarmStartError(
            f"--warm_start_from={prefix}: {total - len(report.loaded)} of the model's {total} "
            f"variables did not match this {report.kind} checkpoint (--warm_start_partial "
            f"loads the {len(report.loaded)} that do)\n{details}")
    values = {name: reader.get_tensor(key) for name, (key, _) in plan.items()}
    for name, (_, variable) in plan.items():
        variable.assign(values[name].astype(np.dtype(variable.dtype)))
    logging.info("Warm-started %d of %d model variables from %s checkpoint %s",
                 len(report.loaded), total, report.kind, prefix)
    if details:
        logging.warning("Not warm-started:\n%s", details)
    return report
