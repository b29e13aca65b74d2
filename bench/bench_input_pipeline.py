"""Is the input pipeline ever the bottleneck? Problem.dataset against a training step.

    python bench/bench_input_pipeline.py [--data wmt_toy|algorithmic] [--hparams_set
        transformer_tiny] [--hparams ...] [--batches 300] [--steps 30] [--rounds 3]

Data: `wmt_toy` = translate_ende_wmt32k generated from ../shared/data/wmt_toy_ende (9,000 real
WMT sentence pairs; t2t's 1k toy vocab from ../shared/fixtures, or built when absent), so the
lengths are those of real translation data; `algorithmic` = algorithmic_reverse_decimal40_small
(100,000 examples, the embedded default's kind of data). Both are generated into a temporary
directory first (not timed).

Three measurements in the same run, with the hparams set's batching (transformer_tiny: 4096
tokens per batch, max_length 256):
1. pipeline alone: `Problem.dataset(TRAIN)` iterated in Python as a training loop does
   (read, shuffle, parse, filter, bucket, pad, batch-shuffle) -> examples/s, real (non-pad)
   tokens/s, batches/s;
2. training steps on batches held in memory (no pipeline): forward + backward + Adam of the
   Transformer in one tf.function -> examples/s and tokens/s the model consumes;
3. the same training steps fed live from the pipeline, sharing the CPU with it.
Each of `--rounds` rounds runs (3) and then replays its batches for (2), so both time the
same batches; the best round of each is reported. The pipeline is not a bottleneck when (1)
is well above (2) and the loop of (3) hardly ever waits in `next()` (its share of the loop's
time is printed); on a CPU shared with other jobs, (3) / (2) varies by +-20% from run to run.
"""
import argparse
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from t2t_lite import registry
from t2t_lite.data_generators import problem as problem_lib
from t2t_lite.hparams_lib import create_hparams
from t2t_lite.layers import common_layers
from t2t_lite.models.transformer import Transformer

SHARED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..",
                      "shared")
TOY_VOCAB = os.path.join(SHARED, "fixtures", "t2t", "vocab.translate_toy_ende1k.1024.subwords")


def make_data(kind: str, data_dir: str):
    """Generates the benchmark data; returns the problem instance."""
    tmp_dir = os.path.join(data_dir, "tmp")
    os.makedirs(tmp_dir)
    if kind == "algorithmic":
        prob = registry.problem("algorithmic_reverse_decimal40_small")
    else:
        toy = os.path.join(SHARED, "data", "wmt_toy_ende")
        prob = registry.problem("translate_ende_wmt32k")
        prob = type(prob)(approx_vocab_size=1024)
        for split, src in (("train", "train"), ("dev", "dev")):
            for ext, lang in (("lang1", "en"), ("lang2", "de")):
                shutil.copy(os.path.join(toy, f"{src}.{lang}"),
                            os.path.join(tmp_dir, f"translate_ende_wmt32k-compiled-{split}.{ext}"))
        if os.path.exists(TOY_VOCAB):
            shutil.copy(TOY_VOCAB, os.path.join(data_dir, prob.vocab_filename))
    np.random.seed(429459)
    prob.generate_data(data_dir, tmp_dir)
    return prob


def count(batch) -> tuple[int, int]:
    """(examples, non-pad tokens of inputs + targets) of a batch."""
    inputs, targets = batch["inputs"].numpy(), batch["targets"].numpy()
    return inputs.shape[0], int(np.count_nonzero(inputs) + np.count_nonzero(targets))


def bench_pipeline(prob, data_dir, hparams, num_batches):
    dataset = prob.dataset(problem_lib.ModeKeys.TRAIN, data_dir, hparams)
    iterator = iter(dataset)
    for _ in range(20):  # fill the shuffle buffers and bucket windows
        next(iterator)
    examples = tokens = 0
    start = time.perf_counter()
    for _ in range(num_batches):
        e, t = count(next(iterator))
        examples, tokens = examples + e, tokens + t
    seconds = time.perf_counter() - start
    return {"examples/s": examples / seconds, "tokens/s": tokens / seconds,
            "batches/s": num_batches / seconds}


def make_train_step(hparams, vocab_size):
    keras.utils.set_random_seed(0)
    model = Transformer(hparams, vocab_size, vocab_size)
    optimizer = keras.optimizers.Adam(1e-4, beta_1=0.9, beta_2=0.997, epsilon=1e-9)
    spec = {"inputs": tf.TensorSpec([None, None], tf.int32),
            "targets": tf.TensorSpec([None, None], tf.int32)}

    @tf.function(input_signature=[spec])
    def train_step(features):
        with tf.GradientTape() as tape:
            logits = model(features, training=True)
            num, den = common_layers.padded_cross_entropy(
                logits, features["targets"], hparams.label_smoothing)
            loss = num / tf.maximum(den, 1.0)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return train_step


def bench_steps(train_step, batches):
    examples = tokens = 0
    start = time.perf_counter()
    for batch in batches:
        train_step(batch).numpy()
        e, t = count(batch)
        examples, tokens = examples + e, tokens + t
    seconds = time.perf_counter() - start
    return {"examples/s": examples / seconds, "tokens/s": tokens / seconds,
            "batches/s": len(batches) / seconds}


def bench_live(train_step, iterator, num_steps):
    """Steps fed from the pipeline; also returns the batches, to replay them from memory.

    "wait" is the share of the loop spent in `next(iterator)`, i.e. waiting for data.
    """
    batches = []
    waiting = 0.0
    start = time.perf_counter()
    for _ in range(num_steps):
        before = time.perf_counter()
        batch = next(iterator)
        waiting += time.perf_counter() - before
        train_step(batch).numpy()
        batches.append(batch)
    seconds = time.perf_counter() - start
    examples, tokens = np.sum([count(b) for b in batches], axis=0)
    return {"examples/s": examples / seconds, "tokens/s": tokens / seconds,
            "batches/s": num_steps / seconds, "wait": waiting / seconds}, batches


def best(results):
    return max(results, key=lambda r: r["batches/s"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", choices=["wmt_toy", "algorithmic"], default="wmt_toy")
    parser.add_argument("--hparams_set", default="transformer_tiny")
    parser.add_argument(
        "--hparams", default=None,
        help='overrides, "a=1,b=2" (default for algorithmic: symbol_modality_num_shards=1, '
             "as its 12-symbol vocab is smaller than 16 embedding shards)")
    parser.add_argument("--batches", type=int, default=300, help="pipeline batches timed")
    parser.add_argument("--steps", type=int, default=30, help="training steps timed per round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (best kept)")
    args = parser.parse_args()

    data_dir = tempfile.mkdtemp(prefix="bench_input_pipeline_")
    try:
        start = time.perf_counter()
        prob = make_data(args.data, data_dir)
        print(f"datagen ({args.data}): {time.perf_counter() - start:.1f}s")
        overrides = args.hparams
        if overrides is None:
            overrides = "symbol_modality_num_shards=1" if args.data == "algorithmic" else ""
        hparams = create_hparams(args.hparams_set, overrides)
        vocab_size = prob.get_hparams(hparams, data_dir=data_dir).vocab_size["targets"]

        pipeline = bench_pipeline(prob, data_dir, hparams, args.batches)
        train_step = make_train_step(hparams, vocab_size)
        iterator = iter(prob.dataset(problem_lib.ModeKeys.TRAIN, data_dir, hparams, seed=1))
        for _ in range(3):
            train_step(next(iterator))
        # Each round runs steps fed live, then replays the very same batches from memory, so
        # both do identical work; best round of each, since other jobs add noise.
        memory_runs, live_runs = [], []
        for _ in range(args.rounds):
            result, batches = bench_live(train_step, iterator, args.steps)
            live_runs.append(result)
            memory_runs.append(bench_steps(train_step, batches))
        in_memory, live = best(memory_runs), best(live_runs)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)

    print(f"\n{args.hparams_set}, batch_size {hparams.batch_size} tokens, "
          f"max_length {hparams.max_length}, data {args.data}, {os.cpu_count()} CPUs")
    print(f"{'measurement':<38}{'examples/s':>12}{'tokens/s':>12}{'batches/s':>11}")
    for name, result in (("1. pipeline alone", pipeline),
                         ("2. train steps, batches in memory", in_memory),
                         ("3. train steps fed by the pipeline", live)):
        print(f"{name:<38}{result['examples/s']:>12.0f}{result['tokens/s']:>12.0f}"
              f"{result['batches/s']:>11.2f}")
    print(f"pipeline headroom (1 / 2): {pipeline['examples/s'] / in_memory['examples/s']:.1f}x;"
          f" live / in-memory step rate (3 / 2): "
          f"{live['batches/s'] / in_memory['batches/s']:.2f}; time spent waiting for data in "
          f"(3): {100 * live['wait']:.2f}%")


if __name__ == "__main__":
    main()
