"""Benchmark: the SavedModel's in-graph subword encoder, core TensorFlow ops vs tensorflow-text.

`t2t_lite.export.subword_graph.SubwordGraphEncoder` splits escaped tokens into subtokens either
with core TensorFlow ops ("core", the default of `--mode=export`) or with tensorflow-text's
FastWordpieceTokenizer ("tensorflow_text", `--export_subword_segmenter=tensorflow_text`).
Measured in the same run, on the toy WMT dev lines, each encoder as a `tf.function` with the
SavedModel's signature ([None] strings), next to the Python `SubwordTextEncoder` (token cache
warm, as in a long-running decode process):
  1. exactness: every dev line (English and German) and 300 random Unicode strings give the
     Python encoder's ids with both segmenters;
  2. latency per batch (ms) at batch sizes 1, 32 and 256, rounds interleaved; min and median.
Vocabularies: the t2t fixture's 1,018 subwords and an 8k vocab built here from train.en +
train.de (as translate problems build theirs).

Usage:
  python bench/bench_subword_graph.py [--data_dir ../shared/data/wmt_toy_ende] [--rounds 7]
"""
from __future__ import annotations

import argparse
import os
import pathlib
import random
import statistics
import sys
import time

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = REPO_ROOT.parent / "shared"
sys.path.insert(0, str(REPO_ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from t2t_lite import quiet_start

tf = quiet_start.import_tensorflow()

from t2t_lite.data_generators import text_encoder
from t2t_lite.export import subword_graph

FIXTURE_VOCAB = SHARED / "fixtures" / "t2t" / "vocab.translate_toy_ende1k.1024.subwords"


def _random_texts(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    pool = [lambda: chr(rng.randrange(32, 127)), lambda: chr(rng.randrange(0x80, 0x3000)),
            lambda: "_", lambda: "\\", lambda: "\n", lambda: " "]
    return ["".join(rng.choice(pool)() for _ in range(rng.randrange(0, 60)))
            for _ in range(count)]


def _vocabularies(data_dir: pathlib.Path) -> dict[str, text_encoder.SubwordTextEncoder]:
    vocabs = {"fixture 1k": text_encoder.SubwordTextEncoder(str(FIXTURE_VOCAB))}
    lines = []
    for en, de in zip((data_dir / "train.en").read_text(encoding="utf-8").splitlines(),
                      (data_dir / "train.de").read_text(encoding="utf-8").splitlines()):
        lines += [en, de]
    start = time.time()
    built = text_encoder.SubwordTextEncoder.build_from_generator(
        iter(lines), 2**13, max_subtoken_length=200,
        reserved_tokens=text_encoder.RESERVED_TOKENS)
    print(f"built the 8k vocab ({built.vocab_size} subwords) in {time.time() - start:.1f} s")
    vocabs[f"built {built.vocab_size // 1000}k"] = built
    return vocabs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data_dir", default=str(SHARED / "data" / "wmt_toy_ende"))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=10, help="calls timed per round")
    args = parser.parse_args()
    data_dir = pathlib.Path(args.data_dir)
    dev = [line for name in ("dev.en", "dev.de")
           for line in (data_dir / name).read_text(encoding="utf-8").splitlines()]
    checked = dev + _random_texts(300)
    print(f"machine load average: {os.getloadavg()[0]:.1f} (2 cores)")
    for vocab_name, python in _vocabularies(data_dir).items():
        encoders = {}
        for segmenter in subword_graph.SEGMENTERS:
            graph = subword_graph.SubwordGraphEncoder(python.all_subtoken_strings,
                                                      segmenter=segmenter)
            encoders[segmenter] = tf.function(
                graph.encode, input_signature=[tf.TensorSpec([None], tf.string)])
        for segmenter, encode in encoders.items():
            wrong = 0
            for i in range(0, len(checked), 256):
                batch = checked[i:i + 256]
                got = encode(tf.constant(batch)).to_list()
                wrong += sum(ids != python.encode(text) for ids, text in zip(got, batch))
            print(f"[{vocab_name}] {segmenter}: {len(checked) - wrong}/{len(checked)} lines "
                  "give the Python encoder's ids")
        for batch_size in (1, 32, 256):
            batch = dev[:batch_size]
            tensor = tf.constant(batch)
            timings: dict[str, list[float]] = {"python (warm cache)": []}
            timings.update({name: [] for name in encoders})
            for name, encode in encoders.items():
                encode(tensor)  # trace
            for _ in range(args.rounds):
                start = time.perf_counter()
                for _ in range(args.calls):
                    [python.encode(text) for text in batch]
                timings["python (warm cache)"].append(
                    (time.perf_counter() - start) / args.calls * 1e3)
                for name, encode in encoders.items():
                    start = time.perf_counter()
                    for _ in range(args.calls):
                        encode(tensor)
                    timings[name].append((time.perf_counter() - start) / args.calls * 1e3)
            core = min(timings["core"])
            row = ", ".join(f"{name} {min(t):.2f} / {statistics.median(t):.2f} ms"
                            for name, t in timings.items())
            print(f"[{vocab_name}] batch {batch_size:3d} (min / median): {row}; "
                  f"core / tensorflow_text = {core / min(timings['tensorflow_text']):.2f}x")


if __name__ == "__main__":
    main()
