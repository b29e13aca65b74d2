"""The checks of a mode that need no TensorFlow, run by run.py before it imports TensorFlow.

Importing TensorFlow takes 3 s on a quiet machine and 30 s and more on a loaded one; a
mistake that can be seen without it (a missing or out-of-range flag, an unknown hparam or
a bad value, a missing --data_dir or its data, a run without a checkpoint, an output_dir
held by a live run; for `--mode=serve` its port, host and model: `check_serving`) is
answered before, in seconds. The tools check the same things again
after (for paths with a scheme, gs://..., and multi-worker runs only they do).
"""
from __future__ import annotations

import glob
import os
from typing import Any

from t2t_lite import hparams_support
from t2t_lite.errors import DataError, UserError, one_line
from t2t_lite.hparams_lib import create_hparams
from t2t_lite.utils import run_lock, run_metadata, validation

TRAINING_MODES = ("train", "train_and_eval")
# Modes that restore a checkpoint of --output_dir when --checkpoint_path is not given.
CHECKPOINT_MODES = ("decode", "export", "attention")
_SOURCE_FLAGS = "--train_src=... --train_tgt=... --dev_src=... --dev_tgt=..."


def datagen_command(problem: str, data_dir: str) -> str:
    """The datagen command that makes `problem`'s data in `data_dir`, with the flags naming
    its inputs (translate_files: the four parallel files; WSJ parsing: --wsj_dir)."""
    command = f"python run.py --mode=datagen --problem={problem} --data_dir={data_dir}"
    base = problem.removesuffix("_rev")
    if base == "translate_files":
        return f"{command} {_SOURCE_FLAGS}"
    if base.startswith("translate_"):
        return f"{command} --tmp_dir=... (t2t's raw archives there) or {_SOURCE_FLAGS}"
    if base.startswith(("parsing_", "wsj_parsing")):
        return f"{command} --wsj_dir=..."
    return command


def check_training_flags(flags_obj: Any) -> None:
    """Refuses missing or out-of-range training flags before anything is built or written.

    Raises:
      UserError: naming the flag and its value.
    """
    for name in ("problem", "hparams_set", "output_dir", "data_dir"):
        if not getattr(flags_obj, name):
            raise UserError(f"--{name} is required for --mode=train/eval/train_and_eval")
    validation.check_positive({
        name: getattr(flags_obj, name, None)
        for name in ("train_steps", "local_eval_frequency", "keep_checkpoint_max",
                     "log_step_count_steps", "save_checkpoints_steps", "worker_gpu",
                     "worker_replicas", "worker_startup_timeout_secs")})
    validation.check_non_negative({"eval_steps": getattr(flags_obj, "eval_steps", None)})
    validation.check_output_dir("output_dir", os.path.expanduser(flags_obj.output_dir))


def check_data_dir(problem: str, data_dir: str, shown: str, splits: tuple[str, ...]) -> None:
    """Refuses a missing data_dir, or one without the shards of `splits` ("train", "dev",
    "test"), naming the datagen command (with its input flags) that makes them.

    Args:
      problem: the --problem name (a `_rev` problem reads its base problem's files).
      data_dir: the directory (expanded); paths with a scheme are left to the tools.
      shown: --data_dir as the user wrote it, for the message.
      splits: the shard tags the mode reads.

    Raises:
      UserError / DataError: one line with the command.
    """
    if "://" in data_dir:
        return
    if not os.path.isdir(data_dir):
        raise UserError(f"--data_dir={shown}: no such directory (make the data first: "
                        f"{datagen_command(problem, shown)})")
    for tag in splits:
        pattern = None
        for base in dict.fromkeys((problem, problem.removesuffix("_rev"))):
            pattern = os.path.join(data_dir, f"{base}-{tag}*")
            if [f for f in glob.glob(pattern) if not f.endswith(".incomplete")]:
                break
        else:
            raise DataError(f"No data files match {pattern}. Generate them first: "
                            f"{datagen_command(problem, shown)}")


def check_hparams(hparams_set: str, overrides: str, output_dir: str | None) -> None:
    """Builds the hparams as the tools do (the set, output_dir/hparams.json, `overrides`) and
    checks names, ranges and the values t2t_lite supports.

    Raises:
      HParamsError / RegistryError / UserError: one line naming the hparam or the set.
    """
    json_path = os.path.join(output_dir, "hparams.json") if output_dir else None
    if json_path and "://" in json_path:
        json_path = None
    hparams = create_hparams(hparams_set, overrides or "", json_path)
    validation.check_hparams(hparams)
    hparams_support.check_supported(hparams)


def check_checkpoint_present(output_dir: str | None) -> None:
    """Refuses a run directory without any checkpoint (its readability is the tools' check).

    Raises:
      UserError: "No checkpoint in --output_dir=...".
    """
    if not output_dir or "://" in output_dir:
        return
    if not glob.glob(os.path.join(glob.escape(output_dir), "*.index")):
        raise UserError(f"No checkpoint in --output_dir={output_dir}; train first or give "
                        "--checkpoint_path")


def _single_process() -> bool:
    """No TF_CONFIG: this process is the chief (multi-worker runs are checked by the tools)."""
    return not os.environ.get("TF_CONFIG")


def check(mode: str, flags_obj: Any) -> None:
    """Runs the checks of `mode` that need no TensorFlow (see the module docstring).

    Args:
      mode: run.py's resolved mode.
      flags_obj: absl FLAGS of run.py.

    Raises:
      UserError (or the library's one-line errors): the first mistake found.
    """
    if mode == "default" and _single_process():
        from t2t_lite.bin import default_run

        run_lock.refuse_if_held(default_run.output_dir(flags_obj))
    elif mode in TRAINING_MODES or mode == "eval":
        # A worker of a cluster fails after it joined it (the tools' checks), so that its
        # peers say it was lost instead of waiting for it until their start-up timeout.
        if _single_process():
            _check_training(mode, flags_obj)
    elif mode == "datagen":
        check_datagen_flags(flags_obj)
    elif mode in CHECKPOINT_MODES and not flags_obj.checkpoint_path:
        if mode == "decode" and flags_obj.decode_engine == "ctranslate2":
            return
        check_run_reader(mode, flags_obj)
    elif mode == "serve":
        check_serving(flags_obj)


def check_datagen_flags(flags_obj: Any) -> None:
    """Refuses a bad --num_datagen_workers or --filter_* value before datagen starts.

    Raises:
      UserError: one line naming the flag.
    """
    from t2t_lite.bin import t2t_datagen

    workers = getattr(flags_obj, "num_datagen_workers", None)
    if workers is not None and workers < 1:
        raise UserError(f"--num_datagen_workers={workers}: must be at least 1 (processes "
                        "encoding the shards)")
    t2t_datagen.filter_settings_from_flags(flags_obj)


def _check_training(mode: str, flags_obj: Any) -> None:
    from t2t_lite.decoding import runs

    output_dir = os.path.expanduser(flags_obj.output_dir or "")
    problem, hparams_set, data_dir = flags_obj.problem, flags_obj.hparams_set, flags_obj.data_dir
    if mode == "eval":
        if not output_dir:
            raise UserError("--output_dir is required for --mode=train/eval/train_and_eval")
        spec = runs.resolve("eval", output_dir, problem, hparams_set, data_dir, flags_obj.model)
        problem, hparams_set, data_dir = spec.problem_name, spec.hparams_set, spec.data_dir
        for name, value in (("hparams_set", hparams_set), ("data_dir", data_dir)):
            if not value:
                raise UserError(f"--{name} is required for --mode=train/eval/train_and_eval")
    else:
        check_training_flags(flags_obj)
        run_lock.refuse_if_held(output_dir)
        if glob.glob(os.path.join(glob.escape(output_dir), "*.index")):
            # As training does: resuming with another problem is refused as such.
            run_metadata.check_identity(output_dir, {
                "problem": problem, "model": flags_obj.model, "hparams_set": hparams_set})
    if not flags_obj.generate_data:
        splits = {"train": ("train",), "train_and_eval": ("train", "dev"),
                  "eval": ("test" if flags_obj.eval_use_test_set else "dev",)}[mode]
        check_data_dir(problem, os.path.expanduser(data_dir), data_dir, splits)
    check_hparams(hparams_set, flags_obj.hparams, output_dir)


def check_run_reader(mode: str, flags_obj: Any) -> None:
    """A tool that reads a run's checkpoint (decode, export, attention, serve): the names
    it works on (`runs.resolve`), the hparams and a checkpoint present, without TensorFlow.

    Raises:
      UserError (or the library's one-line errors): the first mistake found.
    """
    from t2t_lite.decoding import runs

    output_dir = os.path.expanduser(flags_obj.output_dir or "")
    spec = runs.resolve(mode, output_dir or None, flags_obj.problem, flags_obj.hparams_set,
                        flags_obj.data_dir, flags_obj.model)
    if spec.hparams_set or (output_dir and os.path.isfile(
            os.path.join(output_dir, "hparams.json"))):
        with runs.one_line_errors():
            hparams = runs.load_hparams(output_dir or None, spec.hparams_set, flags_obj.hparams)
            validation.check_hparams(hparams)
            hparams_support.check_supported(hparams)
    check_checkpoint_present(output_dir or None)


def check_serving(flags) -> None:
    """What `--mode=serve` checks before anything else (before TensorFlow loads and before
    "Serving on" is printed), each mistake one line naming its
    flag: --port's range, --host, and the model to serve (the run folder and its
    checkpoints, --checkpoint_path, --saved_model_dir or the CTranslate2 export).

    Raises:
      UserError: the first mistake found.
    """
    import socket

    from t2t_lite.decoding import runs

    if not 0 <= flags.port <= 65535:
        raise UserError(f"--port={flags.port}: must be between 0 and 65535")
    try:
        socket.getaddrinfo(flags.host, None)
    except (socket.gaierror, UnicodeError) as e:
        raise UserError(f"--host={flags.host}: not an address or a known host name "
                        f"({one_line(e)}); use 127.0.0.1, 0.0.0.0 or one of this machine's "
                        "addresses") from None
    output_dir = os.path.expanduser(flags.output_dir or "")
    if output_dir and not os.path.isdir(output_dir) and "://" not in output_dir:
        raise UserError(f"--output_dir={flags.output_dir}: no such folder (the training run "
                        "to serve)")
    if flags.decode_engine == "ctranslate2":
        model_dir = ct2_model_dir(flags)
        if "://" not in model_dir and not os.path.isfile(os.path.join(model_dir, "model.bin")):
            raise UserError(f"{model_dir}: no CTranslate2 model (model.bin) there; write one "
                            "with --mode=export --export_format=ctranslate2, or name it with "
                            "--export_dir")
    elif flags.saved_model_dir:
        saved_model_path(flags)
    elif flags.checkpoint_path:
        for path in runs.ensemble_paths(flags.checkpoint_path):
            if "://" not in path and not (os.path.isdir(path)
                                          or os.path.isfile(path + ".index")):
                raise UserError(f"--checkpoint_path={flags.checkpoint_path}: {path} is neither "
                                f"a run folder nor a checkpoint ({path}.index)")
    elif not output_dir:
        raise UserError("--mode=serve needs --output_dir=<training run> (or --checkpoint_path, "
                        "--saved_model_dir, or --decode_engine=ctranslate2 with --export_dir)")
    else:
        check_checkpoint_present(output_dir)
        check_run_reader("serve", flags)


def ct2_model_dir(flags) -> str:
    """The CTranslate2 export to serve (--export_dir, else <--output_dir>/ctranslate2)."""
    from t2t_lite.export import ct2

    return ct2.default_model_dir(flags.export_dir, os.path.expanduser(flags.output_dir or ""))


def saved_model_path(flags) -> str:
    """The SavedModel folder to serve: --saved_model_dir, or its newest version folder.

    Raises:
      UserError: no saved_model.pb there nor in a numbered version folder.
    """
    path = os.path.expanduser(flags.saved_model_dir)
    if os.path.isfile(os.path.join(path, "saved_model.pb")):
        return path
    versions = sorted((int(name) for name in os.listdir(path) if name.isdigit()
                       and os.path.isfile(os.path.join(path, name, "saved_model.pb"))),
                      reverse=True) if os.path.isdir(path) else []
    if not versions:
        raise UserError(f"--saved_model_dir={flags.saved_model_dir}: no saved_model.pb "
                        "there nor in a numbered version folder; write one with "
                        "--mode=export")
    return os.path.join(path, str(versions[0]))
