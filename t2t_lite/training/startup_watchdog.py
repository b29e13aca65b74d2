"""Watches a worker that waits for its peers at startup, from a separate process.

While TensorFlow connects a MultiWorkerMirroredStrategy worker to its cluster it holds the
Python interpreter (no Python thread or signal handler runs), its own SIGTERM handler swallows
SIGTERM, and the coordination service's leader waits for missing workers forever. This small
process (no TensorFlow) logs every `interval` seconds which peers do not accept connections
yet; after `timeout` seconds, or when it receives SIGTERM or SIGINT itself (a scheduler or a
terminal signals the whole process group), it prints one line and kills the worker (exit
status 137). `distribution.create_strategy` starts it and ends it once the cluster has formed.

    python -m t2t_lite.training.startup_watchdog '{"pid": ..., "me": "worker 0",
        "peers": {"worker 1": "host:port"}, "timeout": 300, "interval": 30}'
"""
from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time


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


def watch(pid: int, me: str, peers: dict[str, str], timeout: float, interval: float) -> None:
    """Logs whom worker `pid` waits for every `interval` s; kills it after `timeout` s or on
    SIGTERM / SIGINT."""
    start = time.time()

    def stop(signum, frame):
        del frame
        print(f"stopped: {signal.Signals(signum).name} while {me} waited for the other workers "
              "to start; nothing was trained or saved", file=sys.stderr, flush=True)
        os.kill(pid, signal.SIGKILL)
        sys.exit(0)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)
    while True:
        time.sleep(min(interval, max(0.0, start + timeout - time.time())))
        waited = time.time() - start
        missing = ", ".join(unreachable(peers)) or "the other workers to join the cluster"
        if waited >= timeout:
            print(f"error: {me} gave up after {timeout:.0f} s waiting for {missing}: start every "
                  "worker of TF_CONFIG (the same command on each), or raise "
                  "--worker_startup_timeout_secs", file=sys.stderr, flush=True)
            os.kill(pid, signal.SIGKILL)
            return
        print(f"{me} waits for {missing} ({waited:.0f} s of {timeout:.0f} s)", file=sys.stderr,
              flush=True)


if __name__ == "__main__":
    args = json.loads(sys.argv[1])
    watch(args["pid"], args["me"], args["peers"], args["timeout"], args["interval"])
