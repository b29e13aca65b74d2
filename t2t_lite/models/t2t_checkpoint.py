"""Read original tensor2tensor checkpoints into `t2t_lite.models.transformer.Transformer`.

`t2t_variable_map(model)` names every trainable weight of the model by its t2t checkpoint name
(T2T_REFERENCE.md §2.11), built explicitly from the model's structure: pre-norm ("n"/"da",
`layer_prepostprocess/layer_norm` + final encoder/decoder norms) and post-norm ("none"/"dan",
`layer_postprocess/layer_norm`, no final norms) layouts, shared or separate vocabularies.
`load_t2t_weights` checks the whole name set and every shape before assigning anything, so a
model is never partly loaded. `load_model` builds the model with the vocab sizes read from the
checkpoint. run.py's `import_t2t` mode writes a t2t_lite run directory from a t2t checkpoint
with `t2t_lite.training.t2t_import` (which also reads t2t's optimizer slots).
"""
from __future__ import annotations

import re

import keras
import numpy as np
import tensorflow as tf

from t2t_lite.errors import UserError
from t2t_lite.hparams import HParams
from t2t_lite.models.transformer import Transformer

MODEL_SCOPE = "transformer"
# Non-model variables of t2t training checkpoints: step counter, loss averages, statistics and
# optimizer state (TF1 Adam slots and beta powers, TF2 LazyAdam slots).
_IGNORED_PATTERNS = (
    r"global_step",
    r"losses_avg/.*",
    r"train_stats/.*",
    r"training/.*",
    r".*/(Adam|Adam_1|Momentum|Adafactor\w*|LazyAdam\w*)(/.*)?",
    r"(beta1|beta2)_power(_\d+)?",
)
_IGNORED_RE = re.compile("|".join(f"(?:{p})" for p in _IGNORED_PATTERNS))
_MODALITY_RE = re.compile(
    rf"^{MODEL_SCOPE}/symbol_modality_(\d+)_(\d+)/(shared|input_emb|target_emb|softmax)/"
    r"weights_(\d+)$"
)


class T2TCheckpointError(UserError):
    """A t2t checkpoint that does not match the model (names or shapes)."""


def is_ignored(name: str) -> bool:
    """True for checkpoint variables that are not model weights (optimizer, step, stats).

    Args:
      name: a t2t checkpoint variable name.

    Returns:
      Whether `load_t2t_weights` skips it.
    """
    return _IGNORED_RE.fullmatch(name) is not None


def _prepostprocess_names(scope: str, layer) -> dict[str, keras.Variable]:
    """Names of the norms of one LayerPrepostprocess under `scope`."""
    names = {}
    for norm in layer.norms:
        base = f"{scope}/{layer.name}/{norm.name}"
        names[f"{base}/layer_norm_scale"] = norm.scale
        names[f"{base}/layer_norm_bias"] = norm.bias
    return names


def _attention_names(scope: str, pre, attention, post) -> dict[str, keras.Variable]:
    names = _prepostprocess_names(scope, pre)
    for dense in (attention.q, attention.k, attention.v, attention.output_transform):
        names[f"{scope}/multihead_attention/{dense.name}/kernel"] = dense.kernel
    # self_attention_type=dot_product_relative: t2t's two tables of relative positions.
    for table in (getattr(attention, "relative_positions_keys", None),
                  getattr(attention, "relative_positions_values", None)):
        if table is not None:
            names[f"{scope}/multihead_attention/dot_product_attention_relative/{table.name}/"
                  "embeddings"] = table.embeddings
    names.update(_prepostprocess_names(scope, post))
    return names


def _ffn_names(scope: str, pre, ffn, post) -> dict[str, keras.Variable]:
    names = _prepostprocess_names(scope, pre)
    for dense in (ffn.conv1, ffn.conv2):
        names[f"{scope}/{dense.name}/kernel"] = dense.kernel
        names[f"{scope}/{dense.name}/bias"] = dense.bias
    names.update(_prepostprocess_names(scope, post))
    return names


def t2t_variable_map(model: Transformer) -> dict[str, keras.Variable]:
    """t2t checkpoint name -> model variable, for every trainable weight of `model`.

    Args:
      model: a built Transformer.

    Returns:
      Dict such as {"transformer/body/encoder/layer_0/ffn/conv1/kernel": <Variable [d, f]>}.
      Shared matrices appear once.
    """
    names = model.modality.variable_names(prefix=f"{MODEL_SCOPE}/")
    body = f"{MODEL_SCOPE}/body"
    if model.body.use_target_space_embedding:
        names[f"{body}/target_space_embedding/kernel"] = model.body.target_space_embedding.kernel
    for stack in (model.body.encoder, model.body.decoder):
        for layer in stack.layers_:
            scope = f"{body}/{stack.name}/{layer.name}"
            names.update(_attention_names(
                f"{scope}/self_attention", layer.self_attention_pre, layer.self_attention,
                layer.self_attention_post,
            ))
            if stack is model.body.decoder:
                names.update(_attention_names(
                    f"{scope}/encdec_attention", layer.encdec_attention_pre,
                    layer.encdec_attention, layer.encdec_attention_post,
                ))
            names.update(_ffn_names(f"{scope}/ffn", layer.ffn_pre, layer.ffn, layer.ffn_post))
        names.update(_prepostprocess_names(f"{body}/{stack.name}", stack.output_norm))
    return names


def resolve_checkpoint(checkpoint_path: str) -> str:
    """A checkpoint prefix from a prefix or a directory with a `checkpoint` file.

    Raises:
      T2TCheckpointError: neither exists.
    """
    if tf.io.gfile.isdir(checkpoint_path):
        latest = tf.train.latest_checkpoint(checkpoint_path)
        if latest is None:
            raise T2TCheckpointError(
                f"No checkpoint found in directory {checkpoint_path} (no 'checkpoint' file); "
                "pass a prefix such as model.ckpt-250000"
            )
        return latest
    if not tf.io.gfile.exists(checkpoint_path + ".index"):
        raise T2TCheckpointError(
            f"{checkpoint_path}.index does not exist; pass a t2t checkpoint prefix (e.g. "
            "output_dir/model.ckpt-250000) or its directory"
        )
    return checkpoint_path


def _layout_hint(unexpected: list[str], missing: list[str]) -> str:
    hints = []
    if any("/layer_postprocess/layer_norm/" in n for n in unexpected):
        hints.append("the checkpoint is post-norm: use layer_preprocess_sequence=none,"
                     "layer_postprocess_sequence=dan (e.g. transformer_base_v1)")
    if any("/layer_postprocess/layer_norm/" in n for n in missing):
        hints.append("the checkpoint is pre-norm: use layer_preprocess_sequence=n,"
                     "layer_postprocess_sequence=da (e.g. transformer_base)")
    shared_ckpt = any("/shared/weights_" in n for n in unexpected)
    if shared_ckpt or any("/shared/weights_" in n for n in missing):
        hints.append("shared_embedding_and_softmax_weights differs from the checkpoint's")
    return ("\nHint: " + "; ".join(hints)) if hints else ""


def format_names(title: str, names: list[str]) -> str:
    """The names under a "title (count):" line, one an indented line; "" for none."""
    return f"{title} ({len(names)}):\n  " + "\n  ".join(names) if names else ""


def load_t2t_weights(model: Transformer, checkpoint_path: str) -> dict[str, str]:
    """Assigns a t2t checkpoint's weights to `model`, all or nothing.

    Every model weight must be in the checkpoint with the same shape, and every checkpoint
    variable must be a model weight, except optimizer slots, `global_step`, `losses_avg/*` and
    `train_stats/*`.

    Args:
      model: a built Transformer whose hparams match the checkpoint's.
      checkpoint_path: t2t checkpoint prefix, or a directory (its latest checkpoint).

    Returns:
      {"checkpoint": the prefix read, "global_step": its value as a string or ""}.

    Raises:
      T2TCheckpointError: listing missing / unexpected variables and shape mismatches; the
        model is left unchanged.
    """
    prefix = resolve_checkpoint(checkpoint_path)
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    wanted = t2t_variable_map(model)
    model_names = {n for n in shapes if not is_ignored(n)}
    missing = sorted(set(wanted) - model_names)
    unexpected = sorted(model_names - set(wanted))
    mismatched = sorted(
        f"{name}: checkpoint {list(shapes[name])} vs model {list(var.shape)}"
        for name, var in wanted.items()
        if name in shapes and tuple(shapes[name]) != tuple(var.shape)
    )
    if missing or unexpected or mismatched:
        parts = [
            format_names("Missing from the checkpoint", missing),
            format_names("Unexpected in the checkpoint", unexpected),
            format_names("Shape mismatches", mismatched),
        ]
        raise T2TCheckpointError(
            f"t2t checkpoint {prefix} does not match the model (hparams "
            f"{model.hparams.hidden_size=}, layers, pre/post-process sequences, vocab sizes "
            f"{model.input_vocab_size}/{model.target_vocab_size}):\n"
            + "\n".join(p for p in parts if p)
            + _layout_hint(unexpected, missing)
        )
    values = {name: reader.get_tensor(name) for name in wanted}
    for name, var in wanted.items():
        var.assign(values[name].astype(np.dtype(var.dtype)))
    step = str(reader.get_tensor("global_step")) if "global_step" in shapes else ""
    return {"checkpoint": prefix, "global_step": step}


def checkpoint_vocab_sizes(checkpoint_path: str) -> tuple[int, int]:
    """Input and target vocab sizes of a t2t Transformer checkpoint, from its shard shapes.

    Args:
      checkpoint_path: t2t checkpoint prefix or directory.

    Returns:
      (input_vocab_size, target_vocab_size): the row counts of the input embedding and of the
      target embedding (or softmax) matrices.
    """
    shapes = tf.train.load_checkpoint(resolve_checkpoint(checkpoint_path)).get_variable_to_shape_map()
    rows: dict[tuple[str, str], int] = {}
    for name, shape in shapes.items():
        match = _MODALITY_RE.match(name)
        if match:
            key = (match.group(1), match.group(3))
            rows[key] = rows.get(key, 0) + int(shape[0])
    by_scope: dict[str, list[int]] = {}
    for (_, scope), count in rows.items():
        by_scope.setdefault(scope, []).append(count)
    if "input_emb" in by_scope:
        input_size = by_scope["input_emb"][0]
        target_size = (by_scope.get("target_emb") or by_scope.get("softmax") or [None])[0]
    elif "shared" in by_scope:
        # One "shared" scope per vocab size: with two sizes (shared_embedding and different
        # vocabs) the one that also has a softmax is the target's.
        sizes = sorted(by_scope["shared"])
        softmax = by_scope.get("softmax", [])
        target_size = softmax[0] if softmax else sizes[0]
        others = [s for s in sizes if s != target_size]
        input_size = others[0] if others else target_size
    else:
        input_size = target_size = None
    if input_size is None or target_size is None:
        raise T2TCheckpointError(
            f"{checkpoint_path} has no t2t symbol modality weights "
            f"({MODEL_SCOPE}/symbol_modality_<V>_<d>/...): not a t2t Transformer checkpoint"
        )
    return input_size, target_size


def load_model(checkpoint_path: str, hparams: HParams) -> Transformer:
    """Builds a Transformer for `hparams` and loads a t2t checkpoint into it.

    Args:
      checkpoint_path: t2t checkpoint prefix (model.ckpt-N) or its directory.
      hparams: the model hparams the checkpoint was trained with (e.g.
        `create_hparams("transformer_base")`); vocab sizes come from the checkpoint.

    Returns:
      The loaded Transformer.
    """
    input_size, target_size = checkpoint_vocab_sizes(checkpoint_path)
    model = Transformer(hparams, input_size, target_size)
    load_t2t_weights(model, checkpoint_path)
    return model
