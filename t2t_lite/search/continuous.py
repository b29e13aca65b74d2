"""Continuous (iteration-level) batching: sentences join and leave a running search between
decode steps, so that a batch no longer runs until its slowest row and a new sentence does
not wait for a whole batch (a translation server's decoder).

`SlotSearch` keeps the live sentences as the rows of one search (greedy or t2t's beam
search, `beam_search.py`'s step, op for op). Its rows share one fixed-size self-attention
cache [N, H, M, d] written at a global index g; a sentence that joined at g0 is at its own
step g - g0 (its timing signal, GO, length penalty and decode limit, `input_lengths`' input
length + extra length) and attends to cache positions g0..g only
(`SlotDecoding.step`: the other positions get t2t's large negative bias, an exact zero in
the softmax). Its encoder output is computed when it joins, among sentences of its own length
(no padding), then padded into the rows' [B, L, ...] memory with masked positions. A compiled
step function (one trace per configuration, every dimension dynamic) runs up to
`steps_per_call` steps; between calls, `run` retires the rows that have stopped (the rows
left are gathered: no stopped row is computed again) and `admit` appends new sentences.
When rows leave, the cache is cut to the positions the live rows use (from the oldest one's
start, shifted to position 0) and the memory to their longest input; when g reaches the
cache's capacity M, the caches are shifted left likewise (compaction) or M grows. The rows
are exactly the live sentences, not a fixed set of slots: an empty slot would cost a whole
row's step, and a step's cost follows its rows (`bench/bench_slot_step.py`); the price is a
gather or concat of the state when sentences leave or join (once per call at most).

Each sentence's result is that of the search of the sentence alone (`driver.infer` with the
same settings): the same ops on the same values, except float summation order over
masked (zero) positions and the rows of a batch, as any batched decoding.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from t2t_lite.search import beam_search
from t2t_lite.search.beam_search import INF
from t2t_lite.search.sampling import Sampling

# The cache spans a multiple of this many positions (fewer shapes; fewer, larger copies).
CACHE_SPAN_STEP = 16
# t2t's attention bias of a padding position (common_attention.LARGE_NEGATIVE).
LARGE_NEGATIVE = -1e9


def supports(model) -> str | None:
    """Why `model` cannot be decoded in slots, or None when it can: it needs
    `slot_decoding` (a single Transformer, not an ensemble), argmax greedy decoding
    (no sampling) and a decoder `slot_decoding` accepts (`slot_decoding_refusal`)."""
    if not hasattr(model, "slot_decoding"):
        return "the model has no slot decoding (an ensemble?)"
    sampling = Sampling.from_hparams(model.hparams)
    if sampling.method == "random" and sampling.temp != 0.0:
        return "greedy decoding samples (hparams sampling_method=random)"
    return model.slot_decoding_refusal()


@dataclasses.dataclass
class Finished:
    """A sentence whose search has ended.

    Attributes:
      token: what `admit` was given with it.
      outputs: int32 [top_beams, limit] ids (greedy: [1, limit]), zeros after its steps.
      scores: float32 [top_beams].
    """
    token: object
    outputs: np.ndarray
    scores: np.ndarray


def _spec(tensor: tf.Tensor, *dynamic: int) -> tf.TensorSpec:
    """The spec of `tensor` with axis 0 and the `dynamic` axes of any size."""
    shape = [None if axis == 0 or axis in dynamic else size
             for axis, size in enumerate(tensor.shape.as_list())]
    return tf.TensorSpec(shape, tensor.dtype)


def _state_spec(state: dict) -> dict:
    """The run function's signature: rows, cache positions (M) and memory length (L) vary."""
    spec = {name: _spec(value) for name, value in state.items()
            if name not in ("cache", "memory_kv", "encdec_bias")}
    spec["cache"] = tf.nest.map_structure(lambda c: _spec(c, 2), state["cache"])
    spec["memory_kv"] = tf.nest.map_structure(lambda c: _spec(c, 2), state["memory_kv"])
    spec["encdec_bias"] = _spec(state["encdec_bias"], 3)
    return spec


class SlotSearch:
    """The live sentences of a continuous search (see the module docstring). Not
    thread-safe: one per decoding thread (the traced functions may be shared, `functions`).

    Args:
      model: a Transformer (`slot_decoding`; see `supports`).
      beam_size: 1 = greedy (argmax), > 1 = beam search.
      alpha: the length penalty's exponent.
      extra_length: a row decodes at most its input length (EOS included) + this.
      max_input_length: the longest input admitted (sets the id buffers' length).
      top_beams: hypotheses returned per sentence (beam search; > 1 is t2t's
        return_beams, which does not stop early).
      target_space_id: the problem's.
      eos_id: the id that ends a hypothesis.
      steps_per_call: steps run by one `run` (fewer: every row stopped).
      functions: a dict shared by the searches of one model (their traced functions).
    """

    def __init__(self, model, beam_size: int, alpha: float, extra_length: int,
                 max_input_length: int, top_beams: int = 1, target_space_id: int = 0,
                 eos_id: int = beam_search.EOS_ID, steps_per_call: int = 4,
                 functions: dict | None = None):
        if not 1 <= top_beams <= beam_size:
            raise ValueError(f"top_beams={top_beams} must be between 1 and {beam_size}")
        self.model = model
        self.beam_size = int(beam_size)
        self.alpha = float(alpha)
        self.extra_length = int(extra_length)
        self.buffer = int(max_input_length) + self.extra_length
        self.top_beams = int(top_beams)
        self.target_space_id = int(target_space_id)
        self.eos_id = int(eos_id)
        self.steps_per_call = int(steps_per_call)
        self._functions = {} if functions is None else functions
        self._key = (self.beam_size, self.alpha, self.top_beams == 1, self.eos_id, self.buffer)
        self._state: dict | None = None  # the rows' tensors
        self._first = np.zeros([0], np.int32)  # cache position of each row's step 0
        self._limit = np.zeros([0], np.int32)  # each row's number of steps at most
        self._lengths = np.zeros([0], np.int32)  # each row's input length
        self._tokens: list = []
        self._g = 0  # the cache position the next step writes
        self._capacity = 0  # M
        self.last_steps = 0  # the steps the last `run` ran

    # ----------------------------------------------------------------------------- host
    def __len__(self) -> int:
        """The live sentences."""
        return len(self._tokens)

    def admit(self, id_lists: Sequence[Sequence[int]], tokens: Sequence) -> None:
        """Adds sentences to the search; they start at the next step.

        Args:
          id_lists: input ids of each sentence, EOS last (at most max_input_length).
          tokens: one object per sentence, returned with its result.
        """
        if not id_lists:
            return
        too_long = [len(ids) for ids in id_lists if len(ids) > self.buffer - self.extra_length]
        if too_long:
            raise ValueError(f"an input of {too_long[0]} ids is longer than "
                             f"max_input_length={self.buffer - self.extra_length}")
        order = sorted(range(len(id_lists)), key=lambda i: len(id_lists[i]))
        groups: dict[int, list[int]] = {}
        for i in order:
            groups.setdefault(len(id_lists[i]), []).append(i)
        if self._state is None:
            self._g, self._capacity = 0, _cache_span(self.steps_per_call)
            self._state = self._empty_state()
        append = self._function("append", self._append_graph, [
            _state_spec(self._state), tf.TensorSpec([None, None], tf.int32),
            tf.TensorSpec([], tf.int32)])
        for members in groups.values():
            # One encoder call per input length: no padding in the encoder.
            ids = tf.constant(np.array([list(id_lists[i]) for i in members], np.int32))
            self._state = append(self._state, ids, tf.constant(self.target_space_id))
        sorted_lists = [id_lists[i] for members in groups.values() for i in members]
        self._first = np.concatenate([self._first, np.full(len(id_lists), self._g, np.int32)])
        lengths = np.array([len(ids) for ids in sorted_lists], np.int32)
        self._lengths = np.concatenate([self._lengths, lengths])
        self._limit = np.concatenate([self._limit, lengths + self.extra_length])
        self._tokens += [tokens[i] for members in groups.values() for i in members]

    def run(self) -> list[Finished]:
        """Runs up to `steps_per_call` steps of every live sentence; returns (and removes)
        the sentences whose search has ended."""
        if not self._tokens:
            return []
        self._make_room()
        run = self._function("run", self._run_graph, [
            _state_spec(self._state), tf.TensorSpec([], tf.int32),
            tf.TensorSpec([None], tf.int32), tf.TensorSpec([None], tf.int32),
            tf.TensorSpec([], tf.int32)])
        self._state, g, stopped = run(self._state, tf.constant(self._g, tf.int32),
                                      tf.constant(self._first), tf.constant(self._limit),
                                      tf.constant(self.steps_per_call, tf.int32))
        self.last_steps = int(g) - self._g
        self._g = int(g)
        stopped = np.asarray(stopped)
        if not stopped.any():
            return []
        finished = self._results(np.flatnonzero(stopped))
        keep = np.flatnonzero(~stopped)
        if keep.size == 0:
            self._state, self._tokens = None, []
            self._first, self._limit = self._first[:0], self._limit[:0]
            self._lengths = self._lengths[:0]
            return finished
        self._first, self._limit = self._first[keep], self._limit[keep]
        self._lengths = self._lengths[keep]
        self._tokens = [self._tokens[i] for i in keep]
        self._state = self._gather(self._state, keep)
        return finished

    def _results(self, rows: np.ndarray) -> list[Finished]:
        state = self._state
        if self.beam_size == 1:
            seq, scores = state["seq"].numpy()[:, None, :], state["log_prob"].numpy()[:, None]
        else:
            flags = state["finished_flags"].numpy().any(axis=1)
            seq = np.where(flags[:, None, None], state["finished_seq"].numpy(),
                           state["alive_seq"].numpy())[:, :, 1:]
            scores = np.where(flags[:, None], state["finished_scores"].numpy(),
                              state["alive_log_probs"].numpy())
        return [Finished(self._tokens[r], seq[r, :self.top_beams, :self._limit[r]],
                         scores[r, :self.top_beams]) for r in rows]

    def _make_room(self) -> None:
        """Shifts the caches left by the oldest row's start, or grows them, so that this
        call's steps fit (g + steps_per_call <= M)."""
        if self._g + self.steps_per_call <= self._capacity:
            return
        shift = int(self._first.min())
        cache = self._state["cache"]
        if shift > 0:
            # Positions before a row's start are masked: what rolls round is never read.
            cache = tf.nest.map_structure(lambda c: tf.roll(c, -shift, axis=2), cache)
            self._first = self._first - shift
            self._g -= shift
        if self._g + self.steps_per_call > self._capacity:
            self._capacity = _cache_span(self._g + self.steps_per_call)
            cache = tf.nest.map_structure(lambda c: _pad_axis(c, 2, self._capacity), cache)
        self._state["cache"] = cache

    def _gather(self, state: dict, rows: np.ndarray) -> dict:
        """The state of `rows` (the live ones, whose `_first` and `_lengths` are set), its
        cache cut to the positions they use (from the oldest one's start, shifted to 0)
        and its memory to their longest input: the steps' cost follows M and L."""
        beam_rows = (rows[:, None] * self.beam_size + np.arange(self.beam_size)).reshape(-1)
        shift = int(self._first.min())
        self._capacity = _cache_span(self._g - shift + self.steps_per_call)
        cache = tf.nest.map_structure(
            lambda c: _pad_axis(tf.gather(c, beam_rows)[:, :, shift:self._g], 2,
                                self._capacity), state["cache"])
        self._first = self._first - shift
        self._g -= shift
        width = int(self._lengths.max())
        memory_kv = [{name: tf.gather(layer[name], rows)[:, :, :width] for name in layer}
                     for layer in state["memory_kv"]]
        encdec_bias = tf.gather(state["encdec_bias"], rows)[..., :width]
        rest = tf.nest.map_structure(
            lambda t: tf.gather(t, rows),
            {k: v for k, v in state.items() if k not in ("cache", "memory_kv", "encdec_bias")})
        return dict(rest, cache=cache, memory_kv=memory_kv, encdec_bias=encdec_bias)

    def _initial_rows(self, n: int) -> dict:
        k, length = self.beam_size, self.buffer
        if k == 1:
            return {"seq": tf.zeros([n, length], tf.int32), "log_prob": tf.zeros([n]),
                    "hit_eos": tf.zeros([n], tf.bool), "last": tf.zeros([n, 1], tf.int32)}
        seq = tf.zeros([n, k, length + 1], tf.int32)  # column 0: the start id 0
        return {"alive_seq": seq,
                "alive_log_probs": tf.tile(tf.constant([[0.0] + [-INF] * (k - 1)]), [n, 1]),
                "finished_seq": seq, "finished_scores": tf.ones([n, k]) * -INF,
                "finished_flags": tf.zeros([n, k], tf.bool)}

    def _function(self, name: str, graph, signature):
        key = self._key + (name,)
        if key not in self._functions:
            self._functions[key] = tf.function(graph, autograph=False,
                                               input_signature=signature)
        return self._functions[key]

    def _empty_state(self) -> dict:
        """The state of no rows: a cache of `_capacity` positions, a memory of length 0."""
        function = self._function("empty", self._empty_graph, [tf.TensorSpec([], tf.int32)])
        return function(tf.constant(self._capacity))

    # ---------------------------------------------------------------------------- graphs
    def _empty_graph(self, capacity):
        slot = self.model.slot_decoding()
        memory_kv, encdec_bias = slot.encode(tf.zeros([0, 1], tf.int32), 0)
        return dict(self._initial_rows(0), cache=self.model.init_decode_cache(0, capacity),
                    memory_kv=memory_kv, encdec_bias=encdec_bias)

    def _append_graph(self, state, inputs, target_space_id):
        """`state` with the sentences `inputs` [n, L] (one length, EOS last) appended:
        encoded, their memory and the rows' padded to the longer length (masked), fresh
        hypotheses, zero caches of the state's capacity."""
        memory_kv, encdec_bias = self.model.slot_decoding().encode(inputs, target_space_id)
        width = tf.maximum(tf.shape(encdec_bias)[3], tf.shape(state["encdec_bias"])[3])

        def pad(tensor, axis, value=0.0):
            paddings = [[0, 0]] * tensor.shape.rank
            paddings[axis] = [0, width - tf.shape(tensor)[axis]]
            return tf.pad(tensor, paddings, constant_values=tf.cast(value, tensor.dtype))

        rows = tf.shape(inputs)[0]
        new = dict(self._initial_rows(rows),
                   cache=self.model.init_decode_cache(rows * self.beam_size,
                                                      tf.shape(next(iter(
                                                          state["cache"].values()))["k"])[2]),
                   memory_kv=[{name: pad(layer[name], 2) for name in layer}
                              for layer in memory_kv],
                   encdec_bias=pad(encdec_bias, 3, LARGE_NEGATIVE))
        old = dict(state, memory_kv=[{name: pad(layer[name], 2) for name in layer}
                                     for layer in state["memory_kv"]],
                   encdec_bias=pad(state["encdec_bias"], 3, LARGE_NEGATIVE))
        return tf.nest.map_structure(lambda a, b: tf.concat([a, b], axis=0), old, new)

    def _run_graph(self, state, g, first, limit, steps):
        # The rows' own steps stay below g + steps - min(first) in this call.
        slot = self.model.slot_decoding(max_positions=g + steps - tf.reduce_min(first) + 1)
        body = self._greedy_step if self.beam_size == 1 else self._beam_step
        stopped_fn = self._greedy_stopped if self.beam_size == 1 else self._beam_stopped

        def cond(n, g, state, stopped):
            return tf.logical_and(n < steps, tf.logical_not(tf.reduce_all(stopped)))

        def loop(n, g, state, stopped):
            state = body(slot, state, g, first, limit, stopped)
            return n + 1, g + 1, state, stopped_fn(state, g + 1 - first, limit)

        _, g, state, stopped = tf.while_loop(
            cond, loop, (tf.constant(0), g, state, stopped_fn(state, g - first, limit)),
            parallel_iterations=1,
            shape_invariants=(tf.TensorShape([]), tf.TensorShape([]),
                              tf.nest.map_structure(lambda t: t.shape, state),
                              tf.TensorShape([None])))
        return state, g, stopped

    def _greedy_stopped(self, state, t, limit):
        return tf.logical_or(t >= limit, state["hit_eos"])

    def _greedy_step(self, slot, state, g, first, limit, stopped):
        """greedy.greedy's body for rows at their own step t = g - first (argmax)."""
        t = g - first
        logits, cache = slot.step(state["last"], g, first, state["cache"],
                                  state["memory_kv"], state["encdec_bias"])
        log_probs = beam_search.log_prob_from_logits(logits)
        token = tf.argmax(logits, axis=-1, output_type=tf.int32)
        chosen = tf.gather(log_probs, token, axis=1, batch_dims=1)
        hit_eos = state["hit_eos"]
        log_prob = tf.where(stopped, state["log_prob"],
                            state["log_prob"] + chosen * (1.0 - tf.cast(hit_eos, tf.float32)))
        hit_eos = tf.where(stopped, hit_eos, tf.logical_or(hit_eos, tf.equal(token,
                                                                             self.eos_id)))
        columns = tf.range(tf.shape(state["seq"])[1])
        column = tf.logical_and(tf.equal(columns[None, :], t[:, None]),
                                tf.logical_not(stopped)[:, None])
        return dict(state, cache=cache, log_prob=log_prob, hit_eos=hit_eos,
                    seq=tf.where(column, token[:, None], state["seq"]),
                    last=tf.where(stopped[:, None], state["last"], token[:, None]))

    def _bound_met(self, state, limit):
        # beam_search_buffers' bound_met with each row's own length; n-best lists compare
        # a row's lowest finished score, as a search of that sentence alone does.
        return beam_search.bound_met(state["alive_log_probs"], state["finished_scores"], limit,
                                     self.alpha, "best" if self.top_beams == 1 else "row_worst")

    def _beam_stopped(self, state, t, limit):
        return tf.logical_or(tf.greater_equal(t, limit), self._bound_met(state, limit))

    def _beam_step(self, slot, state, g, first, limit, stopped):
        """beam_search_buffers' inner_loop for rows at their own step t = g - first."""
        k = self.beam_size
        vocab_size = self.model.vocab_size
        alive_seq, alive_log_probs = state["alive_seq"], state["alive_log_probs"]
        batch_size = tf.shape(alive_seq)[0]
        t = g - first
        column_t = tf.clip_by_value(t, 0, tf.shape(alive_seq)[2] - 1)
        flat_ids = tf.reshape(tf.gather(alive_seq, column_t[:, None], axis=2, batch_dims=1),
                              [batch_size * k, 1])
        flat_logits, cache = slot.step(flat_ids, g, tf.repeat(first, k), state["cache"],
                                       state["memory_kv"], state["encdec_bias"],
                                       float32_logits=False)
        logits = tf.reshape(flat_logits, [batch_size, k, vocab_size])
        penalty = beam_search.length_penalty(t + 1, self.alpha)  # [B]
        topk_scores, topk_flat_ids = beam_search.best_extensions(
            logits, alive_log_probs, penalty[:, None, None], 2 * k)
        topk_log_probs, topk_beam_index, topk_ids, topk_finished = (
            beam_search.split_extensions(topk_scores, topk_flat_ids, penalty[:, None],
                                         vocab_size, self.eos_id))
        is_column = tf.equal(tf.range(tf.shape(alive_seq)[2])[None, :], (t + 1)[:, None])
        topk_seq = tf.where(is_column[:, None, :], topk_ids[:, :, None],
                            tf.gather(alive_seq, topk_beam_index, batch_dims=1))
        new_alive_seq, new_alive_log_probs, parent_beams = beam_search.grow_alive(
            topk_seq, topk_scores, topk_log_probs, topk_beam_index, topk_finished, k)
        parent_rows = tf.reshape(parent_beams + tf.range(batch_size)[:, None] * k, [-1])
        cache = tf.nest.map_structure(lambda s: tf.gather(s, parent_rows, axis=0), cache)

        finished_seq, finished_scores = state["finished_seq"], state["finished_scores"]
        finished_flags = state["finished_flags"]
        new_finished = beam_search.grow_finished(finished_seq, finished_scores, finished_flags,
                                                 topk_seq, topk_scores, topk_finished, k)
        keep = stopped[:, None]
        return dict(
            state, cache=cache,
            alive_seq=tf.where(keep[:, :, None], alive_seq, new_alive_seq),
            alive_log_probs=tf.where(keep, alive_log_probs, new_alive_log_probs),
            finished_seq=tf.where(keep[:, :, None], finished_seq, new_finished[0]),
            finished_scores=tf.where(keep, finished_scores, new_finished[1]),
            finished_flags=tf.where(keep, finished_flags, new_finished[2]))


def _cache_span(positions: int) -> int:
    """The cache positions M to hold `positions`: the next multiple of CACHE_SPAN_STEP.
    Every new M is a new shape for the step's kernels (oneDNN caches a primitive per
    shape), so M takes one value in CACHE_SPAN_STEP; the positions past g are masked like
    those before a row's start."""
    return -(-positions // CACHE_SPAN_STEP) * CACHE_SPAN_STEP


def _pad_axis(tensor: tf.Tensor, axis: int, size: int, value: float = 0) -> tf.Tensor:
    """`tensor` padded at the end of `axis` to `size` with `value`."""
    extra = size - int(tensor.shape[axis])
    if extra <= 0:
        return tensor
    paddings = [[0, 0]] * tensor.shape.rank
    paddings[axis] = [0, extra]
    return tf.pad(tensor, paddings, constant_values=tf.cast(value, tensor.dtype))
