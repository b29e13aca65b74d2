"""The threads of one decode's ops (TensorFlow's intra-op threads), chosen at start-up.

`--mode=decode` decodes one batch per usable core at once (`decoding.parallel_batches`), the
server runs one decode worker per core by default. With TensorFlow's default, every op of
every batch may also be split over all the cores' threads: where each batch already has a
core, that only adds a hand-off between threads to each of the step's small ops. A beam-4
step of the tiny trained model on a 2-core AMX Xeon (bench/bench_step_levers.py,
bench/history/serving.md): with 1 thread an op two workers at 8 sentences each took
0.24-0.26 CPU ms a sentence-step against 0.35-0.40 with TensorFlow's 2, and one sentence
alone 1.0-1.2 against 1.9-2.0; `--mode=decode`'s two parallel batches of 300 lines did 38-41
sentences/s against 28-29. So each batch (or worker) gets its share of the cores: usable
cores // parallel batches threads, at least 1 (one batch: every core, TensorFlow's own
default). The arithmetic of an op does not depend on its thread count here: the decodes
are the same.

TensorFlow takes the setting only before its runtime starts (the first op, or listing the
logical devices): `configure` is called before anything runs a TensorFlow op. Nothing here
imports TensorFlow at module level.
"""
from __future__ import annotations

import os

from t2t_lite.decoding import decoding

# TensorFlow's own setting of its intra-op threads.
ENVIRONMENT = "TF_NUM_INTRAOP_THREADS"


# The server's decode workers when --serve_decode_workers is 0, `default_workers(gpu,
# cores)`: as `--mode=decode`'s parallel batches, one per usable core (at most
# `decoding.MAX_AUTO_PARALLEL_BATCHES`), 1 with a GPU. Given the GPU's presence rather than
# asking TensorFlow, because listing the logical devices would start its runtime.
default_workers = decoding.parallel_batches


def choose(workers: int, cores: int) -> int:
    """Intra-op threads for `workers` decode workers (or parallel batches) on `cores` usable
    cores: their share of the cores, at least 1."""
    return max(1, cores // max(1, workers))


def configure(requested: int, workers: int) -> int:
    """Sets TensorFlow's intra-op threads for decode workers (the server's) or parallel
    batches (`--mode=decode`'s) before its runtime starts.

    Args:
      requested: threads asked for (--serve_intra_op_threads; 0: TensorFlow's own
        TF_NUM_INTRAOP_THREADS where it is set, else `choose` from the workers and the
        usable cores).
      workers: decode workers or parallel batches (0: `default_workers`).

    Returns:
      The intra-op threads in use.

    Raises:
      RuntimeError: TensorFlow's runtime had started already with another setting.
    """
    import tensorflow as tf

    # The environment variable is the user's word for every TensorFlow program: it wins
    # over the choice (not over a flag).
    from_environment = os.environ.get(ENVIRONMENT, "").strip()
    if not requested and from_environment.isdigit() and int(from_environment) > 0:
        requested = int(from_environment)
    threads = requested
    if not threads:
        cores = decoding.usable_cores()
        if not workers:
            # Physical devices: listing the logical ones would start the runtime.
            workers = default_workers(bool(tf.config.list_physical_devices("GPU")), cores)
        threads = choose(workers, cores)
    if tf.config.threading.get_intra_op_parallelism_threads() != threads:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
    return threads
