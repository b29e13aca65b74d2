"""`run.py --mode=datagen`: t2t-datagen for registered problems.

    python run.py --mode=datagen --problem=translate_ende_wmt32k --data_dir=~/t2t_data \
        --tmp_dir=~/t2t_datagen
    python run.py --mode=datagen --problem=translate_files --data_dir=... \
        --train_src=train.en --train_tgt=train.de --dev_src=dev.en --dev_tgt=dev.de

As t2t-datagen: `--problem` takes one name, a comma-separated list, or a prefix ending with
`*`; `--exclude_problems` drops names containing any of its comma-separated parts;
`--only_list` prints the selection and stops; Python's, NumPy's and TensorFlow's generators
are seeded with `--random_seed` (t2t's 429459 when unset) before each problem, so a run is
reproducible. `--max_cases` caps the examples written per split.
"""
from __future__ import annotations

import contextlib
import os
import random
from typing import Any

import numpy as np

from t2t_lite import registry
from t2t_lite.utils import validation

DEFAULT_RANDOM_SEED = 429459
DEFAULT_DATA_DIR = "/tmp/t2t_data"


def select_problems(problem_flag: str, exclude: str = "") -> list[str]:
    """Problem names selected by t2t-datagen's --problem / --exclude_problems rules.

    Args:
      problem_flag: "name", "a,b,c" or "prefix*".
      exclude: comma-separated substrings; names containing any are dropped.

    Returns:
      Sorted registered names.

    Raises:
      ValueError: nothing selected (lists every registered problem).
    """
    names = registry.list_problems()
    for part in exclude.split(","):
        if part:
            names = [n for n in names if part not in n]
    if problem_flag.endswith("*"):
        selected = [n for n in names if n.startswith(problem_flag[:-1])]
    elif "," in problem_flag:
        wanted = problem_flag.split(",")
        selected = [n for n in names if n in wanted]
    else:
        base = problem_flag.removesuffix("_rev")
        selected = [n for n in names if n in (problem_flag, base)][:1]
    if not selected:
        known = "\n  * ".join(registry.list_problems())
        raise ValueError(
            f"--problem={problem_flag!r} selects no registered problem. Known problems:\n"
            f"  * {known}"
        )
    return selected


def set_random_seed(seed: int) -> None:
    """Seeds Python's, NumPy's and TensorFlow's global generators (t2t-datagen's)."""
    import tensorflow as tf

    random.seed(seed)
    np.random.seed(seed)
    tf.random.set_seed(seed)


def configure_problem(
    name: str,
    approx_vocab_size: int = 0,
    source_files: dict[str, str | None] | None = None,
    tfds_data_dir: str | None = None,
    wsj_source: tuple[str | None, str | None, str | None] = (None, None, None),
    subword_dropout: float = 0.0,
    subword_dropout_copies: int = 1,
    vocab_settings=None,
    filters=None,
    num_workers: int | None = None,
):
    """The problem instance for `name`, with datagen's source and vocab settings applied.

    Args:
      name: registered problem name.
      approx_vocab_size: subword vocab size instead of the problem's (0: the problem's).
      source_files: {"train_src", "train_tgt", "dev_src", "dev_tgt"} -> path or None: the
        parallel text files of a translation problem.
      tfds_data_dir: where TFDS keeps its data, for problems that fall back to TFDS.
      wsj_source: (treebank folder, train sections, dev sections) of the WSJ problems.
      subword_dropout, subword_dropout_copies: write the training split that many times,
        each segmented with MaxMatch-dropout at that rate (0: t2t's one deterministic pass;
        `Text2TextProblem.set_subword_dropout`).
      vocab_settings: a `vocab_sources.VocabSettings` (SentencePiece, a parent's vocab) for
        translation problems; None: t2t's vocab.
      filters: `corpus_filters.FilterSettings` of the training pairs (None or all off:
        t2t's data); translation problems only.
      num_workers: processes encoding the shards (`parallel_datagen`; None: one, and no
        datagen_report.json unless filters are on); above 1 for translation problems only.

    Returns:
      A Problem instance.
    """
    from t2t_lite.data_generators import text_problems

    problem = registry.problem(name)
    if approx_vocab_size:
        if not isinstance(problem, text_problems.Text2TextProblem):
            raise ValueError(f"--approx_vocab_size does not apply to {name} (it has no vocab)")
        problem = type(problem)(approx_vocab_size=approx_vocab_size)
    if vocab_settings is not None:
        if not hasattr(problem, "set_vocab_settings"):
            raise ValueError(f"--vocab_type / --vocab_from do not apply to {name}; they choose "
                             "the vocabulary of translation problems")
        problem.set_vocab_settings(vocab_settings)
    if subword_dropout or subword_dropout_copies != 1:
        if not isinstance(problem, text_problems.Text2TextProblem):
            raise ValueError(f"--subword_dropout does not apply to {name} (it has no vocab)")
        if subword_dropout_copies != 1 and not subword_dropout:
            raise ValueError(
                f"--subword_dropout_copies={subword_dropout_copies} needs --subword_dropout > 0 "
                "(identical copies of the corpus would only repeat it)")
        problem.set_subword_dropout(subword_dropout, subword_dropout_copies)
    source_files = source_files or {}
    if any(source_files.values()):
        if not hasattr(problem, "set_source_files"):
            raise ValueError(
                f"--train_src/--train_tgt/--dev_src/--dev_tgt do not apply to {name}; they "
                "name the parallel text files of translation problems"
            )
        problem.set_source_files(**source_files)
    _set_big_corpus_options(problem, name, filters, num_workers)
    if hasattr(problem, "tfds_data_dir"):
        problem.tfds_data_dir = tfds_data_dir
    if hasattr(problem, "set_wsj_source"):
        problem.set_wsj_source(*wsj_source)
    return problem


def _set_big_corpus_options(problem, name: str, filters, num_workers: int | None) -> None:
    """Applies the cleaning filters and the number of encoding workers (see
    `configure_problem`); marks the problem for datagen_report.json when either is asked."""
    from t2t_lite.data_generators import text_problems, translate

    filters = filters if filters is not None and filters.active else None
    is_translation = isinstance(problem, translate.TranslateProblem)
    if filters is not None and not is_translation:
        raise ValueError(f"--filter_* flags apply to translation problems; {name} is not one")
    if num_workers is not None:
        if num_workers < 1:
            raise ValueError(f"--num_datagen_workers={num_workers}: must be at least 1")
        if num_workers > 1 and not is_translation:
            raise ValueError(f"--num_datagen_workers={num_workers}: {name} is not a "
                             "translation problem (its samples are not files that workers "
                             "can read again); use 1")
        if not isinstance(problem, text_problems.Text2TextProblem):
            raise ValueError(f"--num_datagen_workers does not apply to {name} (no text "
                             "to encode)")
        if num_workers > 1 and problem.subword_dropout[0] > 0:
            raise ValueError(f"--num_datagen_workers={num_workers}: the training passes of "
                             "--subword_dropout are encoded by one process; use 1")
        problem.datagen_workers = num_workers
    if filters is not None:
        problem.corpus_filters = filters
    problem.datagen_report_wanted = filters is not None or num_workers is not None


def summarize(data_dir: str, name: str) -> str:
    files = sorted(f for f in os.listdir(data_dir) if f.startswith(name + "-"))
    size = sum(os.path.getsize(os.path.join(data_dir, f)) for f in files)
    return f"{len(files)} files, {size / 1e6:.1f} MB"


# Pairs of input labels whose files must have the same number of lines.
PARALLEL_INPUTS = (("--train_src", "--train_tgt"), ("--dev_src", "--dev_tgt"))


def made_from(problem, tmp_dir: str, settings: dict[str, Any]) -> dict[str, Any]:
    """What the data of `problem` is made from, for its completion markers.

    Reads every raw input file once (sha256); refuses parallel files of different lengths
    before any work.

    Args:
      problem: a configured Problem instance.
      tmp_dir: raw data directory.
      settings: {flag: value} of the datagen settings that change the records
        (`datagen_settings`).

    Returns:
      {"problem": name, "settings": settings, "inputs": {label: `data_marker.fingerprint`}}.

    Raises:
      CorpusError: two parallel files differ in length (names both files and line counts).
    """
    from t2t_lite.data_generators import data_marker
    from t2t_lite.data_generators.text_problems import CorpusError

    inputs = {label: data_marker.fingerprint(paths)
              for label, paths in problem.datagen_input_files(tmp_dir).items() if paths}
    for source, target in PARALLEL_INPUTS:
        if source in inputs and target in inputs:
            a, b = inputs[source], inputs[target]
            if a["lines"] != b["lines"]:
                raise CorpusError(
                    f"Parallel files differ in length: {source}={a['path']} has {a['lines']} "
                    f"lines but {target}={b['path']} has {b['lines']}. Line i of one must "
                    "translate line i of the other.")
    return {"problem": problem.name, "settings": settings, "inputs": inputs}


def datagen_settings(problem, max_cases: int | None, random_seed: int) -> dict[str, Any]:
    """The datagen settings that change a problem's records, by flag name.

    Args:
      problem: a configured Problem instance (its vocab size and subword dropout are read).
      max_cases: --max_cases (None: all).
      random_seed: the seed datagen set.

    Returns:
      {"--max_cases": ..., "--random_seed": ...} and, for text problems, the vocab size and
      subword dropout in effect.
    """
    from t2t_lite.data_generators import text_problems

    settings: dict[str, Any] = {"--max_cases": max_cases, "--random_seed": random_seed}
    if isinstance(problem, text_problems.Text2TextProblem):
        if problem.vocab_type in (text_problems.VocabType.SUBWORD,
                                  text_problems.VocabType.SENTENCEPIECE):
            settings["--approx_vocab_size"] = problem.approx_vocab_size
        settings.update(problem.vocab_settings.flags() if hasattr(problem, "vocab_settings")
                        else {})
        settings["--subword_dropout"], settings["--subword_dropout_copies"] = (
            problem.subword_dropout)
    if getattr(problem, "corpus_filters", None) is not None:
        settings.update(problem.corpus_filters.as_flags())
    return settings


def _own_vocabs(problem) -> list[str]:
    """The names of the vocab files that the problem's datagen writes, if it owns them (a
    problem using another problem's vocab does not)."""
    from t2t_lite.data_generators import text_problems

    if (not isinstance(problem, text_problems.Text2TextProblem)
            or problem.vocab_type == text_problems.VocabType.CHARACTER
            or problem.use_vocab_from_other_problem is not None):
        return []
    return problem.vocab_filenames


def _check_made_from(problem, data_dir: str, tmp_dir: str, markers: dict,
                     new: dict[str, Any] | None, overwrite: bool) -> bool:
    """Refuses complete splits made from other inputs than `new`, or with `overwrite`
    removes the whole data set (every split, its vocab, the files derived from the inputs
    in tmp_dir) to be made again.

    Returns:
      Whether the data set was removed.

    Raises:
      UserError: the complete splits were made from other inputs (names each change).
    """
    from absl import logging

    from t2t_lite.data_generators import data_marker
    from t2t_lite.errors import UserError

    base = problem.dataset_filename()
    if overwrite:
        vocabs = {v for m in markers.values() for v in m.get("vocab_files") or
                  [m.get("vocab_file")]} | set(_own_vocabs(problem))
        removed = [f for tag in data_marker.SPLIT_TAGS
                   for f in data_marker.remove_split(data_dir, base, tag)]
        paths = [os.path.join(data_dir, name) for name in sorted(v for v in vocabs if v)]
        for path in paths + problem.datagen_derived_files(tmp_dir):
            if os.path.exists(path):
                os.remove(path)
                removed.append(path)
        if removed:
            logging.warning("%s: --overwrite_data: removed %d file(s) of the data in %s (and "
                            "derived files in %s) to make it again", problem.name,
                            len(removed), data_dir, tmp_dir)
        return True
    if new is None or not markers:
        return False
    recorded = [m["made_from"] for m in markers.values() if m.get("made_from")]
    if not recorded:
        logging.warning("%s: the completion markers in %s (an older t2t_lite's) do not record "
                        "what the data was made from; keeping it (--overwrite_data makes it "
                        "again from the current inputs)", problem.name, data_dir)
        return False
    changes = data_marker.made_from_changes(recorded[0], new)
    if changes:
        raise UserError(
            f"--data_dir={data_dir} holds {problem.name} data made from other inputs: "
            f"{'; '.join(changes)}; regenerate it with --overwrite_data, or choose another "
            "--data_dir")
    return False


def _refuse_inputs_among_outputs(problem, data_dir: str, made_from: dict[str, Any]) -> None:
    """Refuses an input file that datagen would remove or rewrite: a file of data_dir named
    like the problem's shards (`<dataset_filename>-train*`) or its vocab.

    Raises:
      UserError: naming the input's flag and path.
    """
    from t2t_lite.data_generators import data_marker
    from t2t_lite.errors import UserError

    base = problem.dataset_filename()
    outputs = [f for tag in data_marker.SPLIT_TAGS
               for f in data_marker.all_split_files(data_dir, base, tag)]
    outputs += [os.path.join(data_dir, vocab) for vocab in _own_vocabs(problem)]
    for label, fingerprint in made_from["inputs"].items():
        for output in outputs:
            if validation.same_file(fingerprint["path"], output):
                raise UserError(
                    f"{label}={fingerprint['path']} is also one of datagen's outputs in "
                    f"--data_dir={data_dir} (its {base}-<split>* files and vocab are removed "
                    "and written again); move the input out of --data_dir")


def generate_problem_data(problem, data_dir: str, tmp_dir: str, max_cases: int | None = None,
                          made_from: dict[str, Any] | None = None,
                          overwrite: bool = False) -> dict[str, dict] | None:
    """Generates a problem's data so that a rerun after a crash at any moment completes it.

    A split is kept only when its completion marker matches its files
    (`data_marker`) and records the same inputs as `made_from`; a split without a valid
    marker is removed (finished, unshuffled and partial shards) and written again by
    `problem.generate_data`, which keeps t2t's order of work and random draws; complete
    splits made from other inputs are refused (or, with `overwrite`, removed with their
    vocab and made again). Once it returns, a marker is written for each split, last.

    Args:
      problem: a Problem instance (its `generate_data` takes data_dir, tmp_dir, max_cases).
      data_dir: the data directory (created if needed).
      tmp_dir: raw data directory.
      max_cases: at most this many examples per split (None: all).
      made_from: what the data is made from (`made_from`), recorded in the markers and
        compared with theirs; None: not recorded, not compared.
      overwrite: remove the problem's data (every split, its vocab, the files derived from
        the inputs in tmp_dir) and make it again.

    Returns:
      {split tag: marker content} of the splits written, or None when every split was already
      complete (nothing done).

    Raises:
      UserError: the data in data_dir was made from other inputs (and not `overwrite`).
    """
    from absl import logging

    from t2t_lite.data_generators import data_marker, generator_utils

    base = problem.dataset_filename()
    if made_from:
        _refuse_inputs_among_outputs(problem, data_dir, made_from)
    markers = {}
    for tag in data_marker.SPLIT_TAGS:
        marker = data_marker.read_marker(data_dir, base, tag)
        if marker is not None and not data_marker.marker_mismatches(data_dir, marker):
            markers[tag] = marker
    if _check_made_from(problem, data_dir, tmp_dir, markers, made_from, overwrite):
        markers = {}
    complete = {tag: tag in markers for tag in data_marker.SPLIT_TAGS}
    leftovers = {tag: data_marker.all_split_files(data_dir, base, tag)
                 for tag in data_marker.SPLIT_TAGS if not complete[tag]}
    if complete["train"] and not any(leftovers.values()):
        logging.info("%s: every split is complete (datagen markers in %s); nothing to do",
                     problem.name, data_dir)
        return None
    for tag, files in leftovers.items():
        if files:
            logging.warning("%s: the %s split has no valid completion marker (an interrupted "
                            "datagen?): removing its %d file(s) and writing it again",
                            problem.name, tag, len(files))
            data_marker.remove_split(data_dir, base, tag)
    os.makedirs(data_dir, exist_ok=True)
    markers = {}
    try:
        problem.generate_data(data_dir, tmp_dir, max_cases=max_cases)
        for tag in data_marker.SPLIT_TAGS:
            if complete[tag] or not data_marker.final_shards(data_dir, base, tag):
                continue
            vocabs = [v for v in _own_vocabs(problem) if os.path.exists(os.path.join(data_dir, v))]
            markers[tag] = data_marker.write_marker(data_dir, base, tag, max_cases=max_cases,
                                                    made_from=made_from, vocab_files=vocabs)
            generator_utils.kill_point("marker")
    except BaseException as e:
        stopped = _stopped_cleanly(problem, data_dir, {**complete, **dict.fromkeys(markers, True)},
                                   e)
        if stopped is None:
            raise
        raise stopped from e
    if "train" not in markers and not complete["train"]:
        raise ValueError(f"datagen for {problem.name} wrote no train shard in {data_dir}")
    return markers


def _stopped_cleanly(problem, data_dir: str, complete: dict[str, bool],
                     error: BaseException) -> Exception | None:
    """After Ctrl-C or a full (or unwritable) disk in the middle of datagen: removes every
    file of the splits not marked complete (nothing half-written stays) and returns the one
    line to stop with, saying what was kept; None for any other error.

    Args:
      problem: the Problem being generated.
      data_dir: its data directory.
      complete: {split tag: whether its marker is written}.
      error: what stopped datagen.

    Returns:
      `errors.RunStopped` ("stopped:", exit 130; 143 for SIGTERM) for KeyboardInterrupt
      (`errors.SigtermReceived` included), `UserError` for a
      storage problem (`errors.storage_problem`), else None.
    """

    from t2t_lite.data_generators import data_marker
    from t2t_lite.errors import (
        RunStopped,
        UserError,
        describe_storage_problem,
        interrupt_signal,
        storage_problem,
    )

    problem_ = None if isinstance(error, KeyboardInterrupt) else storage_problem(error)
    if problem_ is None and not isinstance(error, KeyboardInterrupt):
        return None
    base = problem.dataset_filename()
    removed = [tag for tag in data_marker.SPLIT_TAGS if not complete[tag]
               and data_marker.remove_split(data_dir, base, tag)]
    kept = [tag for tag in data_marker.SPLIT_TAGS if complete[tag]]
    what = (f"{problem.name} in --data_dir={data_dir}: "
            + (f"the complete {' and '.join(kept)} split(s) kept" if kept else
               "no split complete")
            + (f", the partial {' and '.join(removed)} split(s) removed" if removed else ""))
    if problem_ is None:
        name, code = interrupt_signal(error)
        return RunStopped(f"{name} received: datagen stopped; {what}; run the same command to "
                          "finish", code, label="stopped")
    return UserError(describe_storage_problem(
        problem_, f"{what}; make room (or choose a writable --data_dir) and run the same "
                  "command to finish"))


def generate_locked(problem, data_dir: str, tmp_dir: str,
                    random_seed: int = DEFAULT_RANDOM_SEED, max_cases: int | None = None,
                    overwrite: bool = False) -> dict[str, dict] | None:
    """`generate_problem_data` as datagen runs it, for tools that generate data on the way
    (the default run, training's --generate_data): under data_dir's datagen lock, seeded,
    recording and comparing what the data is made from.

    Args:
      problem: a configured Problem instance.
      data_dir, tmp_dir, max_cases, overwrite: see `generate_problem_data`.
      random_seed: the seed set before generating (t2t-datagen's by default).

    Returns:
      See `generate_problem_data`.

    Raises:
      UserError: another datagen holds data_dir, or its data was made from other inputs.
    """
    from t2t_lite.errors import sigterm_interrupts
    from t2t_lite.utils import run_lock

    # Locked first, so that a second datagen refuses at once (hashing inputs takes a while).
    lock = run_lock.RunLock(data_dir, run_lock.DATAGEN_LOCK_NAME, "datagen", "--data_dir")
    created = "://" not in data_dir and not os.path.isdir(data_dir)
    lock.acquire()
    readers = None
    try:
        # SIGTERM (a scheduler, `kill`) stops datagen as Ctrl-C does: partial splits removed.
        with sigterm_interrupts():
            if overwrite:  # never under a live training run
                readers = run_lock.refuse_if_read(data_dir)
            inputs = made_from(problem, tmp_dir,
                               datagen_settings(problem, max_cases, random_seed))
            set_random_seed(random_seed)
            return generate_problem_data(problem, data_dir, tmp_dir, max_cases=max_cases,
                                         made_from=inputs, overwrite=overwrite)
    finally:
        if readers is not None:
            os.close(readers)
        lock.release()
        if created:  # a datagen that failed before writing leaves no empty data_dir behind
            with contextlib.suppress(OSError):
                os.rmdir(data_dir)
