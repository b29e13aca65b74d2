"""Beam search with the GNMT length penalty, as tensor2tensor's `beam_search.beam_search`.

The algorithm is t2t's, step for step, so that results match bit for bit (same TF ops in the
same order):

* State per batch element: K alive hypotheses with their log-probabilities (beam 0 starts at
  0, the others at -INF so that only one copy of the start symbol is extended at step 0), and
  K finished hypotheses with their length-normalised scores (initially -INF, flags False).
* Step i: extend every alive hypothesis by every token, score = log p / ((5 + i + 1) / 6)^alpha,
  take the top 2K over the flattened [K * V] candidates (ties go to the lower index). The 2K
  guarantees K candidates that did not end in EOS. The best K of those that did not end in EOS
  become the new alive set (with their raw log-probs); the ones that did end in EOS compete
  with the old finished set for its K places (by normalised score).
* Stop after `decode_length` steps, or earlier when no alive hypothesis can still beat the
  finished ones (`bound_met`, `BeamSearch.stopped`).
* A batch element that never finished a hypothesis returns its alive hypotheses and their raw
  log-probabilities.

The step is written once, `BeamSearch.step` (`interface.Strategy`), for a step t that is
one scalar for the whole batch or each sentence's own; `search` runs it over a model's
decoder in `loop.run_steps` (the continuous search, `continuous.py`, runs the same step).

Implementation choices (results unchanged): the sequences live in fixed `[B, K, decode_length
+ 1]` buffers written at column i + 1 (t2t concatenates a column per step, its TPU path uses
the same buffer); the model's cache is merged as `[B * K, ...]` rows and reordered once per
step by the parent row of each new alive hypothesis (t2t gathers them twice, to the 2K
candidates and then to the K survivors, which selects the same rows), by the model
(`interface.Decoder.reorder`): t2t's `states` convention (tensors with the batch on axis 0,
tiled to the beams and gathered by the search) is `beam_search`'s and `beam_search_buffers`'
way of giving one. The states may grow along every axis but the last, as in t2t (its shape
invariants), e.g. key/value caches that append a position per step; `unordered_states` are
carried without reordering (for storage that the step function indexes itself). The top 2K
of the `[B, K * V]` scores come from `best_extensions` (the same values and indices as
`tf.math.top_k` over all scores, computing the scores of a few chunks only). The output
keeps t2t's length: the number of steps actually run.
`beam_search_buffers` is the same search with every shape static, for XLA.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from t2t_lite.search import loop, rows
from t2t_lite.search.interface import Decoder, any_shape_but_the_last, own_shapes

# t2t's beam_search.EOS_ID (= text_encoder.EOS_ID): the search imports no data_generators, so
# the id is stated here.
EOS_ID = 1


# t2t's "minus infinity" used to mask scores. A finite value keeps arithmetic on masked scores
# well defined, as in t2t.
INF = 1.0 * 1e7

SymbolsToLogitsFn = Callable[[tf.Tensor, tf.Tensor, Any], "tuple[tf.Tensor, Any]"]


def expand_to_beam_size(tensor: tf.Tensor, beam_size: int) -> tf.Tensor:
    """Tiles `tensor` along a new beam axis.

    Args:
      tensor: [B, ...].
      beam_size: K.

    Returns:
      [B, K, ...], every beam a copy of its batch element.
    """
    tensor = tf.expand_dims(tensor, axis=1)
    multiples = [1] * tensor.shape.rank
    multiples[1] = beam_size
    return tf.tile(tensor, multiples)


def merge_beam_dim(tensor: tf.Tensor) -> tf.Tensor:
    """Reshapes [B, K, ...] to [B * K, ...] (row b * K + k is beam k of element b)."""
    shape = tf.shape(tensor)
    return tf.reshape(tensor, tf.concat([[shape[0] * shape[1]], shape[2:]], axis=0))


def unmerge_beam_dim(tensor: tf.Tensor, batch_size: tf.Tensor | int, beam_size: int) -> tf.Tensor:
    """Reshapes [B * K, ...] back to [B, K, ...]."""
    shape = tf.shape(tensor)
    return tf.reshape(tensor, tf.concat([[batch_size, beam_size], shape[1:]], axis=0))


def tile_to_beams(tensor: tf.Tensor, beam_size: int) -> tf.Tensor:
    """Repeats each batch row K times: [B, ...] -> [B * K, ...], the layout the
    `symbols_to_logits_fn` sees (use it for tensors a caller closes over, e.g. encoder
    outputs, which need no per-step reordering)."""
    return tf.repeat(tensor, beam_size, axis=0)


def log_prob_from_logits(logits: tf.Tensor) -> tf.Tensor:
    """Normalises logits to log-probabilities over the last axis (t2t's formula, which is
    not bit-identical to tf.nn.log_softmax)."""
    return logits - tf.reduce_logsumexp(logits, axis=-1, keepdims=True)


def _set_column(seq: tf.Tensor, column: tf.Tensor, values: tf.Tensor) -> tf.Tensor:
    """Returns `seq` [B, N, T] with `seq[b, :, column] = values[b]` ([B, N]); `column` an
    int32 scalar or [B] (a column per batch element)."""
    is_column = rows.step_mask(column, tf.shape(seq)[2])  # [1 or B, T]
    return tf.where(is_column[:, None, :], values[:, :, None], seq)


def beam_search(
    symbols_to_logits_fn: SymbolsToLogitsFn,
    initial_ids: tf.Tensor,
    beam_size: int,
    decode_length: int | tf.Tensor,
    vocab_size: int,
    alpha: float | tf.Tensor,
    states: Any = None,
    eos_id: int = EOS_ID,
    stop_early: bool = True,
    use_tpu: bool = False,
    use_top_k_with_unique: bool = True,
    keep_start_column: bool = False,
) -> tuple[tf.Tensor, tf.Tensor, Any]:
    """Beam search with length penalty ((5 + length) / 6)^alpha (t2t's `beam_search`).

    Runs as a `tf.while_loop`; call it inside a `tf.function` for speed (it also runs
    eagerly, one Python iteration per step).

    t2t compatibility: t2t's arguments and calling conventions are accepted, so code written
    for `tensor2tensor.utils.beam_search.beam_search` runs unchanged apart from the output
    layout, which is t2t_lite's by default and t2t's with `keep_start_column=True`:
    * With `states=None`, a `symbols_to_logits_fn` that takes only `ids` is called t2t's way,
      `fn(ids) -> logits` (with `use_tpu=True`, one taking `(ids, i)` as `fn(ids, i)`).
    * `use_tpu` and `use_top_k_with_unique` select t2t's TPU variants of the same search;
      the fixed-size buffers here are already t2t's TPU layout, so they change nothing.
    * t2t returns the start column (ids `[B, K, T + 1]`, column 0 = `initial_ids`) and its
      Transformer drops it; t2t_lite's callers want the decoded tokens only, so by default
      the column is dropped here (`[B, K, T]`); `keep_start_column=True` gives t2t's layout.

    Args:
      symbols_to_logits_fn: `fn(ids, i, states) -> (logits, states)`. `ids` int32
        [B * K, i + 1] are the alive hypotheses so far (column 0 = `initial_ids`), `i` the
        int32 scalar step, `states` the nested structure below with every tensor merged to
        [B * K, ...]; returns float logits [B * K, V] for the next token and the updated
        states, which may change every dimension but the last (e.g. append a position).
        With `states=None` also t2t's `fn(ids) -> logits` (see above).
      initial_ids: int32 [B], the start symbol of every batch element (0 in t2t).
      beam_size: K >= 1.
      decode_length: maximum number of steps (int or int32 scalar tensor).
      vocab_size: V, the size of the logits' last axis.
      alpha: length-penalty exponent (0 = no penalty: scores are summed log-probs).
      states: optional nested structure (dicts/lists/tuples) of tensors with leading dim B;
        each is tiled to [B * K, ...] and reordered by parent beam after every step.
      eos_id: id that finishes a hypothesis.
      stop_early: stop when the best finished score of every batch element can no longer be
        beaten (t2t uses True when returning one beam). With False, stop only once the
        lowest finished score over the whole batch beats every best alive bound.
      use_tpu: t2t's flag; with `states=None` it makes a two-argument `fn(ids, i)` valid.
      use_top_k_with_unique: t2t's TPU top-k flag; accepted, no effect.
      keep_start_column: return t2t's `[B, K, T + 1]` ids with the start column.

    Returns:
      (ids, scores, states):
        ids int32 [B, K, T], best first, without the start column (with
          `keep_start_column`, [B, K, T + 1] starting with `initial_ids`); T = number of
          steps run.
          Finished hypotheses are 0-padded after their EOS. A batch element with no finished
          hypothesis gets its alive hypotheses instead.
        scores float32 [B, K]: finished hypotheses' length-normalised log-probabilities
          (log p / ((5 + length) / 6)^alpha, length including EOS), -1e7 for empty finished
          slots; for a batch element without any finished hypothesis, the alive
          hypotheses' raw log-probabilities.
        states: the final states, [B, K, ...] (ordered like the final alive hypotheses);
          None when `states` was None.
    """
    del use_top_k_with_unique  # t2t's TPU top-k; the search here is exact either way.
    fn = _accept_t2t_convention(symbols_to_logits_fn, states, use_tpu)
    seq, scores, out_states, steps = beam_search_buffers(
        fn, initial_ids, beam_size, decode_length, vocab_size, alpha, states=states,
        eos_id=eos_id, stop_early=stop_early,
    )
    seq = seq[:, :, (0 if keep_start_column else 1): steps + 1]
    return seq, scores, (None if states is None else out_states)


class BeamSearch:
    """t2t's beam-search step (its `inner_loop`: grow_topk, grow_alive, grow_finished), for
    the batch search (`search`) and the continuous one (`continuous.SlotSearch`).

    State (B sentences, K beams, T steps of buffer): "alive_seq" int32 [B, K, T + 1] (column
    0 the start id, step t's token in column t + 1), "alive_log_probs" float32 [B, K],
    "finished_seq" int32 [B, K, T + 1], "finished_scores" float32 [B, K] (length-normalised,
    -INF in empty slots), "finished_flags" bool [B, K], "parents" int32 [B, K] (the beam
    each alive hypothesis extended at the last step), "limit" int32 (scalar or [B]: the
    steps a sentence may run), optional "prefixes", "prefix_lengths" (`rows.with_prefixes`).

    Args:
      beam_size: K >= 1.
      vocab_size: V, the size of the logits' last axis.
      alpha: the length-penalty exponent.
      eos_id: the id that finishes a hypothesis.
      finished_bound: the finished score `bound_met` compares ("best": t2t's stop_early;
        "row_worst"; "batch_worst": t2t without stop_early).
      rows_alone: a sentence that has stopped (`stopped`: its limit or its bound met) keeps
        its hypotheses, so that its result is that of its search alone; False: t2t's batch
        search, where every sentence steps until the loop ends.
    """

    def __init__(self, beam_size: int, vocab_size: int | tf.Tensor, alpha: float | tf.Tensor,
                 eos_id: int = EOS_ID, finished_bound: str = "best", rows_alone: bool = False):
        if not isinstance(beam_size, int) or beam_size < 1:
            raise ValueError(f"beam_search: beam_size must be an int >= 1, got {beam_size!r}")
        if isinstance(vocab_size, int) and vocab_size < 2:
            raise ValueError(f"beam_search: vocab_size must be >= 2, got {vocab_size!r}")
        self.beams = beam_size
        self.vocab_size = vocab_size
        self.alpha = tf.cast(alpha, tf.float32)
        self.eos_id = eos_id
        self.finished_bound = finished_bound
        self.rows_alone = rows_alone

    def start(self, initial_ids: tf.Tensor, buffer_length, limit, prefixes=None) -> dict:
        """See `interface.Strategy.start`: beam 0 of each sentence at log-prob 0, the others
        at -INF (only one copy of the start id is extended at step 0)."""
        k = self.beams
        initial_ids = tf.convert_to_tensor(initial_ids, tf.int32)
        batch_size = tf.shape(initial_ids)[0]
        alive_seq = tf.zeros([batch_size, k, buffer_length + 1], tf.int32)
        alive_seq = _set_column(alive_seq, 0, expand_to_beam_size(initial_ids, k))
        state = {"alive_seq": alive_seq,
                 "alive_log_probs": tf.tile(tf.constant([[0.0] + [-INF] * (k - 1)]),
                                            [batch_size, 1]),
                 "finished_seq": tf.zeros_like(alive_seq),
                 "finished_scores": tf.ones([batch_size, k]) * -INF,
                 "finished_flags": tf.zeros([batch_size, k], tf.bool),
                 "parents": tf.zeros([batch_size, k], tf.int32),
                 "limit": tf.convert_to_tensor(limit, tf.int32)}
        return rows.with_prefixes(state, prefixes)

    def ids(self, state: dict, t, whole_prefix: bool = False) -> tf.Tensor:
        """See `interface.Strategy.ids`: [B * K, 1] or [B * K, t + 1]."""
        alive_seq = state["alive_seq"]
        batch_size, k = tf.shape(alive_seq)[0], self.beams
        if whole_prefix:
            return tf.reshape(alive_seq[:, :, : t + 1], [batch_size * k, t + 1])
        if t.shape.rank == 0:
            last = tf.slice(alive_seq, [0, 0, t], [batch_size, k, 1])
        else:  # a stopped row's step may pass its buffer: any column will do
            column = tf.clip_by_value(t, 0, tf.shape(alive_seq)[2] - 1)
            last = tf.gather(alive_seq, column[:, tf.newaxis], axis=2, batch_dims=1)
        return tf.reshape(last, [batch_size * k, 1])

    def step(self, state: dict, logits: tf.Tensor, t, stopped=None) -> dict:
        """See `interface.Strategy.step`; `logits` [B * K, V], float32 or half precision
        (`best_extensions` casts what it scores)."""
        k, vocab_size = self.beams, self.vocab_size
        alive_seq, alive_log_probs = state["alive_seq"], state["alive_log_probs"]
        batch_size = tf.shape(alive_seq)[0]
        # grow_topk: score every one-token extension of every alive hypothesis.
        logits = tf.reshape(logits, [batch_size, k, vocab_size])
        penalty = length_penalty(t + 1, self.alpha)  # scalar, or [B]
        if penalty.shape.rank:
            penalty = penalty[:, tf.newaxis]
        if "prefixes" in state:
            forced, is_forced = rows.forced_tokens(state, t)
            topk_scores, topk_flat_ids = _forced_extensions(
                logits, alive_log_probs, _per_beam(penalty), 2 * k, forced, is_forced)
        else:
            topk_scores, topk_flat_ids = best_extensions(logits, alive_log_probs,
                                                         _per_beam(penalty), 2 * k)
        topk_log_probs, topk_beam_index, topk_ids, topk_finished = split_extensions(
            topk_scores, topk_flat_ids, penalty, vocab_size, self.eos_id)
        topk_seq = _set_column(tf.gather(alive_seq, topk_beam_index, batch_dims=1), t + 1,
                               topk_ids)
        new_alive_seq, new_alive_log_probs, parents = grow_alive(
            topk_seq, topk_scores, topk_log_probs, topk_beam_index, topk_finished, k)
        new_finished = grow_finished(state["finished_seq"], state["finished_scores"],
                                     state["finished_flags"], topk_seq, topk_scores,
                                     topk_finished, k)
        new = dict(zip(("alive_seq", "alive_log_probs", "finished_seq", "finished_scores",
                        "finished_flags"),
                       (new_alive_seq, new_alive_log_probs) + tuple(new_finished)))
        if self.rows_alone:
            # Sentences that have stopped keep their hypotheses (what follows them in the
            # model's cache is not read again for their results).
            if stopped is None:
                stopped = self.stopped(state, t)
            new = {name: tf.where(tf.reshape(stopped, [-1] + [1] * (value.shape.rank - 1)),
                                  state[name], value)
                   for name, value in new.items()}
        return dict(state, parents=parents, **new)

    def stopped(self, state: dict, t) -> tf.Tensor:
        """See `interface.Strategy.stopped`: the limit reached, or no alive hypothesis can
        beat the finished ones any more (`bound_met` at the limit)."""
        limit = state["limit"]
        return tf.logical_or(tf.greater_equal(t, limit),
                             bound_met(state["alive_log_probs"], state["finished_scores"],
                                       limit, self.alpha, self.finished_bound))

    def parent_rows(self, state: dict) -> tf.Tensor:
        """int32 [B * K]: the model row (b * K + parent beam) each alive hypothesis extended."""
        parents = state["parents"]
        offsets = tf.range(tf.shape(parents)[0])[:, tf.newaxis] * self.beams
        return tf.reshape(parents + offsets, [-1])

    def result(self, state: dict) -> tuple[tf.Tensor, tf.Tensor]:
        """(ids int32 [B, K, T + 1] with the start column, scores float32 [B, K]): the
        finished hypotheses, best first, 0-padded after their EOS, with their
        length-normalised scores (-INF in empty slots); a sentence without any finished
        hypothesis gets its alive ones with their raw log-probs."""
        has_finished = tf.reduce_any(state["finished_flags"], axis=1)
        seq = tf.where(has_finished[:, None, None], state["finished_seq"], state["alive_seq"])
        scores = tf.where(has_finished[:, None], state["finished_scores"],
                          state["alive_log_probs"])
        return seq, scores


def _per_beam(penalty: tf.Tensor) -> tf.Tensor:
    """A scalar penalty as it is, a per-sentence one [B, 1] as [B, 1, 1]."""
    return penalty if not penalty.shape.rank else penalty[:, :, tf.newaxis]


def search(decoder: Decoder, initial_ids: tf.Tensor, beam_size: int,
           decode_length: int | tf.Tensor, vocab_size: int, alpha: float | tf.Tensor,
           eos_id: int = EOS_ID, stop_early: bool = True, max_decode_length: int | None = None,
           prefixes: tf.Tensor | None = None, row_decode_lengths: tf.Tensor | None = None,
           whole_prefix: bool = False) -> tuple[tf.Tensor, tf.Tensor, Any, tf.Tensor]:
    """t2t's beam search over a model's decoder (`interface.Decoder` of B * K rows, which
    reorders its own cache): `beam_search_buffers` without t2t's states convention.

    Args:
      decoder: the model's decoder; its step gets the last id of each alive hypothesis,
        [B * K, 1], or with `whole_prefix` the hypotheses so far, [B * K, i + 1].
      initial_ids, beam_size, decode_length, vocab_size, alpha, eos_id, stop_early,
        max_decode_length, prefixes, row_decode_lengths: as `beam_search_buffers`.
      whole_prefix: pass the whole prefix to the step.

    Returns:
      (ids, scores, cache, steps): ids, scores and steps as `beam_search_buffers`, the
      decoder's final cache.
    """
    strategy = _strategy(beam_size, vocab_size, alpha, eos_id, stop_early,
                         row_decode_lengths is not None)
    return _search(strategy, decoder, initial_ids, decode_length, max_decode_length, prefixes,
                   row_decode_lengths, whole_prefix)


def _strategy(beam_size: int, vocab_size, alpha, eos_id: int, stop_early: bool,
              per_row: bool) -> BeamSearch:
    """The step of t2t's beam search with these arguments (see `beam_search_buffers`)."""
    if stop_early:
        finished_bound = "best"
    elif per_row:
        finished_bound = "row_worst"  # alone, the whole batch is the element
    else:
        finished_bound = "batch_worst"  # t2t's choice
    return BeamSearch(beam_size, vocab_size, alpha, eos_id, finished_bound, rows_alone=per_row)


def _search(strategy: BeamSearch, decoder: Decoder, initial_ids, decode_length,
            max_decode_length, prefixes, row_decode_lengths, whole_prefix: bool):
    """`search` with its strategy."""
    buffer_length = decode_length if max_decode_length is None else max_decode_length
    limit = decode_length if row_decode_lengths is None else row_decode_lengths
    state = strategy.start(initial_ids, buffer_length, limit, prefixes)
    state, _, cache, steps, _ = loop.run_steps(strategy, state, decoder, 0, decode_length,
                                               whole_prefix)
    ids, scores = strategy.result(state)
    return ids, scores, cache, steps


def beam_search_buffers(
    symbols_to_logits_fn: SymbolsToLogitsFn,
    initial_ids: tf.Tensor,
    beam_size: int,
    decode_length: int | tf.Tensor,
    vocab_size: int,
    alpha: float | tf.Tensor,
    states: Any = None,
    eos_id: int = EOS_ID,
    stop_early: bool = True,
    max_decode_length: int | None = None,
    unordered_states: Any = None,
    prefixes: tf.Tensor | None = None,
    row_decode_lengths: tf.Tensor | None = None,
) -> tuple[tf.Tensor, tf.Tensor, Any, tf.Tensor]:
    """`beam_search` on fixed-shape buffers: the same search, XLA-compilable.

    Every tensor of the loop has a static shape when `max_decode_length` is a Python int and
    the batch size is static, so the whole search compiles with XLA (`jit_compile`), also
    when the number of steps, `decode_length`, is only known at run time.

    Args:
      symbols_to_logits_fn: `fn(ids, i, states) -> (logits, states)` as for `beam_search`,
        except that with `max_decode_length` given, `ids` int32 [B * K, 1] holds only the
        last token of each alive hypothesis (a growing prefix has no static shape; a cached
        decoder needs no more).
      initial_ids, beam_size, vocab_size, alpha, states, eos_id, stop_early: as
        `beam_search`.
      decode_length: maximum number of steps (int or int32 scalar tensor), at most
        `max_decode_length`.
      max_decode_length: the buffers' static length (default: `decode_length`, which must
        then be an int for a static shape). With it, the states must keep their shapes
        (preallocated caches written at position i); without it, they may grow as in
        `beam_search`.
      unordered_states: optional nested structure of tensors that the search carries from
        step to step as they are: neither tiled to the beams nor reordered (e.g. key/value
        storage indexed by beam slot, read through indices kept in `states`). With it,
        `fn` receives and returns the pair `(states, unordered_states)` in place of
        `states`; they may grow along every axis but the last.
      prefixes: optional int32 [B, P], the tokens every hypothesis of a batch element must
        start with (0-padded; no EOS): at step i < the row's prefix length only its token
        i may extend a hypothesis (the others score `FORBIDDEN`), so the search continues
        from the prefix; scores are those of the whole sequence, prefix included, as
        t2t's search scores any sequence.
      row_decode_lengths: optional int32 [B], each batch element's own maximum number of
        steps (<= `decode_length`): an element stops (its hypotheses and scores stay as
        they are) once it reaches its own length or its own bound is met, exactly where a
        search of that element alone with `decode_length` = its length would have stopped,
        so its result does not depend on the other elements (a translation server batches
        sentences of different lengths, each with its own t2t decode length). The loop
        ends when every element has stopped.

    Returns:
      (ids, scores, states, steps): ids int32 [B, K, max_decode_length + 1] with the start
      column, the steps' tokens in columns 1..steps and zeros after; scores float32 [B, K]
      and states [B, K, ...] as `beam_search`; steps the int32 scalar number of steps run.
    """
    strategy = _strategy(beam_size, vocab_size, alpha, eos_id, stop_early,
                         row_decode_lengths is not None)
    initial_ids = tf.convert_to_tensor(initial_ids, tf.int32)
    decoder = _states_decoder(symbols_to_logits_fn, states, unordered_states, beam_size,
                              static_states=max_decode_length is not None)
    # Only the last ids are passed when a static shape is asked for: `beam_search`'s callers
    # get t2t's growing prefix.
    ids, scores, cache, steps = _search(
        strategy, decoder, initial_ids, decode_length, max_decode_length, prefixes,
        row_decode_lengths, whole_prefix=max_decode_length is None)
    flat_states = cache if unordered_states is None else cache[0]
    batch_size = tf.shape(initial_ids)[0]
    out_states = tf.nest.map_structure(
        lambda s: unmerge_beam_dim(s, batch_size, beam_size), flat_states)
    return ids, scores, out_states, steps


def _states_decoder(fn: SymbolsToLogitsFn, states: Any, unordered_states: Any, k: int,
                    static_states: bool) -> Decoder:
    """t2t's convention of `states` as a model's decoder: tensors with the batch on axis 0,
    tiled to the [B * K] rows and gathered by parent row after every step (t2t's
    `beam_search` does both itself); `unordered_states` carried beside them untouched."""
    flat_states = tf.nest.map_structure(
        lambda s: tile_to_beams(tf.convert_to_tensor(s), k), {} if states is None else states)

    def gather(flat_states, rows):
        return tf.nest.map_structure(lambda s: tf.gather(s, rows, axis=0), flat_states)

    def ordered_invariants(flat_states):
        if static_states:
            return own_shapes(flat_states)
        return tf.nest.map_structure(any_shape_but_the_last, flat_states)

    if unordered_states is None:
        return Decoder(fn, flat_states, gather, ordered_invariants)
    unordered = tf.nest.map_structure(tf.convert_to_tensor, unordered_states)
    return Decoder(
        fn, (flat_states, unordered),
        lambda cache, rows: (gather(cache[0], rows), cache[1]),
        lambda cache: (ordered_invariants(cache[0]),
                       tf.nest.map_structure(any_shape_but_the_last, cache[1])))


def length_penalty(length: tf.Tensor | int, alpha: tf.Tensor | float) -> tf.Tensor:
    """t2t's length penalty ((5 + length) / 6)^alpha, float32 of `length`'s shape (int32
    scalar or [B])."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, tf.cast(alpha, tf.float32))


def bound_met(alive_log_probs: tf.Tensor, finished_scores: tf.Tensor, lengths: tf.Tensor,
              alpha: tf.Tensor | float, finished_bound: str = "best") -> tf.Tensor:
    """t2t's stopping test: the best alive hypothesis can at most keep its log-prob and get
    the largest length-penalty divisor; if a finished score already beats that, the batch
    element is done.

    Args:
      alive_log_probs: float32 [B, K], best first.
      finished_scores: float32 [B, K] (-INF in empty slots).
      lengths: int32 scalar or [B], each element's maximum decode length.
      alpha: the length-penalty exponent.
      finished_bound: the finished score compared: "best" (t2t's stop_early), "row_worst"
        (the element's lowest finished score) or "batch_worst" (t2t without stop_early:
        the lowest over the whole batch, so decoding goes on while any element has an
        empty finished slot).

    Returns:
      bool [B].
    """
    lower_bound_alive_scores = alive_log_probs[:, 0] / length_penalty(lengths, alpha)
    if finished_bound == "best":
        best_finished = tf.reduce_max(finished_scores, axis=1)
    elif finished_bound == "row_worst":
        best_finished = tf.reduce_min(finished_scores, axis=1)
    elif finished_bound == "batch_worst":
        best_finished = tf.reduce_min(finished_scores)
    else:
        raise ValueError(f"bound_met: unknown finished_bound {finished_bound!r}")
    return tf.greater(best_finished, lower_bound_alive_scores)


def split_extensions(topk_scores: tf.Tensor, topk_flat_ids: tf.Tensor,
                     penalty: tf.Tensor, vocab_size: int | tf.Tensor, eos_id: int):
    """The 2K best extensions of `best_extensions` taken apart.

    Args:
      topk_scores: float32 [B, 2K], length-normalised scores.
      topk_flat_ids: int32 [B, 2K], indices into the [K * V] flattened extensions.
      penalty: the length penalty they were divided by, broadcastable to [B, 2K].
      vocab_size: V.
      eos_id: the id that finishes a hypothesis.

    Returns:
      (log_probs float32 [B, 2K], parent beam int32 [B, 2K], token id int32 [B, 2K],
      finished bool [B, 2K]: the token is EOS).
    """
    topk_ids = topk_flat_ids % vocab_size
    return (topk_scores * penalty, topk_flat_ids // vocab_size, topk_ids,
            tf.equal(topk_ids, eos_id))


def grow_alive(topk_seq, topk_scores, topk_log_probs, topk_beam_index, topk_finished, k: int):
    """t2t's grow_alive: the best K candidates that did not just emit EOS.

    Args:
      topk_seq: int32 [B, 2K, T]; topk_scores, topk_log_probs: float32 [B, 2K];
        topk_beam_index: int32 [B, 2K], each candidate's parent beam; topk_finished: bool
        [B, 2K].
      k: K.

    Returns:
      (seq int32 [B, K, T], log_probs float32 [B, K], parent beam int32 [B, K]), best first.
    """
    alive_scores = topk_scores + tf.cast(topk_finished, tf.float32) * -INF
    _, alive_index = tf.math.top_k(alive_scores, k=k)
    return (tf.gather(topk_seq, alive_index, batch_dims=1),
            tf.gather(topk_log_probs, alive_index, batch_dims=1),
            tf.gather(topk_beam_index, alive_index, batch_dims=1))


def grow_finished(finished_seq, finished_scores, finished_flags, topk_seq, topk_scores,
                  topk_finished, k: int):
    """t2t's grow_finished: the old finished hypotheses (one 0 column longer, already so in
    the buffer) compete with the candidates that did emit EOS for the K places.

    Args:
      finished_seq: int32 [B, K, T]; finished_scores: float32 [B, K]; finished_flags: bool
        [B, K].
      topk_seq: int32 [B, 2K, T]; topk_scores: float32 [B, 2K] (length-normalised);
        topk_finished: bool [B, 2K], the candidates ending in EOS.
      k: K.

    Returns:
      (seq [B, K, T], scores [B, K], flags [B, K]), best first.
    """
    finished_candidate_scores = topk_scores + (
        1.0 - tf.cast(topk_finished, tf.float32)) * -INF
    all_seq = tf.concat([finished_seq, topk_seq], axis=1)
    all_scores = tf.concat([finished_scores, finished_candidate_scores], axis=1)
    all_flags = tf.concat([finished_flags, topk_finished], axis=1)
    _, finished_index = tf.math.top_k(all_scores, k=k)
    return (tf.gather(all_seq, finished_index, batch_dims=1),
            tf.gather(all_scores, finished_index, batch_dims=1),
            tf.gather(all_flags, finished_index, batch_dims=1))


def _chunk_length(length: int, k: int) -> int | None:
    """A divisor of `length` near sqrt(length / k) leaving at least 2k chunks, or None."""
    if length < 1024:
        return None
    target = (length / k) ** 0.5
    best = None
    for chunk in range(8, length // (2 * k) + 1):
        if length % chunk == 0 and (best is None or abs(chunk - target) < abs(best - target)):
            best = chunk
    return best


def top_k_exact(values: tf.Tensor, k: int) -> tuple[tf.Tensor, tf.Tensor]:
    """`tf.math.top_k(values, k)` (sorted, ties to the lower index), computed in two stages.

    The row is cut into equal chunks; the k chunks with the largest maxima hold the k
    largest values (a value outside them would be beaten by k chunk maxima, ties included
    when chunks are ranked by index on ties), so top-k runs on those chunks only, gathered
    in index order so that ties still resolve to the lower index. TopKV2 on CPU costs about
    8x a max over the row; this costs about one max. Same values and indices as
    `tf.math.top_k`.

    Args:
      values: float [N, M], M static.
      k: int.

    Returns:
      (values [N, k], indices int32 [N, k]).
    """
    length = values.shape[-1]
    chunk = _chunk_length(length, k) if isinstance(length, int) else None
    if chunk is None:
        return tf.math.top_k(values, k=k)
    rows = tf.shape(values)[0]
    chunks = tf.reshape(values, [rows, length // chunk, chunk])
    _, best_chunks = tf.math.top_k(tf.reduce_max(chunks, axis=2), k=k)
    best_chunks = tf.sort(best_chunks, axis=1)
    candidates = tf.reshape(tf.gather(chunks, best_chunks, batch_dims=1), [rows, k * chunk])
    top_values, positions = tf.math.top_k(candidates, k=k)
    indices = tf.gather(best_chunks, positions // chunk, batch_dims=1) * chunk + positions % chunk
    return top_values, indices


def best_extensions(logits: tf.Tensor, alive_log_probs: tf.Tensor, length_penalty: tf.Tensor,
                    count: int) -> tuple[tf.Tensor, tf.Tensor]:
    """The `count` best one-token extensions of each batch element's K hypotheses.

    Equal, values and indices, ties included, to t2t's
    `top_k(reshape((log_prob_from_logits(logits) + alive_log_probs[:, :, None]) /
    length_penalty, [B, K * V]), count)`, but the score is computed on a few chunks of
    each row instead of all K * V logits. The score f(x) = ((x - logsumexp) + alive) /
    penalty is a non-decreasing function of the logit within a hypothesis row, so the
    score of a chunk's best logit is the chunk's best score, exactly (rounding included);
    ranking the chunks by that score and scoring only the `count` best, gathered in index
    order, is `top_k_exact` on the scores. The row maximum for the logsumexp is the maximum
    of the chunk maxima, so the logits are read four times (chunk maxima, subtract, exp,
    sum) where scoring every logit reads them about eight times.

    Half-precision logits are scored in float32 with the same result as casting them first
    (the cast is exact and commutes with gather): one cast of the chunked logits feeds the
    maxima and the logsumexp, and the candidates are gathered in the logits' own dtype and
    cast after. (A cast of [B, K, V] followed by reshapes lets Grappler's arithmetic
    optimizer copy it ahead of each consumer: three full-size casts per step.)

    Args:
      logits: float [B, K, V] (float32, bfloat16 or float16), V static.
      alive_log_probs: float32 [B, K].
      length_penalty: float32 scalar, > 0.
      count: int, the number of extensions to return (2K in beam search).

    Returns:
      (scores float32 [B, count] sorted best first, flat ids int32 [B, count]: beam * V +
      token).
    """
    batch, beams = tf.shape(logits)[0], tf.shape(logits)[1]
    vocab = logits.shape[-1]
    chunk = _chunk_length(vocab, count) if isinstance(vocab, int) else None
    if chunk is None:
        logits = tf.cast(logits, tf.float32)
        log_probs = log_prob_from_logits(logits) + tf.expand_dims(alive_log_probs, axis=2)
        flat_scores = tf.reshape(log_probs / length_penalty, [batch, beams * vocab])
        return top_k_exact(flat_scores, count)
    chunks_per_row = vocab // chunk
    chunks = tf.reshape(logits, [batch, beams, chunks_per_row, chunk])
    chunks_32 = tf.cast(chunks, tf.float32)  # the only full-size cast (see above)
    chunk_max = tf.reduce_max(chunks_32, axis=3)  # [B, K, V / c]
    # tf.reduce_logsumexp(logits, axis=-1, keepdims=True), op for op, with its row maximum
    # taken from the chunk maxima (the same value); the sum over the chunk layout's two last
    # axes is the sum over V (TensorFlow merges adjacent reduced axes into one).
    raw_max = tf.reduce_max(chunk_max, axis=2, keepdims=True)
    row_max = tf.stop_gradient(tf.where(tf.math.is_finite(raw_max), raw_max, 0.0))
    sum_exp = tf.reduce_sum(tf.exp(chunks_32 - row_max[:, :, :, tf.newaxis]), axis=[2, 3])
    logsumexp = tf.math.log(sum_exp)[:, :, tf.newaxis] + row_max  # [B, K, 1]
    offset = tf.expand_dims(alive_log_probs, axis=2)

    def score(x, logsumexp, offset):
        return ((x - logsumexp) + offset) / length_penalty

    chunk_scores = tf.reshape(score(chunk_max, logsumexp, offset),
                              [batch, beams * chunks_per_row])
    _, best_chunks = tf.math.top_k(chunk_scores, k=count)
    best_chunks = tf.sort(best_chunks, axis=1)  # index order keeps ties to the lower index
    candidates = tf.cast(tf.gather(tf.reshape(chunks, [batch, beams * chunks_per_row, chunk]),
                                   best_chunks, batch_dims=1), tf.float32)  # [B, count, c]
    beam_of_chunk = best_chunks // chunks_per_row
    candidate_scores = score(
        candidates,
        tf.gather(logsumexp[:, :, 0], beam_of_chunk, batch_dims=1)[:, :, tf.newaxis],
        tf.gather(alive_log_probs, beam_of_chunk, batch_dims=1)[:, :, tf.newaxis])
    top_scores, positions = tf.math.top_k(
        tf.reshape(candidate_scores, [batch, count * chunk]), k=count)
    flat_ids = (tf.gather(best_chunks, positions // chunk, batch_dims=1) * chunk
                + positions % chunk)
    return top_scores, flat_ids


# The score of an extension a prefix forbids: far below -INF, so that no forbidden
# candidate (EOS included) enters the finished set, whose empty slots score -INF, even
# divided by a long hypothesis' length penalty.
FORBIDDEN = -1e3 * INF


def _forced_extensions(logits: tf.Tensor, alive_log_probs: tf.Tensor,
                       length_penalty: tf.Tensor, count: int, forced_ids: tf.Tensor,
                       forced: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """`best_extensions` where batch element b may only extend with `forced_ids[b]` while
    `forced[b]`: the other tokens' scores get FORBIDDEN added; the log-probabilities stay
    the model's (not renormalised over the one allowed token).

    Args:
      logits: float [B, K, V]; alive_log_probs float32 [B, K]; length_penalty float32
        scalar; count: int.
      forced_ids: int32 [B]; forced: bool [B].

    Returns:
      (scores float32 [B, count], flat ids int32 [B, count]) as `best_extensions`.
    """
    batch, beams = tf.shape(logits)[0], tf.shape(logits)[1]
    vocab = logits.shape[-1]
    log_probs = log_prob_from_logits(tf.cast(logits, tf.float32)) + alive_log_probs[:, :, None]
    allowed = tf.logical_or(
        tf.logical_not(forced)[:, None, None],
        tf.equal(tf.range(vocab)[None, None, :], forced_ids[:, None, None]))
    log_probs += (1.0 - tf.cast(allowed, tf.float32)) * FORBIDDEN
    return top_k_exact(tf.reshape(log_probs / length_penalty, [batch, beams * vocab]), count)


def _accept_t2t_convention(fn: Callable, states: Any, use_tpu: bool) -> SymbolsToLogitsFn:
    """`fn` as `fn(ids, i, states) -> (logits, states)`.

    Without states t2t calls `fn(ids)` (`fn(ids, i)` on TPU) and gets logits only; a
    function that cannot take `(ids, i, states)` but takes those arguments is wrapped.
    """
    if states is not None:
        return fn
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return fn

    def accepts(count: int) -> bool:
        try:
            signature.bind(*range(count))
        except TypeError:
            return False
        return True

    if accepts(3):
        return fn
    if use_tpu and accepts(2):
        return lambda ids, i, unused_states: (fn(ids, i), unused_states)
    if accepts(1):
        return lambda ids, i, unused_states: (fn(ids), unused_states)
    return fn
