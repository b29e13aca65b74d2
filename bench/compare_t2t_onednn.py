#!/usr/bin/env python3
"""compare_train_speed.py's t2t and t2t_lite trainings, t2t_lite twice a round: oneDNN off and on.

    python3 bench/compare_t2t_onednn.py --work ../t2t-speed-work [--steps 75] [--rounds 2] \
        [--hparams_set transformer_tiny] [--sides t2t,lite_off,lite_on]

Rounds alternate t2t, t2t_lite with TF_ENABLE_ONEDNN_OPTS=0 (Eigen) and with =1 (oneDNN); the
commands and flags are ../shared/t2t_speed/compare_train_speed.py's (run it once first: its
data dirs must exist in --work; the t2t venv is --t2t_python). Prints the machine's `uptime`
load before and after each process, its steps/s readings (the first, with tracing, dropped),
wall and process CPU time (user + sys) and peak RSS; then the medians and the ratios to t2t.
Standard library only; run from the project root.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

SHARED = os.environ.get("T2T_LITE_SHARED", os.path.join(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))), "shared"))
sys.path.insert(0, os.path.join(SHARED, "t2t_speed"))
from compare_train_speed import CORPUS, HERE, rates


def uptime() -> str:
    """The machine's load averages (1, 5, 15 min) as `uptime` prints them."""
    out = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout
    return out.strip().split("load average:")[-1].strip()


def run(cmd, log, cwd=None, env=None):
    """Runs cmd under /usr/bin/time, output to log; returns (rc, wall s, peak RSS MB, CPU s)."""
    timed = ["/usr/bin/time", "-f", "PEAK_RSS_KB=%M CPU_S=%U+%S"] + cmd
    start = time.time()
    with open(log, "w") as f:
        rc = subprocess.call(timed, stdout=f, stderr=subprocess.STDOUT, cwd=cwd, env=env)
    wall = time.time() - start
    with open(log, errors="replace") as f:
        text = f.read()
    m = re.findall(r"PEAK_RSS_KB=(\d+) CPU_S=([0-9.]+)\+([0-9.]+)", text)
    nan = float("nan")
    rss, cpu = (int(m[-1][0]) / 1024, float(m[-1][1]) + float(m[-1][2])) if m else (nan, nan)
    return rc, wall, rss, cpu


def t2t_command(t2t_python: str, tool: str, t2t_data: str, hparams_set: str) -> list[str]:
    """The start of a t2t tool's command on the toy problem (compare_train_speed.py's)."""
    return [t2t_python, os.path.join(HERE, "t2t_run.py"), tool,
            "--t2t_usr_dir=" + os.path.join(HERE, "usr_dir"), "--problem=translate_toy_ende8k",
            "--data_dir=" + t2t_data, "--model=transformer", "--hparams_set=" + hparams_set]


def main():
    """Runs the rounds and prints the table's figures."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--t2t_python", default=os.path.join(os.path.dirname(os.path.realpath(SHARED)), "t2t-venv", "bin", "python"))
    ap.add_argument("--lite_python", default=sys.executable)
    ap.add_argument("--project", default=os.getcwd())
    ap.add_argument("--work", required=True, help="compare_train_speed.py's --work folder")
    ap.add_argument("--steps", type=int, default=75)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--hparams_set", default="transformer_tiny")
    ap.add_argument("--sides", default="t2t,lite_off,lite_on")
    a = ap.parse_args()
    base_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="1", TOY_ENDE_DIR=CORPUS)
    base_env.pop("TF_ENABLE_ONEDNN_OPTS", None)
    t2t_data, lite_data = os.path.join(a.work, "t2t_data"), os.path.join(a.work, "lite_data")
    every = max(a.steps // 8, 25)
    sides = a.sides.split(",")
    results = {s: [] for s in sides}
    for r in range(a.rounds):
        for side in sides:
            out = os.path.join(a.work, f"{a.hparams_set}_{side}_{r}")
            shutil.rmtree(out, ignore_errors=True)
            log = out + ".log"
            env = dict(base_env)
            if side == "t2t":
                cmd = t2t_command(a.t2t_python, "trainer", t2t_data, a.hparams_set) + [
                       "--output_dir=" + out, "--schedule=train", f"--train_steps={a.steps}",
                       f"--log_step_count_steps={every}", "--save_checkpoints_secs=100000",
                       "--random_seed=1"]
                pattern, cwd = r"global_step/sec: ([0-9.]+)", None
            else:
                env["TF_ENABLE_ONEDNN_OPTS"] = "1" if side == "lite_on" else "0"
                cmd = [a.lite_python, "run.py", "--mode=train", "--problem=translate_files",
                       "--hparams_set=" + a.hparams_set, "--data_dir=" + lite_data, "--output_dir=" + out,
                       "--approx_vocab_size=8192", f"--train_steps={a.steps}",
                       f"--log_step_count_steps={every}", "--local_eval_frequency=100000",
                       "--save_checkpoints_steps=100000", "--random_seed=1"]
                pattern, cwd = r"([0-9.]+) steps/s", a.project
            load0 = uptime()
            rc, wall, rss, cpu = run(cmd, log, cwd=cwd, env=env)
            sps = rates(log, pattern)
            results[side].append((rc, wall, rss, cpu, sps))
            print(f"round {r} {side:8s}: rc {rc}, {wall:.0f} s wall, {cpu:.0f} s CPU, peak {rss:.0f} MB, "
                  f"steps/s {sps}; load {load0} -> {uptime()}", flush=True)
    summary = {}
    for side, rows in results.items():
        vals = [v for row in rows for v in row[4]]
        summary[side] = statistics.median(vals) if vals else float("nan")
        print(f"{side:8s} median steps/s {summary[side]:.3f}, peak RSS {max(row[2] for row in rows):.0f} MB, "
              f"CPU s per run {statistics.median(row[3] for row in rows):.0f}, wall {statistics.median(row[1] for row in rows):.0f}")
    if "t2t" in summary:
        for side in sides:
            if side != "t2t":
                print(f"{side}/t2t steps/s {summary[side] / summary['t2t']:.2f}x")


if __name__ == "__main__":
    main()
