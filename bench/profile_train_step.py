"""Where a t2t_lite training step spends its time: steps/s, then a TF profiler trace, op by op.

    python bench/profile_train_step.py --data_dir=DIR --problem=translate_files \
        --hparams_set=transformer_tiny [--hparams=...] [--approx_vocab_size=8192] \
        [--steps 40] [--windows 1] [--trace_steps 10] [--top 30] [--xla_compile]

Builds the Trainer exactly as `run.py --mode=train` does (same flags, same bucketed input
pipeline), runs `--steps` warm-up/timing steps, then traces `--trace_steps` more with
`tf.profiler.experimental` and prints the ops' total time by op type and by op name (summed
over the CPU threads, so the total exceeds the wall time when ops run in parallel). Also
reads the Chrome-trace timelines of t2t's ProfilerHook (`--t2t_timeline_glob`, from
`t2t_run.py trainer --dbgprofile`) and prints the same table for the original, so both sides
are read by one parser.
"""
import argparse
import collections
import glob
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from t2t_lite import flags as t2t_flags
from t2t_lite.bin import t2t_trainer
from t2t_lite.training import distribution, trainer_lib


def xplane_op_events(logdir: str):
    """Yields (op name, op type, seconds) of each TF op event in a profiler log directory."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    for path in glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True):
        space = xplane_pb2.XSpace()
        with open(path, "rb") as f:
            space.ParseFromString(f.read())
        for plane in space.planes:
            if not plane.name.startswith("/host:CPU"):
                continue
            names = {k: m.name for k, m in plane.event_metadata.items()}
            for line in plane.lines:
                for event in line.events:
                    name = names.get(event.metadata_id, "")
                    # TF op events read "op_name:OpType"; framework/TraceMe events have no ':'.
                    if ":" not in name or name.startswith(("Iterator", "tf_")):
                        continue
                    op_name, op_type = name.rsplit(":", 1)
                    if not op_type or " " in op_type or "::" in name:
                        continue
                    yield op_name, op_type, event.duration_ps * 1e-12


def xplane_op_times(logdir: str) -> tuple[collections.Counter, collections.Counter]:
    """(seconds by op type, seconds by op name) of the TF ops in a profiler log directory."""
    by_type, by_name = collections.Counter(), collections.Counter()
    for op_name, op_type, seconds in xplane_op_events(logdir):
        by_type[op_type] += seconds
        by_name[op_name] += seconds
    return by_type, by_name


def timeline_op_times(paths: list[str]) -> tuple[collections.Counter, collections.Counter, int]:
    """(seconds by op type, seconds by op name, number of steps) of Chrome-trace timelines."""
    by_type, by_name = collections.Counter(), collections.Counter()
    for path in paths:
        with open(path) as f:
            trace = json.load(f)
        for event in trace["traceEvents"]:
            if event.get("ph") != "X" or "args" not in event:
                continue
            op_type = event["args"].get("op")
            if not op_type:
                continue
            by_type[op_type] += event["dur"] * 1e-6
            by_name[event["args"].get("name", event["name"])] += event["dur"] * 1e-6
    return by_type, by_name, len(paths)


def print_table(title: str, counter: collections.Counter, steps: int, top: int) -> None:
    total = sum(counter.values())
    print(f"\n{title}: {total / steps * 1e3:.1f} ms of op time per step (all threads)")
    for name, seconds in counter.most_common(top):
        print(f"  {seconds / steps * 1e3:8.2f} ms  {100 * seconds / total:5.1f}%  {name}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--windows", type=int, default=1, help="timed windows of --steps steps")
    ap.add_argument("--trace_steps", type=int, default=10)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--t2t_timeline_glob", default="")
    ap.add_argument("--inter_op_threads", type=int, default=0, help="0: TensorFlow's default")
    args, rest = ap.parse_known_args()
    if args.inter_op_threads:
        tf.config.threading.set_inter_op_parallelism_threads(args.inter_op_threads)
    if args.t2t_timeline_glob:
        paths = sorted(glob.glob(args.t2t_timeline_glob))[1:]  # the first includes warm-up
        by_type, by_name, steps = timeline_op_times(paths)
        print_table(f"t2t, {steps} traced steps, by op type", by_type, steps, args.top)
        print_table("t2t, by op name", by_name, steps, args.top)
        if not rest:
            return
    flags = t2t_flags.FLAGS
    out = tempfile.mkdtemp(prefix="profile_train_")
    flags([sys.argv[0], "--mode=train", f"--output_dir={out}", "--random_seed=1"] + rest)
    distribution.setup_determinism(flags.random_seed, False)
    trainer = t2t_trainer.build_trainer(flags, trainer_lib.create_strategy(1))
    dataset = trainer.distributed_dataset(trainer_lib.TRAIN)
    iterator = iter(dataset)
    step_fn = trainer._make_train_step(iterator.element_spec, update=True)
    step_fn(next(iterator))["loss"].numpy()
    for window in range(args.windows):
        start, tokens = time.perf_counter(), 0.0
        for _ in range(args.steps):
            tokens += float(step_fn(next(iterator))["tokens"])
        elapsed = time.perf_counter() - start
        print(f"t2t_lite: {args.steps / elapsed:.2f} steps/s, {tokens / elapsed:.0f} target "
              f"tokens/s (steps {window * args.steps + 1}-{(window + 1) * args.steps} after "
              "the first; new batch shapes retrace / recompile)", flush=True)
    logdir = tempfile.mkdtemp(prefix="profile_logs_")
    tf.profiler.experimental.start(logdir)
    for _ in range(args.trace_steps):
        step_fn(next(iterator))["loss"].numpy()
    tf.profiler.experimental.stop()
    by_type, by_name = xplane_op_times(logdir)
    print_table(f"t2t_lite, {args.trace_steps} traced steps, by op type", by_type,
                args.trace_steps, args.top)
    print_table("t2t_lite, by op name", by_name, args.trace_steps, args.top)


if __name__ == "__main__":
    main()
