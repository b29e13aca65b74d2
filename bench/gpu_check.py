"""One table to choose the defaults of a GPU (or any machine) from: training steps/s of one
model in float32 / bfloat16 / float16, with the hand-written kernels and with plain ops
(hparams.use_fused_kernels), with and without XLA, and beam-decode sentences/s per dtype.

    bash bench/gpu_check.sh [--small] [--hparams_set transformer_base] [--steps 20] ...

Training rows time `bench_training.t2t_lite_step` (the Trainer's compiled step on one fixed
synthetic batch, no padding); decode rows time `Transformer.infer` with beam search on a
fixed random batch (the model's random weights: the decodes run to their full length).
Each configuration is traced and warmed up before it is timed; the best of `--rounds`
rounds is reported. `--small` (the default without a GPU) runs transformer_tiny with one
layer and tiny batches for a few steps, so that CI keeps the script working; its figures
mean nothing.
"""
import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench_training import _time, t2t_lite_step

from t2t_lite.data_generators.text_encoder import EOS_ID
from t2t_lite.hparams_lib import create_hparams
from t2t_lite.models.transformer import Transformer
from t2t_lite.utils import precision

DTYPES = ("float32", "bfloat16", "float16")

# --small: transformer_tiny cut to one layer, tiny batches, a few steps.
SMALL = {"hparams_set": "transformer_tiny", "hparams": "num_hidden_layers=1",
         "batch_tokens": 64, "length": 8, "vocab_size": 64, "steps": 2, "rounds": 1,
         "decode_batch": 2, "decode_length": 3, "beam_size": 2}


def train_rows(args) -> list[dict]:
    """steps/s of every (dtype, kernels, XLA) training configuration."""
    rng = np.random.default_rng(0)
    batch_size = max(1, args.batch_tokens // args.length)
    ids = rng.integers(2, args.vocab_size, size=(2, batch_size, args.length))
    ids[:, :, -1] = EOS_ID
    batch = {"inputs": tf.constant(ids[0], tf.int32), "targets": tf.constant(ids[1], tf.int32)}
    rows = []
    for dtype in DTYPES:
        for fused in (True, False):
            for xla in (False, True):
                hp = create_hparams(args.hparams_set, args.hparams)
                hp.activation_dtype = dtype
                hp.use_fused_kernels = fused

                def steps_per_s(hp=hp, xla=xla):
                    with tempfile.TemporaryDirectory() as output_dir:
                        step = t2t_lite_step(hp, batch, args.vocab_size, output_dir, xla)
                        _time(step, 2)  # trace (and compile) and warm up
                        # _time gives (wall, CPU) seconds a step; a GPU's rate is wall time's.
                        return 1 / min(_time(step, args.steps)[0] for _ in range(args.rounds))

                rows.append(_row({"what": "train", "dtype": dtype,
                                  "kernels": "fused" if fused else "plain",
                                  "xla": "on" if xla else "off", "unit": "steps/s"},
                                 steps_per_s))
    return rows


def decode_rows(args) -> list[dict]:
    """Beam-search sentences/s of the model in every dtype (the kernels switch changes
    nothing in decoding: no dropout, the same layer norm forward)."""
    rng = np.random.default_rng(1)
    inputs = rng.integers(2, args.vocab_size, size=(args.decode_batch, args.length))
    inputs[:, -1] = EOS_ID
    features = {"inputs": tf.constant(inputs, tf.int32)}
    rows = []
    for dtype in DTYPES:
        hp = create_hparams(args.hparams_set, args.hparams)
        hp.activation_dtype = dtype

        def sentences_per_s(hp=hp):
            keras.utils.set_random_seed(0)
            with precision.activation_policy(hp):
                model = Transformer(hp, args.vocab_size, args.vocab_size)
            model.infer(features, decode_length=args.decode_length,
                        beam_size=args.beam_size)["outputs"].numpy()  # trace and warm up
            best = np.inf
            for _ in range(args.rounds):
                start = time.perf_counter()
                model.infer(features, decode_length=args.decode_length,
                            beam_size=args.beam_size)["outputs"].numpy()
                best = min(best, time.perf_counter() - start)
            return args.decode_batch / best

        rows.append(_row({"what": f"decode beam{args.beam_size}", "dtype": dtype,
                          "kernels": "-", "xla": "off", "unit": "sentences/s"},
                         sentences_per_s))
    return rows


def _row(row: dict, measure) -> dict:
    """`row` with "rate" = measure(), printed; a configuration that fails is printed with
    its error (the other rows still run: device time is scarce) and has no rate."""
    try:
        row["rate"] = measure()
    except Exception as e:  # noqa: BLE001 - any failure of one configuration
        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    print(_format(row), flush=True)
    return row


def _format(row: dict) -> str:
    head = f"{row['what']:<14}{row['dtype']:<10}{row['kernels']:<9}{row['xla']:<5}"
    if "error" in row:
        return f"{head}{'FAILED':>12} {row['error'][:200]}"
    return f"{head}{row['rate']:>12.2f} {row['unit']}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true",
                        help="tiny sizes and steps (the default when no GPU is visible)")
    parser.add_argument("--hparams_set", default="transformer_base")
    parser.add_argument("--hparams", default="", help="overrides of the set, e.g. a=1,b=2")
    parser.add_argument("--batch_tokens", type=int, default=4096)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--vocab_size", type=int, default=32768)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--decode_batch", type=int, default=32)
    parser.add_argument("--decode_length", type=int, default=20)
    parser.add_argument("--beam_size", type=int, default=4)
    args = parser.parse_args()
    gpus = tf.config.list_physical_devices("GPU")
    if args.small or not gpus:
        args.small = True
        for name, value in SMALL.items():
            setattr(args, name, value)
    device = tf.config.experimental.get_device_details(gpus[0]).get(
        "device_name", "GPU") if gpus else "CPU"
    note = " (--small: figures mean nothing)" if args.small else ""
    print(f"gpu_check on {device}: {args.hparams_set} {args.hparams or ''}, training batch "
          f"{max(1, args.batch_tokens // args.length)}x{args.length}, vocab {args.vocab_size}, "
          f"best of {args.rounds} x {args.steps} steps; beam {args.beam_size} decoding of "
          f"{args.decode_batch} sentences{note}", flush=True)
    print(f"{'what':<14}{'dtype':<10}{'kernels':<9}{'xla':<5}{'rate':>12}", flush=True)
    rows = train_rows(args) + decode_rows(args)
    failed = sum("error" in row for row in rows)
    print(f"gpu_check done: {len(rows)} rows" + (f", {failed} FAILED" if failed else ""),
          flush=True)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
