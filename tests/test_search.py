"""The decoding features of the search room (`t2t_lite/search`, docs/decoding.md):
n-best files, nucleus sampling, target prefixes."""
import pathlib

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.decoding import decoding, text_batches
from t2t_lite.search import sampling
from tests.test_decoding import ENCODERS, FakeModel, hp


def test_nbest_file_beside_the_decodes_in_input_order(tmp_path):
    src = tmp_path / "src.txt"
    src.write_text("1 2\n3\n4 5 6\n", encoding="utf-8")
    target = tmp_path / "out.txt"
    decode_hp = hp(return_beams=True, write_beam_scores=True, beam_size=2, batch_size=2)
    out = decoding.decode_from_file(FakeModel(beams=2), str(src), ENCODERS, decode_hp,
                                    str(target), ("m", "h", "p"))
    # t2t's decodes file is unchanged: beams tab-joined with "%.2f" scores.
    assert target.read_text(encoding="utf-8").split("\n")[0] == "2 1\t-2.47\t1 2\t-5.68"
    assert (tmp_path / "out.txt.nbest").read_text(encoding="utf-8") == (
        "0 ||| 2 1 ||| -2.468000\n0 ||| 1 2 ||| -5.678000\n"
        "1 ||| 3 ||| -1.234000\n1 ||| 3 ||| -5.678000\n"
        "2 ||| 6 5 4 ||| -3.702000\n2 ||| 4 5 6 ||| -5.678000\n")
    assert out == str(target)
    # Without write_beam_scores (t2t's plain return_beams) no n-best file is written.
    decoding.decode_from_file(FakeModel(beams=2), str(src), ENCODERS,
                              hp(return_beams=True, beam_size=2), str(tmp_path / "plain"),
                              ("m", "h", "p"))
    assert not (tmp_path / "plain.nbest").exists()


def test_nucleus_keeps_the_smallest_set_reaching_p():
    probs = np.array([[0.15, 0.5, 0.05, 0.3]], np.float32)
    logits = tf.constant(np.log(probs))
    for p, kept in [(1e-6, [1]), (0.5, [1]), (0.7, [1, 3]), (0.8, [1, 3]), (0.81, [0, 1, 3]),
                    (0.96, [0, 1, 2, 3])]:
        filtered = sampling.keep_top_p(logits, p).numpy()[0]
        assert np.flatnonzero(filtered > sampling.REMOVED_LOGIT).tolist() == kept, p
        # The kept tokens keep their logits: the draw's probabilities are theirs, renormalised.
        np.testing.assert_array_equal(filtered[kept], np.log(probs[0, kept]))
        assert probs[0, kept].sum() >= min(p, 1.0) - 1e-6


def test_nucleus_at_one_draws_as_plain_sampling_and_near_zero_as_argmax():
    logits = tf.constant(np.random.default_rng(0).normal(size=(64, 29)) * 2, tf.float32)

    def draws(top_p, seed=7):
        tf.random.set_seed(seed)
        return sampling.sample(logits, sampling.Sampling("random", 1.0, -1, top_p)).numpy()

    tf.random.set_seed(7)
    plain = tf.random.categorical(logits, 1, dtype=tf.int32)[:, 0].numpy()
    np.testing.assert_array_equal(draws(1.0), plain)
    # p just below 1: the filter runs and keeps every token of these rows, the same draws.
    np.testing.assert_array_equal(draws(1 - 1e-7), plain)
    np.testing.assert_array_equal(draws(1e-6), tf.argmax(logits, -1).numpy())
    # Seeded: TensorFlow's stateless draws, seeded by (seed, step), whatever the global seed;
    # p = 1 (also as a run-time tensor, the SavedModel's input) draws as plain sampling.
    def seeded(top_p, seed, step=3):
        tf.random.set_seed(int(np.random.default_rng().integers(1 << 30)))
        return sampling.sample(logits, sampling.Sampling("random", 1.0, -1, top_p, seed),
                               step).numpy()

    stateless = tf.random.stateless_categorical(logits, 1, [5, 3], dtype=tf.int32)[:, 0]
    np.testing.assert_array_equal(seeded(1.0, 5), stateless.numpy())
    np.testing.assert_array_equal(seeded(tf.constant(1.0), tf.constant(5, tf.int64)), stateless)
    np.testing.assert_array_equal(seeded(1 - 1e-7, 5), stateless)
    assert (seeded(1.0, 6) != stateless.numpy()).any()
    assert (seeded(1.0, 5, step=4) != stateless.numpy()).any()
    # A negative run-time seed is none: the stateful generator's draws.
    tf.random.set_seed(7)
    unseeded = sampling.sample(logits, sampling.Sampling("random", 1.0, -1, 1.0,
                                                         tf.constant(-1, tf.int64))).numpy()
    np.testing.assert_array_equal(unseeded, plain)
    with pytest.raises(ValueError, match="seed=-1 must be >= 0"):
        sampling.sample(logits, sampling.Sampling("random", 1.0, -1, 1.0, -1))


@pytest.mark.slow
def test_nucleus_greedy_decoding_is_seeded_and_tends_to_argmax():
    from tests.test_fast_decoding import INPUTS, random_model

    argmax = random_model(vocab=(37, 29), seed=2).infer({"inputs": INPUTS}, decode_length=6)
    tiny_p = random_model(",sampling_method=random,sampling_keep_top_p=1e-6", (37, 29), 2)
    np.testing.assert_array_equal(
        tiny_p.infer({"inputs": INPUTS}, decode_length=6)["outputs"], argmax["outputs"])
    half = random_model(",sampling_method=random,sampling_keep_top_p=0.5", (37, 29), 2)
    runs = []
    for _ in range(2):
        tf.random.set_seed(11)
        runs.append(half.infer({"inputs": INPUTS}, decode_length=6)["outputs"].numpy())
    np.testing.assert_array_equal(runs[0], runs[1])


def _markov_fn(table):
    """A step whose logits depend on the step and the last token: table [T, V, V]."""
    table = tf.constant(table, tf.float32)

    def fn(ids, i, states):
        return tf.gather(table[i], ids[:, -1]), states

    return fn


def _brute_force_best(table, prefix, steps, alpha):
    """The best finished output starting with `prefix`: every token sequence ending in
    its only EOS (1) within `steps` steps, scored as t2t (log p / ((5 + len) / 6)^alpha)."""
    log_p = table - np.log(np.exp(table).sum(-1, keepdims=True))
    best, best_score = None, -np.inf
    vocab = table.shape[-1]

    def visit(seq, last, score):
        nonlocal best, best_score
        i = len(seq)
        if i == steps:
            return
        for token in range(vocab):
            if i < len(prefix) and token != prefix[i]:
                continue
            new = score + log_p[i, last, token]
            if token == 1:
                normalised = new / ((5.0 + i + 1) / 6.0) ** alpha
                if normalised > best_score:
                    best, best_score = seq + [1], normalised
            else:
                visit(seq + [token], token, new)

    visit([], 0, 0.0)
    return best, best_score


@pytest.mark.parametrize("prefix", [[2], [3, 2], [2, 2, 3]])
def test_beam_with_a_prefix_is_the_best_output_that_starts_with_it(prefix):
    from t2t_lite.search import beam_search

    steps, vocab, alpha = 5, 4, 0.6
    table = np.random.default_rng(len(prefix)).normal(size=(steps, vocab, vocab)) * 2
    # Wide enough to be exhaustive: 3 non-EOS tokens, so at most 27 hypotheses stay alive.
    ids, scores, _, _ = beam_search.beam_search_buffers(
        _markov_fn(table), tf.zeros([1], tf.int32), 27, steps, vocab, alpha,
        prefixes=tf.constant([prefix]))
    best, best_score = _brute_force_best(table, prefix, steps, alpha)
    np.testing.assert_array_equal(ids[0, 0, 1:len(best) + 1], best)
    assert ids[0, 0, len(best) + 1:].numpy().sum() == 0
    np.testing.assert_allclose(scores[0, 0], best_score, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("beam_size", [1, 3])
def test_a_prefix_is_kept_and_the_own_output_as_prefix_reproduces_it(beam_size):
    from tests.test_fast_decoding import INPUTS, random_model

    model = random_model(vocab=(37, 29), seed=2)
    kwargs = {"decode_length": 6, "beam_size": beam_size}
    free = model.infer({"inputs": INPUTS}, **kwargs)
    own = free["outputs"].numpy()[:, :3]
    own = np.where(np.cumsum(own == 1, axis=1) > 0, 0, own)  # no EOS in a prefix
    same = model.infer({"inputs": INPUTS, "prefixes": own}, **kwargs)
    np.testing.assert_array_equal(same["outputs"], free["outputs"])
    np.testing.assert_allclose(same["scores"], free["scores"], rtol=1e-5)
    forced = np.array([[7, 7, 7, 7], [28, 0, 0, 0], [0, 0, 0, 0]], np.int32)
    out = model.infer({"inputs": INPUTS, "prefixes": forced}, **kwargs)["outputs"].numpy()
    assert out[0, :4].tolist() == [7, 7, 7, 7] and out[1, 0] == 28
    np.testing.assert_array_equal(out[2], free["outputs"].numpy()[2, :out.shape[1]])


@pytest.mark.slow
def test_prefix_file_follows_its_lines_through_sorting_and_batches(tmp_path):
    from tests.test_fast_decoding import random_model

    src, prefix_file = tmp_path / "src.txt", tmp_path / "prefix.txt"
    src.write_text("1 2\n3\n4 5 6\n7 8\n", encoding="utf-8")
    prefix_file.write_text("20\n\n7 7\n26 3 9\n", encoding="utf-8")
    model = random_model(vocab=(37, 29), seed=2)
    for beam_size in (1, 2):
        decode_hp = hp(beam_size=beam_size, batch_size=2, extra_length=3)
        out = decoding.decode_from_file(decoding.make_infer_fn(model, decode_hp), str(src),
                                        ENCODERS, decode_hp, str(tmp_path / "out"),
                                        ("m", "h", "p"), prefix_file=str(prefix_file))
        lines = pathlib.Path(out).read_text(encoding="utf-8").split("\n")[:4]
        for line, prefix in zip(lines, ["20", "", "7 7", "26 3 9"]):
            assert line.startswith(prefix), (line, prefix)
    prefix_file.write_text("20\n", encoding="utf-8")
    with pytest.raises(ValueError, match="prefix.txt has 1 lines, --decode_from_file="):
        decoding.decode_from_file(decoding.make_infer_fn(model, decode_hp), str(src),
                                  ENCODERS, decode_hp, str(tmp_path / "out"), ("m", "h", "p"),
                                  prefix_file=str(prefix_file))


def test_ctranslate2_target_prefix_decodes_as_t2t_lite(tmp_path):
    from tests.test_ctranslate2 import EXTRA_LENGTH, INPUTS, _export, _tiny_model

    model = _tiny_model("")
    translator = _export(model, tmp_path)
    prefixes = [[7, 3], [], [12], [5, 5, 5]]
    batch = text_batches.pad_batch([ids + [1] for ids in INPUTS])
    expected = model.infer({"inputs": batch, "prefixes": text_batches.pad_batch(prefixes)},
                           decode_length=EXTRA_LENGTH)["outputs"].numpy()
    got = translator.translate_ids(INPUTS, beam_size=1, extra_length=EXTRA_LENGTH,
                                   prefixes=prefixes)
    for row, (hyp,) in enumerate(got):
        assert hyp.ids[:len(prefixes[row])] == prefixes[row]
        assert hyp.ids == expected[row].tolist()
