"""The training step with and without t2t_lite's native kernels, in alternating rounds.

    python bench/bench_native_kernels.py [--hparams_sets transformer_tiny,transformer_base]
        [--batch_tokens 4096,1024] [--steps 10,3] [--rounds 6]

Each round runs `bench_training.py --no_baseline --rounds 2` once per hparams set in a
process of its own with the kernels on (`T2T_LITE_NATIVE_KERNELS=1`) and once with them off
(`=0`), the order of the two alternating from round to round so that a drift of the
machine's load falls on both sides. The kernels are built (or found in the cache) before the
first round, so no round pays for the build. Printed per round: the step's wall and process
CPU time (all threads) of each side; at the end, per hparams set, the medians of each side
and how much of the step the kernels save (by wall time and by CPU time). The CPU figure
moves less with other processes on the machine; both are printed with the load average.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
ROUND_LINE = re.compile(r"round \d+: load ([\d.]+); step ([\d.]+) ms wall, ([\d.]+) ms CPU")


def run_side(hparams_set: str, batch_tokens: str, steps: str, kernels_on: bool
             ) -> list[tuple[float, float, float]]:
    """One bench_training.py process: [(load, wall ms, CPU ms)] of its timed rounds."""
    env = dict(os.environ, T2T_LITE_NATIVE_KERNELS="1" if kernels_on else "0",
               TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
    cmd = [sys.executable, os.path.join(BENCH, "bench_training.py"), "--no_baseline",
           "--hparams_sets", hparams_set, "--batch_tokens", batch_tokens, "--steps", steps,
           "--rounds", "2"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    rounds = [tuple(float(g) for g in m.groups()) for m in ROUND_LINE.finditer(out)]
    if not rounds:
        raise SystemExit(f"no round line in bench_training.py's output:\n{out}")
    return rounds


def build_kernels() -> None:
    """Builds the kernels (or finds them cached) in a process of its own; stops the bench
    where they cannot be had: an A/B against the fallback alone would measure nothing."""
    code = ("from t2t_lite.layers import native_kernels as n; import sys; "
            "sys.exit(0 if n._load() is not None else 1)")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
    if subprocess.run([sys.executable, "-c", code], env=env).returncode != 0:
        raise SystemExit("the native kernels cannot be built here (see the warning above)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hparams_sets", default="transformer_tiny,transformer_base")
    parser.add_argument("--batch_tokens", default="4096,1024")
    parser.add_argument("--steps", default="10,3")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    sets = args.hparams_sets.split(",")
    batch_tokens = args.batch_tokens.split(",")
    steps = args.steps.split(",")
    subprocess.run([sys.executable, os.path.join(BENCH, "machine.py")])
    build_kernels()
    results = {name: {True: [], False: []} for name in sets}
    for round_index in range(args.rounds):
        order = (True, False) if round_index % 2 == 0 else (False, True)
        for name, tokens, n in zip(sets, batch_tokens, steps):
            for kernels_on in order:
                rounds = run_side(name, tokens, n, kernels_on)
                results[name][kernels_on].extend(rounds)
                for load, wall, cpu in rounds:
                    print(f"round {round_index} {name:18s} kernels {'on ' if kernels_on else 'off'}"
                          f": load {load:.2f}, step {wall:.0f} ms wall, {cpu:.0f} ms CPU",
                          flush=True)
    for name in sets:
        on, off = results[name][True], results[name][False]
        wall_on, wall_off = (statistics.median(r[1] for r in side) for side in (on, off))
        cpu_on, cpu_off = (statistics.median(r[2] for r in side) for side in (on, off))
        loads = [r[0] for side in (on, off) for r in side]
        print(f"{name}: median step with the kernels {wall_on:.1f} ms wall / {cpu_on:.1f} ms "
              f"CPU, without {wall_off:.1f} / {cpu_off:.1f}: the kernels save "
              f"{100 * (1 - wall_on / wall_off):.1f}% of the step by wall time, "
              f"{100 * (1 - cpu_on / cpu_off):.1f}% by CPU time ({len(on)} + {len(off)} "
              f"timed rounds, load {min(loads):.2f}-{max(loads):.2f})")


if __name__ == "__main__":
    main()
