"""t2t_lite's native kernels: C++ TensorFlow ops built on first use, with TensorFlow ops as
their fallback.

Some parts of the training step are chains of small memory-bound ops that TensorFlow runs
one pass over the data at a time; a C++ op does the chain in one pass. The sources ship
with the package (`layers/native/*.cc`); the first process that needs a kernel compiles
them into one library with the C++ compiler (`$CXX`, else `c++`), TensorFlow's own compile
and link flags and `-march=native` (~10 s on 2 cores; `T2T_LITE_KERNEL_MARCH` names another
target, e.g. `haswell` to measure AVX2 code on an AVX512 machine), into a cache directory, and
loads it with `tf.load_op_library`. The library's name carries a hash of the sources,
TensorFlow's version, the compiler, the target and the CPU, so a change of any of them builds
it again and a shared cache never hands a machine code for another CPU.

Where a kernel cannot be had (no compiler, a failed build, `T2T_LITE_NATIVE_KERNELS=0`, or a
step compiled by XLA, which cannot compile a custom op: `disabled()`), its callers run the
same maths as TensorFlow ops; the results agree to float rounding (tests/test_native_kernels.py).
The reason is logged once per process.

Kernels (bench/README.md, "Two backward passes as C++ ops"):
  - `layer_norm_grad`: the closed-form backward pass of `fused_ops.layer_norm`, one pass
    instead of eleven ops;
  - `softmax_dropout_grad`: the attention softmax + dropout's backward pass in
    `fused_ops.softmax_dropout_matmul`, one pass instead of five ops.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator

import tensorflow as tf
from absl import logging

from t2t_lite import errors
from t2t_lite.utils import onednn

ENV = "T2T_LITE_NATIVE_KERNELS"
CACHE_ENV = "T2T_LITE_KERNEL_CACHE"
MARCH_ENV = "T2T_LITE_KERNEL_MARCH"
SOURCE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "native")
LIBRARY = "t2t_lite_kernels"
# A build that takes longer is abandoned (the fallback runs); one takes ~10 s on 2 cores.
BUILD_TIMEOUT_S = 300
# The dtypes the kernels are registered for (`T: {float, double}` in native/*.cc).
DTYPES = (tf.float32, tf.float64)

# How many `disabled()` contexts are open. Process-wide, not per thread: a distribution
# strategy traces each replica's step in a thread of its own.
_disabled_depth = 0
_disabled_lock = threading.Lock()


class BuildError(errors.UserError):
    """The kernels could not be built (a compiler that fails, a cache that cannot be
    written); the message is one line naming the compiler or the folder. Callers log it
    and run TensorFlow ops."""


def env_enabled(environ=os.environ) -> bool:
    """False when `T2T_LITE_NATIVE_KERNELS` turns the native kernels off (0/false/off/no)."""
    return environ.get(ENV, "").strip().lower() not in ("0", "false", "off", "no")


@contextlib.contextmanager
def disabled(when: bool = True) -> Iterator[None]:
    """Within this context (in every thread), callers trace TensorFlow ops, not native
    kernels: for functions compiled by XLA (`jit_compile`), which cannot compile a custom
    op, and for SavedModels, which must load without them. `when=False`: no effect."""
    if not when:
        yield
        return
    global _disabled_depth
    with _disabled_lock:
        _disabled_depth += 1
    try:
        yield
    finally:
        with _disabled_lock:
            _disabled_depth -= 1


def cache_dir(environ=os.environ) -> str:
    """Where built kernels go: $T2T_LITE_KERNEL_CACHE, else
    $XDG_CACHE_HOME/t2t_lite/kernels, else ~/.cache/t2t_lite/kernels."""
    if environ.get(CACHE_ENV):
        return environ[CACHE_ENV]
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "t2t_lite", "kernels")


def compiler(environ=os.environ) -> str | None:
    """The C++ compiler's path ($CXX, else c++, g++ or clang++ on PATH), or None."""
    for name in ([environ["CXX"]] if environ.get("CXX") else ["c++", "g++", "clang++"]):
        path = shutil.which(name)
        if path:
            return path
    return None


def march_flag(environ=os.environ) -> str:
    """The compiler's target flag: `-march=native`, or `-march=$T2T_LITE_KERNEL_MARCH`.

    Raises:
      BuildError: the variable holds more than a target's name (letters, digits, `-_.`).
    """
    march = environ.get(MARCH_ENV, "").strip() or "native"
    if not all(c.isalnum() or c in "-_." for c in march):
        raise BuildError(f"{MARCH_ENV}={march!r} is not a compiler target name "
                         "(e.g. native, haswell, skylake-avx512)")
    return f"-march={march}"


def sources() -> list[str]:
    """The kernels' C++ sources, sorted (one library)."""
    return sorted(os.path.join(SOURCE_DIR, name) for name in os.listdir(SOURCE_DIR)
                  if name.endswith(".cc"))


def library_name(sources: list[str], cxx: str, flags: list[str]) -> str:
    """The built library's file name: `LIBRARY` and a hash of everything that makes its
    machine code (the sources' text and the headers beside them, TensorFlow's version and
    flags including the target, the compiler, the CPU)."""
    headers = sorted({os.path.join(os.path.dirname(source), name) for source in sources
                      for name in os.listdir(os.path.dirname(source) or ".")
                      if name.endswith(".h")})
    text = b""
    for path in [*sources, *headers]:
        with open(path, "rb") as f:
            text += os.path.basename(path).encode() + b"\0" + f.read() + b"\0"
    model, cpu_flags = onednn.cpu_info(onednn.read_cpuinfo())
    cpu = model + " " + " ".join(sorted(cpu_flags))
    key = hashlib.sha256(b"\0".join(
        part if isinstance(part, bytes) else part.encode()
        for part in (text, tf.__version__, cxx, " ".join(flags), cpu))).hexdigest()[:16]
    return f"{LIBRARY}-{key}.so"


def build(sources: list[str], out_dir: str, cxx: str, timeout: float = BUILD_TIMEOUT_S,
          environ=os.environ) -> str:
    """Compiles `sources` into one library in `out_dir` for the target of `march_flag()`
    unless it is there already; returns the library's path.

    Concurrent processes may build at once: each writes its own temporary file and renames
    it into place (atomic), so a reader never sees half a library.

    Raises:
      BuildError: the compiler failed or timed out (its first error line), `out_dir`
        cannot be written, or the target's name is malformed.
    """
    compile_flags = [march_flag(environ), *tf.sysconfig.get_compile_flags()]
    link_flags = list(tf.sysconfig.get_link_flags())
    path = os.path.join(out_dir, library_name(sources, cxx, compile_flags + link_flags))
    if os.path.exists(path):
        return path
    try:
        os.makedirs(out_dir, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so.tmp", dir=out_dir)
        os.close(fd)
    except OSError as e:
        raise BuildError(f"cannot write the kernel cache {out_dir}: {e.strerror or e}") from e
    cmd = [cxx, "-std=c++17", "-shared", "-fPIC", "-O3", "-w", *compile_flags, *sources,
           "-o", tmp, *link_flags]
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if result.returncode != 0:
            error_lines = [line for line in result.stderr.splitlines() if "error" in line]
            first = (error_lines or result.stderr.strip().splitlines() or ["no output"])[0]
            raise BuildError(f"{os.path.basename(cxx)} failed (exit {result.returncode}): "
                             f"{first.strip()}")
        os.replace(tmp, path)
    except subprocess.TimeoutExpired as e:
        raise BuildError(f"{os.path.basename(cxx)} took over {timeout:.0f} s on "
                         f"{', '.join(os.path.basename(s) for s in sources)}") from e
    except OSError as e:
        raise BuildError(f"cannot run {cxx}: {e.strerror or e}") from e
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


@functools.lru_cache(maxsize=None)
def _load():
    """The loaded op module of the kernels' library, or None (the reason logged once)."""
    if not env_enabled():
        logging.info("Native kernels off (%s=%s): TensorFlow ops instead", ENV,
                     os.environ.get(ENV))
        return None
    cxx = compiler()
    if cxx is None:
        logging.warning("No C++ compiler ($CXX, c++, g++, clang++) for t2t_lite's native "
                        "kernels: TensorFlow ops instead (the same results, a slower step)")
        return None
    started = time.time()
    try:
        path = build(sources(), cache_dir(), cxx)
        module = tf.load_op_library(path)
    except (BuildError, tf.errors.NotFoundError) as e:
        logging.warning("Native kernels unavailable, TensorFlow ops instead (the same "
                        "results, a slower step): %s", str(e).splitlines()[0])
        return None
    if time.time() - started > 1:
        logging.info("Built t2t_lite's native kernels in %.1f s: %s", time.time() - started,
                     path)
    return module


def _op(name: str, dtype: tf.DType) -> Callable | None:
    """The library's op `name` for tensors of `dtype`, or None where TensorFlow ops must run
    instead (inside `disabled()`, a dtype the kernels are not built for, no library)."""
    if _disabled_depth or dtype not in DTYPES:
        return None
    module = _load()
    return None if module is None else getattr(module, name)


def layer_norm_grad(dtype: tf.DType = tf.float32
                    ) -> Callable[..., tuple[tf.Tensor, tf.Tensor, tf.Tensor]] | None:
    """The `T2tLiteLayerNormGrad` op for `dtype` tensors, or None where TensorFlow ops must
    run instead.

    The op: (dy [..., D], norm_x [..., D], rstd [..., 1], scale [D]) ->
    (dx [..., D], d_scale [D], d_bias [D]), float32 or float64, with
    dx = rstd * (g - mean(g) - norm_x * mean(g * norm_x)) for g = dy * scale,
    d_scale = sum(dy * norm_x) and d_bias = sum(dy) over all rows.
    """
    return _op("t2t_lite_layer_norm_grad", dtype)


def softmax_dropout_grad(dtype: tf.DType = tf.float32) -> Callable[..., tf.Tensor] | None:
    """The `T2tLiteSoftmaxDropoutGrad` op for `dtype` tensors, or None where TensorFlow ops
    must run instead.

    The op: (d_dropped, weights, mask), one shape [..., K], float32 or float64 ->
    d_logits [..., K] = (d_dropped * mask - sum(d_dropped * mask * weights)) * weights,
    the sum over the last axis: the logits' gradient of softmax(logits) * mask.
    """
    return _op("t2t_lite_softmax_dropout_grad", dtype)
