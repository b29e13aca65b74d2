"""Word alignments in the SavedModel's graph: `decoding/alignment.py` as TensorFlow ops.

The same rule as the Python code (see there): piece k of a row is in word
`len(split(decode(ids[:k + 1]))) - 1`, every target word is linked to the source word with
the most attention summed over both words' pieces, and a row's line is `i-j` pairs in the
order of the target words. The prefixes of every row are decoded at once ([B * N] rows of N
ids), by the SavedModel's own graph decoder.
"""
from __future__ import annotations

import tensorflow as tf


def piece_words(decode, ids: tf.Tensor, lengths: tf.Tensor) -> tf.Tensor:
    """The word of each piece.

    Args:
      decode: `fn(int32 RaggedTensor [N, None]) -> string [N]` (the graph decoder).
      ids: int32 [B, N] subword ids.
      lengths: int32 [B], the pieces of each row that count (the rest get -1).

    Returns:
      int32 [B, N]: 0-based word index, -1 before the first word and beyond `lengths`.
    """
    batch, width = tf.shape(ids)[0], tf.shape(ids)[1]
    rows = tf.repeat(ids, width, axis=0)  # row b * N + k holds ids[b, :k + 1]
    prefix = tf.minimum(tf.tile(tf.range(1, width + 1), [batch]), tf.repeat(lengths, width))
    texts = decode(tf.RaggedTensor.from_tensor(rows, lengths=prefix))
    counts = tf.cast(tf.strings.split(texts).row_lengths(), tf.int32)
    words = tf.reshape(counts, [batch, width]) - 1
    return tf.where(tf.range(width)[tf.newaxis, :] < lengths[:, tf.newaxis], words, -1)


def length_before(ids: tf.Tensor, stops: tuple[int, ...]) -> tf.Tensor:
    """int32 [B]: the position of the first of `stops` in each row of ids [B, N] (N if none)."""
    width = tf.shape(ids)[1]
    is_stop = tf.reduce_any(tf.stack([tf.equal(ids, s) for s in stops]), axis=0)
    position = tf.where(is_stop, tf.range(width)[tf.newaxis, :], width)
    return tf.reduce_min(tf.concat([position, tf.fill([tf.shape(ids)[0], 1], width)], axis=1),
                         axis=1)


def alignment_lines(attention: tf.Tensor, source_words: tf.Tensor,
                    target_words: tf.Tensor) -> tf.Tensor:
    """The Pharaoh line of every row.

    Args:
      attention: float32 [B, T, L].
      source_words: int32 [B, L] word of each source piece (-1: none).
      target_words: int32 [B, T] word of each target piece (-1: none).

    Returns:
      string [B]: `i-j` pairs, space-separated, by target word.
    """
    sources = tf.maximum(tf.reduce_max(source_words) + 1, 1)
    targets = tf.maximum(tf.reduce_max(target_words) + 1, 1)
    source_onehot = tf.one_hot(source_words, sources, dtype=tf.float32)  # -1: zero row
    target_onehot = tf.one_hot(target_words, targets, dtype=tf.float32)
    by_word = tf.matmul(tf.matmul(target_onehot, attention, transpose_a=True), source_onehot)
    links = tf.argmax(by_word, axis=2, output_type=tf.int32)  # [B, targets]
    valid = tf.logical_and(tf.reduce_any(target_onehot > 0, axis=1),
                           tf.reduce_any(source_onehot > 0, axis=[1, 2])[:, tf.newaxis])
    target_index = tf.broadcast_to(tf.range(targets)[tf.newaxis, :], tf.shape(links))
    pairs = tf.strings.join([tf.strings.as_string(links), "-",
                             tf.strings.as_string(target_index)])
    return tf.strings.reduce_join(tf.ragged.boolean_mask(pairs, valid), axis=1, separator=" ")
