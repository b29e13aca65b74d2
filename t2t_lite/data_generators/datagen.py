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

import os
import random
from typing import Any

import numpy as np

from t2t_lite import registry

DEFAULT_RANDOM_SEED = 429459
DEFAULT_DATA_DIR = "/tmp/t2t_data"


def _flag(flags: Any, name: str, default: Any = None) -> Any:
    """`flags.name`, or `default` when that flag is not defined or unset."""
    try:
        value = getattr(flags, name)
    except AttributeError:
        return default
    return default if value is None else value


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


def configure_problem(name: str, flags: Any):
    """The problem instance for `name`, with datagen's source and vocab flags applied.

    Args:
      name: registered problem name.
      flags: parsed flags (train_src, train_tgt, dev_src, dev_tgt, approx_vocab_size,
        tfds_data_dir, wsj_dir, wsj_train_sections, wsj_dev_sections are used when defined
        and set).

    Returns:
      A Problem instance.
    """
    from t2t_lite.data_generators import text_problems

    problem = registry.problem(name)
    vocab_size = _flag(flags, "approx_vocab_size", 0)
    if vocab_size:
        if not isinstance(problem, text_problems.Text2TextProblem):
            raise ValueError(f"--approx_vocab_size does not apply to {name} (it has no vocab)")
        problem = type(problem)(approx_vocab_size=vocab_size)
    source_flags = {k: _flag(flags, k) for k in ("train_src", "train_tgt", "dev_src", "dev_tgt")}
    if any(source_flags.values()):
        if not hasattr(problem, "set_source_files"):
            raise ValueError(
                f"--train_src/--train_tgt/--dev_src/--dev_tgt do not apply to {name}; they "
                "name the parallel text files of translation problems"
            )
        problem.set_source_files(**source_flags)
    if hasattr(problem, "tfds_data_dir"):
        problem.tfds_data_dir = _flag(flags, "tfds_data_dir")
    if hasattr(problem, "set_wsj_source"):
        problem.set_wsj_source(
            _flag(flags, "wsj_dir"),
            _flag(flags, "wsj_train_sections"),
            _flag(flags, "wsj_dev_sections"),
        )
    return problem


def _summarize(data_dir: str, name: str) -> str:
    files = sorted(f for f in os.listdir(data_dir) if f.startswith(name + "-"))
    size = sum(os.path.getsize(os.path.join(data_dir, f)) for f in files)
    return f"{len(files)} files, {size / 1e6:.1f} MB"
