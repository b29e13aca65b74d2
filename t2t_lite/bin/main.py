r"""t2t_lite's single entry point: t2t-datagen, t2t-trainer, t2t-decoder, t2t-bleu,
t2t-avg-all, t2t-exporter and checkpoint import, as modes of one command.

    python run.py                       # embedded default: algorithmic problem, tiny model
    python run.py --mode=train --problem=translate_ende_wmt32k --hparams_set=transformer_base \
        --data_dir=... --output_dir=...
    python run.py --help                # this text and t2t_lite's flags
    python run.py --helpfull            # every flag, absl's and TensorFlow's included

Modes (--mode): default, datagen, train, eval, train_and_eval, decode, bleu, average, export,
import_t2t, plot, attention, serve, query.
Each mode's work lives in a tool module of t2t_lite/bin/; this file only wires
flags to it. The same command is installed as `t2t-lite` and runs as `python -m t2t_lite`.
"""
import gc
import importlib
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, logging
from absl import flags as absl_flags

from t2t_lite import flags as t2t_flags
from t2t_lite import quiet_start, registry
from t2t_lite.errors import one_line, report_user_errors

FLAGS = t2t_flags.FLAGS

# mode -> "module:function"; modules are imported only when their mode runs.
MODE_FUNCTIONS = {
    "default": "t2t_lite.bin.default_run:main",
    "datagen": "t2t_lite.bin.t2t_datagen:main",
    "train": "t2t_lite.bin.t2t_trainer:train",
    "eval": "t2t_lite.bin.t2t_trainer:evaluate",
    "train_and_eval": "t2t_lite.bin.t2t_trainer:train_and_eval",
    "decode": "t2t_lite.bin.t2t_decoder:main",
    "bleu": "t2t_lite.bin.t2t_bleu:main",
    "average": "t2t_lite.bin.t2t_avg_all:main",
    "export": "t2t_lite.bin.t2t_exporter:main",
    "import_t2t": "t2t_lite.bin.import_t2t:main",
    "plot": "t2t_lite.bin.t2t_plot:main",
    "attention": "t2t_lite.bin.t2t_attention:main",
    "serve": "t2t_lite.bin.t2t_server:serve",
    "query": "t2t_lite.bin.t2t_server:query",
}


# Modes whose outputs are all written and closed when their function returns (decode writes
# its files whole, by rename): at their exit the interpreter need not collect garbage.
NO_EXIT_COLLECTION_MODES = ("decode",)


def skip_exit_collection() -> None:
    """Moves every object alive now to the garbage collector's permanent generation, so that
    the interpreter's exit does not traverse them all again.

    With TensorFlow imported, that final collection took 0.9-1.2 s of a process on these 2
    cores (`import tensorflow` alone: 1.0 s from its last line to the process' end, 0.1 s
    after `gc.freeze()`); a decode process ends that much sooner. Objects are still freed
    by reference counting; only reference cycles alive at exit are left to the OS, as
    Python already does not promise their finalizers at exit.
    """
    gc.freeze()


# What needs no TensorFlow, checked before it is imported (a tool, imported like the modes).
EARLY_CHECKS = "t2t_lite.bin.early_checks"


def resolve_mode(flags_obj) -> str:
    """Returns the mode to run from --mode, else --schedule, else "default"."""
    if flags_obj.mode:
        return flags_obj.mode
    if flags_obj.schedule:
        return t2t_flags.SCHEDULES[flags_obj.schedule]
    return "default"


def needs_tensorflow(mode: str, flags_obj) -> bool:
    """Whether `mode`'s tool imports TensorFlow: BLEU scoring and decoding on CTranslate2 do
    not, and skip its import (2.6 s on a quiet machine, 10 s and more on a busy one)."""
    if mode in ("bleu", "serve", "query"):  # the server imports it once its port is open
        return False
    return not (mode == "decode" and flags_obj.decode_engine == "ctranslate2")


def check_names(flags_obj) -> None:
    """Refuses a misspelled --hparams_set before TensorFlow is imported (the sets' module needs
    no TensorFlow), with registry's close-name suggestions.

    Raises:
      RegistryError: the set is not registered.
    """
    if flags_obj.hparams_set:
        registry.hparams(flags_obj.hparams_set)


def choose_onednn(flags_obj) -> None:
    """Sets TF_ENABLE_ONEDNN_OPTS from --onednn before TensorFlow is imported (the choice:
    t2t_lite.utils.onednn) and logs it; a value already in the environment is left alone."""
    from t2t_lite.hparams_lib import create_hparams
    from t2t_lite.utils import onednn

    try:  # the model's width sizes the benchmark; the tool reports a bad --hparams itself
        hparams = create_hparams(flags_obj.hparams_set or "transformer_tiny", flags_obj.hparams)
        width = (getattr(hparams, "hidden_size", 512), getattr(hparams, "filter_size", 2048))
    except ValueError:  # HParamsError, UserError
        width = (512, 2048)

    def measure(hidden_size: int, filter_size: int):
        logging.info("oneDNN: timing the model's matmuls with Eigen and with oneDNN, once for "
                     "this CPU (two child processes)")
        return onednn.measure_in_children(hidden_size, filter_size)

    choice = onednn.decide_on_this_machine(flags_obj.onednn, os.environ, *width, measure)
    onednn.apply(choice, os.environ)
    if choice.log:
        logging.info("%s", choice.line())


def _main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    mode = resolve_mode(FLAGS)
    # A mode's return value is its result (for library callers), never the exit status.
    with report_user_errors(debug=FLAGS.debug):
        t2t_flags.expand_user_paths(FLAGS)
        check_names(FLAGS)
        importlib.import_module(EARLY_CHECKS).check(mode, FLAGS)
        quiet_start.drop_routine_info_lines()
        if needs_tensorflow(mode, FLAGS) or mode == "serve":
            choose_onednn(FLAGS)
        if needs_tensorflow(mode, FLAGS):
            quiet_start.import_tensorflow()
        module_name, function_name = MODE_FUNCTIONS[mode].split(":")
        module = importlib.import_module(module_name)
        getattr(module, function_name)(FLAGS)
        if mode in NO_EXIT_COLLECTION_MODES:
            skip_exit_collection()


def _describe_flags_in_help() -> None:
    """`--help` shows this docstring and t2t_lite's flags, under every name of the command.

    absl prints `__main__`'s docstring and the flags registered for the main module (keyed by
    sys.argv[0]); under the `t2t-lite` console script `__main__` is the generated wrapper.
    """
    sys.modules["__main__"].__doc__ = __doc__
    for flag in FLAGS.get_flags_for_module(t2t_flags.__name__):
        FLAGS.register_key_flag_for_module(sys.argv[0], flag)


def parse_flags(argv: list[str]) -> list[str]:
    """absl's flag parsing, answered as run.py's other errors: a bad flag is one line,
    `error: ...` with absl's close-name suggestion, exit 1; `--help` (and absl's other help
    flags, which exit 1 after printing) exits 0.

    Returns:
      The arguments left after the flags.
    """
    try:
        return FLAGS(argv)
    except absl_flags.Error as e:
        print(f"error: {one_line(e)} (python run.py --help lists the flags)", file=sys.stderr)
        sys.exit(1)
    except SystemExit as e:  # only the help flags exit while flags are parsed
        sys.exit(0 if e.code == 1 else e.code)


def main():
    """The entry point of `t2t-lite` (the console script), `python -m t2t_lite` and the
    repository's `python run.py`: parses the flags and runs the mode's tool."""
    _describe_flags_in_help()
    app.run(_main, argv=sys.argv, flags_parser=parse_flags)
