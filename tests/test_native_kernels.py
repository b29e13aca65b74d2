"""The native kernels (t2t_lite/layers/native_kernels.py): built, cached, equal to the
TensorFlow ops they replace to float rounding, and replaced by those ops where they cannot
be had."""
import contextlib
import os
import pathlib
import platform
import shutil
import subprocess
import sys
from collections.abc import Callable

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.layers import fused_ops, native_kernels

HAVE_COMPILER = native_kernels.compiler() is not None
if not HAVE_COMPILER and os.environ.get("CI"):
    raise RuntimeError("CI needs a C++ compiler: the native kernels must be tested")
needs_compiler = pytest.mark.skipif(not HAVE_COMPILER, reason="no C++ compiler on this machine")


def _reference_grad(dy, x, scale, epsilon=1e-6):
    """The layer norm's gradients by the closed form, in float64 numpy."""
    dy, x, scale = (np.asarray(a, np.float64) for a in (dy, x, scale))
    mean = x.mean(-1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + epsilon)
    n = (x - mean) * rstd
    g = dy * scale
    dx = rstd * (g - g.mean(-1, keepdims=True) - n * (g * n).mean(-1, keepdims=True))
    axes = tuple(range(dy.ndim - 1))
    return dx, (dy * n).sum(axes), dy.sum(axes)


def _with_and_without(op: Callable, compute: Callable) -> list:
    """[compute() with the native kernels, compute() inside `native_kernels.disabled()`],
    checking that `op()` (one of native_kernels' op getters) is had in the first only."""
    results = []
    for native in (True, False):
        with contextlib.ExitStack() as stack:
            if not native:
                stack.enter_context(native_kernels.disabled())
            assert (op() is not None) is native
            results.append(compute())
    return results


def _norm_grads(x, scale, bias, dy):
    with tf.GradientTape() as tape:
        tape.watch([x, scale, bias])
        y = fused_ops.layer_norm(x, scale, bias, 1e-6)
    return tape.gradient(y, [x, scale, bias], output_gradients=dy)


@needs_compiler
@pytest.mark.parametrize("shape", [(3, 37, 128), (2, 5, 130), (1, 1, 7), (70, 16)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_norm_grad_op_equals_the_closed_form(shape, dtype):
    """Rows that fill no block or many, widths with and without a lane remainder."""
    rng = np.random.default_rng(sum(shape))
    x = rng.normal(size=shape).astype(dtype) * 3 + 1
    dy = rng.normal(size=shape).astype(dtype)
    scale = rng.normal(size=shape[-1]).astype(dtype)
    op = native_kernels.layer_norm_grad()
    assert op is not None
    mean = x.mean(-1, keepdims=True)
    rstd = 1 / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + 1e-6)
    dx, d_scale, d_bias = op(dy, ((x - mean) * rstd).astype(dtype), rstd.astype(dtype), scale)
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    for got, want in zip((dx, d_scale, d_bias), _reference_grad(dy, x, scale)):
        assert got.dtype == dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance * np.abs(want).max())


@needs_compiler
def test_layer_norm_gradients_with_and_without_the_native_kernel_agree():
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(4, 33, 128)).astype(np.float32))
    dy = tf.constant(rng.normal(size=(4, 33, 128)).astype(np.float32))
    scale = tf.constant(rng.normal(size=128).astype(np.float32))
    bias = tf.constant(rng.normal(size=128).astype(np.float32))
    assert native_kernels.layer_norm_grad() is not None
    # Only the dtypes the kernels are registered for; half precision runs TensorFlow ops.
    assert native_kernels.layer_norm_grad(tf.bfloat16) is None
    assert native_kernels.softmax_dropout_grad(tf.float16) is None
    native = _norm_grads(x, scale, bias, dy)
    with native_kernels.disabled():
        assert native_kernels.layer_norm_grad() is None
        plain = _norm_grads(x, scale, bias, dy)
    for a, b in zip(native, plain):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * float(tf.reduce_max(tf.abs(b))))
    # The op's row blocks are summed in a fixed order: the same result every time.
    again = _norm_grads(x, scale, bias, dy)
    for a, b in zip(native, again):
        np.testing.assert_array_equal(a, b)


@needs_compiler
@pytest.mark.parametrize("keys", [9, 37])
@pytest.mark.parametrize("shared_over_heads", [False, True])
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
def test_softmax_dropout_grad_op_equals_tensorflows_softmax_gradient(keys, shared_over_heads,
                                                                     dtype):
    """Key lengths under and over the op's 16 lanes, both with a remainder; a mask of the
    weights' shape and one shared over heads (a noise_shape mask, expanded by
    broadcast_to)."""
    logits = tf.cast(tf.random.stateless_normal([2, 3, 5, keys], seed=[1, 1]) * 3, dtype)
    v = tf.cast(tf.random.stateless_normal([2, 3, keys, 4], seed=[2, 2]), dtype)
    upstream = tf.cast(tf.random.stateless_normal([2, 3, 5, 4], seed=[3, 3]), dtype)
    mask = fused_ops.stateless_scaled_mask(
        [2, 1 if shared_over_heads else 3, 5, keys], 0.3, tf.constant([7, 8]), dtype)

    def grads():
        with tf.GradientTape() as tape:
            tape.watch([logits, v])
            out = fused_ops.softmax_dropout_matmul(logits, v, mask)
        return tape.gradient(out, [logits, v], output_gradients=upstream)

    results = _with_and_without(native_kernels.softmax_dropout_grad, grads)
    tolerance = 1e-6 if dtype == tf.float32 else 1e-14
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance)
    # And against the softmax gradient in float64 numpy.
    w = tf.nn.softmax(tf.cast(logits, tf.float64)).numpy()
    m = tf.broadcast_to(tf.cast(mask, tf.float64), w.shape).numpy()
    d_weights = np.einsum("bhqd,bhkd->bhqk", upstream.numpy().astype(np.float64),
                          v.numpy().astype(np.float64)) * m
    want = (d_weights - (d_weights * w).sum(-1, keepdims=True)) * w
    np.testing.assert_allclose(results[0][0], want, rtol=1e-4 if dtype == tf.float32 else 1e-12,
                               atol=1e-5 if dtype == tf.float32 else 1e-12)


@needs_compiler
@pytest.mark.parametrize("shape", [(3, 37), (2, 5, 130), (1, 8192), (33, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_exp_sums_op_equals_tensorflows_exp_and_sum(shape, dtype):
    """Rows that fill no block or many, vocabulary widths with and without a vector
    remainder, logits whose exp spans ~1e-26 to ~1e26."""
    rng = np.random.default_rng(sum(shape))
    logits = (rng.normal(size=shape) * 20).astype(dtype)
    op = native_kernels.exp_sums(tf.as_dtype(dtype))
    assert op is not None
    exp, sums = op(tf.constant(logits))
    assert exp.dtype == dtype and exp.shape == shape and sums.shape == shape[:-1] + (1,)
    tolerance = 2e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(exp, tf.exp(logits), rtol=tolerance, atol=0)
    want = np.exp(logits.astype(np.float64)).sum(-1, keepdims=True)
    np.testing.assert_allclose(sums, want, rtol=tolerance * 4, atol=0)
    # Rows are summed in a fixed order: the same result every time.
    np.testing.assert_array_equal(op(tf.constant(logits))[1], sums)


@needs_compiler
def test_the_chunk_loss_with_and_without_the_exp_sums_op_agrees():
    rng = np.random.default_rng(5)
    x = tf.constant(rng.normal(size=(70, 16)).astype(np.float32))
    matrix = tf.constant(rng.normal(size=(300, 16)).astype(np.float32))
    labels = tf.constant(rng.integers(1, 300, size=70), tf.int32)

    def loss_and_grads():
        with tf.GradientTape() as tape:
            tape.watch([x, matrix])
            loss = fused_ops.softmax_cross_entropy(x, matrix, labels, 0.1, chunk_size=32,
                                                   vocab_major=False)
        return [loss, *tape.gradient(loss, [x, matrix])]

    results = _with_and_without(native_kernels.exp_sums, loss_and_grads)
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=1e-5,
                                   atol=1e-6 * float(tf.reduce_max(tf.abs(want))))


@needs_compiler
def test_an_xla_compiled_gradient_runs_tensorflow_ops_inside_disabled():
    x = tf.random.stateless_normal([6, 128], seed=[1, 2])
    scale, bias = tf.ones([128]), tf.zeros([128])

    def grads(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fused_ops.layer_norm(x, scale, bias, 1e-6)
            loss = tf.reduce_sum(y * tf.range(128, dtype=tf.float32))
        return tape.gradient(loss, x)

    with pytest.raises(tf.errors.InvalidArgumentError, match="T2tLiteLayerNormGrad"):
        tf.function(grads, jit_compile=True, autograph=False)(x)
    with native_kernels.disabled():
        compiled = tf.function(grads, jit_compile=True, autograph=False)(x)
    np.testing.assert_allclose(compiled, grads(x), rtol=1e-5, atol=1e-4)


def test_the_environment_turns_the_kernels_off(monkeypatch):
    monkeypatch.setenv(native_kernels.ENV, "0")
    native_kernels._load.cache_clear()
    try:
        assert native_kernels.layer_norm_grad() is None
        x = tf.constant(np.random.default_rng(1).normal(size=(5, 8)).astype(np.float32))
        dy = tf.ones_like(x)
        got = _norm_grads(x, tf.ones([8]), tf.zeros([8]), dy)
        for a, b in zip(got, _reference_grad(dy, x, np.ones(8))):
            np.testing.assert_allclose(a, b, atol=1e-5)
    finally:
        native_kernels._load.cache_clear()
    assert native_kernels.env_enabled({native_kernels.ENV: "off"}) is False
    assert native_kernels.env_enabled({}) is True


@pytest.fixture(scope="module")
def fresh_build(tmp_path_factory):
    """(cache folder, library path): the kernels built for this CPU into an empty cache, once
    for the tests that need a build of their own (a build takes ~10 s)."""
    cache = tmp_path_factory.mktemp("kernels") / "cache"
    return cache, native_kernels.build(native_kernels.sources(), str(cache),
                                       native_kernels.compiler(), environ={})


@needs_compiler
def test_a_build_is_cached_and_a_failed_build_is_one_line(tmp_path, fresh_build):
    sources = native_kernels.sources()
    assert [os.path.basename(s) for s in sources] == ["exp_sums.cc", "layer_norm_grad.cc",
                                                      "softmax_dropout_grad.cc"]
    cxx = native_kernels.compiler()
    cache, path = fresh_build
    assert os.listdir(cache) == [os.path.basename(path)]  # no temporary left
    built_at = os.stat(path).st_mtime_ns
    assert native_kernels.build(sources, str(cache), cxx, environ={}) == path
    assert os.stat(path).st_mtime_ns == built_at  # not compiled again
    assert os.listdir(cache) == [os.path.basename(path)]

    broken = tmp_path / "broken.cc"
    broken.write_text("int main( {\n")
    with pytest.raises(native_kernels.BuildError) as error:
        native_kernels.build([str(broken)], str(cache), cxx)
    assert "\n" not in str(error.value) and "broken.cc" in str(error.value)
    # No temporary left; the failure is remembered beside the failed library's name.
    failed = native_kernels.library_path([str(broken)], str(cache), cxx, environ={})
    assert sorted(os.listdir(cache)) == sorted([os.path.basename(path),
                                                os.path.basename(failed) + ".failed"])
    # A changed source is another library, not the cached one.
    changed = tmp_path / "layer_norm_grad.cc"
    changed.write_text(pathlib.Path(sources[0]).read_text() + "\n// changed\n")
    assert native_kernels.library_name([str(changed), sources[1]], cxx, []) != \
        native_kernels.library_name(sources, cxx, [])
    # So is a changed header beside the sources.
    other = tmp_path / "other"
    other.mkdir()
    for path in [*sources, os.path.join(native_kernels.SOURCE_DIR, "kernel_util.h")]:
        shutil.copy(path, other)
    copied = sorted(str(p) for p in other.glob("*.cc"))
    assert native_kernels.library_name(copied, cxx, []) == \
        native_kernels.library_name(sources, cxx, [])
    (other / "kernel_util.h").write_text((other / "kernel_util.h").read_text() + "// changed\n")
    assert native_kernels.library_name(copied, cxx, []) != \
        native_kernels.library_name(sources, cxx, [])


@needs_compiler
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                    reason="the AVX2 target (haswell) is an x86 target")
def test_another_target_is_another_library_that_runs_the_same_maths(tmp_path, fresh_build):
    sources, cxx = native_kernels.sources(), native_kernels.compiler()
    cache = str(tmp_path / "cache")
    haswell = native_kernels.build(sources, cache, cxx,
                                   environ={native_kernels.MARCH_ENV: "haswell"})
    assert os.path.basename(haswell) != os.path.basename(fresh_build[1])
    if shutil.which("objdump"):  # AVX2 code: no AVX512 (zmm) registers
        listing = subprocess.run(["objdump", "-d", haswell], capture_output=True,
                                 text=True, check=True).stdout
        assert "%ymm" in listing and "%zmm" not in listing
    # A process loads one library of these ops (TensorFlow keeps the first registration):
    # the AVX2 one is run in a process of its own, against the closed form.
    script = (
        "import numpy as np, tensorflow as tf, sys\n"
        "ops = tf.load_op_library(sys.argv[1])\n"
        "x, dy, scale = (np.load(sys.argv[2])[k] for k in ('x', 'dy', 'scale'))\n"
        "mean = x.mean(-1, keepdims=True)\n"
        "rstd = 1 / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + 1e-6)\n"
        "got = ops.t2t_lite_layer_norm_grad(dy=dy, norm_x=(x - mean) * rstd, rstd=rstd,"
        " scale=scale)\n"
        "np.savez(sys.argv[3], *[g.numpy() for g in got])\n")
    rng = np.random.default_rng(5)
    x, dy = rng.normal(size=(2, 37, 24)) * 3 + 1, rng.normal(size=(2, 37, 24))
    scale = rng.normal(size=24)
    np.savez(tmp_path / "in.npz", x=x, dy=dy, scale=scale)
    result = subprocess.run([sys.executable, "-c", script, haswell, str(tmp_path / "in.npz"),
                             str(tmp_path / "out.npz")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    got = np.load(tmp_path / "out.npz")
    for i, want in enumerate(_reference_grad(dy, x, scale)):
        np.testing.assert_allclose(got[f"arr_{i}"], want, rtol=1e-12,
                                   atol=1e-12 * np.abs(want).max())

    for bad in ("haswell; rm -rf /", "a b"):
        with pytest.raises(native_kernels.BuildError, match="T2T_LITE_KERNEL_MARCH"):
            native_kernels.march_flag({native_kernels.MARCH_ENV: bad})
    with pytest.raises(native_kernels.BuildError) as error:  # the compiler's own refusal
        native_kernels.build(sources, cache, cxx, environ={native_kernels.MARCH_ENV: "no-such-cpu"})
    assert "\n" not in str(error.value)
    assert native_kernels.march_flag({}) == "-march=native"


def test_no_compiler_is_none_and_the_cache_follows_the_environment():
    assert native_kernels.compiler({"CXX": "/nonexistent/c++"}) is None
    assert native_kernels.cache_dir({native_kernels.CACHE_ENV: "/x/k"}) == "/x/k"
    assert native_kernels.cache_dir({"XDG_CACHE_HOME": "/c"}) == "/c/t2t_lite/kernels"


def _cpu_flags() -> set[str]:
    from t2t_lite.utils import onednn
    return onednn.cpu_info(onednn.read_cpuinfo())[1]


def test_each_target_is_tried_without_avx512_fp16_first_then_as_it_is():
    # TensorFlow's Eigen headers fail under GCC 12 with AVX512-FP16 (PacketMathFP16.h), and
    # the kernels have no half-precision code: leaving it out first costs nothing.
    assert native_kernels.target_flag_sets("native", {"avx2", "fma"}, "x86_64") == [
        ["-march=native", "-mno-avx512fp16"], ["-march=native"], ["-march=x86-64-v3"]]
    assert native_kernels.target_flag_sets("native", {"sse4_2"}, "x86_64")[-1] == [
        "-march=x86-64-v2"]
    assert native_kernels.target_flag_sets("haswell", {"avx2", "fma"}, "x86_64") == [
        ["-march=haswell", "-mno-avx512fp16"], ["-march=haswell"]]
    assert native_kernels.target_flag_sets("native", set(), "aarch64") == [["-march=native"]]


@needs_compiler
@pytest.mark.slow
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                    reason="sapphirerapids is an x86 target")
def test_the_kernels_compile_for_sapphirerapids(tmp_path):
    """The target of today's Intel servers (AVX512-FP16, AMX), whose build failed inside
    TensorFlow's Eigen headers: compiled on any x86 machine, run where the CPU has it."""
    sources, cxx = native_kernels.sources(), native_kernels.compiler()
    environ = {native_kernels.MARCH_ENV: "sapphirerapids"}
    path = native_kernels.build(sources, str(tmp_path), cxx, environ=environ)
    assert os.path.getsize(path) > 0 and not os.path.exists(native_kernels.failure_path(path))
    if not {"avx512_fp16", "amx_tile", "avx512_bf16"} <= _cpu_flags():
        return  # compile only: this CPU cannot run the target's code
    script = ("import sys, tensorflow as tf\n"
              "ops = tf.load_op_library(sys.argv[1])\n"
              "got = ops.t2t_lite_softmax_dropout_grad(d_dropped=[[1., 2., 3.]],"
              " weights=[[.2, .3, .5]], mask=[[1., 1., 0.]])\n"
              "print(repr(got.numpy().tolist()))\n")
    result = subprocess.run([sys.executable, "-c", script, path], capture_output=True,
                            text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert result.returncode == 0, result.stderr[-2000:]
    # (d * m - sum(d * m * w)) * w = ([1, 2, 0] - 0.8) * [.2, .3, .5]
    np.testing.assert_allclose(eval(result.stdout.strip().splitlines()[-1]),
                               [[0.04, 0.36, -0.4]], rtol=1e-6)


_FAKE_COMPILER = """#!/bin/sh
echo "$PPID $*" >> "{calls}"
sleep 2
echo "kernel.cc:1:1: error: this compiler always fails" >&2
exit 1
"""

_LOAD = ("import logging, sys\n"
         "from t2t_lite.layers import native_kernels\n"
         "print('loaded' if native_kernels.layer_norm_grad() else 'fallback')\n")


def _run_load(env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _LOAD], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_a_failing_compiler_builds_once_across_processes_and_is_remembered(tmp_path):
    calls = tmp_path / "calls.txt"
    fake = tmp_path / "fake-c++"
    fake.write_text(_FAKE_COMPILER.format(calls=calls))
    fake.chmod(0o755)
    env = dict(os.environ, CXX=str(fake), TF_CPP_MIN_LOG_LEVEL="2",
               **{native_kernels.CACHE_ENV: str(tmp_path / "cache")})
    env.pop(native_kernels.ENV, None)
    env.pop(native_kernels.MARCH_ENV, None)
    first, second = _run_load(env), _run_load(env)  # two processes starting at once
    outputs = [p.communicate(timeout=300) for p in (first, second)]
    assert [out.strip() for out, _ in outputs] == ["fallback", "fallback"]
    builds = calls.read_text().splitlines()
    # One build: each target flag set tried once, by one process (not twice, one per process).
    one_build = native_kernels.target_flag_sets("native", _cpu_flags())
    assert len(builds) == len(one_build)
    assert len({line.split()[0] for line in builds}) == 1
    for _, err in outputs:
        warnings = [line for line in err.splitlines() if "Native kernels unavailable" in line]
        assert len(warnings) == 1 and "always fails" in warnings[0], err[-2000:]
    # The next process compiles nothing: the failure is remembered under the library's key.
    out, err = _run_load(env).communicate(timeout=300)
    assert out.strip() == "fallback" and "remembered" in err
    assert len(calls.read_text().splitlines()) == len(one_build)


@needs_compiler
@pytest.mark.slow
@pytest.mark.parametrize("content", ["junk", "foreign"])
def test_a_damaged_or_foreign_library_in_the_cache_is_one_warning_and_rebuilt(
        tmp_path, fresh_build, content):
    """A file under the cache's name that does not load, or loads without the kernels' ops:
    one warning, TensorFlow ops in that process (the same gradients), removed; the next
    process builds the library again."""
    cache = tmp_path / "cache"
    cache.mkdir()
    cxx = native_kernels.compiler()
    # A "compiler" that hands over the library built once for this module (no 20 s build).
    fake = tmp_path / "copying-c++"
    fake.write_text('#!/bin/sh\nwhile [ "$1" != "-o" ]; do shift; done\n'
                    f'cp "{fresh_build[1]}" "$2"\n')
    fake.chmod(0o755)
    env = dict(os.environ, CXX=str(fake), TF_CPP_MIN_LOG_LEVEL="2",
               **{native_kernels.CACHE_ENV: str(cache)})
    env.pop(native_kernels.ENV, None)
    env.pop(native_kernels.MARCH_ENV, None)
    path = pathlib.Path(native_kernels.library_path(native_kernels.sources(), str(cache),
                                                    str(fake), environ={}))
    if content == "junk":
        path.write_bytes(b"\x7fELF not really a library")
    else:  # a real shared library that is not ours
        source = tmp_path / "other.c"
        source.write_text("int t2t_lite_other(void) { return 1; }\n")
        subprocess.run([cxx, "-x", "c", "-shared", "-fPIC", str(source), "-o", str(path)],
                       check=True)
    script = ("import numpy as np, tensorflow as tf\n"
              "from t2t_lite.layers import fused_ops, native_kernels\n"
              "x = tf.constant(np.random.default_rng(1).normal(size=(5, 8)), tf.float32)\n"
              "with tf.GradientTape() as tape:\n"
              "    tape.watch(x)\n"
              "    y = fused_ops.layer_norm(x, tf.ones([8]), tf.zeros([8]), 1e-6)\n"
              "dx = tape.gradient(y, x, output_gradients=tf.reshape(tf.range(40.), [5, 8]))\n"
              "print('loaded' if native_kernels._load() else 'fallback', "
              "repr(dx.numpy().tolist()))\n")
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    state, dx = result.stdout.strip().splitlines()[-1].split(" ", 1)
    assert state == "fallback"
    warnings = [line for line in result.stderr.splitlines() if "does not load" in line]
    assert len(warnings) == 1 and str(path) in warnings[0], result.stderr[-2000:]
    x = np.random.default_rng(1).normal(size=(5, 8)).astype(np.float32)
    want = _reference_grad(np.arange(40.0).reshape(5, 8), x, np.ones(8))[0]
    np.testing.assert_allclose(eval(dx), want, rtol=1e-4, atol=1e-4)
    assert not path.exists()  # removed: the next process builds it anew
    out, err = _run_load(env).communicate(timeout=300)
    assert out.strip() == "loaded", err[-2000:]
    assert path.exists()


def test_a_cache_that_cannot_be_written_is_one_warning_and_training_runs(tmp_path, monkeypatch,
                                                                         caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(native_kernels.CACHE_ENV, str(blocker / "kernels"))
    monkeypatch.delenv(native_kernels.ENV, raising=False)
    monkeypatch.setenv("CXX", "/bin/false")  # never reached: the cache is checked first
    native_kernels._load.cache_clear()
    try:
        with caplog.at_level("WARNING"):
            assert native_kernels.layer_norm_grad() is None
            assert native_kernels.softmax_dropout_grad() is None
        warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert len(warnings) == 1 and "cannot write the kernel cache" in warnings[0]
        x = tf.constant(np.random.default_rng(2).normal(size=(4, 8)).astype(np.float32))
        got = _norm_grads(x, tf.ones([8]), tf.zeros([8]), tf.ones_like(x))
        for a, b in zip(got, _reference_grad(np.ones((4, 8)), x, np.ones(8))):
            np.testing.assert_allclose(a, b, atol=1e-5)
    finally:
        native_kernels._load.cache_clear()


@needs_compiler
def test_only_a_computation_placed_on_a_cpu_takes_the_native_ops():
    """The kernels are registered for CPU devices only: a layer norm or attention placed on
    a GPU (here by its device string; TensorFlow places it softly where there is none)
    differentiates with TensorFlow ops; on a CPU with the native ops."""
    assert native_kernels.placed_on_cpu(tf.constant(1.0))  # eager, on this host's CPU

    def grads(x, device):
        with tf.device(device):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = fused_ops.layer_norm(x, tf.ones([8]), tf.zeros([8]), 1e-6)
                z = fused_ops.softmax_dropout_matmul(
                    tf.reshape(y, [1, 1, 4, 8])[..., :4], tf.ones([1, 1, 4, 4]),
                    tf.ones([1, 1, 4, 4]))
                loss = tf.reduce_sum(z * z)
            return tape.gradient(loss, x)

    spec = tf.TensorSpec([4, 8], tf.float32)
    op_types = {}
    for device in ("/device:GPU:0", "/device:CPU:0"):
        graph = tf.function(lambda x, d=device: grads(x, d), autograph=False
                            ).get_concrete_function(spec).graph
        op_types[device] = {op.type for op in graph.get_operations()}
    if native_kernels._load() is None:
        pytest.fail("the native kernels did not build on a machine with a compiler")
    assert {"T2tLiteLayerNormGrad", "T2tLiteSoftmaxDropoutGrad"} <= op_types["/device:CPU:0"]
    assert not {"T2tLiteLayerNormGrad", "T2tLiteSoftmaxDropoutGrad"} & \
        op_types["/device:GPU:0"]
