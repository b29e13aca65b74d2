"""Which CPU a benchmark ran on, in one line, so that figures from different machines are
not compared as if they came from one.

The machines this project runs on differ from day to day (CPUs with AMX-BF16 tiles, an AMD
EPYC with AVX512-BF16 only, ...), and the bfloat16 speed of a matmul depends on which of those
units oneDNN can use (bench/README.md: ~2.5-2.9x float32 measured where /proc/cpuinfo listed
AMX-BF16, 1.9-2.1x on AVX512-BF16 alone). Every ratio a bench script prints is measured within
one run; this line says which machine that run had.
"""
import os


def _first_field(cpuinfo: str, name: str) -> str | None:
    """The value of the first "name : value" line of a /proc/cpuinfo text, or None."""
    for line in cpuinfo.splitlines():
        if line.startswith(name):
            return line.split(":", 1)[1].strip()
    return None


def cpu_flags(cpuinfo: str) -> set[str]:
    """The feature flags of the first processor in a /proc/cpuinfo text (empty if none)."""
    return set((_first_field(cpuinfo, "flags") or "").split())


def cpu_model(cpuinfo: str) -> str:
    """The "model name" of the first processor in a /proc/cpuinfo text ("unknown CPU")."""
    return _first_field(cpuinfo, "model name") or "unknown CPU"


def bfloat16_units(flags: set[str]) -> str:
    """What a bfloat16 matmul can run on, best first: "AMX-BF16", "AVX512-BF16" or "none
    (converted to float32)"."""
    if "amx_bf16" in flags:
        return "AMX-BF16"
    if "avx512_bf16" in flags:
        return "AVX512-BF16 (no AMX)"
    return "none (bfloat16 converted to float32)"


def describe_cpu(cpuinfo_path: str = "/proc/cpuinfo") -> str:
    """One line: model, usable cores, and the bfloat16 matmul units, e.g.
    "AMD EPYC, 2 cores, bfloat16 matmuls on AVX512-BF16 (no AMX)"."""
    try:
        with open(cpuinfo_path, encoding="utf-8") as f:
            cpuinfo = f.read()
    except OSError:
        cpuinfo = ""
    # `decoding.usable_cores` counts the same, but importing it loads TensorFlow, which
    # compare_decode_dtypes' parent process (it runs run.py in subprocesses) does not need.
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (f"{cpu_model(cpuinfo)}, {cores} cores, bfloat16 matmuls on "
            f"{bfloat16_units(cpu_flags(cpuinfo))}")
