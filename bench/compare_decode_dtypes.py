"""Beam-search decoding of one checkpoint in float32 and in bfloat16: speed, identical lines, BLEU.

    python bench/compare_decode_dtypes.py --output_dir RUN --source dev.en --reference dev.de
        [--checkpoint_path PREFIX] [--dtypes float32,bfloat16] [--rounds 2]
        [--decode_hparams beam_size=4,alpha=0.6] [--work DIR]

Each round runs `run.py --mode=decode --output_dir RUN --hparams=activation_dtype=D` once per
dtype, interleaved (the weights stay float32; under bfloat16 the model computes in bfloat16 as
a bfloat16 run decodes, with float32 logits into the search). Printed per run: the decoding
time the decoder logs ("Decoded N records in S s": the decode loop, without start-up and
checkpoint loading) and the whole process's wall time; then, per dtype, the best of the
rounds, the speed against the first dtype, how many output lines equal the first dtype's, and
sacreBLEU against `--reference` (`bleu_hook.sacrebleu_corpus_bleu`, as `run.py --mode=bleu`).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PROJECT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import describe_cpu

from t2t_lite.evaluation.bleu_hook import read_lines, sacrebleu_corpus_bleu

DECODED = re.compile(r"Decoded (\d+) records in ([0-9.]+) s")


def decode(run_flags: list[str], dtype: str, source: str, out: str,
           decode_hparams: str) -> tuple[float, float]:
    """Runs one decode process; returns (seconds of the decode loop, process wall seconds)."""
    command = [sys.executable, "run.py", "--mode=decode", *run_flags,
               f"--hparams=activation_dtype={dtype}",
               f"--decode_hparams={decode_hparams},log_results=False",
               f"--decode_from_file={source}", f"--decode_to_file={out}"]
    start = time.perf_counter()
    result = subprocess.run(command, check=False, cwd=PROJECT, capture_output=True, text=True,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    wall = time.perf_counter() - start
    if result.returncode:
        sys.exit(f"decode in {dtype} failed (status {result.returncode}):\n"
                 + result.stderr[-3000:])
    match = DECODED.search(result.stderr + result.stdout)
    if not match:
        sys.exit(f"decode in {dtype}: no 'Decoded N records in S s' line in its log")
    return float(match.group(2)), wall


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--output_dir", required=True, help="the training run (its flags.json "
                    "names problem, data_dir and hparams)")
    ap.add_argument("--checkpoint_path", default="", help="default: the run's newest")
    ap.add_argument("--source", required=True)
    ap.add_argument("--reference", required=True)
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--decode_hparams", default="beam_size=4,alpha=0.6")
    ap.add_argument("--work", default="", help="where decodes go (default: a temporary dir)")
    args = ap.parse_args(argv)
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    work = args.work or tempfile.mkdtemp(prefix="decode_dtypes_")
    os.makedirs(work, exist_ok=True)
    run_flags = [f"--output_dir={os.path.abspath(args.output_dir)}"]
    if args.checkpoint_path:
        run_flags.append(f"--checkpoint_path={os.path.abspath(args.checkpoint_path)}")
    source = os.path.abspath(args.source)
    n_lines = len(read_lines(source))
    print(f"machine: {describe_cpu()}", flush=True)
    print(f"{n_lines} lines of {source}, {args.decode_hparams}, {args.rounds} rounds; "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    times: dict[str, list[float]] = {d: [] for d in dtypes}
    for r in range(args.rounds):
        for dtype in dtypes:
            out = os.path.join(work, f"decodes.{dtype}.round{r}")
            loop, wall = decode(run_flags, dtype, source, out, args.decode_hparams)
            times[dtype].append(loop)
            print(f"round {r} {dtype:9s} decode loop {loop:7.2f} s ({n_lines / loop:.2f} "
                  f"lines/s), process {wall:7.2f} s, load {os.getloadavg()[0]:.2f}",
                  flush=True)
    references = read_lines(args.reference)
    first = dtypes[0]
    outputs = {d: read_lines(os.path.join(work, f"decodes.{d}.round0")) for d in dtypes}
    print(f"{'dtype':9s} | best decode loop | speed vs {first} | lines equal to {first} | "
          "sacreBLEU")
    for dtype in dtypes:
        same = sum(a == b for a, b in zip(outputs[dtype], outputs[first]))
        print(f"{dtype:9s} | {min(times[dtype]):7.2f} s | "
              f"{min(times[first]) / min(times[dtype]):.2f}x | {same} of {n_lines} | "
              f"{sacrebleu_corpus_bleu(references, outputs[dtype])[0].score:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
