"""t2t's greedy decoding loop (argmax or sampling, `sampling.sample`)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

from t2t_lite.search import beam_search


def greedy(step: Callable, batch_size, max_length, states: Any,
           choose: Callable[[tf.Tensor, tf.Tensor], tf.Tensor], full_ids: bool, eos_id: int,
           force_decode_length: bool = False, buffer_length: int | None = None,
           prefixes: tf.Tensor | None = None, row_lengths: tf.Tensor | None = None):
    """t2t's greedy loop: runs until `max_length` steps or every row has emitted EOS
    (only the former with `force_decode_length`).

    Args:
      step: `fn(ids, i, states) -> (logits float32 [B, V], states)`; ids int32 [B, i + 1]
        (start id 0 first) with `full_ids`, else the last id [B, 1].
      batch_size: B (int32 scalar).
      max_length: the number of steps (int32 scalar).
      states: the step's states; they may grow along every axis but the last unless
        `buffer_length` is given.
      choose: `fn(logits [B, V], i) -> int32 [B]`, the next token at step i (argmax or a
        draw).
      full_ids: pass the whole prefix to `step`.
      eos_id: the id that ends a row.
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
    growing_states = buffer_length is None
    if buffer_length is None:
        buffer_length = max_length
    decoded = tf.zeros([batch_size, buffer_length], tf.int32)
    columns = tf.range(buffer_length)
    if prefixes is not None:
        prefixes = tf.pad(tf.cast(prefixes, tf.int32), [[0, 0], [0, 1]])  # read past the end
        prefix_lengths = tf.reduce_sum(tf.cast(tf.not_equal(prefixes, 0), tf.int32), axis=1)

    def body(i, hit_eos, next_id, decoded, states, log_prob):
        if full_ids:
            ids = tf.concat([tf.zeros([batch_size, 1], tf.int32), decoded[:, :i]], axis=1)
        else:
            ids = next_id
        logits, states = step(ids, i, states)
        log_probs = beam_search.log_prob_from_logits(logits)
        token = choose(logits, i)
        if prefixes is not None:
            forced = tf.gather(prefixes, tf.minimum(i, tf.shape(prefixes)[1] - 1), axis=1)
            token = tf.where(i < prefix_lengths, forced, token)
        chosen = tf.gather(log_probs, token, axis=1, batch_dims=1)
        column = tf.equal(columns, i)[tf.newaxis, :]
        if row_lengths is None:
            log_prob += chosen * (1.0 - tf.cast(hit_eos, tf.float32))
            hit_eos = tf.logical_or(hit_eos, tf.equal(token, eos_id))
        else:
            writing = i < row_lengths
            log_prob += tf.where(writing, chosen * (1.0 - tf.cast(hit_eos, tf.float32)), 0.0)
            hit_eos = tf.logical_or(hit_eos, tf.logical_and(writing, tf.equal(token, eos_id)))
            column = tf.logical_and(column, writing[:, tf.newaxis])
        decoded = tf.where(column, token[:, tf.newaxis], decoded)
        return i + 1, hit_eos, token[:, tf.newaxis], decoded, states, log_prob

    def not_finished(i, hit_eos, *unused):
        if row_lengths is not None:
            stopped = tf.greater_equal(i, row_lengths)
            if not force_decode_length:
                stopped = tf.logical_or(stopped, hit_eos)
            return tf.logical_and(i < max_length, tf.logical_not(tf.reduce_all(stopped)))
        if force_decode_length:
            return i < max_length
        return tf.logical_and(i < max_length, tf.logical_not(tf.reduce_all(hit_eos)))

    loop_vars = (
        tf.constant(0),
        tf.zeros([batch_size], tf.bool),
        tf.zeros([batch_size, 1], tf.int32),
        decoded,
        states,
        tf.zeros([batch_size], tf.float32),
    )
    invariants = tf.nest.map_structure(lambda v: v.shape, loop_vars)
    if growing_states:
        invariants = invariants[:4] + (
            tf.nest.map_structure(beam_search.state_shape_invariant, states),
            invariants[5])
    steps, _, _, decoded, _, log_prob = tf.while_loop(
        not_finished, body, loop_vars, shape_invariants=invariants, parallel_iterations=1
    )
    return decoded, log_prob, steps
