"""Training throughput: t2t_lite's Trainer against a plain hand-written Keras Transformer.

    python bench/bench_training.py [--hparams_sets transformer_tiny,transformer_base]
        [--batch_tokens 4096,1024] [--length 32] [--vocab_size 8192] [--steps 10,2]
        [--rounds 3] [--dtypes float32[,bfloat16]] [--no_baseline] [--profile_steps N]
        [--hparams "layer_prepostprocess_dropout=0.0,..."]

For each hparams set (with its own dropout and label smoothing), both implementations train
on the same synthetic batch (`batch_tokens / length` sequences of `length` source and target
tokens, no padding), each in its own loop that fetches the loss every step:
* t2t_lite: the `Trainer`'s compiled train step (default strategy, t2t's label-smoothed loss
  over the global token count, gradient norm, Adam with t2t's schedule) on the `transformer`
  model, reading loss, token count and gradient norm back every step (`Trainer.train` reads
  them only at each progress line, so this is the conservative setting);
* baseline: the same shapes written plainly with `keras.layers.MultiHeadAttention`,
  `LayerNormalization`, `Dense`, an `Embedding` shared with the softmax, Keras' Adam and a
  masked sparse cross-entropy, in one `tf.function` train step.
Both are traced and warmed up, then timed in `rounds` interleaved rounds of `steps` steps
(the best round of each is reported: the machine may be shared). Printed: tokens/s (target
tokens), steps/s, the model FLOP rate (analytic count of the matmuls and attention products,
x3 for forward + backward) and its fraction of the machine's fp32 matmul peak, measured in the
same run with a large `tf.matmul`.

`--dtypes float32,bfloat16` times the t2t_lite step once per `activation_dtype` (t2t's mixed
precision: float32 weights, activations in the dtype), interleaved with the others, and
prints each dtype's speed against float32. For every dtype it also times `tf.matmul` on the
model's own shapes at the batch used (`model_matmul_rate`: the Q/K/V/output projections, the
two FFN matmuls and the softmax layer, each forward and its two gradient matmuls, weighted by
how many the step runs) and prints the step's FLOP rate as a fraction of that rate: how close
the step comes to its own matmuls run back to back. The matmuls are timed before each round's
steps and after the last round (matmuls, steps, matmuls, ...), and each round's fraction is
printed with the load twice: by wall time and by process CPU time (`time.process_time`, all
threads), each against the mean of the matmul rates just before and after. On a shared
machine the wall figure moves with the other processes' share of the cores; the CPU figure
(the same threads on both sides) moves far less. The summary line gives the median round. `--no_baseline` skips the plain Keras
model (slow on 2 cores at transformer_base); `--profile_steps N` traces N more steps of each
dtype with `tf.profiler` and prints their op time by category (matmuls, dropout masks, casts,
layer norms, optimizer, ...), by op type and by op name. `--hparams` overrides every set's
hparams (both implementations), e.g. all dropout rates 0 to see what dropout costs. The first
line names the CPU and its bfloat16 matmul units (`machine.describe_cpu`).
"""
import argparse
import collections
import math
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import describe_cpu

from t2t_lite.hparams import HParams
from t2t_lite.hparams_lib import create_hparams
from t2t_lite.models.transformer import Transformer
from t2t_lite.training import trainer_lib


def matmul_peak(n: int = 2048, repeats: int = 5, inner: int = 10) -> float:
    """Best fp32 FLOP/s of a [n, n] x [n, n] tf.matmul chain (2 n^3 FLOPs per product)."""
    a = tf.random.normal([n, n])

    @tf.function
    def chain(x):
        for _ in range(inner):
            x = tf.matmul(x, a) * (1.0 / n)
        return x

    chain(a).numpy()
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        chain(a).numpy()
        best = min(best, time.perf_counter() - start)
    return 2.0 * n**3 * inner / best


def model_matmul_shapes(hp: HParams, batch: int, length: int,
                        vocab: int) -> dict[str, tuple[int, int, int, int]]:
    """The matmuls that `train_flops` counts (attention products aside, ~L / 2d of them):
    name -> (m, k, n, forward products per step) of [m, k] x [k, n]."""
    d, f, n = hp.hidden_size, hp.filter_size, hp.num_hidden_layers
    tokens = batch * length
    return {
        # 4 projections per attention, 1 attention per encoder layer, 2 per decoder layer.
        "projection": (tokens, d, d, 4 * 3 * n),
        "ffn_in": (tokens, d, f, 2 * n),
        "ffn_out": (tokens, f, d, 2 * n),
        "logits": (tokens, d, vocab, 1),
    }


def model_matmul_rate(hp: HParams, batch: int, length: int, vocab: int, dtype: tf.DType,
                      repeats: int = 5) -> tuple[float, dict[str, float], float, float]:
    """FLOP/s of `tf.matmul` in `dtype` on the model's own shapes, run as training runs them:
    each shape's forward [m, k] x [k, n] and its two gradients (dx = dy wᵀ, dw = xᵀ dy),
    `repeats` calls after one warm-up call; the overall rate weights each shape by its products
    per step (total FLOPs / total time).

    Returns (overall rate from the best call of each shape, that rate by shape name, overall
    rate from the mean wall time of the calls, overall rate per second of process CPU time
    (all threads) of the calls). The last two time the calls as a step is timed (all of them,
    not the best), so that a step's FLOP rate over them is a like-for-like fraction."""
    total_flops, best_seconds, wall_seconds, cpu_seconds, by_shape = 0.0, 0.0, 0.0, 0.0, {}
    for name, (m, k, n, count) in model_matmul_shapes(hp, batch, length, vocab).items():
        x = tf.cast(tf.random.normal([m, k]), dtype)
        w = tf.cast(tf.random.normal([k, n]) * 0.05, dtype)
        dy = tf.cast(tf.random.normal([m, n]), dtype)

        @tf.function
        def forward_backward(x, w, dy):
            return (tf.matmul(x, w), tf.matmul(dy, w, transpose_b=True),
                    tf.matmul(x, dy, transpose_a=True))

        forward_backward(x, w, dy)
        best, start_wall, start_cpu = math.inf, time.perf_counter(), time.process_time()
        for _ in range(repeats):
            start = time.perf_counter()
            forward_backward(x, w, dy)  # eager call of a CPU function: returns when done
            best = min(best, time.perf_counter() - start)
        wall = (time.perf_counter() - start_wall) / repeats
        cpu = (time.process_time() - start_cpu) / repeats
        flops = 6.0 * m * k * n
        by_shape[name] = flops / best
        total_flops += count * flops
        best_seconds += count * best
        wall_seconds += count * wall
        cpu_seconds += count * cpu
    return (total_flops / best_seconds, by_shape, total_flops / wall_seconds,
            total_flops / cpu_seconds)


def synthetic_batch(tokens: int, length: int, vocab: int, rng: np.random.Generator) -> dict:
    """max(1, tokens // length) source and target rows of `length` random ids in [2, vocab),
    each ending in EOS (1), no padding: {"inputs", "targets": int32 [B, length]}."""
    ids = rng.integers(2, vocab, size=(2, max(1, tokens // length), length))
    ids[:, :, -1] = 1
    return {"inputs": tf.constant(ids[0], tf.int32), "targets": tf.constant(ids[1], tf.int32)}


def train_flops(hp: HParams, batch: int, length: int, vocab: int) -> float:
    """Matmul + attention FLOPs of one training step (forward x 3), source = target length."""
    d, f, n = hp.hidden_size, hp.filter_size, hp.num_hidden_layers
    tokens = batch * length
    # Q, K, V and output projections: 4 matmuls of 2 * d * d per token; QK^T and AV: 2 * L * d
    # each per query token.
    attention = 8 * d * d * tokens + 4 * batch * length * length * d
    ffn = 4 * d * f * tokens  # two matmuls of 2 * d * f per token
    encoder = n * (attention + ffn)
    decoder = n * (2 * attention + ffn)
    softmax = 2 * d * vocab * tokens
    return 3.0 * (encoder + decoder + softmax)


# --- The baseline: a plain Keras Transformer --------------------------------------------------
def _timing_signal(length: int, d: int) -> tf.Tensor:
    position = np.arange(length)[:, None]
    inv = np.exp(-np.log(1e4) * np.arange(d // 2) / max(d // 2 - 1, 1))
    angles = position * inv[None]
    return tf.constant(np.concatenate([np.sin(angles), np.cos(angles)], 1)[None], tf.float32)


class Block(keras.layers.Layer):
    """Pre-norm self-attention (+ encoder-decoder attention) + FFN block."""

    def __init__(self, hp: HParams, cross: bool):
        super().__init__()
        d, h = hp.hidden_size, hp.num_heads
        self.norms = [keras.layers.LayerNormalization(epsilon=1e-6) for _ in range(3)]
        self.self_attention = keras.layers.MultiHeadAttention(
            h, d // h, use_bias=False, dropout=hp.attention_dropout)
        self.cross = keras.layers.MultiHeadAttention(
            h, d // h, use_bias=False, dropout=hp.attention_dropout) if cross else None
        self.ffn_in = keras.layers.Dense(hp.filter_size, activation="relu")
        self.ffn_out = keras.layers.Dense(d)
        self.relu_dropout = keras.layers.Dropout(hp.relu_dropout)
        self.dropout = keras.layers.Dropout(hp.layer_prepostprocess_dropout)

    def call(self, x, memory=None, self_mask=None, memory_mask=None, training=False):
        y = self.norms[0](x)
        x = x + self.dropout(self.self_attention(y, y, attention_mask=self_mask,
                                                 training=training), training=training)
        if self.cross is not None:
            y = self.norms[1](x)
            x = x + self.dropout(self.cross(y, memory, attention_mask=memory_mask,
                                            training=training), training=training)
        y = self.ffn_out(self.relu_dropout(self.ffn_in(self.norms[2](x)), training=training))
        return x + self.dropout(y, training=training)


class PlainTransformer(keras.Model):
    """Pre-norm encoder-decoder Transformer of the same shapes, written with Keras layers."""

    def __init__(self, hp: HParams, vocab: int):
        super().__init__()
        self.d = hp.hidden_size
        self.embedding = keras.layers.Embedding(vocab, self.d)
        self.encoder = [Block(hp, cross=False) for _ in range(hp.num_hidden_layers)]
        self.decoder = [Block(hp, cross=True) for _ in range(hp.num_hidden_layers)]
        self.encoder_norm = keras.layers.LayerNormalization(epsilon=1e-6)
        self.decoder_norm = keras.layers.LayerNormalization(epsilon=1e-6)
        self.dropout = keras.layers.Dropout(hp.layer_prepostprocess_dropout)

    def _embed(self, ids, training):
        x = self.embedding(ids) * self.d**0.5
        return self.dropout(x + _timing_signal(ids.shape[1], self.d), training=training)

    def call(self, inputs, targets, training=False):
        memory_mask = (inputs != 0)[:, None, :]
        x = self._embed(inputs, training)
        for block in self.encoder:
            x = block(x, self_mask=memory_mask, training=training)
        memory = self.encoder_norm(x)
        shifted = tf.pad(targets, [[0, 0], [1, 0]])[:, :-1]
        length = targets.shape[1]
        causal = tf.linalg.band_part(tf.ones([length, length], tf.bool), -1, 0)[None]
        y = self._embed(shifted, training)
        for block in self.decoder:
            y = block(y, memory, self_mask=causal, memory_mask=memory_mask, training=training)
        y = self.decoder_norm(y)
        return tf.matmul(y, self.embedding.embeddings, transpose_b=True)


def baseline_step(hp: HParams, batch: dict, vocab: int):
    """The plain Keras model's compiled train step on `batch`; returns () -> loss."""
    keras.utils.set_random_seed(0)
    model = PlainTransformer(hp, vocab)
    optimizer = keras.optimizers.Adam(1e-4, beta_1=0.9, beta_2=0.997, epsilon=1e-9)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum")
    inputs, targets = batch["inputs"], batch["targets"]

    @tf.function
    def train_step(inputs, targets):
        with tf.GradientTape() as tape:
            logits = model(inputs, targets, training=True)
            weights = tf.cast(targets != 0, tf.float32)
            loss = loss_fn(targets, logits, sample_weight=weights) / tf.reduce_sum(weights)
        variables = model.trainable_variables
        optimizer.apply(tape.gradient(loss, variables), variables)
        return loss

    return lambda: float(train_step(inputs, targets))


# --- t2t_lite ---------------------------------------------------------------------------------
class _FixedBatchProblem:
    """A problem whose training data is one batch repeated (no input-pipeline cost)."""

    name = "bench_fixed_batch"

    def __init__(self, batch: dict, vocab: int):
        self.batch, self.vocab = batch, vocab

    def get_hparams(self, model_hparams=None, data_dir=None):
        return HParams(vocab_size={"inputs": self.vocab, "targets": self.vocab},
                       target_space_id=0, loss_multiplier=1.0)

    def eval_metrics(self):
        return ["accuracy"]

    def dataset(self, mode, data_dir, hparams, input_context=None, seed=None):
        return tf.data.Dataset.from_tensors(self.batch).repeat()


def t2t_lite_step(hp: HParams, batch: dict, vocab: int, output_dir: str,
                  xla_compile: bool = False, dtype: str = "float32"):
    """t2t_lite's Trainer train step (as `Trainer.train` runs it) on `batch`; () -> loss.

    The loop of `Trainer.train` adds only host-side bookkeeping per step; it reads the loss,
    token count and gradient norm at progress lines, this function after every step.
    `xla_compile` compiles the step with XLA (--xla_compile); `dtype` is the
    `activation_dtype` (the Trainer builds the model under its mixed-precision policy).
    """
    hp = hp.copy()
    hp.set_hparam("activation_dtype", dtype)
    keras.utils.set_random_seed(0)
    config = trainer_lib.RunConfig(output_dir=output_dir, num_decode_examples=0,
                                   xla_compile=xla_compile)
    trainer = trainer_lib.Trainer(lambda: Transformer(hp, vocab, vocab), hp,
                                  _FixedBatchProblem(batch, vocab), "", config)
    spec = tf.data.Dataset.from_tensors(batch).element_spec
    train_step = trainer._make_train_step(spec, update=True)

    def step():
        out = train_step(batch)
        float(out["tokens"]), float(out["grad_norm"])
        return float(out["loss"])

    return step


def _time(step, count: int) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) per call of `count` calls of `step`. On a shared
    machine the wall time includes the seconds other processes held the cores; the CPU time
    does not (it does include TensorFlow's worker threads spinning while they wait for work)."""
    start, start_cpu = time.perf_counter(), time.process_time()
    for _ in range(count):
        step()
    return (time.perf_counter() - start) / count, (time.process_time() - start_cpu) / count


def matmul_rate_fractions(flops: float, step_seconds: tuple[float, float],
                          rates_before: tuple, rates_after: tuple) -> tuple[float, float]:
    """A round's step FLOP rate as fractions of its matmul rate, (by wall time, by process CPU
    time): the step's `flops` over its (wall, CPU) seconds, against the matmul rates measured
    just before and just after the round's steps (`model_matmul_rate`'s results: their mean
    wall and CPU rates; averaged as times, i.e. harmonically), so both sides share the same
    minutes of a shared machine and, by CPU time, the same threads."""
    fractions = []
    for seconds, index in zip(step_seconds, (2, 3)):
        matmul_seconds_per_flop = (1 / rates_before[index] + 1 / rates_after[index]) / 2
        fractions.append(flops / seconds * matmul_seconds_per_flop)
    return fractions[0], fractions[1]


# Op types of the matmuls whose FLOPs `train_flops` counts: oneDNN's kernels (`_Mkl*`, and
# `_MklNative*` for the ones TensorFlow runs on its native layout), and Eigen's where
# TensorFlow leaves oneDNN off (CPUs without AVX512-VNNI/BF16 or AMX, e.g. AVX2 only), whose
# matmul + bias (+ relu) is `_FusedMatMul`.
_MATMUL_TYPES = ("MatMul", "_MklMatMul", "_MklNativeFusedMatMul", "_MklFusedMatMul",
                 "_FusedMatMul", "BatchMatMulV2", "BatchMatMulV3", "_MklBatchMatMulV2",
                 "_MklBatchMatMulV3", "_MklFusedBatchMatMulV2", "_MklNativeBatchMatMulV2")
# Moving data between layouts: head transposes, splits and concats, and oneDNN's conversions
# between its blocked layout and TensorFlow's (`_MklToTf`, `_MklInputConversion`; none ran
# in TensorFlow 2.21's native-format oneDNN ops here, but older builds insert them).
_LAYOUT_TYPES = ("Transpose", "_MklTranspose", "_MklNativeTranspose", "SplitV", "Split",
                 "ConcatV2", "_MklConcatV2", "_MklNativeConcatV2", "Slice", "StridedSlice",
                 "Pack", "TensorListConcatV2", "_MklToTf", "_MklInputConversion")


def op_category(op_name: str, op_type: str) -> str:
    """A profiled op's share of the step: the matmuls or one kind of overhead around them.
    Knows Eigen's and oneDNN's op types (TF_ENABLE_ONEDNN_OPTS=1: `_Mkl*`)."""
    if (op_name.startswith("adam") or "VariableOp" in op_type
            or op_type.startswith(("ResourceApply", "_MklResourceApply", "_MklApply"))):
        return "optimizer update (Adam, float32)"
    if op_type in _MATMUL_TYPES:
        return "matmuls (counted FLOPs)"
    if op_type.startswith("StatelessRandom"):
        # TensorFlow's Philox kernel; the hashed masks t2t_lite draws now run as XLA
        # kernels, which the profiler's op events do not record.
        return "dropout masks (Philox draws)"
    if op_type in ("Cast", "_MklCast"):
        return "casts"
    if op_type in _LAYOUT_TYPES:
        return "layout (head transposes, split, concat)"
    if "layer_norm" in op_name or op_type in ("_MklLayerNorm", "_MklFusedLayerNorm"):
        return "layer norms (forward + backward, float32 statistics)"
    if op_name.startswith(("while/", "softmax_cross_entropy_grad")):
        return "softmax layer: chunk loss (float32) besides its matmuls"
    if "softmax_dropout_matmul" in op_name or op_type in ("Softmax", "_MklSoftmax"):
        return "attention softmax (forward + backward, with its dropout)"
    if "stateless_random_uniform" in op_name or "dropout" in op_name:
        return "dropout apply (multiply by the scaled mask; forward + backward)"
    return "other elementwise / reductions (residual, relu, bias gradients, gradient norm)"


def profile_steps(step, count: int) -> tuple:
    """Op time per step of `count` traced calls of `step` (summed over threads):
    (seconds by op type, by op name and type of the ops other than matmuls, by
    `op_category`)."""
    from profile_train_step import xplane_op_events

    logdir = tempfile.mkdtemp(prefix="bench_training_profile_")
    tf.profiler.experimental.start(logdir)
    for _ in range(count):
        step()
    tf.profiler.experimental.stop()
    tables = collections.Counter(), collections.Counter(), collections.Counter()
    for op_name, op_type, seconds in xplane_op_events(logdir):
        category = op_category(op_name, op_type)
        tables[0][op_type] += seconds / count
        if not category.startswith("matmuls"):  # the matmuls are in the by-type table
            tables[1][f"{op_name} ({op_type})"] += seconds / count
        tables[2][category] += seconds / count
    return tables


def print_profile(title: str, seconds: dict, top: int = 25) -> None:
    total = sum(seconds.values())
    print(f"  {title}: {total * 1e3:.0f} ms of op time per step (all threads)")
    for name, value in sorted(seconds.items(), key=lambda kv: -kv[1])[:top]:
        print(f"    {value * 1e3:8.1f} ms {value / total:6.1%}  {name}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hparams_sets", default="transformer_tiny,transformer_base")
    parser.add_argument("--batch_tokens", default="4096,1024")
    parser.add_argument("--steps", default="10,2")
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--vocab_size", type=int, default=8192)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dtypes", default="float32",
                        help="comma-separated activation_dtypes of the t2t_lite step")
    parser.add_argument("--no_baseline", action="store_true",
                        help="skip the plain Keras model")
    parser.add_argument("--hparams", default="",
                        help='overrides of every set, t2t style: "a=1,b=2"')
    parser.add_argument("--profile_steps", type=int, default=0,
                        help="trace this many steps per dtype and print their op times")
    args = parser.parse_args()
    names = args.hparams_sets.split(",")
    batch_tokens = [int(b) for b in args.batch_tokens.split(",")]
    steps = [int(s) for s in args.steps.split(",")]
    dtypes = args.dtypes.split(",")

    peak = matmul_peak()
    print(f"machine: {describe_cpu()}; load average {os.getloadavg()[0]:.2f}")
    print(f"device: {tf.config.list_logical_devices()[-1].name}; fp32 matmul peak "
          f"{peak / 1e9:.1f} GFLOP/s (best of 5 chains of 10 [2048x2048] products)")
    rng = np.random.default_rng(0)
    for name, tokens, n in zip(names, batch_tokens, steps):
        hp = create_hparams(name, args.hparams)
        batch = synthetic_batch(tokens, args.length, args.vocab_size, rng)
        batch_size = int(batch["inputs"].shape[0])
        flops = train_flops(hp, batch_size, args.length, args.vocab_size)
        with tempfile.TemporaryDirectory() as output_dir:
            impls = {} if args.no_baseline else {
                "plain Keras": baseline_step(hp, batch, args.vocab_size)}
            for dtype in dtypes:
                impl = "t2t_lite" if dtype == "float32" else f"t2t_lite {dtype}"
                impls[impl] = t2t_lite_step(hp, batch, args.vocab_size,
                                            os.path.join(output_dir, dtype), dtype=dtype)
            for step in impls.values():  # trace and warm up
                _time(step, 2)
            # Interleaved rounds, the matmul rates of the model's shapes measured before each
            # round's steps and after the last (matmuls, steps, matmuls, ...): the machine may
            # be shared, so each round's step is set against the matmuls of its own minutes.
            times = {impl: [] for impl in impls}  # (wall, CPU) seconds per step, by round
            rates = {dtype: [] for dtype in dtypes}
            loads = []
            for _ in range(args.rounds + 1):
                for dtype in dtypes:
                    rates[dtype].append(model_matmul_rate(
                        hp, batch_size, args.length, args.vocab_size, tf.as_dtype(dtype)))
                if len(loads) == args.rounds:
                    break
                loads.append(os.getloadavg()[0])
                for impl, step in impls.items():
                    times[impl].append(_time(step, n))
            profiles = {impl: profile_steps(step, args.profile_steps)
                        for impl, step in impls.items() if args.profile_steps}
        for dtype in dtypes:
            best = max(rates[dtype], key=lambda r: r[0])
            shapes = ", ".join(f"{shape} {rate / 1e9:.0f}" for shape, rate in best[1].items())
            print(f"{name:17s} {dtype} tf.matmul on the model's shapes: "
                  f"{best[0] / 1e9:.1f} GFLOP/s (best call of each shape; {shapes} GFLOP/s; "
                  f"shapes {model_matmul_shapes(hp, batch_size, args.length, args.vocab_size)})")
        for impl, seconds in times.items():
            dtype = impl.split(" ")[1] if impl.startswith("t2t_lite ") else "float32"
            walls, cpus = [s[0] for s in seconds], [s[1] for s in seconds]
            best = min(walls)
            line = (f"{name:17s} batch {batch_size}x{args.length} {impl:17s} "
                    f"{batch_size * args.length / best:8.0f} tokens/s {1 / best:7.3f} steps/s "
                    f"{flops / best / 1e9:6.1f} GFLOP/s = {flops / best / peak:6.1%} of peak ")
            if dtype in rates:
                fractions = []
                for i, (wall, cpu) in enumerate(seconds):
                    fractions.append(matmul_rate_fractions(
                        flops, (wall, cpu), rates[dtype][i], rates[dtype][i + 1]))
                    around = rates[dtype][i:i + 2]
                    print(f"{name:17s} {impl} round {i}: load {loads[i]:.2f}; step "
                          f"{wall * 1e3:.0f} ms wall, {cpu * 1e3:.0f} ms CPU; matmuls "
                          f"before/after {around[0][2] / 1e9:.1f}/{around[1][2] / 1e9:.1f} "
                          f"GFLOP/s wall, {around[0][3] / 1e9:.1f}/{around[1][3] / 1e9:.1f} "
                          f"per CPU second; step = {fractions[-1][0]:.1%} of its matmul rate "
                          f"by wall time, {fractions[-1][1]:.1%} by CPU time", flush=True)
                line += (f"= {np.median([f[0] for f in fractions]):6.1%} of its matmul rate "
                         f"(median round, wall time; by CPU time "
                         f"{np.median([f[1] for f in fractions]):.1%}) ")
            print(line + f"(median round {np.median(walls) * 1e3:.0f} ms/step; process CPU "
                  f"time best {min(cpus) * 1e3:.0f}, median {np.median(cpus) * 1e3:.0f} ms/step)",
                  flush=True)
        if "plain Keras" in times and "t2t_lite" in times:
            ratio = min(times["plain Keras"])[0] / min(times["t2t_lite"])[0]
            print(f"{name:17s} t2t_lite / plain Keras speed: {ratio:.2f}x", flush=True)
        if "t2t_lite" in times:
            for impl, seconds in times.items():
                if impl.startswith("t2t_lite "):
                    ratio = min(times["t2t_lite"])[0] / min(seconds)[0]
                    median = (np.median([t[0] for t in times["t2t_lite"]])
                              / np.median([t[0] for t in seconds]))
                    print(f"{name:17s} {impl} / t2t_lite float32 speed: {ratio:.2f}x "
                          f"(medians {median:.2f}x)", flush=True)
        for impl, (by_type, by_name, by_category) in profiles.items():
            print_profile(f"{name} {impl}, by category", by_category)
            print_profile(f"{name} {impl}, by op type", by_type)
            print_profile(f"{name} {impl}, ops other than matmuls, by op name", by_name, 40)


if __name__ == "__main__":
    main()
