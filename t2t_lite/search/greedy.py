"""t2t's greedy decoding: each row takes one token per step, the argmax or a draw
(`sampling.sample`), until its EOS or its length.

`Greedy` is the step (`interface.Strategy`), used by the batch search (`search`, t2t's
greedy loop) and by the continuous one (`continuous.SlotSearch`).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

from t2t_lite.search import loop
from t2t_lite.search.beam_search import log_prob_from_logits
from t2t_lite.search.interface import Decoder, any_shape_but_the_last, own_shapes
from t2t_lite.search.rows import forced_tokens, step_mask, with_prefixes


class Greedy:
    """t2t's greedy step: the token `choose` picks, or the prefix's, written while a row is
    within its length; log-probs summed up to and including the first EOS; tokens after it
    are kept, as in t2t (not with `rows_alone`).

    State: "seq" int32 [B, T] (the tokens, step t in column t), "log_prob" float32 [B],
    "hit_eos" bool [B], "last" int32 [B, 1] (the last token), optional "limit" int32
    (scalar or [B]: a row writes while t < limit; without it, the loop's number of steps
    bounds every row), optional "prefixes", "prefix_lengths" (`with_prefixes`).

    Args:
      choose: `fn(logits float32 [B, V], t) -> int32 [B]`, the next token (argmax or a
        draw, e.g. `sampling.sample`).
      eos_id: the id that ends a row.
      force_decode_length: a row stops at its limit only, not at its EOS (t2t's decode
        hparam).
      rows_alone: a row that has stopped (`stopped`) keeps its state: no token is written
        after its EOS, so that its output does not depend on when the loop ends (the
        continuous search); False: t2t's tokens after EOS, written until the loop ends.
    """

    beams = 1

    def __init__(self, choose: Callable[[tf.Tensor, tf.Tensor], tf.Tensor], eos_id: int,
                 force_decode_length: bool = False, rows_alone: bool = False):
        self.choose = choose
        self.eos_id = eos_id
        self.force_decode_length = force_decode_length
        self.rows_alone = rows_alone

    def start(self, initial_ids: tf.Tensor, buffer_length, limit, prefixes=None) -> dict:
        """See `interface.Strategy.start` (t2t's greedy decoding starts from id 0, which
        `ids` puts first in the whole prefix); `limit` may be None (see the state)."""
        initial_ids = tf.convert_to_tensor(initial_ids, tf.int32)
        batch_size = tf.shape(initial_ids)[0]
        state = {"seq": tf.zeros([batch_size, buffer_length], tf.int32),
                 "log_prob": tf.zeros([batch_size], tf.float32),
                 "hit_eos": tf.zeros([batch_size], tf.bool),
                 "last": initial_ids[:, tf.newaxis]}
        if limit is not None:
            state["limit"] = tf.convert_to_tensor(limit, tf.int32)
        return with_prefixes(state, prefixes)

    def ids(self, state: dict, t, whole_prefix: bool = False) -> tf.Tensor:
        """See `interface.Strategy.ids` (the whole prefix starts with the start id 0)."""
        if whole_prefix:
            seq = state["seq"]
            return tf.concat([tf.zeros([tf.shape(seq)[0], 1], tf.int32), seq[:, :t]], axis=1)
        return state["last"]

    def step(self, state: dict, logits: tf.Tensor, t, stopped=None) -> dict:
        """See `interface.Strategy.step`; `logits` float32 [B, V]."""
        log_probs = log_prob_from_logits(logits)
        token = self.choose(logits, t)
        if "prefixes" in state:
            forced, is_forced = forced_tokens(state, t)
            token = tf.where(is_forced, forced, token)
        chosen = tf.gather(log_probs, token, axis=1, batch_dims=1)
        hit_eos = state["hit_eos"]
        log_prob = chosen * (1.0 - tf.cast(hit_eos, tf.float32))
        eos = tf.equal(token, self.eos_id)
        seq = state["seq"]
        column = step_mask(t, tf.shape(seq)[1])
        if self.rows_alone or "limit" in state:
            if self.rows_alone:
                writing = tf.logical_not(self.stopped(state, t) if stopped is None
                                         else stopped)
            else:
                writing = t < state["limit"]
            log_prob = tf.where(writing, log_prob, 0.0)
            eos = tf.logical_and(writing, eos)
            column = tf.logical_and(column, tf.reshape(writing, [-1, 1]))
        return dict(state, seq=tf.where(column, token[:, tf.newaxis], seq),
                    log_prob=state["log_prob"] + log_prob,
                    hit_eos=tf.logical_or(hit_eos, eos), last=token[:, tf.newaxis])

    def stopped(self, state: dict, t) -> tf.Tensor:
        """See `interface.Strategy.stopped`: at the limit, or at EOS (unless
        force_decode_length)."""
        hit_eos = state["hit_eos"]
        if "limit" not in state:
            return tf.zeros_like(hit_eos) if self.force_decode_length else hit_eos
        ended = t >= state["limit"]
        if self.force_decode_length:  # [B], whether t and the limit are scalars or not
            return tf.logical_or(ended, tf.zeros_like(hit_eos))
        return tf.logical_or(ended, hit_eos)

    def parent_rows(self, state: dict) -> None:
        """Greedy rows continue themselves."""
        return None

    def result(self, state: dict) -> tuple[tf.Tensor, tf.Tensor]:
        """(ids int32 [B, T], zeros after each row's steps; scores float32 [B])."""
        return state["seq"], state["log_prob"]


def search(decoder: Decoder, batch_size, max_length, choose: Callable, eos_id: int,
           whole_prefix: bool = False, force_decode_length: bool = False,
           buffer_length: int | None = None, prefixes: tf.Tensor | None = None,
           row_lengths: tf.Tensor | None = None):
    """t2t's greedy loop over a model's decoder: runs until `max_length` steps or every row
    has emitted EOS (only the former with `force_decode_length`).

    Args:
      decoder: the model's `interface.Decoder` of B rows.
      batch_size: B (int32 scalar).
      max_length: the number of steps (int32 scalar).
      choose: `fn(logits [B, V], t) -> int32 [B]`, the next token at step t.
      eos_id: the id that ends a row.
      whole_prefix: pass the whole prefix to the step (the "recompute" cache).
      force_decode_length: run all `max_length` steps.
      buffer_length: the static length of the id buffer (XLA); default `max_length`.
      prefixes: optional int32 [B, P], 0-padded: row b's first tokens are its prefix (not
        chosen; their log-probs count in the score), the steps after it choose.
      row_lengths: optional int32 [B], each row's own number of steps (<= `max_length`):
        a row writes no token and adds no log-prob from its own length on, and the loop
        ends once every row has emitted EOS or reached its length, so that a row's tokens
        and score are those of the row decoded alone with `max_length` = its length.

    Returns:
      (ids int32 [B, buffer_length], scores float32 [B], steps int32 scalar): the ids
      of the steps run in columns :steps, zeros after; scores sum the log-probs of the
      chosen tokens up to and including the first EOS; tokens after it are kept.
    """
    initial_ids = tf.zeros([batch_size], tf.int32)  # t2t's start id 0
    strategy = Greedy(choose, eos_id, force_decode_length)
    state = strategy.start(initial_ids, max_length if buffer_length is None else buffer_length,
                           row_lengths, prefixes)
    state, _, _, steps, _ = loop.run_steps(strategy, state, decoder, 0, max_length,
                                           whole_prefix)
    ids, scores = strategy.result(state)
    return ids, scores, steps


def greedy(step: Callable, batch_size, max_length, states: Any,
           choose: Callable[[tf.Tensor, tf.Tensor], tf.Tensor], full_ids: bool, eos_id: int,
           force_decode_length: bool = False, buffer_length: int | None = None,
           prefixes: tf.Tensor | None = None, row_lengths: tf.Tensor | None = None):
    """`search` with t2t's step convention: `step(ids, i, states) -> (logits float32
    [B, V], states)`, the states carried as they are (growing along every axis but the last
    unless `buffer_length` is given: then they keep their shapes); `full_ids` passes the
    whole prefix. The other arguments and the result are `search`'s."""
    invariants = own_shapes if buffer_length is not None else (
        lambda cache: tf.nest.map_structure(any_shape_but_the_last, cache))
    return search(Decoder(step, states, invariants=invariants), batch_size, max_length, choose,
                  eos_id, whole_prefix=full_ids, force_decode_length=force_decode_length,
                  buffer_length=buffer_length, prefixes=prefixes, row_lengths=row_lengths)
