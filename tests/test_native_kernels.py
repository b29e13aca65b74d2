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
    results = []
    for native in (True, False):
        with contextlib.ExitStack() as stack:
            if not native:
                stack.enter_context(native_kernels.disabled())
            assert (native_kernels.softmax_dropout_grad() is not None) is native
            with tf.GradientTape() as tape:
                tape.watch([logits, v])
                out = fused_ops.softmax_dropout_matmul(logits, v, mask)
            results.append(tape.gradient(out, [logits, v], output_gradients=upstream))
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
    assert [os.path.basename(s) for s in sources] == ["layer_norm_grad.cc",
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
    failed = native_kernels.library_name([str(broken)], cxx, [
        "-march=native", *tf.sysconfig.get_compile_flags(), *tf.sysconfig.get_link_flags()])
    assert sorted(os.listdir(cache)) == sorted([os.path.basename(path),
                                                failed + ".failed"])
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
