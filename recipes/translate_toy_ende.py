"""Translation recipe on the toy WMT En-De sample: datagen -> train -> decode -> BLEU, one command.

    python recipes/translate_toy_ende.py                # t2t's recipe, in full (~45 min, 2 cores)
    python recipes/translate_toy_ende.py --tuned        # the tuned recipe (best of the search)
    python recipes/translate_toy_ende.py --quick        # a few steps of a tiny model (CI)

By default this is tensor2tensor's own recipe for this corpus, the one whose numbers
docs/sample_corpora.md sets beside t2t 1.15.7's: `translate_files` over
`../shared/data/wmt_toy_ende` (9,000 train pairs, 500 dev pairs) with one shared 8k subword
vocab (`--approx_vocab_size=8192`), `transformer_tiny` (batch 4096 tokens, 8,000 warmup steps),
4,800 steps, dev evaluation every 1,000 steps, then beam 4 / alpha 0.6 decoding of the 500 dev
sentences (newest checkpoint, and the average of the last 3) scored with sacreBLEU and t2t's
BLEU.

Every step is a `python run.py --mode=...` command, printed before it runs, so the recipe is
also the list of commands a user types. The last line printed is the summary:

    RESULT translate_toy_ende: steps 4800 | dev loss ... acc ... | sacreBLEU ... (avg3 ...) | ...

`--tuned` selects the settings that the search on this corpus (docs/sample_corpora.md) found
best within the same budget (4,800 steps of ~3.4k target tokens): a 4k vocab,
`transformer_small` with 3 layers, half t2t's learning rate with a linear cool-down over the
last 1,600 steps, more dropout and label smoothing, beam 4 / alpha 1.0. `--approx_vocab_size`,
`--hparams_set`, `--hparams`, `--train_steps`, `--eval_every`, `--decode_hparams` and
`--average_last` override either preset. Re-running with the same `--work_dir` reuses the
generated data and resumes training from the newest checkpoint.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CORPUS = os.path.join(os.path.dirname(PROJECT), "shared", "data", "wmt_toy_ende")

# Presets: parse_args takes every setting the command line leaves unset from one of these.
# t2t's recipe (see the module docstring), the default.
T2T_RECIPE = {"approx_vocab_size": 8192, "hparams_set": "transformer_tiny", "hparams": "",
              "train_steps": 4800, "eval_every": 1000, "decode_hparams": "beam_size=4,alpha=0.6",
              "average_last": 3}
# The best settings of docs/sample_corpora.md's search ("Towards a tuned recipe"), same
# training budget.
TUNED = {"approx_vocab_size": 4096, "hparams_set": "transformer_small",
         "hparams": "num_hidden_layers=3,learning_rate_constant=1.0,"
                    "learning_rate_warmup_steps=1000,layer_prepostprocess_dropout=0.3,"
                    "attention_dropout=0.2,relu_dropout=0.2,label_smoothing=0.2,"
                    "learning_rate_schedule=constant*linear_warmup*rsqrt_decay*"
                    "rsqrt_hidden_size*linear_decay,learning_rate_decay_steps=1600",
         "train_steps": 4800, "eval_every": 500, "decode_hparams": "beam_size=4,alpha=1.0",
         "average_last": 5}
# --quick: a model of seconds, to check the path (batch_shuffle_size=4: t2t's 512-batch
# shuffle buffer would be filled before step 1).
QUICK = {"approx_vocab_size": 8192, "hparams_set": "transformer_tiny",
         "hparams": "hidden_size=32,filter_size=64,num_heads=2,num_hidden_layers=1,"
                    "batch_size=1024,learning_rate_warmup_steps=10,batch_shuffle_size=4",
         "train_steps": 12, "eval_every": 6, "decode_hparams": "beam_size=2,alpha=0.6",
         "average_last": 3}
QUICK_DEV_LINES = 12


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The recipe's options (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work_dir", default=os.path.join(PROJECT, "runs", "translate_toy_ende"),
                    help="data/, train/ and decodes go here (default: runs/translate_toy_ende)")
    ap.add_argument("--corpus", default=DEFAULT_CORPUS,
                    help="folder with train.en/train.de/dev.en/dev.de")
    ap.add_argument("--approx_vocab_size", type=int, default=None,
                    help="shared subword vocab size (t2t's recipe: 8192, --tuned: 4096)")
    ap.add_argument("--subword_dropout", type=float, default=0.0,
                    help="datagen's MaxMatch-dropout rate for the training data (0: t2t's)")
    ap.add_argument("--subword_dropout_copies", type=int, default=1,
                    help="passes over the training corpus written with --subword_dropout")
    ap.add_argument("--bidirectional", action="store_true",
                    help="train one model on En->De and De->En (a target-language tag "
                         "starts each source line); dev is En->De")
    ap.add_argument("--hparams_set", default=None)
    ap.add_argument("--hparams", default=None, help='overrides, "a=1,b=2"')
    ap.add_argument("--train_steps", type=int, default=None)
    ap.add_argument("--eval_every", type=int, default=None,
                    help="dev evaluation (and checkpoint) every this many steps")
    ap.add_argument("--decode_hparams", default=None)
    ap.add_argument("--average_last", type=int, default=None,
                    help="also decode the average of the last N checkpoints (0: skip; "
                         "t2t's recipe: 3, --tuned: 5)")
    ap.add_argument("--dev_lines", type=int, default=0,
                    help="decode only the first N dev lines (0: all)")
    ap.add_argument("--random_seed", type=int, default=1)
    preset_group = ap.add_mutually_exclusive_group()
    preset_group.add_argument("--tuned", action="store_true",
                              help="the best settings of the search in docs/sample_corpora.md, "
                                   "same budget")
    preset_group.add_argument("--quick", action="store_true",
                              help="a tiny model for a few steps on a few dev lines: checks "
                                   "the path")
    args = ap.parse_args(argv)
    preset = QUICK if args.quick else TUNED if args.tuned else T2T_RECIPE
    for name, value in preset.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.quick and not args.dev_lines:
        args.dev_lines = QUICK_DEV_LINES
    for name in ("train.en", "train.de", "dev.en", "dev.de"):
        if not os.path.isfile(os.path.join(args.corpus, name)):
            ap.error(f"--corpus={args.corpus}: no {name} there")
    return args


def run(command: list[str], log_path: str | None = None) -> str:
    """Runs one `run.py` command from the project root, echoing it; returns its output.

    The output is shown as it comes and, when `log_path` is given, kept there too.
    Raises SystemExit with the command's status when it fails.
    """
    print("$ " + " ".join(command), flush=True)
    lines = []
    with subprocess.Popen(command, cwd=PROJECT, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True) as proc:
        for line in proc.stdout:
            sys.stdout.write(line)
            lines.append(line)
    if log_path:
        with open(log_path, "a", encoding="utf-8") as f:
            f.writelines(lines)
    if proc.returncode:
        sys.exit(f"recipe stopped: the command above exited with status {proc.returncode}")
    return "".join(lines)


def dev_curve(train_dir: str) -> list[tuple[int, float, float]]:
    """(step, dev loss, dev accuracy) of every evaluation, from the run's TensorBoard events."""
    sys.path.insert(0, PROJECT)
    from t2t_lite.visualization.plots import read_scalars

    scalars = read_scalars(os.path.join(train_dir, "eval"))
    loss = dict(scalars.get("loss", []))
    accuracy_tags = [t for t in scalars if t.endswith("targets/accuracy")]
    accuracy = dict(scalars[accuracy_tags[0]]) if accuracy_tags else {}
    return [(step, loss[step], accuracy.get(step, float("nan"))) for step in sorted(loss)]


def bleu_scores(output: str) -> tuple[float, float]:
    """(sacreBLEU, t2t's cased BLEU) from the lines `run.py --mode=bleu` prints."""
    sacre = re.search(r"^BLEU\S* = ([0-9.]+)", output, re.MULTILINE)
    cased = re.search(r"^BLEU_cased = \s*([0-9.]+)", output, re.MULTILINE)
    if not sacre or not cased:
        sys.exit("recipe stopped: no BLEU in the output of --mode=bleu")
    return float(sacre.group(1)), float(cased.group(1))


TARGET_TAGS = {"de": "<2de>", "en": "<2en>"}


def write_bidirectional_corpus(corpus_dir: str, out_dir: str) -> dict[str, str]:
    """Writes the corpus for training both directions with one model; returns its file paths.

    Johnson et al. (2017): a token naming the target language starts every source line, so
    one model learns En->De and De->En from the same pairs, each side of the corpus serving
    as source and as target. The training split holds each pair twice (En->De, then De->En;
    training shuffles); the dev split stays En->De with its tag, so dev loss and BLEU measure
    the recipe's direction. Returns {"train_src", "train_tgt", "dev_src", "dev_tgt"} paths.
    """
    def read(name: str) -> list[str]:
        with open(os.path.join(corpus_dir, name), encoding="utf-8") as f:
            return f.read().splitlines()

    en, de = read("train.en"), read("train.de")
    if len(en) != len(de):
        sys.exit(f"recipe stopped: {corpus_dir}: train.en has {len(en)} lines, "
                 f"train.de {len(de)}")
    files = {
        "train_src": [f"{TARGET_TAGS['de']} {line}" for line in en]
                     + [f"{TARGET_TAGS['en']} {line}" for line in de],
        "train_tgt": de + en,
        "dev_src": [f"{TARGET_TAGS['de']} {line}" for line in read("dev.en")],
        "dev_tgt": read("dev.de"),
    }
    os.makedirs(out_dir, exist_ok=True)
    paths = {}
    for key, lines in files.items():
        paths[key] = os.path.join(out_dir, key.replace("_", "."))
        with open(paths[key], "w", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
    return paths


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # TensorFlow's C++ start-up lines (oneDNN, CPU features) in every step say nothing here.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    start = time.time()
    work = os.path.abspath(args.work_dir)
    data, train, tmp = (os.path.join(work, d) for d in ("data", "train", "tmp"))
    os.makedirs(work, exist_ok=True)
    log = os.path.join(work, "recipe.log")
    python = [sys.executable, "run.py"]
    problem = ["--problem=translate_files", f"--approx_vocab_size={args.approx_vocab_size}",
               f"--data_dir={data}"]
    if args.bidirectional:
        corpus = write_bidirectional_corpus(args.corpus, os.path.join(work, "bidirectional"))
    else:
        corpus = {k: os.path.join(args.corpus, f) for k, f in (
            ("train_src", "train.en"), ("train_tgt", "train.de"),
            ("dev_src", "dev.en"), ("dev_tgt", "dev.de"))}

    dropout = ([f"--subword_dropout={args.subword_dropout}",
                f"--subword_dropout_copies={args.subword_dropout_copies}"]
               if args.subword_dropout else [])
    run(python + ["--mode=datagen", *problem, f"--tmp_dir={tmp}", *dropout]
        + [f"--{k}={v}" for k, v in corpus.items()], log)
    train_start = time.time()
    hparams = [f"--hparams={args.hparams}"] if args.hparams else []
    run(python + ["--mode=train_and_eval", *problem, f"--hparams_set={args.hparams_set}",
                  *hparams, f"--output_dir={train}", f"--train_steps={args.train_steps}",
                  f"--local_eval_frequency={args.eval_every}", "--eval_steps=0",
                  f"--random_seed={args.random_seed}"], log)
    train_minutes = (time.time() - train_start) / 60

    sources, references = corpus["dev_src"], corpus["dev_tgt"]
    if args.dev_lines:
        sources, references = (os.path.join(work, f"dev.first{args.dev_lines}.{lang}")
                               for lang in ("en", "de"))
        for src, dst in ((corpus["dev_src"], sources), (corpus["dev_tgt"], references)):
            with open(src, encoding="utf-8") as f:
                head = [next(f) for _ in range(args.dev_lines)]
            with open(dst, "w", encoding="utf-8") as f:
                f.writelines(head)

    def decode_and_score(name: str, checkpoint: list[str]) -> tuple[float, float]:
        decodes = os.path.join(work, f"dev.{name}.decodes")
        run(python + ["--mode=decode", *problem, f"--hparams_set={args.hparams_set}", *hparams,
                      f"--output_dir={train}", *checkpoint,
                      # 1,000 logged INPUT/OUTPUT lines would bury the recipe's own output.
                      f"--decode_hparams={args.decode_hparams},log_results=False",
                      f"--decode_from_file={sources}", f"--decode_to_file={decodes}"], log)
        return bleu_scores(run(python + ["--mode=bleu", f"--translation={decodes}",
                                         f"--reference={references}"], log))

    decode_start = time.time()
    sacre, cased = decode_and_score("last", [])
    averaged = ""
    if args.average_last > 1:
        avg_dir = os.path.join(work, f"avg{args.average_last}")
        run(python + ["--mode=average", f"--output_dir={train}", f"--n={args.average_last}",
                      f"--avg_output_dir={avg_dir}"], log)
        avg_sacre, _ = decode_and_score(f"avg{args.average_last}",
                                        [f"--checkpoint_path={avg_dir}"])
        averaged = f" (avg{args.average_last} {avg_sacre:.2f})"
    decode_minutes = (time.time() - decode_start) / 60

    curve = dev_curve(train)
    print("dev evaluations (step, loss, accuracy):")
    for step, loss, accuracy in curve:
        print(f"  {step:6d}  {loss:.3f}  {accuracy:.3f}")
    last_step, last_loss, last_accuracy = curve[-1] if curve else (0, float("nan"), float("nan"))
    vocab = f"vocab {args.approx_vocab_size}"
    if args.subword_dropout:
        vocab += (f", subword dropout {args.subword_dropout:g} x "
                  f"{args.subword_dropout_copies}")
    if args.bidirectional:
        vocab += ", trained both directions"
    print(f"RESULT translate_toy_ende: steps {last_step} | dev loss {last_loss:.3f} "
          f"acc {last_accuracy:.3f} | sacreBLEU {sacre:.2f}{averaged} | t2t BLEU cased "
          f"{cased:.2f} | {vocab} | {args.hparams_set} {args.hparams or '(set defaults)'} | "
          f"{args.decode_hparams} | train {train_minutes:.1f} min, decode+BLEU "
          f"{decode_minutes:.1f} min, total {(time.time() - start) / 60:.1f} min", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
