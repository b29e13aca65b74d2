"""The chunk loss's two layouts on this CPU: vocab-major against position-major logits.

`fused_ops.softmax_cross_entropy` lays a chunk's logits out vocab-major ([V, chunk]) where
the vocabulary size is a multiple of 1024 and the CPU has no AVX512
(`fused_ops.vocab_major_logits`), because on an AVX2 CPU oneDNN ran the position-major
layout's weight gradient `x_chunkᵀ · e` at half the rate of the other matmuls for such
sizes, and position-major ([chunk, V]) elsewhere (on an AVX512 CPU vocab-major was 0.93-1.00x
position-major for every size measured). Whether that holds on another CPU (AMX) or another
size is measured here: the loss with
both gradients in both layouts (`vocab_major=False / True`), alternating in one process,
and the three matmuls of a chunk in each layout alone.

    TF_ENABLE_ONEDNN_OPTS=1 python bench/bench_chunk_loss.py --rows 4096 --depth 128 \
        --vocab 8192 --rounds 5

Prints the machine line, each layout's matmul rates, per-round wall and process CPU times
of the loss + gradients, their medians and the position-major / vocab-major ratio, and the
largest difference between the two layouts' loss and gradients (float rounding).
"""
import argparse
import functools
import os
import sys

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_training import _time  # noqa: E402
from machine import describe_cpu  # noqa: E402

from t2t_lite.layers import fused_ops  # noqa: E402


def chunk_matmuls(layout: str, chunk: int, depth: int, vocab: int) -> dict:
    """The three matmuls of one chunk in `layout` ("vocab-major" / "position-major"):
    name -> (function, its arguments)."""
    x = tf.random.normal([chunk, depth])
    matrix = tf.random.normal([vocab, depth]) * depth ** -0.5
    if layout == "vocab-major":
        e = tf.random.uniform([vocab, chunk])
        return {
            "logits = matrix · xᵀ": (lambda m, x: tf.matmul(m, x, transpose_b=True), (matrix, x)),
            "d_matrix = e · x": (lambda e, x: tf.matmul(e, x), (e, x)),
            "d_x = eᵀ · matrix": (lambda e, m: tf.matmul(e, m, transpose_a=True), (e, matrix)),
        }
    e = tf.random.uniform([chunk, vocab])
    return {
        "logits = x · matrixᵀ": (lambda x, m: tf.matmul(x, m, transpose_b=True), (x, matrix)),
        "d_matrixᵀ = xᵀ · e": (lambda x, e: tf.matmul(x, e, transpose_a=True), (x, e)),
        "d_x = e · matrix": (lambda e, m: tf.matmul(e, m), (e, matrix)),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=4096, help="target positions N")
    parser.add_argument("--depth", type=int, default=128, help="hidden size D")
    parser.add_argument("--vocab", type=int, default=8192, help="vocabulary V")
    parser.add_argument("--chunk", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=5, help="loss calls per round")
    args = parser.parse_args()
    print(f"machine: {describe_cpu()}; load average {os.getloadavg()[0]:.2f}; "
          f"TF_ENABLE_ONEDNN_OPTS={os.environ.get('TF_ENABLE_ONEDNN_OPTS', '(unset)')}")

    flops = 2.0 * args.chunk * args.depth * args.vocab
    # The first matmuls of a process run slower (thread pools starting): not timed.
    function, inputs = next(iter(chunk_matmuls(
        "position-major", args.chunk, args.depth, args.vocab).values()))
    _time(functools.partial(tf.function(function), *inputs), 20)
    for layout in ("position-major", "vocab-major"):
        for name, (function, inputs) in chunk_matmuls(
                layout, args.chunk, args.depth, args.vocab).items():
            call = functools.partial(tf.function(function), *inputs)
            call()  # traced, not timed
            wall, cpu = _time(call, 20)
            print(f"{layout:15s} {name:22s} {flops / wall / 1e9:6.1f} GFLOP/s wall, "
                  f"{flops / cpu / 1e9:5.1f} per CPU second", flush=True)

    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(args.rows, args.depth)), tf.float32)
    matrix = tf.constant(rng.normal(size=(args.vocab, args.depth)) * args.depth ** -0.5,
                         tf.float32)
    labels = tf.constant(rng.integers(1, args.vocab, size=args.rows), tf.int32)

    def loss_and_gradients(loss_fn):
        @tf.function
        def run(x, matrix):
            with tf.GradientTape() as tape:
                tape.watch([x, matrix])
                loss = loss_fn(x, matrix, labels, 0.1, args.chunk)
            return (loss, *tape.gradient(loss, [x, matrix]))
        return run

    layouts = {name: loss_and_gradients(functools.partial(
        fused_ops.softmax_cross_entropy, vocab_major=vocab_major))
        for name, vocab_major in (("position-major", False), ("vocab-major", True))}
    results = {name: run(x, matrix) for name, run in layouts.items()}  # traced here
    differences = [float(tf.reduce_max(tf.abs(a - b)))
                   for a, b in zip(results["position-major"], results["vocab-major"])]
    print("largest difference between the layouts: loss {:.3g}, d_x {:.3g}, d_matrix {:.3g}"
          .format(*differences))
    times = {name: [] for name in layouts}
    for i in range(args.rounds):
        for name in (list(layouts) if i % 2 == 0 else list(layouts)[::-1]):
            times[name].append(_time(functools.partial(layouts[name], x, matrix), args.calls))
    medians = {}
    for name, rounds in times.items():
        walls = [1e3 * wall for wall, _ in rounds]
        cpus = [1e3 * cpu for _, cpu in rounds]
        medians[name] = (np.median(walls), np.median(cpus))
        print(f"{name:15s} loss + gradients, [{args.rows}, {args.depth}] x [{args.vocab}, "
              f"{args.depth}]: rounds " + " / ".join(f"{w:.0f}" for w in walls)
              + f" ms wall (median {medians[name][0]:.1f}), CPU median {medians[name][1]:.1f} ms")
    before, after = medians["position-major"], medians["vocab-major"]
    print(f"vocab-major: {before[0] / after[0]:.2f}x the position-major speed by wall time, "
          f"{before[1] / after[1]:.2f}x by CPU time; t2t_lite takes "
          f"{'vocab' if fused_ops.vocab_major_logits(args.vocab) else 'position'}-major "
          f"for V = {args.vocab}")


if __name__ == "__main__":
    main()
