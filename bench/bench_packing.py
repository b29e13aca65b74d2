"""Packed vs unpacked training data: padding fraction and training tokens/s.

    python bench/bench_packing.py [--hparams_set transformer_tiny] [--batch_size 4096]
        [--vocab_size 8192] [--steps 40] [--rounds 2] [--batches 200]

On the toy WMT En-De corpus (`../shared/data/wmt_toy_ende`, 9,000 training pairs), datagen
writes three variants with one shared subword vocab: `translate_files` (unpacked),
`translate_files` read with `pack_dataset=true` (t2t's on-the-fly packing to max_length), and
a `*_packed` problem (t2t's packing at datagen into sequences of 256 ids). For each it prints:
* padding fraction: the share of padding ids among all ids of `--batches` training batches
  (inputs and targets; t2t's token bucketing with `batch_size` tokens per batch, max_length
  256 as in transformer_tiny);
* training throughput: non-padding target tokens per second and steps per second of the
  `Trainer` on that data (best of `--rounds` interleaved rounds of `--steps` steps, each round
  timed after a first interval of `--steps` steps that includes tracing).
"""
import argparse
import os
import random
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from t2t_lite.hparams_lib import create_hparams
from t2t_lite.models.transformer import Transformer
from t2t_lite.problems import translate_files
from t2t_lite.training import trainer_lib

TOY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared",
                   "data", "wmt_toy_ende")


class ToyPacked(translate_files.TranslateFiles):
    """translate_files packed at datagen into 256 ids (as translate_ende_wmt32k_packed)."""

    registered_name = "translate_files_packed"

    @property
    def packed_length(self) -> int:
        return 256

    @property
    def use_vocab_from_other_problem(self):
        return translate_files.TranslateFiles(approx_vocab_size=self._approx_vocab_size)


def generate(data_dir: str, tmp_dir: str, vocab_size: int):
    """(unpacked, packed) problems with their data in data_dir."""
    problems = []
    for cls in (translate_files.TranslateFiles, ToyPacked):
        problem = cls(approx_vocab_size=vocab_size)
        problem.set_source_files(*(os.path.join(TOY, name) for name in
                                   ("train.en", "train.de", "dev.en", "dev.de")))
        random.seed(1)
        problem.generate_data(data_dir, tmp_dir)
        problems.append(problem)
    return problems


def padding_fraction(problem, data_dir: str, hparams, batches: int) -> tuple[float, float]:
    """(padding share of all ids, mean ids per batch) over `batches` training batches."""
    dataset = problem.dataset("train", data_dir, hparams, seed=1).take(batches)
    ids = padding = 0
    for batch in dataset.as_numpy_iterator():
        for name in ("inputs", "targets"):
            ids += batch[name].size
            padding += int((batch[name] == 0).sum())
    return padding / ids, ids / batches


def train_round(problem, data_dir: str, hparams, steps: int, output_dir: str) -> dict:
    """Trains 2 * steps steps; returns the statistics of the last `steps` (no tracing)."""
    vocab = problem.get_hparams(hparams, data_dir=data_dir).vocab_size["targets"]
    config = trainer_lib.RunConfig(output_dir=output_dir, train_steps=2 * steps,
                                   log_step_count_steps=steps, save_checkpoints_steps=10**9,
                                   random_seed=1, num_decode_examples=0)
    trainer = trainer_lib.Trainer(lambda: Transformer(hparams, vocab, vocab), hparams, problem,
                                  data_dir, config)
    return trainer.train()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hparams_set", default="transformer_tiny")
    parser.add_argument("--batch_size", type=int, default=4096)
    parser.add_argument("--vocab_size", type=int, default=2**13)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batches", type=int, default=200)
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="bench_packing_")
    data_dir = os.path.join(work, "data")
    plain, packed = generate(data_dir, os.path.join(work, "tmp"), args.vocab_size)
    base = create_hparams(args.hparams_set, f"batch_size={args.batch_size}")
    variants = {
        "unpacked": (plain, base),
        "pack_dataset=true": (plain, create_hparams(
            args.hparams_set, f"batch_size={args.batch_size},pack_dataset=true")),
        "*_packed problem (256)": (packed, base),
    }
    print(f"{args.hparams_set}, batch_size {args.batch_size} tokens, max_length "
          f"{base.max_length}, vocab {plain.get_hparams(base, data_dir).vocab_size['targets']}")
    fractions = {name: padding_fraction(problem, data_dir, hp, args.batches)
                 for name, (problem, hp) in variants.items()}
    best = {name: {"tokens/sec": 0.0, "global_step/sec": 0.0} for name in variants}
    for round_index in range(args.rounds):
        for name, (problem, hp) in variants.items():
            out = os.path.join(work, f"train_{round_index}_{len(name)}")
            stats = train_round(problem, data_dir, hp, args.steps, out)
            for key in best[name]:
                best[name][key] = max(best[name][key], stats[key])
            tf.io.gfile.rmtree(out)
    reference = best["unpacked"]["tokens/sec"]
    print("| data | padding fraction | ids per batch | target tokens/s | steps/s | "
          "tokens/s vs unpacked |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in variants:
        fraction, ids = fractions[name]
        rate = best[name]
        print(f"| {name} | {fraction:.1%} | {ids:,.0f} | {rate['tokens/sec']:,.0f} | "
              f"{rate['global_step/sec']:.2f} | {rate['tokens/sec'] / reference:.2f}x |")


if __name__ == "__main__":
    main()
