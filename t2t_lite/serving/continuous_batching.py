"""Continuous (iteration-level) batching for the translation server: each decode worker runs
one search whose sentences join and leave between decode steps (`engine.slot_search`,
`search/continuous.py`), so a sentence waits neither for a batch to fill nor for
the slowest sentence of its batch.

A worker with a running search takes, between two calls of a few steps, the waiting
sentences with the search's options into its free places (up to `max_batch_size` live
sentences; with several workers, each takes its share of what is live and waiting). When
the oldest waiting sentence has other options (beam size, alpha, n-best), the worker takes
no more sentences until its search has drained, then starts one with those options.
Each sentence's translation is that of the sentence decoded alone (the search's contract).

The queue, its limits, `submit`, `close` and the metrics callbacks are `batching.Batcher`'s;
`on_batch` is called with the live sentences of each call, `on_decode` with its seconds
(the admissions before it included) and live sentences (a sentence's share is the time of
the calls it was live in), `on_wait` with each sentence's time in the queue. Nothing here imports TensorFlow.
"""
from __future__ import annotations

import time
from typing import Any

from t2t_lite.serving.batching import Batcher, Job
from t2t_lite.serving.config import ServerConfig


class ContinuousBatcher(Batcher):
    """The queue and its decode workers, each running a continuous search.

    Args:
      engine: with `slot_search(options, max_input_length, steps_per_call)`.
      max_input_length: the longest input (ids, EOS included) a sentence may have.
      steps_per_call: decode steps between two chances to admit sentences.
      on_steps: called with the decode steps of each call (metrics).
      **kwargs: `Batcher`'s (max_batch_size: live sentences per worker at most;
        max_batch_tokens and batch_timeout_secs are not used).
    """

    def __init__(self, engine: Any, max_input_length: int,
                 steps_per_call: int = ServerConfig.steps_per_call,
                 on_steps: Any = None, **kwargs):
        super().__init__(engine, **kwargs)
        self._on_steps = on_steps or (lambda steps: None)
        self.max_input_length = int(max_input_length)
        self.steps_per_call = int(steps_per_call)
        self._live = 0  # sentences in the workers' searches

    def _share(self, own: int) -> int:
        """How many waiting sentences a worker with `own` live ones takes now: its share
        of all live and waiting ones, at least 1 (called under the lock)."""
        total = self._live + len(self._pending)
        share = -(-total // self.workers) - own
        return max(1, min(share, self.max_batch_size - own))

    def _take(self, search: Any, options: Any) -> list[Job]:
        """Removes and returns the waiting jobs this worker admits now (under the lock)."""
        own = len(search) if search is not None else 0
        if not self._pending or own >= self.max_batch_size:
            return []
        if self._pending[0].options != options:
            return []  # drain first: the oldest waiting sentence has other options
        count = self._share(own)
        taken = [job for job in self._pending if job.options == options][:count]
        ids = {id(job) for job in taken}
        self._pending = [job for job in self._pending if id(job) not in ids]
        return taken

    def _work(self) -> None:
        search, options = None, None
        searches: dict[Any, Any] = {}  # by options: their state is kept between sentences
        tokens: dict[int, Job] = {}
        while True:
            with self._cond:
                while not (search is not None and len(search)) and not self._pending:
                    if self._closing:
                        return
                    self._cond.wait()
                if search is None or not len(search):
                    options = self._pending[0].options
                    search = searches.get(options)
                jobs = self._take(search, options)
                self._in_flight += len(jobs)
                self._live += len(jobs)
                self._cond.notify_all()
            jobs = self._admissible(jobs)
            started = time.monotonic()  # admitting (encoding) is the workers' time too
            if jobs:
                if search is None:
                    search = searches[options] = self._open(jobs, options)
                if search is not None:
                    self._admit(search, jobs, tokens)
            if search is not None and len(search) and not self._run(search, tokens, started):
                del searches[options]  # its state is unknown after an error
                search = None

    def _admissible(self, jobs: list[Job]) -> list[Job]:
        """The jobs whose requests still wait (the others are dropped and counted out)."""
        kept = [job for job in jobs if job.future.set_running_or_notify_cancel()]
        self._done(len(jobs) - len(kept))
        started = time.monotonic()
        for job in kept:
            self._on_wait(started - job.enqueued)
        return kept

    def _open(self, jobs: list[Job], options: Any) -> Any:
        try:
            return self.engine.slot_search(options, self.max_input_length,
                                           self.steps_per_call)
        except Exception as error:  # noqa: BLE001 - answered to each request
            self._fail(jobs, error)
            return None

    def _admit(self, search: Any, jobs: list[Job], tokens: dict[int, Job]) -> None:
        """Adds the jobs to the search (a job it refuses is answered with the error)."""
        try:
            search.admit([job.ids for job in jobs], [id(job) for job in jobs])
        except Exception as error:  # noqa: BLE001
            # A sentence the search cannot take fails alone, once the others are in.
            if len(jobs) > 1:
                for job in jobs:
                    self._admit(search, [job], tokens)
                return
            self._fail(jobs, error)
            return
        tokens.update((id(job), job) for job in jobs)

    def _run(self, search: Any, tokens: dict[int, Job], started: float) -> bool:
        """Runs a few steps and answers the sentences that ended; False when the search
        failed (its sentences are answered with the error; the worker starts a new one).
        The call is timed from `started` (before its admissions)."""
        live = len(search)
        try:
            finished = search.run()
        except Exception as error:  # noqa: BLE001 - the search's sentences fail, not the server
            failed = list(tokens.values())
            tokens.clear()
            self._fail(failed, error)
            return False
        self._on_decode(time.monotonic() - started, live)
        self._on_batch(live)
        self._on_steps(getattr(search, "last_steps", 0))
        # Counted out before they are answered: a client that reads /metrics right after its
        # answer sees its sentence gone from the queue depth.
        answered = [(tokens.pop(token), row) for token, row in finished]
        self._done(len(answered))
        for job, row in answered:
            self._finish(job, row)
        return True

    def _fail(self, jobs: list[Job], error: Exception) -> None:
        self._done(len(jobs))
        for job in jobs:
            job.future.set_exception(error)

    def _done(self, count: int) -> None:
        if count:
            with self._cond:
                self._in_flight -= count
                self._live -= count
                self._cond.notify_all()
