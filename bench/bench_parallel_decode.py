"""Decoding a file one batch at a time against several batches at a time, in one run.

    python bench/bench_parallel_decode.py --checkpoint T2T_RUN/model.ckpt-N --vocab VOCAB \
        [--hparams_set transformer_tiny] [--lines 500] [--rounds 3] [--parallel 0]

One t2t checkpoint (or t2t_lite one with its problem's vocab), the first `--lines` lines of
the toy WMT dev set, t2t-decoder's batching (sorted by words, 32 per batch) and decode
hparams (`--decode_hparams`, default beam 4, alpha 0.6), decoded in process by
`decoding.decode_lines` with `parallel_batches=1` and with `--parallel` (0: one per usable
core, at most 4: `run.py --mode=decode`'s default), alternating for `--rounds` rounds after
a warm-up of both. Prints each round's wall time, the medians, their ratio, and checks that both give the
same lines.
"""
import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from t2t_lite.data_generators import text_encoder
from t2t_lite.decoding import decode_hparams, decoding, input_files
from t2t_lite.hparams_lib import create_hparams
from t2t_lite.models import t2t_checkpoint

DEV_SOURCE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "shared", "data", "wmt_toy_ende", "dev.en")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", required=True, help="t2t checkpoint prefix (model.ckpt-N)")
    ap.add_argument("--vocab", required=True, help="its SubwordTextEncoder file")
    ap.add_argument("--hparams_set", default="transformer_tiny")
    ap.add_argument("--source", default=DEV_SOURCE)
    ap.add_argument("--lines", type=int, default=500)
    ap.add_argument("--decode_hparams", default="beam_size=4,alpha=0.6")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--parallel", type=int, default=0,
                    help="batches at a time to compare with 1 (0: run.py's default)")
    args = ap.parse_args()
    parallel = args.parallel or decoding.default_parallel_batches()

    encoder = text_encoder.SubwordTextEncoder(args.vocab)
    model = t2t_checkpoint.load_model(args.checkpoint, create_hparams(args.hparams_set))
    lines = input_files.read_inputs(args.source)[: args.lines]
    decode_hp = decode_hparams.decode_hparams(args.decode_hparams + ",log_results=False")
    infer_fn = decoding.make_infer_fn(model, decode_hp)
    decoding.decode_lines(lines[:64], infer_fn, encoder, encoder, decode_hp)  # trace
    decoding.decode_lines(lines[:64], infer_fn, encoder, encoder, decode_hp, parallel)

    times = {1: [], parallel: []}
    outputs = {}
    for number in range(args.rounds):
        for batches in (1, parallel):
            start = time.perf_counter()
            outputs[batches] = decoding.decode_lines(lines, infer_fn, encoder, encoder,
                                                     decode_hp, parallel_batches=batches)
            times[batches].append(time.perf_counter() - start)
            print(f"round {number}, {batches} batch(es) at a time: "
                  f"{times[batches][-1]:.2f} s", flush=True)
    same = sum(a == b for a, b in zip(outputs[1], outputs[parallel]))
    one, several = statistics.median(times[1]), statistics.median(times[parallel])
    print(f"{len(lines)} lines, {args.decode_hparams}: one batch at a time {one:.2f} s, "
          f"{parallel} at a time {several:.2f} s (medians): {one / several:.2f}x; "
          f"identical lines {same} of {len(lines)}; load average {os.getloadavg()}")
    if same != len(lines):
        sys.exit("the outputs differ")


if __name__ == "__main__":
    main()
