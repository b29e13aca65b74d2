"""Recipe: a constituency parser on the Penn Treebank sample, scored with EVALB, in one command.

    python recipes/parse_ptb_sample.py              # the measured defaults (docs/sample_corpora.md)
    python recipes/parse_ptb_sample.py --quick            # seconds: a smoke test (CI)
    python recipes/parse_ptb_sample.py --train_steps=8000 --work_dir=/tmp/parse

Steps, each printed before it runs; the training steps are the `python run.py --mode=...`
commands a user would type, run from the project root:

1. datagen: `parsing_english_ptb_words` (t2t's bracketing with the words in place of the POS
   tags, one shared 4k subword vocab; `--problem=parsing_english_ptb16k` for t2t's own
   linearization) from the sample in its LDC layout, files wsj_0001-0159 for training and
   wsj_0160-0179 as dev (`--wsj_train_sections=0001-0159 --wsj_dev_sections=0160-0179`);
2. the dev sentences and their gold trees (`treebank.write_sentences_and_trees`);
3. train (`--mode=train`), resuming from `<work_dir>/train` when it holds checkpoints;
4. decode the dev sentences with beam search (`--mode=decode --decode_from_file`);
5. repair the decodes into trees over the input words and score them with EVALB's
   COLLINS.prm conventions (`parsing_eval.evalb_decode_files`, with the problem's
   linearization), and score the right-branching baseline
   (`parsing_eval.right_branching_baseline`: gold POS tags, one label S) on the same dev trees.

The last line printed is the summary, e.g.
`RESULT parse_ptb_sample: dev_f1=... precision=... recall=... exact_match=... rb_f1=...
rb_unlabeled_f1=... sentences=273 error_sentences=0 steps=... train_wall_s=...
total_wall_s=...` (percentages; `rb_` is the right-branching baseline). Files in --work_dir:
`data/`, `tmp/`, `train/`, `dev.sentences.txt`, `dev.gold.trees`, `dev.decodes`,
`dev.parsed.trees` (the repaired decodes), `dev.right_branching.trees`, `scores.json`.

`--quick` trains a one-layer model for a few steps and decodes the first 20 dev sentences with a
short decode length: it checks that the pipeline runs, its scores mean nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import shlex
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # Run as a script: make t2t_lite importable.
    sys.path.insert(0, str(ROOT))

from t2t_lite.data_generators import treebank
from t2t_lite.evaluation import parsing_eval

# Problem -> the linearization of its targets (parsing_eval's repair of the decodes).
PROBLEMS = {"parsing_english_ptb16k": "tags", "parsing_english_ptb16k_xx": "tags",
            "parsing_english_ptb_words": "words"}
TRAIN_FILES = "0001-0159"
DEV_FILES = "0160-0179"

# The best settings of the trials reported in docs/sample_corpora.md.
DEFAULTS = {
    "problem": "parsing_english_ptb_words",
    "hparams_set": "transformer_tiny",
    "hparams": "batch_size=4096,learning_rate_warmup_steps=1000",
    "train_steps": 12000,
    "decode_hparams": "beam_size=4,alpha=0.6,extra_length=250,batch_size=32",
    "max_dev_sentences": 0,
}
QUICK = {
    "problem": "parsing_english_ptb_words",
    "hparams_set": "transformer_tiny",
    # batch_shuffle_size=4: t2t's 512-batch shuffle buffer would be filled before step 1.
    "hparams": ("num_hidden_layers=1,hidden_size=32,filter_size=64,num_heads=2,batch_size=1024,"
                "learning_rate_warmup_steps=10,batch_shuffle_size=4"),
    "train_steps": 20,
    "decode_hparams": "beam_size=2,alpha=0.6,extra_length=20,batch_size=32",
    "max_dev_sentences": 20,
}


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python recipes/parse_ptb_sample.py",
        description="Train, decode and score a Transformer parser on the PTB sample.")
    parser.add_argument("--work_dir", default=str(ROOT / "runs" / "parse_ptb_sample"),
                        help="where data, checkpoints, decodes and scores go (default: "
                             "runs/parse_ptb_sample)")
    parser.add_argument("--ptb_dir", default=None,
                        help="the treebank sample in its LDC layout (default: "
                             "../shared/data/ptb_sample relative to the project root)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny model, a few steps, 20 dev sentences: a smoke test")
    parser.add_argument("--problem", default=None, choices=sorted(PROBLEMS),
                        help="t2t's linearization (POS tags in the targets), the same with the "
                             "words' tags written XX, or with the words in place of the tags")
    parser.add_argument("--hparams_set", default=None)
    parser.add_argument("--hparams", default=None, help="overrides of the hparams set")
    parser.add_argument("--train_steps", type=int, default=None)
    parser.add_argument("--decode_hparams", default=None)
    parser.add_argument("--max_dev_sentences", type=int, default=None,
                        help="score only the first N dev sentences (0 = all 273)")
    parser.add_argument("--random_seed", type=int, default=1)
    args = parser.parse_args(argv)
    for key, value in (QUICK if args.quick else DEFAULTS).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def _run(args: list[str]) -> None:
    """Prints and runs `python run.py ...` from the project root; exits on failure."""
    command = [sys.executable, "run.py", *args]
    print("+ " + shlex.join(["python", *command[1:]]), flush=True)
    status = subprocess.run(command, cwd=ROOT, check=False).returncode
    if status:
        raise SystemExit(f"error: the command above failed with status {status}")


def _write_dev(ptb_dir: str, work: pathlib.Path, limit: int) -> tuple[pathlib.Path, ...]:
    """Dev sentences and gold trees (the first `limit` when > 0); returns their paths."""
    sentences, gold = work / "dev.sentences.txt", work / "dev.gold.trees"
    print(f"+ treebank.write_sentences_and_trees({ptb_dir!r}, {DEV_FILES!r}, ...)", flush=True)
    treebank.write_sentences_and_trees(ptb_dir, DEV_FILES, sentences, gold)
    if limit > 0:
        for path in (sentences, gold):
            lines = path.read_text(encoding="utf-8").splitlines()[:limit]
            path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return sentences, gold


def _latest_step(train_dir: pathlib.Path) -> int:
    """The step of the newest checkpoint (`ckpt-N.index`) in `train_dir`, 0 if none."""
    steps = [int(p.name[5:-6]) for p in train_dir.glob("ckpt-*.index")
             if p.name[5:-6].isdigit()]
    return max(steps, default=0)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    start = time.time()
    work = pathlib.Path(args.work_dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    ptb_dir = (str(pathlib.Path(args.ptb_dir).resolve()) if args.ptb_dir
               else os.path.normpath(ROOT / ".." / "shared" / "data" / "ptb_sample"))
    data, train = work / "data", work / "train"
    _run(["--mode=datagen", f"--problem={args.problem}", f"--data_dir={data}",
          f"--tmp_dir={work / 'tmp'}", f"--wsj_dir={ptb_dir}",
          f"--wsj_train_sections={TRAIN_FILES}", f"--wsj_dev_sections={DEV_FILES}"])
    sentences, gold = _write_dev(ptb_dir, work, args.max_dev_sentences)

    train_start = time.time()
    _run(["--mode=train", f"--problem={args.problem}", f"--data_dir={data}",
          f"--output_dir={train}", f"--hparams_set={args.hparams_set}",
          f"--hparams={args.hparams}", f"--train_steps={args.train_steps}",
          f"--save_checkpoints_steps={min(1000, args.train_steps)}", "--keep_checkpoint_max=2",
          f"--random_seed={args.random_seed}"])
    train_wall = time.time() - train_start

    decodes = work / "dev.decodes"
    _run(["--mode=decode", f"--problem={args.problem}", f"--data_dir={data}",
          f"--output_dir={train}", f"--hparams_set={args.hparams_set}",
          f"--decode_hparams={args.decode_hparams}", f"--decode_from_file={sentences}",
          f"--decode_to_file={decodes}"])

    print(f"+ parsing_eval.evalb_decode_files({sentences.name}, {decodes.name}, {gold.name})",
          flush=True)
    result = parsing_eval.evalb_decode_files(sentences, decodes, gold,
                                             linearization=PROBLEMS[args.problem])
    (work / "dev.parsed.trees").write_text(
        "".join(t + "\n" for t in result["test_trees"]), encoding="utf-8")
    print(parsing_eval.summary_text(result))
    gold_trees = treebank.read_trees_file(gold)
    baseline = parsing_eval.right_branching_baseline(gold_trees)
    (work / "dev.right_branching.trees").write_text(
        "".join(t + "\n" for t in baseline["test_trees"]), encoding="utf-8")

    steps = _latest_step(train)
    summary = {
        "dev_f1": result["f1"], "precision": result["precision"], "recall": result["recall"],
        "exact_match": result["exact_match"], "rb_f1": baseline["f1"],
        "rb_unlabeled_f1": baseline["unlabeled"]["f1"],
        "sentences": result["num_sentences"],
        "error_sentences": result["num_error_sentences"] + result["num_skip_sentences"],
        "steps": steps, "train_wall_s": train_wall, "total_wall_s": time.time() - start,
    }
    scores = dict(summary, problem=args.problem, hparams_set=args.hparams_set,
                  hparams=args.hparams, decode_hparams=args.decode_hparams,
                  tagging_accuracy=result["tagging_accuracy"],
                  rb_precision=baseline["precision"], rb_recall=baseline["recall"])
    (work / "scores.json").write_text(json.dumps(scores, indent=2) + "\n", encoding="utf-8")
    print("RESULT parse_ptb_sample: " + " ".join(
        f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in summary.items()),
        flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
