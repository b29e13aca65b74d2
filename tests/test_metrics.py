"""t2t's eval metrics on a hand-computed example (T2T_REFERENCE.md §8.1)."""
import math

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.evaluation import metrics

V = 7
LABELS = np.array([[2, 3, 1], [4, 1, 0]], np.int32)
ARGMAX = np.array([[2, 5, 1], [4, 1, 6]], np.int32)


def _logits():
    """Logit 2 at the argmax, 0 elsewhere, except -1 at label 3 of position (0, 1)."""
    logits = np.zeros([2, 3, V], np.float32)
    for b in range(2):
        for t in range(3):
            logits[b, t, ARGMAX[b, t]] = 2.0
    logits[0, 1, 3] = -1.0
    return tf.constant(logits)


def _mean(metric):
    values, weights = metric(_logits(), tf.constant(LABELS))
    weights = np.broadcast_to(np.asarray(weights), np.shape(values))
    return float(np.sum(np.asarray(values) * weights) / np.sum(weights))


def test_token_and_sequence_accuracy():
    # Non-pad tokens: 5; wrong: (0, 1). Sequence 0 has an error, sequence 1 is right.
    assert _mean(metrics.padded_accuracy) == pytest.approx(4 / 5)
    assert _mean(metrics.padded_sequence_accuracy) == pytest.approx(1 / 2)


def test_top5_accuracy():
    # Label 3 at (0, 1) has the lowest logit of 7, so it is outside the top 5.
    assert _mean(metrics.padded_accuracy_top5) == pytest.approx(4 / 5)
    values, _ = metrics.padded_accuracy_topk(_logits(), tf.constant(LABELS), 7)
    np.testing.assert_array_equal(values, np.ones([2, 3]))


def test_neg_log_perplexity():
    right = 2.0 - math.log(math.exp(2) + 6)           # 4 tokens
    wrong = -1.0 - math.log(math.exp(2) + 5 + math.exp(-1))  # label 3 at (0, 1)
    assert _mean(metrics.padded_neg_log_perplexity) == pytest.approx(
        (4 * right + wrong) / 5, rel=1e-6)


def test_edit_distance():
    # [2,5,1] vs [2,3,1]: 1 substitution; [4,1,6] vs [4,1]: 1 insertion; 5 reference tokens.
    value, weight = metrics.sequence_edit_distance(_logits(), tf.constant(LABELS))
    assert float(weight) == 5.0
    assert float(value) == pytest.approx(2 / 5)


def test_approx_bleu_counts_padding_ids():
    # p1 = 4/6, p2 = 1/4, p3: 0 of 2 matches -> 1/(2*2), p4: no 4-grams -> 0 (skipped).
    expected = math.exp((math.log(4 / 6) + math.log(1 / 4) + math.log(1 / 4)) / 4)
    assert metrics.approx_bleu_score(ARGMAX, LABELS) == pytest.approx(expected, rel=1e-6)
    assert metrics.approx_bleu_score(LABELS, LABELS) == pytest.approx(1.0)


def test_rouge():
    # ROUGE-2: row 0 shares no bigram; row 1 shares (4,1) of 2 -> F 0.5. Mean 0.25.
    assert metrics.rouge_n(ARGMAX, LABELS) == pytest.approx(0.25, rel=1e-6)
    # ROUGE-L: both rows have LCS 2 of 3 -> F 2/3.
    assert metrics.rouge_l(ARGMAX, LABELS) == pytest.approx(2 / 3, rel=1e-6)
    assert metrics.rouge_l(np.array([[1, 2, 3, 4]]), np.array([[1, 3, 4]])) == pytest.approx(
        # LCS 3: R = 1, P = 3/4, beta = 3/4: (1 + 9/16) * 3/4 / (1 + 9/16 * 3/4)
        (1 + 9 / 16) * 0.75 / (1 + 9 / 16 * 0.75), rel=1e-6)


def test_eval_metrics_stream_weighted_means_over_batches():
    em = metrics.EvalMetrics("algorithmic_reverse_binary40", [
        metrics.ACC, metrics.ACC_PER_SEQ, metrics.APPROX_BLEU, metrics.EDIT_DISTANCE])
    # Batch 1: the example above. Batch 2: one sequence of 2 tokens, both right.
    em.update_graph({k: np.asarray(v) for k, v in
                     em.graph_sums(_logits(), tf.constant(LABELS)).items()})
    em.update_host(ARGMAX, LABELS)
    labels2 = np.array([[3, 1]], np.int32)
    logits2 = tf.one_hot(labels2, V) * 3.0
    em.update_graph(em.graph_sums(logits2, tf.constant(labels2)))
    em.update_host(labels2, labels2)
    results = em.results()
    prefix = "metrics-algorithmic_reverse_binary40/targets/"
    assert sorted(results) == sorted(prefix + m for m in (
        "accuracy", "accuracy_per_sequence", "approx_bleu_score", "edit_distance"))
    assert results[prefix + "accuracy"] == pytest.approx(6 / 7)  # token-weighted, not 0.9
    assert results[prefix + "accuracy_per_sequence"] == pytest.approx(2 / 3)
    assert results[prefix + "edit_distance"] == pytest.approx(2 / 7)
    bleu1 = metrics.approx_bleu_score(ARGMAX, LABELS)
    assert results[prefix + "approx_bleu_score"] == pytest.approx((bleu1 + 1.0) / 2)
    em.reset()
    assert all(v == 0.0 for v in em.results().values())


def test_unknown_metric_is_rejected():
    with pytest.raises(ValueError, match="r_squared"):
        metrics.EvalMetrics("p", ["accuracy", "r_squared"])
