"""Beam search (t2t's algorithm): hand-built cases whose best beams are known, greedy
equivalence at K=1, the no-finished fallback, EOS at step 0, per-row behaviour, states, and
compiled use inside tf.function."""
import math

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.utils import beam_search

EOS = 1
A, B, C, D = 2, 3, 4, 5  # token ids of a 6-symbol vocabulary (0 = start/pad, 1 = EOS)
V = 6
NEVER = -30.0  # log-probability of "impossible" tokens (e^-30 does not move float32 sums)


def markov_table(rows: dict) -> np.ndarray:
    """[V, V] log-probabilities: rows[prev][tok] = probability; missing entries impossible."""
    table = np.full((V, V), NEVER, np.float32)
    for prev, probs in rows.items():
        for tok, p in probs.items():
            table[prev, tok] = math.log(p)
    return table


def markov_fn(tables: np.ndarray):
    """symbols_to_logits_fn reading the last id; `tables` [R, V, V] chosen per batch row by
    the state "row" (so a batch can mix behaviours and the states' reordering is used)."""
    tables = tf.constant(tables)

    def fn(ids, i, states):
        last = ids[:, -1]
        logits = tf.gather_nd(tables, tf.stack([states["row"], last], axis=1))
        return logits, states

    return fn


def run(tables, rows, beam_size, decode_length, alpha, stop_early=True):
    fn = markov_fn(np.stack(tables))
    ids, scores, _ = beam_search.beam_search(
        fn, tf.zeros([len(rows)], tf.int32), beam_size, decode_length, V, alpha,
        states={"row": tf.constant(rows, tf.int32)}, stop_early=stop_early)
    return ids.numpy(), scores.numpy()


def lp(length, alpha):
    return ((5.0 + length) / 6.0) ** alpha


# Greedy picks a (0.6) and then a's best continuation EOS: P(a EOS) = 0.24. Beam 2 also keeps
# b (0.4), whose EOS has probability 0.9: P(b EOS) = 0.36.
GREEDY_IS_WRONG = markov_table({
    0: {A: 0.6, B: 0.4},
    A: {EOS: 0.4, A: 0.3, B: 0.3},
    B: {EOS: 0.9, A: 0.05, B: 0.05},
})
# EOS is never among the top 2K candidates: nothing finishes.
NEVER_FINISHES = markov_table({
    0: {A: 0.5, B: 0.3, C: 0.15, D: 0.05},
    A: {A: 0.1, B: 0.1, C: 0.1, D: 0.7},
    B: {A: 0.9, B: 0.05, C: 0.03, D: 0.02},
    C: {A: 0.25, B: 0.25, C: 0.25, D: 0.25},
    D: {A: 0.25, B: 0.25, C: 0.25, D: 0.25},
})
# The most likely first token is EOS.
EOS_FIRST = markov_table({0: {EOS: 0.7, A: 0.3}, A: {EOS: 0.9, A: 0.1}})


def test_beam_two_beats_greedy():
    ids, scores = run([GREEDY_IS_WRONG], [0], beam_size=2, decode_length=5, alpha=0.0)
    # Step 1 candidates: bE .36, aE .24, aa .18, ab .18 -> finished {bE, aE}, alive {aa, ab};
    # ln .36 > ln .18 stops the search after 2 steps.
    np.testing.assert_array_equal(ids, [[[B, EOS], [A, EOS]]])
    np.testing.assert_allclose(scores, [[math.log(0.36), math.log(0.24)]], rtol=1e-6)


def test_beam_one_is_greedy_here():
    ids, scores = run([GREEDY_IS_WRONG], [0], beam_size=1, decode_length=5, alpha=0.0)
    np.testing.assert_array_equal(ids, [[[A, EOS]]])
    np.testing.assert_allclose(scores, [[math.log(0.24)]], rtol=1e-6)


def test_length_penalised_scores_and_longer_search():
    alpha = 0.6
    ids, scores = run([GREEDY_IS_WRONG], [0], beam_size=2, decode_length=5, alpha=alpha)
    # Finished scores are log p / ((5 + len) / 6)^alpha with len = 2 (EOS included).
    np.testing.assert_array_equal(ids[0, :, :2], [[B, EOS], [A, EOS]])
    np.testing.assert_allclose(
        scores, [[math.log(0.36) / lp(2, alpha), math.log(0.24) / lp(2, alpha)]], rtol=1e-6)
    # The bound divides the best alive log-prob by the largest penalty ((5 + 5) / 6)^0.6:
    # ln .36 / lp(2) = -0.931 > ln .18 / lp(5) = -1.262, so the search stops after 2 steps.
    assert math.log(0.36) / lp(2, alpha) > math.log(0.18) / lp(5, alpha)
    assert ids.shape == (1, 2, 2)


def test_no_finished_hypothesis_returns_alive_with_raw_log_probs():
    ids, scores = run([NEVER_FINISHES], [0], beam_size=2, decode_length=2, alpha=0.6)
    # Step 0 alive {a .5, b .3}; step 1: ad .35, ba .27, aa .05, ab .05 -> alive {ad, ba}.
    np.testing.assert_array_equal(ids, [[[A, D], [B, A]]])
    # Raw log-probs, no length penalty although alpha = 0.6.
    np.testing.assert_allclose(scores, [[math.log(0.35), math.log(0.27)]], rtol=1e-6)


def test_eos_at_step_zero():
    ids, scores = run([EOS_FIRST], [0], beam_size=2, decode_length=4, alpha=0.6)
    # Finished {E} with ln .7 / lp(1) (= ln .7); it beats the alive bound ln .3 / lp(4), so
    # one step runs. The second finished slot is still empty: zeros, score -1e7.
    np.testing.assert_array_equal(ids, [[[EOS], [0]]])
    np.testing.assert_allclose(scores, [[math.log(0.7), -1e7]], rtol=1e-6)
    ids, scores = run([EOS_FIRST], [0], beam_size=1, decode_length=4, alpha=0.0)
    np.testing.assert_array_equal(ids, [[[EOS]]])
    np.testing.assert_allclose(scores, [[math.log(0.7)]], rtol=1e-6)


def test_batch_rows_behave_independently():
    # Row 0 finishes after 2 steps, row 1 never finishes: the loop runs all 3 steps; row 0
    # keeps its finished beams, 0-padded after EOS.
    ids, scores = run([GREEDY_IS_WRONG, NEVER_FINISHES], [0, 1], beam_size=2,
                      decode_length=3, alpha=0.0)
    assert ids.shape == (2, 2, 3)
    np.testing.assert_array_equal(ids[0], [[B, EOS, 0], [A, EOS, 0]])
    np.testing.assert_allclose(scores[0], [math.log(0.36), math.log(0.24)], rtol=1e-6)
    # Row 1 alone with decode_length 3 gives the same as inside the batch.
    alone_ids, alone_scores = run([NEVER_FINISHES], [0], beam_size=2, decode_length=3,
                                  alpha=0.0)
    np.testing.assert_array_equal(ids[1], alone_ids[0])
    np.testing.assert_allclose(scores[1], alone_scores[0], rtol=1e-6)
    # Third step from {ad, ba}: bad .27 * .7 = .189, then ad* .35 * .25 = .0875 four times
    # (ties go to the lower flat index: token a first).
    np.testing.assert_array_equal(ids[1], [[B, A, D], [A, D, A]])
    np.testing.assert_allclose(scores[1], [math.log(0.189), math.log(0.0875)], rtol=1e-6)


def test_return_beams_sorted_best_first():
    table = markov_table({
        0: {A: 0.4, B: 0.35, C: 0.25},
        A: {EOS: 0.5, D: 0.5}, B: {EOS: 0.8, D: 0.2}, C: {EOS: 0.9, D: 0.1},
        D: {EOS: 1.0},
    })
    ids, scores = run([table], [0], beam_size=3, decode_length=4, alpha=0.0)
    # Step 1: bE .28, cE .225, aE .2 finish; the best alive, aD (.2), cannot beat bE: stop.
    np.testing.assert_array_equal(ids[0, :, :2], [[B, EOS], [C, EOS], [A, EOS]])
    np.testing.assert_allclose(scores[0], np.log([0.28, 0.225, 0.2]), rtol=1e-6)
    assert np.all(np.diff(scores[0]) <= 0)


def _greedy_reference(table_fn, batch, steps):
    """t2t's greedy decoding in NumPy: argmax each step, log-prob summed up to the first
    EOS (inclusive); stops when every row has emitted EOS."""
    ids = np.zeros((batch, 1), np.int64)
    scores = np.zeros(batch)
    done = np.zeros(batch, bool)
    for i in range(steps):
        logits = table_fn(ids, i)
        logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        tok = logp.argmax(-1)
        scores += np.where(done, 0.0, logp[np.arange(batch), tok])
        done |= tok == EOS
        ids = np.concatenate([ids, tok[:, None]], axis=1)
        if done.all():
            break
    return ids[:, 1:], scores


def test_beam_one_alpha_zero_equals_greedy_on_random_markov_chains():
    rng = np.random.RandomState(3)
    vocab, steps = 12, 9
    # Second-order chain: logits depend on the last two ids and the step. EOS is strongly
    # discouraged until step 6 and certain from then on, so that greedy's path is the only
    # one that finishes (beam 1 may otherwise prefer an earlier, unlikely EOS it saw as the
    # runner-up, which greedy never considers).
    table = rng.normal(size=(vocab, vocab, vocab)).astype(np.float32) * 3
    eos_bias = np.array([-50.0] * 6 + [60.0] * 10, np.float32)

    def np_fn(ids, i):
        prev = ids[:, -2] if ids.shape[1] > 1 else np.zeros(len(ids), np.int64)
        logits = table[prev, ids[:, -1]].copy()
        logits[:, EOS] += eos_bias[i]
        return logits

    def tf_fn(ids, i, states):
        prev = tf.cond(tf.shape(ids)[1] > 1, lambda: ids[:, -2], lambda: tf.zeros_like(ids[:, -1]))
        logits = tf.gather_nd(tf.constant(table), tf.stack([prev, ids[:, -1]], axis=1))
        logits += tf.one_hot(EOS, vocab) * tf.gather(tf.constant(eos_bias), i)
        return logits, states

    greedy_ids, greedy_scores = _greedy_reference(np_fn, 4, steps)
    ids, scores, _ = tf.function(
        lambda: beam_search.beam_search(tf_fn, tf.zeros([4], tf.int32), 1, steps, vocab, 0.0)
    )()
    np.testing.assert_array_equal(ids.numpy()[:, 0], greedy_ids)
    np.testing.assert_allclose(scores.numpy()[:, 0], greedy_scores, rtol=1e-5)
    assert (greedy_ids[:, -1] == EOS).all()


def test_states_are_reordered_with_their_beams():
    """A decoder that reads its history from a preallocated cache state (written at position
    i, as the Transformer's fast decoder does) must decode exactly like one reading ids."""
    rng = np.random.RandomState(0)
    vocab, steps, k, batch = 7, 6, 3, 2
    table = tf.constant(rng.normal(size=(vocab, vocab, vocab)).astype(np.float32) * 2)

    def from_ids(ids, i, states):
        prev = tf.cond(tf.shape(ids)[1] > 1, lambda: ids[:, -2], lambda: tf.zeros_like(ids[:, -1]))
        return tf.gather_nd(table, tf.stack([prev, ids[:, -1]], axis=1)), states

    def from_cache(ids, i, states):
        cache = tf.where(tf.range(steps + 1)[None, :] == i + 1, ids[:, -1:], states["cache"])
        last = tf.gather(cache, i + 1, axis=1)
        prev = tf.gather(cache, i, axis=1)
        logits = tf.gather_nd(table, tf.stack([prev, last], axis=1))
        return logits, {"cache": cache, "nested": [states["nested"][0] + 1]}

    initial = tf.zeros([batch], tf.int32)
    expected = beam_search.beam_search(from_ids, initial, k, steps, vocab, 0.6)
    states = {"cache": tf.zeros([batch, steps + 1], tf.int32),
              "nested": [tf.zeros([batch, 2], tf.float32)]}
    got_ids, got_scores, got_states = tf.function(
        lambda: beam_search.beam_search(from_cache, initial, k, steps, vocab, 0.6, states=states)
    )()
    np.testing.assert_array_equal(got_ids.numpy(), expected[0].numpy())
    # Eager and graph execution may differ in the last bit of a float.
    np.testing.assert_allclose(got_scores.numpy(), expected[1].numpy(), rtol=1e-6)
    n_steps = got_ids.shape[2]
    assert got_states["cache"].shape == (batch, k, steps + 1)
    np.testing.assert_array_equal(got_states["nested"][0].numpy(), np.full((batch, k, 2), n_steps))


def test_ids_given_to_the_model():
    seen = []

    def fn(ids, i, states):
        seen.append(ids.shape.as_list())
        tf.debugging.assert_equal(ids[:, 0], tf.constant([7, 7, 9, 9]))
        tf.debugging.assert_equal(tf.shape(ids)[1], i + 1)
        return tf.zeros([tf.shape(ids)[0], 5]), states

    ids, _, _ = beam_search.beam_search(fn, tf.constant([7, 9]), 2, 3, 5, 0.6)
    # Eager: one call per step with ids [B * K, i + 1]; all tokens equally likely, so the
    # EOS found at step 0 wins once the alive bound falls below it, after step 1.
    assert seen == [[4, 1], [4, 2]]
    assert ids.shape == (2, 2, 2)


def test_compiled_with_dynamic_batch_and_length():
    fn = markov_fn(np.stack([GREEDY_IS_WRONG, NEVER_FINISHES]))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int32), tf.TensorSpec([], tf.int32)])
    def decode(rows, decode_length):
        ids, scores, _ = beam_search.beam_search(
            fn, tf.zeros_like(rows), 2, decode_length, V, 0.0, states={"row": rows})
        return ids, scores

    ids, scores = decode(tf.constant([0, 1]), tf.constant(3))
    np.testing.assert_array_equal(ids.numpy()[0], [[B, EOS, 0], [A, EOS, 0]])
    np.testing.assert_array_equal(ids.numpy()[1], [[B, A, D], [A, D, A]])
    np.testing.assert_allclose(scores.numpy()[1], np.log([0.189, 0.0875]), rtol=1e-6)
    ids, scores = decode(tf.constant([0]), tf.constant(5))
    np.testing.assert_array_equal(ids.numpy(), [[[B, EOS], [A, EOS]]])
    np.testing.assert_allclose(scores.numpy(), np.log([[0.36, 0.24]]), rtol=1e-6)
    # One trace served both calls (batch and decode_length are dynamic).
    assert decode.experimental_get_tracing_count() == 1


def test_stop_early_false_waits_for_every_finished_slot():
    # stop_early=True stops after step 0 (finished E beats the alive bound). With False the
    # lowest finished score (here the empty slot, -1e7) must beat the bound: one more step
    # fills the slot with aE (.27), then min(ln .7, ln .27 / lp(2)) > ln .03 / lp(4).
    alpha = 0.6
    ids, scores = run([EOS_FIRST], [0], beam_size=2, decode_length=4, alpha=alpha,
                      stop_early=False)
    np.testing.assert_array_equal(ids, [[[EOS, 0], [A, EOS]]])
    np.testing.assert_allclose(scores, [[math.log(0.7), math.log(0.27) / lp(2, alpha)]],
                               rtol=1e-6)
    ids_early, _ = run([EOS_FIRST], [0], beam_size=2, decode_length=4, alpha=alpha)
    assert ids_early.shape == (1, 2, 1)


def test_bad_arguments():
    with pytest.raises(ValueError, match="beam_size"):
        beam_search.beam_search(lambda ids, i, s: (ids, s), tf.zeros([1], tf.int32), 0, 3, 5, 0.6)


# Outputs of tensor2tensor 1.15.7's own beam_search (TF graph mode, initial ids 0, the
# initial 0 column dropped) for `_rnn_fn` below. The port was also checked against t2t on 400
# random cases (batch 1-3, beam 1-5, vocab 3-11, alpha 0-1, both stop_early values, with and
# without states): identical ids and scores in every case.
T2T_EXPECTED = {
    (0.6, True): (
        [[[2, 4, 2, 4, 2, 1, 0, 0], [2, 4, 2, 4, 2, 4, 2, 1], [2, 4, 2, 1, 0, 0, 0, 0],
          [2, 1, 0, 0, 0, 0, 0, 0]]] * 3,
        [[-1.7872897386550903, -1.850167989730835, -1.970068097114563, -2.4383163452148438],
         [-1.8546866178512573, -1.9112929105758667, -2.0434951782226562, -2.449711799621582],
         [-1.759251594543457, -1.824881672859192, -1.9392062425613403, -2.4823153018951416]],
    ),
    (1.0, False): (
        [[[2, 4, 2, 4, 2, 4, 2, 1], [2, 4, 2, 4, 2, 1, 0, 0], [2, 4, 2, 1, 0, 0, 0, 0],
          [2, 8, 5, 4, 2, 4, 2, 1]]] * 2
        + [[[2, 4, 2, 4, 2, 4, 2, 1], [2, 4, 2, 4, 2, 1, 0, 0], [2, 4, 2, 1, 0, 0, 0, 0],
            [2, 4, 2, 8, 5, 4, 2, 1]]],
        [[-1.3579829931259155, -1.4024854898452759, -1.6751154661178589, -2.0733635425567627],
         [-1.4028472900390625, -1.4553717374801636, -1.7375491857528687, -2.102033853530884],
         [-1.339423418045044, -1.3804839849472046, -1.6488741636276245, -2.085646152496338]],
    ),
}


def _rnn_fn():
    """A tiny recurrent decoder (state h [B * K, 4]) with an EOS bonus growing with i."""
    rng = np.random.RandomState(1234)
    vocab, dim = 9, 4
    emb = rng.normal(size=(vocab, dim)).astype(np.float32)
    w = (rng.normal(size=(dim, dim)) * 0.5).astype(np.float32)
    wout = (rng.normal(size=(dim, vocab)) * 2.0).astype(np.float32)
    h0 = rng.normal(size=(3, dim)).astype(np.float32)

    def fn(ids, i, states):
        h = tf.tanh(tf.matmul(states["h"], w) + tf.gather(emb, ids[:, -1]))
        logits = tf.matmul(h, wout) + tf.cast(i, tf.float32) * 0.4 * tf.one_hot(1, vocab)
        return logits, {"h": h}

    return fn, h0


@pytest.mark.parametrize("alpha,stop_early", sorted(T2T_EXPECTED))
def test_matches_tensor2tensor(alpha, stop_early):
    fn, h0 = _rnn_fn()
    decode = tf.function(lambda: beam_search.beam_search(
        fn, tf.zeros([3], tf.int32), 4, 8, 9, alpha, states={"h": tf.constant(h0)},
        stop_early=stop_early))
    ids, scores, _ = decode()
    expected_ids, expected_scores = T2T_EXPECTED[(alpha, stop_early)]
    np.testing.assert_array_equal(ids.numpy(), expected_ids)
    np.testing.assert_allclose(scores.numpy(), expected_scores, rtol=1e-6)


def test_t2t_calling_conventions_and_layout():
    """t2t's `fn(ids)` without states (and `fn(ids, i)` with use_tpu) give the same search as
    t2t_lite's `fn(ids, i, states)`; keep_start_column returns t2t's [B, K, T + 1] layout."""
    table = tf.constant(GREEDY_IS_WRONG)

    def t2t_fn(ids):  # t2t's convention without states: ids in, logits out
        return tf.gather(table, ids[:, -1])

    def t2t_tpu_fn(ids, i):
        del i
        return tf.gather(table, ids[:, -1])

    def lite_fn(ids, i, states):
        return tf.gather(table, ids[:, -1]), states

    initial = tf.zeros([2], tf.int32)
    want_ids, want_scores, want_states = beam_search.beam_search(
        lite_fn, initial, 2, 5, V, 0.0)
    assert want_states is None
    assert want_ids.numpy()[0, 0].tolist()[:2] == [B, EOS]
    for fn, kwargs in ((t2t_fn, {}), (t2t_tpu_fn, {"use_tpu": True}),
                       (t2t_fn, {"use_tpu": False, "use_top_k_with_unique": False})):
        ids, scores, states = beam_search.beam_search(fn, initial, 2, 5, V, 0.0, **kwargs)
        np.testing.assert_array_equal(ids.numpy(), want_ids.numpy())
        np.testing.assert_array_equal(scores.numpy(), want_scores.numpy())
        assert states is None
    t2t_ids, t2t_scores, _ = beam_search.beam_search(
        t2t_fn, initial, 2, 5, V, 0.0, keep_start_column=True)
    assert t2t_ids.shape == (2, 2, want_ids.shape[2] + 1)
    np.testing.assert_array_equal(t2t_ids.numpy()[:, :, 0], 0)
    np.testing.assert_array_equal(t2t_ids.numpy()[:, :, 1:], want_ids.numpy())
    np.testing.assert_array_equal(t2t_scores.numpy(), want_scores.numpy())


@pytest.mark.parametrize("rows,length,k", [(3, 4 * 1024, 8), (5, 32340, 8), (2, 2048, 2),
                                           (4, 1031, 8), (2, 600, 4)])
def test_top_k_exact_equals_top_k_with_ties(rows, length, k):
    """The two-stage top-k returns tf.math.top_k's values and indices, ties to the lower
    index included (few distinct values force ties across chunk boundaries); lengths
    without a usable divisor (1031 is prime) or short rows take tf.math.top_k itself."""
    rng = np.random.RandomState(length)
    for distinct in (3, 50, None):
        if distinct is None:
            values = rng.normal(size=(rows, length)).astype(np.float32)
        else:
            values = rng.randint(0, distinct, size=(rows, length)).astype(np.float32)
        values[0, -1] = 1e3  # the best value in the last chunk
        expected = tf.math.top_k(values, k=k)
        got = tf.function(lambda x: beam_search.top_k_exact(x, k))(tf.constant(values))
        np.testing.assert_array_equal(got[1], expected.indices)
        np.testing.assert_array_equal(got[0], expected.values)


@pytest.mark.parametrize("vocab,beams", [(8192, 4), (2048, 2), (1000, 4), (4096, 1)])
def test_best_extensions_equal_top_k_of_all_scores(vocab, beams):
    """The chunked extension scores return t2t's top 2K of all K * V scores bit for bit:
    ties inside and across hypotheses (few distinct logits), -INF hypotheses (step 0),
    an odd length penalty; a vocab without a usable chunk (1000) takes the direct path."""
    rng = np.random.RandomState(vocab + beams)
    count = 2 * beams
    fn = tf.function(lambda x, a, p: beam_search.best_extensions(x, a, p, count))
    for distinct in (4, 100, None):
        if distinct is None:
            logits = rng.normal(scale=3.0, size=(3, beams, vocab)).astype(np.float32)
        else:
            logits = rng.randint(0, distinct, size=(3, beams, vocab)).astype(np.float32)
        logits[1, 0, -1] = 50.0  # the best logit in the last chunk of a row
        logits[2] = logits[2, :1]  # identical hypotheses: every score tied across beams
        alive = rng.normal(size=(3, beams)).astype(np.float32) * 4
        alive[0, 1:] = -beam_search.INF
        alive[2] = alive[2, 0]
        penalty = tf.constant(1.37, tf.float32)
        scores = (beam_search.log_prob_from_logits(tf.constant(logits))
                  + alive[:, :, None]) / penalty
        expected = tf.math.top_k(tf.reshape(scores, [3, beams * vocab]), k=count)
        got = fn(tf.constant(logits), tf.constant(alive), penalty)
        np.testing.assert_array_equal(got[1], expected.indices)
        np.testing.assert_array_equal(got[0], expected.values)


@pytest.mark.parametrize("dtype", [tf.bfloat16, tf.float16])
@pytest.mark.parametrize("vocab", [8192, 1000])
def test_best_extensions_of_half_precision_logits_equal_casting_first(dtype, vocab):
    """Half-precision logits (what a bfloat16 model hands beam search) are scored as their
    float32 casts, bit for bit: chunk maxima, gathered candidates and the direct path."""
    rng = np.random.RandomState(vocab)
    beams, count = 4, 8
    fn = tf.function(lambda x, a, p: beam_search.best_extensions(x, a, p, count))
    logits = tf.cast(rng.normal(scale=3.0, size=(3, beams, vocab)), dtype)
    alive = tf.constant(rng.normal(size=(3, beams)).astype(np.float32) * 4)
    penalty = tf.constant(1.37, tf.float32)
    got = fn(logits, alive, penalty)
    expected = fn(tf.cast(logits, tf.float32), alive, penalty)
    np.testing.assert_array_equal(got[1], expected[1])
    np.testing.assert_array_equal(got[0], expected[0])
    assert got[0].dtype == tf.float32


def test_top_k_exact_chunks():
    # A divisor near sqrt(length / k) leaving at least 2k chunks; none for short or prime rows.
    assert beam_search._chunk_length(32768, 8) == 64
    assert 32340 % beam_search._chunk_length(32340, 8) == 0
    assert beam_search._chunk_length(1031, 8) is None
    assert beam_search._chunk_length(600, 4) is None


def test_unordered_states_are_carried_untouched():
    """States given as `unordered_states` reach the step function as they were returned (not
    tiled to the beams, not reordered, free to grow), beside the ordered states; the search
    is the same as without them."""
    fn, h0 = _rnn_fn()

    def fn_with_log(ids, i, states):
        ordered, unordered = states
        # [B, i, 1]: a position per step, batch-sized (3), never tiled or reordered.
        tf.debugging.assert_equal(tf.shape(unordered["log"]), tf.stack([3, i, 1]))
        logits, ordered = fn(ids, i, ordered)
        log = tf.concat([unordered["log"], tf.fill([3, 1, 1], tf.cast(i, tf.float32))], axis=1)
        return logits, (ordered, {"log": log})

    run = tf.function(lambda unordered: beam_search.beam_search_buffers(
        fn_with_log if unordered else fn, tf.zeros([3], tf.int32), 4, 8, 9, 0.6,
        states={"h": tf.constant(h0)},
        unordered_states={"log": tf.zeros([3, 0, 1])} if unordered else None))
    ids, scores, _, steps = run(True)
    expected_ids, expected_scores, _, expected_steps = run(False)
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_array_equal(scores, expected_scores)
    assert int(steps) == int(expected_steps)


def test_beam_search_eos_id_is_the_vocabularies_eos_id():
    # beam_search is a leaf (imports no data_generators), so it states the id itself.
    from t2t_lite.data_generators import text_encoder

    assert beam_search.EOS_ID == text_encoder.EOS_ID == 1


@pytest.mark.parametrize("stop_early", [True, False])
def test_a_decode_length_per_row_gives_each_row_its_result_alone(stop_early):
    # Rows that never finish run to their own length; row 0 finishes early. With
    # row_decode_lengths each row equals a search of that row alone with its own length,
    # and columns past a row's length stay 0; without them row 1 would run 4 steps.
    tables, rows, lengths = [GREEDY_IS_WRONG, NEVER_FINISHES], [0, 1, 1], [3, 2, 4]
    ids, scores, _, steps = beam_search.beam_search_buffers(
        markov_fn(np.stack(tables)), tf.zeros([3], tf.int32), 2, 4, V, 0.6,
        states={"row": tf.constant(rows, tf.int32)}, stop_early=stop_early,
        row_decode_lengths=tf.constant(lengths))
    assert int(steps) == 4
    for b, (row, length) in enumerate(zip(rows, lengths)):
        alone_ids, alone_scores = run([tables[row]], [0], 2, length, 0.6, stop_early)
        width = alone_ids.shape[2]
        np.testing.assert_array_equal(ids.numpy()[b, :, 1: width + 1], alone_ids[0])
        assert not ids.numpy()[b, :, width + 1:].any()
        np.testing.assert_allclose(scores.numpy()[b], alone_scores[0], rtol=1e-6)
    np.testing.assert_array_equal(ids.numpy()[1, :, 1:3], [[A, D], [B, A]])  # as above
    batch_ids, _ = run(tables, rows, 2, 4, 0.6, stop_early)
    assert batch_ids[1, 0, 3] != 0  # without: the row decodes to the batch's length


def test_greedy_with_a_decode_length_per_row_stops_each_row_at_its_own():
    from t2t_lite.search import greedy

    fn = markov_fn(np.stack([NEVER_FINISHES, GREEDY_IS_WRONG]))
    states = {"row": tf.constant([0, 0, 1], tf.int32)}
    ids, scores, steps = greedy.greedy(
        lambda ids, i, s: fn(ids, i, s), 3, 5, states,
        lambda logits, _: tf.argmax(logits, -1, output_type=tf.int32), full_ids=False, eos_id=EOS,
        row_lengths=tf.constant([2, 4, 5]))
    # Argmax of NEVER_FINISHES: a d a d ... (ties to the lower id), cut at the row lengths 2
    # and 4; GREEDY_IS_WRONG: a EOS, then (as t2t) tokens after EOS while other rows run.
    np.testing.assert_array_equal(ids.numpy()[:2, :5], [[A, D, 0, 0, 0], [A, D, A, D, 0]])
    np.testing.assert_array_equal(ids.numpy()[2, :2], [A, EOS])
    assert int(steps) == 4  # every row stopped: EOS or its own length
    np.testing.assert_allclose(scores.numpy(), [math.log(0.35), math.log(0.35 * 0.25 * 0.7),
                                                math.log(0.24)], rtol=1e-5)
