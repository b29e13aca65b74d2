"""WMT English-French problems (t2t's `translate_enfr.py`); T2T_REFERENCE.md §5.4.

* `translate_enfr_wmt32k` / `translate_enfr_wmt8k`: the WMT'14 En-Fr corpora, unfiltered
  (Common Crawl, Europarl v7, News Commentary v9, Giga fr-en release 2, UN doc 2000), dev
  newstest2013; shared subword vocab of ~2^15 / ~2^13. TFDS fallback: `wmt14_translate/fr-en`,
  whose fr-en training subsets are exactly these five corpora and whose validation split is
  newstest2013.
* `translate_enfr_wmt_small32k` / `translate_enfr_wmt_small8k`: OpenNMT's
  `baseline-1M-enfr` (1M pairs train, `baseline-1M_valid` dev), vocab built from the small
  data. TFDS has no such builder: the archive or its files must be in tmp_dir.
* `translate_enfr_wmt32k_packed`: translate_enfr_wmt32k's data and vocab file, examples
  packed into sequences of up to 256 ids (t2t's).

Inputs are English, targets French. Sources and their order: see
`t2t_lite.data_generators.translate`.
"""
from __future__ import annotations

from t2t_lite.data_generators import problem, translate
from t2t_lite.registry import register_problem

_ENFR_TRAIN_SMALL_DATA = [
    [
        "https://s3.amazonaws.com/opennmt-trainingdata/baseline-1M-enfr.tgz",
        ("baseline-1M-enfr/baseline-1M_train.en", "baseline-1M-enfr/baseline-1M_train.fr"),
    ],
]
_ENFR_TEST_SMALL_DATA = [
    [
        "https://s3.amazonaws.com/opennmt-trainingdata/baseline-1M-enfr.tgz",
        ("baseline-1M-enfr/baseline-1M_valid.en", "baseline-1M-enfr/baseline-1M_valid.fr"),
    ],
]
_ENFR_TRAIN_LARGE_DATA = [
    [
        "http://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz",
        ("commoncrawl.fr-en.en", "commoncrawl.fr-en.fr"),
    ],
    [
        "http://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz",
        ("training/europarl-v7.fr-en.en", "training/europarl-v7.fr-en.fr"),
    ],
    [
        "http://www.statmt.org/wmt14/training-parallel-nc-v9.tgz",
        ("training/news-commentary-v9.fr-en.en", "training/news-commentary-v9.fr-en.fr"),
    ],
    [
        "http://www.statmt.org/wmt10/training-giga-fren.tar",
        ("giga-fren.release2.fixed.en.gz", "giga-fren.release2.fixed.fr.gz"),
    ],
    [
        "http://www.statmt.org/wmt13/training-parallel-un.tgz",
        ("un/undoc.2000.fr-en.en", "un/undoc.2000.fr-en.fr"),
    ],
]
_ENFR_TEST_LARGE_DATA = [
    [
        "http://data.statmt.org/wmt17/translation-task/dev.tgz",
        ("dev/newstest2013.en", "dev/newstest2013.fr"),
    ],
]


@register_problem("translate_enfr_wmt_small8k")
class TranslateEnfrWmtSmall8k(translate.TranslateProblem):
    """En-Fr on OpenNMT's 1M-pair baseline data, ~8k subwords."""

    tfds_languages = ("en", "fr")

    @property
    def default_approx_vocab_size(self) -> int:
        return 2**13

    @property
    def use_small_dataset(self) -> bool:
        return True

    @property
    def tfds_name(self) -> str | None:
        return None if self.use_small_dataset else "wmt14_translate/fr-en"

    def source_data_files(self, dataset_split: str) -> list:
        train = dataset_split == problem.DatasetSplit.TRAIN
        if self.use_small_dataset:
            return _ENFR_TRAIN_SMALL_DATA if train else _ENFR_TEST_SMALL_DATA
        return _ENFR_TRAIN_LARGE_DATA if train else _ENFR_TEST_LARGE_DATA


@register_problem("translate_enfr_wmt_small32k")
class TranslateEnfrWmtSmall32k(TranslateEnfrWmtSmall8k):
    """En-Fr on OpenNMT's 1M-pair baseline data, ~32k subwords."""

    @property
    def default_approx_vocab_size(self) -> int:
        return 2**15


@register_problem("translate_enfr_wmt8k")
class TranslateEnfrWmt8k(TranslateEnfrWmtSmall8k):
    """En-Fr on the full WMT'14 corpora, ~8k subwords."""

    @property
    def use_small_dataset(self) -> bool:
        return False


@register_problem("translate_enfr_wmt32k")
class TranslateEnfrWmt32k(TranslateEnfrWmtSmall32k):
    """En-Fr on the full WMT'14 corpora, ~32k subwords."""

    @property
    def use_small_dataset(self) -> bool:
        return False


@register_problem("translate_enfr_wmt32k_packed")
class TranslateEnfrWmt32kPacked(TranslateEnfrWmt32k):
    """translate_enfr_wmt32k with its examples packed into sequences of 256 ids (t2t's)."""

    @property
    def packed_length(self) -> int:
        return 256

    @property
    def use_vocab_from_other_problem(self) -> TranslateEnfrWmt32k:
        return TranslateEnfrWmt32k(approx_vocab_size=self._approx_vocab_size)
