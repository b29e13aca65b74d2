"""The t2t_lite engine's compiled decoders, bounded by design: no request can make the server
keep more of them than --serve_max_compiled_decoders.

A compiled (traced) search costs seconds of CPU and megabytes of memory. Its keys are what
changes the graph's shape: the beam size and the number of hypotheses it returns (n-best > 1:
all of the beam), each bounded by the server's limits (--serve_max_beam_size,
--serve_max_n_best). The length penalty's exponent alpha changes no shape: it is an input
of the traced search (a float32 scalar), so requests with any alpha share one decoder. Of
the keys, at most `cap` decoders are kept: asking for another drops the least recently used
one (its graph is freed with it; asking for it again traces it again).

`CompiledSearches` is the batch decoder (`search.driver.infer_graph`, the graph of
`Transformer.infer` with a decode length per row); `LruCache` also holds the continuous
searches' traced functions (`engines.T2tLiteEngine.slot_search`).
"""
from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np


class LruCache:
    """At most `cap` values by key, the least recently used dropped first; thread-safe.

    Args:
      cap: how many values are kept at most (>= 1).
    """

    def __init__(self, cap: int):
        if cap < 1:
            raise ValueError(f"cap={cap}: must be >= 1")
        self.cap = cap
        self._values: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.Lock()

    def get_or_make(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """The value of `key`, made by `make()` (under the lock: once) if it is not kept;
        the least recently used value is dropped when `cap` would be passed."""
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
            value = make()
            self._values[key] = value
            while len(self._values) > self.cap:
                self._values.popitem(last=False)
            return value

    def keys(self) -> list:
        """The keys kept, least recently used first."""
        with self._lock:
            return list(self._values)

    def __len__(self) -> int:
        with self._lock:
            return len(self._values)


class CompiledSearches:
    """The batch decoders of one model: greedy or beam search with a decode length per row,
    one traced function per (beam_size, top_beams), alpha an input.

    Args:
      model: a SearchModel (a Transformer or an ensemble).
      target_space_id: the problem's.
      extra_length: t2t's decode extra length (each row decodes at most its input length +
        this).
      eos_id: the end-of-sequence id.
      force_decode_length: greedy decoding runs every step (t2t's decode hparam).
      cap: compiled decoders kept at most (`LruCache`).
    """

    def __init__(self, model: Any, target_space_id: int, extra_length: int, eos_id: int,
                 force_decode_length: bool, cap: int):
        self.model = model
        self.target_space_id = int(target_space_id)
        self.extra_length = int(extra_length)
        self.eos_id = int(eos_id)
        self.force_decode_length = bool(force_decode_length)
        self.cache = LruCache(cap)

    def _make(self, beam_size: int, top_beams: int) -> Callable:
        import tensorflow as tf

        from t2t_lite.search import driver

        driver.check_beams(beam_size, top_beams)
        model = self.model

        def search(inputs, target_space_id, decode_length, input_lengths, alpha):
            return driver.infer_graph(
                model, inputs, target_space_id, decode_length, beam_size, top_beams, alpha,
                use_cache=True, eos_id=self.eos_id,
                force_decode_length=self.force_decode_length, input_lengths=input_lengths)

        return tf.function(search, autograph=False, input_signature=[
            tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([], tf.int32),
            tf.TensorSpec([], tf.int32), tf.TensorSpec([None], tf.int32),
            tf.TensorSpec([], tf.float32)])

    def __call__(self, batch: np.ndarray, input_lengths: np.ndarray, beam_size: int,
                 alpha: float, top_beams: int) -> tuple[np.ndarray, np.ndarray]:
        """Decodes a padded batch.

        Args:
          batch: int [B, L] input ids, 0-padded, each row ending in EOS.
          input_lengths: int [B], each row's own length (EOS included).
          beam_size: 1 = greedy (the model's sampling hparams), > 1 = beam search.
          alpha: the length penalty's exponent (beam search).
          top_beams: hypotheses returned per row (1, or beam_size for n-best).

        Returns:
          (outputs int32 [B, T] or [B, top_beams, T], scores float32 [B] or [B, top_beams]),
          as `Transformer.infer` with `input_lengths`.
        """
        import tensorflow as tf

        function = self.cache.get_or_make((beam_size, top_beams),
                                          lambda: self._make(beam_size, top_beams))
        result = function(tf.constant(batch, tf.int32), tf.constant(self.target_space_id),
                          tf.constant(self.extra_length), tf.constant(input_lengths, tf.int32),
                          tf.constant(alpha, tf.float32))
        return np.asarray(result["outputs"]), np.asarray(result["scores"])

    def __len__(self) -> int:
        return len(self.cache)
