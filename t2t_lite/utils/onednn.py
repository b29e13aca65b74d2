"""Whether TensorFlow runs its oneDNN kernels: chosen at start-up, before TensorFlow is imported.

TensorFlow reads `TF_ENABLE_ONEDNN_OPTS` once, when it is imported. Unset, it turns oneDNN on
only on x86 CPUs with AVX512-VNNI, AVX512-BF16, AVX-VNNI or AMX; elsewhere (e.g. an AVX2-only
AMD EPYC) it runs Eigen's kernels, whose matmuls were measured 1.5-3x slower than oneDNN's on
the FFN and softmax-layer shapes of transformer_tiny there (bench/README.md "An AVX2-only
CPU"). `decide` picks, in this order:

1. the user's own `TF_ENABLE_ONEDNN_OPTS` (always wins; nothing is measured);
2. `--onednn=on|off`;
3. `--onednn=auto` on a CPU where TensorFlow's default is oneDNN on, or not an x86 CPU whose
   flags can be read: TensorFlow's default, untouched;
4. `--onednn=auto` on an x86 CPU where TensorFlow leaves oneDNN off: a measurement, a short
   matmul benchmark of the model's shapes in two child processes (Eigen, then oneDNN),
   cached per CPU model, TensorFlow version and model width, so only the first run pays.

Standard library only: this runs before TensorFlow is imported. `probe` (the child's
benchmark) imports TensorFlow.
"""
from __future__ import annotations

import dataclasses
import datetime
import importlib.metadata
import json
import logging
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, MutableMapping

# Standard logging (absl's handler, once run.py installs it, prints these lines).
_log = logging.getLogger(__name__)

ENV = "TF_ENABLE_ONEDNN_OPTS"
SETTINGS = ("auto", "on", "off")
# CPU flags (/proc/cpuinfo) with which TensorFlow turns oneDNN on by itself (its
# IsMKLEnabled(): AVX512-VNNI, AVX512-BF16, AVX-VNNI, AMX).
TF_DEFAULT_ON_FLAGS = ("avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8",
                       "amx_bf16")
# oneDNN is chosen when its matmuls take at most this share of Eigen's time: a clear gain,
# not noise of a loaded machine (measured gains on AVX2: 1.5-3x on the large shapes).
ON_IF_AT_MOST = 0.9
# The benchmark's rows: a chunk of a batch (the projections and FFN) and of the loss's chunk.
ROWS, LOSS_ROWS, VOCAB = 1024, 256, 8192


@dataclasses.dataclass(frozen=True)
class Choice:
    """What `decide` chose.

    Attributes:
      enabled: True / False to set `TF_ENABLE_ONEDNN_OPTS` to 1 / 0; None to leave it as it
        is (the user's setting, or TensorFlow's own default).
      reason: why, for the log line.
      log: whether the choice is t2t_lite's own (then run.py logs it); the environment's
        setting is the user's and is applied silently.
    """

    enabled: bool | None
    reason: str
    log: bool = True

    def line(self) -> str:
        """The log line: `oneDNN: on (...)`."""
        state = {True: "on", False: "off", None: "TensorFlow's default"}[self.enabled]
        return f"oneDNN: {state} ({self.reason})"


def env_value(text: str) -> bool | None:
    """TensorFlow's reading of `TF_ENABLE_ONEDNN_OPTS` ("1"/"true" on, "0"/"false" off,
    case-insensitive); None for any other text (TensorFlow then keeps its default)."""
    value = text.strip().lower()
    return True if value in ("1", "true") else False if value in ("0", "false") else None


def read_cpuinfo(path: str = "/proc/cpuinfo") -> str:
    """The text of /proc/cpuinfo ("" where there is none: not Linux)."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return ""


def cpu_info(text: str) -> tuple[str, set[str]]:
    """The CPU model name and flags of /proc/cpuinfo's text (its first processor)."""
    model, flags = "", set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not model:
            model = value.strip()
        elif key == "flags" and not flags:
            flags = set(value.split())
    return model, flags


def tensorflow_default(flags: set[str]) -> bool | None:
    """Whether TensorFlow turns oneDNN on by itself on a CPU with these flags: True (one of
    `TF_DEFAULT_ON_FLAGS`), False (an x86 CPU without them), None (flags unknown: not x86)."""
    if "sse2" not in flags:
        return None
    return any(flag in flags for flag in TF_DEFAULT_ON_FLAGS)


def tensorflow_version() -> str:
    """The installed TensorFlow's version, read without importing it ("unknown" if none)."""
    for name in ("tensorflow", "tensorflow-cpu", "tensorflow-intel", "tf-nightly"):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


def cache_path(environ: Mapping[str, str]) -> str:
    """The cache file: $XDG_CACHE_HOME/t2t_lite/onednn.json, else ~/.cache/t2t_lite/."""
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "t2t_lite", "onednn.json")


def cache_key(model: str, tf_version: str, hidden_size: int, filter_size: int) -> str:
    """A cache entry's key: the CPU model, TensorFlow's version and the model's width."""
    return f"{model} | tensorflow {tf_version} | hidden {hidden_size} filter {filter_size}"


def read_cache(path: str, warn: bool = True) -> dict:
    """The cache file's entries: {} when it is absent, and when it is damaged (not JSON,
    not an object, unreadable) with one warning where `warn`: the next measurement
    rewrites it."""
    try:
        with open(path, encoding="utf-8") as f:
            entries = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        if warn:
            _log.warning("Ignoring the damaged oneDNN cache %s (%s): measuring again",
                         path, type(e).__name__)
        return {}
    if not isinstance(entries, dict):
        if warn:
            _log.warning("Ignoring the damaged oneDNN cache %s (a JSON %s, not an object): "
                         "measuring again", path, type(entries).__name__)
        return {}
    return entries


def _timings(entry) -> tuple[float, float] | None:
    """(Eigen seconds, oneDNN seconds) of a cache entry, or None where the entry lacks
    them or holds anything but two positive finite numbers."""
    if not isinstance(entry, dict):
        return None
    values = entry.get("eigen_s"), entry.get("onednn_s")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool)
               and math.isfinite(v) and v > 0 for v in values):
        return None
    return float(values[0]), float(values[1])


def write_cache(path: str, key: str, entry: dict) -> None:
    """Adds `entry` under `key` (the file written whole, then renamed: never half-written).
    A cache that cannot be written only costs a measurement next time: OSError is ignored."""
    entries = read_cache(path, warn=False)
    entries[key] = entry
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=os.path.dirname(path), delete=False,
                                         suffix=".tmp", encoding="utf-8") as f:
            json.dump(entries, f, indent=1, sort_keys=True)
        os.replace(f.name, path)
    except OSError:
        pass


def choose(eigen_s: float, onednn_s: float) -> bool:
    """oneDNN when its benchmark time is at most `ON_IF_AT_MOST` of Eigen's."""
    return onednn_s <= ON_IF_AT_MOST * eigen_s


def _measured_reason(eigen_s: float, onednn_s: float, where: str) -> str:
    return (f"{where}: the model's matmuls took {onednn_s * 1e3:.0f} ms with oneDNN, "
            f"{eigen_s * 1e3:.0f} ms with Eigen, TensorFlow's default on this CPU; "
            f"--onednn=on|off or {ENV}=1|0 to override")


def decide(setting: str, environ: Mapping[str, str], cpuinfo: str, tf_version: str,
           hidden_size: int, filter_size: int, cache_file: str,
           measure: Callable[[int, int], tuple[float, float] | None]) -> Choice:
    """The oneDNN choice of a run (see the module docstring for the order).

    Args:
      setting: --onednn, one of SETTINGS.
      environ: the process environment (its `TF_ENABLE_ONEDNN_OPTS`, if set, wins).
      cpuinfo: the text of /proc/cpuinfo ("" where there is none).
      tf_version: TensorFlow's version (a part of the cache key).
      hidden_size, filter_size: the model's width (the benchmark's shapes, the cache key).
      cache_file: the JSON cache of measured choices.
      measure: (hidden_size, filter_size) -> (Eigen seconds, oneDNN seconds), or None when
        the measurement failed; called only on a cache miss.
    """
    if environ.get(ENV, "").strip():
        value = environ[ENV]
        overridden = f"; --onednn={setting} not applied" if setting != "auto" else ""
        return Choice(env_value(value), f"{ENV}={value} set in the environment{overridden}",
                      log=setting != "auto")
    if setting in ("on", "off"):
        return Choice(setting == "on", f"--onednn={setting}")
    model, flags = cpu_info(cpuinfo)
    default = tensorflow_default(flags)
    if default is None:  # TensorFlow decides; nothing to measure or say
        return Choice(None, "not an x86 CPU: nothing measured", log=False)
    if default:
        present = ", ".join(sorted(set(TF_DEFAULT_ON_FLAGS) & flags))
        return Choice(None, f"on: the CPU has {present}")
    key = cache_key(model, tf_version, hidden_size, filter_size)
    entries = read_cache(cache_file)
    cached = _timings(entries.get(key))
    if key in entries and cached is None:
        _log.warning("Ignoring the damaged entry of the oneDNN cache %s for %s: measuring "
                     "again", cache_file, model)
    if cached is not None:
        eigen_s, onednn_s = cached
        return Choice(choose(eigen_s, onednn_s),
                      _measured_reason(eigen_s, onednn_s, f"measured before, {cache_file}"))
    timings = measure(hidden_size, filter_size)
    if timings is None:
        return Choice(None, "off on this CPU; the benchmark of oneDNN against Eigen failed")
    eigen_s, onednn_s = timings
    write_cache(cache_file, key, {
        "eigen_s": eigen_s, "onednn_s": onednn_s, "onednn": choose(eigen_s, onednn_s),
        "measured": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")})
    return Choice(choose(eigen_s, onednn_s),
                  _measured_reason(eigen_s, onednn_s, "measured now, cached in " + cache_file))


def decide_on_this_machine(setting: str, environ: Mapping[str, str], hidden_size: int,
                           filter_size: int,
                           measure: Callable[[int, int], tuple[float, float] | None] | None
                           = None) -> Choice:
    """`decide` with this machine's facts: its /proc/cpuinfo, the installed TensorFlow's
    version and the cache under `environ`'s cache directory (what run.py and the bench
    scripts that start t2t_lite processes use).

    Args:
      setting: --onednn, one of SETTINGS.
      environ: the process environment.
      hidden_size, filter_size: the model's width.
      measure: as for `decide`; default `measure_in_children`.
    """
    return decide(setting, environ, read_cpuinfo(), tensorflow_version(), hidden_size,
                  filter_size, cache_path(environ), measure or measure_in_children)


def apply(choice: Choice, environ: MutableMapping[str, str]) -> None:
    """Sets `TF_ENABLE_ONEDNN_OPTS` for a choice of on or off (child processes inherit it)."""
    if choice.enabled is not None and not environ.get(ENV, "").strip():
        environ[ENV] = "1" if choice.enabled else "0"


def measure_in_children(hidden_size: int, filter_size: int, timeout: float = 600
                        ) -> tuple[float, float] | None:
    """`probe`'s seconds in a child process with Eigen (`TF_ENABLE_ONEDNN_OPTS=0`), then in
    one with oneDNN (=1); None if a child fails. Each child imports TensorFlow (a few seconds).
    """
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = ("from t2t_lite.utils.onednn import probe; "
            f"print(probe({int(hidden_size)}, {int(filter_size)}))")
    seconds = []
    for value in ("0", "1"):
        env = dict(os.environ, **{ENV: value, "TF_CPP_MIN_LOG_LEVEL": "3"})
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
        try:
            result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                    text=True, timeout=timeout, check=False)
            seconds.append(float(result.stdout.split()[-1]))
        except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
            return None
        if result.returncode:
            return None
    return seconds[0], seconds[1]


def shapes(hidden_size: int, filter_size: int) -> list[tuple[int, int, int]]:
    """The benchmark's matmuls [m, k] x [k, n]: attention projection, the FFN's two layers,
    the softmax layer on a chunk of the loss (VOCAB wide)."""
    d, f = hidden_size, filter_size
    return [(ROWS, d, d), (ROWS, d, f), (ROWS, f, d), (LOSS_ROWS, d, VOCAB)]


def probe(hidden_size: int, filter_size: int, reps: int = 3, budget_s: float = 3.0) -> float:
    """Seconds of one pass over `shapes`: each matmul forward and its two gradients (x @ w,
    g @ w^T, x^T @ g), float32, best of up to `reps` timed passes after one warm-up (fewer
    when a pass takes over budget_s / reps). Imports TensorFlow (the caller's process
    environment decides oneDNN)."""
    import tensorflow as tf

    tf.random.set_seed(0)
    operands = [(tf.random.normal([m, k]), tf.random.normal([k, n]), tf.random.normal([m, n]))
                for m, k, n in shapes(hidden_size, filter_size)]

    @tf.function
    def one_pass():
        total = tf.constant(0.0)
        for x, w, g in operands:
            y = tf.matmul(x, w)
            dx = tf.matmul(g, w, transpose_b=True)
            dw = tf.matmul(x, g, transpose_a=True)
            total += y[0, 0] + dx[0, 0] + dw[0, 0]
        return total

    one_pass().numpy()  # traces and warms up
    best = float("inf")
    start = time.perf_counter()
    for _ in range(reps):
        t0 = time.perf_counter()
        one_pass().numpy()
        best = min(best, time.perf_counter() - t0)
        if time.perf_counter() - start > budget_s:
            break
    return best
