"""t2t-datagen: `run.py --mode=datagen`.

Reads t2t-datagen's flags and runs `t2t_lite.data_generators.datagen` (whose docstring
describes the problem selection and seeding).
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any

from t2t_lite.data_generators import datagen_report
from t2t_lite.data_generators.datagen import (
    DEFAULT_DATA_DIR,
    DEFAULT_RANDOM_SEED,
    configure_problem,
    generate_locked,
    select_problems,
    summarize,
)
from t2t_lite.errors import RunStopped, UserError, interrupt_signal
from t2t_lite.utils import validation


def main(flags: Any) -> None:
    """Generates the data of the selected problems (t2t-datagen).

    Args:
      flags: parsed absl flags: problem, data_dir, tmp_dir, random_seed, max_cases,
        exclude_problems, only_list, num_shards (must be unset), overwrite_data, and the
        optional source flags of `configure_problem`.

    Raises:
      UserError: a bad flag or input file, another datagen holding data_dir (its
        `datagen.lock`), or data in data_dir made from other inputs without
        --overwrite_data.
    """
    from absl import logging

    problem_flag = _flag(flags, "problem", "")
    if not problem_flag:
        raise UserError("--problem is required for --mode=datagen (see --only_list)")
    if _flag(flags, "num_shards", 0):
        raise UserError("--num_shards should not be set for registered problems")
    try:
        names = select_problems(problem_flag, _flag(flags, "exclude_problems", ""))
    except ValueError as e:
        raise UserError(str(e)) from e
    print("Generating problems:\n    " + "\n    ".join(names), flush=True)
    if _flag(flags, "only_list", False):
        return
    data_dir = os.path.expanduser(_flag(flags, "data_dir", ""))
    if not data_dir:
        data_dir = DEFAULT_DATA_DIR
        logging.warning("--data_dir not set; writing to %s", data_dir)
    tmp_dir = os.path.expanduser(_flag(flags, "tmp_dir", "/tmp/t2t_datagen"))
    problems = [configure_problem_from_flags(name, flags) for name in names]
    validation.check_writable_dir("data_dir", data_dir)
    validation.check_writable_dir("tmp_dir", tmp_dir)
    os.makedirs(tmp_dir, exist_ok=True)
    seed = _flag(flags, "random_seed", DEFAULT_RANDOM_SEED)
    max_cases = _flag(flags, "max_cases", 0) or None
    overwrite = bool(_flag(flags, "overwrite_data", False))
    # Progress lines come from absl logging at INFO (cases written, files compiled).
    logging.set_verbosity(logging.INFO)
    for name, problem in zip(names, problems):
        start = time.time()
        print(f"[datagen] {name}: data_dir={data_dir} tmp_dir={tmp_dir}", flush=True)
        try:
            markers = generate_locked(problem, data_dir, tmp_dir, random_seed=seed,
                                      max_cases=max_cases, overwrite=overwrite)
        except KeyboardInterrupt as e:  # before any shard was written (reading inputs)
            signal_name, code = interrupt_signal(e)
            raise RunStopped(f"{signal_name} received: datagen of {name} stopped before "
                             "writing data; run the same command again", code,
                             label="stopped") from None
        if markers is None:
            print(f"[datagen] {name}: already complete in {data_dir} (completion markers); "
                  "nothing to do", flush=True)
            continue
        if getattr(problem, "datagen_report_wanted", False):
            print(datagen_report.write(data_dir, name, datagen_report.build(
                problem, time.time() - start)), flush=True)
        records = ", ".join(f"{tag} {sum(s['records'] for s in m['shards'])} examples in "
                            f"{len(m['shards'])} shard(s)" for tag, m in markers.items())
        print(
            f"[datagen] {name}: done in {time.time() - start:.1f}s: {records} "
            f"({summarize(data_dir, problem.dataset_filename())})",
            file=sys.stdout,
            flush=True,
        )


def _flag(flags: Any, name: str, default: Any = None) -> Any:
    """`flags.name`, or `default` when that flag is not defined or unset."""
    try:
        value = getattr(flags, name)
    except AttributeError:
        return default
    return default if value is None else value


def configure_problem_from_flags(name: str, flags: Any):
    """`datagen.configure_problem` with --approx_vocab_size, --train_src/--train_tgt/
    --dev_src/--dev_tgt, --tfds_data_dir and --wsj_dir/--wsj_train_sections/
    --wsj_dev_sections, --subword_dropout/--subword_dropout_copies, the --filter_* flags,
    --num_datagen_workers and the vocabulary flags of `vocab_sources.datagen_settings` (each
    used when defined and set)."""
    try:
        return _configure_problem(name, flags)
    except ValueError as e:
        raise UserError(str(e)) from e


def _configure_problem(name: str, flags: Any):
    from t2t_lite.data_generators import vocab_sources

    vocab_settings, approx_vocab_size = vocab_sources.datagen_settings(
        _flag(flags, "vocab_type"), _flag(flags, "sentencepiece_model"),
        _flag(flags, "target_sentencepiece_model"),
        _flag(flags, "sentencepiece_model_type", "unigram"),
        _flag(flags, "sentencepiece_separate", False), _flag(flags, "vocab_from"),
        _flag(flags, "approx_vocab_size", 0))
    return configure_problem(
        name,
        approx_vocab_size=approx_vocab_size,
        vocab_settings=vocab_settings,
        source_files={k: _flag(flags, k) for k in ("train_src", "train_tgt", "dev_src", "dev_tgt")},
        tfds_data_dir=_flag(flags, "tfds_data_dir"),
        wsj_source=(_flag(flags, "wsj_dir"), _flag(flags, "wsj_train_sections"),
                    _flag(flags, "wsj_dev_sections")),
        subword_dropout=_flag(flags, "subword_dropout", 0.0),
        subword_dropout_copies=_flag(flags, "subword_dropout_copies", 1),
        filters=filter_settings_from_flags(flags),
        num_workers=_flag(flags, "num_datagen_workers"),
    )


def filter_settings_from_flags(flags: Any):
    """The checked `corpus_filters.FilterSettings` of the --filter_* flags.

    Raises:
      UserError: a value out of range or an unknown language (names the flag).
    """
    from t2t_lite.data_generators import corpus_filters

    return corpus_filters.parse_settings(
        min_length=_flag(flags, "filter_min_length", 0),
        max_length=_flag(flags, "filter_max_length", 0),
        length_ratio=_flag(flags, "filter_length_ratio", 0.0),
        copies=_flag(flags, "filter_copies", False),
        duplicates=_flag(flags, "filter_duplicates", False),
        languages=_flag(flags, "filter_languages", ""))
