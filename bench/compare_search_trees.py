"""Two checkouts of t2t_lite decode the same lines: are their outputs byte-identical?

    python bench/compare_search_trees.py --old /path/to/old/checkout --new . \
        --work /tmp/search-trees [--lines 500] [--models toy,fixture] [--keep_old]

For a change that must not change any result (e.g. the search's code): each checkout decodes,
in its own processes (`PYTHONPATH` = the checkout), the first `--lines` lines of the toy
WMT dev set (`../shared/data/wmt_toy_ende/dev.en`) with two models:

* "toy": transformer_tiny trained `--train_steps` steps on the toy En-De sample (4k
  subwords), made once in `--work/toy` with the new checkout's `run.py` (datagen, train)
  and reused by later runs: translations that end in EOS at many lengths;
* "fixture": t2t's checkpoint `ckpt_A_trained` (25 steps; its outputs mostly repeat a
  token up to the length limit, the other end of the search).

and, for each, these decodes (extra_length 100):

* greedy, beam4: `run.py --mode=decode` with beam_size=1, beam_size=4,alpha=0.6 (the
  decodes file);
* beam4_nbest: the same with return_beams, write_beam_scores (t2t's file and `.nbest`,
  scores to 6 decimals);
* infer_greedy, infer_beam4: `model.infer` on batches of 32 lines with `input_lengths` (a
  length per row, what `--serve_batching=batch` runs): ids and the scores' exact float bits;
* xla_greedy, xla_beam4: the same batches through the XLA-compiled decoder
  (`jit_compile=True`), without `input_lengths`;
* slots_greedy, slots_beam4, slots_beam4_nbest: the continuous search
  (`search.continuous.SlotSearch`, what `--serve_batching=continuous` runs): 8 sentences
  join before every call of 4 steps; ids and exact scores.

Prints one line per decode: identical or not, the lines that differ, each side's seconds.
Exits 1 when any output differs.
"""
from __future__ import annotations

import argparse
import filecmp
import math
import os
import pathlib
import shutil
import subprocess
import sys
import time

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = REPO_ROOT.parent / "shared"
CORPUS = SHARED / "data" / "wmt_toy_ende"
FIXTURE = SHARED / "fixtures" / "t2t"

RUN_PY_DECODES = {
    "greedy": "beam_size=1",
    "beam4": "beam_size=4,alpha=0.6",
    "beam4_nbest": "beam_size=4,alpha=0.6,return_beams=true,write_beam_scores=true",
}

# Run in each checkout's process: decodes through the library and writes ids + exact scores.
API_DECODES = r'''
import sys
import numpy as np
import tensorflow as tf
from t2t_lite.decoding import decoding, runs

(kind, out_path, source, lines, output_dir, problem, hparams_set, data_dir,
 checkpoint) = sys.argv[1:10]
spec = runs.resolve("decode", output_dir or None, problem or None, hparams_set or None,
                    data_dir or None, None)
run = runs.open_run(spec, "")
_, model = runs.restore_model(run, checkpoint or None)
encoder = run.encoders.get("inputs", run.encoders["targets"])
with open(source, encoding="utf-8") as f:
    texts = [line.strip() for line in f][:int(lines)]
ids = [decoding.encode_input(text, encoder, 0) for text in texts]
extra, beam = 100, 1 if kind.endswith("greedy") else 4
top_beams = beam if kind.endswith("nbest") else 1
results = []
if kind.startswith(("infer", "xla")):
    for start in range(0, len(ids), 32):
        batch = ids[start:start + 32]
        features = {"inputs": tf.constant(decoding.pad_batch(batch))}
        if kind.startswith("infer"):
            features["input_lengths"] = tf.constant([len(i) for i in batch], tf.int32)
        out = model.infer(features, decode_length=extra, beam_size=beam, alpha=0.6,
                          top_beams=top_beams, jit_compile=kind.startswith("xla"))
        outputs, scores = out["outputs"].numpy(), out["scores"].numpy()
        results += [(outputs[r].reshape(top_beams, -1), scores[r].reshape(-1))
                    for r in range(len(batch))]
else:
    from t2t_lite.search.continuous import SlotSearch
    search = SlotSearch(model, beam, 0.6, extra, 256, top_beams=top_beams,
                        target_space_id=run.target_space_id, steps_per_call=4)
    done, waiting = {}, list(range(len(ids)))
    while waiting or len(search):
        joining, waiting = waiting[:8], waiting[8:]
        search.admit([ids[i] for i in joining], joining)
        for finished in search.run():
            done[finished.token] = (finished.outputs, finished.scores)
    results = [done[i] for i in range(len(ids))]
with open(out_path, "w", encoding="utf-8") as f:
    for i, (outputs, scores) in enumerate(results):
        for k in range(top_beams):
            row = [int(t) for t in outputs[k]]
            while row and row[-1] == 0:
                row.pop()
            f.write(f"{i}\t{k}\t{' '.join(map(str, row))}\t{float(scores[k]).hex()}\n")
'''


def _run(command: list[str], tree: pathlib.Path, log: pathlib.Path) -> float:
    """Runs `command` in `tree` with that tree's t2t_lite; returns its seconds."""
    env = dict(os.environ, PYTHONPATH=str(tree), TF_CPP_MIN_LOG_LEVEL="2")
    start = time.perf_counter()
    with open(log, "a", encoding="utf-8") as f:
        f.write("$ " + " ".join(command) + "\n")
        f.flush()
        result = subprocess.run(command, cwd=tree, env=env, stdout=f, stderr=subprocess.STDOUT,
                                check=False)
    if result.returncode:
        sys.exit(f"failed ({result.returncode}), see {log}: {' '.join(command)}")
    return time.perf_counter() - start


def make_toy_run(work: pathlib.Path, tree: pathlib.Path, steps: int) -> dict:
    """The toy run's flags (datagen and training done once, in `work`)."""
    data, train = work / "data", work / "train"
    flags = {"output_dir": str(train), "problem": "", "hparams_set": "", "data_dir": "",
             "checkpoint": ""}
    if (train / "checkpoint").exists():
        return flags
    work.mkdir(parents=True, exist_ok=True)
    problem = ["--problem=translate_files", "--approx_vocab_size=4096", f"--data_dir={data}"]
    python = [sys.executable, "run.py"]
    _run(python + ["--mode=datagen", *problem, f"--tmp_dir={work / 'tmp'}",
                   f"--train_src={CORPUS / 'train.en'}", f"--train_tgt={CORPUS / 'train.de'}",
                   f"--dev_src={CORPUS / 'dev.en'}", f"--dev_tgt={CORPUS / 'dev.de'}"],
         tree, work / "make.log")
    _run(python + ["--mode=train", *problem, "--hparams_set=transformer_tiny",
                   "--hparams=learning_rate_warmup_steps=400", f"--output_dir={train}",
                   f"--train_steps={steps}", "--random_seed=1"], tree, work / "make.log")
    return flags


def fixture_run(work: pathlib.Path) -> dict:
    """t2t's fixture checkpoint with its vocab in a data dir (as tests/test_decoding.py)."""
    data = work / "data"
    data.mkdir(parents=True, exist_ok=True)
    shutil.copy(FIXTURE / "vocab.translate_toy_ende1k.1024.subwords",
                data / "vocab.translate_files.1024.subwords")
    return {"output_dir": "", "problem": "translate_files", "hparams_set": "transformer_tiny",
            "data_dir": str(data), "checkpoint": str(FIXTURE / "ckpt_A_trained")}


def decode(name: str, tree: pathlib.Path, flags: dict, source: pathlib.Path, lines: int,
           out: pathlib.Path) -> float:
    """One decode of `name` by `tree` into `out` (a file, or a stem for run.py's files)."""
    log = out.parent / "decode.log"
    if name in RUN_PY_DECODES:
        command = [sys.executable, "run.py", "--mode=decode",
                   f"--decode_hparams={RUN_PY_DECODES[name]},log_results=False",
                   f"--decode_from_file={source}", f"--decode_to_file={out}"]
        command += [f"--{flag}={flags[key]}" for flag, key in (
            ("output_dir", "output_dir"), ("problem", "problem"), ("hparams_set", "hparams_set"),
            ("data_dir", "data_dir"), ("checkpoint_path", "checkpoint")) if flags[key]]
        return _run(command, tree, log)
    return _run([sys.executable, "-c", API_DECODES, name, str(out), str(source), str(lines),
                 flags["output_dir"], flags["problem"], flags["hparams_set"], flags["data_dir"],
                 flags["checkpoint"]], tree, log)


def _outputs(out: pathlib.Path) -> list[pathlib.Path]:
    """The files a decode wrote (run.py's decodes file and its .nbest; not those of a decode
    whose name starts with this one's)."""
    return sorted(p for p in out.parent.glob(out.name + "*")
                  if p.is_file() and (p.name == out.name or p.name.startswith(out.name + ".")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--old", required=True, help="the checkout before the change")
    parser.add_argument("--new", default=str(REPO_ROOT), help="the checkout after it")
    parser.add_argument("--work", required=True)
    parser.add_argument("--lines", type=int, default=500)
    parser.add_argument("--models", default="toy,fixture")
    parser.add_argument("--train_steps", type=int, default=1200)
    parser.add_argument("--keep_old", action="store_true",
                        help="reuse the old checkout's outputs of an earlier run in --work "
                             "(its seconds then print as -)")
    parser.add_argument("--decodes", default=",".join(
        list(RUN_PY_DECODES) + ["infer_greedy", "infer_beam4", "xla_greedy", "xla_beam4",
                                "slots_greedy", "slots_beam4", "slots_beam4_nbest"]))
    args = parser.parse_args()
    work = pathlib.Path(args.work).resolve()
    trees = {"old": pathlib.Path(args.old).resolve(), "new": pathlib.Path(args.new).resolve()}
    source = work / f"dev.first{args.lines}.en"
    work.mkdir(parents=True, exist_ok=True)
    with open(CORPUS / "dev.en", encoding="utf-8") as f:
        source.write_text("".join(f.readlines()[:args.lines]), encoding="utf-8")
    different = 0
    print(f"{args.lines} lines of {CORPUS / 'dev.en'}; old {trees['old']}, new {trees['new']}")
    print("| model | decode | identical | lines | old s | new s |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    for model in args.models.split(","):
        flags = (make_toy_run(work / "toy", trees["new"], args.train_steps) if model == "toy"
                 else fixture_run(work / "fixture"))
        for name in args.decodes.split(","):
            seconds, files = {}, {}
            for side, tree in trees.items():
                out = work / model / side / name
                out.parent.mkdir(parents=True, exist_ok=True)
                if side == "old" and args.keep_old and _outputs(out):
                    seconds[side], files[side] = float("nan"), _outputs(out)
                    continue
                for stale in _outputs(out):
                    stale.unlink()
                seconds[side] = decode(name, tree, flags, source, args.lines, out)
                files[side] = _outputs(out)
            names = {side: [p.name for p in paths] for side, paths in files.items()}
            same = names["old"] == names["new"] and bool(files["old"]) and all(
                filecmp.cmp(a, b, shallow=False) for a, b in zip(files["old"], files["new"]))
            count = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in files["new"])
            different += not same
            print(f"| {model} | {name} | {'yes' if same else '**NO**'} | {count} | "
                  f"{'-' if math.isnan(seconds['old']) else round(seconds['old'])} | "
                  f"{seconds['new']:.0f} |", flush=True)
    sys.exit(1 if different else 0)


if __name__ == "__main__":
    main()
