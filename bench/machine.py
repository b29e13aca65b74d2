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


def cpu_generation(cpuinfo: str) -> str | None:
    """"family F, model M" of the first processor in a /proc/cpuinfo text, or None.

    Two CPUs with one model name can differ by generations (a KVM guest's "AMD EPYC" was
    family 23 on one day, family 25 on another, at 2.6x the float32 matmul peak)."""
    family, model = _first_field(cpuinfo, "cpu family"), _first_field(cpuinfo, "model\t")
    if family is None or model is None:
        return None
    return f"family {family}, model {model}"


def vector_isa(flags: set[str]) -> str:
    """The widest float vector unit the kernels may use: "AVX512", "AVX2", "AVX" or "SSE".

    A hypervisor can hide AVX512 from a CPU that has it; the flags say what the guest (and
    so oneDNN and Eigen) sees."""
    if "avx512f" in flags:
        return "AVX512"
    if "avx2" in flags:
        return "AVX2"
    if "avx" in flags:
        return "AVX"
    return "SSE"


def bfloat16_units(flags: set[str]) -> str:
    """What a bfloat16 matmul can run on, best first: "AMX-BF16", "AVX512-BF16" or "none
    (converted to float32)"."""
    if "amx_bf16" in flags:
        return "AMX-BF16"
    if "avx512_bf16" in flags:
        return "AVX512-BF16 (no AMX)"
    return "none (bfloat16 converted to float32)"


def describe_cpu(cpuinfo_path: str = "/proc/cpuinfo") -> str:
    """One line: model (with its family and model numbers where listed), usable cores, the
    widest vector unit and the bfloat16 matmul units, e.g.
    "AMD EPYC (family 25, model 17), 2 cores, AVX2 vectors, bfloat16 matmuls on none
    (bfloat16 converted to float32)"."""
    try:
        with open(cpuinfo_path, encoding="utf-8") as f:
            cpuinfo = f.read()
    except OSError:
        cpuinfo = ""
    # `decoding.usable_cores` counts the same, but importing it loads TensorFlow, which
    # compare_decode_dtypes' parent process (it runs run.py in subprocesses) does not need.
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    generation = cpu_generation(cpuinfo)
    flags = cpu_flags(cpuinfo)
    name = cpu_model(cpuinfo) + (f" ({generation})" if generation else "")
    return (f"{name}, {cores} cores, {vector_isa(flags)} vectors, bfloat16 matmuls on "
            f"{bfloat16_units(flags)}")


if __name__ == "__main__":
    print(describe_cpu())
