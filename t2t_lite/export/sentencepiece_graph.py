"""A SentencePiece model as graph ops, for SavedModels of runs with a SentencePiece vocab.

The graph twin of `data_generators.sentencepiece_encoder.SentencePieceEncoder` (same ids,
same text): tensorflow-text's `SentencepieceTokenizer` holds the serialized model, and the
ids are shifted by the encoder's `offset` as in Python. Unlike t2t's subword graph
(`subword_graph`, core TensorFlow ops only), a SavedModel that holds it loads only where
tensorflow-text's ops are registered: `import tensorflow_text` before
`tf.saved_model.load`, or a TensorFlow Serving binary built with tensorflow-text's ops.
"""
from __future__ import annotations

import dataclasses

import tensorflow as tf

from t2t_lite.errors import UserError


@dataclasses.dataclass(frozen=True)
class SentencePieceVocab:
    """What the graph encoder needs of a `SentencePieceEncoder`.

    Attributes:
      model_proto: the `.model` file's bytes.
      offset: added to the model's ids (0 or 2, see `sentencepiece_encoder`).
      vocab_size: ids in all, reserved ones included.
    """
    model_proto: bytes
    offset: int
    vocab_size: int

    @classmethod
    def of(cls, encoder) -> SentencePieceVocab:
        """The vocab of a `SentencePieceEncoder`."""
        return cls(encoder.model_proto, encoder.offset, encoder.vocab_size)


def import_tensorflow_text():
    """`import tensorflow_text`, or a UserError saying how to install it."""
    try:
        import tensorflow_text
    except ImportError as e:
        raise UserError(
            f"the SavedModel of a SentencePiece vocabulary needs tensorflow-text ({e}); install "
            "it with `pip install -e \".[text]\"`") from None
    return tensorflow_text


class SentencePieceGraphEncoder(tf.Module):
    """In-graph SentencePiece encoder and decoder (a `tf.Module`: the model travels with the
    SavedModel)."""

    def __init__(self, vocab: SentencePieceVocab, name: str = "sentencepiece_graph_encoder"):
        """Args:
        vocab: the model and its id shift.
        name: tf.Module name.
        """
        super().__init__(name=name)
        text = import_tensorflow_text()
        self._tokenizer = text.SentencepieceTokenizer(model=vocab.model_proto,
                                                      out_type=tf.int32)
        self._offset = int(vocab.offset)
        self.vocab_size = int(vocab.vocab_size)

    def encode(self, text: tf.Tensor, max_length: int | None = None) -> tf.RaggedTensor:
        """Sentences -> ids like `SentencePieceEncoder.encode` (no EOS added).

        Args:
          text: string [B], UTF-8 (invalid bytes are read as U+FFFD).
          max_length: if set, keep only the first `max_length` ids of each sentence.

        Returns:
          int32 RaggedTensor [B, None].
        """
        text = tf.strings.unicode_transcode(tf.convert_to_tensor(text, tf.string), "UTF-8",
                                            "UTF-8", errors="replace")
        ids = self._tokenizer.tokenize(text) + self._offset
        if max_length is not None:
            ids = ids[:, :max_length]
        return ids

    def decode(self, ids: tf.RaggedTensor) -> tf.Tensor:
        """Ids -> text like `SentencePieceEncoder.decode` (PAD, EOS and ids outside the
        vocabulary add nothing).

        Args:
          ids: int RaggedTensor [B, None] (or a dense int Tensor [B, T]).

        Returns:
          string [B].
        """
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.RaggedTensor.from_tensor(ids)
        ids = tf.cast(ids, tf.int32)
        # The model's own ids 0 and 1 are its <pad> and </s> (offset 0), which it decodes to
        # nothing; a shifted model's reserved ids are dropped here.
        keep = (ids >= self._offset) & (ids < self.vocab_size)
        return self._tokenizer.detokenize(tf.ragged.boolean_mask(ids, keep) - self._offset)
