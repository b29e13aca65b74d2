"""The run card: one place with the facts needed to reproduce a run's numbers.

`output_dir/run_card.json` holds sections that each step of a run fills in, and
`output_dir/run_card.md` is the same content as a readable page, rewritten at every update:

* "setup" (by `trainer_lib.create_trainer` in training modes): versions (t2t_lite,
  TensorFlow, Keras, Python, CUDA/cuDNN of the TF build, devices), the command line, problem,
  model, hparams set and every override, the hparams a resume may not change, replicas,
  per-replica and global batch (tokens for token-batched problems, sequences otherwise),
  gradient accumulation;
* "training" (end of `Trainer.train`): global step, steps and wall time of this session,
  tokens/s of the last progress interval, last training loss and learning rate;
* "history" (by `trainer_lib.create_trainer` when a training run resumes): one entry per
  resume, the checkpoint step and the settings it changed (`run_metadata.check_resume`);
* "eval" (each `Trainer.evaluate`): the step and every dev metric;
* "bleu" (`dev_decode.report_bleu`): the decodes and reference files, the checkpoint step,
  sacreBLEU's score with its signature and t2t's tokenized BLEU lines (and chrF2 / chrF2++ /
  TER with --metrics);
* "selection" (train_and_eval with `--eval_early_stopping_steps` or
  `--keep_best_checkpoints`): the metric, its best value and step, where training stopped
  early, the kept best checkpoints.

Sections merge: eval and decode update the card of the training run without touching the
other sections; a resumed training run replaces "setup" and "training" with its own and adds
to "history". Each update reads, changes and replaces the card while holding an exclusive
lock on output_dir (flock), so an eval beside a live training run loses neither's update.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import shlex
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from absl import logging

from t2t_lite import file_io

JSON_NAME = "run_card.json"
MARKDOWN_NAME = "run_card.md"
SECTIONS = ("setup", "history", "training", "eval", "bleu", "selection")
_TITLES = {"setup": "Setup", "history": "History (resumes)", "training": "Training",
           "eval": "Dev metrics (last evaluation)", "bleu": "BLEU (last decode with a reference)",
           "selection": "Model selection (early stopping, best checkpoints)"}


def read(output_dir: str) -> dict[str, dict[str, Any]]:
    """The card of `output_dir` as {section: {key: value}} ({} when there is none)."""
    text = file_io.read_text(os.path.join(output_dir, JSON_NAME))
    if text is None:
        return {}
    try:
        return json.loads(text)
    except json.JSONDecodeError:  # a card cut off mid-write by a killed run: start again
        return {}


def update(output_dir: str, section: str, values: dict[str, Any]) -> dict[str, dict]:
    """Replaces one section of the card and rewrites run_card.json and run_card.md.

    Args:
      output_dir: the run's directory (created if missing).
      section: one of SECTIONS.
      values: key -> JSON-serialisable value; keys keep their order on the page.

    Returns:
      The whole card after the update.
    """
    return _change_section(output_dir, section, lambda _: dict(values))


def _change_section(output_dir: str, section: str,
                    change: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, dict]:
    """Sets `section` to `change(its current values)`, stamped with the time, under the lock."""
    if section not in SECTIONS:
        raise ValueError(f"run card section {section!r}: use one of {SECTIONS}")
    file_io.makedirs(output_dir)
    with _locked(output_dir):
        card = read(output_dir)
        values = change({k: v for k, v in card.get(section, {}).items() if k != "updated"})
        card[section] = dict(values, updated=time.strftime("%Y-%m-%d %H:%M:%S %Z"))
        # Through file_io: a gs:// output_dir gets its card there, not in a local "gs:" folder.
        file_io.atomic_write(os.path.join(output_dir, JSON_NAME),
                             json.dumps(card, indent=2) + "\n")
        file_io.atomic_write(os.path.join(output_dir, MARKDOWN_NAME), to_markdown(card))
    return card


@contextlib.contextmanager
def _locked(output_dir: str) -> Iterator[None]:
    """Holds an exclusive flock on the directory itself (no lock file is left behind):
    training and a concurrent eval or decode update the card one after the other. Paths
    with a scheme (gs://) have no flock: the card's updates there are not serialised."""
    if "://" in output_dir:
        yield
        return
    fd = os.open(output_dir, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _cell(value: Any) -> str:
    """A table cell: floats with 5 significant digits, lists and dicts as JSON, `|` escaped."""
    if isinstance(value, float):
        text = f"{value:.5g}"
    elif isinstance(value, list | dict):
        text = json.dumps(value)
    else:
        text = str(value)
    return text.replace("|", "\\|").replace("\n", "<br>")


def to_markdown(card: dict[str, dict[str, Any]]) -> str:
    """run_card.md: a title, then one two-column table per section present."""
    lines = ["# Run card", ""]
    setup = card.get("setup", {})
    if setup.get("command"):
        lines += ["```", setup["command"], "```", ""]
    for section in SECTIONS:
        values = card.get(section)
        if not values:
            continue
        lines += [f"## {_TITLES[section]}", "", "| | |", "|---|---|"]
        lines += [f"| {key} | {_cell(value)} |" for key, value in values.items()
                  if not (section == "setup" and key == "command")]
        lines.append("")
    return "\n".join(lines)


def versions() -> dict[str, str]:
    """Versions of t2t_lite, TensorFlow, Keras and Python, the CUDA/cuDNN TensorFlow was built
    with, and the devices it sees (e.g. "CPU" or "GPU:0 NVIDIA H100 80GB HBM3")."""
    import keras
    import tensorflow as tf

    try:
        from importlib.metadata import version
        t2t_version = version("t2t_lite")
    except Exception:  # noqa: BLE001  (not installed: running from a checkout)
        t2t_version = "unknown (not installed)"
    build = tf.sysconfig.get_build_info()
    devices = []
    for gpu in tf.config.list_physical_devices("GPU"):
        name = tf.config.experimental.get_device_details(gpu).get("device_name", "")
        devices.append(f"{gpu.name.split(':', 1)[-1]} {name}".strip())
    return {
        "t2t_lite": t2t_version,
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "python": platform.python_version(),
        "cuda (TF build)": build.get("cuda_version", "none"),
        "cudnn (TF build)": build.get("cudnn_version", "none"),
        "devices": ", ".join(devices) or f"CPU ({platform.machine()}, {os.cpu_count()} cores)",
    }


def command_line(argv: list[str] | None = None) -> str:
    """The command as typed (shell-quoted), `python run.py ...` for run.py's argv."""
    argv = list(sys.argv if argv is None else argv)
    if argv and argv[0].endswith(".py"):
        argv = ["python", os.path.basename(argv[0])] + argv[1:]
    return shlex.join(argv)


def global_batch(batch_size: int, replicas: int, accumulate_steps: int,
                 means_tokens: bool) -> dict[str, Any]:
    """The batch an update sees: t2t's `batch_size` is per replica, in tokens for
    token-batched problems (a bucket's sequences x its length stays under it), in sequences
    otherwise; gradient accumulation multiplies it once more.

    Returns:
      {"batch_size per replica": "1024 tokens", "global batch per update": "4096 tokens"}.
    """
    unit = "tokens" if means_tokens else "sequences"
    return {
        "batch_size per replica": f"{batch_size} {unit}",
        "replicas": replicas,
        "gradient accumulation steps": accumulate_steps,
        "global batch per update": f"{batch_size * replicas * accumulate_steps} {unit}",
    }


def record_setup(output_dir: str, problem: Any, model_name: str, hparams_set: str,
                 hparams_overrides: str, hparams: Any, replicas: int, training: bool) -> None:
    """Writes the "setup" section (in training modes; otherwise only when the card has none).

    Args:
      output_dir: the run's directory.
      problem: the Problem (its name and `batch_size_means_tokens`).
      model_name, hparams_set, hparams_overrides: as given to create_trainer.
      hparams: the final HParams (overrides applied).
      replicas: number of replicas in sync.
      training: whether this is a training run (which owns the setup section).
    """
    if not training and "setup" in read(output_dir):
        return
    values: dict[str, Any] = {"command": command_line()}
    values.update(versions())
    values.update({
        "problem": problem.name,
        "model": model_name,
        "hparams set": hparams_set,
        "hparams overrides": hparams_overrides or "(none)",
    })
    values.update(_run_batch(problem, hparams, replicas))
    values["hparams (all, overrides applied)"] = "hparams.json"
    values["model hparams (a resume may not change them)"] = fixed_hparams(hparams)
    update(output_dir, "setup", values)


def fixed_hparams(hparams: Any) -> str:
    """The hparams that shape the model (declared `resume=VARIABLES` or `COMPUTATION` in
    `hparams_support.HPARAMS`) with their values, "name=value, ..." in name order."""
    from t2t_lite import hparams_support

    names = hparams_support.names_with(resume=hparams_support.VARIABLES) + \
        hparams_support.names_with(resume=hparams_support.COMPUTATION)
    return ", ".join(f"{name}={hparams.get(name)}" for name in sorted(names) if name in hparams)


def _run_batch(problem: Any, hparams: Any, replicas: int) -> dict[str, Any]:
    """`global_batch` of a run's hparams, problem and replicas."""
    from t2t_lite.training import optimize

    return global_batch(int(hparams.batch_size), replicas, optimize.accumulate_steps(hparams),
                        bool(getattr(problem, "batch_size_means_tokens", True)))


def replicas_change(output_dir: str, problem: Any, hparams: Any, replicas: int) -> str | None:
    """How a resume changes the number of replicas (workers x devices) since the setup the
    card records, and so the global batch: read before `record_setup` rewrites it.

    Returns:
      "replicas 2 -> 1 (global batch per update 1024 tokens -> 512 tokens)", or None when the
      card records no setup or the same number of replicas.
    """
    old = read(output_dir).get("setup", {})
    if "replicas" not in old or old["replicas"] == replicas:
        return None
    new = _run_batch(problem, hparams, replicas)["global batch per update"]
    return (f"replicas {old['replicas']} -> {replicas} (global batch per update "
            f"{old.get('global batch per update', 'unknown')} -> {new})")


def with_replicas_change(output_dir: str, problem: Any, hparams: Any, replicas: int,
                         changes: list[str]) -> list[str]:
    """A resume's `changes` with another number of replicas added (`replicas_change`), said
    once as a warning: another global batch, so another effective learning rate schedule."""
    moved = replicas_change(output_dir, problem, hparams, replicas)
    if not moved:
        return changes
    logging.warning("This resume trains with %s", moved)
    return [*changes, moved]


def record_resume(output_dir: str, step: int, changes: list[str]) -> None:
    """Adds a "history" entry: a training run resumed from checkpoint `step` with `changes`.

    Data made again since the run's last session ("data <marker> sha256 old -> new", from
    `run_metadata.check_inputs`) is also said in one warning: the run trains on other data.

    Args:
      output_dir: the run's directory.
      step: the global step of the checkpoint it resumed from.
      changes: the settings it changed, "name old -> new" (`run_metadata.check_resume`).
    """
    data = [change for change in changes if change.startswith("data ")]
    if data:
        logging.warning("This resume trains on data made again since the run's last session "
                        "(%s): the run card's History records it", "; ".join(data))

    def add(history: dict[str, Any]) -> dict[str, Any]:
        entry = f"{len(history) + 1}. resumed at step {step}"
        return dict(history, **{entry: "; ".join(changes) or "(no setting changed)"})

    _change_section(output_dir, "history", add)


def record_training(output_dir: str, global_step: int, start_step: int, wall_time: float,
                    last: dict[str, float]) -> None:
    """Writes the "training" section at the end of `Trainer.train`.

    Args:
      output_dir: the run's directory.
      global_step: the step training stopped at.
      start_step: the step this session started (resumed) at.
      wall_time: seconds this session trained (evaluations in between included).
      last: the last progress statistics ("loss", "learning_rate", "tokens/sec", ...; {} when
        no progress line was logged).
    """
    values: dict[str, Any] = {
        "global step": global_step,
        "steps this session": global_step - start_step,
        "wall time this session": f"{wall_time:.1f} s",
    }
    if last:
        values["tokens/s (last progress interval)"] = round(last.get("tokens/sec", 0.0))
        values["steps/s (last progress interval)"] = last.get("global_step/sec", 0.0)
        values["training loss (last progress interval)"] = last.get("loss", 0.0)
        values["learning rate"] = last.get("learning_rate", 0.0)
    update(output_dir, "training", values)


def record_eval(output_dir: str, step: int, results: dict[str, float]) -> None:
    """Writes the "eval" section: the step and every dev metric (sorted)."""
    values: dict[str, Any] = {"step": step}
    values.update({name: float(value) for name, value in sorted(results.items())})
    update(output_dir, "eval", values)


def record_bleu(output_dir: str, step: int | None, reference: str, decodes_file: str,
                report_lines: list[str]) -> None:
    """Writes the "bleu" section from `bleu_hook.bleu_report`'s lines (sacreBLEU's score with
    its signature, then t2t's `BLEU_uncased` / `BLEU_cased`, then sacreBLEU's other metrics
    with their signatures)."""
    values: dict[str, Any] = {"checkpoint step": step, "decodes": os.path.abspath(decodes_file),
                              "reference": os.path.abspath(reference)}
    if not report_lines:
        values["sacreBLEU"] = ""
    for line in report_lines:
        name, _, score = line.partition("=")
        if line.startswith("BLEU|"):
            values["sacreBLEU"] = line
        elif "|" in name:  # sacreBLEU's chrF2 / chrF2++ / TER line with its signature
            values[name.split("|", 1)[0]] = line
        else:
            values[f"t2t {name.strip()}"] = score.strip()
    update(output_dir, "bleu", values)


def record_selection(output_dir: str, values: dict[str, Any]) -> None:
    """Writes the "selection" section: early stopping's metric, best value and step, the step
    it stopped at, and the kept best checkpoints."""
    update(output_dir, "selection", values)
