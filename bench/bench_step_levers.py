"""What a decode step costs the server against offline decoding, in process: beam-search
steps at n sentences, run by W threads at once (the server's decode workers, offline's
parallel batches), under TensorFlow's intra-op threads I, for each search the server or
`--mode=decode` can run.

    python bench/bench_step_levers.py --output_dir=RUN --data_dir=DATA --source=dev.en \
        [--sizes=1,8,16,32] [--workers=1,2] [--searches=continuous,batch,xla] \
        [--intra_op_threads=0] [--steps=32] [--rounds=3] [--trace]

The searches, each timed on the first n lines of `--source` (every row live every step):
* continuous: `search/continuous.py`'s SlotSearch (`--serve_batching=continuous`), extra
  length 1000 (no row stops), `--steps` steps a call, the call timed after one untimed call
  (the trace, the cache's growth); `--calls_of=4` also times calls of 4 steps (the
  server's), whose host work between calls (gathers, shape checks) shows as the difference.
* batch: the per-batch search with a decode length per row (`input_lengths`; what
  `--serve_batching=batch` runs), n-best of the whole beam (no early stop: every row runs
  its input length + `--steps` steps), timed whole, divided by its steps.
* xla: the same search XLA-compiled (`infer(jit_compile=True)`, bucketed shapes; what
  `--mode=decode` can run), timed likewise.
For each (search, n, W) the W threads each run their own search of the same n lines at the
same time; a round is the best of the W threads' times, the figure the best of
`--rounds` rounds (configurations alternate within a round). Prints ms a step, ms a
sentence-step (all threads' sentences) and sentence-steps per ms with the 1-minute load
average, and the process's CPU ms a sentence-step (all its threads, TensorFlow's pools
included: what a loaded machine disturbs less). `--intra_op_threads` (0: TensorFlow's default, one per core) is set before
TensorFlow starts: compare values in separate runs, alternately. `--trace`: a TF profiler
trace of one continuous call at each n (one thread): ops per step and op time per step.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import sys
import tempfile
import threading
import time

import numpy as np

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench"))


def run_threads(workers: int, work) -> tuple[float, float]:
    """Runs `work()` on `workers` threads started together; the longest thread's seconds
    (the threads' sentence-steps are all done by then) and the process's CPU seconds over
    the same time (all its threads: TensorFlow's pools too)."""
    barrier = threading.Barrier(workers)
    seconds = [0.0] * workers
    cpu = [0.0, 0.0]

    def thread(index: int) -> None:
        prepared = work(prepare=True)
        if barrier.wait() == 0:
            cpu[0] = time.process_time()
        start = time.perf_counter()
        work(prepared=prepared)
        seconds[index] = time.perf_counter() - start

    threads = [threading.Thread(target=thread, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return max(seconds), time.process_time() - cpu[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--problem")
    parser.add_argument("--data_dir")
    parser.add_argument("--source", required=True)
    parser.add_argument("--sizes", default="1,8,16,32")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--searches", default="continuous,batch,xla")
    parser.add_argument("--beam_size", type=int, default=4)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--calls_of", type=int, default=0,
                        help="also time the continuous search in calls of this many steps")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--intra_op_threads", type=int, default=0)
    parser.add_argument("--inter_op_threads", type=int, default=0)
    parser.add_argument("--trace", action="store_true")
    args = parser.parse_args()

    from t2t_lite import quiet_start

    quiet_start.import_tensorflow()
    import tensorflow as tf

    if args.intra_op_threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.intra_op_threads)
    if args.inter_op_threads:
        tf.config.threading.set_inter_op_parallelism_threads(args.inter_op_threads)
    from bench_slot_step import restore_and_encode

    from t2t_lite.search.continuous import SlotSearch

    run, model, ids = restore_and_encode(args.output_dir, args.problem, args.data_dir, "",
                                         args.source)
    sizes = [int(s) for s in args.sizes.split(",")]
    worker_counts = [int(w) for w in args.workers.split(",")]
    searches = args.searches.split(",")
    if args.calls_of:
        searches.insert(searches.index("continuous") + 1 if "continuous" in searches else 0,
                        f"continuous/{args.calls_of}")
    beam = args.beam_size
    functions: dict = {}

    def continuous(n: int, per_call: int):
        def work(prepare=False, prepared=None):
            if prepare:
                search = SlotSearch(model, beam, 0.6, 1000, 256,
                                    target_space_id=run.target_space_id,
                                    steps_per_call=per_call, functions=functions)
                search.admit(ids[:n], list(range(n)))
                search.run()  # the trace (once), the cache's first growth
                return search
            for _ in range(args.steps // per_call):
                prepared.run()
        return work, args.steps

    def batch(n: int, jit: bool):
        batch_ids = text_batches.pad_batch(ids[:n])
        lengths = np.array([len(i) for i in ids[:n]], np.int32)
        features = {"inputs": tf.constant(batch_ids)}
        if not jit:
            features["input_lengths"] = tf.constant(lengths)

        def work(prepare=False, prepared=None):
            if prepare:
                return None
            result = model.infer(features, decode_length=args.steps, beam_size=beam,
                                 alpha=0.6, top_beams=beam, jit_compile=jit)
            return np.asarray(result["outputs"])
        # Every row runs to the batch's limit (n-best: no early stop): for the row-length
        # search each row stops at its own length + steps; the longest sets the steps.
        return work, batch_ids.shape[1] + args.steps

    timings: dict[tuple, list[float]] = {}
    steps_of: dict[tuple, int] = {}
    cpu_of: dict[tuple, list[float]] = {}
    for round_ in range(args.rounds + 1):
        for search in searches:
            for n in sizes:
                for workers in worker_counts:
                    if search.startswith("continuous"):
                        per_call = int(search.split("/")[1]) if "/" in search else args.steps
                        work, steps = continuous(n, per_call)
                    else:
                        work, steps = batch(n, search == "xla")
                    seconds, cpu = run_threads(workers, work)
                    if round_:  # the first round traces
                        timings.setdefault((search, n, workers), []).append(seconds)
                        cpu_of.setdefault((search, n, workers), []).append(cpu)
                        steps_of[(search, n, workers)] = steps
    load = os.getloadavg()[0]
    threads = args.intra_op_threads or "default"
    print(f"beam {beam}, best of {args.rounds} rounds, intra-op threads {threads}, "
          f"load {load:.1f} on {os.cpu_count()} cores")
    print("| search | sentences a worker | workers | ms a step | ms a sentence-step "
          "| sentence-steps per ms | CPU ms a sentence-step |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for key, values in timings.items():
        search, n, workers = key
        step = min(values) / steps_of[key]
        cpu = min(cpu_of[key]) / steps_of[key] / (n * workers)
        print(f"| {search} | {n} | {workers} | {1000 * step:.2f} | "
              f"{1000 * step / (n * workers):.3f} | {n * workers / (1000 * step):.2f} | "
              f"{1000 * cpu:.3f} |")
    if args.trace:
        trace(model, ids, sizes, beam, run.target_space_id, functions, args.steps)


def trace(model, ids, sizes, beam, target_space_id, functions, steps) -> None:
    """A profiler trace of one continuous call of `steps` steps at each size: ops a step
    and op time a step, the top op types."""
    import collections

    import tensorflow as tf
    from profile_train_step import print_table, xplane_op_events

    from t2t_lite.search.continuous import SlotSearch

    for n in sizes:
        search = SlotSearch(model, beam, 0.6, 1000, 256, target_space_id=target_space_id,
                            steps_per_call=steps, functions=functions)
        search.admit(ids[:n], list(range(n)))
        search.run()
        logdir = tempfile.mkdtemp(prefix="step_levers_")
        tf.profiler.experimental.start(logdir)
        start = time.perf_counter()
        search.run()
        wall = time.perf_counter() - start
        tf.profiler.experimental.stop()
        by_type, count = collections.Counter(), collections.Counter()
        for _, op_type, seconds in xplane_op_events(logdir):
            by_type[op_type] += seconds
            count[op_type] += 1
        print(f"\nn={n}: {sum(count.values()) / steps:.0f} ops a step, wall "
              f"{1000 * wall / steps:.2f} ms a step (traced)")
        print_table(f"n={n}, by op type", by_type, steps, 12)


if __name__ == "__main__":
    main()
