"""Decoding speed of the Transformer: fast cached decoding against full recompute.

    python bench/bench_decoding.py [--hparams_sets transformer_tiny,transformer_base]
        [--batch_size 8] [--input_length 20] [--decode_length 20] [--vocab_size 8192]
        [--beam_sizes 1,4] [--repeats 3]

For each hparams set, one model with random weights decodes the same random batch with
greedy and beam search, each with the key/value caches (`use_cache=True`: the
encoder once, the encoder-decoder K/V projected once, one decoder position per step) and with
full recompute (`use_cache=False`: the whole decoder re-run on the prefix every step, t2t's
slow path); greedy also with the cached decoder compiled by XLA (`jit_compile=True`). All
modes must return the same ids; the script checks it. Every configuration is
traced and run once before timing; the best of `--repeats` interleaved runs is reported as
milliseconds per batch (wall clock, and CPU time of the process, which a busy shared machine
disturbs less), sentences/s and tokens/s (tokens = generated positions up to and including the first EOS,
or all of them) with the speed-up over full recompute.
"""
import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from t2t_lite.data_generators.text_encoder import EOS_ID
from t2t_lite.hparams_lib import create_hparams
from t2t_lite.models.transformer import Transformer


def generated_tokens(outputs: np.ndarray) -> int:
    """Positions up to and including each row's first EOS (all positions without EOS)."""
    if outputs.ndim == 3:  # [B, K, T]: count the first beam
        outputs = outputs[:, 0]
    total = 0
    for row in outputs:
        eos = np.flatnonzero(row == EOS_ID)
        total += int(eos[0]) + 1 if eos.size else row.size
    return total


def bench_set(name: str, args) -> list[dict]:
    keras.utils.set_random_seed(0)
    model = Transformer(create_hparams(name), args.vocab_size, args.vocab_size)
    rng = np.random.default_rng(0)
    inputs = rng.integers(2, args.vocab_size, size=(args.batch_size, args.input_length))
    inputs[:, -1] = EOS_ID
    features = {"inputs": tf.constant(inputs, tf.int32)}
    configs = []
    for beam in args.beam_sizes:
        configs += [(beam, "cache"), (beam, "recompute")]
        if beam == 1:
            configs.insert(-1, (beam, "cache+xla"))

    def run(beam, mode):
        return model.infer(features, decode_length=args.decode_length, beam_size=beam,
                           use_cache=mode != "recompute", jit_compile=mode == "cache+xla")

    outputs = {config: run(*config) for config in configs}  # trace + first run
    for beam, mode in configs:
        reference = outputs[(beam, "recompute")]["outputs"]
        if not np.array_equal(outputs[(beam, mode)]["outputs"], reference):
            raise SystemExit(f"{name} beam {beam}: {mode} and recompute ids differ")
    best = dict.fromkeys(configs, float("inf"))
    best_cpu = dict.fromkeys(configs, float("inf"))
    for _ in range(args.repeats):
        for config in configs:
            start, start_cpu = time.perf_counter(), time.process_time()
            result = run(*config)
            result["outputs"].numpy()
            best[config] = min(best[config], time.perf_counter() - start)
            best_cpu[config] = min(best_cpu[config], time.process_time() - start_cpu)
    rows = []
    for beam, mode in configs:
        seconds = best[(beam, mode)]
        tokens = generated_tokens(outputs[(beam, mode)]["outputs"].numpy())
        rows.append({
            "set": name, "beam": beam, "mode": mode, "seconds": seconds,
            "cpu_seconds": best_cpu[(beam, mode)],
            "sentences_per_s": args.batch_size / seconds, "tokens_per_s": tokens / seconds,
            "speedup": best[(beam, "recompute")] / seconds,
        })
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hparams_sets", default="transformer_tiny,transformer_base")
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--input_length", type=int, default=20)
    parser.add_argument("--decode_length", type=int, default=20,
                        help="extra length: at most input_length + decode_length steps")
    parser.add_argument("--vocab_size", type=int, default=8192)
    parser.add_argument("--beam_sizes", default="1,4")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    args.beam_sizes = [int(b) for b in args.beam_sizes.split(",")]
    device = "GPU" if tf.config.list_physical_devices("GPU") else "CPU"
    print(f"device {device}, batch {args.batch_size}, input length {args.input_length}, "
          f"max steps {args.input_length + args.decode_length}, vocab {args.vocab_size}")
    print(f"{'hparams set':<18}{'decode':<8}{'mode':<11}{'ms/batch':>10}{'cpu ms':>10}"
          f"{'sent/s':>10}"
          f"{'tok/s':>10}{'vs recompute':>14}")
    for name in args.hparams_sets.split(","):
        for row in bench_set(name, args):
            decode = "greedy" if row["beam"] == 1 else f"beam{row['beam']}"
            speedup = f"{row['speedup']:.2f}x" if row["mode"] != "recompute" else ""
            print(f"{row['set']:<18}{decode:<8}{row['mode']:<11}{row['seconds'] * 1e3:>10.1f}"
                  f"{row['cpu_seconds'] * 1e3:>10.1f}"
                  f"{row['sentences_per_s']:>10.1f}{row['tokens_per_s']:>10.0f}{speedup:>14}")


if __name__ == "__main__":
    main()
