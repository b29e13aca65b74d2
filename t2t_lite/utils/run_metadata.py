"""A training run's record of its configuration, and what a resumed run may change in it.

A training run's output_dir holds `hparams.json` (the model's hparams), `flags.json` (its
flags) and the run card. A resumed run (output_dir holds a checkpoint) keeps the problem,
the model, the hparams set and every hparam that shapes the checkpoint's variables or what
the trained weights compute; it may change the others (learning-rate schedule, dropout,
train_steps, batch_size, eval cadence, ...), and the run card's "history" lists them.
`check_resume` compares before anything is written, so a refused resume changes no byte.
Eval, decode, export, average, plot and attention only read these files (`read_json_object`).

What a run was made of is recorded too, and checked by every tool that reads the run:
* `hparams.json` carries `CHECKSUM_KEY`, the sha256 of its other entries, written by
  t2t_lite. A file whose entries no longer match it was edited by hand: `read_hparams_json`
  refuses it in one line saying how to change a setting properly (`--hparams` on the resumed
  training command, for the hparams a resume may change); a hand edit is never applied.
* `run_inputs.json` records the sha256 of each vocabulary file the problem reads and of the
  data's completion markers (`data_marker.run_inputs`). `check_inputs` refuses a changed
  vocabulary in one line naming the file (the ids would mean other subwords); a changed data
  marker (the data made again) is allowed and listed in the run card's History.
* `check_same_model` refuses eval, decode, export and attention `--hparams` that resume would
  refuse (the same table), so that no tool reports numbers of a model that was never trained.
A run made before these records (no checksum, no run_inputs.json) is read as it is, with a
warning once; its next training run writes them.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from absl import logging

from t2t_lite import file_io, hparams_support
from t2t_lite.errors import UserError

# Hparams that change the names or shapes of the checkpoint's variables (the model's weights,
# the optimizer's slots, the gradient accumulators): `models/transformer.py` and
# `training/optimize.py` build them from these. tests/test_run_metadata.py builds a tiny model
# with each changed and checks the variables change (shared_embedding: when the softmax is not
# shared). ffn_layer has a single supported value today; it would replace weights.
# Each hparam's declaration says which (`hparams_support.HPARAMS`, `resume=`).
CHANGES_VARIABLES = hparams_support.names_with(resume=hparams_support.VARIABLES)
# Hparams that keep the variables but change what the trained weights compute: resuming with
# them would silently train (and decode) another model from these weights.
CHANGES_COMPUTATION = hparams_support.names_with(resume=hparams_support.COMPUTATION)
# Flags that name what was trained.
RUN_IDENTITY = ("problem", "model", "hparams_set")
# hparams.json's checksum entry: no hparam can have this name (HParams reserves names
# starting with "_"), so the file stays a JSON object of the hparams plus this one entry.
CHECKSUM_KEY = "_t2t_lite_sha256"
INPUTS_NAME = "run_inputs.json"
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


_WARNED: set[str] = set()


def _warn_once(key: str, message: str, *args: Any) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        logging.warning(message, *args)


def _checksum(values: dict[str, Any]) -> str:
    """sha256 of the entries' canonical JSON (sorted keys, no spaces): the same for any
    layout of the file, different for any changed name or value."""
    canonical = json.dumps(values, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def hparams_json_text(values: dict[str, Any]) -> str:
    """The text of `hparams.json`: the hparams (sorted keys) and their checksum entry.

    Args:
      values: hparam name -> value (`HParams.values()`).
    """
    return json.dumps({**values, CHECKSUM_KEY: _checksum(values)}, indent=0, sort_keys=True)


def read_hparams_json(path: str) -> dict[str, Any] | None:
    """The hparams of a run's `hparams.json` (without the checksum entry), or None when the
    file does not exist.

    A file without a checksum (a run made before t2t_lite wrote one, an import) is read as it
    is, with a warning once.

    Raises:
      UserError: one line naming the file when it is damaged, or when its entries do not
        match the checksum t2t_lite wrote (a hand edit), saying how to change a setting.
    """
    stored = read_json_object(path, "the run's hparams")
    if stored is None:
        return None
    checksum = stored.pop(CHECKSUM_KEY, None)
    if checksum is None:
        _warn_once(path, "%s has no checksum (written before t2t_lite recorded one); read as "
                         "it is, and the next training run of it records one", path)
    elif checksum != _checksum(stored):
        raise UserError(
            f"{path}: the run's hparams were edited outside t2t_lite (they no longer match "
            "the checksum t2t_lite wrote), and a hand edit is never applied; restore the "
            "file from a copy of the run, then change a setting with --hparams=name=value "
            "on the resumed training command (learning rate, dropout, batch_size, ...; the "
            "run card's History records it), or train in a new --output_dir for the "
            "hparams a resume may not change")
    return stored


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
    stored_hparams = read_hparams_json(os.path.join(output_dir, "hparams.json")) or {}
    refused, safe = model_changes(stored_hparams, hparams)
    _refuse(output_dir, _identity_changes(output_dir, identity) + refused)
    for name in sorted(set(stored_flags) & set(flag_values or {})):
        if name not in RUN_IDENTITY and name not in _NOT_COMPARED \
                and stored_flags[name] != flag_values[name]:
            safe.append(_change(name, stored_flags[name], flag_values[name]))
    return safe


def model_changes(stored: dict[str, Any], hparams: dict[str, Any]) -> tuple[list[str],
                                                                             list[str]]:
    """The hparams that differ between a run's record and this use of it, in name order.

    Args:
      stored: the run's hparams.json (name -> value).
      hparams: this run's final hparams (name -> value).

    Returns:
      (the changes no resume or reader of the run may make: CHANGES_VARIABLES and
      CHANGES_COMPUTATION; the others), each as "name old -> new".
    """
    refused, safe = [], []
    for name in sorted(set(stored) & set(hparams)):
        if stored[name] != hparams[name]:
            change = _change(name, stored[name], hparams[name])
            if name in CHANGES_VARIABLES or name in CHANGES_COMPUTATION:
                refused.append(change)
            else:
                safe.append(change)
    return refused, safe


def check_same_model(output_dir: str, hparams: dict[str, Any], mode: str) -> None:
    """Refuses eval, decode, export or attention of output_dir's run with hparams that
    resuming it would refuse (another architecture: the numbers would be those of a model
    that was never trained, e.g. `--hparams=num_heads=2` on a 4-head run).

    Args:
      output_dir: the run (its hparams.json is read; none: nothing to compare).
      hparams: the tool's final hparams (name -> value).
      mode: the tool's run.py mode, for the message.

    Raises:
      UserError: one line listing the changes.
    """
    stored = read_hparams_json(os.path.join(output_dir, "hparams.json"))
    refused = model_changes(stored or {}, hparams)[0]
    if refused:
        raise UserError(
            f"--mode={mode} --hparams changes what {output_dir} was trained with: "
            f"{', '.join(refused)}; the run's model is used as it was trained (its "
            "hparams.json): leave these out of --hparams")


def _short(digest: str) -> str:
    return digest[:12]


def check_inputs(output_dir: str, inputs: dict[str, Any], mode: str) -> list[str]:
    """Compares the vocabulary and data this use of a run reads with those it recorded.

    Args:
      output_dir: the run (its run_inputs.json is read; none: a run made before it was
        recorded, warned about once).
      inputs: `data_marker.run_inputs` of what this tool reads.
      mode: the tool's run.py mode, for the message.

    Returns:
      The data that changed (allowed: the History lists it), as phrases
      "data <marker> sha256 old -> new".

    Raises:
      UserError: a vocabulary file whose content differs from the recorded one, naming it.
    """
    path = os.path.join(output_dir, INPUTS_NAME)
    recorded = read_json_object(path, "the run's vocabulary and data record")
    if recorded is None:
        if not os.path.exists(os.path.join(output_dir, "hparams.json")):
            return []  # not a training run's folder (yet)
        _warn_once(path, "%s records no vocabulary hash (a run made before t2t_lite recorded "
                         "one): the vocabulary is not checked; %s", output_dir,
                   "recording it now" if mode == "train" else "its next training run records it")
        return []
    for name, was in sorted(recorded.get("vocab", {}).items()):
        now = inputs.get("vocab", {}).get(name)
        if now is not None and now["sha256"] != was["sha256"]:
            raise UserError(
                f"the vocabulary {now['path']} changed since run {output_dir} was trained "
                f"(sha256 {_short(was['sha256'])}.. now {_short(now['sha256'])}..): the "
                "model's ids would mean other subwords; restore the vocabulary the run was "
                f"trained with (--mode={mode} --data_dir=<its data>), or train a new run in "
                "another --output_dir")
    changes = []
    for name, was in sorted(recorded.get("data", {}).items()):
        now = inputs.get("data", {}).get(name)
        if now is not None and now != was:
            changes.append(f"data {name} sha256 {_short(was)} -> {_short(now)}")
    return changes


def check_parent_vocabulary(warm_start_from: str, inputs: dict[str, Any]) -> None:
    """Refuses to warm-start from a run trained with another vocabulary than this one's:
    every weight would load, and every id would mean another subword.

    Args:
      warm_start_from: the parent (a run folder, or a checkpoint prefix in one); its
        run_inputs.json is read (none, e.g. an original t2t checkpoint: not checked, warned).
      inputs: `data_marker.run_inputs` of this run.

    Raises:
      UserError: one line naming this run's vocabulary file and the parent's, and the
        datagen flag that makes data with the parent's vocabulary.
    """
    parent = warm_start_from if os.path.isdir(warm_start_from) else os.path.dirname(
        warm_start_from)
    recorded = read_json_object(os.path.join(parent, INPUTS_NAME),
                                "the parent run's vocabulary record")
    if recorded is None:
        _warn_once(parent, "--warm_start_from=%s: no %s beside the checkpoint: the vocabulary "
                           "is not compared with the parent's", warm_start_from, INPUTS_NAME)
        return
    parent_vocab = recorded.get("vocab", {})
    parent_features = recorded.get("features") or (
        dict.fromkeys(("inputs", "targets"), next(iter(parent_vocab))) if len(parent_vocab) == 1
        else {})
    for feature, name in sorted(inputs.get("features", {}).items()):
        was = parent_vocab.get(parent_features.get(feature, ""))
        now = inputs["vocab"][name]
        if was is not None and was["sha256"] != now["sha256"]:
            raise UserError(
                f"--warm_start_from={warm_start_from}: the {feature} vocabulary {now['path']} "
                f"(sha256 {_short(now['sha256'])}..) is not the parent's {was['path']} (sha256 "
                f"{_short(was['sha256'])}..): every id would mean another subword; make the "
                f"data with --mode=datagen --vocab_from={parent} (nothing was written)")


def check_recorded_vocab(output_dir: str, mode: str) -> None:
    """`check_inputs` for a tool that loads no problem (`--mode=average`): the vocabulary
    files at the paths the run recorded, where they still exist.

    Raises:
      UserError: one changed, naming it.
    """
    recorded = read_json_object(os.path.join(output_dir, INPUTS_NAME),
                                "the run's vocabulary and data record") or {}
    now = {name: {"path": was["path"], "sha256": file_io.sha256_of(was["path"])}
           for name, was in recorded.get("vocab", {}).items() if os.path.exists(was["path"])}
    if now:
        check_inputs(output_dir, {"vocab": now}, mode)


def save_inputs(output_dir: str, inputs: dict[str, Any]) -> None:
    """Writes `output_dir/run_inputs.json` (`data_marker.run_inputs`), as the chief of a
    training run does with hparams.json."""
    file_io.atomic_write(os.path.join(output_dir, INPUTS_NAME),
                         json.dumps(inputs, indent=1, sort_keys=True) + "\n")


def save_hparams(output_dir: str, hparams) -> None:
    """Writes `output_dir/hparams.json` (sorted keys, with its checksum entry), as t2t's
    chief does at start.

    Args:
      output_dir: the run's directory (created if needed).
      hparams: the run's HParams.
    """
    import tensorflow as tf

    tf.io.gfile.makedirs(output_dir)
    file_io.atomic_write(os.path.join(output_dir, "hparams.json"),
                         hparams_json_text(hparams.values()))


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
