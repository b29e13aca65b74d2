"""t2t_lite training variants side by side: steps/s and the dev loss after the same steps.

    python bench/compare_variants.py --data_dir ../t2t-speed-work/lite_data \
        [--steps 300] [--rounds 1] [--hparams_set transformer_tiny] \
        --variant "fp32=" --variant "bf16=--hparams=activation_dtype=bfloat16" \
        [--variant "xla=--xla_compile"]

Each variant is `name=extra run.py flags` (space-separated). Every round runs each variant
once, in order, as `run.py --mode=train_and_eval` on the toy En-De data that
`../shared/t2t_speed/compare_train_speed.py` prepares (same seed, same batches), with one
evaluation of the whole dev set at the last step. Prints, per variant, the median steps/s of
the progress lines after the first (which includes tracing), the dev loss at the last step and
the peak RSS. Standard library only; run from the project root.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile


def run_variant(python: str, data_dir: str, hparams_set: str, steps: int, extra: list[str],
                log: str) -> tuple[list[float], float, float]:
    """Runs one training; returns (steps/s readings after the first, dev loss, peak RSS MB)."""
    out = tempfile.mkdtemp(prefix="variant_")
    cmd = ["/usr/bin/time", "-f", "PEAK_RSS_KB=%M", python, "run.py", "--mode=train_and_eval",
           "--problem=translate_files", "--hparams_set=" + hparams_set, "--data_dir=" + data_dir,
           "--output_dir=" + out, "--approx_vocab_size=8192", f"--train_steps={steps}",
           f"--log_step_count_steps={max(steps // 8, 25)}", f"--local_eval_frequency={steps}",
           "--eval_steps=0", "--random_seed=1"] + extra
    with open(log, "w") as f:
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT,
                             env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="1"))
    shutil.rmtree(out, ignore_errors=True)
    with open(log, errors="replace") as f:
        text = f.read()
    if rc:
        sys.exit(f"{' '.join(cmd)} failed (rc {rc}): see {log}")
    rates = [float(v) for v in re.findall(r"([0-9.]+) steps/s", text)][1:]
    loss = float(re.findall(r"Eval at step \d+: .*?\bloss = ([0-9.]+)", text)[-1])
    rss = int(re.findall(r"PEAK_RSS_KB=(\d+)", text)[-1]) / 1024
    return rates, loss, rss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data_dir", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--hparams_set", default="transformer_tiny")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--variant", action="append", required=True, help="name=extra flags")
    ap.add_argument("--logs", default=tempfile.gettempdir())
    args = ap.parse_args()
    variants = [v.split("=", 1) for v in args.variant]
    results = {name: ([], [], []) for name, _ in variants}
    for r in range(args.rounds):
        for name, extra in variants:
            log = os.path.join(args.logs, f"variant_{name}_{r}.log")
            rates, loss, rss = run_variant(args.python, args.data_dir, args.hparams_set,
                                           args.steps, extra.split(), log)
            results[name][0].extend(rates)
            results[name][1].append(loss)
            results[name][2].append(rss)
            print(f"round {r} {name}: steps/s {rates}, dev loss {loss:.4f}, peak {rss:.0f} MB",
                  flush=True)
    base = None
    for name, _ in variants:
        rates, losses, rsss = results[name]
        speed = statistics.median(rates)
        base = base or speed
        print(f"{name:10s} {speed:.2f} steps/s ({speed / base:.2f}x of {variants[0][0]}), "
              f"dev loss at step {args.steps} {statistics.mean(losses):.4f}, "
              f"peak RSS {max(rsss):.0f} MB")


if __name__ == "__main__":
    main()
