"""The error a user can fix, and how an entry point reports it.

Every mistake in the flags, the hparams, the inputs or the files a run reads is raised as a
`UserError` (or one of the library's ValueError subclasses that already carry one clear
sentence: `HParamsError`, `RegistryError`, `VocabFileError`, ...). Entry points catch them in
`report_user_errors` and print one line, `error: <message>`, on stderr with exit status 1;
`--debug` shows the traceback instead. A full disk, a read-only or unwritable path met while
writing (`storage_problem`) is reported the same way, naming the path.
"""
from __future__ import annotations

import atexit
import contextlib
import errno
import os
import re
import signal
import sys
import threading
import traceback
from collections.abc import Iterator


class UserError(ValueError):
    """A mistake in a flag, a value, a file or a directory the user gave.

    The message is one sentence naming the flag, the file (with the line where there is one)
    or the value, and what to do about it.
    """


class RunStopped(Exception):
    """A run that stops on purpose or because its cluster broke, with its own exit status.

    Entry points print `<label>: <message>` (one line, no traceback) and exit with
    `exit_code`: a stop signal (Ctrl-C 130, SIGTERM 143, after saving a checkpoint) is
    labelled "stopped", a lost worker or a cluster that never formed "error".
    """

    def __init__(self, message: str, exit_code: int, label: str = "error",
                 exit_now: bool = False):
        super().__init__(message)
        self.exit_code = exit_code
        self.label = label
        # A worker of a broken cluster: TensorFlow's teardown would wait (up to a minute,
        # silently) for peers that are gone or frozen; exit right after the line instead.
        self.exit_now = exit_now


# The exit status of a run stopped by Ctrl-C (the shell's 128 + SIGINT), as training's.
SIGINT_EXIT_CODE = 130
# The exit status of a run stopped by SIGTERM (a scheduler's stop, `kill`), as training's.
SIGTERM_EXIT_CODE = 143


class SigtermReceived(KeyboardInterrupt):
    """SIGTERM, raised in the main thread by `sigterm_interrupts`: the work is stopped and
    cleaned up as after Ctrl-C, with SIGTERM's name and exit status."""


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Within the block, SIGTERM interrupts the main thread as Ctrl-C does (`SigtermReceived`),
    so that the cleanup of an interrupted write runs instead of the process dying with its
    partial files; outside the main thread it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise SigtermReceived

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def interrupt_signal(error: KeyboardInterrupt) -> tuple[str, int]:
    """The signal behind an interrupt and its exit status: ("SIGTERM", 143) for
    `SigtermReceived`, else ("SIGINT", 130)."""
    if isinstance(error, SigtermReceived):
        return "SIGTERM", SIGTERM_EXIT_CODE
    return "SIGINT", SIGINT_EXIT_CODE


class DataError(FileNotFoundError):
    """Generated data (shards of a split) missing, incomplete or damaged; the message names
    the files and the datagen command that repairs them. A FileNotFoundError, as t2t raised."""


class HParamsError(ValueError):
    """A bad hyperparameter name, value or override string (raised by `t2t_lite.hparams`)."""


class RegistryError(KeyError):
    """An unknown or duplicate registered name (raised by `t2t_lite.registry`)."""

    def __str__(self) -> str:  # KeyError quotes its message; show it plainly.
        return str(self.args[0])


def user_error_types() -> tuple[type[BaseException], ...]:
    """The exception types whose message is meant for the user as it is.

    Returns:
      UserError and the library's own error classes, all declared here (this module imports
      nothing of t2t_lite: every other module may import it).
    """
    return (UserError, DataError, HParamsError, RegistryError)


# errno -> what the user reads; TensorFlow's file errors carry only the strerror text.
STORAGE_ERRNOS = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ENOTDIR: "a path component is a file, not a directory",
}
_STORAGE_TEXTS = {"No space left on device": errno.ENOSPC, "Disk quota exceeded": errno.EDQUOT,
                  "Read-only file system": errno.EROFS, "Permission denied": errno.EACCES,
                  "is not a directory": errno.ENOTDIR, "Not a directory": errno.ENOTDIR}
# The path in a TensorFlow file error, the word right before the reason: "<path>; No space
# left on device", "<path> is not a directory", "...: <path>; Read-only file system",
# "{{function_node ...}} <path>; ..."; absolute, relative ("run/eval", as --output_dir=run
# gives it) or with a scheme.
_TF_PATH = re.compile(r"(?:^|[\s{}])([^\s{};]*[^\s{};:])(?:;\s*|\s+)$")


def storage_problem(error: BaseException) -> tuple[str, str | None] | None:
    """What went wrong writing a file, when `error` is a full disk or an unwritable path.

    Args:
      error: an OSError (errno ENOSPC, EDQUOT, EROFS, EACCES, EPERM, ENOTDIR) or a TensorFlow
        file error (ResourceExhaustedError, PermissionDeniedError, FailedPreconditionError,
        ...) whose message says so.

    Returns:
      (reason, path or None), e.g. ("no space left on device", "/run/ckpt-6_temp/..."), or
      None for any other error.
    """
    if isinstance(error, OSError):
        if error.errno in STORAGE_ERRNOS:
            return STORAGE_ERRNOS[error.errno], _target(error.filename)
        return None
    message = getattr(error, "message", None)  # tf.errors.OpError, without importing TF
    if not isinstance(message, str) or type(error).__module__.split(".")[0] != "tensorflow":
        return None
    for text, number in _STORAGE_TEXTS.items():
        if text in message:
            match = _TF_PATH.search(message[:message.index(text)])
            path = match.group(1).split(".tempstate")[0] if match else None
            return STORAGE_ERRNOS[number], _target(path)
    return None


def _target(path) -> str | None:
    """The file meant by a path written under file_io's temporary name
    (`<path>.<pid>.<random>.incomplete`)."""
    if not isinstance(path, str):
        return None
    return re.sub(r"\.\d+\.[0-9a-f]{8}\.incomplete$", "", path)


def describe_storage_problem(problem: tuple[str, str | None], advice: str) -> str:
    """`reason: path; advice` for a `storage_problem`."""
    reason, path = problem
    return f"{reason}: {path}; {advice}" if path else f"{reason}; {advice}"
# Set once a process has joined a cluster of workers (`exit_right_after_the_line`).
_in_cluster = False


def exit_right_after_the_line() -> None:
    """Makes `report_user_errors` end this process right after its one line: a worker of a
    cluster would otherwise wait silently (seconds to a minute, under load) in TensorFlow's
    teardown for peers that are gone, and log their loss after its line."""
    global _in_cluster
    _in_cluster = True


def _exit(code: int) -> None:
    """sys.exit(code), keeping `code` if a stop signal comes during the exit handlers."""
    atexit.register(_keep_the_stated_status, code)  # the first exit handler to run
    sys.exit(code)


def _exit_now(code: int) -> None:
    """Ends the process with `code` after Python's exit handlers (run locks released, logs
    flushed) but without the interpreter's and TensorFlow's teardown; a stop signal
    meanwhile ends it at once with `code`."""
    _keep_the_stated_status(code)
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _keep_the_stated_status(code: int) -> None:
    """After the one line: a SIGTERM or SIGINT during the rest of the exit (exit handlers,
    TensorFlow's teardown) ends the process at once with the status the line stated, instead
    of killing it silently with 143 / 130."""
    if threading.current_thread() is not threading.main_thread():
        return

    def exit_with_the_stated_status(signum, frame):
        sys.stderr.flush()
        os._exit(code)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, exit_with_the_stated_status)


def one_line(error: BaseException) -> str:
    """The error's message on one line (KeyError's quotes removed)."""
    message = error.args[0] if isinstance(error, KeyError) and error.args else error
    return " ".join(str(message).split()) or type(error).__name__


@contextlib.contextmanager
def report_user_errors(debug: bool = False) -> Iterator[None]:
    """Turns a user error raised inside the block into `error: ...` on stderr and exit 1,
    and a `RunStopped` into its one line and exit status.

    Args:
      debug: print the traceback too (run.py's --debug).
    """
    try:
        yield
    except RunStopped as e:
        if debug:
            traceback.print_exc()
        print(f"{e.label}: {one_line(e)}", file=sys.stderr)
        if e.exit_now or _in_cluster:
            _exit_now(e.exit_code)
        _exit(e.exit_code)
    except KeyboardInterrupt as e:
        # Ctrl-C (or SIGTERM, `sigterm_interrupts`) where no tool stops on its own (loading,
        # building): every output is written under a temporary name, so nothing is
        # half-written.
        if debug:
            traceback.print_exc()
        name, code = interrupt_signal(e)
        print(f"stopped: {name} received: stopped before the work finished; run the same "
              "command again", file=sys.stderr)
        _exit(code)
    except user_error_types() as e:
        if debug:
            traceback.print_exc()
        print(f"error: {one_line(e)}", file=sys.stderr)
        if _in_cluster:
            _exit_now(1)
        _exit(1)
    except Exception as e:
        problem = storage_problem(e)
        if problem is None:
            raise
        if debug:
            traceback.print_exc()
        # Every file t2t_lite writes goes through a temporary name: the one cut short is
        # not in place, the others are whole.
        message = describe_storage_problem(
            problem, "that file was not written, the files written before it are whole; make "
                     "room (or choose a writable directory) and run the same command again")
        print(f"error: {one_line(UserError(message))}", file=sys.stderr)
        _exit(1)
