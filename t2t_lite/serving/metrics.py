"""The translation server's Prometheus metrics (prometheus-client), on a registry of its own
so that several servers in one process (tests) do not collide."""
from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

PREFIX = "t2t_lite_serving"


class Metrics:
    """Requests by status, errors, sentences, latency, batch sizes, queue waits, decode
    times, queue depth, compiled decoders.

    Args:
      queue_depth: returns the sentences waiting or being decoded (read at each scrape).
      compiled_decoders: returns the compiled decoders the engine holds (read at each
        scrape; at most --serve_max_compiled_decoders).
    """

    def __init__(self, queue_depth: Callable[[], int],
                 compiled_decoders: Callable[[], int] = lambda: 0):
        self.registry = CollectorRegistry()
        self.requests = Counter(f"{PREFIX}_requests", "Translation requests answered, by "
                                "HTTP status.", ["status"], registry=self.registry)
        self.errors = Counter(f"{PREFIX}_errors", "Translation requests answered with an "
                              "error (status >= 400), by status.", ["status"],
                              registry=self.registry)
        self.sentences = Counter(f"{PREFIX}_sentences", "Sentences translated.",
                                 registry=self.registry)
        self.latency = Histogram(
            f"{PREFIX}_request_latency_seconds", "Time from a translation request's arrival "
            "to its answer.", registry=self.registry,
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
        self.batch_size = Histogram(
            f"{PREFIX}_batch_size", "Sentences per decoded batch.", registry=self.registry,
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256))
        self.redecoded = Counter(
            f"{PREFIX}_redecoded_sentences", "Sentences decoded again among sentences of their "
            "own length (their batch's decode limit was longer than their own).",
            registry=self.registry)
        # Where a request's time goes: waiting for its batch, then decoding (the rest of its
        # latency is HTTP, JSON and encoding).
        seconds = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
        self.queue_wait = Histogram(
            f"{PREFIX}_queue_wait_seconds", "Time a sentence waited in the queue for its "
            "batch.", registry=self.registry, buckets=seconds)
        self.decode = Histogram(
            f"{PREFIX}_decode_seconds", "Time the engine took to decode a batch.",
            registry=self.registry, buckets=seconds)
        # A sentence waits for its whole batch: its share of a latency is the batch's time.
        self.sentence_decode = Counter(
            f"{PREFIX}_sentence_decode_seconds", "Decode time of each sentence's batch, "
            "summed over the sentences (divided by _sentences: the mean a sentence waited "
            "for its batch's decode).", registry=self.registry)
        self.decode_steps = Counter(
            f"{PREFIX}_decode_steps", "Decode steps run by continuous batching (each step "
            "decodes every live sentence of its worker; with _batch_size: sentence-steps).",
            registry=self.registry)
        self.queue_depth = Gauge(f"{PREFIX}_queue_depth", "Sentences waiting or being "
                                 "decoded.", registry=self.registry)
        self.queue_depth.set_function(queue_depth)
        self.compiled_decoders = Gauge(
            f"{PREFIX}_compiled_decoders", "Compiled decoders the engine holds (one per beam "
            "size and n-best > 1 in use; at most --serve_max_compiled_decoders).",
            registry=self.registry)
        self.compiled_decoders.set_function(compiled_decoders)

    def decoded(self, seconds: float, sentences: int) -> None:
        """Counts one decoded batch of `sentences` that took `seconds`."""
        self.decode.observe(seconds)
        self.sentence_decode.inc(seconds * sentences)

    def answered(self, status: int, seconds: float) -> None:
        """Counts one answered translation request."""
        self.requests.labels(str(status)).inc()
        if status >= 400:
            self.errors.labels(str(status)).inc()
        self.latency.observe(seconds)
