"""A training run's record of its configuration, and what a resumed run may change in it.

A training run's output_dir holds `hparams.json` (the model's hparams), `flags.json` (its
flags) and the run card. A resumed run (output_dir holds a checkpoint) keeps the problem,
the model, the hparams set and every hparam that shapes the checkpoint's variables or what
the trained weights compute; it may change the others (learning-rate schedule, dropout,
train_steps, batch_size, eval cadence, ...), and the run card's "history" lists them.
`check_resume` compares before anything is written, so a refused resume changes no byte.
Eval, decode, export, average, plot and attention only read these files (`read_json_object`).
"""
from __future__ import annotations

import json
import os
from typing import Any

from t2t_lite import file_io
from t2t_lite.errors import UserError

# Hparams that change the names or shapes of the checkpoint's variables (the model's weights,
# the optimizer's slots, the gradient accumulators): `models/transformer.py` and
# `training/optimize.py` build them from these. tests/test_run_metadata.py builds a tiny model
# with each changed and checks the variables change (shared_embedding: when the softmax is not
# shared). ffn_layer has a single supported value today; it would replace weights.
CHANGES_VARIABLES = (
    "attention_key_channels",
    "attention_value_channels",
    "ffn_layer",
    "filter_size",
    "hidden_size",
    "layer_postprocess_sequence",
    "layer_preprocess_sequence",
    "max_relative_position",
    "norm_type",
    "num_decoder_layers",
    "num_encoder_layers",
    "num_hidden_layers",
    "optimizer",
    "self_attention_type",
    "shared_embedding",
    "shared_embedding_and_softmax_weights",
    "symbol_modality_num_shards",
    "use_target_space_embedding",
    "vocab_divisor",
)
# Hparams that keep the variables but change what the trained weights compute: resuming with
# them would silently train (and decode) another model from these weights.
CHANGES_COMPUTATION = (
    "multiply_embedding_mode",
    "norm_epsilon",
    "num_heads",
    "pos",
)
# Flags that name what was trained.
RUN_IDENTITY = ("problem", "model", "hparams_set")
# Flags not reported as changes: --hparams (the hparams comparison reports its effect) and
# --output_dir (a run moved or copied elsewhere is the same run).
_NOT_COMPARED = ("hparams", "output_dir")


def read_json_object(path: str, what: str) -> dict[str, Any] | None:
    """The JSON object in `path`, or None when the file does not exist.

    Args:
      path: e.g. "<output_dir>/hparams.json".
      what: what the file holds, for the error ("the run's hparams").

    Raises:
      UserError: one line naming the file when it does not read as a JSON object.
    """
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: cannot read {what} ({e})") from None
    except json.JSONDecodeError as e:
        raise UserError(
            f"{path}: {what} are damaged (invalid JSON: {e.msg} at line {e.lineno} column "
            f"{e.colno}); restore the file from a copy of the run, or train in a new "
            "--output_dir") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: {what} must be a JSON object, not {type(data).__name__}; "
                        "restore the file from a copy of the run, or train in a new "
                        "--output_dir")
    return data


def _change(name: str, old: Any, new: Any) -> str:
    return f"{name} {old!r} -> {new!r}" if isinstance(old, str) or isinstance(new, str) \
        else f"{name} {old} -> {new}"


def check_identity(output_dir: str, identity: dict[str, str]) -> None:
    """Refuses resuming output_dir's run with another problem, model or hparams set.

    Args:
      output_dir: the run's directory (its flags.json is read; no file: nothing to check).
      identity: {"problem", "model", "hparams_set"} of this run.

    Raises:
      UserError: listing the changes; or a damaged flags.json.
    """
    _refuse(output_dir, _identity_changes(output_dir, identity))


def _identity_changes(output_dir: str, identity: dict[str, str]) -> list[str]:
    stored = read_json_object(os.path.join(output_dir, "flags.json"), "the run's flags") or {}
    return [_change(name, stored[name], identity[name]) for name in RUN_IDENTITY
            if name in stored and name in identity and stored[name] != identity[name]]


def _refuse(output_dir: str, changes: list[str]) -> None:
    if changes:
        raise UserError(
            f"this run changes what {output_dir} was trained with: {', '.join(changes)}; "
            "train in another --output_dir (--warm_start_from can start it from this run's "
            "checkpoint), or resume with the run's own --problem, --model, --hparams_set and "
            "hparams (its flags.json and hparams.json)")


def check_resume(output_dir: str, identity: dict[str, str], hparams: dict[str, Any],
                 flag_values: dict[str, Any] | None) -> list[str]:
    """Compares a resumed training run's configuration with the one output_dir records.

    Call it when output_dir holds a checkpoint, before anything is written there.

    Args:
      output_dir: the run's directory (its hparams.json and flags.json are read).
      identity: {"problem", "model", "hparams_set"} of this run.
      hparams: this run's final hparams (name -> value: the set, hparams.json, --hparams).
      flag_values: this run's flags (name -> value), or None when it records none.

    Returns:
      The settings this run changes that are safe to change on resume, as
      "name old -> new" (hparams first, then flags), in name order.

    Raises:
      UserError: listing every change of the problem, model, hparams set or of an hparam
        of CHANGES_VARIABLES / CHANGES_COMPUTATION; or a damaged hparams.json / flags.json.
    """
    stored_flags = read_json_object(os.path.join(output_dir, "flags.json"),
                                    "the run's flags") or {}
    stored_hparams = read_json_object(os.path.join(output_dir, "hparams.json"),
                                      "the run's hparams") or {}
    refused = _identity_changes(output_dir, identity)
    safe = []
    for name in sorted(set(stored_hparams) & set(hparams)):
        if stored_hparams[name] != hparams[name]:
            change = _change(name, stored_hparams[name], hparams[name])
            if name in CHANGES_VARIABLES or name in CHANGES_COMPUTATION:
                refused.append(change)
            else:
                safe.append(change)
    _refuse(output_dir, refused)
    for name in sorted(set(stored_flags) & set(flag_values or {})):
        if name not in RUN_IDENTITY and name not in _NOT_COMPARED \
                and stored_flags[name] != flag_values[name]:
            safe.append(_change(name, stored_flags[name], flag_values[name]))
    return safe


def save_hparams(output_dir: str, hparams) -> None:
    """Writes `output_dir/hparams.json` (sorted keys), as t2t's chief does at start.

    Args:
      output_dir: the run's directory (created if needed).
      hparams: the run's HParams.
    """
    import tensorflow as tf

    tf.io.gfile.makedirs(output_dir)
    file_io.atomic_write(os.path.join(output_dir, "hparams.json"), hparams.to_json(indent=0))


def save_flags(output_dir: str, values: dict[str, Any]) -> None:
    """Writes the run's flag values (name -> value, sorted) to `output_dir/flags.json`
    (decode and export take --problem, --hparams_set, --data_dir and --model from it).

    Args:
      output_dir: the run's directory (created if needed).
      values: flag name -> value.
    """
    import tensorflow as tf

    tf.io.gfile.makedirs(output_dir)
    file_io.atomic_write(
        os.path.join(output_dir, "flags.json"), json.dumps(values, indent=0, sort_keys=True)
    )
