"""Data generation helpers (t2t's `generator_utils`): vocab building, TFRecord shards."""
from __future__ import annotations

import glob
import io
import os
import random
import struct
import tarfile
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import tensorflow as tf
from absl import logging

from t2t_lite import file_io
from t2t_lite.data_generators import corpus_io, text_encoder
from t2t_lite.data_generators.data_marker import kill_point
from t2t_lite.utils import progress

# --------------------------------------------------------------------------------------------
# TFRecord shards: t2t's file names, round-robin writing, shuffling.

UNSHUFFLED_SUFFIX = "-unshuffled"
# Suffix of a shard while it is being written; renamed to its final name only when complete.
INCOMPLETE_SUFFIX = ".incomplete"


def to_example(dictionary: dict) -> tf.train.Example:
    """Builds a tf.train.Example from a dict of non-empty lists (t2t's `to_example`).

    Args:
      dictionary: feature name -> list (or 1-D numpy array) of ints, floats, str or bytes.

    Returns:
      tf.train.Example with an int64, float or bytes list per feature.

    Raises:
      ValueError: for an empty list (t2t rejects it).
      TypeError: for a value of another type.
    """
    features = {}
    for name, values in dictionary.items():
        if isinstance(values, np.ndarray):
            values = values.tolist()
        if values is None or len(values) == 0:
            raise ValueError(f"Empty generated field: {name!r}")
        first = values[0]
        if isinstance(first, (bool, np.bool_)):
            raise TypeError(f"Feature {name!r}: bools are not a recognized type")
        if isinstance(first, (int, np.integer)):
            feature = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
        elif isinstance(first, (float, np.floating)):
            feature = tf.train.Feature(float_list=tf.train.FloatList(value=values))
        elif isinstance(first, str):
            feature = tf.train.Feature(
                bytes_list=tf.train.BytesList(value=[v.encode("utf-8") for v in values])
            )
        elif isinstance(first, bytes):
            feature = tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
        else:
            raise TypeError(
                f"Value for {name!r} is not a recognized type: {first!r} ({type(first).__name__})"
            )
        features[name] = feature
    return tf.train.Example(features=tf.train.Features(feature=features))


def sharded_name(base_name: str, shard: int, total_shards: int) -> str:
    """`<base>-%05d-of-%05d`, t2t's shard file name."""
    return f"{base_name}-{shard:05d}-of-{total_shards:05d}"


def shard_filepath(fname: str, num_shards: int) -> list[str]:
    """Names of all `num_shards` shards of `fname`."""
    return [sharded_name(fname, shard, num_shards) for shard in range(num_shards)]


def outputs_exist(filenames: list[str]) -> str | None:
    """The first file whose final (shuffled) name already exists, else None."""
    for name in filenames:
        name = name.replace(UNSHUFFLED_SUFFIX, "")
        if tf.io.gfile.exists(name):
            return name
    return None


def remove_files(filenames) -> None:
    """Deletes each existing file of `filenames` (and its `.incomplete` partner)."""
    for name in filenames:
        for path in (name, name + INCOMPLETE_SUFFIX):
            if tf.io.gfile.exists(path):
                tf.io.gfile.remove(path)


def generate_files(
    generator, output_filenames: list[str], max_cases: int | None = None, cycle_every_n: int = 1
) -> int:
    """Writes the examples of `generator` round-robin into TFRecord shards (t2t's).

    Example k goes to shard (k // cycle_every_n) mod S. Shards are written as
    `<name>.incomplete` and renamed when the generator is exhausted; if anything fails, the
    partial files are deleted and the error re-raised. Skips everything when the final
    (shuffled) outputs already exist.

    Args:
      generator: yields dicts of feature lists (see `to_example`); None entries are skipped.
      output_filenames: the S shard paths.
      max_cases: stop after this many examples (None or 0: no limit).
      cycle_every_n: examples written to a shard before moving to the next one.

    Returns:
      Number of examples written (0 when skipped).
    """
    existing = outputs_exist(output_filenames)
    if existing:
        logging.info("Skipping generator because outputs files exist at %s", existing)
        return 0
    tmp_filenames = [name + INCOMPLETE_SUFFIX for name in output_filenames]
    num_shards = len(tmp_filenames)
    counter, shard = 0, 0
    writers = [tf.io.TFRecordWriter(name) for name in tmp_filenames]
    try:
        for case in progress.track(generator, max_cases or None, "Writing "
                                   + os.path.basename(output_filenames[0]), "examples"):
            if case is None:
                continue
            if max_cases and counter >= max_cases:
                break
            if counter and counter % 100000 == 0:
                logging.info("Generating case %d.", counter)
            # deterministic: the features in one order (upb's map order varies per process).
            writers[shard].write(to_example(case).SerializeToString(deterministic=True))
            counter += 1
            if counter == 10:
                kill_point("generate")
            if counter % cycle_every_n == 0:
                shard = (shard + 1) % num_shards
    except BaseException:
        for writer in writers:
            writer.close()
        remove_files(output_filenames)
        raise
    for writer in writers:
        writer.close()
    for tmp_name, final_name in zip(tmp_filenames, output_filenames):
        tf.io.gfile.rename(tmp_name, final_name, overwrite=True)
        kill_point("rename")
    logging.info("Generated %d examples into %d file(s) %s...", counter, num_shards,
                 output_filenames[0] if output_filenames else "")
    return counter


def read_records(filename: str) -> list[bytes]:
    """All serialized records of one (uncompressed) TFRecord file, in order.

    Reads the TFRecord framing directly (8-byte length, 4-byte length CRC, data, 4-byte data
    CRC); CRCs are not verified. Building a tf.data pipeline per file costs ~50 ms, which
    dominated shuffling t2t's 100 small shards.

    Args:
      filename: path of the file (any tf.io.gfile path).

    Returns:
      The records as bytes.

    Raises:
      ValueError: the file ends inside a record (names the file and byte offset).
    """
    with tf.io.gfile.GFile(filename, "rb") as f:
        data = f.read()
    records = []
    pos = 0
    while pos < len(data):
        if pos + 12 > len(data):
            raise ValueError(f"{filename}: truncated TFRecord header at byte {pos}")
        (length,) = struct.unpack_from("<Q", data, pos)
        start, end = pos + 12, pos + 12 + length
        if end + 4 > len(data):
            raise ValueError(f"{filename}: truncated TFRecord of {length} bytes at byte {pos}")
        records.append(data[start:end])
        pos = end + 4
    return records


def write_records(records: list[bytes], out_filename: str) -> None:
    """Writes `records` to a TFRecord file (via `.incomplete`, renamed when complete)."""
    tmp_name = out_filename + INCOMPLETE_SUFFIX
    try:
        with tf.io.TFRecordWriter(tmp_name) as writer:
            for record in records:
                writer.write(record)
    except BaseException:
        remove_files([out_filename])
        raise
    tf.io.gfile.rename(tmp_name, out_filename, overwrite=True)


def _shuffle_single(fname: str, extra_fn=None) -> None:
    records = read_records(fname)
    random.shuffle(records)
    if extra_fn is not None:
        records = extra_fn(records)
    write_records(records, fname.replace(UNSHUFFLED_SUFFIX, ""))
    tf.io.gfile.remove(fname)


def shuffle_dataset(filenames: list[str], extra_fn=None) -> None:
    """Shuffles each `-unshuffled` file in memory and writes it without the infix (t2t's).

    Uses Python's global `random` (t2t-datagen seeds it with --random_seed), file by file in
    the given order, so a seeded run reproduces t2t's record order. Deletes the unshuffled
    files. Skips each file whose shuffled output already exists (a split kept from an
    earlier run, or a file shuffled just before a crash: its output is renamed into place
    whole, so an unshuffled file left beside it is removed).

    Args:
      filenames: the unshuffled shard paths.
      extra_fn: optional function applied to each shuffled list of records.
    """
    todo = []
    for filename in filenames:
        if not tf.io.gfile.exists(filename.replace(UNSHUFFLED_SUFFIX, "")):
            todo.append(filename)
        elif tf.io.gfile.exists(filename):
            tf.io.gfile.remove(filename)
    if not todo:
        logging.info("Skipping shuffle because output files exist (%s)",
                     filenames[0].replace(UNSHUFFLED_SUFFIX, "") if filenames else "")
        return
    logging.info("Shuffling data...")
    for filename in todo:
        _shuffle_single(filename, extra_fn=extra_fn)
        kill_point("shuffle")
    logging.info("Data shuffled.")


class SequencePacker:
    """One packed sequence under construction (t2t's `SequencePacker`).

    Args:
      first_sequence: ids of the first example.
      spacing: zeros inserted between two examples.
    """

    def __init__(self, first_sequence: list[int], spacing: int = 2):
        self._spacing = spacing
        self._ids = list(first_sequence)
        self._segmentation = [1] * len(first_sequence)
        self._position = list(range(len(first_sequence)))

    def add(self, ids: list[int]) -> None:
        """Appends one more example."""
        padding = [0] * self._spacing
        self._ids.extend(padding + list(ids))
        next_segment = self._segmentation[-1] + 1 if self._segmentation else 1
        self._segmentation.extend(padding + [next_segment] * len(ids))
        self._position.extend(padding + list(range(len(ids))))

    def can_fit(self, ids: list[int], packed_length: int) -> bool:
        """Whether `ids` (after the spacing) still fits in `packed_length`."""
        return len(self._ids) + self._spacing + len(ids) <= packed_length

    def to_dict(self) -> dict[str, list[int]]:
        """{"inputs": [0], "targets", "targets_segmentation", "targets_position"}."""
        return {"inputs": [0], "targets": self._ids,
                "targets_segmentation": self._segmentation,
                "targets_position": self._position}


class SequencePairPacker:
    """One packed (inputs, targets) pair under construction (t2t's `SequencePairPacker`)."""

    def __init__(self, first_sequence_pair: tuple[list[int], list[int]], spacing: int = 2):
        self._inputs = SequencePacker(first_sequence_pair[0], spacing)
        self._targets = SequencePacker(first_sequence_pair[1], spacing)

    def add(self, pair: tuple[list[int], list[int]]) -> None:
        """Appends one more example pair."""
        self._inputs.add(pair[0])
        self._targets.add(pair[1])

    def can_fit(self, pair: tuple[list[int], list[int]], packed_length: int) -> bool:
        """Whether both sides of `pair` still fit."""
        return (self._inputs.can_fit(pair[0], packed_length)
                and self._targets.can_fit(pair[1], packed_length))

    def to_dict(self) -> dict[str, list[int]]:
        """The six features of a packed pair."""
        result = self._targets.to_dict()
        inputs = self._inputs.to_dict()
        result["inputs"] = inputs["targets"]
        result["inputs_segmentation"] = inputs["targets_segmentation"]
        result["inputs_position"] = inputs["targets_position"]
        return result


def pack_examples(examples, has_inputs: bool, packed_length: int = 256, spacing: int = 2,
                  queue_size: int = 10, chop_long_sequences: bool = False):
    """Packs examples into longer ones (t2t's `pack_examples`, same algorithm and output).

    Each example goes into the first of at most `queue_size` open packs where it fits
    (`spacing` zeros between examples, at most `packed_length` ids per side); when none has
    room and the queue is full, the oldest pack is emitted. Features of a packed example:
    "inputs", "targets" (concatenations) and, aligned with them, "*_segmentation" (1-based
    example number, 0 for spacing) and "*_position" (position within the example). An
    example longer than `packed_length` becomes a pack of its own (or, targets only with
    `chop_long_sequences`, is cut into `packed_length` pieces).

    Args:
      examples: iterable of {"inputs": [ids], "targets": [ids]} (targets only unless
        has_inputs).
      has_inputs: pack (inputs, targets) pairs, else targets alone.
      packed_length: maximum length of a packed sequence.
      spacing: zeros between examples.
      queue_size: open packs.
      chop_long_sequences: cut long target-only sequences.

    Yields:
      Packed examples (dicts of int lists).
    """
    packer = SequencePairPacker if has_inputs else SequencePacker
    combined = []
    for example in examples:
        x = ((list(example["inputs"]), list(example["targets"])) if has_inputs
             else list(example["targets"]))
        if chop_long_sequences and len(x) > packed_length:
            if has_inputs:
                raise ValueError("chop_long_sequences packs targets-only examples")
            num_fragments = len(x) // packed_length
            for i in range(num_fragments):
                yield packer(x[packed_length * i:packed_length * (i + 1)], spacing).to_dict()
            x = x[packed_length * num_fragments:]
        for pack in combined:
            if pack.can_fit(x, packed_length):
                pack.add(x)
                break
        else:
            if len(combined) == queue_size:
                yield combined[0].to_dict()
                combined = combined[1:]
            combined.append(packer(x, spacing))
    for pack in combined:
        yield pack.to_dict()


def generate_dataset_and_shuffle(
    train_gen, train_paths: list[str], dev_gen, dev_paths: list[str], shuffle: bool = True
) -> None:
    """Writes train and dev shards from two generators, then optionally shuffles them."""
    generate_files(train_gen, train_paths)
    generate_files(dev_gen, dev_paths)
    if shuffle:
        shuffle_dataset(train_paths + dev_paths)


# --------------------------------------------------------------------------------------------
# Vocabulary building: t2t's `get_or_generate_vocab*` helpers.


def get_or_generate_vocab_inner(
    data_dir: str | None,
    vocab_filename: str | None,
    vocab_size: int,
    generator: Iterable[str],
    max_subtoken_length: int | None = None,
    reserved_tokens: Sequence[str] | None = None,
) -> text_encoder.SubwordTextEncoder:
    """Loads `<data_dir>/<vocab_filename>` if it exists, else builds and stores it (t2t's).

    Args:
      data_dir: directory of the vocab file; None: build and do not store.
      vocab_filename: file name inside `data_dir`; None: build and do not store.
      vocab_size: approximate target size (t2t's bisection lands within 1% when it can).
      generator: yields the text lines to count (only consumed when building).
      max_subtoken_length: see `SubwordTextEncoder.build_from_generator`
        (Text2TextProblem passes 200).
      reserved_tokens: first tokens of the vocab; `text_encoder.RESERVED_TOKENS` must be a
        prefix (default: exactly those).

    Returns:
      the SubwordTextEncoder.
    """
    vocab_filepath = None
    if data_dir and vocab_filename:
        vocab_filepath = os.path.join(data_dir, vocab_filename)
        if os.path.exists(vocab_filepath):
            logging.info("Found vocab file: %s", vocab_filepath)
            return text_encoder.SubwordTextEncoder(vocab_filepath)
    logging.info("Generating vocab file: %s", vocab_filepath)
    vocab = text_encoder.SubwordTextEncoder.build_from_generator(
        generator,
        vocab_size,
        max_subtoken_length=max_subtoken_length,
        reserved_tokens=reserved_tokens,
    )
    if vocab_filepath:
        os.makedirs(data_dir, exist_ok=True)
        kill_point("vocab")
        # Written under a temporary name and renamed, so a crash never leaves half a vocab.
        vocab.store_to_file(vocab_filepath)
    return vocab


def get_or_generate_vocab(
    data_dir: str,
    tmp_dir: str,
    vocab_filename: str,
    vocab_size: int,
    sources: Sequence,
    file_byte_budget: float = 1e6,
    max_subtoken_length: int | None = None,
) -> text_encoder.SubwordTextEncoder:
    """`get_or_generate_vocab_inner` over `generate_lines_for_vocab(tmp_dir, sources)`.

    Args:
      data_dir: directory of the vocab file.
      tmp_dir: directory of the raw corpus files.
      vocab_filename: vocab file name inside `data_dir`.
      vocab_size: approximate target size.
      sources: see `generate_lines_for_vocab`.
      file_byte_budget: characters sampled per file.
      max_subtoken_length: see `get_or_generate_vocab_inner`.

    Returns:
      the SubwordTextEncoder.
    """
    lines = generate_lines_for_vocab(tmp_dir, sources, file_byte_budget)
    return get_or_generate_vocab_inner(
        data_dir, vocab_filename, vocab_size, lines, max_subtoken_length
    )


def _source_files(tmp_dir: str, source) -> list[str]:
    """Local paths of one source: a path, or t2t's `[url, [file, ...]]` (archive in tmp_dir)."""
    if isinstance(source, (str, os.PathLike)):
        return [os.path.join(tmp_dir, source)]
    url, lang_files = source[0], source[1]
    archive = os.path.join(tmp_dir, os.path.basename(url))
    paths = []
    for lang_file in lang_files:
        filepath = os.path.join(tmp_dir, lang_file)
        if not os.path.exists(filepath):
            if not os.path.exists(archive):
                raise FileNotFoundError(
                    f"{filepath} is missing and so is the archive {archive} that holds it; "
                    f"nothing is downloaded here: fetch {url} into {tmp_dir}"
                )
            logging.info("Extracting %s into %s", archive, tmp_dir)
            with tarfile.open(archive, "r:gz" if archive.endswith("tgz") else "r") as tar:
                if hasattr(tarfile, "data_filter"):
                    tar.extractall(tmp_dir, filter="data")
                else:
                    tar.extractall(tmp_dir)
        if lang_file.endswith(".gz") and not os.path.exists(filepath):
            # t2t gunzipped it next to itself: read that copy (the .gz is read compressed).
            filepath = filepath.removesuffix(".gz")
        paths.append(filepath)
    return paths


def generate_lines_for_vocab(
    tmp_dir: str, sources: Sequence, file_byte_budget: float = 1e6
) -> Iterator[str]:
    """t2t's vocab sample: about `file_byte_budget` characters of stripped lines per file.

    For each file, `skip = int(file size in bytes / file_byte_budget / 2)`: skip `skip` lines,
    yield the next one (stripped), and repeat until the yielded lines hold `file_byte_budget`
    characters, so the sample spreads over about the first half of a large file (a small file
    is read whole).

    Args:
      tmp_dir: directory of the corpus files.
      sources: a list whose items are file paths (relative to `tmp_dir`, or absolute) or t2t's
        `[url, [lang_file, ...]]` pairs, whose files are taken from `tmp_dir` or extracted from
        the archive `basename(url)` already in `tmp_dir`. Gzip and xz files are read
        decompressed (`corpus_io`). Nothing is downloaded.
      file_byte_budget: characters to yield per file.

    Yields:
      stripped lines (empty ones included, as in t2t).

    Raises:
      FileNotFoundError: a file (and its archive) is missing.
      ValueError: a file is not UTF-8 (names the file and line).
    """
    logging.info("Generating vocab from: %s", sources)
    for source in sources:
        for filepath in _source_files(tmp_dir, source):
            logging.info("Reading file: %s", filepath)
            budget = file_byte_budget
            counter = 0
            # The decompressed size of a gzip/xz file: the same sample as from the plain one.
            countermax = int(corpus_io.text_size(filepath) / budget / 2)
            # newline="\n": lines end at "\n" only, as tf.gfile reads them.
            with io.TextIOWrapper(corpus_io.open_binary(filepath), encoding=file_io.TEXT_ENCODING,
                                  newline="\n") as source_file:
                lineno = 0
                try:
                    for line in source_file:
                        lineno += 1
                        if counter < countermax:
                            counter += 1
                            continue
                        if budget <= 0:
                            break
                        line = line.strip()
                        budget -= len(line)
                        counter = 0
                        yield line
                except UnicodeDecodeError as e:
                    raise ValueError(
                        f"{filepath}: not valid UTF-8 after line {lineno} ({e.reason})"
                    ) from e


def get_or_generate_tabbed_vocab(
    data_dir: str,
    tmp_dir: str,
    source_filename: str,
    index: int,
    vocab_filename: str,
    vocab_size: int,
) -> text_encoder.SubwordTextEncoder:
    """Vocab from column `index` (0 or 1) of the tab-separated lines of a file (t2t's).

    Args:
      data_dir: directory of the vocab file.
      tmp_dir: directory of `source_filename`.
      source_filename: file of `source<TAB>target` lines; lines without a tab are skipped.
      index: 0 for the source column, 1 for the target column.
      vocab_filename: vocab file name inside `data_dir`.
      vocab_size: approximate target size.

    Returns:
      the SubwordTextEncoder.
    """

    def generate() -> Iterator[str]:
        filepath = os.path.join(tmp_dir, source_filename)
        logging.info("Generating vocab from %s", filepath)
        with open(filepath, encoding=file_io.TEXT_ENCODING, newline="\n") as source_file:
            for line in source_file:
                line = line.strip()
                if line and "\t" in line:
                    yield line.split("\t", 1)[index].strip()

    return get_or_generate_vocab_inner(data_dir, vocab_filename, vocab_size, generate())


def get_or_generate_txt_vocab(
    data_dir: str, vocab_filename: str, vocab_size: int, filepatterns: str | Sequence[str]
) -> text_encoder.SubwordTextEncoder:
    """Vocab from every stripped line of the files matching `filepatterns` (t2t's).

    Args:
      data_dir: directory of the vocab file.
      vocab_filename: vocab file name inside `data_dir`.
      vocab_size: approximate target size.
      filepatterns: one glob pattern or a list of them.

    Returns:
      the SubwordTextEncoder.
    """
    if isinstance(filepatterns, str):
        filepatterns = [filepatterns]

    def generate() -> Iterator[str]:
        logging.info("Generating vocab from %s", filepatterns)
        for filepattern in filepatterns:
            for filename in sorted(glob.glob(filepattern)):
                with open(filename, encoding=file_io.TEXT_ENCODING, newline="\n") as source_file:
                    for line in source_file:
                        yield line.strip()

    return get_or_generate_vocab_inner(data_dir, vocab_filename, vocab_size, generate())
