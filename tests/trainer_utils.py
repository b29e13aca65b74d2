"""Shared pieces of the trainer tests: a tiny in-memory problem, tiny hparams, event reading.

Also a command-line entry for the multi-process tests (`python -m tests.trainer_utils ...`):
it trains on the in-memory problem under the strategy TF_CONFIG / the flags ask for.
"""
from __future__ import annotations

import argparse
import glob
import json
import os

import numpy as np
import tensorflow as tf

from t2t_lite.hparams import HParams
from t2t_lite.hparams_lib import create_hparams

VOCAB = 12
LENGTH = 6


class IdEncoder:
    """Ids as space-separated numbers (decode only)."""

    def decode(self, ids):
        return " ".join(str(i) for i in ids)


class ReverseProblem:
    """In-memory stand-in of an algorithmic problem: reverse a sequence of symbols 2..11.

    Every example is padded to the same length (LENGTH + 1 with EOS) so that batches of any
    split have identical shapes. `batch_examples` is the per-replica batch (t2t's batch size is
    per replica); the train split repeats, shuffled with the pipeline seed when one is given.
    """

    name = "reverse_standin"
    was_reversed = False

    def __init__(self, batch_examples: int = 8, num_train: int = 256, num_eval: int = 32,
                 shuffle: bool = True, metrics=None, min_length: int = 2):
        self.batch_examples = batch_examples
        self.shuffle = shuffle
        self.metrics = metrics or ["accuracy", "accuracy_top5", "accuracy_per_sequence",
                                   "neg_log_perplexity"]
        self.min_length = min_length
        rng = np.random.RandomState(0)
        self.data = {"train": self._examples(rng, num_train), "eval": self._examples(rng, num_eval)}

    def _examples(self, rng, count):
        inputs = np.zeros([count, LENGTH + 1], np.int32)
        targets = np.zeros([count, LENGTH + 1], np.int32)
        for i in range(count):
            n = rng.randint(self.min_length, LENGTH + 1)
            seq = rng.randint(2, VOCAB, size=n)
            inputs[i, :n + 1] = list(seq) + [1]
            targets[i, :n + 1] = list(seq[::-1]) + [1]
        return {"inputs": inputs, "targets": targets}

    def dataset_filename(self):
        """The name of datagen's files; the data itself is in memory (only the train split's
        completion marker, if a test writes one, is read from data_dir)."""
        return self.name

    def get_hparams(self, model_hparams=None, data_dir=None):
        return HParams(vocab_size={"inputs": VOCAB, "targets": VOCAB}, target_space_id=0,
                       loss_multiplier=1.0)

    def eval_metrics(self):
        return list(self.metrics)

    def get_feature_encoders(self, data_dir=None):
        return {"inputs": IdEncoder(), "targets": IdEncoder()}

    def dataset(self, mode, data_dir, hparams, input_context=None, seed=None):
        ds = tf.data.Dataset.from_tensor_slices(self.data[mode])
        if input_context is not None and input_context.num_input_pipelines > 1:
            ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        if mode == "train":
            if self.shuffle:
                ds = ds.shuffle(64, seed=seed)
            ds = ds.repeat()
        return ds.batch(self.batch_examples, drop_remainder=mode == "train")


def tiny_hparams(dropout: float = 0.1, **overrides) -> HParams:
    """transformer_tiny shrunk to hidden 32, 1 layer, 2 heads, warmup 10, 4 embedding shards."""
    hp = create_hparams("transformer_tiny")
    hp.hidden_size = 32
    hp.filter_size = 64
    hp.num_heads = 2
    hp.num_hidden_layers = 1
    hp.learning_rate_warmup_steps = 10
    hp.symbol_modality_num_shards = 4
    hp.layer_prepostprocess_dropout = dropout
    hp.attention_dropout = dropout
    hp.relu_dropout = dropout
    for key, value in overrides.items():
        setattr(hp, key, value)
    return hp


def model_fn(hparams):
    """() -> the model under test: t2t_lite's Transformer."""
    from t2t_lite.models.transformer import Transformer

    return lambda: Transformer(hparams, VOCAB, VOCAB)


def read_events(directory: str) -> dict[str, list[tuple[int, object]]]:
    """tag -> [(step, value)] of every event file in `directory` (not recursive)."""
    events: dict[str, list] = {}
    for path in sorted(glob.glob(os.path.join(directory, "events.out.tfevents.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                tensor = tf.make_ndarray(value.tensor)
                events.setdefault(value.tag, []).append((event.step, tensor))
    return events


def model_weights(checkpoint_dir: str) -> dict[str, np.ndarray]:
    """The model's variables in the latest checkpoint of `checkpoint_dir`."""
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(checkpoint_dir))
    return {
        name: reader.get_tensor(name)
        for name in reader.get_variable_to_shape_map()
        if name.startswith("model/") and "OPTIMIZER_SLOT" not in name
    }


def _main():
    """Trains the stand-in problem; TF_CONFIG (if set) makes this one of several workers."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--train_steps", type=int, default=10)
    parser.add_argument("--save_checkpoints_steps", type=int, default=5)
    parser.add_argument("--batch_examples", type=int, default=8)
    parser.add_argument("--deterministic", action="store_true")
    parser.add_argument("--step_delay", type=float, default=0.0)
    parser.add_argument("--dump_weights", default="")
    parser.add_argument("--startup_timeout", type=float, default=300)
    parser.add_argument("--data_dir", default="", help="where the train split's marker is")
    parser.add_argument("--host_metrics", action="store_true",
                        help="evaluate at the end with approx_bleu and ROUGE too")
    args = parser.parse_args()

    from absl import logging

    from t2t_lite.training import distribution, trainer_lib

    logging.set_verbosity(logging.INFO)
    strategy = trainer_lib.create_strategy(startup_timeout_secs=args.startup_timeout)
    distribution.setup_determinism(7, args.deterministic)
    hparams = tiny_hparams()
    config = trainer_lib.RunConfig(
        output_dir=args.output_dir, train_steps=args.train_steps, log_step_count_steps=1,
        save_checkpoints_steps=args.save_checkpoints_steps, random_seed=7,
        deterministic=args.deterministic, num_decode_examples=0)
    metrics = None
    if args.host_metrics:
        metrics = ["accuracy", "approx_bleu_score", "rouge_2_fscore", "rouge_L_fscore"]
    trainer = trainer_lib.Trainer(model_fn(hparams), hparams,
                                  ReverseProblem(args.batch_examples, metrics=metrics), args.data_dir,
                                  config, strategy)
    if args.step_delay:
        # Slows training down so that a test can kill it between two checkpoints.
        original = trainer._save

        def slow_save(manager):
            original(manager)
            import time

            time.sleep(args.step_delay)

        trainer._save = slow_save
    stats = trainer.train()
    if args.dump_weights:
        np.savez(args.dump_weights, *[v.numpy() for v in trainer.model.trainable_variables])
    result = {"step": trainer.step, "loss": stats.get("loss")}
    if args.host_metrics:
        # This worker's own host sums, recorded before they are added up over workers.
        local_sums = []
        original_host_sums = trainer.eval_metrics.host_sums

        def recording_host_sums():
            local_sums.append(original_host_sums().tolist())
            return original_host_sums()

        trainer.eval_metrics.host_sums = recording_host_sums
        result["eval"] = trainer.evaluate()
        result["local_host_sums"] = local_sums[-1] if local_sums else original_host_sums().tolist()
    print("RESULT " + json.dumps(result), flush=True)
    trainer_lib.leave_cluster(strategy)


if __name__ == "__main__":
    from t2t_lite.errors import report_user_errors

    with report_user_errors():
        _main()
