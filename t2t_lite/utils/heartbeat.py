"""No silent stretch: a line whenever a command has printed nothing for `SILENCE_SECS`.

Some work cannot count its progress (importing TensorFlow, tracing a model, writing a
SavedModel), and work that counts in steps goes quiet when the machine is busy (a progress line
every 50 steps is 5 s on a quiet CPU, a minute on a loaded one). While a command runs
(`started`), a daemon thread watches what it writes (stdout, stderr and log records); after
`SILENCE_SECS` without a line it logs one:

    I... heartbeat.py:...] Export step 2 of 2: tracing the signatures: still working (10 s since the last line)

naming the innermost `phase` the code is in (the mode, by default). Commands that wait for
someone (the server, interactive decoding) do not start it.
"""
from __future__ import annotations

import contextlib
import logging as std_logging
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from absl import logging

SILENCE_SECS = 10.0


class _Watch:
    """The running heartbeat: the time of the last output and the phases entered."""

    def __init__(self, default_phase: str, silence: float):
        self.last = time.monotonic()
        self.phases = [default_phase]
        self.silence = silence
        self.done = threading.Event()
        self.lock = threading.Lock()

    def output(self) -> None:
        self.last = time.monotonic()

    def run(self) -> None:
        while True:
            wait = max(0.05, self.last + self.silence - time.monotonic())
            if self.done.wait(wait):
                return
            silent = time.monotonic() - self.last
            if silent >= self.silence:
                with self.lock:
                    phase = self.phases[-1]
                logging.info("%s: still working (%.0f s since the last line)", phase, silent)
                self.output()


class _Stream:
    """A text stream that tells the watch when something is written to it."""

    def __init__(self, stream: Any, watch: _Watch):
        self._stream = stream
        self._watch = watch

    def write(self, text: str) -> int:
        if text:
            self._watch.output()
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _Records(std_logging.Handler):
    """A logging handler that only notes that a record was logged."""

    def __init__(self, watch: _Watch):
        super().__init__(level=std_logging.NOTSET)
        self._watch = watch

    def emit(self, record: std_logging.LogRecord) -> None:
        self._watch.output()


_watch: _Watch | None = None


@contextlib.contextmanager
def started(default_phase: str, silence: float = SILENCE_SECS) -> Iterator[None]:
    """Runs the heartbeat for the block (see the module docstring).

    Args:
      default_phase: what the lines name outside any `phase` (e.g. "--mode=export").
      silence: seconds without output before a line.
    """
    global _watch
    watch = _Watch(default_phase, silence)
    streams = sys.stdout, sys.stderr
    handler = _Records(watch)
    sys.stdout, sys.stderr = _Stream(sys.stdout, watch), _Stream(sys.stderr, watch)
    std_logging.getLogger().addHandler(handler)
    _watch = watch
    thread = threading.Thread(target=watch.run, name="heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        watch.done.set()
        thread.join()
        _watch = None
        std_logging.getLogger().removeHandler(handler)
        # Put back only our own wrappers (a caller may have replaced the streams meanwhile).
        if isinstance(sys.stdout, _Stream) and sys.stdout._watch is watch:
            sys.stdout = streams[0]
        if isinstance(sys.stderr, _Stream) and sys.stderr._watch is watch:
            sys.stderr = streams[1]


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Names the work of the block in the heartbeat's lines (nothing when it is not running).

    Args:
      name: e.g. "Export step 2 of 2: tracing the signatures".
    """
    watch = _watch
    if watch is None:
        yield
        return
    with watch.lock:
        watch.phases.append(name)
    try:
        yield
    finally:
        with watch.lock:
            watch.phases.remove(name)


def stop_for_waiting() -> None:
    """Stops the heartbeat's lines from here on (a server that waits for requests, a prompt
    that waits for input): silence is then expected."""
    if _watch is not None:
        _watch.done.set()
