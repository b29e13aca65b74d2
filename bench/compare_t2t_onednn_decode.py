#!/usr/bin/env python3
"""compare_decode_speed.py's decodes of one t2t checkpoint, t2t_lite twice a round: oneDNN off, on.

    python3 bench/compare_t2t_onednn_decode.py --work ../t2t-speed-work \
        --checkpoint ../t2t-speed-work/transformer_tiny_t2t_0/model.ckpt-75 [--rounds 1]

Each round: t2t-decoder, then `run.py --mode=decode` with TF_ENABLE_ONEDNN_OPTS=0 and =1
(../shared/t2t_speed/compare_decode_speed.py's commands: 500 dev lines, beam 4, alpha 0.6).
Prints wall and CPU time, peak RSS and the load around each process, how many lines of each
t2t_lite output equal t2t's, and off's against on's. Standard library only.
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_t2t_onednn import SHARED, run, t2t_command, uptime
from compare_train_speed import CORPUS

ap = argparse.ArgumentParser()
ap.add_argument("--t2t_python", default=os.path.join(os.path.dirname(os.path.realpath(SHARED)), "t2t-venv", "bin", "python"))
ap.add_argument("--lite_python", default=sys.executable)
ap.add_argument("--project", default=os.getcwd())
ap.add_argument("--work", required=True)
ap.add_argument("--checkpoint", required=True)
ap.add_argument("--hparams_set", default="transformer_tiny")
ap.add_argument("--decode_hparams", default="beam_size=4,alpha=0.6")
ap.add_argument("--rounds", type=int, default=1)
a = ap.parse_args()
base_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="1", TOY_ENDE_DIR=CORPUS)
base_env.pop("TF_ENABLE_ONEDNN_OPTS", None)
src = os.path.join(CORPUS, "dev.en")
t2t_data, lite_data = os.path.join(a.work, "t2t_data"), os.path.join(a.work, "lite_data")
walls, outs = {}, {}
for r in range(a.rounds):
    for side in ("t2t", "lite_off", "lite_on"):
        out = os.path.join(a.work, f"decode_{side}_{r}.txt")
        env = dict(base_env)
        if side == "t2t":
            cmd = t2t_command(a.t2t_python, "decoder", t2t_data, a.hparams_set) + [
                   "--output_dir=" + os.path.dirname(a.checkpoint),
                   "--checkpoint_path=" + a.checkpoint,
                   "--decode_hparams=" + a.decode_hparams,
                   "--decode_from_file=" + src, "--decode_to_file=" + out]
            cwd = None
        else:
            env["TF_ENABLE_ONEDNN_OPTS"] = "1" if side == "lite_on" else "0"
            scratch = os.path.join(a.work, f"decode_{side}_out_{r}")
            os.makedirs(scratch, exist_ok=True)
            cmd = [a.lite_python, "run.py", "--mode=decode", "--problem=translate_files",
                   "--data_dir=" + lite_data, "--approx_vocab_size=8192",
                   "--hparams_set=" + a.hparams_set, "--output_dir=" + scratch,
                   "--checkpoint_path=" + a.checkpoint,
                   "--decode_hparams=" + a.decode_hparams,
                   "--decode_from_file=" + src, "--decode_to_file=" + out]
            cwd = a.project
        load0 = uptime()
        rc, wall, rss, cpu = run(cmd, out + ".log", cwd=cwd, env=env)
        walls.setdefault(side, []).append(wall)
        outs[side] = out
        print(f"round {r} {side:8s}: rc {rc}, {wall:.1f} s wall, {cpu:.0f} s CPU, peak {rss:.0f} MB; "
              f"load {load0} -> {uptime()}", flush=True)
lines = {}
for side, path in outs.items():
    with open(path) as f:
        lines[side] = f.read().splitlines()
for s in ("lite_off", "lite_on"):
    same = sum(x == y for x, y in zip(lines["t2t"], lines[s]))
    print(f"{s}: identical to t2t {same} of {len(lines['t2t'])} (wrote {len(lines[s])}); "
          f"speed t2t/{s} {statistics.median(walls['t2t']) / statistics.median(walls[s]):.2f}x")
print("lite_off vs lite_on identical:", sum(x == y for x, y in zip(lines["lite_off"], lines["lite_on"])))
