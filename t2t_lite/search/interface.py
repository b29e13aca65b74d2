"""What a model implements to be searched (`driver.infer`).

A model has `vocab_size` (V of its logits), `hparams` (its sampling settings:
sampling_method, sampling_temp, sampling_keep_top_k, sampling_keep_top_p) and

    start_decoding(inputs [B, L] int32, target_space_id, options: StepOptions) -> Decoder

which runs the encoder once and returns the step function with its initial states. The
step is `decoder.step(ids, i, states, storage) -> (logits [N, V], states, storage)`:

* `ids` int32 [N, i + 1] (the whole prefix, column 0 the start id 0) with the "recompute"
  cache, else [N, 1] (the last id); N = B for greedy, B * K for beam search;
* `states` is a nested structure of [N, ...] tensors: greedy carries them as they are,
  beam search tiles them to the K beams of each sentence and reorders them with the
  hypotheses after every step (t2t's `states` of `beam_search`); they may grow along every
  axis but the last, except with the "fixed" cache (XLA), where they keep their shapes;
* `storage` (None when the model keeps none) is carried untouched from step to step:
  keys/values kept in the beam slot that computed them, which the model reads through
  slot ids it keeps in `states` (`StepOptions.cache == "beam_slots"`).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import tensorflow as tf

# The cache layouts a search asks for: the whole decoder re-run on the prefix (t2t's slow
# path), caches grown by a position per step (t2t's fast decoding), preallocated caches
# written at step i (static shapes, for XLA), beam-slot storage (beam search without
# reordering the caches). A model may answer "beam_slots" with growing caches (storage
# None) when its attention cannot read slots.
CACHES = ("recompute", "growing", "fixed", "beam_slots")


@dataclasses.dataclass(frozen=True)
class StepOptions:
    """How the search will call the step.

    Attributes:
      beam_size: K (1 = greedy): beam search runs the step on [B * K] rows.
      max_length: the number of positions the step may be called for (int or int32 scalar):
        the length of the timing table and of "fixed" caches.
      cache: one of CACHES.
      float32_logits: return float32 logits; False lets a half-precision model return
        its own dtype (beam search casts what it scores).
    """

    beam_size: int
    max_length: Any
    cache: str
    float32_logits: bool = True


@dataclasses.dataclass
class Decoder:
    """A model's decoding step and its initial states (see the module docstring).

    Attributes:
      step: `fn(ids, i, states, storage) -> (logits [N, V], states, storage)`.
      states: the initial states, [B, ...] tensors (tiled to the beams by beam search).
      storage: the initial beam-slot storage, or None.
    """

    step: Callable[[tf.Tensor, tf.Tensor, Any, Any], tuple[tf.Tensor, Any, Any]]
    states: Any
    storage: Any = None


def ids_2d(ids) -> tf.Tensor:
    """int32 [B, L] from [B, L] or t2t's [B, L, 1, 1]."""
    ids = tf.cast(ids, tf.int32)
    if ids.shape.rank is not None and ids.shape.rank > 2:
        ids = tf.reshape(ids, tf.shape(ids)[:2])
    return ids


@dataclasses.dataclass
class SlotDecoding:
    """A model's encoder and step for continuous batching (`continuous.py`), from
    `model.slot_decoding()` inside a traced function.

    Attributes:
      encode: `fn(inputs int32 [n, L], target_space_id) -> (memory_kv, encdec_bias)`:
        per decoder layer {"k": [n, H, L, Dk/H], "v": [n, H, L, Dv/H]}, and float32
        [n, 1, 1, L] (0 on ids, t2t's large negative on padding).
      step: `fn(ids int32 [N, 1], g, first int32 [N], cache, memory_kv, encdec_bias,
        float32_logits=True) -> (logits [N, V], cache)`: one position of every row, written
        at cache position g (int32 scalar); row r is at its own step g - first[r] and
        attends to cache positions first[r]..g. N = rows of memory_kv x beams.
      init_cache: `fn(rows, positions) -> cache` of zeros ({"layer": {"k": [N, H, M, d],
        "v": ...}}).
    """

    encode: Callable
    step: Callable
    init_cache: Callable
