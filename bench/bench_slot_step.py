"""The cost of one decode step against the number of sentences decoded together, in process:
the ceiling of what batching can gain on this CPU (a batch of n costs step(n) per step where
n sentences one by one cost n * step(1)).

    python bench/bench_slot_step.py --output_dir=RUN --problem=P --data_dir=DATA \
        --source=dev.en [--sizes=1,4,8,16,32] [--beam_size=4] [--steps=32] [--rounds=3]

For each size n (rounds x, sizes alternating): the first n lines of `--source` are admitted
to a continuous search (`search/continuous.py`, what the server runs) with a decode
limit no row reaches (extra_length 1000: every row decodes every step), the search is
traced, then `--steps` steps are timed. Prints ms per step, ms per sentence-step and the
speed-up over n = 1, with the 1-minute load average (`uptime`). Then the same n lines
decoded to their ends (extra_length 100) by the per-batch search (`input_lengths`, what
`--serve_batching=batch` runs) and by the continuous one, alternating.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time

import numpy as np

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))


def restore_and_encode(output_dir: str, problem: str | None, data_dir: str | None,
                       hparams: str, source: str):
    """(the run, its restored model, the ids of each line of `source`, EOS last): a run
    loaded as `--mode=decode` loads it (TensorFlow imported already)."""
    from t2t_lite.decoding import runs, text_batches

    spec = runs.resolve("decode", output_dir, problem, None, data_dir, None)
    run = runs.open_run(spec, hparams)
    _, model = runs.restore_model(run, None)
    encoder = run.encoders.get("inputs", run.encoders["targets"])
    with open(source, encoding="utf-8") as f:
        lines = [line.strip() for line in f]
    return run, model, [text_batches.encode_input(line, encoder, 0) for line in lines]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--problem")
    parser.add_argument("--data_dir")
    parser.add_argument("--hparams", default="")
    parser.add_argument("--source", required=True)
    parser.add_argument("--sizes", default="1,4,8,16,32")
    parser.add_argument("--beam_size", type=int, default=4)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    from t2t_lite import quiet_start

    quiet_start.import_tensorflow()
    from t2t_lite.decoding import decode_hparams, decoding, text_batches
    from t2t_lite.search.continuous import SlotSearch

    run, model, ids = restore_and_encode(args.output_dir, args.problem, args.data_dir,
                                         args.hparams, args.source)
    sizes = [int(s) for s in args.sizes.split(",")]
    functions: dict = {}
    timings: dict[int, list[float]] = {n: [] for n in sizes}
    for _ in range(args.rounds):
        for n in sizes:
            search = SlotSearch(model, args.beam_size, 0.6, 1000, 256,
                                target_space_id=run.target_space_id,
                                steps_per_call=args.steps, functions=functions)
            search.admit(ids[:n], list(range(n)))
            search.run()  # the trace (once), the cache's first growth
            start = time.perf_counter()
            search.run()
            timings[n].append((time.perf_counter() - start) / args.steps)
    # The same sentences decoded to their ends (extra_length 100): the per-batch search
    # (`input_lengths`, what --serve_batching=batch runs) against the continuous one.
    hp = decode_hparams.decode_hparams(f"beam_size={args.beam_size},alpha=0.6")
    infer = decoding.make_infer_fn(model, hp, run.target_space_id)
    whole: dict[tuple[str, int], list[float]] = {}
    for round_ in range(args.rounds + 1):
        for n in sizes:
            batch = ids[:n]
            start = time.perf_counter()
            infer(text_batches.pad_batch(batch),
                  input_lengths=np.array([len(i) for i in batch], np.int32))
            per_batch = time.perf_counter() - start
            search = SlotSearch(model, args.beam_size, 0.6, 100, 256,
                                target_space_id=run.target_space_id, functions=functions)
            start = time.perf_counter()
            search.admit(batch, list(range(n)))
            while len(search):
                search.run()
            if round_:  # the first round traces
                whole.setdefault(("batch", n), []).append(per_batch)
                whole.setdefault(("continuous", n), []).append(time.perf_counter() - start)
    load = os.getloadavg()[0]
    base = min(timings[sizes[0]]) / sizes[0]
    print(f"beam {args.beam_size}, {args.steps} steps a call, best of {args.rounds} "
          f"(load {load:.1f} on {os.cpu_count()} cores)")
    print("| sentences | rows | ms a step | ms a sentence-step | speed-up over one by one |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for n in sizes:
        step = min(timings[n])
        print(f"| {n} | {n * args.beam_size} | {1000 * step:.1f} | {1000 * step / n:.2f} | "
              f"{base / (step / n):.1f}x |")
    print(f"\nthe first n lines decoded to their ends, best of {args.rounds} "
          f"(load {os.getloadavg()[0]:.1f})")
    print("| sentences | per-batch search ms | continuous search ms | ratio |")
    print("| ---: | ---: | ---: | ---: |")
    for n in sizes:
        batch, slots = min(whole[("batch", n)]), min(whole[("continuous", n)])
        print(f"| {n} | {1000 * batch:.0f} | {1000 * slots:.0f} | {slots / batch:.2f} |")


if __name__ == "__main__":
    main()
