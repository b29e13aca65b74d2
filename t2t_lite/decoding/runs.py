"""Loading a training run, the one way every tool that reads a run does it: decode, both
exports (SavedModel and CTranslate2), attention pictures and eval.

A run is an `output_dir` written by training: `flags.json` names its problem, hparams set,
data_dir and model; `hparams.json` holds its hparams; `ckpt-N` its weights. A tool names what
it works on with its own flags; each name it leaves out comes from the run's `flags.json`
(`resolve`). Then `open_run` builds the hparams (the set, then `hparams.json`, then
`--hparams`), validates them and builds the problem with its vocabularies, and
`restore_model` builds the model and restores a checkpoint strictly (every variable of the
model found, every model variable of the checkpoint used). Nothing here writes to the run.
Every error is one line (a `UserError`) naming the flag or the file. Averaging needs no model
and reads the checkpoints with `utils.checkpoint_guard` directly.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from typing import Any

from t2t_lite.errors import UserError, one_line
from t2t_lite.hparams import HParams

DEFAULT_MODEL = "transformer"


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """What a tool works on: its flags' values, else those of the run's flags.json.

    Attributes:
      output_dir: the training run (None: a tool given --checkpoint_path and names only).
      problem_name: the registered problem.
      hparams_set: the registered hparams set (None: the run's hparams.json alone).
      data_dir: where the problem's vocabulary (and dev data) lives.
      model_name: the registered model.
      mode: the tool's run.py mode ("decode", "export", ...), for error lines.
    """
    output_dir: str | None
    problem_name: str
    hparams_set: str | None
    data_dir: str | None
    model_name: str = DEFAULT_MODEL
    mode: str = "decode"


@dataclasses.dataclass(frozen=True)
class Run:
    """A run opened for a tool: its names, hparams and problem (no model yet).

    Attributes:
      spec: the names (`RunSpec`).
      hparams: the model hparams, validated.
      problem: the problem object.
      problem_hparams: the problem's hparams (vocab sizes, vocabulary, target space).
    """
    spec: RunSpec
    hparams: HParams
    problem: Any
    problem_hparams: HParams

    @property
    def encoders(self) -> dict:
        """The problem's text encoders, {"inputs", "targets"}."""
        return self.problem_hparams.vocabulary

    @property
    def target_space_id(self) -> int:
        """The problem's target space id (0 when it has none)."""
        return int(self.problem_hparams.get("target_space_id", 0))


@contextlib.contextmanager
def one_line_errors() -> Iterator[None]:
    """Turns the ValueError / FileNotFoundError of loading a run into one-line UserErrors."""
    try:
        yield
    except UserError:
        raise
    except (ValueError, FileNotFoundError) as e:
        raise UserError(one_line(e)) from e


def read_run_flags(output_dir: str | None) -> dict:
    """The training run's `output_dir/flags.json` as a dict (empty when absent); read only.

    Raises:
      UserError: flags.json is damaged (one line naming it).
    """
    from t2t_lite.utils.run_metadata import read_json_object

    if not output_dir:
        return {}
    return read_json_object(os.path.join(output_dir, "flags.json"), "the run's flags") or {}


def resolve(mode: str, output_dir: str | None, problem: str | None = None,
            hparams_set: str | None = None, data_dir: str | None = None,
            model: str | None = None) -> RunSpec:
    """The names a tool works on: each argument given, else the run's flags.json value.

    Args:
      mode: the tool's run.py mode, for the error line ("decode", "export", ...).
      output_dir: the training run, or None.
      problem, hparams_set, data_dir, model: the tool's flags (None or "" when not given).

    Raises:
      UserError: no problem named anywhere, or a damaged flags.json.
    """
    run_flags = read_run_flags(output_dir)
    problem_name = problem or run_flags.get("problem")
    if not problem_name:
        raise UserError(f"--mode={mode} needs --problem (or an --output_dir whose flags.json "
                        "names it)")
    return RunSpec(output_dir=output_dir, problem_name=problem_name,
                   hparams_set=hparams_set or run_flags.get("hparams_set"),
                   data_dir=data_dir or run_flags.get("data_dir"),
                   model_name=model or run_flags.get("model") or DEFAULT_MODEL, mode=mode)


def load_hparams(output_dir: str | None, hparams_set: str | None, overrides: str) -> HParams:
    """Model hparams: the set, then `<output_dir>/hparams.json`, then `--hparams`; read only.

    Raises:
      ValueError: neither a set nor an hparams.json is available.
      UserError: hparams.json is damaged (one line naming it).
    """
    from t2t_lite.hparams_lib import create_hparams
    from t2t_lite.utils.run_metadata import read_hparams_json

    json_path = os.path.join(output_dir, "hparams.json") if output_dir else None
    if hparams_set:
        return create_hparams(hparams_set, overrides or "", json_path)
    stored = read_hparams_json(json_path) if json_path else None
    if stored is not None:
        hparams = HParams(**stored)
        return hparams.parse(overrides) if overrides else hparams
    raise ValueError("Loading a model needs --hparams_set, or an --output_dir holding the run's "
                     "hparams.json")


def open_run(spec: RunSpec, hparams_overrides: str = "") -> Run:
    """Builds and validates the hparams and the problem of `spec` (no model, nothing written).

    A training run's record is checked (`run_metadata`): hparams.json unedited, no
    `--hparams` that resuming would refuse (`check_same_model`), the vocabulary files those
    it was trained with (`check_inputs`).

    Args:
      spec: from `resolve`.
      hparams_overrides: the tool's --hparams ("a=1,b=2").

    Raises:
      UserError: one line (unknown set or problem, bad hparams, missing or changed
        vocabulary, an architecture change, ...).
    """
    from t2t_lite import registry
    from t2t_lite.data_generators import data_marker
    from t2t_lite.utils import run_metadata, validation

    with one_line_errors():
        hparams = load_hparams(spec.output_dir, spec.hparams_set, hparams_overrides)
        validation.check_hparams(hparams)
        if spec.output_dir:
            run_metadata.check_same_model(spec.output_dir, hparams.values(), spec.mode)
        problem = registry.problem(spec.problem_name)
        problem_hparams = problem.get_hparams(hparams, data_dir=spec.data_dir)
        if spec.output_dir:
            run_metadata.check_inputs(spec.output_dir, data_marker.run_inputs(
                problem_hparams.vocabulary, None, None), spec.mode)
    return Run(spec=spec, hparams=hparams, problem=problem, problem_hparams=problem_hparams)


def checkpoint_to_restore(checkpoint_path: str | None, output_dir: str | None) -> str:
    """`--checkpoint_path` (a prefix, a keep-best folder's best checkpoint, or a directory's
    newest readable checkpoint), else
    output_dir's newest readable checkpoint (damaged newer ones are skipped with a warning).

    Raises:
      ValueError / UserError: one line when there is none or the given one is damaged.
    """
    import tensorflow as tf

    from t2t_lite.utils import checkpoint_guard

    if checkpoint_path:
        if tf.io.gfile.isdir(checkpoint_path):
            from t2t_lite.utils import best_checkpoints

            # A keep-best folder (output_dir/best): its best checkpoint, not its newest.
            best = best_checkpoints.ranked(checkpoint_path)
            if best:
                return checkpoint_guard.check_readable(best[0])
            path = checkpoint_guard.newest_good_checkpoint(checkpoint_path)
            if path is None:
                raise ValueError(f"--checkpoint_path={checkpoint_path} is a directory without a "
                                 "checkpoint; give a checkpoint prefix")
            return path
        if not tf.io.gfile.exists(checkpoint_path + ".index"):
            raise ValueError(f"--checkpoint_path={checkpoint_path}: no {checkpoint_path}.index")
        return checkpoint_guard.check_readable(checkpoint_path)
    if not output_dir:
        raise ValueError("Loading a model needs --output_dir or --checkpoint_path")
    # A damaged newest checkpoint (a save cut short) falls back to the previous one.
    path = checkpoint_guard.newest_good_checkpoint(output_dir)
    if path is None:
        raise ValueError(f"No checkpoint in --output_dir={output_dir}; train first or give "
                         "--checkpoint_path")
    return path


def load_model(model_name: str, hparams: HParams, problem_hparams: HParams, path: str):
    """Builds `model_name` for the problem's vocab sizes and restores checkpoint `path`
    (a t2t_lite checkpoint, or an original t2t one, recognised by its variable names).

    The model computes in hparams.activation_dtype, as in training (a bfloat16 run decodes
    and exports in bfloat16; the weights are float32 either way).

    Raises:
      UserError: the checkpoint's model variables are not exactly the model's (one line
        naming the first unmatched ones and the hparams that differ from the run's).
    """
    import tensorflow as tf

    from t2t_lite import registry
    from t2t_lite.models import t2t_checkpoint
    from t2t_lite.utils import checkpoint_guard, precision

    with precision.activation_policy(hparams):
        if any(name.startswith(t2t_checkpoint.MODEL_SCOPE + "/")
               for name, _ in tf.train.list_variables(path)):
            return t2t_checkpoint.load_model(path, hparams)
        vocab = problem_hparams.vocab_size
        model = registry.model(model_name)(hparams, vocab.get("inputs", vocab["targets"]),
                                           vocab["targets"])
    # Every model variable found, every checkpoint model variable used (a 2-layer checkpoint
    # into a 1-layer model is an error, not a partial load); the optimizer is not needed.
    checkpoint_guard.check_model_matches(model, path, hparams)
    tf.train.Checkpoint(model=model).restore(path).expect_partial()
    return model


def restore_model(run: Run, checkpoint_path: str | None = None) -> tuple[str, Any]:
    """The model of `checkpoint_path`, else of the run's newest checkpoint, strictly restored
    (`load_model`); several comma-separated paths make an ensemble (`restore_ensemble`).

    Beside a training run that rotates its checkpoints, a checkpoint of the run that vanishes
    while it is read is replaced by the then-newest one (`checkpoint_guard.retry_if_vanished`);
    a `checkpoint_path` the user chose is never replaced. The model holds its values in memory:
    no checkpoint file is needed after this.

    Returns:
      (the checkpoint prefix restored (comma-joined for an ensemble), the model).

    Raises:
      UserError: one line (no checkpoint, a damaged one, a model mismatch).
    """
    from t2t_lite.utils import checkpoint_guard

    paths = ensemble_paths(checkpoint_path)
    if len(paths) > 1:
        return restore_ensemble(run, paths)

    def read(path: str):
        return load_model(run.spec.model_name, run.hparams, run.problem_hparams, path)

    def discover() -> str:
        return checkpoint_to_restore(checkpoint_path, run.spec.output_dir)

    with one_line_errors():
        if checkpoint_path:
            path = discover()
            return path, read(path)
        return checkpoint_guard.retry_if_vanished(discover, read)


def ensemble_paths(checkpoint_path: str | None) -> list[str]:
    """The comma-separated entries of --checkpoint_path (one entry: a single model)."""
    return [p.strip() for p in (checkpoint_path or "").split(",") if p.strip()]


def _member_run_dir(path: str) -> str:
    """The run folder of an ensemble member: the path itself when it is a folder, else the
    folder of the checkpoint prefix."""
    import tensorflow as tf

    return path if tf.io.gfile.isdir(path) else os.path.dirname(path)


def _vocabulary(run: Run) -> list:
    """What identifies a run's vocabularies: per feature, the model's vocab size, the
    encoder's class and its tokens (subtoken strings where the encoder has them)."""
    sizes = dict(run.problem_hparams.vocab_size)
    identity = []
    for name in sorted(run.encoders):
        encoder = run.encoders[name]
        tokens = getattr(encoder, "all_subtoken_strings", None)
        identity.append((name, sizes.get(name), type(encoder).__name__,
                         tuple(tokens) if tokens is not None else None))
    return identity


def restore_ensemble(run: Run, paths: list[str]) -> tuple[str, Any]:
    """A `TransformerEnsemble` of the checkpoints `paths` (each a prefix or a run folder,
    whose newest readable checkpoint is taken).

    A member in another run folder than `run` decodes with that run's hparams.json (the
    ensemble may join runs of other sizes) and must have been trained with the same
    vocabulary: its flags.json's problem and data_dir give vocabularies equal to `run`'s, or
    the member is refused in one line. A member without its own hparams.json (an averaged
    checkpoint's folder, say) uses `run`'s hparams.

    Returns:
      (the members' checkpoint prefixes, comma-joined; the ensemble).

    Raises:
      UserError: one line naming the member (no checkpoint, another vocabulary, a model
        mismatch).
    """
    import tensorflow as tf

    from t2t_lite.data_generators import data_marker
    from t2t_lite.models.ensemble import TransformerEnsemble
    from t2t_lite.utils import run_metadata, validation

    own = os.path.abspath(run.spec.output_dir) if run.spec.output_dir else None
    vocabulary = _vocabulary(run)
    members, checkpoints = [], []
    for path in paths:
        member_dir = _member_run_dir(path)
        hparams = run.hparams
        with one_line_errors():
            if (os.path.abspath(member_dir) != own
                    and tf.io.gfile.exists(os.path.join(member_dir, "hparams.json"))):
                member_flags = read_run_flags(member_dir)
                member_spec = RunSpec(
                    output_dir=member_dir,
                    problem_name=member_flags.get("problem") or run.spec.problem_name,
                    hparams_set=None,
                    data_dir=member_flags.get("data_dir") or run.spec.data_dir)
                if (member_spec.problem_name, member_spec.data_dir) == (
                        run.spec.problem_name, run.spec.data_dir):
                    hparams = load_hparams(member_dir, None, "")
                    validation.check_hparams(hparams)
                    run_metadata.check_inputs(member_dir, data_marker.run_inputs(
                        run.encoders, None, None), run.spec.mode)
                else:  # open_run loads and checks the hparams with the member's problem
                    member = open_run(member_spec)
                    hparams = member.hparams
                    if _vocabulary(member) != vocabulary:
                        raise UserError(
                            f"--checkpoint_path: {path} was trained with another vocabulary "
                            f"({member_spec.problem_name} in {member_spec.data_dir}) than "
                            f"{run.spec.problem_name} in {run.spec.data_dir}; the models of an "
                            "ensemble must share one vocabulary")
            checkpoint = checkpoint_to_restore(path, None)
            try:
                model = load_model(run.spec.model_name, hparams, run.problem_hparams, checkpoint)
            except UserError as e:
                raise UserError(f"ensemble member {path}: {e}") from e
        members.append(model)
        checkpoints.append(checkpoint)
    with one_line_errors():
        return ",".join(checkpoints), TransformerEnsemble(members)
