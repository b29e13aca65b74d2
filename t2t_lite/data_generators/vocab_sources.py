"""Where a translation problem's vocabulary comes from besides t2t's subword builder: a
SentencePiece model (trained at datagen, or given), or a parent run's vocabulary
(`--vocab_from`, to fine-tune the parent on new data). Not t2t's.

SentencePiece files live in data_dir beside t2t's vocab files:

* `vocab.<problem>.sentencepiece.model`: one model for inputs and targets;
* `vocab.<problem>.inputs.sentencepiece.model` and `vocab.<problem>.targets.sentencepiece.model`:
  one model per side (`--sentencepiece_separate`, or two given models).

Training, decoding, attention and both exports find them there (`present_models`), so no
flag is needed after datagen. A data_dir holding a subword vocab and a SentencePiece model of
the same problem is refused: the ids of one would be read with the other.

`--vocab_from=PARENT` (a run folder, whose run_inputs.json names its vocabulary files by
feature, or one vocab / `.model` file) copies the parent's files into data_dir under the
problem's own names and encodes the new corpus with them, so that `--warm_start_from=PARENT`
then loads every weight with the ids they were trained on
(`run_metadata.check_parent_vocabulary` refuses any other vocabulary).
"""
from __future__ import annotations

import dataclasses
import functools
import os
import random
import re
import types
from collections.abc import Iterator

from t2t_lite import file_io
from t2t_lite.data_generators import problem as problem_lib
from t2t_lite.data_generators import sentencepiece_encoder, text_encoder, text_problems
from t2t_lite.errors import UserError
from t2t_lite.utils import run_metadata

FEATURES = ("inputs", "targets")
SENTENCEPIECE = "sentencepiece"
SUBWORDS = text_problems.VocabType.SUBWORD
# The size in t2t's subword vocab names, `vocab.<problem>.<size>.subwords`.
_SUBWORD_SIZE = re.compile(r"\.(\d+)\.subwords$")


@dataclasses.dataclass
class VocabSettings:
    """Datagen's vocabulary settings of a translation problem.

    Attributes:
      sentencepiece: SentencePiece models instead of t2t's subword vocab.
      model_type: "unigram" or "bpe" (models trained at datagen).
      separate: one model per side (trained at datagen).
      given: feature -> a file to copy into data_dir instead of building the vocabulary
        (`--sentencepiece_model` / `--target_sentencepiece_model`, or the parent's files).
      vocab_from: the --vocab_from value the given files come from (None: not a parent's).
    """
    sentencepiece: bool = False
    model_type: str = "unigram"
    separate: bool = False
    given: dict[str, str] = dataclasses.field(default_factory=dict)
    vocab_from: str | None = None

    def flags(self) -> dict[str, object]:
        """The settings that change the records, by flag name, for datagen's markers."""
        if not self.sentencepiece:
            return {}
        return {"--vocab_type": SENTENCEPIECE, "--sentencepiece_model_type": self.model_type,
                "--sentencepiece_separate": self.separate}

    def input_files(self) -> dict[str, list[str]]:
        """The given files as datagen inputs, by label (their content is fingerprinted)."""
        if self.vocab_from:
            return {f"--vocab_from ({feature})": [path] for feature, path in self.given.items()}
        labels = {"inputs": "--sentencepiece_model", "targets": "--target_sentencepiece_model"}
        return {labels[feature]: [path] for feature, path in self.given.items()}


def sentencepiece_filenames(dataset_filename: str, separate: bool) -> dict[str, str]:
    """The SentencePiece file names of a problem in data_dir, by feature (see the module
    docstring; one name for both features when shared)."""
    if not separate:
        name = f"vocab.{dataset_filename}.{SENTENCEPIECE}{sentencepiece_encoder.MODEL_SUFFIX}"
        return {"inputs": name, "targets": name}
    return {feature: f"vocab.{dataset_filename}.{feature}.{SENTENCEPIECE}"
                     f"{sentencepiece_encoder.MODEL_SUFFIX}" for feature in FEATURES}


def present_models(data_dir: str, dataset_filename: str) -> dict[str, str] | None:
    """The SentencePiece files of a problem in data_dir, by feature, or None when it has
    none (separate models first, then a shared one)."""
    for separate in (True, False):
        paths = {feature: os.path.join(data_dir, name) for feature, name in
                 sentencepiece_filenames(dataset_filename, separate).items()}
        if all(_exists(p) for p in paths.values()):
            return paths
    return None


def _exists(path: str) -> bool:
    if "://" in path:
        import tensorflow as tf

        return tf.io.gfile.exists(path)
    return os.path.isfile(path)


def load_encoders(paths: dict[str, str]) -> dict[str, sentencepiece_encoder.SentencePieceEncoder]:
    """The encoders of `present_models`' files (one object for a shared model)."""
    inputs = sentencepiece_encoder.SentencePieceEncoder(paths["inputs"])
    targets = (inputs if paths["targets"] == paths["inputs"]
               else sentencepiece_encoder.SentencePieceEncoder(paths["targets"]))
    return {"inputs": inputs, "targets": targets}


def check_one_kind(data_dir: str, dataset_filename: str, subword_vocab: str | None) -> None:
    """Refuses a data_dir holding both a subword vocab and SentencePiece models of a problem.

    Raises:
      UserError: naming both files.
    """
    models = present_models(data_dir, dataset_filename)
    if models and subword_vocab:
        raise UserError(
            f"--data_dir={data_dir} holds two vocabularies of {dataset_filename}: "
            f"{subword_vocab} and {models['inputs']}; remove the one the data was not made "
            "with (or make the data again with --overwrite_data)")


def make_sentencepiece_encoders(problem, settings: VocabSettings, data_dir: str,
                                tmp_dir: str) -> dict[str, sentencepiece_encoder.SentencePieceEncoder]:
    """Datagen: the problem's SentencePiece models in data_dir, copied from the given files,
    else trained on the training split, unless they are there already.

    Args:
      problem: a TranslateProblem (its `dataset_filename`, `approx_vocab_size`,
        `generate_samples`).
      settings: its VocabSettings (sentencepiece set).
      data_dir, tmp_dir: datagen's folders.

    Returns:
      {"inputs", "targets"} encoders (one object when shared).
    """
    names = sentencepiece_filenames(problem.dataset_filename(), settings.separate)
    paths = {feature: os.path.join(data_dir, name) for feature, name in names.items()}
    if all(_exists(p) for p in paths.values()):
        return load_encoders(paths)
    if settings.given:
        for feature, source in settings.given.items():
            if not _exists(paths[feature]):
                sentencepiece_encoder.SentencePieceEncoder(source).store_to_file(paths[feature])
        return load_encoders(paths)
    sides = [("inputs",), ("targets",)] if settings.separate else [FEATURES]
    for features in sides:
        if _exists(paths[features[0]]):
            continue
        lines = _training_lines(problem, data_dir, tmp_dir, features)
        sentencepiece_encoder.train_model(lines, paths[features[0]], problem.approx_vocab_size,
                                          settings.model_type)
    return load_encoders(paths)


def _training_lines(problem, data_dir: str, tmp_dir: str,
                    features: tuple[str, ...]) -> Iterator[str]:
    """The training split's sentences of `features` (a model is trained on them)."""
    samples = problem.generate_samples(data_dir, tmp_dir, problem_lib.DatasetSplit.TRAIN)
    for sample in samples:
        for feature in features:
            yield sample[feature]


def encoded_samples(problem, encoders: dict, data_dir: str, tmp_dir: str, split: str,
                    dropout: float = 0.0, copies: int = 1) -> Iterator[dict]:
    """The samples of a split encoded with `encoders` ({"inputs", "targets"}), EOS appended.

    With `dropout` > 0 the training split is written `copies` times, each pass segmented with
    SentencePiece's sampling (`SentencePieceEncoder.encode_with_dropout`, pass k seeded with
    k), as `Text2TextProblem` does with MaxMatch-dropout for subwords.
    """
    train = split == problem_lib.DatasetSplit.TRAIN
    for copy in range(copies if dropout > 0 and train else 1):
        inputs, targets = encoders["inputs"], encoders["targets"]
        if dropout > 0 and train:
            rng = random.Random(copy)
            inputs, targets = (types.SimpleNamespace(encode=functools.partial(
                encoder.encode_with_dropout, dropout=dropout, rng=rng))
                for encoder in (inputs, targets))
        samples = problem.generate_samples(data_dir, tmp_dir, split)
        yield from text_problems.text2text_generate_encoded(samples, inputs, targets)


# ------------------------------------------------------------------------------ parents
def parent_vocabulary(vocab_from: str) -> dict[str, str]:
    """The vocabulary files of a parent, by feature.

    Args:
      vocab_from: a training run folder (its run_inputs.json names the files it was
        trained with) or a checkpoint prefix in one, or one vocab file (t2t's `.subwords` or a SentencePiece `.model`)
        used for inputs and targets.

    Returns:
      {"inputs": path, "targets": path} (the same path when shared).

    Raises:
      UserError: no such file or folder; a folder that is not a training run; a recorded
        vocabulary that is gone or changed since the parent was trained.
    """
    if os.path.isfile(vocab_from):
        return {feature: os.path.abspath(vocab_from) for feature in FEATURES}
    if os.path.isfile(vocab_from + ".index"):  # a checkpoint prefix, as --warm_start_from takes
        vocab_from = os.path.dirname(vocab_from) or "."
    record_path = os.path.join(vocab_from, "run_inputs.json")
    if not os.path.isdir(vocab_from):
        raise UserError(f"--vocab_from={vocab_from}: no such run folder or vocabulary file")
    if not os.path.isfile(record_path):
        raise UserError(f"--vocab_from={vocab_from}: not a t2t_lite training run (no "
                        "run_inputs.json); name its vocabulary file instead")
    record = run_metadata.read_json_object(record_path, "the run's vocabulary record")
    vocab = record.get("vocab", {})
    features = record.get("features") or (
        dict.fromkeys(FEATURES, next(iter(vocab))) if len(vocab) == 1 else None)
    if not features:
        raise UserError(f"--vocab_from={vocab_from}: {record_path} does not say which of its "
                        f"{len(vocab)} vocabulary files is the inputs'; name a file instead")
    files = {}
    for feature in FEATURES:
        entry = vocab[features.get(feature, features["targets"])]
        path = entry["path"]
        if not os.path.isfile(path):
            raise UserError(f"--vocab_from={vocab_from}: its {feature} vocabulary {path} is "
                            "gone; restore it, or name a copy of it with --vocab_from")
        if file_io.sha256_of(path) != entry["sha256"]:
            raise UserError(f"--vocab_from={vocab_from}: its {feature} vocabulary {path} changed "
                            "since the run was trained (sha256 differs from run_inputs.json); "
                            "restore the file the run was trained with")
        files[feature] = path
    return files


def settings_from_parent(vocab_from: str, sentencepiece: bool | None) -> tuple[VocabSettings,
                                                                              int]:
    """The VocabSettings that reuse a parent's vocabulary, and the subword size to name it.

    Args:
      vocab_from: see `parent_vocabulary`.
      sentencepiece: --vocab_type (True: sentencepiece, False: subwords, None: unset).

    Returns:
      (settings, approx_vocab_size: the size in the parent's subword file name, or its
      number of subwords; 0 for SentencePiece).

    Raises:
      UserError: --vocab_type other than the parent's kind, or parent files of two kinds.
    """
    files = parent_vocabulary(vocab_from)
    kinds = {sentencepiece_encoder.is_model_file(path) for path in files.values()}
    if len(kinds) != 1:
        raise UserError(f"--vocab_from={vocab_from}: its vocabularies are of two kinds "
                        f"({', '.join(sorted(set(files.values())))})")
    is_model = kinds.pop()
    if sentencepiece is not None and sentencepiece != is_model:
        raise UserError(f"--vocab_type={SENTENCEPIECE if sentencepiece else SUBWORDS} but "
                        f"--vocab_from={vocab_from} has a "
                        f"{SENTENCEPIECE if is_model else SUBWORDS} vocabulary "
                        f"({files['inputs']}); leave --vocab_type out")
    if is_model:
        separate = files["inputs"] != files["targets"]
        return VocabSettings(sentencepiece=True, separate=separate, given=files,
                             vocab_from=vocab_from), 0
    if files["inputs"] != files["targets"]:
        raise UserError(f"--vocab_from={vocab_from}: separate subword vocabularies "
                        f"({files['inputs']}, {files['targets']}) are not supported; t2t's "
                        "translation problems share one")
    match = _SUBWORD_SIZE.search(files["inputs"])
    size = (int(match.group(1)) if match
            else text_encoder.SubwordTextEncoder(files["inputs"]).vocab_size)
    return VocabSettings(given=files, vocab_from=vocab_from), size


def datagen_settings(vocab_type: str | None = None, sentencepiece_model: str | None = None,
                     target_sentencepiece_model: str | None = None,
                     model_type: str = "unigram", separate: bool = False,
                     vocab_from: str | None = None,
                     approx_vocab_size: int = 0) -> tuple[VocabSettings | None, int]:
    """Datagen's vocabulary flags as VocabSettings, checked together.

    Args:
      vocab_type: --vocab_type ("subwords", "sentencepiece" or None).
      sentencepiece_model, target_sentencepiece_model: existing models to use.
      model_type, separate: how models trained at datagen are made.
      vocab_from: a parent (`parent_vocabulary`).
      approx_vocab_size: --approx_vocab_size (0: unset).

    Returns:
      (the settings, or None for t2t's vocab; the approx_vocab_size the problem takes: a
      parent subword vocab's size under --vocab_from, else the flag's).

    Raises:
      UserError: flags that contradict each other, or a missing file (names the flag).
    """
    sentencepiece = None if vocab_type is None else vocab_type == SENTENCEPIECE
    given_models = {"inputs": sentencepiece_model, "targets": target_sentencepiece_model}
    if target_sentencepiece_model and not sentencepiece_model:
        raise UserError("--target_sentencepiece_model needs --sentencepiece_model (the "
                        "inputs' model)")
    if vocab_from:
        if sentencepiece_model or approx_vocab_size:
            raise UserError("--vocab_from takes the parent's vocabulary: leave out "
                            "--sentencepiece_model and --approx_vocab_size")
        settings, size = settings_from_parent(file_io.user_path(vocab_from), sentencepiece)
        return settings, size
    if sentencepiece_model and not sentencepiece:
        raise UserError("--sentencepiece_model needs --vocab_type=sentencepiece")
    if not sentencepiece:
        if model_type != "unigram" or separate:
            raise UserError("--sentencepiece_model_type / --sentencepiece_separate need "
                            "--vocab_type=sentencepiece")
        return None, approx_vocab_size
    given = {}
    for (feature, path), flag in zip(given_models.items(),
                                     ("--sentencepiece_model", "--target_sentencepiece_model")):
        if path:
            path = os.path.abspath(file_io.user_path(path))
            if not os.path.isfile(path):
                raise UserError(f"{flag}={path}: no such file")
            given[feature] = path
    if given:
        if approx_vocab_size or separate or model_type != "unigram":
            raise UserError("--sentencepiece_model gives the model: leave out "
                            "--approx_vocab_size, --sentencepiece_separate and "
                            "--sentencepiece_model_type")
        given.setdefault("targets", given["inputs"])
        separate = given["targets"] != given["inputs"]
    return VocabSettings(sentencepiece=True, model_type=model_type, separate=separate,
                         given=given), approx_vocab_size
