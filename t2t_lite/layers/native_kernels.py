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
    `fused_ops.softmax_dropout_matmul`, one pass instead of five ops;
  - `exp_sums`: exp of a chunk of the vocabulary's logits and its sums in the chunked
    cross-entropy (`fused_ops.softmax_cross_entropy`), one pass instead of two, with this
    CPU's vectors.
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import platform
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


def march(environ=os.environ) -> str:
    """The compiler target: `native`, or `$T2T_LITE_KERNEL_MARCH`.

    Raises:
      BuildError: the variable holds more than a target's name (letters, digits, `-_.`).
    """
    target = environ.get(MARCH_ENV, "").strip() or "native"
    if not all(c.isalnum() or c in "-_." for c in target):
        raise BuildError(f"{MARCH_ENV}={target!r} is not a compiler target name "
                         "(e.g. native, haswell, skylake-avx512)")
    return target


def march_flag(environ=os.environ) -> str:
    """The compiler's target flag: `-march=native`, or `-march=$T2T_LITE_KERNEL_MARCH`."""
    return f"-march={march(environ)}"


def target_flag_sets(target: str, cpu_flags: set[str], machine: str = platform.machine()
                     ) -> list[list[str]]:
    """The target flags to try, in order, until one set compiles.

    On x86, first the target without AVX512-FP16: TensorFlow 2.21's Eigen headers do not
    compile with it under GCC 12 (`PacketMathFP16.h: expected initializer`), and the
    kernels use no half-precision code, so leaving it out costs nothing where it works. Then
    the target as it is (a compiler too old to know `-mno-avx512fp16` rejects the flag at
    once), and for `native` last a generic target this CPU runs (`x86-64-v3` with AVX2 and
    FMA, else `x86-64-v2`). Elsewhere just the target.
    """
    if machine not in ("x86_64", "AMD64", "i686", "i386"):
        return [[f"-march={target}"]]
    sets = [[f"-march={target}", "-mno-avx512fp16"], [f"-march={target}"]]
    if target == "native":
        sets.append(["-march=x86-64-v3" if {"avx2", "fma"} <= cpu_flags else "-march=x86-64-v2"])
    return sets


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


def failure_path(library: str) -> str:
    """Where a failed build of `library` is remembered (JSON: the error line, the flags
    tried), so that no other process pays for it again."""
    return library + ".failed"


def _remembered_failure(library: str) -> str | None:
    """The error line of an earlier failed build of `library`, or None. A damaged record
    is ignored with one warning (and rewritten by the build that follows)."""
    path = failure_path(library)
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
        return str(record["error"])
    except OSError:
        return None  # none, or an unreadable cache: the build says which in its own line
    except (ValueError, KeyError, TypeError) as e:
        logging.warning("Ignoring the damaged native-kernel build record %s (%s): building "
                        "again", path, type(e).__name__)
        return None


@contextlib.contextmanager
def _build_lock(out_dir: str) -> Iterator[None]:
    """Holds an exclusive lock on the cache folder while a library is built: processes
    starting at once build once, the others wait here and then find the library or the
    failure record. The folder itself is locked (flock), so nothing is left behind."""
    fd = os.open(out_dir, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _compile(cmd_head: list[str], target_sets: list[list[str]], tail: list[str], cxx: str,
             timeout: float) -> str | None:
    """Runs the compiler with each target flag set in turn until one succeeds; returns None
    on success, else the first error line of the first attempt whose failure is not about a
    flag (the one a user can act on)."""
    errors_seen = []
    for target_flags in target_sets:
        cmd = [*cmd_head, *target_flags, *tail]
        try:
            result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            errors_seen.append(f"{os.path.basename(cxx)} took over {timeout:.0f} s")
            continue
        if result.returncode == 0:
            return None
        error_lines = [line for line in result.stderr.splitlines() if "error" in line]
        first = (error_lines or result.stderr.strip().splitlines() or ["no output"])[0]
        errors_seen.append(f"{os.path.basename(cxx)} {' '.join(target_flags)} failed "
                           f"(exit {result.returncode}): {first.strip()}")
    return errors_seen[0] if errors_seen else "no target to try"


def library_path(sources: list[str], out_dir: str, cxx: str, environ=os.environ) -> str:
    """Where `build` puts (or finds) the library of `sources` for `cxx` and the target of
    `march(environ)` in the cache folder `out_dir`."""
    flags = [f"-march={march(environ)}", *tf.sysconfig.get_compile_flags(),
             *tf.sysconfig.get_link_flags()]
    return os.path.join(out_dir, library_name(sources, cxx, flags))


def build(sources: list[str], out_dir: str, cxx: str, timeout: float = BUILD_TIMEOUT_S,
          environ=os.environ) -> str:
    """Compiles `sources` into one library in `out_dir` for the target of `march()` unless
    it is there already; returns the library's path.

    The target's flag sets (`target_flag_sets`) are tried in order. A failure is remembered
    beside the library's name (`failure_path`) under the same key (sources, compiler,
    flags, TensorFlow, CPU), so no process compiles again until one of those changes;
    processes starting at once build once (`_build_lock`), the others wait for its result.
    The library is written to a temporary file and renamed into place (atomic).

    Raises:
      BuildError: the compiler failed or timed out (its first error line), now or in an
        earlier build, `out_dir` cannot be written, or the target's name is malformed.
    """
    target = march(environ)
    link_flags = list(tf.sysconfig.get_link_flags())
    path = library_path(sources, out_dir, cxx, environ)
    if os.path.exists(path):
        return path
    remembered = _remembered_failure(path)
    if remembered:
        raise BuildError(f"{remembered} (remembered; delete {failure_path(path)} to retry)")
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as e:
        raise BuildError(f"cannot write the kernel cache {out_dir}: {e.strerror or e}") from e
    with _build_lock(out_dir):
        if os.path.exists(path):  # built by the process that held the lock
            return path
        remembered = _remembered_failure(path)
        if remembered:
            raise BuildError(f"{remembered} (remembered; delete {failure_path(path)} to "
                             "retry)")
        try:
            fd, tmp = tempfile.mkstemp(suffix=".so.tmp", dir=out_dir)
            os.close(fd)
        except OSError as e:
            raise BuildError(f"cannot write the kernel cache {out_dir}: "
                             f"{e.strerror or e}") from e
        _, cpu_flags = onednn.cpu_info(onednn.read_cpuinfo())
        target_sets = target_flag_sets(target, cpu_flags)
        head = [cxx, "-std=c++17", "-shared", "-fPIC", "-O3", "-w"]
        tail = [*tf.sysconfig.get_compile_flags(), *sources, "-o", tmp, *link_flags]
        try:
            error = _compile(head, target_sets, tail, cxx, timeout)
            if error is None:
                os.replace(tmp, path)
                return path
        except OSError as e:
            error = f"cannot run {cxx}: {e.strerror or e}"
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        record = {"error": error, "tried": [" ".join(s) for s in target_sets]}
        try:
            # Renamed into place: a process reading it without the lock sees all or nothing.
            fd, record_tmp = tempfile.mkstemp(suffix=".failed.tmp", dir=out_dir)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(record, f)
            os.replace(record_tmp, failure_path(path))
        except OSError:
            pass  # not remembered: the next process tries again, nothing else is lost
        raise BuildError(error)


# The ops the library must hold; a library under the cache's name without them is not ours.
OPS = ("t2t_lite_layer_norm_grad", "t2t_lite_softmax_dropout_grad")


def _load_library(path: str):
    """`tf.load_op_library(path)`, or None with one warning where the file does not load or
    lacks an op of `OPS` (a damaged or foreign file under the cache's name: removed, so
    the next build writes it anew)."""
    try:
        module = tf.load_op_library(path)
    except Exception as e:  # noqa: BLE001 - a file that will not load is any error of dlopen's
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
    else:
        missing = [op for op in OPS if not hasattr(module, op)]
        if not missing:
            return module
        reason = f"it lacks {', '.join(missing)}"
    logging.warning("Native kernels unavailable, TensorFlow ops instead: the cached library "
                    "%s does not load (%s); removed, the next process builds it again",
                    path, reason)
    with contextlib.suppress(OSError):
        os.remove(path)
    return None


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
    except BuildError as e:
        logging.warning("Native kernels unavailable, TensorFlow ops instead (the same "
                        "results, a slower step): %s", str(e).splitlines()[0])
        return None
    module = _load_library(path)
    if module is not None and time.time() - started > 1:
        logging.info("Built t2t_lite's native kernels in %.1f s: %s", time.time() - started,
                     path)
    return module


def placed_on_cpu(tensor: tf.Tensor) -> bool:
    """Whether `tensor`'s op runs on a CPU device: its device string names a CPU, or names
    no device type while no GPU is visible (then TensorFlow places it on the CPU). The
    kernels are registered for CPU only; anywhere else TensorFlow ops run."""
    device = getattr(tensor, "device", "") or ""
    device_type = tf.DeviceSpec.from_string(device).device_type if device else None
    if device_type:
        return device_type.upper() == "CPU"
    return not tf.config.list_logical_devices("GPU")


def _op(name: str, dtype: tf.DType, placed_on: tf.Tensor | None = None) -> Callable | None:
    """The library's op `name` for tensors of `dtype`, or None where TensorFlow ops must run
    instead (inside `disabled()`, a dtype the kernels are not built for, a computation
    placed on another device than a CPU, no library)."""
    if _disabled_depth or dtype not in DTYPES:
        return None
    if placed_on is not None and not placed_on_cpu(placed_on):
        return None
    module = _load()
    return None if module is None else getattr(module, name)


def layer_norm_grad(dtype: tf.DType = tf.float32, placed_on: tf.Tensor | None = None
                    ) -> Callable[..., tuple[tf.Tensor, tf.Tensor, tf.Tensor]] | None:
    """The `T2tLiteLayerNormGrad` op for `dtype` tensors, or None where TensorFlow ops must
    run instead (`placed_on`: a tensor of the computation; not on a CPU device: None).

    The op: (dy [..., D], norm_x [..., D], rstd [..., 1], scale [D]) ->
    (dx [..., D], d_scale [D], d_bias [D]), float32 or float64, with
    dx = rstd * (g - mean(g) - norm_x * mean(g * norm_x)) for g = dy * scale,
    d_scale = sum(dy * norm_x) and d_bias = sum(dy) over all rows.
    """
    return _op("t2t_lite_layer_norm_grad", dtype, placed_on)


def softmax_dropout_grad(dtype: tf.DType = tf.float32, placed_on: tf.Tensor | None = None
                         ) -> Callable[..., tf.Tensor] | None:
    """The `T2tLiteSoftmaxDropoutGrad` op for `dtype` tensors, or None where TensorFlow ops
    must run instead (`placed_on`: a tensor of the computation; not on a CPU device: None).

    The op: (d_dropped, weights, mask), one shape [..., K], float32 or float64 ->
    d_logits [..., K] = (d_dropped * mask - sum(d_dropped * mask * weights)) * weights,
    the sum over the last axis: the logits' gradient of softmax(logits) * mask.
    """
    return _op("t2t_lite_softmax_dropout_grad", dtype, placed_on)


def exp_sums(dtype: tf.DType = tf.float32, placed_on: tf.Tensor | None = None
             ) -> Callable[..., tuple[tf.Tensor, tf.Tensor]] | None:
    """The `T2tLiteExpSums` op for `dtype` tensors, or None where TensorFlow ops must run
    instead (`placed_on`: a tensor of the computation; not on a CPU device: None).

    The op: logits [..., K], float32 or float64 -> (exp(logits) [..., K], their sums over the
    last axis [..., 1]); the exp may take over the logits' buffer.
    """
    return _op("t2t_lite_exp_sums", dtype, placed_on)
