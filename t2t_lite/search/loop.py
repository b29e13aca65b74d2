"""The search loop: a strategy's step and a model's decoder, one `tf.while_loop` for every
search (greedy or beam, batch or continuous; see `interface.py`)."""
from __future__ import annotations

from typing import Any

import tensorflow as tf

from t2t_lite.search.interface import Decoder, Strategy


def row_steps(t: tf.Tensor, beams: int) -> tf.Tensor:
    """The step of each model row: `t` itself when it is a scalar, else each sentence's
    step repeated for its K rows ([B] -> [B * K])."""
    if t.shape.rank == 0 or beams == 1:
        return t
    return tf.repeat(t, beams)


def run_steps(strategy: Strategy, state: dict, decoder: Decoder, t: tf.Tensor,
              max_steps, whole_prefix: bool = False) -> tuple[dict, tf.Tensor, Any, tf.Tensor]:
    """Runs steps until every sentence has stopped (`strategy.stopped`) or `max_steps`
    steps have run.

    Args:
      strategy: the search's side (`interface.Strategy`).
      state: its state of B sentences.
      decoder: the model's side (`interface.Decoder`); its cache is the loop's.
      t: int32, the sentences' steps: a scalar (every sentence at step t) or [B].
      max_steps: int32 scalar, the most steps this call runs.
      whole_prefix: the decoder reads the whole prefix (the "recompute" cache; scalar t).

    Returns:
      (state, t, cache, steps, stopped): the state, the steps after the last one run, the
      decoder's cache, the int32 scalar number of steps run and bool [B], the sentences
      stopped before step t (`strategy.stopped(state, t)`).
    """
    t = tf.convert_to_tensor(t, tf.int32)
    # A scalar t counts the steps itself; a step per sentence needs a counter, n.
    counter = t.shape.rank != 0
    start, end = t, t + max_steps

    # Whether each sentence has stopped is computed once a step, at the end of the body,
    # and carried: the condition and the next step both read it.
    def not_finished(n, t, state, cache, stopped):
        more = n < max_steps if counter else t < end
        return tf.logical_and(more, tf.logical_not(tf.reduce_all(stopped)))

    cache_invariants = decoder.shape_invariants(decoder.cache)

    def body(n, t, state, cache, stopped):
        ids = strategy.ids(state, t, whole_prefix)
        logits, cache = decoder.step(ids, row_steps(t, strategy.beams), cache)
        new_state = strategy.step(state, logits, t, stopped)
        rows = strategy.parent_rows(new_state)
        if rows is not None and decoder.reorder is not None:
            cache = decoder.reorder(cache, rows)
        # Gathers lose static dims: the loop variables keep the shapes they came in with
        # (the cache those its invariants keep: all of them for XLA's static shapes).
        tf.nest.map_structure(lambda new, old: new.set_shape(old.shape), new_state, state)
        tf.nest.map_structure(lambda new, shape: new.set_shape(shape), cache, cache_invariants)
        new_stopped = strategy.stopped(new_state, t + 1)
        new_stopped.set_shape(stopped.shape)
        return (n + 1 if counter else n), t + 1, new_state, cache, new_stopped

    stopped = strategy.stopped(state, t)
    loop_vars = (tf.constant(0), t, state, decoder.cache, stopped)
    invariants = (tf.TensorShape([]), t.shape,
                  tf.nest.map_structure(lambda tensor: tensor.shape, state), cache_invariants,
                  stopped.shape)
    n, t, state, cache, stopped = tf.while_loop(
        not_finished, body, loop_vars, shape_invariants=invariants, parallel_iterations=1)
    return state, t, cache, (n if counter else t - start), stopped
