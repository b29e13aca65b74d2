"""Continuous (iteration-level) batching: sentences join and leave a running search between
decode steps, so that a batch no longer runs until its slowest row and a new sentence does
not wait for a whole batch (a translation server's decoder).

`SlotSearch` keeps the live sentences as the rows of one search: greedy decoding
(`greedy.Greedy`) or t2t's beam search (`beam_search.BeamSearch`), the same steps as the
batch search's, with each sentence at its own step t (its timing signal, GO, length
penalty and decode limit, its input length + extra length) and stopping where it would
alone (`rows_alone`). The model keeps the rows' cache (`interface.SlotDecoding`): it
encodes a sentence when it joins, among sentences of its own length, reorders the rows with
the beams, evicts the rows of the sentences that leave and compacts what is left; the
search only says which sentences and at which steps. A compiled function (one trace per
configuration, every dimension dynamic) runs up to `steps_per_call` steps of the loop
(`loop.run_steps`); between calls, `run` retires the sentences that have stopped (the rows
left are gathered: no stopped row is computed again) and `admit` appends new ones. The rows
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

from t2t_lite.search import beam_search, greedy, loop, sampling


def supports(model) -> str | None:
    """Why `model` cannot be decoded in slots, or None when it can: it needs
    `slot_decoding` (a single Transformer, not an ensemble), argmax greedy decoding
    (no sampling: `model.sampling`) and a decoder `slot_decoding` accepts
    (`slot_decoding_refusal`)."""
    if not hasattr(model, "slot_decoding"):
        return "the model has no slot decoding (an ensemble?)"
    if model.sampling.method == "random" and model.sampling.temp != 0.0:
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


def _spec(tensor: tf.Tensor) -> tf.TensorSpec:
    """The spec of a state tensor: any number of sentences (axis 0)."""
    return tf.TensorSpec([None] + tensor.shape.as_list()[1:], tensor.dtype)


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
      functions: a dict shared by the searches of one model (their traced functions; alpha
        is an input of them, so searches with any alpha share them).
    """

    def __init__(self, model, beam_size: int, alpha: float, extra_length: int,
                 max_input_length: int, top_beams: int = 1, target_space_id: int = 0,
                 eos_id: int = beam_search.EOS_ID, steps_per_call: int = 4,
                 functions: dict | None = None):
        if not 1 <= top_beams <= beam_size:
            raise ValueError(f"top_beams={top_beams} must be between 1 and {beam_size}")
        self.slots = model.slot_decoding(int(beam_size))
        self.beam_size = int(beam_size)
        self.extra_length = int(extra_length)
        self.buffer = int(max_input_length) + self.extra_length
        self.top_beams = int(top_beams)
        self.target_space_id = int(target_space_id)
        self.steps_per_call = int(steps_per_call)
        self.vocab_size = model.vocab_size
        self.eos_id = int(eos_id)
        self.alpha = float(alpha)
        # The host's strategy (start, result); a compiled run builds its own from its alpha
        # input, so that searches differing only in alpha share the traced functions.
        self.strategy = self._strategy(self.alpha)
        self._functions = {} if functions is None else functions
        self._key = (self.beam_size, self.top_beams == 1, self.eos_id, self.buffer,
                     self.extra_length)
        self._state: dict | None = None  # the search's tensors of the live sentences
        self._cache = None  # the model's
        self._steps = np.zeros([0], np.int32)  # each sentence's own step t
        self._limit = np.zeros([0], np.int32)  # each sentence's number of steps at most
        self._tokens: list = []
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
            empty = self._function("empty", self._empty_graph, [tf.TensorSpec([], tf.int32)])
            self._state, self._cache = empty(tf.constant(self.steps_per_call))
        append = self._function("append", self._append_graph, [
            self._state_spec(), self.slots.spec(self._cache),
            tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([], tf.int32)])
        for members in groups.values():
            # One encoder call per input length: no padding in the encoder.
            ids = tf.constant(np.array([list(id_lists[i]) for i in members], np.int32))
            self._state, self._cache = append(self._state, self._cache, ids,
                                              tf.constant(self.target_space_id))
        lengths = np.array([length for length, members in groups.items()
                            for _ in members], np.int32)
        self._steps = np.concatenate([self._steps, np.zeros(len(id_lists), np.int32)])
        self._limit = np.concatenate([self._limit, lengths + self.extra_length])
        self._tokens += [tokens[i] for members in groups.values() for i in members]

    def run(self) -> list[Finished]:
        """Runs up to `steps_per_call` steps of every live sentence; returns (and removes)
        the sentences whose search has ended."""
        if not self._tokens:
            return []
        self._cache = self.slots.make_room(self._cache, self._steps, self.steps_per_call)
        run = self._function("run", self._run_graph, [
            self._state_spec(), self.slots.spec(self._cache), tf.TensorSpec([None], tf.int32),
            tf.TensorSpec([], tf.int32), tf.TensorSpec([], tf.float32)])
        self._state, self._cache, steps, stopped = run(
            self._state, self._cache, tf.constant(self._steps),
            tf.constant(self.steps_per_call, tf.int32), tf.constant(self.alpha, tf.float32))
        self.last_steps = int(steps)
        self._steps = self._steps + self.last_steps
        stopped = np.asarray(stopped)
        if not stopped.any():
            return []
        finished = self._results(np.flatnonzero(stopped))
        keep = np.flatnonzero(~stopped)
        if keep.size == 0:
            self._state = self._cache = None
            self._tokens = []
            self._steps, self._limit = self._steps[:0], self._limit[:0]
            return finished
        self._state = tf.nest.map_structure(lambda tensor: tf.gather(tensor, keep),
                                            self._state)
        self._cache = self.slots.keep(self._cache, keep, self._steps[keep],
                                      self.steps_per_call)
        self._steps, self._limit = self._steps[keep], self._limit[keep]
        self._tokens = [self._tokens[i] for i in keep]
        return finished

    def _results(self, rows: np.ndarray) -> list[Finished]:
        seq, scores = (np.asarray(tensor) for tensor in self.strategy.result(self._state))
        if self.beam_size == 1:
            seq, scores = seq[:, None, :], scores[:, None]
        else:
            seq = seq[:, :, 1:]  # without the start column
        return [Finished(self._tokens[r], seq[r, :self.top_beams, :self._limit[r]],
                         scores[r, :self.top_beams]) for r in rows]

    def _state_spec(self) -> dict:
        return tf.nest.map_structure(_spec, self._state)

    def _function(self, name: str, graph, signature):
        key = self._key + (name,)
        if key not in self._functions:
            self._functions[key] = tf.function(graph, autograph=False,
                                               input_signature=signature)
        return self._functions[key]

    # ---------------------------------------------------------------------------- graphs
    def _strategy(self, alpha):
        """Greedy (argmax) or beam search with the length penalty's exponent `alpha` (a
        float, or a float32 scalar tensor inside a compiled run)."""
        if self.beam_size == 1:
            return greedy.Greedy(lambda logits, t: sampling.sample(logits, sampling.Sampling()),
                                 self.eos_id, rows_alone=True)
        # n-best lists compare a sentence's lowest finished score, as a search of that
        # sentence alone does.
        return beam_search.BeamSearch(
            self.beam_size, self.vocab_size, alpha, self.eos_id,
            "best" if self.top_beams == 1 else "row_worst", rows_alone=True)

    def _start(self, rows, limit) -> dict:
        """The search's state of `rows` new sentences (start id 0)."""
        return self.strategy.start(tf.zeros([rows], tf.int32), self.buffer, limit)

    def _empty_graph(self, room):
        """No sentences: the search's state and the model's cache, with room for `room`
        steps."""
        return self._start(0, tf.zeros([0], tf.int32)), self.slots.empty(room)

    def _append_graph(self, state, cache, inputs, target_space_id):
        """`state` and `cache` with the sentences `inputs` [n, L] (one length, EOS last)
        appended: fresh hypotheses, limit L + extra_length, and the model's rows."""
        rows, length = tf.shape(inputs)[0], tf.shape(inputs)[1]
        new = self._start(rows, tf.fill([rows], length + self.extra_length))
        state = tf.nest.map_structure(lambda a, b: tf.concat([a, b], axis=0), state, new)
        return state, self.slots.admit(cache, inputs, target_space_id)

    def _run_graph(self, state, cache, t, steps, alpha):
        # The sentences' own steps stay below max(t) + steps + 1 in this call.
        decoder = self.slots.decoder(cache, tf.reduce_max(t) + steps + 1,
                                     float32_logits=self.beam_size == 1)
        strategy = self._strategy(alpha)
        state, _, cache, steps_run, stopped = loop.run_steps(strategy, state, decoder, t,
                                                             steps)
        return state, cache, steps_run, stopped
