"""Import TensorFlow without its CUDA start-up noise on machines that have no NVIDIA GPU.

On a CPU-only machine a CUDA build of TensorFlow prints, before anything of ours and before
`TF_CPP_MIN_LOG_LEVEL` takes effect (absl logging is not initialised yet):

    WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
    I0000 ... cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.
    E0000 ... cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: ...

These lines are expected there and say nothing. `import_tensorflow` captures the process's
stderr (file descriptor 2, where the C++ runtime writes) while TensorFlow is imported and its
devices are listed, drops exactly those known lines, and writes every other line back to
stderr: real errors are never hidden. Where an NVIDIA device node exists, nothing is filtered
(a failing cuInit there is a real problem).
"""
from __future__ import annotations

import contextlib
import glob
import logging
import os
import re
import sys
import tempfile
from collections.abc import Iterator

# Lines that a CUDA build of TensorFlow prints on every start on a machine without a GPU.
EXPECTED_CPU_ONLY_LINES = (
    re.compile(r"All log messages before absl::InitializeLog\(\) is called are written to"),
    re.compile(r"cudart_stub\.cc:\d+\] Could not find cuda drivers on your machine"),
    re.compile(r"\] failed call to cuInit: "),
    re.compile(r"Unable to register cu(DNN|FFT|BLAS) factory: Attempting to register factory"),
    re.compile(r"computation placer already registered"),
    # Informational banners of every start (oneDNN's, once per loaded library; the CPU
    # feature notice on two lines), not about the user's work.
    re.compile(r"port\.cc:\d+\] oneDNN custom operations are on"),
    re.compile(r"cpu_feature_guard\.cc:\d+\] This TensorFlow binary is optimized"),
    re.compile(r"^To enable the following instructions: .* rebuild TensorFlow with"),
)


def has_nvidia_device() -> bool:
    """True when the machine exposes an NVIDIA device node (a GPU driver is loaded)."""
    return bool(glob.glob("/dev/nvidia[0-9]*")) or os.path.exists("/proc/driver/nvidia")


@contextlib.contextmanager
def filtered_stderr(drop: tuple[re.Pattern, ...]) -> Iterator[None]:
    """Captures file descriptor 2 in the block; afterwards writes back every line that
    matches none of the `drop` patterns (in order, to the real stderr)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            kept = [line for line in capture.read().decode("utf-8", "replace").splitlines(True)
                    if not any(pattern.search(line) for pattern in drop)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


# Optional imports that Keras 3 makes when TensorFlow loads it, for features t2t_lite does not
# use: `keras.visualization` imports matplotlib.pyplot and `keras.saving`'s weights editor
# IPython (with jedi), ~0.3 s each, when installed. `import_tensorflow` skips them (Keras
# catches the ImportError); they stay importable afterwards.
UNUSED_KERAS_IMPORTS = ("matplotlib", "IPython")


@contextlib.contextmanager
def skipped_imports(names: tuple[str, ...]) -> Iterator[None]:
    """In the block, `import` of each not-yet-imported module in `names` raises ImportError;
    afterwards they import normally again."""
    blocked = [name for name in names if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # the import system's "not importable" marker
    try:
        yield
    finally:
        for name in blocked:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


def import_tensorflow():
    """Imports and returns `tensorflow`, quietly on a machine without an NVIDIA GPU, and
    without Keras' optional imports t2t_lite never uses (`UNUSED_KERAS_IMPORTS`: ~0.6 s of a
    ~2.6 s import here).

    Lists the physical devices inside the capture, since that is where CUDA is initialised.
    """
    if "tensorflow" in sys.modules:
        import tensorflow as tf

        return tf
    with skipped_imports(UNUSED_KERAS_IMPORTS):
        if has_nvidia_device():
            import tensorflow as tf

            return tf
        with filtered_stderr(EXPECTED_CPU_ONLY_LINES):
            import tensorflow as tf

            tf.config.list_physical_devices()
    return tf


# INFO lines of TensorFlow and TensorBoard that come with every checkpoint save and every
# read of an event directory, about their own work: dropped by `drop_routine_info_lines`.
ROUTINE_INFO_LINES = (
    "Sharding callback duration: ",  # tf.train.Checkpoint, every save
    "No path found after ",  # TensorBoard's directory watcher, reading events (--mode=plot)
)


def _not_routine(record: logging.LogRecord) -> bool:
    return record.levelno > logging.INFO or not str(record.msg).startswith(ROUTINE_INFO_LINES)


def drop_routine_info_lines() -> None:
    """Drops the `ROUTINE_INFO_LINES` from the absl and TensorBoard loggers (those INFO
    records only; every warning and every other line still shows). Idempotent."""
    for name in ("absl", "tensorboard"):
        logger = logging.getLogger(name)
        if _not_routine not in logger.filters:
            logger.addFilter(_not_routine)
