"""A worker's wait for its peers at startup: first in Python, then watched from a separate
process while TensorFlow connects.

`wait_for_peers` runs in the worker before TensorFlow connects: it answers on the worker's own
TF_CONFIG port and waits until every peer's port accepts connections, logging whom it waits
for at once and every `interval` seconds. Python handles SIGTERM / SIGINT there, so that a
signal to the worker's pid alone ends it with one `stopped:` line (exit 143 / 130).

Once every peer is up, TensorFlow connects (seconds). Meanwhile it holds the Python
interpreter (no Python thread or signal handler runs) and has installed its own SIGTERM
handler (its preemption notifier), which swallows the signal; should a peer vanish then, the
coordination service's leader waits forever. `watch`, a small process (no TensorFlow), logs
every `interval` seconds which peers do not accept connections; after `timeout` seconds, or
when it receives SIGTERM or SIGINT itself (a scheduler or a terminal signals the whole process
group), it prints one line and kills the worker (exit status 137). It dies with its worker
(Linux's parent-death signal, and it checks its parent at every poll) and signals only the
process it verified is still that worker (its parent, with the start time recorded at launch),
never a later process that reuses the pid. `launch` starts it; `distribution.create_strategy`
ends it once the cluster has formed.

    python -m t2t_lite.training.startup_watchdog '{"pid": ..., "start_time": ...,
        "me": "worker 0", "peers": {"worker 1": "host:port"}, "timeout": 300, "interval": 30}'
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

from t2t_lite.errors import RunStopped, UserError

# Exit status of a worker that gave up waiting for its peers: 128 + SIGKILL, as when `watch`
# kills it, so that both phases of the wait end alike.
GAVE_UP_EXIT_CODE = 137
# How often `wait_for_peers` probes the peers' ports, and `watch` checks that its worker lives.
POLL_SECONDS = 0.5
# prctl(2)'s option that sends the caller a signal when its parent dies (Linux).
PR_SET_PDEATHSIG = 1


def unreachable(peers: dict[str, str]) -> list[str]:
    """The peers ("name" -> "host:port") whose port accepts no connection, as "name (address)"."""
    missing = []
    for name, address in peers.items():
        host, _, port = address.rpartition(":")
        try:
            socket.create_connection((host, int(port)), timeout=2).close()
        except OSError:
            missing.append(f"{name} ({address})")
    return missing


def gave_up_message(me: str, timeout: float, missing: str) -> str:
    """The one line (without its `error: ` label) of a worker that gave up waiting."""
    return (f"{me} gave up after {timeout:.0f} s waiting for {missing}: start every worker of "
            "TF_CONFIG (the same command on each), or raise --worker_startup_timeout_secs")


def stopped_message(signum: int, me: str) -> str:
    """The one line (without its `stopped: ` label) of a worker stopped while it waited."""
    return (f"{signal.Signals(signum).name} while {me} waited for the other workers to start; "
            "nothing was trained or saved")


def waiting_message(me: str, missing: list[str], waited: float, timeout: float) -> str:
    """The line logged every `interval` seconds while peers are missing."""
    names = ", ".join(missing) or "the other workers to join the cluster"
    return f"{me} waits for {names} ({waited:.0f} s of {timeout:.0f} s)"


def wait_for_peers(me: str, address: str, peers: dict[str, str], timeout: float,
                   interval: float) -> float:
    """Waits in Python until every peer's port accepts connections (TensorFlow's own wait
    would hold the interpreter, so that no signal handler runs).

    Args:
      me: this worker's name in log lines ("worker 0").
      address: this worker's "host:port" of TF_CONFIG: answered meanwhile, so that the peers
        see this worker started (TensorFlow's server takes the port over afterwards).
      peers: the other workers, "name" -> "host:port".
      timeout: seconds before giving up.
      interval: seconds between two lines saying whom this worker waits for.

    Returns:
      The seconds waited.

    Raises:
      RunStopped: SIGTERM / SIGINT to this process (label "stopped", exit 143 / 130), or
        `timeout` passed (label "error", exit GAVE_UP_EXIT_CODE).
      UserError: another process holds this worker's port.
    """
    start = time.time()
    next_log = start
    with _answering(me, address) as listener, _signals_stop_the_wait(me):
        while True:
            _drop_connections(listener)
            missing = unreachable(peers)
            waited = time.time() - start
            if not missing:
                return waited
            if waited >= timeout:
                raise RunStopped(gave_up_message(me, timeout, ", ".join(missing)),
                                 GAVE_UP_EXIT_CODE)
            if time.time() >= next_log:
                print(waiting_message(me, missing, waited, timeout), file=sys.stderr, flush=True)
                next_log += interval
            time.sleep(POLL_SECONDS)


@contextlib.contextmanager
def _answering(me: str, address: str) -> Iterator[socket.socket]:
    """A listening socket on the port of `address`, on all interfaces, IPv4 and IPv6 where
    the host has both (as TensorFlow's server), closed on exit so that TensorFlow can bind the
    port (create_server sets SO_REUSEADDR: the connections closed here do not block it)."""
    port = int(address.rpartition(":")[2])
    dual = socket.has_dualstack_ipv6()
    try:
        listener = socket.create_server(
            ("", port), family=socket.AF_INET6 if dual else socket.AF_INET, backlog=64,
            dualstack_ipv6=dual)
    except OSError as e:
        # create_server's strerror repeats the address; the errno's text alone is clearer.
        reason = os.strerror(e.errno) if e.errno else str(e)
        raise UserError(f"{me}'s address {address} of TF_CONFIG cannot be used: {reason} "
                        f"(is another process using port {port}?)") from None
    listener.setblocking(False)
    try:
        yield listener
    finally:
        listener.close()


def _drop_connections(listener: socket.socket) -> None:
    """Accepts and closes the peers' probes (they only check that the port answers)."""
    while True:
        try:
            connection, _ = listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        connection.close()


@contextlib.contextmanager
def _signals_stop_the_wait(me: str) -> Iterator[None]:
    """SIGTERM / SIGINT raise RunStopped in the block (main thread only: elsewhere Python
    cannot install handlers); the previous handlers are restored afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        del frame
        raise RunStopped(stopped_message(signum, me), 128 + signum, "stopped")

    previous = {signum: signal.signal(signum, stop)
                for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def process_start_time(pid: int) -> int | None:
    """The start time of process `pid` (clock ticks since boot, field 22 of /proc/<pid>/stat):
    with the pid, it names one process, even after the pid is reused. None where there is no
    /proc (the pid alone is then trusted) or no such process.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count after its last ")".
    return int(stat[stat.rindex(b")") + 2:].split()[19])


def is_worker(pid: int, start_time: int | None) -> bool:
    """Whether `pid` is still the worker this watchdog was launched by: its parent (a child
    is re-parented when its parent dies, so the parent's pid cannot have been reused) with the
    start time recorded at launch."""
    return os.getppid() == pid and process_start_time(pid) == start_time


def launch(me: str, peers: dict[str, str], timeout: float, interval: float) -> subprocess.Popen:
    """Starts `watch` for this process in a child process (no TensorFlow).

    Args:
      me: this worker's name in log lines ("worker 0").
      peers: the other workers, "name" -> "host:port".
      timeout: seconds after which the watchdog kills this process.
      interval: seconds between two lines saying whom this worker waits for.

    Returns:
      The watchdog's process: kill it once the cluster has formed.
    """
    args = {"pid": os.getpid(), "start_time": process_start_time(os.getpid()), "me": me,
            "peers": peers, "timeout": timeout, "interval": interval}
    return subprocess.Popen([sys.executable, "-m", "t2t_lite.training.startup_watchdog",
                             json.dumps(args)])


def _die_with_parent() -> None:
    """Asks Linux to SIGKILL this process when its parent dies (elsewhere `watch`'s polls of
    its parent end it)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _kill(pid: int, start_time: int | None) -> bool:
    """SIGKILLs `pid` if it is still this watchdog's worker; returns whether it did."""
    if not is_worker(pid, start_time):
        return False
    os.kill(pid, signal.SIGKILL)
    return True


def watch(pid: int, me: str, peers: dict[str, str], timeout: float, interval: float,
          start_time: int | None = None) -> None:
    """Logs whom worker `pid` waits for every `interval` s; kills it after `timeout` s or on
    SIGTERM / SIGINT. Returns at once, silently, when `pid` (launched at `start_time`) is not,
    or no longer, this process's parent: the worker is gone, and its pid may be another
    process's."""
    start = time.time()
    if not is_worker(pid, start_time):  # e.g. the worker died before _die_with_parent
        return

    def stop(signum, frame):
        del frame
        if is_worker(pid, start_time):
            # The line first: the worker's death sends this process its parent-death signal.
            print(f"stopped: {stopped_message(signum, me)}", file=sys.stderr, flush=True)
            _kill(pid, start_time)
        sys.exit(0)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)
    next_log = start + interval
    while True:
        time.sleep(max(0.0, min(POLL_SECONDS, next_log - time.time(),
                                start + timeout - time.time())))
        if not is_worker(pid, start_time):
            return
        now = time.time()
        if now - start >= timeout:
            missing = unreachable(peers)
            names = ", ".join(missing) or "the other workers to join the cluster"
            if is_worker(pid, start_time):
                print(f"error: {gave_up_message(me, timeout, names)}", file=sys.stderr,
                      flush=True)
                _kill(pid, start_time)
            return
        if now >= next_log:
            missing = unreachable(peers)
            if not is_worker(pid, start_time):
                return
            print(waiting_message(me, missing, now - start, timeout), file=sys.stderr,
                  flush=True)
            next_log += interval


if __name__ == "__main__":
    args = json.loads(sys.argv[1])
    _die_with_parent()
    watch(args["pid"], args["me"], args["peers"], args["timeout"], args["interval"],
          args.get("start_time"))
