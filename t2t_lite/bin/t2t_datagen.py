"""t2t-datagen: `run.py --mode=datagen`.

Reads t2t-datagen's flags and runs `t2t_lite.data_generators.datagen` (whose docstring
describes the problem selection and seeding).
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any

from t2t_lite.data_generators.datagen import (
    DEFAULT_DATA_DIR,
    DEFAULT_RANDOM_SEED,
    _flag,
    _summarize,
    configure_problem,
    select_problems,
    set_random_seed,
)


def main(flags: Any) -> None:
    """Generates the data of the selected problems (t2t-datagen).

    Args:
      flags: parsed absl flags: problem, data_dir, tmp_dir, random_seed, max_cases,
        exclude_problems, only_list, num_shards (must be unset), and the optional source
        flags of `configure_problem`.
    """
    from absl import logging

    problem_flag = _flag(flags, "problem", "")
    if not problem_flag:
        raise ValueError("--problem is required for --mode=datagen (see --only_list)")
    if _flag(flags, "num_shards", 0):
        raise ValueError("--num_shards should not be set for registered problems")
    names = select_problems(problem_flag, _flag(flags, "exclude_problems", ""))
    print("Generating problems:\n    " + "\n    ".join(names), flush=True)
    if _flag(flags, "only_list", False):
        return
    data_dir = os.path.expanduser(_flag(flags, "data_dir", ""))
    if not data_dir:
        data_dir = DEFAULT_DATA_DIR
        logging.warning("--data_dir not set; writing to %s", data_dir)
    tmp_dir = os.path.expanduser(_flag(flags, "tmp_dir", "/tmp/t2t_datagen"))
    os.makedirs(data_dir, exist_ok=True)
    os.makedirs(tmp_dir, exist_ok=True)
    seed = _flag(flags, "random_seed", DEFAULT_RANDOM_SEED)
    max_cases = _flag(flags, "max_cases", 0) or None
    # Progress lines come from absl logging at INFO (cases written, files compiled).
    logging.set_verbosity(logging.INFO)
    for name in names:
        problem = configure_problem(name, flags)
        set_random_seed(seed)
        start = time.time()
        print(f"[datagen] {name}: data_dir={data_dir} tmp_dir={tmp_dir}", flush=True)
        problem.generate_data(data_dir, tmp_dir, max_cases=max_cases)
        print(
            f"[datagen] {name}: done in {time.time() - start:.1f}s "
            f"({_summarize(data_dir, problem.dataset_filename())})",
            file=sys.stdout,
            flush=True,
        )
