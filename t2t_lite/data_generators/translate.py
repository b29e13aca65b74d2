"""Translation problems from parallel text (t2t's `data_generators/translate.py`).

Nothing is downloaded by this module itself. For each split a `TranslateProblem` takes the
first source that exists:

1. files named by the user (`set_source_files`, i.e. datagen's --train_src/--train_tgt/
   --dev_src/--dev_tgt), cleaned like t2t's compiled data (SGML markup stripped from `.sgm`
   files, pairs with an empty side dropped, lines stripped);
2. t2t's compiled files `<tmp_dir>/<problem>-compiled-{train|dev}.lang1/.lang2`
   (lang1 = inputs, lang2 = targets), e.g. left by an earlier t2t or t2t_lite run;
3. the raw corpus files t2t downloads, already in tmp_dir either extracted (at the paths of
   `source_data_files`) or as the archives t2t downloads (`training-parallel-nc-v13.tgz`,
   ...); they are extracted and compiled into (2), as t2t's `compile_data` does;
4. the problem's TFDS builder (`tfds_name`), which downloads and prepares the WMT data when
   the network allows; its text is written as the compiled files (2).

The vocab is built as in t2t from the raw training corpora (about 1 MB of lines per file,
`generate_lines_for_vocab`) when they are at hand; otherwise from the chosen training pair
with the same sampling and a budget of 1 MB × the number of t2t corpora per language.
"""
from __future__ import annotations

import contextlib
import os
import tarfile
from collections import Counter
from collections.abc import Iterator
from typing import Any

from absl import logging

from t2t_lite import file_io
from t2t_lite.data_generators import (
    corpus_filters,
    corpus_io,
    generator_utils,
    problem,
    text_problems,
    vocab_sources,
)
from t2t_lite.data_generators.text_problems import CorpusError

# t2t's per-file character budget for vocab text (`generate_lines_for_vocab`).
VOCAB_FILE_BYTE_BUDGET = 1e6
_SPLIT_TAGS = {problem.DatasetSplit.TRAIN: "train", problem.DatasetSplit.EVAL: "dev"}
_TFDS_SPLITS = {problem.DatasetSplit.TRAIN: "train", problem.DatasetSplit.EVAL: "validation"}


# A train shard of the user's own files holds about this many lines (see dataset_splits):
# few enough that a small corpus still has several shards (an interrupted datagen then shows
# as missing shards even without its completion marker).
LINES_PER_SHARD = 100


def _count_lines(path: str) -> int:
    """Lines of a local file, plain or compressed (`corpus_io.count_lines`, cached)."""
    return corpus_io.count_lines(path)


def _preprocess_sgm(line: str, is_sgm: bool) -> str | None:
    """Text of an SGML `<seg>` line; "" / None for markup lines (t2t's)."""
    if not is_sgm:
        return line
    if line.startswith(("<srcset", "</srcset", "<doc", "</doc", "<p>", "</p>")):
        return ""
    line = line.strip()
    if line.startswith("<seg") and line.endswith("</seg>"):
        return line[line.index(">") + 1 : -len("</seg>")]
    return None


def cleaned_pairs(source_path: str, target_path: str,
                  keep_empty: bool = False) -> Iterator[tuple[str, str]]:
    """Sentence pairs of two parallel files, cleaned like t2t's `compile_data`.

    Args:
      source_path: inputs file (`.sgm` files are stripped of their markup).
      target_path: targets file, parallel to source_path.
      keep_empty: also yield the pairs with an empty side (for `corpus_filters` to count).

    Yields:
      (source, target) stripped str pairs, both non-empty unless keep_empty.
    """
    is_sgm = all(corpus_io.plain_name(p).endswith("sgm") for p in (source_path, target_path))
    for sample in text_problems.text2text_txt_iterator(source_path, target_path):
        # t2t strips a <seg> text when it reads the compiled file back; strip it here already.
        source = (_preprocess_sgm(sample["inputs"], is_sgm) or "").strip()
        target = (_preprocess_sgm(sample["targets"], is_sgm) or "").strip()
        if (source and target) or keep_empty:
            yield source, target


def _write_compiled(pairs, compiled_base: str) -> int:
    """Writes pairs to `<base>.lang1/.lang2` via temporary names; returns the pair count."""
    count = 0
    with (
        file_io.atomic_open(compiled_base + ".lang1") as f1,
        file_io.atomic_open(compiled_base + ".lang2") as f2,
    ):
        for source, target in pairs:
            f1.write(source + "\n")
            f2.write(target + "\n")
            count += 1
    return count


def _extract(archive: str, tmp_dir: str) -> None:
    logging.info("Extracting %s into %s", archive, tmp_dir)
    mode = "r:gz" if archive.endswith(("gz", "tgz")) else "r"
    with tarfile.open(archive, mode) as tar:
        tar.extractall(tmp_dir, filter="data")


def raw_corpus_files(tmp_dir: str, datasets: list) -> list[tuple[str, str]] | None:
    """Local paths of t2t's raw corpus files, extracting archives found in tmp_dir.

    Args:
      tmp_dir: directory of raw data.
      datasets: t2t's `[url, (lang1_file, lang2_file)]` entries.

    Returns:
      [(lang1_path, lang2_path)] for every entry (a ".gz" file as it is: it is read
      decompressed), or None when any file (or its archive, named like the last part of
      the url) is absent. Nothing is downloaded.
    """
    pairs = []
    for url, names in datasets:
        archive = os.path.join(tmp_dir, os.path.basename(url))
        # A ".gz" corpus file (giga-fren) is read compressed (t2t gunzipped it next to
        # itself: such a copy, left by an earlier run, is read when the .gz is gone).
        stored = [os.path.join(tmp_dir, name) for name in names]
        unzipped = [p.removesuffix(".gz") for p in stored]
        if not all(os.path.exists(f) or os.path.exists(s) for s, f in zip(stored, unzipped)):
            if not os.path.exists(archive):
                return None
            _extract(archive, tmp_dir)
        final = [s if os.path.exists(s) else f for s, f in zip(stored, unzipped)]
        for stored_path, final_path in zip(stored, final):
            if not os.path.exists(final_path):
                raise CorpusError(
                    f"{archive} does not contain {os.path.relpath(stored_path, tmp_dir)}"
                )
        pairs.append((final[0], final[1]))
    return pairs


def compile_data(tmp_dir: str, datasets: list, filename: str) -> str:
    """Concatenates t2t's raw corpora into `<tmp_dir>/<filename>.lang1/.lang2` (cached).

    Args:
      tmp_dir: directory of raw data (archives are extracted there).
      datasets: t2t's `[url, (lang1_file, lang2_file)]` entries.
      filename: base name of the compiled files.

    Returns:
      The compiled base path (append ".lang1" / ".lang2").

    Raises:
      CorpusError: a corpus file is missing or malformed (file and line named).
    """
    base = os.path.join(tmp_dir, filename)
    if os.path.exists(base + ".lang1") and os.path.exists(base + ".lang2"):
        logging.info("Skipping compile data, found %s.lang1/.lang2", base)
        return base
    files = raw_corpus_files(tmp_dir, datasets)
    if files is None:
        missing = ", ".join(f"{lang1} + {lang2}" for _, (lang1, lang2) in datasets)
        raise CorpusError(f"Raw corpus files missing in {tmp_dir}: need {missing}")
    pairs = (pair for source, target in files for pair in cleaned_pairs(source, target))
    count = _write_compiled(pairs, base)
    logging.info("Compiled %d sentence pairs into %s.lang1/.lang2", count, base)
    return base


def _locate_decode_errors(lines: Iterator[str], files: list[str]) -> Iterator[str]:
    """Passes `lines` through; turns a UTF-8 error into a CorpusError naming file and line.

    The vocab sampler decodes its files in buffered chunks, so its error cannot say which
    line is bad; on that (rare) path the files are re-read line by line to find it.
    """
    try:
        yield from lines
    except ValueError as e:
        if not isinstance(e.__cause__, UnicodeDecodeError):
            raise
        for path in files:
            for _ in text_problems.txt_line_iterator(path):
                pass
        raise


class TranslateProblem(text_problems.Text2TextProblem):
    """Base of translation problems: per-split parallel corpora (t2t's)."""

    # TFDS builder of the same data ("name/config"), and the TFDS language keys of the
    # inputs and targets; None when TFDS has no such data set.
    tfds_name: str | None = None
    tfds_languages: tuple[str, str] = ("en", "de")

    def __init__(
        self,
        was_reversed: bool = False,
        was_copy: bool = False,
        approx_vocab_size: int | None = None,
    ):
        super().__init__(was_reversed, was_copy, approx_vocab_size)
        self._user_files: dict[str, tuple[str, str]] = {}
        self.tfds_data_dir: str | None = None
        self._vocab_settings = vocab_sources.VocabSettings()
        # Cleaning filters of the training pairs (None: t2t's data), the filtered files once
        # written, and the pairs each filter dropped.
        self.corpus_filters: corpus_filters.FilterSettings | None = None
        self._filtered_train: tuple[str, str] | None = None
        self.filter_counts: Counter = Counter()

    @property
    def is_generate_per_split(self) -> bool:
        return True

    def source_data_files(self, dataset_split: str) -> list:
        """t2t's `[url, (lang1_file, lang2_file)]` corpora of a split (lang1 = inputs)."""
        raise NotImplementedError

    def vocab_data_files(self) -> list:
        """Corpora the vocab is built from (the training corpora)."""
        return self.source_data_files(problem.DatasetSplit.TRAIN)

    def set_source_files(
        self,
        train_src: str | None = None,
        train_tgt: str | None = None,
        dev_src: str | None = None,
        dev_tgt: str | None = None,
    ) -> None:
        """Uses the user's parallel files for the train and/or dev split.

        Args:
          train_src, train_tgt: training inputs/targets files (both or neither).
          dev_src, dev_tgt: dev inputs/targets files (both or neither).
        """
        for split, (src, tgt), flags in (
            (problem.DatasetSplit.TRAIN, (train_src, train_tgt), "--train_src/--train_tgt"),
            (problem.DatasetSplit.EVAL, (dev_src, dev_tgt), "--dev_src/--dev_tgt"),
        ):
            if bool(src) != bool(tgt):
                raise ValueError(f"{flags}: give both files of the pair or neither")
            if src:
                for path in (src, tgt):
                    if not os.path.isfile(path):
                        raise CorpusError(f"{path}: no such file (from {flags})")
                # Relative to the current directory, as given on the command line (the vocab
                # builder joins source names with tmp_dir; an absolute path stays itself).
                self._user_files[split] = (os.path.abspath(src), os.path.abspath(tgt))

    @property
    def dataset_splits(self) -> list[dict]:
        """t2t's shards (train 100, dev 1), with fewer train shards for the user's own small
        training files: about `LINES_PER_SHARD` lines each (300 lines: 3 shards; 10,000 lines
        and more: t2t's 100)."""
        splits = super().dataset_splits
        if problem.DatasetSplit.TRAIN not in self._user_files:
            return splits
        lines = _count_lines(self._user_files[problem.DatasetSplit.TRAIN][0])
        fitting = max(1, -(-lines // LINES_PER_SHARD))
        return [dict(s, shards=min(s["shards"], fitting))
                if s["split"] == problem.DatasetSplit.TRAIN else s for s in splits]

    # Sources ---------------------------------------------------------------------------------
    def _compiled_base(self, tmp_dir: str, dataset_split: str) -> str:
        return os.path.join(tmp_dir, f"{self.name}-compiled-{_SPLIT_TAGS[dataset_split]}")

    def _tfds_builder(self):
        import tensorflow_datasets as tfds

        return tfds.builder(self.tfds_name, data_dir=self.tfds_data_dir)

    def _compile_from_tfds(self, tmp_dir: str, dataset_split: str) -> str:
        """Writes a TFDS split as the compiled files of `dataset_split`."""
        import tensorflow_datasets as tfds

        builder = self._tfds_builder()
        try:
            builder.download_and_prepare()
        except Exception as e:  # any failure to get the data means "not available"
            raise CorpusError(
                f"No data for {self.name}: {self._looked_for(tmp_dir, dataset_split)}; and "
                f"TFDS could not prepare {self.tfds_name}: {type(e).__name__}: {e}"
            ) from e
        src_key, tgt_key = self.tfds_languages
        dataset = builder.as_dataset(split=_TFDS_SPLITS[dataset_split])

        def pairs():
            for example in tfds.as_numpy(dataset):
                source = example[src_key].decode("utf-8").strip()
                target = example[tgt_key].decode("utf-8").strip()
                if source and target:
                    yield source, target

        base = self._compiled_base(tmp_dir, dataset_split)
        count = _write_compiled(pairs(), base)
        logging.info("Wrote %d pairs of TFDS %s into %s.lang1/.lang2", count, self.tfds_name, base)
        return base

    def _looked_for(self, tmp_dir: str, dataset_split: str) -> str:
        base = self._compiled_base(tmp_dir, dataset_split)
        flags = "--train_src/--train_tgt" if dataset_split == "train" else "--dev_src/--dev_tgt"
        looked_for = f"no {flags} files given, no {base}.lang1/.lang2"
        datasets = self.source_data_files(dataset_split)
        if datasets:
            raw = "; ".join(
                f"{os.path.basename(url)} or {f1} + {f2}" for url, (f1, f2) in datasets
            )
            looked_for += f", and not all raw corpora in {tmp_dir} ({raw})"
        return looked_for

    def split_files(self, tmp_dir: str, dataset_split: str) -> tuple[str, str]:
        """The (inputs, targets) files of a split: with `corpus_filters`, the training pairs
        that pass them (`<tmp_dir>/<problem>-filtered-train.lang1/.lang2`, written once per
        datagen, every drop counted in `filter_counts`), else `_unfiltered_split_files`."""
        if self.corpus_filters is None or dataset_split != problem.DatasetSplit.TRAIN:
            return self._unfiltered_split_files(tmp_dir, dataset_split)
        if self._filtered_train is None:
            source, target = self._unfiltered_split_files(tmp_dir, dataset_split)
            if dataset_split in self._user_files:
                pairs = cleaned_pairs(source, target, keep_empty=True)
            else:
                pairs = ((s["inputs"], s["targets"])
                         for s in text_problems.text2text_txt_iterator(source, target))
            base = os.path.join(tmp_dir, f"{self.name}-filtered-train")
            self.filter_counts = Counter()
            _write_compiled(corpus_filters.filter_pairs(pairs, self.corpus_filters,
                                                        self.filter_counts), base)
            logging.info(corpus_filters.summary_line(self.name, self.filter_counts))
            self._filtered_train = (base + ".lang1", base + ".lang2")
        return self._filtered_train

    def _unfiltered_split_files(self, tmp_dir: str, dataset_split: str) -> tuple[str, str]:
        """The (inputs, targets) files of a split, compiling them when needed.

        Args:
          tmp_dir: directory of raw data.
          dataset_split: DatasetSplit.TRAIN or EVAL.

        Returns:
          (source_path, target_path).

        Raises:
          CorpusError: no source is available (the message lists what was looked for).
        """
        if dataset_split in self._user_files:
            return self._user_files[dataset_split]
        base = self._compiled_base(tmp_dir, dataset_split)
        if not (os.path.exists(base + ".lang1") and os.path.exists(base + ".lang2")):
            datasets = self.source_data_files(dataset_split)
            if datasets and raw_corpus_files(tmp_dir, datasets) is not None:
                compile_data(tmp_dir, datasets, os.path.basename(base))
            elif self.tfds_name:
                self._compile_from_tfds(tmp_dir, dataset_split)
            else:
                raise CorpusError(
                    f"No data for {self.name}: {self._looked_for(tmp_dir, dataset_split)}"
                )
        return base + ".lang1", base + ".lang2"

    def source_description(self, tmp_dir: str, dataset_split: str) -> str:
        if dataset_split in self._user_files:
            return " and ".join(self._user_files[dataset_split])
        base = self._compiled_base(tmp_dir, dataset_split)
        return f"{base}.lang1 and {base}.lang2"

    def _raw_inputs(self, tmp_dir: str, dataset_split: str) -> dict[str, list[str]]:
        """The raw corpora of a split present in tmp_dir: each archive, or its extracted
        files."""
        raw = {}
        for url, names in self.source_data_files(dataset_split):
            archive = os.path.join(tmp_dir, os.path.basename(url))
            if os.path.isfile(archive):
                raw[f"tmp_dir/{os.path.basename(url)}"] = [archive]
                continue
            for name in names:
                for path in (os.path.join(tmp_dir, name),
                             os.path.join(tmp_dir, name).removesuffix(".gz")):
                    if os.path.isfile(path):
                        raw[f"tmp_dir/{os.path.relpath(path, tmp_dir)}"] = [path]
                        break
        return raw

    def _compiled_is_derived(self, tmp_dir: str, dataset_split: str) -> bool:
        """Whether the split's compiled files are datagen's own, made from the raw corpora
        or TFDS (else they are the user's input)."""
        return bool(self._raw_inputs(tmp_dir, dataset_split)) or bool(self.tfds_name)

    def datagen_input_files(self, tmp_dir: str) -> dict[str, list[str]]:
        """The user's files of each split, else the raw corpora present in tmp_dir, else
        t2t's compiled files when they are not derived (`_compiled_is_derived`: recording
        derived files would make a rerun look changed)."""
        files = {}
        for split, flags in ((problem.DatasetSplit.TRAIN, ("--train_src", "--train_tgt")),
                             (problem.DatasetSplit.EVAL, ("--dev_src", "--dev_tgt"))):
            if split in self._user_files:
                files.update((flag, [path]) for flag, path in zip(flags, self._user_files[split]))
            elif self._compiled_is_derived(tmp_dir, split):
                files.update(self._raw_inputs(tmp_dir, split))
            else:
                base = self._compiled_base(tmp_dir, split)
                for suffix in (".lang1", ".lang2"):
                    if os.path.isfile(base + suffix):
                        files[f"tmp_dir/{os.path.basename(base + suffix)}"] = [base + suffix]
        return {**files, **self._vocab_settings.input_files()}  # given vocab files are inputs

    def datagen_derived_files(self, tmp_dir: str) -> list[str]:
        """The compiled files that datagen made from the raw corpora or TFDS, and the files
        it extracted from archives (both are read instead of the archives once they exist,
        so new archives need them made again)."""
        files = []
        for split in (problem.DatasetSplit.TRAIN, problem.DatasetSplit.EVAL):
            if split in self._user_files or not self._compiled_is_derived(tmp_dir, split):
                continue
            base = self._compiled_base(tmp_dir, split)
            files += [base + suffix for suffix in (".lang1", ".lang2")]
            for url, names in self.source_data_files(split):
                if os.path.isfile(os.path.join(tmp_dir, os.path.basename(url))):
                    for name in names:
                        path = os.path.join(tmp_dir, name)
                        files += [path, path.removesuffix(".gz")]
        return sorted({path for path in files if os.path.isfile(path)})

    # Samples and vocab -----------------------------------------------------------------------
    def generate_samples(self, data_dir: str, tmp_dir: str, dataset_split: str):
        del data_dir
        source, target = self.split_files(tmp_dir, dataset_split)
        if dataset_split in self._user_files:
            return ({"inputs": s, "targets": t} for s, t in cleaned_pairs(source, target))
        return text_problems.text2text_txt_iterator(source, target)

    def generate_text_for_vocab(self, data_dir: str, tmp_dir: str) -> Iterator[str]:
        """t2t's vocab lines from the raw corpora, else from the chosen training pair."""
        del data_dir
        train = problem.DatasetSplit.TRAIN
        corpora = self.vocab_data_files()
        raw = None
        if train not in self._user_files and corpora and self.corpus_filters is None:
            raw = raw_corpus_files(tmp_dir, corpora)
        if raw is not None:
            files = [path for pair in raw for path in pair]
            lines = generator_utils.generate_lines_for_vocab(tmp_dir, corpora)
        else:
            budget = VOCAB_FILE_BYTE_BUDGET * max(1, len(corpora))
            files = list(self.split_files(tmp_dir, train))
            lines = generator_utils.generate_lines_for_vocab(tmp_dir, files, budget)
        return _locate_decode_errors(lines, files)

    # Vocabularies beyond t2t's: SentencePiece, a parent's (vocab_sources) ------------------
    def set_vocab_settings(self, settings: vocab_sources.VocabSettings) -> None:
        """Datagen: SentencePiece models, and/or vocab files to copy (`VocabSettings`).

        Raises:
          ValueError: the problem's vocab is not t2t's subwords (a token vocab), or it
            shares another problem's vocab (the packed problems).
        """
        own_type = (text_problems.VocabType.SUBWORD if self._vocab_settings.sentencepiece
                    else self.vocab_type)  # a subclass's fixed type (BPE tokens)
        if (settings.sentencepiece or settings.given) and (
                own_type != text_problems.VocabType.SUBWORD
                or self.use_vocab_from_other_problem is not None):
            raise ValueError(f"--vocab_type / --vocab_from do not apply to {self.name} (its "
                             "vocabulary is fixed by the problem)")
        self._vocab_settings = settings

    @property
    def vocab_settings(self) -> vocab_sources.VocabSettings:
        """The VocabSettings of datagen (default: t2t's subwords)."""
        return self._vocab_settings

    @property
    def vocab_type(self) -> str:
        if self._vocab_settings.sentencepiece:
            return text_problems.VocabType.SENTENCEPIECE
        return super().vocab_type

    def _sentencepiece_names(self) -> dict[str, str]:
        return vocab_sources.sentencepiece_filenames(self.dataset_filename(),
                                                     self._vocab_settings.separate)

    @property
    def vocab_filename(self) -> str:
        """t2t's name, or the (inputs') SentencePiece model's."""
        if self._vocab_settings.sentencepiece:
            return self._sentencepiece_names()["inputs"]
        return super().vocab_filename

    @property
    def vocab_filenames(self) -> list[str]:
        """Every vocab file datagen writes in data_dir (two separate SentencePiece models)."""
        if self._vocab_settings.sentencepiece:
            return sorted(set(self._sentencepiece_names().values()))
        return super().vocab_filenames

    def get_or_create_vocab(self, data_dir: str, tmp_dir: str | None, force_get: bool = False):
        """t2t's, after copying a parent's subword vocab (--vocab_from) into data_dir; with
        SentencePiece, the inputs' model."""
        if self.vocab_type == text_problems.VocabType.SENTENCEPIECE:
            return self._sentencepiece_encoders(data_dir, tmp_dir, force_get)["inputs"]
        given = self._vocab_settings.given.get("inputs")
        path = os.path.join(data_dir, self.vocab_filename)
        if given and not force_get and not os.path.exists(path):
            file_io.atomic_write(path, file_io.read_bytes(given))
        return super().get_or_create_vocab(data_dir, tmp_dir, force_get)

    def _sentencepiece_encoders(self, data_dir: str, tmp_dir: str | None,
                                force_get: bool) -> dict:
        if force_get:
            paths = vocab_sources.present_models(data_dir, self.dataset_filename())
            if paths is None:
                raise FileNotFoundError(
                    f"No SentencePiece model {self.vocab_filename} in {data_dir}. Generate the "
                    f"data first: python run.py --mode=datagen --problem={self.name} "
                    f"--data_dir={data_dir} --vocab_type=sentencepiece")
            return vocab_sources.load_encoders(paths)
        return vocab_sources.make_sentencepiece_encoders(self, self._vocab_settings, data_dir,
                                                         tmp_dir)

    def feature_encoders(self, data_dir: str | None) -> dict:
        """t2t's shared encoder, or the SentencePiece models found in data_dir (no flag
        needed after datagen)."""
        if data_dir is not None and not self._vocab_settings.sentencepiece:
            models = vocab_sources.present_models(data_dir, self.dataset_filename())
            if models is not None:
                subwords = None
                with contextlib.suppress(FileNotFoundError):
                    subwords = self._existing_vocab_path(data_dir)
                vocab_sources.check_one_kind(data_dir, self.dataset_filename(), subwords)
                return vocab_sources.load_encoders(models)
        if data_dir is not None and self._vocab_settings.sentencepiece:
            return self._sentencepiece_encoders(data_dir, None, force_get=True)
        return super().feature_encoders(data_dir)

    def _encodes_sample_by_sample(self) -> bool:
        """t2t's shared subword vocab or SentencePiece models (`_sample_encoders`), unless a
        subclass encodes its own way."""
        return type(self).generate_encoded_samples is TranslateProblem.generate_encoded_samples

    def _sample_encoders(self, data_dir: str, tmp_dir: str) -> dict[str, Any]:
        """t2t's one vocabulary, or the SentencePiece model of each side (trained or
        loaded)."""
        if self.vocab_type != text_problems.VocabType.SENTENCEPIECE:
            return super()._sample_encoders(data_dir, tmp_dir)
        return self._sentencepiece_encoders(data_dir, tmp_dir, force_get=False)

    def generate_encoded_samples(self, data_dir: str, tmp_dir: str, dataset_split: str):
        if self.vocab_type != text_problems.VocabType.SENTENCEPIECE:
            return super().generate_encoded_samples(data_dir, tmp_dir, dataset_split)
        encoders = self._sentencepiece_encoders(data_dir, tmp_dir, force_get=False)
        rate, copies = self.subword_dropout
        return vocab_sources.encoded_samples(self, encoders, data_dir, tmp_dir, dataset_split,
                                             rate, copies)
