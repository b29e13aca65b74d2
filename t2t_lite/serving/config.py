"""The translation server's limits and batching, with their defaults: the one source of the
defaults of `run.py --mode=serve`'s flags (t2t_lite/flags.py reads them from here, before
anything heavy is imported: this module imports nothing but the standard library)."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    """The server's limits and batching (each field's flag is in FLAGS).

    Attributes:
      max_batch_size: sentences decoded together at most.
      max_batch_tokens: rows x padded input length per batch at most (0: no limit).
      batch_timeout_ms: how long a sentence waits for its batch to fill (None: the
        engine's choice, `default_batch_timeout_ms`: 5 for a t2t_lite model or a
        SavedModel, 1 for CTranslate2, whose lone sentence decodes in ~20 ms).
      decode_workers: batches decoded at the same time (0: the engine's choice, one per
        usable core for the t2t_lite engine, as --mode=decode's parallel batches, one
        per replica for CTranslate2).
      intra_op_threads: threads of one decode's ops, TensorFlow's intra-op threads (a
        t2t_lite model or a SavedModel; 0: chosen at start-up, the usable cores / the
        decode workers, at least 1: `threads`).
      steps_per_call: with continuous batching, decode steps between two chances for
        waiting sentences to join (a search call; it returns sooner when every sentence
        ended). Longer calls pay the host's work between calls less often: on a 2-core
        AMX Xeon at 16 clients 4 steps gave 30 sentences/s, 8 gave 34, 16 gave 38 and 32
        gave 41, with a lower median latency each time (bench/history/serving.md).
      request_timeout_secs: a request not answered by then gets 504.
      max_queue_sentences: sentences waiting at most (beyond: 503).
      max_sentences: sentences per request at most (413).
      max_input_tokens: subwords per sentence, EOS included, at most (413).
      max_beam_size: largest beam a request may ask for (422).
      max_n_best: most hypotheses a request may ask for (422).
      max_body_bytes: bytes of a request body at most (413), checked on Content-Length
        and while reading.
      read_timeout_secs: a request body not received whole by then gets 408.
      max_attention_cells: attention weights a return_attention request may answer with at
        most (layers x heads x output x input positions of each sentence, the output at
        its longest, summed over the sentences; 413).
      max_compiled_decoders: compiled decoders kept at most (least recently used dropped):
        one per beam size and n-best > 1 (alpha is an input of the compiled decoder).
      beam_size, alpha: the defaults (the server's --decode_hparams).
      batching: "continuous" (sentences join and leave a running search between decode
        steps, where the engine can: `continuous_batching`; the others batch per batch) or
        "batch" (a batch is decoded to its end before the next). At 16 clients on a 2-core
        AMX Xeon continuous batching reached 88-91% of offline decoding, per batch 59-85%
        (bench/history/serving.md).
    """
    max_batch_size: int = 32
    max_batch_tokens: int = 4096
    batch_timeout_ms: float | None = None
    decode_workers: int = 0
    intra_op_threads: int = 0
    steps_per_call: int = 32
    request_timeout_secs: float = 60.0
    max_queue_sentences: int = 1024
    max_sentences: int = 64
    max_input_tokens: int = 256
    max_beam_size: int = 16
    max_n_best: int = 16
    max_body_bytes: int = 4 * 1024 * 1024
    read_timeout_secs: float = 30.0
    max_attention_cells: int = 2_000_000
    max_compiled_decoders: int = 8
    beam_size: int = 4
    alpha: float = 0.6
    batching: str = "continuous"


# The run.py flag of each field (beam_size and alpha come from --decode_hparams).
FLAGS = {"max_batch_size": "max_batch_size", "max_batch_tokens": "max_batch_tokens",
         "batch_timeout_ms": "batch_timeout_ms", "decode_workers": "serve_decode_workers",
         "intra_op_threads": "serve_intra_op_threads",
         "steps_per_call": "serve_steps_per_call",
         "request_timeout_secs": "request_timeout_secs",
         "max_queue_sentences": "serve_max_queue", "max_sentences": "serve_max_sentences",
         "max_input_tokens": "serve_max_input_tokens", "max_beam_size": "serve_max_beam_size",
         "max_n_best": "serve_max_n_best", "max_body_bytes": "serve_max_body_bytes",
         "read_timeout_secs": "serve_read_timeout_secs",
         "max_attention_cells": "serve_max_attention_cells",
         "max_compiled_decoders": "serve_max_compiled_decoders", "batching": "serve_batching"}
