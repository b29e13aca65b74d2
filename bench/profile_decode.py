"""Where t2t_lite's beam-search decoding spends its time: a TF profiler trace, op by op.

    python bench/profile_decode.py --checkpoint T2T_CKPT --source dev.en \
        --vocab VOCAB_FILE [--hparams_set transformer_tiny] [--lines 128] [--beam_size 4]

Loads a checkpoint (an original t2t one or t2t_lite's) as `run.py --mode=decode` does,
decodes the first `--lines` source lines in decode mode's sorted batches of 32 once to trace,
then again under `tf.profiler.experimental`, and prints wall times and the ops' total time by
op type and op name (summed over threads). Reads nothing else.
"""
import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from profile_train_step import print_table, xplane_op_times

from t2t_lite.data_generators import text_encoder
from t2t_lite.decoding import decoding
from t2t_lite.hparams import create_hparams
from t2t_lite.models import t2t_checkpoint


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--vocab", required=True)
    ap.add_argument("--hparams_set", default="transformer_tiny")
    ap.add_argument("--lines", type=int, default=128)
    ap.add_argument("--beam_size", type=int, default=4)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    model = t2t_checkpoint.load_model(args.checkpoint, create_hparams(args.hparams_set))
    encoder = text_encoder.SubwordTextEncoder(args.vocab)
    decode_hp = decoding.decode_hparams(f"beam_size={args.beam_size},alpha=0.6")
    infer_fn = decoding.make_infer_fn(model, decode_hp)
    lines = decoding.read_inputs(args.source)[: args.lines]
    start = time.perf_counter()
    decoding.decode_lines(lines, infer_fn, encoder, encoder, decode_hp)
    print(f"first pass (incl. tracing): {time.perf_counter() - start:.2f} s")
    start = time.perf_counter()
    decoding.decode_lines(lines, infer_fn, encoder, encoder, decode_hp)
    print(f"second pass: {time.perf_counter() - start:.2f} s for {len(lines)} lines")
    logdir = tempfile.mkdtemp(prefix="profile_decode_")
    tf.profiler.experimental.start(logdir)
    decoding.decode_lines(lines, infer_fn, encoder, encoder, decode_hp)
    tf.profiler.experimental.stop()
    by_type, by_name = xplane_op_times(logdir)
    print_table("t2t_lite decode, by op type", by_type, 1, args.top)
    print_table("t2t_lite decode, by op name", by_name, 1, args.top)


if __name__ == "__main__":
    main()
