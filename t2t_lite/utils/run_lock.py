"""One run per output_dir: a lock file naming the run that holds the directory.

A training run (the chief, in a multi-worker run) creates `output_dir/run.lock` holding its
host, pid and start time before it writes anything else there, and removes it at exit. A
second run into the same directory refuses with one line naming the holder. A lock whose pid
no longer runs on this host (the run was killed; a zombie, exited but not yet reaped, counts
as gone) is stale: it is taken over with a warning,
under a flock of the directory, so that of several processes taking it over at once exactly
one wins and the others refuse naming it.
A lock held by another host is never taken over (its process cannot be checked from here).
Datagen holds its data_dir the same way, with `datagen.lock`. On a path with a scheme
(`gs://`, any non-local filesystem) there is neither flock nor an atomic create, so two
processes could both take one stale lock over: there a lock naming no live run is never
taken over, the refusal names the file to remove by hand.

A training run also holds a shared `flock` on `data_dir/readers.lock` while it trains
(`hold_data_dir`), and `datagen --overwrite_data` needs it exclusively (`refuse_if_read`), so
that data is never replaced under a live run. The kernel releases a flock when its process
dies, so a killed run leaves nothing stale; a local data_dir where the file cannot be created
(read-only) is not guarded. On a path with a scheme each reader writes a note instead,
`readers.lock.<host>.<pid>`, removed at its exit; `--overwrite_data` refuses while any note
names a run that may live (this host's notes of dead pids are removed).
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

from absl import logging

from t2t_lite.errors import UserError

LOCK_NAME = "run.lock"
DATAGEN_LOCK_NAME = "datagen.lock"
READERS_LOCK_NAME = "readers.lock"


def _tf():
    """TensorFlow, imported on first use: `refuse_if_held` on a local directory needs none, so
    run.py checks the lock before it imports TensorFlow (a second run refuses in seconds)."""
    import tensorflow as tf

    return tf


def _exists(path: str) -> bool:
    return os.path.exists(path) if "://" not in path else _tf().io.gfile.exists(path)


def _remove(path: str) -> None:
    """Removes `path` if it exists (TensorFlow only for a path with a scheme: a local lock is
    taken and released without importing it)."""
    if "://" not in path:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
        return
    tf = _tf()
    with contextlib.suppress(tf.errors.NotFoundError):
        tf.io.gfile.remove(path)


def _makedirs(directory: str) -> None:
    if "://" not in directory:
        os.makedirs(directory, exist_ok=True)
    else:
        _tf().io.gfile.makedirs(directory)


def _zombie(pid: int) -> bool:
    """Whether process `pid` has exited but not been reaped yet: state Z (or X) in
    /proc/<pid>/stat. False where there is no /proc (not Linux) or no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    # "pid (comm) state ...": comm may hold spaces and parentheses, the state follows the last ')'.
    fields = stat.rpartition(b")")[2].split()
    return bool(fields) and fields[0] in (b"Z", b"X")


def pid_alive(pid: int) -> bool:
    """Whether process `pid` runs on this host (another user's counts as running).

    A zombie (killed, not yet reaped by its parent) is dead: a killed trainer stays one for
    a second or more, and forever under a PID 1 that does not reap, yet it still answers
    `kill(pid, 0)`.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: live unless a zombie
    return not _zombie(pid)


def _describe(holder: dict) -> str:
    started = holder.get("start_time")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if started else "?"
    return f"pid {holder.get('pid')} on host {holder.get('host')}, started {when}"


def _read(path: str) -> dict:
    if "://" not in path:
        try:
            with open(path, encoding="utf-8") as f:
                holder = json.loads(f.read() or "{}")
        except (json.JSONDecodeError, UnicodeDecodeError, FileNotFoundError):
            return {}
    else:
        tf = _tf()
        try:
            with tf.io.gfile.GFile(path) as f:
                holder = json.loads(f.read() or "{}")
        except (json.JSONDecodeError, UnicodeDecodeError, tf.errors.NotFoundError):
            return {}
    # A lock holding `null`, a list or a number names no run: read as empty (taken over).
    return holder if isinstance(holder, dict) else {}


def _create_exclusive(path: str, content: str) -> bool:
    """Creates `path` with `content` unless it exists; False if it does."""
    if "://" in path:
        # Object stores have no exclusive create: check, then write (a narrow race).
        tf = _tf()
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
    """Holds an exclusive flock on local `directory` itself (no file is added), so that of
    the processes taking over one stale lock exactly one reads, removes and re-creates it:
    the others then read the winner's live lock. The kernel releases the flock of a killed
    process, so the guard itself is never stale. Filesystems without flock run unguarded
    (a narrow race); paths with a scheme never take a lock over (`RunLock.acquire`)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass  # no flock on this filesystem
        yield
    finally:
        os.close(fd)  # releases the flock


def _this_process() -> dict:
    """What a lock says of its holder: host, pid and start time."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "start_time": time.time()}


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
        self.holder = _this_process()
        self.held = False

    def acquire(self) -> RunLock:
        """Takes the lock (a stale one with a warning).

        Raises:
          UserError: another live run holds it, naming its pid, host and start time.
        """
        _makedirs(os.path.dirname(self.path))
        content = json.dumps(self.holder)
        for _ in range(3):
            if _create_exclusive(self.path, content):
                self.held = True
                atexit.register(self.release)
                return self
            guard = (contextlib.nullcontext() if "://" in self.path
                     else _takeover_guard(os.path.dirname(self.path)))
            with guard:
                # Read under the guard: a racer that took the stale lock over before us has
                # replaced it with its own live one, which is refused here, never removed.
                holder = _read(self.path)
                if not holder and _exists(self.path):
                    time.sleep(1)  # another run may be between creating and writing it
                    holder = _read(self.path)
                stale = self._refuse_live(holder)
                if "://" in self.path and (stale or not holder):
                    self._refuse_takeover(holder)
                if stale:
                    logging.warning("Taking over the stale lock %s of a %s that no longer "
                                    "runs (%s)", self.path, self.holder_kind,
                                    _describe(holder))
                elif not holder:
                    logging.warning("Taking over the lock %s: it names no %s (empty or not a "
                                    "JSON object)", self.path, self.holder_kind)
                _remove(self.path)
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

    def _refuse_takeover(self, holder: dict) -> None:
        """Raises the one line refusing to take over a lock that names no live run on a
        path with a scheme (no flock and no atomic create there: two runs could both take
        it)."""
        named = (f"names a {self.holder_kind} that no longer runs ({_describe(holder)})"
                 if holder else f"names no {self.holder_kind} (empty or not a JSON object)")
        raise UserError(
            f"the lock {self.path} {named}, and a lock on a path with a scheme is never taken "
            "over (no atomic create there: two runs could both take it); remove the lock "
            f"file if that {self.holder_kind} is gone, then run the same command again")

    def refuse_if_held(self) -> None:
        """Raises UserError at once if a live run holds the lock (writes nothing); called
        before the model is built so that a second run refuses within seconds."""
        if _exists(self.path):
            self._refuse_live(_read(self.path))

    def release(self) -> None:
        """Removes the lock file if this process still holds it."""
        if not self.held:
            return
        self.held = False
        holder = _read(self.path)
        if holder.get("pid") == self.holder["pid"] and holder.get("host") == self.holder["host"]:
            _remove(self.path)


def refuse_if_held(output_dir: str) -> None:
    """Raises UserError if a live run holds `output_dir`'s lock (see `RunLock`)."""
    RunLock(output_dir).refuse_if_held()


def acquire(output_dir: str) -> RunLock:
    """Takes the lock of `output_dir` for this process (released at exit); see `RunLock`."""
    return RunLock(output_dir).acquire()


def _lock_readers_file(data_dir: str, exclusive: bool) -> int | None:
    """Locks `data_dir/readers.lock` (flock, not waiting): shared for a reader, which creates
    the file, exclusive for a writer, which does not (no file: no run ever read data_dir).

    Returns:
      The descriptor holding the lock, or None where there is no file to lock (see above,
      or data_dir is read-only or remote).

    Raises:
      BlockingIOError: the other kind of holder has it.
    """
    if not data_dir:  # "": no data_dir (not the current directory)
        return None
    if "://" in data_dir:
        if exclusive:
            _refuse_noted_readers(data_dir)
        else:
            _note_reader(data_dir)
        return None
    try:
        fd = os.open(os.path.join(data_dir, READERS_LOCK_NAME),
                     os.O_RDWR | (0 if exclusive else os.O_CREAT), 0o666)
    except OSError:
        return None
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise BlockingIOError(errno.EWOULDBLOCK, "held") from None
    return fd


def _note_reader(data_dir: str) -> None:
    """A reader's note on a data_dir with a scheme (no flock there): `readers.lock.<host>.
    <pid>` naming this process, removed at its exit."""
    holder = _this_process()
    path = os.path.join(data_dir, f"{READERS_LOCK_NAME}.{holder['host']}.{holder['pid']}")
    tf = _tf()
    try:
        with tf.io.gfile.GFile(path, "w") as f:
            f.write(json.dumps(holder))
    except tf.errors.OpError as e:  # a read-only bucket: not guarded, as a local one
        logging.debug("No reader's note in %s: %s", data_dir, e)
        return

    atexit.register(_remove, path)


def _refuse_noted_readers(data_dir: str) -> None:
    """Raises UserError while a reader's note (`_note_reader`) in data_dir names a run that
    may live: another host's (not checkable from here) or a live pid of this host; this
    host's notes of dead pids are removed."""
    tf = _tf()
    host = socket.gethostname()
    for path in sorted(tf.io.gfile.glob(os.path.join(data_dir, f"{READERS_LOCK_NAME}.*"))):
        holder = _read(path)
        if (holder.get("host") == host and isinstance(holder.get("pid"), int)
                and not pid_alive(holder["pid"])):
            _remove(path)  # a killed run's
            continue
        raise UserError(
            f"--overwrite_data: a training run may read --data_dir={data_dir} "
            f"({_describe(holder)}; its note {path}); replacing its data would change what "
            "the run trains on: stop the run first, or generate into another --data_dir "
            "(remove the note only if that run is gone)")


def hold_data_dir(data_dir: str) -> int | None:
    """Takes a shared lock on data_dir for this process (a training run reading it), until
    the process exits.

    Returns:
      The lock's descriptor (keep it open), or None where data_dir cannot hold the lock, a
      datagen holds it exclusively at this moment (its data is being made: not ours to wait
      for), or data_dir has a scheme (a reader's note is written there instead).
    """
    try:
        return _lock_readers_file(data_dir, exclusive=False)
    except BlockingIOError:
        return None


def refuse_if_read(data_dir: str) -> int | None:
    """Takes data_dir's readers lock exclusively for a datagen that replaces the data
    (`--overwrite_data`), or refuses while a live training run reads it.

    Returns:
      The descriptor to keep open while the data is replaced (None: no training run has
      read data_dir, it cannot hold the lock, or it has a scheme: readers' notes checked).

    Raises:
      UserError: one line naming data_dir (and the reader's note, with a scheme).
    """
    try:
        return _lock_readers_file(data_dir, exclusive=True)
    except BlockingIOError:
        raise UserError(
            f"--overwrite_data: a live training run reads --data_dir={data_dir} (it holds "
            f"{os.path.join(data_dir, READERS_LOCK_NAME)}); replacing its data would change "
            "what the run trains on: stop the run first, or generate into another --data_dir"
        ) from None
