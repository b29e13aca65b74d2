"""Where t2t_lite's beam-search decoding spends its time: a TF profiler trace, op by op.

    python bench/profile_decode.py --checkpoint T2T_CKPT --source dev.en \
        --vocab VOCAB_FILE [--hparams_set transformer_tiny] [--lines 128] [--beam_size 4]
    python bench/profile_decode.py --output_dir RUN --source dev.en \
        [--checkpoint PREFIX] [--hparams activation_dtype=bfloat16] [--lines 128]

Loads a checkpoint (an original t2t one with --vocab and --hparams_set, or a t2t_lite run's
with --output_dir and optional --hparams overrides) as `run.py --mode=decode` does,
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
from t2t_lite.decoding import decode_hparams, decoding, input_files, runs
from t2t_lite.hparams_lib import create_hparams
from t2t_lite.models import t2t_checkpoint


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", default="")
    ap.add_argument("--output_dir", default="", help="a t2t_lite run (instead of --vocab)")
    ap.add_argument("--hparams", default="", help="overrides of the run's hparams")
    ap.add_argument("--source", required=True)
    ap.add_argument("--vocab", default="")
    ap.add_argument("--hparams_set", default="transformer_tiny")
    ap.add_argument("--lines", type=int, default=128)
    ap.add_argument("--beam_size", type=int, default=4)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    if args.output_dir:
        run = runs.open_run(runs.resolve("decode", args.output_dir), args.hparams)
        _, model = runs.restore_model(run, args.checkpoint or None)
        encoders = run.encoders
        source_encoder = encoders.get("inputs", encoders["targets"])
        encoder, target_space_id = encoders["targets"], run.target_space_id
    elif args.checkpoint and args.vocab:
        model = t2t_checkpoint.load_model(args.checkpoint, create_hparams(args.hparams_set))
        encoder, target_space_id = text_encoder.SubwordTextEncoder(args.vocab), 0
        source_encoder = encoder
    else:
        ap.error("give --output_dir (a t2t_lite run) or --checkpoint with --vocab")
    decode_hp = decode_hparams.decode_hparams(f"beam_size={args.beam_size},alpha=0.6")
    infer_fn = decoding.make_infer_fn(model, decode_hp, target_space_id)
    lines = input_files.read_inputs(args.source)[: args.lines]
    start = time.perf_counter()
    decoding.decode_lines(lines, infer_fn, source_encoder, encoder, decode_hp)
    print(f"first pass (incl. tracing): {time.perf_counter() - start:.2f} s")
    start = time.perf_counter()
    decoding.decode_lines(lines, infer_fn, source_encoder, encoder, decode_hp)
    print(f"second pass: {time.perf_counter() - start:.2f} s for {len(lines)} lines")
    logdir = tempfile.mkdtemp(prefix="profile_decode_")
    tf.profiler.experimental.start(logdir)
    decoding.decode_lines(lines, infer_fn, source_encoder, encoder, decode_hp)
    tf.profiler.experimental.stop()
    by_type, by_name = xplane_op_times(logdir)
    print_table("t2t_lite decode, by op type", by_type, 1, args.top)
    print_table("t2t_lite decode, by op name", by_name, 1, args.top)


if __name__ == "__main__":
    main()
