"""WMT English-German problems (t2t's `translate_ende.py`); T2T_REFERENCE.md §5.4.

* `translate_ende_wmt32k`: News Commentary v13, Common Crawl and Europarl v7 (de-en,
  ~4.5M pairs), dev newstest2013; shared subword vocab of ~2^15
  (`vocab.translate_ende_wmt32k.32768.subwords`). TFDS fallback: `wmt_t2t_translate/de-en`,
  the same corpora.
* `translate_ende_wmt8k`: the same data, ~2^13 subwords.
* `translate_ende_wmt32k_packed`, `translate_ende_wmt8k_packed`: the same data and vocab
  files, examples packed at datagen into sequences of up to 256 ids (t2t's packed problems;
  the model keeps the packed examples apart).
* `translate_ende_wmt_bpe32k` (removed from t2t in Feb 2019): Google's BPE-tokenized
  WMT'16 data from `wmt16_en_de.tar.gz` (`train.tok.clean.bpe.32000.{en,de}`,
  `newstest2013.tok.bpe.32000.{en,de}`, `vocab.bpe.32000`), read from tmp_dir; a TOKEN vocab
  `<pad>`, `<EOS>`, the BPE tokens, `UNK` (unknown tokens map to UNK). No TFDS fallback.

Sources and their order are described in `t2t_lite.data_generators.translate`.
"""
from __future__ import annotations

import os

from t2t_lite.data_generators import problem, text_encoder, text_problems, translate
from t2t_lite.data_generators.text_problems import CorpusError
from t2t_lite.registry import register_problem

_ENDE_TRAIN_DATASETS = [
    [
        "http://data.statmt.org/wmt18/translation-task/training-parallel-nc-v13.tgz",
        (
            "training-parallel-nc-v13/news-commentary-v13.de-en.en",
            "training-parallel-nc-v13/news-commentary-v13.de-en.de",
        ),
    ],
    [
        "http://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz",
        ("commoncrawl.de-en.en", "commoncrawl.de-en.de"),
    ],
    [
        "http://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz",
        ("training/europarl-v7.de-en.en", "training/europarl-v7.de-en.de"),
    ],
]
_ENDE_EVAL_DATASETS = [
    [
        "http://data.statmt.org/wmt17/translation-task/dev.tgz",
        ("dev/newstest2013.en", "dev/newstest2013.de"),
    ],
]
_BPE_ARCHIVE = "wmt16_en_de.tar.gz"
_BPE_TRAIN = "train.tok.clean.bpe.32000"
_BPE_DEV = "newstest2013.tok.bpe.32000"
_BPE_VOCAB = "vocab.bpe.32000"
_BPE_OOV = "UNK"


@register_problem("translate_ende_wmt32k")
class TranslateEndeWmt32k(translate.TranslateProblem):
    """En-De WMT with a shared ~32k subword vocab (inputs English, targets German)."""

    tfds_name = "wmt_t2t_translate/de-en"
    tfds_languages = ("en", "de")

    @property
    def default_approx_vocab_size(self) -> int:
        return 2**15

    def source_data_files(self, dataset_split: str) -> list:
        train = dataset_split == problem.DatasetSplit.TRAIN
        return _ENDE_TRAIN_DATASETS if train else _ENDE_EVAL_DATASETS


@register_problem("translate_ende_wmt8k")
class TranslateEndeWmt8k(TranslateEndeWmt32k):
    """En-De WMT with a shared ~8k subword vocab."""

    @property
    def default_approx_vocab_size(self) -> int:
        return 2**13


@register_problem("translate_ende_wmt32k_packed")
class TranslateEndeWmt32kPacked(TranslateEndeWmt32k):
    """translate_ende_wmt32k with its examples packed into sequences of 256 ids (t2t's)."""

    @property
    def packed_length(self) -> int:
        return 256

    @property
    def use_vocab_from_other_problem(self) -> TranslateEndeWmt32k:
        return TranslateEndeWmt32k(approx_vocab_size=self._approx_vocab_size)


@register_problem("translate_ende_wmt8k_packed")
class TranslateEndeWmt8kPacked(TranslateEndeWmt8k):
    """translate_ende_wmt8k with its examples packed into sequences of 256 ids (t2t's)."""

    @property
    def packed_length(self) -> int:
        return 256

    @property
    def use_vocab_from_other_problem(self) -> TranslateEndeWmt8k:
        return TranslateEndeWmt8k(approx_vocab_size=self._approx_vocab_size)


@register_problem("translate_ende_wmt_bpe32k")
class TranslateEndeWmtBpe32k(translate.TranslateProblem):
    """En-De WMT'16 with Google's 32k BPE tokens (a TOKEN vocab, OOV -> UNK)."""

    @property
    def vocab_type(self) -> str:
        return text_problems.VocabType.TOKEN

    @property
    def oov_token(self) -> str:
        return _BPE_OOV

    def source_data_files(self, dataset_split: str) -> list:
        # The BPE files are not compiled from raw corpora; see split_files.
        return []

    def _bpe_path(self, tmp_dir: str, name: str) -> str:
        path = os.path.join(tmp_dir, name)
        archive = os.path.join(tmp_dir, _BPE_ARCHIVE)
        if not os.path.exists(path) and os.path.exists(archive):
            translate._extract(archive, tmp_dir)
        if not os.path.exists(path):
            raise CorpusError(
                f"{path} not found: put Google's {_BPE_ARCHIVE} (or its extracted files) in "
                f"{tmp_dir}, or name the BPE text with --train_src/--train_tgt/--dev_src/"
                "--dev_tgt"
            )
        return path

    def split_files(self, tmp_dir: str, dataset_split: str) -> tuple[str, str]:
        if dataset_split in self._user_files:
            return self._user_files[dataset_split]
        base = _BPE_TRAIN if dataset_split == problem.DatasetSplit.TRAIN else _BPE_DEV
        return self._bpe_path(tmp_dir, base + ".en"), self._bpe_path(tmp_dir, base + ".de")

    def source_description(self, tmp_dir: str, dataset_split: str) -> str:
        if dataset_split in self._user_files:
            return " and ".join(self._user_files[dataset_split])
        base = _BPE_TRAIN if dataset_split == problem.DatasetSplit.TRAIN else _BPE_DEV
        return f"{os.path.join(tmp_dir, base)}.en and .de"

    def generate_samples(self, data_dir: str, tmp_dir: str, dataset_split: str):
        del data_dir
        source, target = self.split_files(tmp_dir, dataset_split)
        return text_problems.text2text_txt_iterator(source, target)

    def get_or_create_vocab(self, data_dir: str, tmp_dir: str | None, force_get: bool = False):
        """Loads the token vocab; first writes it from tmp_dir/vocab.bpe.32000 if absent."""
        vocab_path = os.path.join(data_dir, self.vocab_filename)
        if not force_get and not os.path.exists(vocab_path):
            bpe_vocab = self._bpe_path(tmp_dir, _BPE_VOCAB)
            tokens = [t for t in text_problems.txt_line_iterator(bpe_vocab) if t]
            encoder = text_encoder.TokenTextEncoder(None, vocab_list=tokens + [_BPE_OOV])
            encoder.store_to_file(vocab_path)
        return super().get_or_create_vocab(data_dir, tmp_dir, force_get=True)
