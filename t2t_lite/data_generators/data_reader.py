"""Reading generated shards into token-bucketed batches (t2t's `utils/data_reader.py`).

`batching_scheme` / `hparams_to_batching_scheme` reproduce t2t's bucket boundaries and
per-bucket batch sizes exactly (T2T_REFERENCE.md §5.3): `batch_size` counts tokens, i.e. a
batch holds about `batch_size / L` sentences when its longest example has L tokens.

`parse_example_batch` decodes a whole vector of serialized `tf.train.Example`s at once into
ragged int32 features (one vectorized op instead of one parse per record), and
`bucket_by_length` groups examples into the scheme's buckets with padded batches, each feature
padded with 0 to its own longest example in the batch.
"""
from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import tensorflow as tf

from t2t_lite import hparams_support

# t2t picks the window of its bucketing from these (a window must be divisible by every bucket
# batch size); kept so that batch sizes equal t2t's.
HIGHLY_COMPOSITE_NUMBERS = (
    1, 2, 4, 6, 12, 24, 36, 48, 60, 120, 180, 240, 360, 720, 840, 1260, 1680, 2520, 5040,
    7560, 10080, 15120, 20160, 25200, 27720, 45360, 50400, 55440, 83160, 110880, 166320,
    221760, 277200, 332640, 498960, 554400, 665280, 720720, 1081080, 1441440, 2162160,
    2882880, 3603600, 4324320, 6486480, 7207200, 8648640, 10810800, 14414400, 17297280,
    21621600, 32432400, 36756720, 43243200, 61261200, 73513440, 110270160,
)

# An example length no filter rejects (t2t's 10**9 for "do not drop long sequences").
NO_MAX_LENGTH = 10**9


def bucket_boundaries(
    max_length: int, min_length: int = 8, length_bucket_step: float = 1.1
) -> list[int]:
    """Upper boundaries of t2t's length buckets.

    Args:
      max_length: no boundary is emitted at or above this length.
      min_length: the first boundary.
      length_bucket_step: growth factor (> 1) between consecutive boundaries.

    Returns:
      Boundaries `x_0 = min_length, x_{i+1} = max(x_i + 1, int(x_i * step))` below max_length.
    """
    if length_bucket_step <= 1.0:
        raise ValueError(f"length_bucket_step must be > 1, got {length_bucket_step}")
    x = min_length
    boundaries = []
    while x < max_length:
        boundaries.append(x)
        x = max(x + 1, int(x * length_bucket_step))
    return boundaries


def batching_scheme(
    batch_size: int,
    max_length: int,
    min_length_bucket: int,
    length_bucket_step: float,
    drop_long_sequences: bool = False,
    shard_multiplier: int = 1,
    length_multiplier: int = 1,
    min_length: int = 0,
) -> dict[str, Any]:
    """t2t's bucketing: boundaries and one batch size (in sentences) per bucket.

    Args:
      batch_size: tokens per batch (per replica), t2t's `hparams.batch_size`.
      max_length: longest example kept; 0 means `batch_size`.
      min_length_bucket: first bucket boundary.
      length_bucket_step: growth factor between boundaries.
      drop_long_sequences: whether `max_length` in the result filters examples.
      shard_multiplier: every batch size is multiplied by this (t2t's GPU count).
      length_multiplier: boundaries and max_length are multiplied by this
        (the problem's `batch_size_multiplier`).
      min_length: shortest example kept.

    Returns:
      dict with "boundaries" (list, len n), "batch_sizes" (list, len n + 1), "min_length",
      "max_length" (10**9 unless drop_long_sequences) and "shuffle_queue_size".
    """
    max_length = max_length or batch_size
    if max_length < min_length:
        raise ValueError(f"max_length ({max_length}) must be >= min_length ({min_length})")
    boundaries = bucket_boundaries(max_length, min_length_bucket, length_bucket_step)
    boundaries = [b * length_multiplier for b in boundaries]
    max_length *= length_multiplier
    batch_sizes = [max(1, batch_size // length) for length in boundaries + [max_length]]
    # A bucketing window must split evenly into batches of every bucket's size, so t2t rounds
    # each size down to a divisor of a highly composite window.
    window_size = max(n for n in HIGHLY_COMPOSITE_NUMBERS if n <= 3 * max(batch_sizes))
    divisors = [d for d in range(1, window_size + 1) if window_size % d == 0]
    batch_sizes = [max(d for d in divisors if d <= bs) for bs in batch_sizes]
    window_size *= shard_multiplier
    batch_sizes = [bs * shard_multiplier for bs in batch_sizes]
    max_batches_per_window = window_size // min(batch_sizes)
    return {
        "boundaries": boundaries,
        "batch_sizes": batch_sizes,
        "min_length": min_length,
        "max_length": max_length if drop_long_sequences else NO_MAX_LENGTH,
        "shuffle_queue_size": max_batches_per_window * 3,
    }


def hparams_to_batching_scheme(
    hparams: Any,
    drop_long_sequences: bool = False,
    shard_multiplier: int = 1,
    length_multiplier: int = 1,
) -> dict[str, Any]:
    """`batching_scheme` from model hparams (batch_size, max_length, min_length_bucket, ...).

    Args:
      hparams: HParams with batch_size, max_length, min_length_bucket, length_bucket_step
        and min_length (`basic_params1`'s values for any that are missing).
      drop_long_sequences, shard_multiplier, length_multiplier: as in `batching_scheme`.

    Returns:
      The `batching_scheme` dict.
    """
    return batching_scheme(
        batch_size=hparams.batch_size,
        min_length=hparams_support.hparam(hparams, "min_length"),
        max_length=hparams_support.hparam(hparams, "max_length"),
        min_length_bucket=hparams_support.hparam(hparams, "min_length_bucket"),
        length_bucket_step=hparams_support.hparam(hparams, "length_bucket_step"),
        drop_long_sequences=drop_long_sequences,
        shard_multiplier=shard_multiplier,
        length_multiplier=length_multiplier,
    )


def example_length(example: dict[str, tf.Tensor]) -> tf.Tensor:
    """t2t's example length: the longest first dimension over all features.

    Args:
      example: dict of 1-D tensors, e.g. "inputs" [Lin], "targets" [Lt].

    Returns:
      int32 scalar max(Lin, Lt).
    """
    length = tf.constant(0, tf.int32)
    for _, value in sorted(example.items()):
        length = tf.maximum(length, tf.shape(value, out_type=tf.int32)[0])
    return length


def ragged_lengths(features: dict[str, tf.RaggedTensor]) -> tf.Tensor:
    """Per-example t2t length of a ragged batch.

    Args:
      features: dict of ragged int tensors [N, None].

    Returns:
      int32 [N]: max over features of each example's row length.
    """
    lengths = [tf.cast(v.row_lengths(), tf.int32) for _, v in sorted(features.items())]
    return tf.reduce_max(tf.stack(lengths), axis=0)


def parse_example_batch(
    serialized: tf.Tensor, feature_names: tuple[str, ...]
) -> dict[str, tf.RaggedTensor]:
    """Decodes serialized `tf.train.Example`s with int64 list features, all at once.

    Args:
      serialized: string [N], serialized tf.train.Example protos.
      feature_names: names of the int64 list features to read (e.g. inputs, targets).

    Returns:
      dict name -> int32 RaggedTensor [N, None]; a feature missing from a record is empty.
    """
    spec = {
        name: tf.io.RaggedFeature(tf.int64, row_splits_dtype=tf.int32) for name in feature_names
    }
    parsed = tf.io.parse_example(serialized, spec)
    return {name: tf.cast(parsed[name], tf.int32) for name in feature_names}


def pack_ragged_examples(
    features: dict[str, tf.RaggedTensor], length: int, spacing: int = 0, queue_size: int = 10
) -> dict[str, tf.RaggedTensor]:
    """Packs a ragged batch of examples into fewer, longer ones (t2t's `pack_dataset`).

    Each example is first cut to `length` ids per feature, then packed with t2t's greedy
    first-fit over a queue of `queue_size` open packs (`generator_utils.pack_examples`), so
    that no packed sequence is longer than `length`. Packing happens within the batch.

    Args:
      features: {"inputs" (optional), "targets"} int32 ragged [N, None].
      length: longest packed sequence (t2t: hparams.max_length).
      spacing: zeros between examples (0 in t2t's pack_dataset).
      queue_size: open packs.

    Returns:
      int32 ragged [M, None] features, M <= N: "inputs" and "targets" plus
      "inputs_segmentation", "inputs_position", "targets_segmentation" and
      "targets_position" ("targets_*" only without inputs).
    """
    from t2t_lite.data_generators import generator_utils

    has_inputs = "inputs" in features
    keys = ("inputs", "targets") if has_inputs else ("targets",)
    out_keys = [k + suffix for k in keys for suffix in ("", "_segmentation", "_position")]

    def pack(*flat):
        columns = {}
        for index, key in enumerate(keys):
            values, splits = flat[2 * index].numpy(), flat[2 * index + 1].numpy()
            columns[key] = [values[a:b][:length].tolist() for a, b in itertools.pairwise(splits)]
        examples = [dict(zip(keys, row)) for row in zip(*(columns[k] for k in keys))]
        packed = list(generator_utils.pack_examples(
            examples, has_inputs, length, spacing=spacing, queue_size=queue_size))
        result = []
        for key in out_keys:
            rows = [p[key] for p in packed]
            result.append(np.array([i for row in rows for i in row], np.int32))
            result.append(np.cumsum([0] + [len(row) for row in rows]).astype(np.int64))
        return result

    inputs = []
    for key in keys:
        inputs += [features[key].values, tf.cast(features[key].row_splits, tf.int64)]
    flat = tf.py_function(pack, inputs, [tf.int32, tf.int64] * len(out_keys))
    packed = {}
    for index, key in enumerate(out_keys):
        values, splits = flat[2 * index], flat[2 * index + 1]
        values.set_shape([None])
        splits.set_shape([None])
        packed[key] = tf.RaggedTensor.from_row_splits(
            values, tf.cast(splits, features["targets"].row_splits.dtype), validate=False)
    return packed


def filter_by_length(
    features: dict[str, tf.RaggedTensor], min_length: int, max_length: int
) -> dict[str, tf.RaggedTensor]:
    """Keeps the examples of a ragged batch whose t2t length lies in [min_length, max_length].

    Args:
      features: dict of ragged [N, None].
      min_length: shortest length kept.
      max_length: longest length kept.

    Returns:
      dict of ragged [M, None], M <= N, order preserved.
    """
    lengths = ragged_lengths(features)
    keep = tf.logical_and(lengths >= min_length, lengths <= max_length)
    return {name: tf.ragged.boolean_mask(value, keep) for name, value in features.items()}


def _is_ragged(spec) -> bool:
    return isinstance(spec, tf.RaggedTensorSpec)


def dense_examples(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """Gives unbatched ragged rows (ragged-rank 0, from `unbatch` of ragged batches) a plain
    TensorSpec; datasets of dense examples are returned as they are.

    Args:
      dataset: examples, dicts of 1-D int32 values.

    Returns:
      Dataset of dicts of int32 [L_feature].
    """
    if not any(_is_ragged(s) for s in dataset.element_spec.values()):
        return dataset
    # A ragged-rank-0 row is a dense vector already; the identity only changes its spec.
    return dataset.map(lambda example: {k: tf.identity(v) for k, v in example.items()})


def batch_examples(dataset: tf.data.Dataset, batch_size: int) -> tf.data.Dataset:
    """Fixed-size batches, each feature 0-padded to its longest example.

    Args:
      dataset: examples, dicts of 1-D int32 values (ragged-rank-0 from `unbatch`, or dense).
      batch_size: examples per batch (the last batch may be smaller).

    Returns:
      Dataset of dicts of int32 [B, L_feature].
    """
    return dense_examples(dataset).padded_batch(batch_size)


def bucket_by_length(
    dataset: tf.data.Dataset, boundaries: list[int], batch_sizes: list[int],
    pad_to_boundaries: bool = False,
) -> tf.data.Dataset:
    """Groups examples into length buckets and emits padded batches (t2t's bucketing).

    Bucket 0 holds lengths < boundaries[0], bucket i lengths in [b_{i-1}, b_i), the last one
    lengths >= b_last; a bucket emits a batch as soon as it holds its batch size. Each
    feature is padded with 0 to its own longest example in the batch. Partial batches are
    emitted when the input ends, so a finite input is covered exactly once.

    Examples coming from `unbatch` of ragged batches are made dense first (one padded_batch
    path for both kinds): as fast as ragged windows on algorithmic data and 1.2-1.3x the
    batches/s on toy WMT data (bench/README.md, "Start-up of a training run and of an export").

    With `pad_to_boundaries` every feature of a batch from bucket i < n is padded to the
    bucket's longest possible length `b_i - 1` instead, so that full batches come in one
    shape per bucket (what an XLA-compiled step needs to compile only a few times); the last
    bucket (no upper bound) keeps per-batch lengths.

    Args:
      dataset: examples, dicts of 1-D int32 values.
      boundaries: bucket boundaries (len n, increasing).
      batch_sizes: sentences per batch for each bucket (len n + 1).
      pad_to_boundaries: pad lengths to the bucket boundary (see above).

    Returns:
      Dataset of dicts of int32 [B, L_feature].
    """
    if len(batch_sizes) != len(boundaries) + 1:
        raise ValueError(
            f"need len(boundaries) + 1 batch sizes, got {len(batch_sizes)} for "
            f"{len(boundaries)} boundaries"
        )
    if not boundaries:
        return batch_examples(dataset, batch_sizes[0])
    boundaries_t = tf.constant(boundaries, tf.int32)
    sizes_t = tf.constant(batch_sizes, tf.int64)
    dataset = dense_examples(dataset)

    def key_func(example):
        length = example_length(example)
        # Number of boundaries <= length = index of the bucket [b_{i-1}, b_i).
        return tf.searchsorted(boundaries_t, tf.reshape(length, [1]), side="right")[0]

    batches = dataset.group_by_window(
        key_func=lambda ex: tf.cast(key_func(ex), tf.int64),
        reduce_func=lambda key, window: window.padded_batch(sizes_t[key]),
        window_size_func=lambda key: sizes_t[key],
    )
    if not pad_to_boundaries:
        return batches
    # All examples of a batch share a bucket: the batch's longest example names it. The last
    # bucket (-1: no upper bound) keeps the batch's own length.
    pad_lengths_t = tf.constant([b - 1 for b in boundaries] + [-1], tf.int32)

    def pad_batch(batch):
        length = tf.reduce_max([tf.shape(value)[1] for value in batch.values()])
        bucket = tf.searchsorted(boundaries_t, tf.reshape(length, [1]), side="right")[0]
        target = tf.gather(pad_lengths_t, bucket)
        target = tf.where(target < 0, length, target)
        return {name: tf.pad(value, [[0, 0], [0, target - tf.shape(value)[1]]])
                for name, value in batch.items()}

    return batches.map(pad_batch)
