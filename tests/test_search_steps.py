"""One step per strategy (`search/interface.py`): the greedy and beam-search steps take a
step per sentence, the continuous search runs them over a model it knows only through
`SlotDecoding` (here a toy model whose cache must follow the beams), and each sentence's
result is its batch search alone; the search package imports nothing of t2t_lite outside
itself."""
import ast
import pathlib

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.search import beam_search, continuous, greedy, sampling
from t2t_lite.search.interface import Decoder

EOS = 1
V = 7  # 0 = start, 1 = EOS, 2..6 tokens
HISTORIES = 5  # the toy model's cache: a hash of the ids a hypothesis has read
SEARCH = pathlib.Path(__file__).resolve().parents[1] / "t2t_lite" / "search"


def _tables(seed: int, count: int) -> np.ndarray:
    """[count, HISTORIES, V] log-probabilities (EOS likely enough to end most sentences)."""
    logits = np.random.default_rng(seed).normal(size=(count, HISTORIES, V)) * 2.0
    logits[:, :, 0] = -30.0  # never the start id
    logits[:, :, EOS] += 0.5
    return (logits - np.log(np.exp(logits).sum(-1, keepdims=True))).astype(np.float32)


def _markov_step(tables: tf.Tensor):
    """The toy model's step: the history hash h <- (7 h + id) mod 5 is its cache, which
    follows the hypotheses; the logits are tables[table of the sentence, h]."""

    def step(ids, t, cache):
        history = (cache["history"] * 7 + ids[:, -1]) % HISTORIES
        logits = tf.gather_nd(tables, tf.stack([cache["table"], history], axis=1))
        return logits, dict(cache, history=history)

    return step


def _gather(cache, rows):
    return tf.nest.map_structure(lambda c: tf.gather(c, rows), cache)


class MarkovSlots:
    """The toy model's side of continuous batching: sentence [r, ..., EOS] reads table r;
    its cache is a dict of [N] rows, which the search never looks into."""

    def __init__(self, tables: tf.Tensor, beam_size: int):
        self.tables, self.beam_size = tables, beam_size

    def empty(self, room):
        return {"history": tf.zeros([0], tf.int32), "table": tf.zeros([0], tf.int32)}

    def admit(self, cache, inputs, target_space_id):
        table = tf.repeat(inputs[:, 0], self.beam_size)
        new = {"history": tf.zeros_like(table), "table": table}
        return tf.nest.map_structure(lambda a, b: tf.concat([a, b], 0), cache, new)

    def spec(self, cache):
        return tf.nest.map_structure(lambda c: tf.TensorSpec([None], c.dtype), cache)

    def decoder(self, cache, max_steps, float32_logits):
        return Decoder(_markov_step(self.tables), cache, _gather)

    def make_room(self, cache, steps, room):
        return cache

    def keep(self, cache, rows, steps, room):
        beam_rows = (rows[:, None] * self.beam_size + np.arange(self.beam_size)).reshape(-1)
        return _gather(cache, beam_rows)


class MarkovModel:
    """What `SlotSearch` asks of a model: `slot_decoding(beam_size)` and `vocab_size`."""

    vocab_size = V

    def __init__(self, tables: np.ndarray):
        self.tables = tf.constant(tables)

    def slot_decoding(self, beam_size: int) -> MarkovSlots:
        return MarkovSlots(self.tables, beam_size)


def _alone(tables: np.ndarray, table: int, length: int, beam_size: int, top_beams: int):
    """The batch search of one sentence (t2t's states convention): ids [K, T], scores [K]."""
    states = {"history": tf.zeros([1], tf.int32), "table": tf.constant([table])}
    step = _markov_step(tf.constant(tables))
    if beam_size == 1:
        ids, scores, steps = greedy.greedy(
            lambda ids, i, s: step(ids, i, s), 1, length, states,
            lambda logits, t: tf.argmax(logits, -1, output_type=tf.int32), False, EOS)
        return ids.numpy()[:, :int(steps)], scores.numpy()
    ids, scores, _, steps = beam_search.beam_search_buffers(
        lambda ids, i, s: step(ids, i, s), tf.zeros([1], tf.int32), beam_size, length, V, 0.6,
        states=states, stop_early=top_beams == 1, max_decode_length=length)
    return ids.numpy()[0, :top_beams, 1:int(steps) + 1], scores.numpy()[0, :top_beams]


@pytest.mark.parametrize("beam_size,top_beams", [(1, 1), (3, 1), (3, 3)])
def test_continuous_search_gives_each_sentence_its_search_alone(beam_size, top_beams):
    tables = _tables(beam_size + top_beams, 6)
    # Sentence i reads table i % 6; its input length sets its limit (length + 2).
    inputs = [[i % 6] + [2] * (i % 4) + [EOS] for i in range(14)]
    search = continuous.SlotSearch(MarkovModel(tables), beam_size, 0.6, 2, 8,
                                   top_beams=top_beams, steps_per_call=2)
    done, waiting, live = {}, list(range(len(inputs))), []
    while waiting or len(search):  # three join before every call of 2 steps
        joining, waiting = waiting[:3], waiting[3:]
        search.admit([inputs[i] for i in joining], joining)
        live.append(len(search))
        done.update((f.token, f) for f in search.run())
    assert max(live) > 3  # sentences at different steps decoded together
    for i, ids in enumerate(inputs):
        want_ids, want_scores = _alone(tables, i % 6, len(ids) + 2, beam_size, top_beams)
        got, steps = done[i].outputs, want_ids.shape[1]
        np.testing.assert_array_equal(got[:, :steps], want_ids)
        assert not got[:, steps:].any()  # nothing after EOS, however long the others run
        np.testing.assert_allclose(done[i].scores, want_scores, rtol=1e-6)


@pytest.mark.parametrize("strategy", [
    greedy.Greedy(lambda logits, t: tf.argmax(logits, -1, output_type=tf.int32), EOS),
    greedy.Greedy(lambda logits, t: tf.argmax(logits, -1, output_type=tf.int32), EOS,
                  rows_alone=True),
    beam_search.BeamSearch(3, V, 0.6, EOS, rows_alone=True),
    beam_search.BeamSearch(3, V, 1.0, EOS, "batch_worst"),
])
def test_a_step_per_sentence_equals_one_step_for_all(strategy):
    # The same step with t a scalar (the batch search) and t [B] of equal values (the
    # continuous search's when every sentence is at that step): the same state, bit for bit.
    tables = tf.constant(_tables(3, 4))
    rows = 4 * strategy.beams
    logits = tf.gather_nd(tables, tf.stack([tf.range(rows) % 4, tf.range(rows) % 5], 1))
    state = strategy.start(tf.zeros([4], tf.int32), 6, tf.constant([6, 2, 6, 6]))
    for t in range(3):
        by_row = strategy.step(state, logits * (t + 1), tf.fill([4], t))
        state = strategy.step(state, logits * (t + 1), tf.constant(t))
        tf.nest.map_structure(np.testing.assert_array_equal, by_row, state)


def test_a_seeded_draw_needs_one_step_for_all_rows():
    draw = sampling.Sampling("random", 1.0, -1, 1.0, seed=3)
    logits = tf.zeros([2, V])
    assert sampling.sample(logits, draw, tf.constant(1)).shape == [2]
    with pytest.raises(ValueError, match="one step for all rows"):
        sampling.sample(logits, draw, tf.constant([1, 2]))


def test_the_search_imports_nothing_of_t2t_lite_outside_itself():
    outside = []
    for path in sorted(SEARCH.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            outside += [f"{path.name}: {name}" for name in names
                        if name.startswith("t2t_lite") and not name.startswith("t2t_lite.search")]
    assert outside == []


def test_the_model_side_checks_the_sampling_hparams_it_hands_to_the_search():
    from t2t_lite.errors import HParamsError
    from t2t_lite.models.transformer_decoding import sampling_from_hparams
    from t2t_lite.hparams_lib import create_hparams

    hparams = create_hparams("transformer_tiny", "sampling_method=random,sampling_keep_top_p=0.5")
    assert sampling_from_hparams(hparams) == sampling.Sampling("random", 1.0, -1, 0.5)
    hparams.sampling_keep_top_p = 0.0  # past the override's own check, as a caller might set it
    with pytest.raises(HParamsError, match=r"sampling_keep_top_p=0.0: must be in \(0, 1\]"):
        sampling_from_hparams(hparams)
