"""Problem: one data set, from raw data to batches (t2t's `data_generators/problem.py`).

A `Problem` knows how to generate its sharded TFRecords (`generate_data`), which encoders
turn text into ids (`feature_encoders`), the problem hparams a model needs (`get_hparams`:
vocab sizes, space ids, ...), its eval metric names, and how to read the shards back as
token-bucketed batches (`dataset`).

Problems are registered under t2t's names with `t2t_lite.registry.register_problem` and built
with `registry.problem(name)`; a `_rev` suffix builds `cls(was_reversed=True)`, which swaps
inputs and targets when reading (the files on disk are those of the un-reversed problem).
"""
from __future__ import annotations

import os
import random
import types
from typing import Any

import tensorflow as tf

from t2t_lite import hparams_support
from t2t_lite.data_generators import data_reader
from t2t_lite.hparams import HParams
from t2t_lite.utils import command as cmd


class ModeKeys:
    """Modes of `Problem.dataset` (the values of tf.estimator.ModeKeys)."""

    TRAIN = "train"
    EVAL = "eval"
    PREDICT = "infer"


class DatasetSplit:
    """Data splits on disk: train -> `-train*`, eval -> `-dev*`, test -> `-test*` files."""

    TRAIN = ModeKeys.TRAIN
    EVAL = ModeKeys.EVAL
    TEST = "test"


class SpaceID:
    """t2t's input/target space ids (the model embeds the target space id)."""

    GENERIC = 0
    IMAGE_LABEL = 1
    EN_CHR = 2
    EN_TOK = 3
    EN_BPE_TOK = 4
    FR_CHR = 5
    FR_TOK = 6
    DE_CHR = 7
    DE_TOK = 8
    DE_BPE_TOK = 9
    DIGIT_0 = 10
    DIGIT_1 = 11
    AUDIO_WAV = 12
    AUDIO_SPECTRAL = 13
    PARSE_CHR = 14
    PARSE_TOK = 15


class Metrics:
    """t2t's eval metric names (`metrics-<problem>/targets/<name>`)."""

    ACC = "accuracy"
    ACC_TOP5 = "accuracy_top5"
    ACC_PER_SEQ = "accuracy_per_sequence"
    NEG_LOG_PERPLEXITY = "neg_log_perplexity"
    APPROX_BLEU = "approx_bleu_score"
    ROUGE_2_F = "rouge_2_fscore"
    ROUGE_L_F = "rouge_L_fscore"
    EDIT_DISTANCE = "edit_distance"


class ModalityType:
    """Modality names; every problem here uses symbols (token ids)."""

    SYMBOL = "symbol"


# Records parsed per vectorized parse call: large enough to amortize the op overhead, small
# enough to keep the first batch quick.
_PARSE_BATCH = 256
# t2t's TFRecordDataset read buffer.
_READ_BUFFER_BYTES = 8 * 1024 * 1024
# t2t's parallel_interleave cycle length over training files.
_INTERLEAVE_CYCLE = 8
# pack_dataset packs windows of this many examples per unit of packed length (t2t's
# SequenceDatasetPacker window: packed_length / 8 * queue_size * 10 = 12.5 * length).
_PACK_WINDOW_PER_LENGTH = 12


def default_model_hparams() -> HParams:
    """The model hparams a Problem reads when none are given (t2t's defaults)."""
    return HParams(
        max_input_seq_length=0,
        max_target_seq_length=0,
        prepend_mode="none",
        split_to_length=0,
        data_dir="",
    )


def _default_problem_hparams() -> types.SimpleNamespace:
    """Mutable defaults handed to `Problem.hparams` (t2t's `_default_hparams`)."""
    return types.SimpleNamespace(
        max_expected_batch_size_per_shard=64,
        stop_at_eos=False,
        modality={},
        vocab_size={},
        input_space_id=SpaceID.GENERIC,
        target_space_id=SpaceID.GENERIC,
        loss_multiplier=1.0,
        batch_size_multiplier=1,
    )


def _swap_inputs_targets(mapping: dict) -> dict:
    """Swaps the values under "inputs" and "targets" (keys present in both only), and those
    under their packed-example features "*_segmentation" and "*_position"."""
    swapped = dict(mapping)
    for suffix in ("", "_segmentation", "_position"):
        source, target = "inputs" + suffix, "targets" + suffix
        if source in mapping and target in mapping:
            swapped[source], swapped[target] = mapping[target], mapping[source]
    return swapped


def _file_num_records(filename: str) -> int:
    """Number of records in one TFRecord file (counted by a graph-mode reduce)."""
    dataset = tf.data.TFRecordDataset(filename, buffer_size=_READ_BUFFER_BYTES)
    return int(dataset.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1))



def split_tag(mode: str) -> str:
    """The shard-name tag of a mode or split: train -> "train", eval/predict -> "dev", test."""
    tags = {DatasetSplit.TRAIN: "train", DatasetSplit.EVAL: "dev", ModeKeys.PREDICT: "dev",
            DatasetSplit.TEST: "test"}
    if mode not in tags:
        raise ValueError(f"Unknown mode/split {mode!r}; expected one of {sorted(tags)}")
    return tags[mode]

class Problem:
    """Base class of every problem (t2t's `Problem`).

    Subclasses implement `generate_data`, and usually `feature_encoders`, `hparams`
    (mutating the defaults it receives) and `example_reading_spec`.
    """

    registered_name: str | None = None

    def __init__(self, was_reversed: bool = False, was_copy: bool = False):
        """Args:
        was_reversed: swap inputs and targets when reading (t2t's `_rev` problems).
        was_copy: replace targets by inputs when reading (after any reversal).
        """
        self._was_reversed = was_reversed
        self._was_copy = was_copy
        self._encoders: dict | None = None
        self._hparams: HParams | None = None

    # Names and files -------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The registered (un-reversed) t2t name; files on disk carry it."""
        return self.registered_name or type(self).__name__

    @property
    def was_reversed(self) -> bool:
        """True for a `_rev` problem."""
        return self._was_reversed

    def dataset_filename(self) -> str:
        """Base name of the data files (`<name>-train-00000-of-00100`, ...)."""
        return self.name

    def training_filepaths(self, data_dir: str, num_shards: int, shuffled: bool) -> list[str]:
        """Paths of the train shards (`-unshuffled` infix unless `shuffled`)."""
        return self._split_filepaths(data_dir, "train", num_shards, shuffled)

    def dev_filepaths(self, data_dir: str, num_shards: int, shuffled: bool) -> list[str]:
        """Paths of the dev shards (`-unshuffled` infix unless `shuffled`)."""
        return self._split_filepaths(data_dir, "dev", num_shards, shuffled)

    def test_filepaths(self, data_dir: str, num_shards: int, shuffled: bool) -> list[str]:
        """Paths of the test shards (`-unshuffled` infix unless `shuffled`)."""
        return self._split_filepaths(data_dir, "test", num_shards, shuffled)

    def _split_filepaths(self, data_dir: str, tag: str, num_shards: int, shuffled: bool):
        from t2t_lite.data_generators import generator_utils

        base = self.dataset_filename()
        if not shuffled:
            base += generator_utils.UNSHUFFLED_SUFFIX
        return [
            os.path.join(data_dir, name)
            for name in generator_utils.shard_filepath(f"{base}-{tag}", num_shards)
        ]

    def filepattern(self, data_dir: str, mode: str, shard: int | None = None) -> str:
        """Glob of the files read for `mode` (train: `-train*`, eval/predict: `-dev*`).

        Args:
          data_dir: directory of the shards.
          mode: a ModeKeys / DatasetSplit value.
          shard: read only this shard number when given.

        Returns:
          A glob pattern string.
        """
        shard_str = f"-{shard:05d}" if shard is not None else ""
        path = os.path.join(data_dir, self.dataset_filename())
        return f"{path}-{split_tag(mode)}{shard_str}*"

    # Subclass interface ----------------------------------------------------------------------
    def generate_data(self, data_dir: str, tmp_dir: str, task_id: int = -1) -> None:
        """Writes the train/dev shards (and any vocab) to data_dir. Subclasses implement."""
        raise NotImplementedError(f"{self.name} does not implement generate_data")

    def datagen_input_files(self, tmp_dir: str) -> dict[str, list[str]]:
        """The raw files that `generate_data` would read, as they exist now: what datagen's
        completion markers record (size and sha256) so that a rerun on other inputs is
        refused instead of keeping data made from the old ones.

        Args:
          tmp_dir: datagen's raw data directory.

        Returns:
          {label (the flag or tmp_dir name that selects them): paths}; {} (the default) for
          problems generated from the random seed alone.
        """
        del tmp_dir
        return {}

    def datagen_derived_files(self, tmp_dir: str) -> list[str]:
        """Files that `generate_data` writes into tmp_dir from the inputs and reuses on later
        runs (t2t's compiled corpora); `--overwrite_data` removes them with the data.

        Args:
          tmp_dir: datagen's raw data directory.

        Returns:
          Paths of such files that exist; [] by default.
        """
        del tmp_dir
        return []

    def feature_encoders(self, data_dir: str | None) -> dict[str, Any]:
        """Encoders for "inputs" and "targets" (default: t2t's integer TextEncoder)."""
        from t2t_lite.data_generators import text_encoder

        return {"inputs": text_encoder.TextEncoder(), "targets": text_encoder.TextEncoder()}

    def hparams(self, defaults: types.SimpleNamespace, model_hparams: HParams) -> None:
        """Mutates `defaults` (vocab_size, modality, space ids, ...); returns None."""

    def example_reading_spec(self) -> tuple[str, ...]:
        """Names of the int64 list features stored in the shards."""
        return ("inputs", "targets")

    def max_length(self, model_hparams: HParams) -> int:
        """Longest example kept in training: `max_length`, or `batch_size` when it is 0."""
        return hparams_support.hparam(model_hparams, "max_length") or model_hparams.batch_size

    @property
    def batch_size_means_tokens(self) -> bool:
        """Whether `hparams.batch_size` counts tokens (True for variable-length problems)."""
        return True

    @property
    def skip_random_fraction_when_training(self) -> bool:
        """Skip a random number of records at the start of training (t2t's default)."""
        return True

    def eval_metrics(self) -> list[str]:
        """t2t metric names computed in eval for this problem."""
        return [Metrics.ACC, Metrics.ACC_TOP5, Metrics.ACC_PER_SEQ, Metrics.NEG_LOG_PERPLEXITY]

    def preprocess_examples(
        self, features: dict[str, tf.RaggedTensor], mode: str, hparams: HParams
    ) -> dict[str, tf.RaggedTensor]:
        """Vectorized per-example preprocessing of a ragged batch of parsed records.

        Default (t2t's `preprocess_example_common`): truncate inputs to
        `max_input_seq_length` and targets to `max_target_seq_length` when those are > 0.

        Args:
          features: dict of int32 ragged [N, None].
          mode: a ModeKeys value.
          hparams: model hparams.

        Returns:
          dict of int32 ragged [N, None].
        """
        del mode
        features = dict(features)
        max_in = hparams_support.hparam(hparams, "max_input_seq_length")
        max_tgt = hparams_support.hparam(hparams, "max_target_seq_length")
        if max_in > 0 and "inputs" in features:
            features["inputs"] = features["inputs"][:, :max_in]
        if max_tgt > 0 and "targets" in features:
            features["targets"] = features["targets"][:, :max_tgt]
        return features

    # Encoders and problem hparams ----------------------------------------------------------
    def get_feature_encoders(self, data_dir: str | None = None) -> dict[str, Any]:
        """`feature_encoders(data_dir)`, computed once and cached."""
        if self._encoders is None:
            self._encoders = self.feature_encoders(data_dir)
        return self._encoders

    def get_hparams(
        self, model_hparams: HParams | None = None, data_dir: str | None = None
    ) -> HParams:
        """The problem hparams, computed once and cached.

        Args:
          model_hparams: model hparams (its `data_dir`, if any, locates the vocab).
          data_dir: directory holding the vocab; overrides model_hparams.data_dir.

        Returns:
          HParams with vocab_size {"inputs", "targets"}, modality, input_space_id,
          target_space_id, loss_multiplier, batch_size_multiplier, stop_at_eos,
          max_expected_batch_size_per_shard, was_reversed, was_copy; plus the encoders as
          the (unserialized) attribute `.vocabulary`. Swapped for a `_rev` problem.
        """
        if self._hparams is not None:
            return self._hparams
        if model_hparams is None:
            model_hparams = default_model_hparams()
        data_dir = data_dir or model_hparams.get("data_dir", None) or None
        encoders = self.get_feature_encoders(data_dir)
        defaults = _default_problem_hparams()
        if self.hparams(defaults, model_hparams) is not None:
            raise ValueError(
                f"{type(self).__name__}.hparams must mutate the defaults it receives and "
                "return None"
            )
        values = vars(defaults)
        if self._was_reversed:
            values["modality"] = _swap_inputs_targets(values["modality"])
            values["vocab_size"] = _swap_inputs_targets(values["vocab_size"])
            values["input_space_id"], values["target_space_id"] = (
                values["target_space_id"],
                values["input_space_id"],
            )
        if self._was_copy:
            for key in ("modality", "vocab_size"):
                if "inputs" in values[key]:
                    values[key] = dict(values[key], targets=values[key]["inputs"])
        hp = HParams(**values, was_reversed=self._was_reversed, was_copy=self._was_copy)
        # Like t2t's problem_hparams.vocabulary; encoders are not hparams, so not serialized.
        hp.vocabulary = _swap_inputs_targets(encoders) if self._was_reversed else encoders
        self._hparams = hp
        return hp

    # Reading ---------------------------------------------------------------------------------
    def data_filenames(self, data_dir: str, mode: str, shard: int | None = None) -> list[str]:
        """Sorted data files for `mode`, checked against datagen's completion marker.

        Raises:
          t2t_lite.errors.DataError (a FileNotFoundError): no file matches, or the split is
            incomplete or damaged (see `data_marker.check_split_for_reading`).
        """
        from t2t_lite.data_generators import data_marker
        from t2t_lite.errors import DataError

        pattern = self.filepattern(data_dir, mode, shard=shard)
        files = sorted(f for f in tf.io.gfile.glob(pattern) if not f.endswith(".incomplete"))
        command = f"{cmd.name()} --mode=datagen --problem={self.name} --data_dir={data_dir}"
        if not files:
            raise DataError(f"No data files match {pattern}. Generate them first: {command}")
        if shard is None:
            data_marker.check_split_for_reading(data_dir, self.dataset_filename(),
                                                split_tag(mode), files, command)
        return files

    def dataset(
        self,
        mode: str,
        data_dir: str,
        hparams: HParams,
        input_context: tf.distribute.InputContext | None = None,
        *,
        dataset_split: str | None = None,
        shuffle_files: bool | None = None,
        repeat: bool | None = None,
        batch: bool = True,
        shard: int | None = None,
        max_records: int = -1,
        shuffle_buffer_size: int = 1024,
        seed: int | None = None,
        pad_to_bucket_boundaries: bool = False,
    ) -> tf.data.Dataset:
        """Reads the shards of `mode` as t2t's input pipeline does.

        Training: files shuffled and interleaved, records shuffled (buffer 1024), repeated
        forever, a random number of records skipped, examples longer than
        `max_length` (or `batch_size` if 0) or shorter than `min_length` dropped, bucketed by
        length into token-budget batches, batches shuffled (`batch_shuffle_size`). Eval /
        predict: files in order, a single pass, nothing dropped (unless
        `eval_drop_long_sequences`), same bucketing. Parsing is vectorized and parallel.

        With an `input_context` (from `strategy.distribute_datasets_from_function`), files
        are split among the input pipelines by `input_pipeline_id` (records, when there are
        fewer files than pipelines); `batch_size` is per replica, as in t2t (per GPU).

        Args:
          mode: ModeKeys.TRAIN, EVAL or PREDICT.
          data_dir: directory of the shards and vocab.
          hparams: model hparams (batch_size, max_length, min_length, min_length_bucket,
            length_bucket_step, batch_shuffle_size, use_fixed_batch_size,
            eval_drop_long_sequences, max_input_seq_length, max_target_seq_length).
          input_context: a tf.distribute.InputContext, or None.
          dataset_split: read this split instead of the one of `mode` (e.g. "test").
          shuffle_files: default: True in training.
          repeat: default: True in training.
          batch: False returns single examples (dicts of int32 [L]) instead of batches.
          shard: read only this shard number.
          max_records: read at most this many records per pipeline (-1: all).
          shuffle_buffer_size: record shuffle buffer in training.
          seed: seed of every shuffle and of the random skip (None: nondeterministic).
          pad_to_bucket_boundaries: pad bucketed batches to their bucket's longest length
            (few distinct shapes, for XLA; see `data_reader.bucket_by_length`).

        Returns:
          Dataset of dicts {"inputs": int32 [B, Lin], "targets": int32 [B, Lt]}, 0-padded,
          ids ending with EOS = 1 (only the features the problem has).
        """
        is_training = mode == ModeKeys.TRAIN
        shuffle_files = is_training if shuffle_files is None else shuffle_files
        repeat = is_training if repeat is None else repeat
        self.get_hparams(hparams, data_dir=data_dir)
        files = self.data_filenames(data_dir, dataset_split or mode, shard=shard)
        # t2t reads training data sloppily (fastest); a seed asks for a reproducible order.
        deterministic = not is_training or seed is not None

        record_shard = None
        pipelines = input_context.num_input_pipelines if input_context is not None else 1
        # Each input pipeline (worker) shuffles and skips with its own stream of the seed.
        rng = random.Random(seed if seed is None or pipelines == 1
                            else f"{seed}/{input_context.input_pipeline_id}")
        if pipelines > 1:
            num, index = input_context.num_input_pipelines, input_context.input_pipeline_id
            if len(files) >= num:
                files = files[index::num]
            else:
                record_shard = (num, index)
        if shuffle_files:
            rng.shuffle(files)

        filenames = tf.data.Dataset.from_tensor_slices(files)
        if shuffle_files:
            records = filenames.interleave(
                lambda f: tf.data.TFRecordDataset(f, buffer_size=_READ_BUFFER_BYTES),
                cycle_length=min(_INTERLEAVE_CYCLE, len(files)),
                num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=deterministic,
            )
        else:
            records = tf.data.TFRecordDataset(filenames, buffer_size=_READ_BUFFER_BYTES)
        if record_shard is not None:
            records = records.shard(*record_shard)
        records = records.take(max_records)
        if is_training and shuffle_files:
            records = records.shuffle(shuffle_buffer_size, seed=rng.randrange(2**31))
        if repeat:
            records = records.repeat()
        if is_training and repeat and self.skip_random_fraction_when_training:
            # t2t skips up to one file's worth of records so that restarts and replicas do
            # not all begin on the same examples.
            records = records.skip(rng.randint(0, _file_num_records(files[0])))

        drop_long = is_training or hparams_support.hparam(hparams, "eval_drop_long_sequences")
        min_length = hparams_support.hparam(hparams, "min_length")
        max_length = self.max_length(hparams) if drop_long else data_reader.NO_MAX_LENGTH
        names = self.example_reading_spec()
        # t2t's pack_dataset: pack on the fly to max_length in training and eval, unless the
        # data are packed already (a `*_packed` problem). Never for PREDICT: decoding needs
        # one example per row.
        pack_length = None
        if (hparams_support.hparam(hparams, "pack_dataset") and mode != ModeKeys.PREDICT
                and "targets_segmentation" not in names):
            pack_length = self.max_length(hparams)
        parse_batch = _PARSE_BATCH if pack_length is None else max(
            _PARSE_BATCH, pack_length * _PACK_WINDOW_PER_LENGTH)

        def parse(serialized):
            features = data_reader.parse_example_batch(serialized, names)
            features = self.preprocess_examples(features, mode, hparams)
            features = self._maybe_reverse_and_copy(features)
            if pack_length is not None:
                features = data_reader.pack_ragged_examples(features, pack_length)
            return data_reader.filter_by_length(features, min_length, max_length)

        examples = (
            records.batch(parse_batch)
            .map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
            .unbatch()
        )
        if not batch:
            return data_reader.dense_examples(examples).prefetch(tf.data.AUTOTUNE)

        batches = self._batch_examples(examples, hparams, pad_to_bucket_boundaries)
        batch_shuffle_size = hparams.get("batch_shuffle_size", 0)
        if is_training and batch_shuffle_size:
            batches = batches.shuffle(batch_shuffle_size, seed=rng.randrange(2**31))
        options = tf.data.Options()
        options.deterministic = deterministic
        return batches.with_options(options).prefetch(tf.data.AUTOTUNE)

    def _batch_examples(self, examples: tf.data.Dataset, hparams: HParams,
                        pad_to_bucket_boundaries: bool = False) -> tf.data.Dataset:
        """Token-bucketed padded batches (or fixed-size ones with use_fixed_batch_size)."""
        fixed = hparams_support.hparam(hparams, "use_fixed_batch_size")
        if fixed or not self.batch_size_means_tokens:
            return data_reader.batch_examples(examples, hparams.batch_size)
        scheme = data_reader.hparams_to_batching_scheme(
            hparams, length_multiplier=self.get_hparams().batch_size_multiplier
        )
        return data_reader.bucket_by_length(
            examples, scheme["boundaries"], scheme["batch_sizes"], pad_to_bucket_boundaries
        )

    def _maybe_reverse_and_copy(self, features: dict) -> dict:
        """Swaps inputs/targets for `_rev` problems; copies inputs to targets for copies."""
        if self._was_reversed:
            features = _swap_inputs_targets(features)
        if self._was_copy and "inputs" in features:
            features = dict(features, targets=features["inputs"])
        return features
