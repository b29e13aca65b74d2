"""SentencePiece vocabularies (not t2t's): an encoder with the interface of t2t's encoders.

`SentencePieceEncoder` reads a SentencePiece `.model` file (the `sentencepiece` package,
unigram or BPE) and gives t2t_lite's ids, so that the model, the search, decoding, BLEU,
attention pictures and both exports use it as they use t2t's `SubwordTextEncoder`.

Ids. Every t2t_lite encoder keeps t2t's reserved ids, PAD_ID = 0 and EOS_ID = 1. A model
trained by `train_model` reserves them itself (pad_id=0, eos_id=1, unk_id=2, no BOS), so its
ids are the model's own (`offset` 0). Any other model (SentencePiece's defaults are unk 0,
bos 1, eos 2, no pad) is shifted: piece i has id i + 2 (`offset` 2), ids 0 and 1 stay t2t's.

`train_model` trains with byte fallback (a character the model never saw is encoded as its
UTF-8 bytes, so nothing becomes `<unk>`) and without Unicode normalization (the text is kept
as it is, as sacreBLEU scores it): `decode(encode(s))` is `s` with runs of whitespace made one
space and the ends stripped. `hard_vocab_limit=False`: a corpus too small for the size asked
gives fewer pieces instead of failing.
"""
from __future__ import annotations

import io
import os
from collections.abc import Iterable, Sequence

from t2t_lite import file_io
from t2t_lite.data_generators import text_encoder
from t2t_lite.utils import extras

MODEL_SUFFIX = ".model"
MODEL_TYPES = ("unigram", "bpe")
# Sentences the trainer samples from the corpus at most (SentencePiece's input_sentence_size):
# its memory stays bounded on a WMT-size corpus.
MAX_TRAINING_SENTENCES = 2_000_000


def import_sentencepiece():
    """`import sentencepiece`, or a UserError saying how to install it."""
    with extras.needed("sentencepiece", "a SentencePiece vocabulary"):
        import sentencepiece
    return sentencepiece


class SentencePieceEncoder(text_encoder.TextEncoder):
    """A SentencePiece model as a t2t_lite text encoder (ids shifted by `offset`, see the
    module docstring)."""

    def __init__(self, filename: str):
        """Loads a `.model` file.

        Args:
          filename: the SentencePiece model (local or gs://).

        Raises:
          VocabFileError: missing file, or not a SentencePiece model (names the file).
        """
        spm = import_sentencepiece()
        self.filename = filename
        try:
            self._proto = file_io.read_bytes(filename)
        except OSError as e:
            raise text_encoder.VocabFileError(f"{filename}: cannot read the SentencePiece "
                                              f"model ({e})") from None
        try:
            self._sp = spm.SentencePieceProcessor(model_proto=self._proto)
        except (RuntimeError, TypeError) as e:
            raise text_encoder.VocabFileError(
                f"{filename}: not a SentencePiece model ({e})") from None
        own_ids = (self._sp.pad_id() == text_encoder.PAD_ID
                   and self._sp.eos_id() == text_encoder.EOS_ID)
        self.offset = 0 if own_ids else text_encoder.NUM_RESERVED_TOKENS
        super().__init__(num_reserved_ids=text_encoder.NUM_RESERVED_TOKENS)

    @property
    def model_proto(self) -> bytes:
        """The serialized model (the `.model` file's bytes)."""
        return self._proto

    @property
    def vocab_size(self) -> int:
        """Number of ids: the model's pieces, plus the 2 reserved ids of a shifted model."""
        return self._sp.get_piece_size() + self.offset

    def encode(self, s: str | bytes) -> list[int]:
        """Text -> ids (no EOS).

        Args:
          s: text (`str`, or UTF-8 `bytes`).

        Returns:
          [T] ids in [NUM_RESERVED_TOKENS, vocab_size).
        """
        ids = self._sp.encode(text_encoder.native_to_unicode(s))
        return [i + self.offset for i in ids] if self.offset else ids

    def encode_with_dropout(self, s: str | bytes, dropout: float, rng) -> list[int]:
        """Text -> ids segmented by SentencePiece's sampling (`enable_sampling`): unigram
        models sample a segmentation from the lattice smoothed by `alpha = dropout`, BPE
        models skip each merge with probability `dropout` (BPE-dropout). datagen's
        `--subword_dropout` with a SentencePiece vocab; `decode` inverts every result.

        Args:
          s: text.
          dropout: alpha in [0, 1); 0 gives `encode(s)`.
          rng: a `random.Random`; SentencePiece's generator is seeded from it for each
            sentence, so a datagen pass is reproducible.

        Returns:
          [T] ids.
        """
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"subword dropout must be in [0, 1), got {dropout}")
        if dropout == 0.0:
            return self.encode(s)
        import_sentencepiece().set_random_generator_seed(rng.getrandbits(31))
        ids = self._sp.encode(text_encoder.native_to_unicode(s), enable_sampling=True,
                              alpha=dropout, nbest_size=-1)
        return [i + self.offset for i in ids] if self.offset else ids

    def _model_ids(self, ids: Sequence[int]) -> list[int]:
        """The model's ids of t2t_lite ids, without the reserved ids of a shifted model and
        ids outside the vocabulary."""
        size = self._sp.get_piece_size()
        return [int(i) - self.offset for i in ids
                if self.offset <= int(i) and int(i) - self.offset < size]

    def decode(self, ids: Sequence[int], strip_extraneous: bool = False) -> str:
        """Ids -> text. PAD, EOS and ids outside the vocabulary add nothing.

        Args:
          ids: [T] ids (callers cut at EOS first, as for t2t's encoders).
          strip_extraneous: unused (reserved ids are never text here); t2t's signature.
        """
        del strip_extraneous
        return self._sp.decode(self._model_ids(ids))

    def decode_list(self, ids: Sequence[int]) -> list[str]:
        """Each id's piece ("▁" marks a word start; reserved ids as "<pad>" / "<EOS>")."""
        strings = self.all_subtoken_strings
        return [strings[i] if 0 <= i < len(strings) else "" for i in map(int, ids)]

    @property
    def all_subtoken_strings(self) -> tuple[str, ...]:
        """The pieces in id order (a shifted model's first two are "<pad>" and "<EOS>")."""
        pieces = [self._sp.id_to_piece(i) for i in range(self._sp.get_piece_size())]
        reserved = list(text_encoder.RESERVED_TOKENS) if self.offset else []
        return tuple(reserved + pieces)

    def store_to_file(self, filename: str) -> None:
        """Writes the `.model` file (atomically)."""
        file_io.atomic_write(filename, self._proto)


def train_model(lines: Iterable[str], path: str, vocab_size: int,
                model_type: str = "unigram", seed: int = 0) -> SentencePieceEncoder:
    """Trains a SentencePiece model on `lines` and writes it to `path` (atomically).

    Args:
      lines: training text, one sentence per item.
      path: the `.model` file to write.
      vocab_size: pieces wanted (a soft limit, see the module docstring), reserved included.
      model_type: "unigram" or "bpe".
      seed: seeds SentencePiece's generator (its sampling of a large corpus).

    Returns:
      The encoder of the written model.

    Raises:
      ValueError: unknown model_type or vocab_size too small.
    """
    if model_type not in MODEL_TYPES:
        raise ValueError(f"--sentencepiece_model_type={model_type!r}: one of "
                         f"{', '.join(MODEL_TYPES)}")
    if vocab_size < 300:
        raise ValueError(f"--approx_vocab_size={vocab_size} is too small for a SentencePiece "
                         "model with byte fallback (256 byte pieces): give at least 300")
    spm = import_sentencepiece()
    spm.set_random_generator_seed(seed)
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=(line for line in lines if line.strip()), model_writer=model,
            vocab_size=vocab_size, model_type=model_type,
            pad_id=text_encoder.PAD_ID, eos_id=text_encoder.EOS_ID, unk_id=2, bos_id=-1,
            byte_fallback=True, normalization_rule_name="identity", hard_vocab_limit=False,
            input_sentence_size=MAX_TRAINING_SENTENCES, shuffle_input_sentence=True,
            num_threads=max(1, os.cpu_count() or 1), minloglevel=2)
    except RuntimeError as e:
        raise ValueError(f"SentencePiece could not train a {model_type} model of "
                         f"{vocab_size} pieces: {e}") from None
    file_io.atomic_write(path, model.getvalue())
    return SentencePieceEncoder(path)


def is_model_file(path: str) -> bool:
    """Whether `path` names a SentencePiece model (by its `.model` suffix)."""
    return path.endswith(MODEL_SUFFIX)


def encoder_from_file(path: str) -> text_encoder.TextEncoder:
    """The encoder of a vocabulary file: a `.model` file's SentencePieceEncoder, else t2t's
    SubwordTextEncoder (the formats `store_to_file` writes)."""
    if is_model_file(path):
        return SentencePieceEncoder(path)
    return text_encoder.SubwordTextEncoder(path)


def file_name(subword_name: str, encoder: text_encoder.TextEncoder) -> str:
    """The name under which an export stores `encoder`'s vocab: `subword_name` (t2t's
    `<stem>.subwords`), or `<stem>.sentencepiece.model` for a SentencePiece model."""
    if isinstance(encoder, SentencePieceEncoder):
        return subword_name.removesuffix(".subwords") + ".sentencepiece" + MODEL_SUFFIX
    return subword_name
