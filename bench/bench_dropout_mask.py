"""Dropout masks: TensorFlow's Philox kernel against the hashed mask t2t_lite draws.

`fused_ops.stateless_scaled_mask` draws a training step's dropout masks as a keyed integer
hash of each unit's position, compiled by XLA. Before, it drew 16 bits per unit from
TensorFlow's stateless Philox kernel (`philox_scaled_mask` below, kept here as the
comparison). This script measures both in one process:

1. the masks of one training step: the shapes the model's Dropout layers ask for (recorded
   from an eager forward pass of the hparams set on a batch of `--batch_tokens` at each of
   `--lengths`), drawn in one tf.function per variant, alternating rounds;
2. with `--step_rounds N`, the whole `Trainer` train step (`bench_training.t2t_lite_step`)
   at `--step_length`, once traced with each mask function, alternating rounds.

    TF_ENABLE_ONEDNN_OPTS=1 python bench/bench_dropout_mask.py --hparams_set transformer_tiny \
        --batch_tokens 4096 --lengths 16,32,64 --vocab_size 8085 --rounds 5 --step_rounds 10

Prints the machine line, per length the mask shapes and units, each variant's median time
per step's masks and the ratio, the kept fraction of each (expected 1 - rate), and the
step's median wall and process CPU time with each mask function.
"""
import argparse
import contextlib
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_training import _time, synthetic_batch, t2t_lite_step  # noqa: E402
from machine import describe_cpu  # noqa: E402

from t2t_lite.hparams_lib import create_hparams  # noqa: E402
from t2t_lite.layers import common_layers, fused_ops  # noqa: E402
from t2t_lite.models.transformer import Transformer  # noqa: E402


def philox_keep_mask(shape: tf.Tensor, rate: float, seed: tf.Tensor) -> tf.Tensor:
    """The former keep mask: bool `shape`, 16 bits per unit from TensorFlow's stateless
    Philox kernel (two units per 32-bit draw, kept when the bits >= round(rate * 2**16))."""
    units = tf.reduce_prod(shape)
    words = tf.random.stateless_uniform(
        [(units + 1) // 2], seed, minval=None, maxval=None, dtype=tf.int32)
    halves = tf.reshape(tf.bitcast(words, tf.int16), [-1])[:units]
    threshold = min(round(rate * 2**16), 2**16 - 1) - 2**15
    return tf.reshape(halves, shape) >= tf.constant(threshold, tf.int16)


def philox_scaled_mask(shape: tf.Tensor, rate: float, seed: tf.Tensor,
                       dtype: tf.DType = tf.float32) -> tf.Tensor:
    """`philox_keep_mask` as the scaled mask the model multiplies by (1 / (1 - rate) where
    kept, 0 elsewhere, in `dtype`)."""
    return tf.where(philox_keep_mask(shape, rate, seed), tf.cast(1.0 / (1.0 - rate), dtype),
                    tf.zeros([], dtype))


VARIANTS = {"philox": philox_scaled_mask, "hashed": fused_ops.stateless_scaled_mask}


@contextlib.contextmanager
def keep_masks_from(function):
    """Makes the model's Dropout layers draw their masks with `function` (while tracing)."""
    original = fused_ops.stateless_scaled_mask
    fused_ops.stateless_scaled_mask = function
    try:
        yield
    finally:
        fused_ops.stateless_scaled_mask = original


def step_mask_shapes(model, batch: dict, label_smoothing: float) -> list[tuple]:
    """(shape, rate) of every dropout mask one training forward pass of `model` draws."""
    shapes = []

    def record(shape, rate, seed, dtype=tf.float32):
        shapes.append((tuple(int(d) for d in tf.convert_to_tensor(shape).numpy()), rate))
        return philox_scaled_mask(shape, rate, seed, dtype)

    with keep_masks_from(record), common_layers.dropout_seed(tf.constant([1, 2], tf.int64)):
        model.training_loss(batch, label_smoothing, training=True)
    return shapes


def masks_function(variant, shapes: list[tuple], count: bool = False):
    """A tf.function drawing every mask of `shapes` with `variant`; returns the number of
    kept units (`count`), else each mask's first unit (the whole mask is still computed,
    without a reduction over it added to the time)."""

    @tf.function
    def draw(seed):
        out = []
        for salt, (shape, rate) in enumerate(shapes):
            mask = variant(tf.constant(shape, tf.int32), rate,
                           tf.random.experimental.stateless_fold_in(seed, salt + 1))
            out.append(tf.reduce_sum(tf.cast(mask > 0, tf.int64)) if count
                       else tf.cast(tf.reshape(mask, [-1])[0], tf.int64))
        return tf.add_n(out)

    return draw


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hparams_set", default="transformer_tiny")
    parser.add_argument("--hparams", default="")
    parser.add_argument("--batch_tokens", type=int, default=4096)
    parser.add_argument("--lengths", default="16,32,64")
    parser.add_argument("--vocab_size", type=int, default=8085)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--draws", type=int, default=10, help="mask draws timed per round")
    parser.add_argument("--step_rounds", type=int, default=0,
                        help="also time the whole train step, this many rounds per variant")
    parser.add_argument("--step_length", type=int, default=32)
    parser.add_argument("--steps", type=int, default=3, help="train steps timed per round")
    args = parser.parse_args()

    print("machine:", describe_cpu(), "; load average %.2f" % os.getloadavg()[0], flush=True)
    hp = create_hparams(args.hparams_set, args.hparams)
    model = Transformer(hp, args.vocab_size, args.vocab_size)
    seed = tf.constant([3, 5], tf.int64)
    for length in (int(x) for x in args.lengths.split(",")):
        batch = synthetic_batch(args.batch_tokens, length, args.vocab_size,
                                np.random.default_rng(0))
        shapes = step_mask_shapes(model, batch, hp.label_smoothing)
        units = sum(int(np.prod(s)) for s, _ in shapes)
        expected = sum(int(np.prod(s)) * (1 - r) for s, r in shapes)
        distinct = sorted({s for s, _ in shapes})
        print(f"length {length}: {len(shapes)} masks, {units:,} units; shapes {distinct}",
              flush=True)
        draws = {name: masks_function(variant, shapes) for name, variant in VARIANTS.items()}
        for name, variant in VARIANTS.items():
            kept = int(masks_function(variant, shapes, count=True)(seed))
            draws[name](seed)
            print(f"  {name:7s} kept {kept / units:.5f} of the units (expected "
                  f"{expected / units:.5f})", flush=True)
        times = {name: [] for name in draws}
        for r in range(args.rounds):
            for name in (list(draws) if r % 2 == 0 else list(draws)[::-1]):
                times[name].append(_time(lambda: draws[name](seed).numpy(), args.draws)[0])
        median = {name: float(np.median(t)) * 1e3 for name, t in times.items()}
        print(f"  masks of one step: philox {median['philox']:.2f} ms, hashed "
              f"{median['hashed']:.2f} ms (median of {args.rounds} rounds) = "
              f"{median['philox'] / median['hashed']:.2f}x", flush=True)

    if args.step_rounds:
        batch = synthetic_batch(args.batch_tokens, args.step_length, args.vocab_size,
                                np.random.default_rng(0))
        steps = {}
        with tempfile.TemporaryDirectory() as tmp:
            for name, variant in VARIANTS.items():
                with keep_masks_from(variant):
                    steps[name] = t2t_lite_step(hp, batch, args.vocab_size,
                                                os.path.join(tmp, name))
                    steps[name]()
                    steps[name]()
            results = {name: [] for name in steps}
            for r in range(args.step_rounds):
                for name in (list(steps) if r % 2 == 0 else list(steps)[::-1]):
                    results[name].append(_time(steps[name], args.steps))
        wall = {n: float(np.median([w for w, _ in v])) * 1e3 for n, v in results.items()}
        cpu = {n: float(np.median([c for _, c in v])) * 1e3 for n, v in results.items()}
        print(f"train step at [{len(batch['inputs'])}, {args.step_length}]: philox "
              f"{wall['philox']:.1f} ms wall / {cpu['philox']:.1f} ms CPU, hashed "
              f"{wall['hashed']:.1f} / {cpu['hashed']:.1f} ms (medians of {args.step_rounds} "
              f"rounds) = {wall['philox'] / wall['hashed']:.3f}x wall, "
              f"{cpu['philox'] / cpu['hashed']:.3f}x CPU; load average "
              f"{os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
