"""Two checkouts of t2t_lite decode the same real lines: which searches faster?

    python bench/compare_search_speed.py --old /path/to/old/checkout --new . \
        --work /tmp/search-trees [--lines 500] [--rounds 4] \
        [--decodes infer_greedy,infer_beam4,slots_greedy,slots_beam4] \
        [--bench_decoding_sets transformer_tiny]

For a change to the search's code (`compare_search_trees.py` checks that its results are
byte-identical; this says what it costs). The model is `compare_search_trees.py`'s "toy" run
(transformer_tiny trained on the toy En-De sample, made once in `--work/toy`), the lines the
first `--lines` of the toy WMT dev set. Each decode:

* infer_greedy, infer_beam4: `model.infer` on batches of 32 lines with `input_lengths`
  (what `--serve_batching=batch` and `--mode=decode` run), beam 4 with alpha 0.6;
* slots_greedy, slots_beam4: the continuous search (`search.continuous.SlotSearch`, what
  `--serve_batching=continuous` runs), 8 sentences joining before every call of 4 steps;
  the two passes' searches share their traced functions, as the server's do.

and, with `--bench_decoding_sets`, each checkout's own `bench/bench_decoding.py` on those
hparams sets (random weights, a random batch of 8; its rows' ms per batch and CPU ms).

Each checkout runs in its own process (`PYTHONPATH` = the checkout), decodes the lines once
(tracing), then times a second pass (wall and process CPU seconds). The checkouts alternate
(old, new, new, old, ...) for `--rounds` rounds, so that a shared machine's load falls on
both alike; printed per decode: each side's median seconds and new / old (below 1: faster),
with the 1-minute load average before and after.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import compare_search_trees  # noqa: E402  (the toy run and the corpus)

DECODES = ("infer_greedy", "infer_beam4", "slots_greedy", "slots_beam4")

# Run in each checkout's process: a traced pass, then a timed one; prints JSON seconds.
TIMED_DECODES = r'''
import json, resource, sys, time
import tensorflow as tf
from t2t_lite.decoding import decoding, runs

kind, source, lines, output_dir = sys.argv[1:5]
spec = runs.resolve("decode", output_dir, None, None, None, None)
run = runs.open_run(spec, "")
_, model = runs.restore_model(run, None)
encoder = run.encoders.get("inputs", run.encoders["targets"])
with open(source, encoding="utf-8") as f:
    texts = [line.strip() for line in f][:int(lines)]
ids = [decoding.encode_input(text, encoder, 0) for text in texts]
beam = 1 if kind.endswith("greedy") else 4


def infer():
    for start in range(0, len(ids), 32):
        batch = ids[start:start + 32]
        out = model.infer({"inputs": tf.constant(decoding.pad_batch(batch)),
                           "input_lengths": tf.constant([len(i) for i in batch], tf.int32)},
                          decode_length=100, beam_size=beam, alpha=0.6)
        out["outputs"].numpy()


FUNCTIONS = {}  # the traced functions, shared by the passes' searches (as the server's)


def slots():
    from t2t_lite.search.continuous import SlotSearch
    search = SlotSearch(model, beam, 0.6, 100, 256, target_space_id=run.target_space_id,
                        steps_per_call=4, functions=FUNCTIONS)
    waiting = list(range(len(ids)))
    while waiting or len(search):
        joining, waiting = waiting[:8], waiting[8:]
        search.admit([ids[i] for i in joining], joining)
        search.run()


work = infer if kind.startswith("infer") else slots
work()  # traces every shape this pass meets
cpu, wall = time.process_time(), time.perf_counter()
work()
print(json.dumps({"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}))
'''


def timed(tree: pathlib.Path, kind: str, source: pathlib.Path, lines: int,
          output_dir: str) -> dict:
    """{"wall", "cpu"}: seconds of `tree`'s second pass of decode `kind`."""
    env = dict(os.environ, PYTHONPATH=str(tree), TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run([sys.executable, "-c", TIMED_DECODES, kind, str(source),
                             str(lines), output_dir], cwd=tree, env=env, capture_output=True,
                            text=True, check=False)
    if result.returncode:
        sys.exit(f"{tree} {kind} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def bench_decoding(tree: pathlib.Path, sets: str) -> dict:
    """{(set, decode, mode): {"wall", "cpu"}}: ms per batch of `tree`'s bench_decoding.py."""
    env = dict(os.environ, PYTHONPATH=str(tree), TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run([sys.executable, "bench/bench_decoding.py", "--hparams_sets", sets,
                             "--repeats", "3"], cwd=tree, env=env, capture_output=True,
                            text=True, check=False)
    if result.returncode:
        sys.exit(f"{tree} bench_decoding.py failed:\n{result.stderr[-3000:]}")
    rows = {}
    for line in result.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[0] in sets.split(","):
            rows[tuple(fields[:3])] = {"wall": float(fields[3]), "cpu": float(fields[4])}
    return rows


def _row(name: str, runs: dict[str, list[dict]], digits: int = 2) -> str:
    """A table row: each side's median wall and CPU figures and new / old."""
    median = {side: {key: statistics.median(r[key] for r in results)
                     for key in ("wall", "cpu")} for side, results in runs.items()}
    return (f"| {name} | {median['old']['wall']:.{digits}f} | {median['new']['wall']:.{digits}f} "
            f"| {median['new']['wall'] / median['old']['wall']:.3f} | "
            f"{median['old']['cpu']:.{digits}f} | {median['new']['cpu']:.{digits}f} | "
            f"{median['new']['cpu'] / median['old']['cpu']:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--old", required=True, help="the checkout before the change")
    parser.add_argument("--new", default=str(compare_search_trees.REPO_ROOT),
                        help="the checkout after it")
    parser.add_argument("--work", required=True, help="where the toy run is (or is made)")
    parser.add_argument("--lines", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--train_steps", type=int, default=1200)
    parser.add_argument("--decodes", default=",".join(DECODES),
                        help="comma-separated; empty: none")
    parser.add_argument("--bench_decoding_sets", default="",
                        help="also bench/bench_decoding.py on these hparams sets")
    args = parser.parse_args()
    work = pathlib.Path(args.work).resolve()
    trees = {"old": pathlib.Path(args.old).resolve(), "new": pathlib.Path(args.new).resolve()}
    work.mkdir(parents=True, exist_ok=True)
    source = work / f"dev.first{args.lines}.en"
    with open(compare_search_trees.CORPUS / "dev.en", encoding="utf-8") as f:
        source.write_text("".join(f.readlines()[:args.lines]), encoding="utf-8")
    flags = compare_search_trees.make_toy_run(work / "toy", trees["new"], args.train_steps)
    load_before = os.getloadavg()[0]
    print(f"{args.lines} lines of {compare_search_trees.CORPUS / 'dev.en'}, {args.rounds} "
          f"alternating rounds; old {trees['old']}, new {trees['new']}")
    print("| decode | old wall s | new wall s | new/old wall | old cpu s | new cpu s | "
          "new/old cpu |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for kind in filter(None, args.decodes.split(",")):
        runs: dict[str, list[dict]] = {"old": [], "new": []}
        for round_ in range(args.rounds):
            order = ("old", "new") if round_ % 2 == 0 else ("new", "old")
            for side in order:
                runs[side].append(timed(trees[side], kind, source, args.lines,
                                        flags["output_dir"]))
        print(_row(kind, runs), flush=True)
    if args.bench_decoding_sets:
        print("\nbench/bench_decoding.py, ms per batch (median of the rounds' best of 3):")
        print("| set decode mode | old wall ms | new wall ms | new/old wall | old cpu ms | "
              "new cpu ms | new/old cpu |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        tables: dict[str, list[dict]] = {"old": [], "new": []}
        for round_ in range(args.rounds):
            order = ("old", "new") if round_ % 2 == 0 else ("new", "old")
            for side in order:
                tables[side].append(bench_decoding(trees[side], args.bench_decoding_sets))
        for key in tables["old"][0]:
            print(_row(" ".join(key), {side: [table[key] for table in results]
                                       for side, results in tables.items()}, 1), flush=True)
    print(f"load average (1 min): {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")


if __name__ == "__main__":
    main()
