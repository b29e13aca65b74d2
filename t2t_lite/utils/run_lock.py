"""One run per output_dir: a lock file naming the run that holds the directory.

A training run (the chief, in a multi-worker run) creates `output_dir/run.lock` holding its
host, pid and start time before it writes anything else there, and removes it at exit. A
second run into the same directory refuses with one line naming the holder. A lock whose pid
no longer runs on this host (the run was killed) is stale: it is taken over with a warning,
under a flock of the directory, so that of several processes taking it over at once exactly
one wins and the others refuse naming it.
A lock held by another host is never taken over (its process cannot be checked from here).
Datagen holds its data_dir the same way, with `datagen.lock`.
"""
from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator

import tensorflow as tf
from absl import logging

from t2t_lite.errors import UserError

LOCK_NAME = "run.lock"
DATAGEN_LOCK_NAME = "datagen.lock"


def pid_alive(pid: int) -> bool:
    """Whether process `pid` runs on this host (another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True


def _describe(holder: dict) -> str:
    started = holder.get("start_time")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if started else "?"
    return f"pid {holder.get('pid')} on host {holder.get('host')}, started {when}"


def _read(path: str) -> dict:
    try:
        with tf.io.gfile.GFile(path) as f:
            return json.loads(f.read() or "{}")
    except (json.JSONDecodeError, tf.errors.NotFoundError):
        return {}


def _create_exclusive(path: str, content: str) -> bool:
    """Creates `path` with `content` unless it exists; False if it does."""
    if "://" in path:
        # Object stores have no exclusive create: check, then write (a narrow race).
        if tf.io.gfile.exists(path):
            return False
        with tf.io.gfile.GFile(path, "w") as f:
            f.write(content)
        return True
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except OSError as e:
        if e.errno == errno.EEXIST:
            return False
        raise
    with os.fdopen(fd, "w") as f:
        f.write(content)
    return True


@contextlib.contextmanager
def _takeover_guard(directory: str) -> Iterator[None]:
    """Holds an exclusive flock on `directory` itself (no file is added), so that of the
    processes taking over one stale lock exactly one reads, removes and re-creates it: the
    others then read the winner's live lock. The kernel releases the flock of a killed
    process, so the guard itself is never stale. Paths with a scheme (gs://) and
    filesystems without flock run unguarded (a narrow race)."""
    if "://" in directory:
        yield
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass  # no flock on this filesystem
        yield
    finally:
        os.close(fd)  # releases the flock


class RunLock:
    """The lock of one output_dir, held by this process until `release` (or exit).

    Args:
      output_dir: the run's directory (created if missing).
      lock_name: the lock file's name in it (datagen's: `DATAGEN_LOCK_NAME`).
      holder_kind: what holds such a lock, for the message ("run", "datagen").
      flag: the flag that names the directory, for the message.
    """

    def __init__(self, output_dir: str, lock_name: str = LOCK_NAME, holder_kind: str = "run",
                 flag: str = "--output_dir"):
        self.path = os.path.join(output_dir, lock_name)
        self.holder_kind = holder_kind
        self.flag = flag
        self.holder = {"host": socket.gethostname(), "pid": os.getpid(),
                       "start_time": time.time()}
        self.held = False

    def acquire(self) -> RunLock:
        """Takes the lock (a stale one with a warning).

        Raises:
          UserError: another live run holds it, naming its pid, host and start time.
        """
        tf.io.gfile.makedirs(os.path.dirname(self.path))
        content = json.dumps(self.holder)
        for _ in range(3):
            if _create_exclusive(self.path, content):
                self.held = True
                atexit.register(self.release)
                return self
            with _takeover_guard(os.path.dirname(self.path)):
                # Read under the guard: a racer that took the stale lock over before us has
                # replaced it with its own live one, which is refused here, never removed.
                holder = _read(self.path)
                if not holder and tf.io.gfile.exists(self.path):
                    time.sleep(1)  # another run may be between creating and writing it
                    holder = _read(self.path)
                stale = self._refuse_live(holder)
                if stale:
                    logging.warning("Taking over the stale lock %s of a %s that no longer "
                                    "runs (%s)", self.path, self.holder_kind,
                                    _describe(holder))
                try:
                    tf.io.gfile.remove(self.path)
                except tf.errors.NotFoundError:
                    pass
                if _create_exclusive(self.path, content):
                    self.held = True
                    atexit.register(self.release)
                    return self
        raise UserError(f"could not take the lock {self.path}: other runs keep creating it")

    def _refuse_live(self, holder: dict) -> bool:
        """Raises UserError if `holder` is another live run; returns whether it is stale
        (a dead pid on this host)."""
        ours = (holder.get("host") == self.holder["host"]
                and holder.get("pid") == self.holder["pid"])
        stale = (holder.get("host") == self.holder["host"]
                 and isinstance(holder.get("pid"), int) and not pid_alive(holder["pid"]))
        if holder and not (ours or stale):
            raise UserError(
                f"{os.path.dirname(self.path)} is in use by another {self.holder_kind} "
                f"({_describe(holder)}; lock file {self.path}); wait for it, stop it, or choose "
                f"another {self.flag} (remove the lock file only if that {self.holder_kind} is "
                "gone)")
        return stale

    def refuse_if_held(self) -> None:
        """Raises UserError at once if a live run holds the lock (writes nothing); called
        before the model is built so that a second run refuses within seconds."""
        if tf.io.gfile.exists(self.path):
            self._refuse_live(_read(self.path))

    def release(self) -> None:
        """Removes the lock file if this process still holds it."""
        if not self.held:
            return
        self.held = False
        holder = _read(self.path)
        if holder.get("pid") == self.holder["pid"] and holder.get("host") == self.holder["host"]:
            try:
                tf.io.gfile.remove(self.path)
            except tf.errors.NotFoundError:
                pass


def refuse_if_held(output_dir: str) -> None:
    """Raises UserError if a live run holds `output_dir`'s lock (see `RunLock`)."""
    RunLock(output_dir).refuse_if_held()


def acquire(output_dir: str) -> RunLock:
    """Takes the lock of `output_dir` for this process (released at exit); see `RunLock`."""
    return RunLock(output_dir).acquire()
