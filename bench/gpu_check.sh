#!/usr/bin/env bash
# Training steps/s (float32 / bfloat16 / float16, fused kernels vs plain ops, XLA off / on)
# and beam-decode sentences/s of one model, side by side on this machine's first GPU; on a
# machine without a GPU (or with --small) at tiny sizes, to keep the script working.
# Usage: bash bench/gpu_check.sh [--small] [bench/gpu_check.py options]
# (PYTHON: the interpreter, default python; CUDA_VISIBLE_DEVICES: the GPU, default 0.)
set -euo pipefail
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES-0}"
exec "${PYTHON:-python}" bench/gpu_check.py "$@"
