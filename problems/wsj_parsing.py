"""WSJ constituency parsing as sequence to sequence (t2t's `wsj_parsing`, `parsing_english_ptb*`).

The trees (reading, preprocessing, writing) are `t2t_lite.data_generators.treebank`; t2t's
linearization and its repairing inverse are `t2t_lite.data_generators.tree_linearization`.
Here: the problems (`wsj_parsing`, `parsing_english_ptb8k`, `parsing_english_ptb16k`, and
two that are not t2t's: `parsing_english_ptb16k_xx`, whose targets write the words' POS tags
as XX, and `parsing_english_ptb_words`, whose targets hold the words in place of their tags;
see their docstrings), which read the treebank from `set_wsj_source(wsj_dir, train_sections,
dev_sections)` (datagen's --wsj_dir, --wsj_train_sections, --wsj_dev_sections) or from
tmp_dir, and `write_wsj_tmp_dir`: the files t2t's `wsj_parsing` problem expects in tmp_dir
(`wsjTrain.trees`, `wsjEval.trees`, `wsj.train.text.txt`, `wsj.train.tags.txt`), written from
the .mrg directory, since t2t ships no generator for them.
"""
from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator, Sequence

from t2t_lite import file_io
from t2t_lite.data_generators import problem, text_problems
from t2t_lite.data_generators.tree_linearization import (
    linearize,
    linearize_words,
    mask_pos_tags,
    words_and_tags_from_wsj_tree,
)
from t2t_lite.data_generators.treebank import (
    DEV_SECTIONS,
    TRAIN_SECTIONS,
    Tree,
    TreeError,
    mrg_files,
    parse_sections,
    read_wsj_sections,
    write_trees,
    wsj_root,
)
from t2t_lite.registry import register_problem

# File names t2t's wsj_parsing problem reads from tmp_dir.
TRAIN_TREES_FILE = "wsjTrain.trees"
EVAL_TREES_FILE = "wsjEval.trees"
TRAIN_TEXT_FILE = "wsj.train.text.txt"
TRAIN_TAGS_FILE = "wsj.train.tags.txt"


# ----------------------------------------------------------------------------------------------
# t2t's wsj_parsing tmp_dir layout


def write_wsj_tmp_dir(
    wsj_dir: str | os.PathLike,
    tmp_dir: str | os.PathLike,
    train_sections: str | Sequence[str] = TRAIN_SECTIONS,
    dev_sections: str | Sequence[str] = DEV_SECTIONS,
) -> dict[str, pathlib.Path]:
    """Writes the files t2t's `wsj_parsing` problem reads from tmp_dir.

    `wsjTrain.trees` / `wsjEval.trees`: the preprocessed train / dev trees, one per line;
    `wsj.train.text.txt` / `wsj.train.tags.txt`: the linearized train trees (words / tags),
    line i of one matching line i of the other (t2t builds its vocab from their first 1000
    pairs). Existing files are replaced; each is written under a temporary name and renamed.

    Args:
        wsj_dir: the treebank (see `wsj_root`).
        tmp_dir: output folder, created if missing.
        train_sections: sections of wsjTrain.trees (default 02-21).
        dev_sections: sections of wsjEval.trees (default 22).
    Returns:
        {file name: path} of the four files.
    Raises:
        FileNotFoundError, TreeError: see `read_wsj_sections`.
    """
    train = read_wsj_sections(wsj_dir, train_sections)
    dev = read_wsj_sections(wsj_dir, dev_sections)
    out = pathlib.Path(tmp_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {name: out / name for name in
             (TRAIN_TREES_FILE, EVAL_TREES_FILE, TRAIN_TEXT_FILE, TRAIN_TAGS_FILE)}
    pairs = [linearize(t) for t in train]
    write_trees(train, paths[TRAIN_TREES_FILE])
    write_trees(dev, paths[EVAL_TREES_FILE])
    file_io.atomic_write_lines(str(paths[TRAIN_TEXT_FILE]), (w for w, _ in pairs))
    file_io.atomic_write_lines(str(paths[TRAIN_TAGS_FILE]), (t for _, t in pairs))
    return paths


# ----------------------------------------------------------------------------------------------
# Problems


class _WsjSource:
    """Where a parsing problem finds the treebank, and which sections make each split.

    The treebank is `wsj_dir` (datagen's --wsj_dir) when set, else tmp_dir; either may be the
    folder holding `wsj/SS/*.mrg` or the `wsj` folder itself. Sections default to the standard
    split (train 02-21, dev 22).
    """

    def _init_wsj_source(self) -> None:
        self._wsj_dir: str | None = None
        self._sections = {problem.DatasetSplit.TRAIN: TRAIN_SECTIONS,
                          problem.DatasetSplit.EVAL: DEV_SECTIONS}
        self._tree_cache: dict[tuple[str, str], list[Tree]] = {}

    def set_wsj_source(self, wsj_dir: str | None = None, train_sections: str | None = None,
                       dev_sections: str | None = None) -> None:
        """Overrides the treebank folder and the sections of the train / dev splits.

        Args:
            wsj_dir: folder of the LDC treebank (`.../parsed/mrg`, holding wsj/SS/*.mrg).
            train_sections: e.g. "02-21", or files "0001-0159" (datagen's
                --wsj_train_sections; see `treebank.parse_sections`).
            dev_sections: e.g. "22", or files "0160-0179" (datagen's --wsj_dev_sections).
        Raises:
            ValueError: a malformed section spec.
        """
        if wsj_dir:
            self._wsj_dir = str(wsj_dir)
        for split, spec, flag in ((problem.DatasetSplit.TRAIN, train_sections,
                                   "--wsj_train_sections"),
                                  (problem.DatasetSplit.EVAL, dev_sections, "--wsj_dev_sections")):
            if spec:
                try:
                    parse_sections(spec)
                except ValueError as e:
                    raise ValueError(f"{flag}: {e}") from None
                self._sections[split] = spec

    def _treebank_dir(self, tmp_dir: str) -> str:
        return self._wsj_dir or tmp_dir

    def wsj_trees(self, tmp_dir: str, dataset_split: str) -> list[Tree]:
        """The preprocessed trees of a split, read once per problem instance.

        Args:
            tmp_dir: datagen's tmp_dir (the treebank unless `set_wsj_source` named one).
            dataset_split: problem.DatasetSplit.TRAIN or EVAL.
        Returns:
            The trees, in corpus order.
        Raises:
            FileNotFoundError: no treebank there (the message says how to point at it).
        """
        key = (self._treebank_dir(tmp_dir), self._sections[dataset_split])
        if key not in self._tree_cache:
            try:
                self._tree_cache[key] = read_wsj_sections(*key)
            except FileNotFoundError as e:
                raise FileNotFoundError(
                    f"{e}. The Penn Treebank (LDC99T42) cannot be downloaded automatically: "
                    f"pass --wsj_dir=<treebank_3/parsed/mrg> or put its wsj/ folder in "
                    f"--tmp_dir") from None
        return self._tree_cache[key]

    def datagen_input_files(self, tmp_dir: str) -> dict[str, list[str]]:
        """The .mrg files of each split's sections (none listed for a split whose treebank
        is missing: datagen then stops with that error)."""
        files = {}
        for split, flag in ((problem.DatasetSplit.TRAIN, "--wsj_train_sections"),
                            (problem.DatasetSplit.EVAL, "--wsj_dev_sections")):
            try:
                paths = mrg_files(self._treebank_dir(tmp_dir), self._sections[split])
            except FileNotFoundError:
                continue
            files[f"{flag}={self._sections[split]}"] = [str(path) for path in paths]
        return files

    def _source_text(self, tmp_dir: str, dataset_split: str) -> str:
        return (f"WSJ sections {self._sections[dataset_split]} of "
                f"{wsj_root(self._treebank_dir(tmp_dir))}")


@register_problem("wsj_parsing")
class WsjParsing(_WsjSource, text_problems.Text2textTmpdir):
    """t2t's `wsj_parsing`: linearized trees from one-line tree files in tmp_dir.

    Reads `wsjTrain.trees` / `wsjEval.trees` (one tree per line, blank lines skipped) and builds
    a shared 2^15 subword vocab (`vocab.wsj_parsing.32768.subwords`) from the first 1000 pairs
    of `wsj.train.text.txt` / `wsj.train.tags.txt`, as t2t. t2t ships nothing that writes those
    files; here, when they are absent (or when `set_wsj_source` named a treebank), they are
    written from the .mrg treebank by `write_wsj_tmp_dir` with the chosen sections.
    """

    TRAIN_FILES = (TRAIN_TEXT_FILE, TRAIN_TAGS_FILE)
    TRAIN_FILES_TREE = TRAIN_TREES_FILE
    EVAL_FILES_TREE = EVAL_TREES_FILE

    def __init__(self, was_reversed: bool = False, was_copy: bool = False,
                 approx_vocab_size: int | None = None):
        super().__init__(was_reversed, was_copy, approx_vocab_size)
        self._init_wsj_source()
        self._tmp_files_written = False

    @property
    def max_samples_for_vocab(self) -> int:
        return 1000

    def _tmp_files(self, tmp_dir: str) -> list[pathlib.Path]:
        names = (TRAIN_TREES_FILE, EVAL_TREES_FILE, TRAIN_TEXT_FILE, TRAIN_TAGS_FILE)
        return [pathlib.Path(tmp_dir) / name for name in names]

    def prepare_tmp_dir(self, tmp_dir: str) -> None:
        """Writes the four tmp_dir files from the treebank unless the user's files are there.

        They are (re)written once per instance when `set_wsj_source` named a treebank, or when
        any of them is missing.

        Args:
            tmp_dir: datagen's tmp_dir.
        Raises:
            FileNotFoundError: files missing and no treebank found.
        """
        if self._tmp_files_written:
            return
        if self._wsj_dir is None and all(p.exists() for p in self._tmp_files(tmp_dir)):
            return
        try:
            write_wsj_tmp_dir(self._treebank_dir(tmp_dir), tmp_dir,
                              self._sections[problem.DatasetSplit.TRAIN],
                              self._sections[problem.DatasetSplit.EVAL])
        except FileNotFoundError as e:
            missing = ", ".join(str(p) for p in self._tmp_files(tmp_dir) if not p.exists())
            raise FileNotFoundError(
                f"wsj_parsing needs {missing}; they are written from the Penn Treebank, but "
                f"{e}. Pass --wsj_dir=<treebank_3/parsed/mrg> (or put its wsj/ folder in "
                f"--tmp_dir), or provide the files") from None
        self._tmp_files_written = True

    def source_description(self, tmp_dir: str, dataset_split: str) -> str:
        tree_file = (self.TRAIN_FILES_TREE if dataset_split == problem.DatasetSplit.TRAIN
                     else self.EVAL_FILES_TREE)
        return os.path.join(tmp_dir, tree_file)

    def generate_samples(self, data_dir: str, tmp_dir: str, dataset_split: str):
        """Yields {"inputs": words, "targets": linearized tags} per line of the tree file."""
        del data_dir
        self.prepare_tmp_dir(tmp_dir)
        path = self.source_description(tmp_dir, dataset_split)
        with open(path, encoding="utf-8") as f:
            for line_no, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    words, tags = words_and_tags_from_wsj_tree(line)
                except TreeError as e:
                    raise TreeError(f"{path}:{line_no}: {e}") from None
                yield {"inputs": words, "targets": tags}

    def generate_text_for_vocab(self, data_dir: str, tmp_dir: str) -> Iterator[str]:
        """Inputs then targets of the first 1000 lines of wsj.train.text.txt / .tags.txt."""
        del data_dir
        self.prepare_tmp_dir(tmp_dir)
        files = [os.path.join(tmp_dir, f) for f in self.TRAIN_FILES]
        for i, sample in enumerate(text_problems.text2text_txt_iterator(*files)):
            yield sample["inputs"]
            yield sample["targets"]
            if (i + 1) >= self.max_samples_for_vocab:
                break


class _ParsingEnglishPtb(_WsjSource, text_problems.Text2TextProblem):
    """Shared part of t2t's `parsing_english_ptb8k` / `_ptb16k`: samples read from .mrg files.

    t2t declares these as plain `Problem`s whose datagen stops at `assert False`; here they are
    generated like any text2text problem (100 train shards, 1 dev shard, EOS appended), the
    samples being the linearized trees of the chosen sections, and the vocab built from the
    whole training split (inputs then targets of every tree). Eval metrics: the `Problem`
    defaults (no approx BLEU, no ROUGE), input space 3 (EN_TOK), target space 15 (PARSE_TOK).
    """

    def __init__(self, was_reversed: bool = False, was_copy: bool = False,
                 approx_vocab_size: int | None = None):
        super().__init__(was_reversed, was_copy, approx_vocab_size)
        self._init_wsj_source()

    @property
    def is_generate_per_split(self) -> bool:
        return True

    def source_description(self, tmp_dir: str, dataset_split: str) -> str:
        return self._source_text(tmp_dir, dataset_split)

    def generate_samples(self, data_dir: str, tmp_dir: str, dataset_split: str):
        """Yields {"inputs": words, "targets": linearized tags} per tree of the split."""
        del data_dir
        for tree in self.wsj_trees(tmp_dir, dataset_split):
            words, tags = linearize(tree)
            yield {"inputs": words, "targets": tags}

    def eval_metrics(self) -> list[str]:
        return problem.Problem.eval_metrics(self)

    def hparams(self, defaults, model_hparams) -> None:
        super().hparams(defaults, model_hparams)
        defaults.input_space_id = problem.SpaceID.EN_TOK
        defaults.target_space_id = problem.SpaceID.PARSE_TOK


@register_problem("parsing_english_ptb8k")
class ParsingEnglishPtb8k(_ParsingEnglishPtb):
    """t2t's `parsing_english_ptb8k`: one shared 2^13 subword vocab, file `vocab.endefr.8192`.

    The file name is t2t's (it loaded the En-De-Fr translation vocab of that name); a vocab
    already in data_dir under that name is used as it is, else one is built from the WSJ
    training split. t2t's legacy `batch_size_multiplier=256` and `loss_multiplier=2.0` are kept.
    """

    @property
    def default_approx_vocab_size(self) -> int:
        return 2**13

    @property
    def vocab_filename(self) -> str:
        return f"vocab.endefr.{self.approx_vocab_size}"

    def hparams(self, defaults, model_hparams) -> None:
        super().hparams(defaults, model_hparams)
        defaults.batch_size_multiplier = 256
        defaults.loss_multiplier = 2.0


@register_problem("parsing_english_ptb16k")
class ParsingEnglishPtb16k(_ParsingEnglishPtb):
    """t2t's `parsing_english_ptb16k`: separate subword vocabs for words and tags.

    Inputs (words): `wsj_source.vocab.512` (2^9); targets (linearized tags):
    `wsj_target.vocab.16384` (2^14, the constructor's approx_vocab_size overrides it). Both
    are built from the WSJ training split when absent. The tag text has few distinct tokens,
    so the target vocab ends up far smaller than 2^14 (the size only names the file).
    """

    vocab_prefix = "wsj"
    inputs_target_vocab_size = 2**9

    @property
    def default_approx_vocab_size(self) -> int:
        return 2**14

    @property
    def vocab_filename(self) -> str:
        return f"{self.vocab_prefix}_target.vocab.{self.approx_vocab_size}"

    @property
    def source_vocab_filename(self) -> str:
        """`wsj_source.vocab.512`."""
        return f"{self.vocab_prefix}_source.vocab.{self.inputs_target_vocab_size}"

    def generate_text_for_vocab(self, data_dir: str, tmp_dir: str) -> Iterator[str]:
        """The targets (tags) of the training split: the text of the target vocab."""
        for sample in self.generate_samples(data_dir, tmp_dir, problem.DatasetSplit.TRAIN):
            yield sample["targets"]

    def get_or_create_source_vocab(self, data_dir: str, tmp_dir: str | None,
                                   force_get: bool = False):
        """Loads `wsj_source.vocab.512`, building it from the training words if absent.

        Args:
            data_dir: where the vocab file lives.
            tmp_dir: raw data directory (only used when building).
            force_get: only load; never build.
        Returns:
            A SubwordTextEncoder.
        """
        from t2t_lite.data_generators import generator_utils, text_encoder

        path = os.path.join(data_dir, self.source_vocab_filename)
        if force_get:
            if not os.path.exists(path):
                raise FileNotFoundError(
                    f"Vocab file {path} not found. Generate the data first: python run.py "
                    f"--mode=datagen --problem={self.name} --data_dir={data_dir}")
            return text_encoder.SubwordTextEncoder(path)
        words = (s["inputs"] for s in
                 self.generate_samples(data_dir, tmp_dir, problem.DatasetSplit.TRAIN))
        return generator_utils.get_or_generate_vocab_inner(
            data_dir, self.source_vocab_filename, self.inputs_target_vocab_size, words,
            max_subtoken_length=self.max_subtoken_length,
            reserved_tokens=text_encoder.RESERVED_TOKENS)

    def feature_encoders(self, data_dir: str | None) -> dict:
        if data_dir is None:
            raise ValueError(f"{self.name} needs data_dir to load its vocabs "
                             f"({self.source_vocab_filename}, {self.vocab_filename})")
        return {"inputs": self.get_or_create_source_vocab(data_dir, None, force_get=True),
                "targets": self.get_or_create_vocab(data_dir, None, force_get=True)}

    def generate_encoded_samples(self, data_dir: str, tmp_dir: str, dataset_split: str):
        source = self.get_or_create_source_vocab(data_dir, tmp_dir)
        target = self.get_or_create_vocab(data_dir, tmp_dir)
        samples = self.generate_samples(data_dir, tmp_dir, dataset_split)
        return text_problems.text2text_generate_encoded(samples, source, targets_vocab=target)

    def generate_data(self, data_dir: str, tmp_dir: str, task_id: int = -1,
                      max_cases: int | None = None) -> None:
        # The base class removes what it created on failure, but knows only the target vocab.
        source_path = os.path.join(data_dir, self.source_vocab_filename)
        existed = os.path.exists(source_path)
        try:
            super().generate_data(data_dir, tmp_dir, task_id, max_cases)
        except BaseException:
            if not existed and os.path.exists(source_path):
                os.remove(source_path)
            raise


@register_problem("parsing_english_ptb16k_xx")
class ParsingEnglishPtb16kXX(ParsingEnglishPtb16k):
    """`parsing_english_ptb16k` with the POS tags of words written XX (not a t2t problem).

    Vinyals et al. (2015) replace the POS tags by XX in the linearized trees: the target
    then holds the brackets and one XX per word, and a model learns no tagging, which
    bracketing F1 does not score. Punctuation keeps its tags (`tree_linearization.
    mask_pos_tags`), so evalb deletes the same words from the repaired trees as from the gold
    ones. The same inputs and source vocab (`wsj_source.vocab.512`); the target vocab is
    `wsj_xx_target.vocab.16384`, built from the masked training targets. Decodes are repaired
    and scored like ptb16k's (`parsing_eval`), with tagging accuracy counting punctuation only.
    """

    def generate_samples(self, data_dir: str, tmp_dir: str, dataset_split: str):
        """Yields {"inputs": words, "targets": linearized tree with XX for the POS tags}."""
        for sample in super().generate_samples(data_dir, tmp_dir, dataset_split):
            yield {"inputs": sample["inputs"], "targets": mask_pos_tags(sample["targets"])}

    @property
    def vocab_filename(self) -> str:
        return f"{self.vocab_prefix}_xx_target.vocab.{self.approx_vocab_size}"


@register_problem("parsing_english_ptb_words")
class ParsingEnglishPtbWords(_ParsingEnglishPtb):
    """Linearized trees with the words in place of their POS tags (not a t2t problem).

    Targets are `tree_linearization.linearize_words`: "(S (NP The cat )NP (VP sat )VP . )S".
    The decoder copies the sentence into its brackets, so it reads in its own output which
    words it has placed; with t2t's tag sequences a model trained on a few thousand trees
    loses count of the words (README, "Parsing"). One shared subword vocab for words and
    labels (`vocab.parsing_english_ptb_words.4096.subwords`, built from the training split's
    inputs and targets), so a copied word has the same ids on both sides. No POS tags are
    predicted: decodes are repaired by `tree_linearization.tree_from_bracketed_words`
    (`parsing_eval --linearization=words`), which takes the punctuation's tags from the words.
    """

    @property
    def default_approx_vocab_size(self) -> int:
        return 2**12

    def generate_samples(self, data_dir: str, tmp_dir: str, dataset_split: str):
        """Yields {"inputs": words, "targets": linearized tree with the words as leaves}."""
        del data_dir
        for tree in self.wsj_trees(tmp_dir, dataset_split):
            words, target = linearize_words(tree)
            yield {"inputs": words, "targets": target}
