"""tensor2tensor's in-training eval metrics (T2T_REFERENCE.md §8.1).

Each metric function takes teacher-forced `logits [B, T, V]` and `labels [B, T]` (0 = padding)
and returns `(values, weights)` exactly as t2t's does; t2t averages them over the whole eval
run with a streaming weighted mean, sum(values * weights) / sum(weights) (weights broadcast
to the values' shape). Metrics are reported as `metrics-<problem>/targets/<metric>`.

Graph metrics (accuracy, accuracy_top5, accuracy_per_sequence, neg_log_perplexity,
edit_distance) run inside the compiled eval step; `EvalMetrics.graph_sums` returns their
weighted sums, which add up across replicas and batches. The id-level approximations of BLEU
and ROUGE (t2t runs them in `py_func`) run on the host on argmax ids: one value of weight 1
per batch.
"""
from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from t2t_lite.evaluation import bleu_hook

ACC = "accuracy"
ACC_TOP5 = "accuracy_top5"
ACC_PER_SEQ = "accuracy_per_sequence"
NEG_LOG_PERPLEXITY = "neg_log_perplexity"
EDIT_DISTANCE = "edit_distance"
APPROX_BLEU = "approx_bleu_score"
ROUGE_2_F = "rouge_2_fscore"
ROUGE_L_F = "rouge_L_fscore"


def _weights_nonzero(labels: tf.Tensor) -> tf.Tensor:
    return tf.cast(tf.not_equal(labels, 0), tf.float32)


def _argmax(logits: tf.Tensor) -> tf.Tensor:
    return tf.argmax(logits, axis=-1, output_type=tf.int32)


def padded_accuracy(logits: tf.Tensor, labels: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Token accuracy on non-padding labels.

    Args:
      logits: float [B, T, V].
      labels: int [B, T].

    Returns:
      (values float32 [B, T]: 1 where argmax == label, weights float32 [B, T]: label != 0).
    """
    labels = tf.cast(labels, tf.int32)
    return tf.cast(tf.equal(_argmax(logits), labels), tf.float32), _weights_nonzero(labels)


def padded_accuracy_topk(
    logits: tf.Tensor, labels: tf.Tensor, k: int
) -> tuple[tf.Tensor, tf.Tensor]:
    """Whether the label is among the top-k logits, on non-padding labels.

    Args:
      logits: float [B, T, V].
      labels: int [B, T].
      k: number of top logits (capped at V).

    Returns:
      (values float32 [B, T], weights float32 [B, T]).
    """
    labels = tf.cast(labels, tf.int32)
    k = min(k, logits.shape[-1]) if logits.shape[-1] is not None else k
    _, top = tf.math.top_k(logits, k=k)
    same = tf.cast(tf.equal(top, labels[..., tf.newaxis]), tf.float32)
    return tf.reduce_sum(same, axis=-1), _weights_nonzero(labels)


def padded_accuracy_top5(logits: tf.Tensor, labels: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """`padded_accuracy_topk` with k = 5 (t2t's accuracy_top5)."""
    return padded_accuracy_topk(logits, labels, 5)


def padded_sequence_accuracy(
    logits: tf.Tensor, labels: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor]:
    """1 for a sequence whose every non-padding token is predicted right.

    Args:
      logits: float [B, T, V].
      labels: int [B, T].

    Returns:
      (values float32 [B], weight 1.0 per sequence as a float32 scalar).
    """
    labels = tf.cast(labels, tf.int32)
    wrong = tf.cast(tf.not_equal(_argmax(logits), labels), tf.float32) * _weights_nonzero(labels)
    correct = 1.0 - tf.minimum(1.0, tf.reduce_sum(wrong, axis=1))
    return correct, tf.constant(1.0)


def padded_neg_log_perplexity(
    logits: tf.Tensor, labels: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor]:
    """Minus the (unsmoothed, natural-log) cross-entropy per non-padding token.

    Args:
      logits: float [B, T, V].
      labels: int [B, T].

    Returns:
      (values float32 [B, T] = -xent * weight, weights float32 [B, T]).
    """
    labels = tf.cast(labels, tf.int32)
    logits = tf.cast(logits, tf.float32)
    xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    weights = _weights_nonzero(labels)
    return -xent * weights, weights


def sequence_edit_distance(logits: tf.Tensor, labels: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Levenshtein distance between the non-zero argmax ids and the non-zero labels.

    Args:
      logits: float [B, T, V].
      labels: int [B, T].

    Returns:
      (total distance / reference length, reference length): float32 scalars.
    """

    def sparse_nonzero(ids):
        ids = tf.cast(ids, tf.int64)
        where = tf.where(tf.not_equal(ids, 0))
        return tf.SparseTensor(where, tf.gather_nd(ids, where), tf.shape(ids, out_type=tf.int64))

    labels_sparse = sparse_nonzero(labels)
    distance = tf.reduce_sum(
        tf.edit_distance(sparse_nonzero(_argmax(logits)), labels_sparse, normalize=False)
    )
    reference_length = tf.cast(tf.shape(labels_sparse.indices)[0], tf.float32)
    # divide_no_nan: a batch without reference tokens has weight 0 and must not add NaN.
    return tf.math.divide_no_nan(distance, reference_length), reference_length


GRAPH_METRICS = {
    ACC: padded_accuracy,
    ACC_TOP5: padded_accuracy_top5,
    ACC_PER_SEQ: padded_sequence_accuracy,
    NEG_LOG_PERPLEXITY: padded_neg_log_perplexity,
    EDIT_DISTANCE: sequence_edit_distance,
}


# --- Host metrics on argmax ids (t2t's py_func metrics) ----------------------------------
def approx_bleu_score(outputs: np.ndarray, labels: np.ndarray) -> float:
    """Corpus BLEU (0-1) of the argmax id rows against the label rows, padding included.

    Args:
      outputs: int [B, T] argmax ids.
      labels: int [B, T].

    Returns:
      BLEU of this batch (t2t weights each batch 1).
    """
    return float(bleu_hook.compute_bleu(_rows(labels), _rows(outputs)))


def _rows(ids: np.ndarray) -> list[list[int]]:
    return [list(map(int, row)) for row in np.asarray(ids)]


def _ngrams(n: int, tokens: list[int]) -> set:
    return {tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)}


def rouge_n(outputs: np.ndarray, labels: np.ndarray, n: int = 2) -> float:
    """Mean over sentences of the ROUGE-N F1 on distinct n-grams (t2t's `rouge.rouge_n`).

    Args:
      outputs: int [B, T] argmax ids (the evaluated sentences).
      labels: int [B, T] (the references).
      n: n-gram order.

    Returns:
      The batch mean F1.
    """
    scores = []
    for hyp, ref in zip(_rows(outputs), _rows(labels)):
        hyp_ngrams, ref_ngrams = _ngrams(n, hyp), _ngrams(n, ref)
        overlap = len(hyp_ngrams & ref_ngrams)
        precision = overlap / len(hyp_ngrams) if hyp_ngrams else 0.0
        recall = overlap / len(ref_ngrams) if ref_ngrams else 0.0
        scores.append(2.0 * precision * recall / (precision + recall + 1e-8))
    return float(np.mean(scores, dtype=np.float32))


def _lcs_length(x: list[int], y: list[int]) -> int:
    previous = [0] * (len(y) + 1)
    for xi in x:
        current = [0]
        for j, yj in enumerate(y):
            current.append(previous[j] + 1 if xi == yj else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]


def rouge_l(outputs: np.ndarray, labels: np.ndarray) -> float:
    """Mean over sentences of the ROUGE-L (LCS) F-measure (t2t's `rouge_l_sentence_level`).

    Args:
      outputs: int [B, T] argmax ids.
      labels: int [B, T].

    Returns:
      The batch mean F_lcs with t2t's beta = P_lcs / R_lcs.
    """
    scores = []
    for hyp, ref in zip(_rows(outputs), _rows(labels)):
        lcs = _lcs_length(hyp, ref)
        r_lcs, p_lcs = lcs / len(ref), lcs / len(hyp)
        beta = p_lcs / (r_lcs + 1e-12)
        num = (1 + beta**2) * r_lcs * p_lcs
        scores.append(num / (r_lcs + beta**2 * p_lcs + 1e-12))
    return float(np.mean(scores, dtype=np.float32))


HOST_METRICS = {
    APPROX_BLEU: approx_bleu_score,
    ROUGE_2_F: rouge_n,
    ROUGE_L_F: rouge_l,
}
METRICS = tuple(GRAPH_METRICS) + tuple(HOST_METRICS)


def metric_name(problem_name: str, metric: str, target_name: str = "targets") -> str:
    """t2t's summary name `metrics-<problem>/<target_name>/<metric>`."""
    return f"metrics-{problem_name}/{target_name}/{metric}"


class StreamingMean:
    """Weighted mean over an eval run: sum(value * weight) / sum(weight); 0 if no weight."""

    def __init__(self):
        self.total = 0.0
        self.weight = 0.0

    def update(self, weighted_sum: float, weight: float) -> None:
        """Adds `weighted_sum` = sum(values * weights) and `weight` = sum(weights)."""
        self.total += float(weighted_sum)
        self.weight += float(weight)

    def result(self) -> float:
        """The mean so far."""
        return self.total / self.weight if self.weight else 0.0


class EvalMetrics:
    """The eval metrics of one problem, accumulated over an eval run.

    Args:
      problem_name: name used in the summary names (t2t appends "_rev" for reversed problems
        and uses `overload_eval_metric_name` instead when set).
      metrics: t2t metric names (a problem's `eval_metrics()`).
    """

    def __init__(self, problem_name: str, metrics: list[str]):
        unknown = [m for m in metrics if m not in METRICS]
        if unknown:
            raise ValueError(
                f"Unsupported eval metric(s) {', '.join(unknown)} of problem {problem_name}; "
                f"supported: {', '.join(METRICS)}"
            )
        self.problem_name = problem_name
        self.graph_metrics = [m for m in metrics if m in GRAPH_METRICS]
        self.host_metrics = [m for m in metrics if m in HOST_METRICS]
        self.reset()

    def reset(self) -> None:
        """Starts a new eval run."""
        self._means = {m: StreamingMean() for m in self.graph_metrics + self.host_metrics}

    def graph_sums(self, logits: tf.Tensor, labels: tf.Tensor) -> dict[str, tf.Tensor]:
        """Per graph metric, the float32 pair [sum(values * weights), sum(weights)] of a batch.

        Args:
          logits: float [B, T, V].
          labels: int [B, T].

        Returns:
          dict metric -> float32 [2]; sums add across replicas and batches.
        """
        sums = {}
        for metric in self.graph_metrics:
            values, weights = GRAPH_METRICS[metric](logits, labels)
            weights = tf.broadcast_to(tf.cast(weights, tf.float32), tf.shape(values))
            sums[metric] = tf.stack([tf.reduce_sum(values * weights), tf.reduce_sum(weights)])
        return sums

    def update_graph(self, sums: dict) -> None:
        """Adds the (replica-summed) output of `graph_sums` for one batch."""
        for metric, pair in sums.items():
            pair = np.asarray(pair, np.float64)
            self._means[metric].update(pair[0], pair[1])

    def update_host(self, outputs: np.ndarray, labels: np.ndarray) -> None:
        """Adds one batch of the host metrics from argmax ids `outputs` [B, T] and labels."""
        if len(labels) == 0:
            return
        for metric in self.host_metrics:
            self._means[metric].update(HOST_METRICS[metric](outputs, labels), 1.0)

    def host_sums(self) -> np.ndarray:
        """float64 [len(host_metrics), 2]: each host metric's (sum of values, sum of weights)
        so far, to be added up over workers (`set_host_sums`)."""
        return np.array([[self._means[m].total, self._means[m].weight]
                         for m in self.host_metrics], np.float64).reshape(-1, 2)

    def set_host_sums(self, sums: np.ndarray) -> None:
        """Replaces the host metrics' sums (rows in `host_metrics` order), e.g. with their
        totals over all workers."""
        for metric, (total, weight) in zip(self.host_metrics, np.asarray(sums, np.float64)):
            self._means[metric].total, self._means[metric].weight = float(total), float(weight)

    def results(self) -> dict[str, float]:
        """{"metrics-<problem>/targets/<metric>": mean} for every metric."""
        return {
            metric_name(self.problem_name, m): mean.result() for m, mean in self._means.items()
        }


def eval_lines(step: int, results: dict[str, float], width: int = 150) -> list[str]:
    """The log lines of an evaluation, `Eval at step N: loss = 0.1234, accuracy = 0.9712, ...`,
    each under `width` characters (with t2t's full names seven metrics take 400): the
    metrics' common `metrics-<problem>/targets/` prefix is left out (TensorBoard and the run
    card keep the full names) and the values go on as many lines as they need.

    Args:
      step: the global step evaluated.
      results: metric name -> value (t2t's names, and "loss").
      width: the longest line (a single value longer than that still gets its line).

    Returns:
      The lines; the first starts `Eval at step N: `, the others `Eval at step N (cont.): `.
    """
    prefixed = [name for name in results if "/" in name]
    prefix = ""
    if prefixed:
        common = os.path.commonprefix([name.rsplit("/", 1)[0] + "/" for name in prefixed])
        prefix = common[: common.rfind("/") + 1]
    lines = [f"Eval at step {step}:"]
    for name, value in sorted(results.items()):
        entry = f"{name.removeprefix(prefix)} = {value:.4f}"
        if lines[-1].endswith(":") or len(lines[-1]) + len(entry) + 2 <= width:
            lines[-1] += ("" if lines[-1].endswith(":") else ",") + " " + entry
        else:
            lines.append(f"Eval at step {step} (cont.): {entry}")
    return lines
