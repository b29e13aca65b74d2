"""Choosing the next token of greedy decoding: argmax, or a draw (t2t's
`sample_with_temperature`, with t2t's top-k and the nucleus, top-p, beside it).

A draw comes from TensorFlow's stateful generator, as t2t's (reproducible through
`tf.random.set_seed`, run.py's `--random_seed`), or, given a seed, from the stateless one
seeded by (seed, step): the same seed, logits and step give the same draw in any process and
inside a SavedModel, where a stateful op's seed is fixed when the graph is built."""
from __future__ import annotations

import dataclasses
from typing import Any

import tensorflow as tf

# t2t's value for logits taken out of the draw (top-k): exp(-1e6 - max) is exactly 0.
REMOVED_LOGIT = -1e6


@dataclasses.dataclass(frozen=True)
class Sampling:
    """The model hparams that choose a token (t2t's names; keep_top_p is t2t_lite's own),
    which the models read from their hparams (`Transformer.sampling`).

    Attributes:
      method: "argmax" or "random".
      temp: temperature of the draw; 0.0 = argmax.
      keep_top_k: draw among the k largest logits only (-1 = all).
      keep_top_p: draw among the smallest set of most probable tokens whose probability
        (after the temperature and top-k) reaches p (nucleus sampling); 1.0 = all. A
        float32 scalar tensor in (0, 1] is read at run time.
      seed: None draws from TensorFlow's stateful generator; an int >= 0 draws with
        `tf.random.stateless_categorical` seeded by (seed, step). An int64 scalar tensor is
        read at run time, a negative value meaning None (the SavedModel's input).
    """

    method: str = "argmax"
    temp: float = 1.0
    keep_top_k: int = -1
    keep_top_p: float = 1.0
    seed: Any = None


def keep_top_p(logits: tf.Tensor, p: float) -> tf.Tensor:
    """Nucleus filtering: the logits of the most probable tokens whose summed probability
    first reaches `p` are kept, the others set to REMOVED_LOGIT (the most probable token is
    always kept; tokens tied with the last kept one are kept too).

    Args:
      logits: float [N, V].
      p: in (0, 1].

    Returns:
      float [N, V].
    """
    sorted_logits = tf.sort(logits, axis=-1, direction="DESCENDING")
    # Mass of the tokens ranked before each one: a token is kept while that is below p.
    before = tf.math.cumsum(tf.nn.softmax(sorted_logits), axis=-1, exclusive=True)
    kept = tf.where(before < p, sorted_logits, sorted_logits.dtype.max)
    threshold = tf.reduce_min(kept, axis=-1, keepdims=True)
    return tf.where(logits < threshold, tf.cast(REMOVED_LOGIT, logits.dtype), logits)


def sample(logits: tf.Tensor, sampling: Sampling, step=0) -> tf.Tensor:
    """The next token of each row: argmax, or a draw from `logits / temp` after top-k
    (t2t's order) and top-p.

    Args:
      logits: float32 [N, V].
      sampling: the settings.
      step: int32, the decoding step: a scalar, or [N] (each row's own; not with a
        `sampling.seed`, which seeds one draw of all rows by (seed, step)).

    Returns:
      int32 [N].

    Raises:
      ValueError: keep_top_k not -1 or positive.
    """
    if sampling.method != "random" or sampling.temp == 0.0:
        return tf.argmax(logits, axis=-1, output_type=tf.int32)
    if sampling.keep_top_k != -1:
        if sampling.keep_top_k <= 0:
            raise ValueError("hparams.sampling_keep_top_k must be -1 or positive")
        kth = tf.math.top_k(logits, sampling.keep_top_k).values[:, -1:]
        logits = tf.where(logits < kth, REMOVED_LOGIT, logits)
    scaled = logits / sampling.temp
    p = sampling.keep_top_p
    if isinstance(p, tf.Tensor):  # chosen at run time (the SavedModel's input)
        scaled = tf.cond(p < 1.0, lambda: keep_top_p(scaled, p), lambda: scaled)
    elif p < 1.0:  # the caller checked (0, 1] (hparams_support.check_range)
        scaled = keep_top_p(scaled, p)
    return _draw(scaled, sampling.seed, step)


def _draw(logits: tf.Tensor, seed, step) -> tf.Tensor:
    """One draw per row of `logits` [N, V] (int32 [N]): stateless, seeded by (seed, step),
    or from the stateful generator when `seed` is None or a negative tensor."""
    def stateful():
        return tf.random.categorical(logits, 1, dtype=tf.int32)[:, 0]

    if seed is not None and tf.convert_to_tensor(step).shape.rank != 0:
        raise ValueError("a seeded draw takes one step for all rows, got a step per row")

    def stateless():
        seeds = tf.stack([tf.cast(seed, tf.int64), tf.cast(step, tf.int64)])
        return tf.random.stateless_categorical(logits, 1, seeds, dtype=tf.int32)[:, 0]

    if seed is None:
        return stateful()
    if isinstance(seed, tf.Tensor):
        return tf.cond(seed >= 0, stateless, stateful)
    if seed < 0:
        raise ValueError(f"sampling seed={seed} must be >= 0 (None: unseeded)")
    return stateless()
