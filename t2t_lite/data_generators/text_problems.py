"""Text-to-text problems (t2t's `data_generators/text_problems.py`).

`Text2TextProblem` turns `{"inputs": str, "targets": str}` samples into shards: it builds or
loads the vocab (`get_or_create_vocab`), encodes both sides with the shared encoder, appends
EOS (id 1), writes round-robin TFRecord shards (100 train, 1 dev by default) and shuffles
them (T2T_REFERENCE.md §5.1, §5.2). A failed run leaves no shard and no vocab it created.

Reading raw text is strict where t2t was silent: `txt_line_iterator` names the file and line
of any byte sequence that is not UTF-8, and `text2text_txt_iterator` refuses parallel files
of different lengths (t2t's `zip` silently dropped the tail of the longer one).
"""
from __future__ import annotations

import functools
import os
import random
import time
import types
from collections.abc import Iterable, Iterator
from typing import Any

from absl import logging

from t2t_lite import file_io
from t2t_lite.data_generators import corpus_io, parallel_datagen, problem
from t2t_lite.errors import UserError
from t2t_lite.hparams import HParams


class VocabType:
    """How text becomes ids: bytes, subwords (t2t's default), whole tokens, or SentencePiece
    pieces (not t2t's; translation problems, `vocab_sources`)."""

    CHARACTER = "character"
    SUBWORD = "subwords"
    TOKEN = "tokens"
    SENTENCEPIECE = "sentencepiece"


class CorpusError(UserError):
    """Raw training text that cannot be used; the message names the file (and line). A
    UserError: run.py reports it as one line."""


# --------------------------------------------------------------------------------------------
# Reading raw text


def txt_line_iterator(txt_path: str) -> Iterator[str]:
    """Yields the lines of a UTF-8 text file, stripped (t2t's `txt_line_iterator`).

    Lines are split on "\\n" only (like tf.gfile), so a stray "\\r" or U+2028 inside a
    sentence cannot shift a parallel corpus out of alignment. A gzip or xz file is read
    decompressed, streaming (`corpus_io`).

    Args:
      txt_path: path of the file.

    Yields:
      str, one per line, with surrounding whitespace removed.

    Raises:
      CorpusError: the file is missing, or a line is not valid UTF-8 (names file:line).
    """
    if not os.path.isfile(txt_path):
        raise CorpusError(f"{txt_path}: no such file")
    with corpus_io.open_binary(txt_path) as f:
        for line_number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
                if line_number == 1:
                    line = file_io.strip_bom(line)
            except UnicodeDecodeError as e:
                raise CorpusError(
                    f"{txt_path}:{line_number}: not valid UTF-8 (byte 0x{raw[e.start]:02x} at "
                    f"column {e.start + 1}); convert the file to UTF-8, e.g. "
                    f"iconv -f latin1 -t utf-8"
                ) from None
            yield line.strip()


def count_lines(txt_path: str) -> int:
    """Number of lines of a file as `txt_line_iterator` yields them ("\\n"-separated, a last
    line without "\\n" counted; a gzip or xz file decompressed)."""
    return corpus_io.count_lines(txt_path)


def text2text_txt_iterator(source_txt_path: str, target_txt_path: str) -> Iterator[dict]:
    """Yields `{"inputs": line, "targets": line}` from two parallel text files.

    Args:
      source_txt_path: file of inputs, one sentence per line.
      target_txt_path: file of targets, line i translating line i of the source.

    Yields:
      dict with str "inputs" and "targets" (stripped lines, possibly empty).

    Raises:
      CorpusError: missing file, invalid UTF-8, or files with different numbers of lines.
    """
    sources = txt_line_iterator(source_txt_path)
    targets = txt_line_iterator(target_txt_path)
    line_number = 0
    while True:
        source = next(sources, None)
        target = next(targets, None)
        if source is None and target is None:
            return
        line_number += 1
        if source is None or target is None:
            short, long_ = (
                (source_txt_path, target_txt_path)
                if source is None
                else (target_txt_path, source_txt_path)
            )
            raise CorpusError(
                f"Parallel files differ in length: {short} has {line_number - 1} lines but "
                f"{long_} continues at line {line_number} ({count_lines(long_)} lines in "
                "all). Line i of one must translate line i of the other."
            )
        yield {"inputs": source, "targets": target}


def text2text_generate_encoded(
    sample_generator: Iterable[dict],
    vocab: Any,
    targets_vocab: Any = None,
    has_inputs: bool = True,
    inputs_prefix: str = "",
    targets_prefix: str = "",
) -> Iterator[dict]:
    """Encodes text samples and appends EOS (id 1) to each side (t2t's).

    Args:
      sample_generator: yields dicts with str "inputs" (if has_inputs) and "targets".
      vocab: encoder of the inputs (and of the targets unless targets_vocab is given).
      targets_vocab: encoder of the targets.
      has_inputs: whether samples have inputs.
      inputs_prefix, targets_prefix: text prepended before encoding.

    Yields:
      dicts with int lists "inputs" / "targets", each ending with 1.
    """
    from t2t_lite.data_generators import text_encoder

    targets_vocab = targets_vocab or vocab
    for sample in sample_generator:
        if has_inputs:
            sample["inputs"] = vocab.encode(inputs_prefix + sample["inputs"])
            sample["inputs"].append(text_encoder.EOS_ID)
        sample["targets"] = targets_vocab.encode(targets_prefix + sample["targets"])
        sample["targets"].append(text_encoder.EOS_ID)
        yield sample


def _nonempty_or_error(lines: Iterable[str], what: str) -> Iterator[str]:
    """Passes `lines` through; raises CorpusError at the end if none had any text."""
    seen_text = False
    for line in lines:
        seen_text = seen_text or bool(line.strip())
        yield line
    if not seen_text:
        raise CorpusError(f"Empty corpus: no text to build the vocabulary from ({what})")


# --------------------------------------------------------------------------------------------
# Problems


class Text2TextProblem(problem.Problem):
    """Base class for problems mapping text to text (t2t's `Text2TextProblem`).

    Subclasses implement `is_generate_per_split` and `generate_samples(data_dir, tmp_dir,
    dataset_split)` yielding `{"inputs": str, "targets": str}`.
    """

    def __init__(
        self,
        was_reversed: bool = False,
        was_copy: bool = False,
        approx_vocab_size: int | None = None,
    ):
        """Args:
        was_reversed, was_copy: see `Problem`.
        approx_vocab_size: overrides the class's target vocab size (it also changes the
          vocab file name); for quick experiments and tests.
        """
        super().__init__(was_reversed=was_reversed, was_copy=was_copy)
        self._approx_vocab_size = approx_vocab_size
        self._subword_dropout = 0.0
        self._subword_dropout_copies = 1
        # Datagen's encoding processes (`parallel_datagen`) and what it measured, by split.
        self.datagen_workers = 1
        self.datagen_stats: dict[str, dict[str, float]] = {}

    def set_subword_dropout(self, rate: float, copies: int) -> None:
        """Makes datagen write the training split `copies` times, each pass over the corpus
        segmented with MaxMatch-dropout at `rate` (`SubwordTextEncoder.encode_with_dropout`;
        pass k draws from `random.Random(k)`, so datagen stays reproducible). The vocab and
        the dev/test splits are unchanged. Not t2t's (subword regularization for small
        corpora).

        Raises:
          ValueError: rate outside [0, 1), copies < 1, or a vocab that is not subwords.
        """
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"--subword_dropout={rate}: must be in [0, 1)")
        if copies < 1:
            raise ValueError(f"--subword_dropout_copies={copies}: must be at least 1")
        if rate > 0 and self.vocab_type not in (VocabType.SUBWORD, VocabType.SENTENCEPIECE):
            raise ValueError(
                f"--subword_dropout applies to subword vocabs; {self.name} has a "
                f"{self.vocab_type} vocab")
        self._subword_dropout = rate
        self._subword_dropout_copies = copies

    @property
    def subword_dropout(self) -> tuple[float, int]:
        """(rate, copies) of `set_subword_dropout`; (0.0, 1) is t2t's one pass."""
        return self._subword_dropout, self._subword_dropout_copies

    # Subclass interface ----------------------------------------------------------------------
    @property
    def dataset_splits(self) -> list[dict]:
        """Splits and shard counts: train 100, eval 1 (t2t's)."""
        return [
            {"split": problem.DatasetSplit.TRAIN, "shards": 100},
            {"split": problem.DatasetSplit.EVAL, "shards": 1},
        ]

    @property
    def is_generate_per_split(self) -> bool:
        """True: each split has its own samples; False: train samples fill all splits."""
        raise NotImplementedError

    def generate_samples(self, data_dir: str, tmp_dir: str, dataset_split: str):
        """Yields `{"inputs": str, "targets": str}` for `dataset_split`."""
        raise NotImplementedError

    def source_description(self, tmp_dir: str, dataset_split: str) -> str:
        """Where the samples of a split come from, for error messages."""
        return f"{type(self).__name__}.generate_samples(tmp_dir={tmp_dir!r})"

    @property
    def vocab_type(self) -> str:
        """A VocabType value (default SUBWORD)."""
        return VocabType.SUBWORD

    @property
    def default_approx_vocab_size(self) -> int:
        """The problem's own target subword vocab size (t2t's approx_vocab_size)."""
        return 2**15

    @property
    def approx_vocab_size(self) -> int:
        """Target vocab size: the constructor override, else the problem's default."""
        return self._approx_vocab_size or self.default_approx_vocab_size

    @property
    def additional_reserved_tokens(self) -> list[str]:
        """Reserved tokens after <pad> and <EOS>."""
        return []

    @property
    def oov_token(self) -> str | None:
        """TOKEN vocabs: the token replacing out-of-vocabulary words (None: error)."""
        return None

    @property
    def max_samples_for_vocab(self) -> int | None:
        """Use at most this many training samples to build the vocab (None: all)."""
        return None

    @property
    def max_subtoken_length(self) -> int | None:
        """Longest subtoken considered when building the vocab (t2t: 200)."""
        return 200

    @property
    def packed_length(self) -> int | None:
        """Pack examples into sequences of at most this many ids per side at datagen (t2t's
        `*_packed` problems: 256), or None."""
        return None

    @property
    def packed_spacing(self) -> int:
        """Zeros between packed examples (t2t: 0)."""
        return 0

    @property
    def use_vocab_from_other_problem(self) -> Text2TextProblem | None:
        """A problem whose vocab file this one shares (t2t's; the packed variants use their
        unpacked problem's), or None."""
        return None

    @property
    def has_inputs(self) -> bool:
        return True

    def max_length(self, model_hparams: HParams) -> int:
        """`packed_length` for packed problems, else the model's max_length (t2t's)."""
        return self.packed_length or super().max_length(model_hparams)

    @property
    def already_shuffled(self) -> bool:
        """True when generate_samples is random already (write final names, no shuffle)."""
        return False

    def example_reading_spec(self) -> tuple[str, ...]:
        names = ("inputs", "targets") if self.has_inputs else ("targets",)
        if self.packed_length:
            names += tuple(f"{n}_{f}" for n in names for f in ("segmentation", "position"))
        return names

    def eval_metrics(self) -> list[str]:
        m = problem.Metrics
        return [
            m.ACC, m.ACC_TOP5, m.ACC_PER_SEQ, m.NEG_LOG_PERPLEXITY, m.APPROX_BLEU,
            m.ROUGE_2_F, m.ROUGE_L_F,
        ]

    # Vocabulary ------------------------------------------------------------------------------
    @property
    def vocab_filename(self) -> str:
        """`vocab.<problem>.<size>.subwords` (SUBWORD) or `vocab.<problem>.tokens` (TOKEN);
        the other problem's with `use_vocab_from_other_problem`."""
        other = self.use_vocab_from_other_problem
        if other is not None:
            return other.vocab_filename
        if self.vocab_type == VocabType.SUBWORD:
            return f"vocab.{self.dataset_filename()}.{self.approx_vocab_size}.{VocabType.SUBWORD}"
        return f"vocab.{self.dataset_filename()}.{VocabType.TOKEN}"

    @property
    def vocab_filenames(self) -> list[str]:
        """Every vocab file of the problem in data_dir (`vocab_filename`; two for separate
        SentencePiece models)."""
        return [self.vocab_filename]

    def generate_text_for_vocab(self, data_dir: str, tmp_dir: str) -> Iterator[str]:
        """Lines the vocab is built from: inputs then targets of each training sample."""
        samples = self.generate_samples(data_dir, tmp_dir, problem.DatasetSplit.TRAIN)
        for i, sample in enumerate(samples):
            if self.has_inputs:
                yield sample["inputs"]
            yield sample["targets"]
            if self.max_samples_for_vocab and (i + 1) >= self.max_samples_for_vocab:
                break

    def _existing_vocab_path(self, data_dir: str) -> str:
        """Path of this problem's vocab in data_dir, or a clear FileNotFoundError.

        A SUBWORD vocab generated with another size (datagen --approx_vocab_size) is found
        when it is the only `vocab.<problem>.*.subwords` file in data_dir.
        """
        path = os.path.join(data_dir, self.vocab_filename)
        if os.path.exists(path):
            return path
        pattern = f"vocab.{self.dataset_filename()}.*.{VocabType.SUBWORD}"
        candidates = []
        if self.vocab_type == VocabType.SUBWORD and self._approx_vocab_size is None:
            import glob

            candidates = sorted(glob.glob(os.path.join(data_dir, pattern)))
            if len(candidates) == 1:
                logging.debug("Using vocab %s (not the default %s)", candidates[0], path)
                return candidates[0]
        hint = f"; several candidates: {', '.join(candidates)}" if candidates else ""
        raise FileNotFoundError(
            f"Vocab file {path} not found{hint}. Generate the data first: python run.py "
            f"--mode=datagen --problem={self.name} --data_dir={data_dir}"
        )

    def get_or_create_vocab(self, data_dir: str, tmp_dir: str | None, force_get: bool = False):
        """Loads the vocab from data_dir, building it from `generate_text_for_vocab` if absent.

        Args:
          data_dir: where the vocab file lives.
          tmp_dir: raw data directory (only used when building).
          force_get: only load; never build.

        Returns:
          A text encoder (SubwordTextEncoder, TokenTextEncoder or ByteTextEncoder).
        """
        from t2t_lite.data_generators import generator_utils, text_encoder

        if self.vocab_type == VocabType.CHARACTER:
            return text_encoder.ByteTextEncoder()
        if self.vocab_type == VocabType.SUBWORD:
            if force_get:
                return text_encoder.SubwordTextEncoder(self._existing_vocab_path(data_dir))
            lines = _nonempty_or_error(
                self.generate_text_for_vocab(data_dir, tmp_dir),
                self.source_description(tmp_dir, problem.DatasetSplit.TRAIN),
            )
            return generator_utils.get_or_generate_vocab_inner(
                data_dir,
                self.vocab_filename,
                self.approx_vocab_size,
                lines,
                max_subtoken_length=self.max_subtoken_length,
                reserved_tokens=text_encoder.RESERVED_TOKENS + self.additional_reserved_tokens,
            )
        if self.vocab_type == VocabType.TOKEN:
            return text_encoder.TokenTextEncoder(
                self._existing_vocab_path(data_dir), replace_oov=self.oov_token
            )
        raise ValueError(f"Unknown vocab_type {self.vocab_type!r}")

    def feature_encoders(self, data_dir: str | None) -> dict[str, Any]:
        if data_dir is None:
            raise ValueError(
                f"{self.name} needs data_dir to load its vocab ({self.vocab_filename})"
            )
        encoder = self.get_or_create_vocab(data_dir, None, force_get=True)
        encoders = {"targets": encoder}
        if self.has_inputs:
            encoders["inputs"] = encoder
        return encoders

    # Generation ------------------------------------------------------------------------------
    def generate_encoded_samples(self, data_dir: str, tmp_dir: str, dataset_split: str):
        """Samples of a split encoded with the (built or loaded) vocab, EOS appended."""
        encoder = self.get_or_create_vocab(data_dir, tmp_dir)
        if self._subword_dropout > 0 and dataset_split == problem.DatasetSplit.TRAIN:
            return self._generate_encoded_with_dropout(data_dir, tmp_dir, encoder)
        samples = self.generate_samples(data_dir, tmp_dir, dataset_split)
        return text2text_generate_encoded(samples, encoder, has_inputs=self.has_inputs)

    def _generate_encoded_with_dropout(self, data_dir: str, tmp_dir: str, encoder):
        """The training samples, `_subword_dropout_copies` passes, each re-segmented."""
        for copy in range(self._subword_dropout_copies):
            logging.info("%s: training pass %d of %d with subword dropout %g", self.name,
                         copy + 1, self._subword_dropout_copies, self._subword_dropout)
            resegmenting = types.SimpleNamespace(encode=functools.partial(
                encoder.encode_with_dropout, dropout=self._subword_dropout,
                rng=random.Random(copy)))
            samples = self.generate_samples(data_dir, tmp_dir, problem.DatasetSplit.TRAIN)
            yield from text2text_generate_encoded(samples, resegmenting,
                                                  has_inputs=self.has_inputs)

    def generate_data(self, data_dir: str, tmp_dir: str, task_id: int = -1,
                      max_cases: int | None = None) -> None:
        """Builds the vocab, writes every split's shards, shuffles them (t2t's flow).

        Existing final shards are kept (generation is skipped). On any error, every shard
        and the vocab created by this call are deleted before the error propagates.

        Args:
          data_dir: output directory (created if needed).
          tmp_dir: raw data directory.
          task_id: unused (t2t's multiprocess generation is not supported).
          max_cases: write at most this many examples per split (None/0: all).
        """
        from t2t_lite.data_generators import generator_utils

        del task_id
        os.makedirs(data_dir, exist_ok=True)
        filepath_fns = {
            problem.DatasetSplit.TRAIN: self.training_filepaths,
            problem.DatasetSplit.EVAL: self.dev_filepaths,
            problem.DatasetSplit.TEST: self.test_filepaths,
        }
        split_paths = [
            (s["split"], filepath_fns[s["split"]](data_dir, s["shards"], self.already_shuffled))
            for s in self.dataset_splits
        ]
        all_paths = [path for _, paths in split_paths for path in paths]
        final_paths = [p.replace(generator_utils.UNSHUFFLED_SUFFIX, "") for p in all_paths]
        created = [p for p in all_paths + final_paths if not os.path.exists(p)]
        for vocab_path in [os.path.join(data_dir, name) for name in self.vocab_filenames]:
            if self.vocab_type != VocabType.CHARACTER and not os.path.exists(vocab_path):
                created.append(vocab_path)
        try:
            if self.is_generate_per_split:
                for split, paths in split_paths:
                    self._generate_split(data_dir, tmp_dir, split, paths, max_cases)
            else:
                self._generate_split(data_dir, tmp_dir, problem.DatasetSplit.TRAIN, all_paths,
                                     max_cases)
            if not self.already_shuffled:
                generator_utils.shuffle_dataset(all_paths, extra_fn=self._pack_fn())
        except BaseException:
            generator_utils.remove_files(created)
            raise

    def _pack_fn(self):
        """For packed problems, records -> packed records (applied after shuffling each
        file, as t2t does), else None."""
        if not self.packed_length:
            return None
        import tensorflow as tf

        from t2t_lite.data_generators import generator_utils

        def pack(records: list[bytes]) -> list[bytes]:
            examples = []
            for record in records:
                example = tf.train.Example.FromString(record)
                feature = example.features.feature
                examples.append({name: list(feature[name].int64_list.value)
                                 for name in ("inputs", "targets") if name in feature})
            packed = generator_utils.pack_examples(
                examples, self.has_inputs, self.packed_length, spacing=self.packed_spacing,
                chop_long_sequences=not self.has_inputs)
            return [generator_utils.to_example(p).SerializeToString() for p in packed]

        return pack

    def _generate_split(self, data_dir, tmp_dir, split, paths, max_cases) -> None:
        from t2t_lite.data_generators import generator_utils

        if generator_utils.outputs_exist(paths):
            logging.info("Skipping %s: shards exist in %s", split, data_dir)
            return
        logging.info("Generating the %s split of %s", split, self.name)
        if (self._encodes_sample_by_sample()
                and not (self._subword_dropout > 0 and split == problem.DatasetSplit.TRAIN)):
            count = self._write_split_fast(data_dir, tmp_dir, split, paths, max_cases)
        else:
            samples = self.generate_encoded_samples(data_dir, tmp_dir, split)
            count = generator_utils.generate_files(samples, paths, max_cases=max_cases)
        if count == 0:
            raise CorpusError(f"Empty corpus: the {split} split of {self.name} has no examples "
                              f"({self.source_description(tmp_dir, split)})")

    def _encodes_sample_by_sample(self) -> bool:
        """Whether `generate_encoded_samples` is t2t's (`parallel_datagen` can stand in)."""
        return type(self).generate_encoded_samples is Text2TextProblem.generate_encoded_samples

    def _sample_encoders(self, data_dir: str, tmp_dir: str) -> dict[str, Any]:
        """Each side's encoder (built or loaded): t2t's one vocabulary for both."""
        return dict.fromkeys(("inputs", "targets"), self.get_or_create_vocab(data_dir, tmp_dir))

    def _write_split_fast(self, data_dir, tmp_dir, split, paths, max_cases) -> int:
        """The split's shards by `parallel_datagen` (the records `generate_encoded_samples`
        gives), timing the vocab and the encoding into `datagen_stats[split]`."""
        start = time.time()
        if hasattr(self, "split_files"):  # compiled/filtered once, before workers read it
            self.split_files(tmp_dir, split)
        prepared = time.time()
        encoders = self._sample_encoders(data_dir, tmp_dir)
        vocab_done = time.time()
        count = parallel_datagen.write_split(
            lambda: self.generate_samples(data_dir, tmp_dir, split), encoders["inputs"],
            self.has_inputs, paths, max_cases=max_cases, workers=self.datagen_workers,
            desc="Writing " + os.path.basename(paths[0]), targets_encoder=encoders["targets"])
        self.datagen_stats[split] = {"prepare_s": round(prepared - start, 3),
                                     "vocab_s": round(vocab_done - prepared, 3),
                                     "encode_s": round(time.time() - vocab_done, 3),
                                     "examples": count, "workers": self.datagen_workers}
        return count

    def hparams(self, defaults, model_hparams: HParams) -> None:
        p = defaults
        p.stop_at_eos = True
        encoders = self._encoders
        p.modality = {"targets": problem.ModalityType.SYMBOL}
        p.vocab_size = {"targets": encoders["targets"].vocab_size}
        if self.has_inputs:
            p.modality["inputs"] = problem.ModalityType.SYMBOL
            p.vocab_size["inputs"] = encoders["inputs"].vocab_size
        if self.vocab_type == VocabType.CHARACTER:
            p.loss_multiplier = 2.0


class Text2textTmpdir(Text2TextProblem):
    """Parallel text files in tmp_dir (t2t's `Text2textTmpdir`).

    Reads `inputs.train.txt` / `targets.train.txt` and `inputs.eval.txt` /
    `targets.eval.txt`: line i of an inputs file pairs with line i of its targets file.
    """

    TRAIN_FILES = ("inputs.train.txt", "targets.train.txt")
    EVAL_FILES = ("inputs.eval.txt", "targets.eval.txt")

    @property
    def is_generate_per_split(self) -> bool:
        return True

    def _split_files(self, tmp_dir: str, dataset_split: str) -> list[str]:
        is_train = dataset_split == problem.DatasetSplit.TRAIN
        names = self.TRAIN_FILES if is_train else self.EVAL_FILES
        return [os.path.join(tmp_dir, name) for name in names]

    def source_description(self, tmp_dir: str, dataset_split: str) -> str:
        return " and ".join(self._split_files(tmp_dir, dataset_split))

    def datagen_input_files(self, tmp_dir: str) -> dict[str, list[str]]:
        files = {}
        for split in (problem.DatasetSplit.TRAIN, problem.DatasetSplit.EVAL):
            for path in self._split_files(tmp_dir, split):
                if os.path.isfile(path):
                    files[f"tmp_dir/{os.path.basename(path)}"] = [path]
        return files

    def generate_samples(self, data_dir: str, tmp_dir: str, dataset_split: str):
        del data_dir
        return text2text_txt_iterator(*self._split_files(tmp_dir, dataset_split))
