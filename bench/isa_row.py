"""One row of bench/README.md's per-ISA table ("Per ISA: t2t_lite against t2t"), measured on
this machine in one run: t2t_lite against the original tensor2tensor in training and decoding,
and the training step's share of its matmul rate.

    python bench/isa_row.py --t2t_python ../t2t-venv/bin/python

runs, one after another (nothing else should run meanwhile; each step's log is kept in --out):

1. `../shared/t2t_speed/compare_train_speed.py` (transformer_tiny on the toy WMT data,
   `--train_steps` steps, `--rounds` alternating rounds of t2t-trainer and `run.py`);
2. `../shared/t2t_speed/compare_decode_speed.py` on a t2t checkpoint (500 dev lines, beam 4;
   identical lines counted): `--decode_checkpoint`, else step 1's last round's. The row says
   how long the decoded lines are against the reference's: a model of a few hundred steps
   emits mostly empty lines or repeats a word up to the length limit, and the speed ratio
   moves with what it emits (bench/README.md, "Per ISA");
3. `bench/bench_training.py` for transformer_tiny at the bench's vocabulary (8192) and at the
   toy data's own vocabulary size (its subword vocabulary's, 8085 here), and for
   transformer_base (batch 32 x 32): the step's % of its matmul rate by wall time;

and prints the machine line, the table row (markdown) and each per-ISA goal for this
machine's ISA with its figure, met or not. The bench scripts run with the oneDNN setting that
`run.py --onednn=auto` takes on this machine. The compare scripts get the environment as it
is: their `run.py` decides for itself, and tensor2tensor runs with TensorFlow's default
(oneDNN off on x86 CPUs without AVX512-VNNI, AVX-VNNI, AVX512-BF16 or AMX); `--t2t_onednn`
sets TF_ENABLE_ONEDNN_OPTS=1 for both sides, the stronger baseline. About 25 minutes on 2
AVX2 cores.

An AVX2 row's proxy on an AVX512 machine: `ONEDNN_MAX_CPU_ISA=AVX2` (oneDNN's kernels, both
sides) and `T2T_LITE_KERNEL_MARCH=haswell` (t2t_lite's native kernels as AVX2 code); the run
is then judged by the AVX2 goals (`goal_isa`).
"""
from __future__ import annotations

import argparse
import datetime
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, PROJECT)
from machine import cpu_flags, describe_cpu, vector_isa  # noqa: E402

from t2t_lite.data_generators.text_encoder import SubwordTextEncoder  # noqa: E402
from t2t_lite.utils import onednn  # noqa: E402

# The per-ISA goals: training steps/s and decoding time against t2t's by vector unit (AVX512
# covers the AVX512-BF16 and AMX machines), the step's matmul share on every CPU.
TRAINING_GOAL = {"AVX2": 1.25, "AVX512": 1.5}
DECODING_GOAL = {"AVX2": 1.8, "AVX512": 2.0}
TINY_GOAL = 85.0
BASE_GOAL = 90.0


class ParseError(ValueError):
    """A tool's output lacks the summary line this script reads (the tool failed or changed)."""


def _search(pattern: str, text: str, what: str) -> re.Match:
    match = re.search(pattern, text, re.MULTILINE)
    if match is None:
        raise ParseError(f"no {what} in the output (pattern {pattern!r})")
    return match


def parse_train_compare(text: str) -> dict:
    """compare_train_speed.py's summary: {"t2t", "lite"} steps/s (median over the rounds'
    progress lines), "ratio" (t2t_lite / t2t), "t2t_rss", "lite_rss" (MB)."""
    t2t = _search(r"^t2t\s+([0-9.]+) steps/s, peak RSS ([0-9]+) MB", text, "t2t summary")
    lite = _search(r"^t2t_lite\s+([0-9.]+) steps/s, peak RSS ([0-9]+) MB", text,
                   "t2t_lite summary")
    ratio = _search(r"training speed ([0-9.]+)x", text, "speed ratio")
    return {"t2t": float(t2t[1]), "lite": float(lite[1]), "ratio": float(ratio[1]),
            "t2t_rss": int(t2t[2]), "lite_rss": int(lite[2])}


def parse_decode_compare(text: str) -> dict:
    """compare_decode_speed.py's summary: {"t2t", "lite"} seconds per decode process
    (median of the rounds), "ratio", "identical" and "lines" (t2t's output lines)."""
    same = _search(r"identical output lines: ([0-9]+) of ([0-9]+)", text, "identical lines")
    times = _search(r"^t2t ([0-9.]+) s, t2t_lite ([0-9.]+) s per whole decode process; "
                    r"t2t_lite decoding speed ([0-9.]+)x", text, "decode summary")
    return {"t2t": float(times[1]), "lite": float(times[2]), "ratio": float(times[3]),
            "identical": int(same[1]), "lines": int(same[2])}


def parse_bench_training(text: str, hparams_set: str) -> dict:
    """bench_training.py's t2t_lite summary for `hparams_set`: "wall" and "cpu" (% of its
    matmul rate, median round), "ms" (median ms per step), "matmul_rate" (GFLOP/s of
    tf.matmul on the model's shapes)."""
    name = re.escape(hparams_set)
    # The float32 line ("t2t_lite  9169 tokens/s ..."), not "t2t_lite bfloat16 ...".
    line = _search(rf"^{name}\s+batch \S+ t2t_lite\s+[0-9]+ tokens/s.*", text,
                   f"{hparams_set} float32 summary")[0]
    share = _search(r"([0-9.]+)% of its matmul rate \(median round, wall time; by CPU time "
                    r"([0-9.]+)%\)", line, "% of the matmul rate")
    ms = _search(r"median round ([0-9]+) ms/step", line, "ms per step")
    rate = _search(rf"^{name}\s+float32 tf.matmul on the model's shapes: ([0-9.]+) GFLOP/s",
                   text, "matmul rate")
    return {"wall": float(share[1]), "cpu": float(share[2]), "ms": int(ms[1]),
            "matmul_rate": float(rate[1])}


def output_words(path: str) -> float:
    """Mean words per line of a decode output (or reference) file."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    return sum(len(line.split()) for line in lines) / max(len(lines), 1)


def _decoded_lines(decode: dict) -> str:
    """What the decode comparison wrote: identical lines, and their mean length beside the
    reference's where `decode` holds "words" and "reference_words"."""
    text = f"{decode['identical']}/{decode['lines']} identical"
    if "words" in decode:
        text += (f", {decode['words']:.1f} words per line (reference "
                 f"{decode['reference_words']:.1f})")
    return text


def goals(isa: str, train: dict, decode: dict, tiny: dict, tiny_data: dict,
          base: dict) -> list[tuple[str, str, bool]]:
    """The per-ISA goals on a CPU with vector unit `isa`: (goal, this machine's figure, met)."""
    training_goal = TRAINING_GOAL["AVX512" if isa == "AVX512" else "AVX2"]
    decoding_goal = DECODING_GOAL["AVX512" if isa == "AVX512" else "AVX2"]
    return [
        (f"training >= {training_goal}x t2t's steps/s", f"{train['ratio']:.2f}x",
         train["ratio"] >= training_goal),
        (f"decoding >= {decoding_goal}x t2t, lines identical",
         f"{decode['ratio']:.2f}x, {_decoded_lines(decode)}",
         decode["ratio"] >= decoding_goal and decode["identical"] == decode["lines"]),
        (f"transformer_tiny step >= {TINY_GOAL:.0f}% of its matmul rate (bench vocabulary)",
         f"{tiny['wall']:.1f}%", tiny["wall"] >= TINY_GOAL),
        (f"transformer_tiny step >= {TINY_GOAL:.0f}% at the toy data's vocabulary",
         f"{tiny_data['wall']:.1f}%", tiny_data["wall"] >= TINY_GOAL),
        (f"transformer_base step >= {BASE_GOAL:.0f}% of its matmul rate",
         f"{base['wall']:.1f}%", base["wall"] >= BASE_GOAL),
    ]


def table_row(machine: str, when: str, train: dict, decode: dict, tiny: dict,
              tiny_vocab: int, tiny_data: dict, data_vocab: int, base: dict) -> str:
    """The markdown row of the per-ISA table."""
    return (f"| `{machine}` | {when} | {train['t2t']:.2f} -> {train['lite']:.2f} = "
            f"**{train['ratio']:.2f}x** | {decode['t2t']:.1f} -> {decode['lite']:.1f} s = "
            f"**{decode['ratio']:.2f}x**, {_decoded_lines(decode)} | {tiny['wall']:.1f}% at "
            f"V = {tiny_vocab} ({tiny_data['wall']:.1f}% at V = {data_vocab}) | "
            f"{base['wall']:.1f}% |")


def onednn_environment() -> dict:
    """The process environment with TF_ENABLE_ONEDNN_OPTS as `run.py --onednn=auto` sets it
    here (measured once per CPU and cached, as run.py does)."""
    env = dict(os.environ)
    choice = onednn.decide_on_this_machine("auto", env, 128, 512)
    onednn.apply(choice, env)
    print(choice.line(), flush=True)
    return env


def run_step(title: str, cmd: list[str], log: str, env: dict) -> str:
    """Runs one measurement with its output in `log` (and echoed); returns the output."""
    print(f"== {title}: {' '.join(cmd)}", flush=True)
    start = datetime.datetime.now()
    lines = []
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(cmd, cwd=PROJECT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            out.write(line)
            lines.append(line)
            if not line.startswith(("I0000", "W0000", "E0000", "WARNING: All log")):
                print("   " + line, end="", flush=True)
        proc.wait()
    if proc.returncode:
        sys.exit(f"isa_row: {title} failed (exit {proc.returncode}); its output: {log}")
    print(f"   ({(datetime.datetime.now() - start).total_seconds():.0f} s)", flush=True)
    return "".join(lines)


def goal_isa(isa: str, environ=os.environ) -> str:
    """The ISA whose goals a run is judged by: the CPU's, or AVX2 where oneDNN is held to
    AVX2 kernels on an AVX512 CPU (`ONEDNN_MAX_CPU_ISA=AVX2`, the AVX2 proxy)."""
    cap = environ.get("ONEDNN_MAX_CPU_ISA", "").strip().upper()
    return "AVX2" if isa == "AVX512" and cap.startswith("AVX2") else isa


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--t2t_python", required=True,
                        help="python of the tensor2tensor venv "
                             "(../shared/t2t_speed/setup_t2t_venv.sh)")
    parser.add_argument("--shared", default=os.environ.get(
                            "T2T_LITE_SHARED", os.path.join(os.path.dirname(PROJECT), "shared")),
                        help="the shared folder holding t2t_speed/ (default: $T2T_LITE_SHARED, "
                             "as for the tests, else ../shared beside the checkout; from a "
                             "worktree elsewhere give one of them)")
    parser.add_argument("--work", default=os.path.join(os.path.dirname(PROJECT), "t2t-speed-work"),
                        help="work folder of the compare scripts (data, checkpoints, logs)")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(PROJECT), "isa-row-logs"),
                        help="folder for this script's logs")
    parser.add_argument("--train_steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--t2t_onednn", action="store_true",
                        help="run tensor2tensor (and t2t_lite) with TF_ENABLE_ONEDNN_OPTS=1 in "
                             "the comparisons; default: TensorFlow's default for t2t")
    parser.add_argument("--decode_checkpoint", default="",
                        help="t2t checkpoint prefix to decode (model.ckpt-N); default: the last "
                             "training round's (--train_steps steps)")
    args = parser.parse_args()

    compare = os.path.join(args.shared, "t2t_speed")
    if not os.path.isfile(os.path.join(compare, "compare_train_speed.py")):
        sys.exit(f"isa_row: no compare_train_speed.py in {compare} (--shared or "
                 "T2T_LITE_SHARED)")
    if not os.access(args.t2t_python, os.X_OK):
        sys.exit(f"isa_row: --t2t_python {args.t2t_python} is not an executable "
                 f"(make the venv with {compare}/setup_t2t_venv.sh)")
    os.makedirs(args.out, exist_ok=True)
    isa = vector_isa(cpu_flags(onednn.read_cpuinfo()))
    machine = describe_cpu()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=PROJECT,
                            capture_output=True, text=True).stdout.strip() or "unknown commit"
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"machine: {machine}\ncode: {commit}\nstarted: {when}", flush=True)
    cap, march = os.environ.get("ONEDNN_MAX_CPU_ISA"), os.environ.get("T2T_LITE_KERNEL_MARCH")
    if cap or march:
        print(f"ONEDNN_MAX_CPU_ISA={cap or '(unset)'}, native kernels built for "
              f"-march={march or 'native'}", flush=True)
    env = onednn_environment()
    compare_env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="1") if args.t2t_onednn else dict(
        os.environ)
    t2t_onednn = compare_env.get("TF_ENABLE_ONEDNN_OPTS", "TensorFlow's default")
    print(f"tensor2tensor's oneDNN: TF_ENABLE_ONEDNN_OPTS={t2t_onednn}", flush=True)
    python = sys.executable

    text = run_step("training, t2t against t2t_lite", [
        python, os.path.join(compare, "compare_train_speed.py"), "--t2t_python", args.t2t_python,
        "--lite_python", python, "--project", PROJECT, "--work", args.work,
        "--steps", str(args.train_steps), "--rounds", str(args.rounds)],
        os.path.join(args.out, "compare_train.log"), compare_env)
    train = parse_train_compare(text)
    checkpoint = args.decode_checkpoint or os.path.join(
        args.work, f"t2t_train_{args.rounds - 1}", f"model.ckpt-{args.train_steps}")
    text = run_step("decoding, t2t against t2t_lite", [
        python, os.path.join(compare, "compare_decode_speed.py"), "--t2t_python",
        args.t2t_python, "--lite_python", python, "--project", PROJECT, "--work", args.work,
        "--checkpoint", checkpoint, "--rounds", str(args.rounds)],
        os.path.join(args.out, "compare_decode.log"), compare_env)
    decode = parse_decode_compare(text)
    decode["words"] = output_words(os.path.join(args.work, f"decode_t2t_{args.rounds - 1}.txt"))
    decode["reference_words"] = output_words(os.path.join(
        os.path.dirname(compare), "data", "wmt_toy_ende", "dev.de"))

    data_vocab = SubwordTextEncoder(os.path.join(
        args.work, "lite_data", "vocab.translate_files.8192.subwords")).vocab_size
    bench = os.path.join(HERE, "bench_training.py")
    tiny_args = ["--hparams_sets", "transformer_tiny", "--batch_tokens", "4096", "--steps", "5",
                 "--rounds", "6", "--dtypes", "float32", "--no_baseline"]
    tiny_vocab = 8192
    tiny = parse_bench_training(run_step(
        f"transformer_tiny step, V = {tiny_vocab}", [python, bench, *tiny_args, "--vocab_size",
                                                     str(tiny_vocab)],
        os.path.join(args.out, "bench_tiny.log"), env), "transformer_tiny")
    tiny_data = parse_bench_training(run_step(
        f"transformer_tiny step, V = {data_vocab}", [python, bench, *tiny_args, "--vocab_size",
                                                     str(data_vocab)],
        os.path.join(args.out, "bench_tiny_data_vocab.log"), env), "transformer_tiny")
    base = parse_bench_training(run_step("transformer_base step", [
        python, bench, "--hparams_sets", "transformer_base", "--batch_tokens", "1024", "--steps",
        "2", "--rounds", "3", "--dtypes", "float32", "--no_baseline"],
        os.path.join(args.out, "bench_base.log"), env), "transformer_base")

    print(f"\nmachine: {machine}; t2t_lite's oneDNN: TF_ENABLE_ONEDNN_OPTS="
          f"{env.get('TF_ENABLE_ONEDNN_OPTS', '(TensorFlow default)')}; tensor2tensor's: "
          f"TF_ENABLE_ONEDNN_OPTS={t2t_onednn}")
    print("| ISA (machine line) | when, code | training t2t -> t2t_lite steps/s | decoding t2t "
          "-> t2t_lite, 500 lines | tiny % of matmul rate | base % of matmul rate |")
    print("| --- | --- | --- | --- | --- | --- |")
    print(table_row(machine, f"{when}, {commit}", train, decode, tiny, tiny_vocab, tiny_data,
                    data_vocab, base))
    judged = goal_isa(isa)
    print(f"\nGoals on {judged}" + (f" (a proxy on this {isa} CPU: oneDNN held to AVX2)"
                                    if judged != isa else "") + ":")
    for goal, figure, met in goals(judged, train, decode, tiny, tiny_data, base):
        print(f"  {'met    ' if met else 'NOT met'}  {goal}: {figure}")


if __name__ == "__main__":
    main()
