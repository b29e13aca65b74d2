"""Latency of the exported SavedModel (text in, text out) against the in-process decoder.

    python bench/bench_export.py [--decode_hparams "beam_size=4,alpha=0.6"] [--rounds 7]

Both sides translate the same sentences with t2t's fixture model (transformer_tiny trained
25 steps, ../shared/fixtures/t2t/ckpt_A_trained, with its 1018-subword vocab):

* in-process: what `run.py --mode=decode` does per batch (t2t_lite.decoding.decoding): Python
  SubwordTextEncoder.encode + EOS + padding, `Transformer.infer` (its own tf.function), cut at
  EOS, Python decode;
* SavedModel: the model exported in this run by t2t_lite.export.export and loaded back with
  `tf.saved_model.load`; one call of the `serving_default` signature on the raw strings
  (encoding, decoding and detokenization are graph ops).

Batch 1 (dev.en line 0) and batch 32 (dev.en lines 0-31, in decode mode's sorted order so
that both sides see identical batches); outputs must be identical. The encoders alone are
also timed (Python `encode` of the batch, with its token cache warm, vs the `encode`
signature). Prints the best and the median milliseconds over interleaved rounds (after one
warm-up call each) and the ratios SavedModel / in-process; the best is the figure to compare
on a shared machine, where other processes inflate single rounds.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
SHARED = REPO_ROOT.parent / "shared"

from t2t_lite.data_generators import text_encoder
from t2t_lite.decoding import decode_hparams, decoding, text_batches
from t2t_lite.export import export
from t2t_lite.hparams_lib import create_hparams
from t2t_lite.models import t2t_checkpoint


def _record_ms(fn, timings: list[list[float]], index: int) -> None:
    start = time.perf_counter()
    fn()
    timings[index].append(1000 * (time.perf_counter() - start))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", default=str(SHARED / "fixtures/t2t/ckpt_A_trained"))
    parser.add_argument("--vocab", default=str(
        SHARED / "fixtures/t2t/vocab.translate_toy_ende1k.1024.subwords"))
    parser.add_argument("--source", default=str(SHARED / "data/wmt_toy_ende/dev.en"))
    parser.add_argument("--hparams_set", default="transformer_tiny")
    parser.add_argument("--decode_hparams", default="")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()

    decode_hp = decode_hparams.decode_hparams(args.decode_hparams)
    decode_hp.log_results = False
    hparams = create_hparams(args.hparams_set)
    encoder = text_encoder.SubwordTextEncoder(args.vocab)
    model = t2t_checkpoint.load_model(args.checkpoint, hparams)
    infer_fn = decoding.make_infer_fn(model, decode_hp)

    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        module = export.ServingModule(
            model, encoder.all_subtoken_strings, encoder.all_subtoken_strings, decode_hp,
            text_batches.input_length_limit(decode_hp), 0)
        path = export.export(module, tmp)
        export_s = time.perf_counter() - start
        start = time.perf_counter()
        served = tf.saved_model.load(path)
        load_s = time.perf_counter() - start
        serve = served.signatures["serving_default"]
        graph_encode = served.signatures["encode"]

        lines = pathlib.Path(args.source).read_text(encoding="utf-8").split("\n")
        batches = {"batch 1": lines[:1], "batch 32": text_batches.sort_inputs(lines[:32])[0]}
        cases = []
        for name, batch in batches.items():
            def in_process(batch=batch):
                return decoding.decode_lines(batch, infer_fn, encoder, encoder, decode_hp)

            def saved_model(batch=batch):
                out = serve(inputs=tf.constant(batch))["outputs"].numpy()
                return [t.decode("utf-8") for t in out]

            def python_encode(batch=batch):
                return [encoder.encode(line) for line in batch]

            def graph_encode_fn(batch=batch):
                return graph_encode(inputs=tf.constant(batch))["outputs"].numpy()

            if in_process() != saved_model():
                raise SystemExit(f"{name}: the SavedModel's translations differ")
            python_encode()
            graph_encode_fn()
            cases.append((f"translate, {name}", in_process, saved_model))
            cases.append((f"encode only, {name}", python_encode, graph_encode_fn))

        timings = [[] for _ in range(2 * len(cases))]
        cpu_start = time.process_time()
        wall_start = time.perf_counter()
        for _ in range(args.rounds):
            for i, (_, baseline, candidate) in enumerate(cases):
                _record_ms(baseline, timings, 2 * i)
                _record_ms(candidate, timings, 2 * i + 1)
        cpu_s = time.process_time() - cpu_start
        wall_s = time.perf_counter() - wall_start

    print(f"model {args.hparams_set} from {args.checkpoint}; decode_hparams: beam_size="
          f"{decode_hp.beam_size}, alpha={decode_hp.alpha}, extra_length={decode_hp.extra_length}")
    print(f"export (trace + save) {export_s:.1f} s, tf.saved_model.load {load_s:.1f} s; "
          f"{len(tf.config.list_physical_devices('GPU'))} GPU(s)")
    print(f"{'ms (best / median)':24s} {'in-process':>17s} {'SavedModel':>17s} "
          f"{'ratio':>11s}")
    for i, (name, _, _) in enumerate(cases):
        base, cand = timings[2 * i], timings[2 * i + 1]
        print(f"{name:24s} {min(base):8.1f} {statistics.median(base):8.1f} "
              f"{min(cand):8.1f} {statistics.median(cand):8.1f} "
              f"{min(cand) / min(base):5.2f} {statistics.median(cand) / statistics.median(base):5.2f}")
    print(f"{args.rounds} interleaved rounds; timed part: {wall_s:.1f} s wall, "
          f"{cpu_s:.1f} s CPU of this process")


if __name__ == "__main__":
    main()
