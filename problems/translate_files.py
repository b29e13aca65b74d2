"""`translate_files`: translation between any two parallel text files the user names.

    python run.py --mode=datagen --problem=translate_files --data_dir=DATA \
        --train_src=train.en --train_tgt=train.de --dev_src=dev.en --dev_tgt=dev.de \
        [--approx_vocab_size=8192]

Line i of a source file is translated by line i of its target file (UTF-8; `.sgm` files are
stripped of their markup; pairs with an empty side are dropped). The shared subword vocab
(default ~2^15 subwords; `--approx_vocab_size` picks another size, and training then finds
that vocab in data_dir) is built from about 1 MB of lines of each training file, t2t's
sampling. Without the flags, t2t's compiled-file layout
`<tmp_dir>/translate_files-compiled-{train|dev}.lang1/.lang2` is read.
"""
from __future__ import annotations

from t2t_lite.data_generators import translate
from t2t_lite.registry import register_problem


@register_problem("translate_files")
class TranslateFiles(translate.TranslateProblem):
    """The user's own parallel corpus (inputs = source files, targets = target files)."""

    def source_data_files(self, dataset_split: str) -> list:
        # No known corpus: the files come from set_source_files or the compiled layout.
        return []
