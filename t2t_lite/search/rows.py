"""Per-row helpers of the search steps, for a step t that is an int32 scalar (every row at
step t) or [B] (each row at its own): a row's column at its step, and forced prefixes."""
from __future__ import annotations

import tensorflow as tf


def at_step(table: tf.Tensor, t: tf.Tensor) -> tf.Tensor:
    """Column t of `table` [B, C] for each row: [B] (t an int32 scalar or [B], < C)."""
    if t.shape.rank == 0:
        return tf.gather(table, t, axis=1)
    return tf.gather(table, t[:, tf.newaxis], axis=1, batch_dims=1)[:, 0]


def step_mask(t: tf.Tensor, columns: tf.Tensor) -> tf.Tensor:
    """bool [1, C] (scalar t) or [B, C] (t [B]): True at column t of each row (nowhere when
    t is outside 0..C - 1)."""
    return tf.one_hot(tf.reshape(t, [-1]), columns, True, False)


def with_prefixes(state: dict, prefixes) -> dict:
    """`state` with the forced first tokens of each row: "prefixes" int32 [B, P + 1]
    (0-padded, a zero column to read past the end) and "prefix_lengths" int32 [B]."""
    if prefixes is None:
        return state
    prefixes = tf.pad(tf.cast(prefixes, tf.int32), [[0, 0], [0, 1]])
    return dict(state, prefixes=prefixes, prefix_lengths=tf.reduce_sum(
        tf.cast(tf.not_equal(prefixes, 0), tf.int32), axis=1))


def forced_tokens(state: dict, t: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """(int32 [B] the prefix token of step t of each row, bool [B] whether it is forced)."""
    prefixes = state["prefixes"]
    forced = at_step(prefixes, tf.minimum(t, tf.shape(prefixes)[1] - 1))
    return forced, t < state["prefix_lengths"]
