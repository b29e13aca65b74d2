"""CTranslate2 (fp32 and int8) against t2t_lite's decoder and the original t2t-decoder, on one
checkpoint, in one run.

    python bench/bench_ctranslate2.py --checkpoint T2T_RUN/model.ckpt-N --vocab VOCAB \
        [--t2t_python ../t2t-venv/bin/python --t2t_data_dir T2T_DATA] [--lines 500]

The checkpoint is an original tensor2tensor one (so that t2t-decoder can decode it too; it is
read by t2t_lite's t2t_checkpoint and exported by t2t_lite.export.ct2 in this run); `--vocab`
is its SubwordTextEncoder file. The first `--lines` lines of the toy WMT dev set are decoded
with beam 4, alpha 0.6 (t2t's defaults, 32 sentences per batch, sorted by length) by:

* t2t_lite's in-process decoder (`decoding.decode_lines`, one batch per core at a time as
  `run.py --mode=decode` decodes a file);
* CTranslate2 fp32 and int8 (`ct2.Translator`, `--inter_threads` batches in parallel of
  `--threads` intra-op threads each; by default one thread per batch, a batch per core);
* t2t-decoder of tensor2tensor 1.15.7 (../shared/t2t_speed/t2t_run.py, with its usr_dir problem
  translate_toy_ende8k over `--t2t_data_dir`), when `--t2t_python` is given: its own
  "Elapsed Time" (decoding, after graph building and checkpoint loading) and the whole process.

In-process timings are the best of `--rounds` after a warm-up batch (the machine is shared).
Also printed: greedy and beam agreement of CTranslate2 fp32 with t2t_lite (identical output
lines), the beam differences with both engines' t2t scores, and BLEU against dev.de.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
SHARED = REPO_ROOT.parent / "shared"

from t2t_lite.data_generators import text_encoder
from t2t_lite.decoding import decode_hparams, decoding
from t2t_lite.evaluation import bleu_hook
from t2t_lite.export import ct2
from t2t_lite.hparams_lib import create_hparams
from t2t_lite.models import t2t_checkpoint


def _best_time(fn, rounds: int):
    """(best seconds, last result) of `rounds` calls."""
    best, result = float("inf"), None
    for _ in range(rounds):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def _t2t_decoder(args, source: str, output: str, decode_hparams: str) -> tuple[float, float]:
    """Runs t2t-decoder; returns (its logged decode 'Elapsed Time', whole process seconds)."""
    speed = SHARED / "t2t_speed"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="1", TOY_ENDE_DIR=str(SHARED / "data/wmt_toy_ende"))
    start = time.perf_counter()
    result = subprocess.run(
        [args.t2t_python, str(speed / "t2t_run.py"), "decoder", f"--t2t_usr_dir={speed / 'usr_dir'}",
         "--problem=translate_toy_ende8k", f"--data_dir={args.t2t_data_dir}", "--model=transformer",
         f"--hparams_set={args.hparams_set}", f"--output_dir={os.path.dirname(args.checkpoint)}",
         f"--checkpoint_path={args.checkpoint}", f"--decode_hparams={decode_hparams}",
         f"--decode_from_file={source}", f"--decode_to_file={output}"],
        capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - start
    if result.returncode:
        sys.exit("t2t-decoder failed:\n" + result.stderr[-3000:])
    elapsed = re.findall(r"Elapsed Time: ([0-9.]+)", result.stderr)
    return float(elapsed[-1]) if elapsed else float("nan"), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", required=True, help="t2t checkpoint prefix")
    parser.add_argument("--vocab", required=True, help="its SubwordTextEncoder vocab file")
    parser.add_argument("--hparams_set", default="transformer_tiny")
    parser.add_argument("--source", default=str(SHARED / "data/wmt_toy_ende/dev.en"))
    parser.add_argument("--reference", default=str(SHARED / "data/wmt_toy_ende/dev.de"))
    parser.add_argument("--lines", type=int, default=500)
    parser.add_argument("--beam_size", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument("--extra_length", type=int, default=100)
    parser.add_argument("--threads", type=int, default=0,
                        help="CTranslate2 intra threads (0: ct2.Translator's choice, 1 on CPU)")
    parser.add_argument("--inter_threads", type=int, default=0,
                        help="CTranslate2 batches in parallel (0: ct2.Translator's choice, the "
                        "cores / intra threads on CPU)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--t2t_python", default=None)
    parser.add_argument("--t2t_data_dir", default=None)
    parser.add_argument("--show_differences", type=int, default=10)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}", flush=True)

    with open(args.source, encoding="utf-8") as f:
        lines = [line.strip() for line in f][: args.lines]
    with open(args.reference, encoding="utf-8") as f:
        references = [line.rstrip("\n") for line in f][: args.lines]
    encoder = text_encoder.SubwordTextEncoder(args.vocab)
    model = t2t_checkpoint.load_model(args.checkpoint, create_hparams(args.hparams_set))
    work = tempfile.mkdtemp(prefix="bench_ct2_")
    start = time.perf_counter()
    fp32_dir = ct2.export(model, os.path.join(work, "fp32"), encoder, encoder)
    export_s = time.perf_counter() - start
    int8_dir = ct2.export(model, os.path.join(work, "int8"), encoder, encoder,
                          quantization="int8")
    sizes = {name: os.path.getsize(os.path.join(d, "model.bin")) / 2**20
             for name, d in (("fp32", fp32_dir), ("int8", int8_dir))}
    print(f"export: {export_s:.2f} s; model.bin fp32 {sizes['fp32']:.1f} MB, "
          f"int8 {sizes['int8']:.1f} MB", flush=True)

    def lite(beam_size: int, subset=None):
        hp = decode_hparams.decode_hparams(f"beam_size={beam_size},alpha={args.alpha},"
                                           f"extra_length={args.extra_length},log_results=False,"
                                           "write_beam_scores=True,return_beams=True")
        records = decoding.decode_lines(subset or lines, decoding.make_infer_fn(model, hp),
                                        encoder, encoder, hp,
                                        parallel_batches=decoding.default_parallel_batches())
        # return_beams: "text\tscore\ttext\tscore..." -> best text and its score.
        return [(r.split("\t")[0], float(r.split("\t")[1])) for r in records]

    threads = {"inter_threads": args.inter_threads, "intra_threads": args.threads}
    translators = {"fp32": ct2.Translator(fp32_dir, **threads),
                   "int8": ct2.Translator(int8_dir, **threads)}

    def engine(name: str, beam_size: int, subset=None, **options):
        hyps = translators[name].translate(subset or lines, beam_size=beam_size,
                                           alpha=args.alpha, extra_length=args.extra_length,
                                           **options)
        return [(row[0].text, row[0].score) for row in hyps]

    rows = {}
    lite(args.beam_size, lines[:32])  # traces the decoder
    rows["t2t_lite (TensorFlow)"] = _best_time(lambda: lite(args.beam_size), args.rounds)
    for name in translators:
        engine(name, args.beam_size, lines[:32])
        rows[f"CTranslate2 {name}"] = _best_time(lambda n=name: engine(n, args.beam_size),
                                                 args.rounds)
    if args.t2t_python:
        source = os.path.join(work, "source.txt")
        with open(source, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        output = os.path.join(work, "t2t_decodes.txt")
        elapsed, wall = _t2t_decoder(args, source, output,
                                     f"beam_size={args.beam_size},alpha={args.alpha}")
        with open(output, encoding="utf-8") as f:
            t2t_out = [(line.rstrip("\n"), float("nan")) for line in f]
        rows["t2t-decoder (tensor2tensor 1.15.7)"] = (elapsed, t2t_out)
        print(f"t2t-decoder whole process: {wall:.1f} s", flush=True)

    def target_tokens(outputs) -> int:
        return sum(len(encoder.encode(text)) + 1 for text, _ in outputs)  # + EOS

    base = rows.get("t2t-decoder (tensor2tensor 1.15.7)", rows["t2t_lite (TensorFlow)"])[0]
    print(f"\n{len(lines)} lines, beam {args.beam_size}, alpha {args.alpha}; "
          f"CTranslate2 threads (inter x intra) "
          f"{' x '.join(map(str, ct2.thread_counts('cpu', args.inter_threads, args.threads)))}")
    print("| engine | decode s | sentences/s | target tokens/s | vs t2t-decoder | BLEU |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, (seconds, outputs) in rows.items():
        texts = [text for text, _ in outputs]
        bleu = bleu_hook.sacrebleu_corpus_bleu(references, texts)[0].score
        print(f"| {name} | {seconds:.2f} | {len(lines) / seconds:.1f} | "
              f"{target_tokens(outputs) / seconds:.0f} | {base / seconds:.2f}x | {bleu:.2f} |")

    lite_beam = rows["t2t_lite (TensorFlow)"][1]
    if "t2t-decoder (tensor2tensor 1.15.7)" in rows:
        t2t_texts = [text for text, _ in rows["t2t-decoder (tensor2tensor 1.15.7)"][1]]
        same = sum(a == b for a, b in zip(t2t_texts, (t for t, _ in lite_beam)))
        print(f"\nt2t-decoder vs t2t_lite beam {args.beam_size}: {same}/{len(lines)} identical")
    lite_greedy = lite(1)
    ct2_greedy = engine("fp32", 1)
    same = sum(a[0] == b[0] for a, b in zip(lite_greedy, ct2_greedy))
    print(f"greedy, CTranslate2 fp32 vs t2t_lite: {same}/{len(lines)} identical")
    variants = {
        "t2t penalty re-ranking (default)": {},
        "re-ranking, patience 2": {"patience": 2.0},
        "re-ranking, search penalty 1.0, patience 2": {"patience": 2.0, "length_penalty": 1.0},
        "CTranslate2's own ranking (length_penalty=alpha)": {"gnmt_rescore": False},
    }
    default_outputs = None
    for label, options in variants.items():
        seconds, outputs = _best_time(lambda o=options: engine("fp32", args.beam_size, **o), 1)
        default_outputs = default_outputs or outputs
        same = sum(a[0] == b[0] for a, b in zip(lite_beam, outputs))
        print(f"beam {args.beam_size}, CTranslate2 fp32 vs t2t_lite, {label}: "
              f"{same}/{len(lines)} identical ({seconds:.2f} s)")
    int8_texts = [t for t, _ in rows["CTranslate2 int8"][1]]
    fp32_texts = [t for t, _ in rows["CTranslate2 fp32"][1]]
    print(f"int8 vs fp32 (beam): {sum(a == b for a, b in zip(int8_texts, fp32_texts))}/"
          f"{len(lines)} identical")

    better = worse = 0
    shown = 0
    for i, (a, b) in enumerate(zip(lite_beam, default_outputs)):
        if a[0] == b[0]:
            continue
        if b[1] > a[1]:
            better += 1
        else:
            worse += 1
        if shown < args.show_differences:
            shown += 1
            print(f"  line {i}: t2t_lite {a[1]:.3f} {a[0][:70]!r}\n"
                  f"           CTranslate2 {b[1]:.3f} {b[0][:70]!r}")
    print(f"beam differences (default options): CTranslate2's hypothesis has the higher t2t "
          f"score on {better}, t2t_lite's on {worse}")
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
