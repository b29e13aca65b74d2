"""Dynamic batching for the translation server: worker threads share the engine (the model)
and decode the sentences of concurrent requests together, one batch per worker at a time
(`workers`: on a CPU, one per core keeps every core busy, as `--mode=decode`'s parallel
batches do; the engines are thread-safe).

Each sentence of a request is a `Job` (its input ids, its decode options, a Future). The
worker takes the oldest waiting job, waits at most `batch_timeout_secs` after it arrived (or
after the previous decode ended, if later) for more jobs with the same options, then decodes
up to `max_batch_size` of them whose lengths are closest to the oldest's (t2t-decoder sorts by
length for the same reason: little padding), as long as rows x padded length stays within
`max_batch_tokens`.

A sentence's translation must not depend on its neighbours. t2t's decode length is per
batch (padded input length + extra_length), so a row shorter than the batch's longest may
decode further than it would alone; an engine that cannot give each row its own limit (the
t2t_lite engine does) flags such rows (`Row.depends_on_batch`) and the worker decodes them
again among rows of their own length, where the limit is their own.
What remains is float rounding over padded positions (measured in docs/serving.md).

Nothing here imports TensorFlow: the engine is any object with `decode(id_lists, options)`.
"""
from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, Protocol


@dataclasses.dataclass(frozen=True)
class Options:
    """Decode options shared by the sentences of one batch.

    Attributes:
      beam_size: 1 = greedy.
      alpha: t2t's length-penalty exponent.
      n_best: hypotheses returned per sentence (> 1 decodes as t2t's return_beams).
    """
    beam_size: int
    alpha: float
    n_best: int


@dataclasses.dataclass
class Hypothesis:
    """One translation of a sentence: text, t2t's score and the target ids (no EOS)."""
    text: str
    score: float
    ids: list[int]


@dataclasses.dataclass
class Row:
    """A decoded sentence: its hypotheses (best first) and whether the result may differ
    from decoding it alone (see the module docstring)."""
    hypotheses: list[Hypothesis]
    depends_on_batch: bool = False


class Unsupported(ValueError):
    """A request option the loaded engine does not offer (the message says which); 422."""


class Engine(Protocol):
    """Every member the server and its batchers use of an engine (`t2t_lite.serving.engines`;
    the server reaches for nothing else). An engine may subclass this class to take the
    defaults of the members that have one.

    Attributes:
      description: what GET /v1/models shows of the loaded model (its "engine" key names
        the engine); `describe` adds what may change while the server runs.
      has_attention: whether `attention` works (return_attention).
      default_workers: decode workers when --serve_decode_workers is 0.
      default_batch_timeout_ms: the batch timeout when --batch_timeout_ms is not given.
      max_compiled_decoders: how many compiled decoders the engine keeps at most (0: it
        compiles none per request option).
      intra_op_threads: the threads of one decode's ops (TensorFlow's intra-op threads,
        `threads.configure`); None where the server does not set them (CTranslate2 has its
        own --ct2_intra_threads).
    """

    description: dict
    has_attention: bool = False
    default_workers: int = 1
    default_batch_timeout_ms: float = 5.0
    max_compiled_decoders: int = 0
    intra_op_threads: int | None = None

    def encode(self, text: str) -> list[int]:
        """The input ids of a sentence, EOS last.

        Raises:
          engines.SentenceError: what is wrong with the sentence (422).
        """
        raise NotImplementedError

    def check_options(self, options: Options) -> None:
        """Refuses decode options the engine does not offer (default: all offered).

        Raises:
          Unsupported: naming the option (422).
        """

    def decode(self, id_lists: Sequence[Sequence[int]], options: Options) -> list[Row]:
        """Decodes one batch: id_lists[i] are input ids ending in EOS; one Row per list."""
        raise NotImplementedError

    def attention(self, input_ids: Sequence[int], output_ids: Sequence[int]) -> dict:
        """Encoder-decoder attention of one (input, output) pair: {"source_pieces": [L],
        "target_pieces": [T], "weights": [N][H][T][L]}."""
        raise Unsupported("return_attention is not offered by this engine")

    def attention_cells(self, input_length: int) -> int:
        """The most attention weights (N x H x T x L) `attention` returns for an input of
        `input_length` ids: what a request's return_attention budget counts."""
        return 0

    def continuous_refusal(self) -> str | None:
        """Why the engine cannot batch continuously, or None when it can (`slot_search`)."""
        return "not offered by this engine"

    def slot_search(self, options: Options, max_input_length: int, steps_per_call: int) -> Any:
        """A continuous search with `options` (`continuous_batching`), where
        `continuous_refusal` is None."""
        raise Unsupported(self.continuous_refusal() or "no continuous search")

    def compiled_decoders(self) -> int:
        """How many compiled decoders the engine holds now (<= max_compiled_decoders)."""
        return 0

    def describe(self) -> dict:
        """What GET /v1/models shows now: `description`, and whether the loaded files are
        still on disk where the engine can tell."""
        return dict(self.description)


@dataclasses.dataclass
class Result:
    """What a job's Future holds: the decoded row and, when asked, its attention."""
    row: Row
    attention: dict | None = None


class QueueFull(Exception):
    """The queue cannot take the sentences of a request now."""


class Closed(Exception):
    """The batcher is draining: it takes no new sentences."""


@dataclasses.dataclass
class Job:
    """One sentence waiting to be decoded."""
    ids: list[int]
    options: Options
    return_attention: bool = False
    future: Future = dataclasses.field(default_factory=Future)
    enqueued: float = dataclasses.field(default_factory=time.monotonic)


class Batcher:
    """The queue and its decode worker thread.

    Args:
      engine: decodes batches (owned by the worker thread once `start` is called).
      max_batch_size: sentences per batch (1: no batching).
      max_batch_tokens: rows x padded input length per batch (0: no limit); a sentence
        longer than that is still decoded, alone.
      batch_timeout_secs: how long the oldest waiting sentence may wait for a batch to fill.
      max_queue: sentences waiting at most; `submit` raises QueueFull beyond.
      on_batch: called with each decoded batch's size (metrics).
      on_redecode: called with the number of rows decoded again (metrics).
      workers: batches decoded at the same time, one thread each.
      on_wait: called with each sentence's seconds in the queue (metrics).
      on_decode: called with each batch's seconds in `engine.decode` and its number of
        sentences (metrics).
    """

    def __init__(self, engine: Engine, max_batch_size: int = 32, max_batch_tokens: int = 0,
                 batch_timeout_secs: float = 0.005, max_queue: int = 1024,
                 on_batch: Callable[[int], None] | None = None,
                 on_redecode: Callable[[int], None] | None = None, workers: int = 1,
                 on_wait: Callable[[float], None] | None = None,
                 on_decode: Callable[[float, int], None] | None = None):
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size={max_batch_size} must be >= 1")
        if max_queue < 1:
            raise ValueError(f"max_queue={max_queue} must be >= 1")
        if workers < 1:
            raise ValueError(f"workers={workers} must be >= 1")
        self.engine = engine
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens
        self.batch_timeout_secs = batch_timeout_secs
        self.max_queue = max_queue
        self.workers = workers
        self._on_batch = on_batch or (lambda size: None)
        self._on_redecode = on_redecode or (lambda size: None)
        self._on_wait = on_wait or (lambda seconds: None)
        self._on_decode = on_decode or (lambda seconds, size: None)
        self._pending: list[Job] = []
        self._in_flight = 0
        self._cond = threading.Condition()
        self._closing = False
        # When a worker last became free: a batch waits batch_timeout_secs from then too.
        self._free_since = 0.0
        self._threads = [threading.Thread(target=self._work, name=f"decode-worker-{n}",
                                          daemon=True) for n in range(workers)]

    # ------------------------------------------------------------------------- clients
    def start(self) -> None:
        """Starts the worker threads."""
        for thread in self._threads:
            thread.start()

    def depth(self) -> int:
        """Sentences waiting or being decoded."""
        with self._cond:
            return len(self._pending) + self._in_flight

    def submit(self, jobs: Sequence[Job]) -> None:
        """Queues the jobs of one request, all or none.

        Raises:
          Closed: the batcher is draining.
          QueueFull: fewer than len(jobs) places are free.
        """
        with self._cond:
            if self._closing:
                raise Closed("the server is shutting down")
            if len(self._pending) + len(jobs) > self.max_queue:
                raise QueueFull(f"the queue is full ({len(self._pending)} of {self.max_queue} "
                                "sentences waiting)")
            self._pending.extend(jobs)
            self._cond.notify_all()

    def close(self, timeout: float | None = None) -> None:
        """Takes no new jobs, lets the workers finish every queued one, then joins them
        (`timeout` for each)."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout)

    # -------------------------------------------------------------------------- worker
    def _deadline(self) -> float:
        """When the oldest job's batch goes even if not full: batch_timeout_secs after the
        later of its arrival and the end of the previous decode. (From its arrival alone,
        clients that wait for their answers before sending again split into two groups
        decoded in turn, each batch holding the sentences that came during the other's
        decode: the answered clients get no time to send their next sentences.)"""
        return max(self._pending[0].enqueued, self._free_since) + self.batch_timeout_secs

    def _ready(self, now: float) -> bool:
        """Whether the oldest job's batch should go now (full, waited enough, or draining)."""
        oldest = self._pending[0]
        if self._closing or now >= self._deadline():
            return True
        same = sum(1 for job in self._pending if job.options == oldest.options)
        return same >= self.max_batch_size

    def _take_batch(self) -> list[Job]:
        """Removes and returns the next batch: the oldest job and the jobs of the same options
        closest to it in length, within max_batch_size and max_batch_tokens."""
        oldest = self._pending[0]
        length = len(oldest.ids)
        candidates = sorted((job for job in self._pending if job.options == oldest.options),
                            key=lambda job: (abs(len(job.ids) - length), job.enqueued))
        batch, longest = [], 0
        for job in candidates:
            if len(batch) == self.max_batch_size:
                break
            padded = max(longest, len(job.ids))
            if batch and self.max_batch_tokens and padded * (len(batch) + 1) > self.max_batch_tokens:
                continue
            batch.append(job)
            longest = padded
        taken = {id(job) for job in batch}
        self._pending = [job for job in self._pending if id(job) not in taken]
        return batch

    def _work(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._pending and self._ready(time.monotonic()):
                        break
                    if not self._pending and self._closing:
                        return
                    wait = None
                    if self._pending:
                        wait = max(0.0, self._deadline() - time.monotonic())
                    self._cond.wait(wait)
                batch = self._take_batch()
                self._in_flight += len(batch)
                # Another worker may take what is left now.
                self._cond.notify_all()
            taken = batch
            try:
                # A job whose request gave up (timeout, client gone) is dropped here.
                batch = [job for job in batch if job.future.set_running_or_notify_cancel()]
                started = time.monotonic()
                for job in batch:
                    self._on_wait(started - job.enqueued)
                if batch:
                    self._decode(batch)
            finally:
                with self._cond:
                    self._in_flight -= len(taken)
                    self._free_since = time.monotonic()

    def _timed_decode(self, batch: list[Job]) -> list[Row]:
        start = time.monotonic()
        rows = self.engine.decode([job.ids for job in batch], batch[0].options)
        self._on_decode(time.monotonic() - start, len(batch))
        return rows

    def _decode(self, batch: list[Job]) -> None:
        """Decodes a batch and resolves its futures; never raises."""
        try:
            rows = self._timed_decode(batch)
        except Exception as error:  # noqa: BLE001 - one bad sentence must not fail the others
            if len(batch) == 1:
                batch[0].future.set_exception(error)
                return
            for job in batch:
                self._decode([job])
            return
        self._on_batch(len(batch))
        again = [job for job, row in zip(batch, rows) if row.depends_on_batch]
        for job, row in zip(batch, rows):
            if not row.depends_on_batch:
                self._finish(job, row)
        if again:
            self._on_redecode(len(again))
            by_length: dict[int, list[Job]] = {}
            for job in again:
                by_length.setdefault(len(job.ids), []).append(job)
            for group in by_length.values():
                # One length: the batch's decode limit is each row's own.
                self._decode_exact(group)

    def _decode_exact(self, group: list[Job]) -> None:
        try:
            rows = self._timed_decode(group)
        except Exception as error:  # noqa: BLE001
            for job in group:
                job.future.set_exception(error)
            return
        self._on_batch(len(group))
        for job, row in zip(group, rows):
            self._finish(job, row)

    def _finish(self, job: Job, row: Row) -> None:
        attention = None
        if job.return_attention and row.hypotheses:
            try:
                attention = self.engine.attention(job.ids, row.hypotheses[0].ids)
            except Exception as error:  # noqa: BLE001
                job.future.set_exception(error)
                return
        job.future.set_result(Result(row, attention))


def jobs_for(id_lists: Sequence[Sequence[int]], options: Options,
             return_attention: bool = False) -> list[Job]:
    """One Job per sentence of a request."""
    return [Job(list(ids), options, return_attention) for ids in id_lists]


def cancel(jobs: Sequence[Job]) -> Any:
    """Cancels the jobs not yet started (a request that timed out or whose client left)."""
    return [job.future.cancel() for job in jobs]
