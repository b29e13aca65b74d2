"""The two sides of a search: the strategy's step and the model's decoder.

A search is a loop (`loop.run_steps`) of three calls per step:

    ids = strategy.ids(state, t)                      # what each model row reads next
    logits, cache = decoder.step(ids, t, cache)       # the model's side: its cache, its axes
    state = strategy.step(state, logits, t, stopped)  # the strategy's side: the hypotheses
    cache = decoder.reorder(cache, strategy.parent_rows(state))   # beam search only
    stopped = strategy.stopped(state, t + 1)          # once a step, read by the next two

The strategy (`greedy.Greedy`, which also samples, and `beam_search.BeamSearch`) owns its
state: a dict of tensors whose axis 0 is the sentences (B rows), written once per strategy
and used by the batch search (`driver.infer`) and by the continuous one
(`continuous.SlotSearch`). `t` is the step of each row: an int32 scalar when every row is at
the same step (the batch search), or int32 [B] when each row is at its own (the continuous
search, where sentences join between steps).

The model owns its cache, an opaque nested structure: the search never reads a tensor of it,
never knows its axes, and asks the model to reorder it (`Decoder.reorder`) or, in the
continuous search, to take in, evict and compact rows (`SlotDecoding`). The only layout the
search states is that of the model's rows: N = B * K, row b * K + k holding beam k of sentence
b (K = 1 for greedy decoding), in `ids`, in `logits` and in `reorder`'s row ids.

A model is searched by `driver.infer` when it has `vocab_size` (V of its logits),
`sampling` (its `sampling.Sampling` settings for greedy decoding) and

    start_decoding(inputs [B, L] int32, target_space_id, options: StepOptions) -> Decoder

which runs the encoder once and returns its decoder for the batch search; it is searched in
slots (continuous batching) when it also has `slot_decoding(beam_size) -> SlotDecoding`.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

import tensorflow as tf

# The cache layouts a search asks for: the whole decoder re-run on the prefix (t2t's slow
# path), caches grown by a position per step (t2t's fast decoding), preallocated caches
# written at step t (static shapes, for XLA), beam-slot storage (beam search without
# reordering the caches). A model may answer "beam_slots" with growing caches when its
# attention cannot read slots.
CACHES = ("recompute", "growing", "fixed", "beam_slots")


@dataclasses.dataclass(frozen=True)
class StepOptions:
    """How the search will call the decoder.

    Attributes:
      beam_size: K (1 = greedy): the decoder's cache holds N = B * K rows.
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


def any_shape_but_the_last(tensor: tf.Tensor) -> tf.TensorShape:
    """t2t's `get_state_shape_invariants`: every dimension may change but the last."""
    shape = tensor.shape
    if not shape.rank:
        return shape
    return tf.TensorShape([None] * (shape.rank - 1) + [shape[-1]])


def own_shapes(structure: Any) -> Any:
    """The shapes of a nested structure of tensors, as they are (a cache of static shapes)."""
    return tf.nest.map_structure(lambda tensor: tensor.shape, structure)


@dataclasses.dataclass
class Decoder:
    """A model's decoding step and its cache (the model's side of `loop.run_steps`).

    Attributes:
      step: `fn(ids, t, cache) -> (logits [N, V], cache)`: one position of every row.
        `ids` int32 [N, 1] is each row's last token (the start id 0 at step 0), or, when the
        search was asked for the "recompute" cache, [N, t + 1], the whole prefix; `t` is
        int32, a scalar (every row at step t) or [N] (each row at its own step).
      cache: the initial cache, for the N rows of StepOptions.beam_size (a nested structure
        of tensors, or {} for a model that keeps none).
      reorder: `fn(cache, rows int32 [N]) -> cache`: after a beam-search step, new row r
        continues the hypothesis of old row rows[r]; the model moves (or re-indexes) what
        follows the hypotheses. None: nothing follows them (greedy decoding, no cache).
      invariants: `fn(cache) -> shapes` for the loop's `shape_invariants` (e.g.
        `own_shapes` for caches of static shapes, XLA); None: every axis of every tensor
        may change but the last (`any_shape_but_the_last`, t2t's invariant).
    """

    step: Callable[[tf.Tensor, tf.Tensor, Any], tuple[tf.Tensor, Any]]
    cache: Any
    reorder: Callable[[Any, tf.Tensor], Any] | None = None
    invariants: Callable[[Any], Any] | None = None

    def shape_invariants(self, cache: Any) -> Any:
        """The cache's shape invariants (see `invariants`)."""
        if self.invariants is not None:
            return self.invariants(cache)
        return tf.nest.map_structure(any_shape_but_the_last, cache)


class Strategy(Protocol):
    """A search strategy (the search's side of `loop.run_steps`): greedy decoding and
    sampling (`greedy.Greedy`) or beam search (`beam_search.BeamSearch`).

    Its state is a dict of tensors with the sentences on axis 0 ([B, ...]), its own layout:
    the continuous search concatenates and gathers its rows. `t` is an int32 scalar or [B]
    (see the module docstring).
    """

    beams: int  # K: the model rows per sentence

    def start(self, initial_ids: tf.Tensor, buffer_length, limit, prefixes=None) -> dict:
        """The state of B new sentences: `initial_ids` int32 [B] (the start id of each,
        0 in t2t), buffers of `buffer_length` steps, `limit` int32 (scalar or [B]) the steps
        each may run (greedy decoding also takes None: the loop's number of steps bounds
        them all), `prefixes` optional int32 [B, P] tokens each output must start with."""

    def ids(self, state: dict, t, whole_prefix: bool = False) -> tf.Tensor:
        """int32 [N, 1], the last token of each model row, or [N, t + 1] with
        `whole_prefix` (scalar t only)."""

    def step(self, state: dict, logits: tf.Tensor, t, stopped=None) -> dict:
        """The state after step t, given the model's logits [N, V] of that step;
        `stopped`: `stopped(state, t)` when the caller has it (the loop does), else None."""

    def stopped(self, state: dict, t) -> tf.Tensor:
        """bool [B]: the sentences whose search has ended before step t."""

    def parent_rows(self, state: dict) -> tf.Tensor | None:
        """int32 [N]: the model row each row continues after the last step (None: each
        its own)."""

    def result(self, state: dict) -> tuple[tf.Tensor, tf.Tensor]:
        """(ids, scores) of every sentence (see each strategy)."""


class SlotDecoding(Protocol):
    """A model's side of continuous batching (`continuous.SlotSearch`): its cache of the live
    sentences' rows, which only the model reads, grows, reorders, evicts and compacts.

    The cache holds K rows per sentence (K = the beam size `slot_decoding` was given), in
    the order of the sentences as they were admitted and kept. The search keeps, per
    sentence, its own step t (int32; 0 when it joins, +1 per step of the loop).
    """

    def empty(self, room) -> Any:
        """The cache of no sentences, with room for `room` (int32 scalar) steps. Called inside
        a traced function."""

    def admit(self, cache: Any, inputs: tf.Tensor, target_space_id) -> Any:
        """`cache` with the sentences `inputs` int32 [n, L] (one length, EOS last) appended:
        the model encodes them and appends their n * K rows. Called inside a traced
        function."""

    def spec(self, cache: Any) -> Any:
        """The `tf.TensorSpec`s of `cache` with every axis that admissions, evictions and
        compactions change left free (the signature of the search's traced functions)."""

    def decoder(self, cache: Any, max_steps, float32_logits: bool) -> Decoder:
        """The step of the rows of `cache` (inside the search's traced loop): a `Decoder`
        whose step takes t int32 [N], each row's own step, all below `max_steps` (int32
        scalar) in this call."""

    def make_room(self, cache: Any, steps, room: int) -> Any:
        """`cache` able to take `room` more steps of its sentences, whose own steps are
        `steps` (int [n] on the host). Called eagerly, between calls of the loop."""

    def keep(self, cache: Any, rows, steps, room: int) -> Any:
        """The cache of the sentences `rows` only (int [m] on the host, in order), whose own
        steps are `steps` (int [m]), with room for `room` more steps. Called eagerly."""


def ids_2d(ids) -> tf.Tensor:
    """int32 [B, L] from [B, L] or t2t's [B, L, 1, 1]."""
    ids = tf.cast(ids, tf.int32)
    if ids.shape.rank is not None and ids.shape.rank > 2:
        ids = tf.reshape(ids, tf.shape(ids)[:2])
    return ids
