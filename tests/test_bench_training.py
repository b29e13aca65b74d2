"""bench/bench_training.py: the matmul shapes behind its "% of the matmul rate" are the FLOPs
it counts, and one small run prints the machine, float32 and bfloat16 side by side with a
profile, under hparams overrides; bench/machine.py names the CPU's bfloat16 units."""
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench"))
import bench_training
import isa_row
import machine

from t2t_lite.hparams_lib import create_hparams


@pytest.mark.parametrize("name", ["transformer_tiny", "transformer_base"])
def test_model_matmul_shapes_are_the_counted_flops_without_attention_products(name):
    hp = create_hparams(name)
    batch, length, vocab = 128, 32, 8192
    shapes = bench_training.model_matmul_shapes(hp, batch, length, vocab)
    # Forward [m, k] x [k, n] plus its two gradient matmuls: 3 x 2 m k n FLOPs.
    matmul_flops = sum(6.0 * m * k * n * count for m, k, n, count in shapes.values())
    n, d = hp.num_hidden_layers, hp.hidden_size
    # QK^T and AV (4 B L^2 d per attention, 3 attentions per encoder + decoder layer), x3.
    attention_products = 3.0 * 3 * n * 4 * batch * length * length * d
    assert matmul_flops + attention_products == pytest.approx(
        bench_training.train_flops(hp, batch, length, vocab), rel=1e-12)


@pytest.mark.parametrize("op_name,op_type,category", [
    ("adam/Mul", "Mul", "optimizer"),
    ("x/AssignAddVariableOp", "AssignAddVariableOp", "optimizer"),
    ("grad/encoder/ffn/MatMul", "_MklMatMul", "matmuls"),
    ("decoder/ffn/stateless_random_uniform", "StatelessRandomUniformFullIntV2", "dropout masks"),
    ("encoder/layer_norm/mul", "Mul", "layer norms"),
    ("encoder/layer_norm/Cast", "Cast", "casts"),
    ("while/body/_1/while/Softmax", "_MklSoftmax", "softmax layer"),
    # oneDNN's op types (TF_ENABLE_ONEDNN_OPTS=1) as a profile names them.
    ("decoder/ffn/dense/BiasAdd", "_MklNativeFusedMatMul", "matmuls"),
    ("encoder/multihead_attention/MatMul", "_MklBatchMatMulV2", "matmuls"),
    ("encoder/multihead_attention/transpose", "_MklTranspose", "layout"),
    ("x/mkl_to_tf", "_MklToTf", "layout"),
    ("encoder/norm", "_MklLayerNorm", "layer norms"),
    ("encoder/multihead_attention/Softmax", "_MklSoftmax", "attention softmax"),
    ("softmax_dropout_matmul_grad_5/mul", "Mul", "attention softmax"),
    ("encoder/residual/add", "AddV2", "other elementwise"),
])
def test_op_categories(op_name, op_type, category):
    assert bench_training.op_category(op_name, op_type).startswith(category)


@pytest.mark.slow
def test_small_run_prints_both_dtypes_their_matmul_rates_and_a_profile():
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "bench" / "bench_training.py"),
         "--hparams_sets", "transformer_tiny", "--batch_tokens", "64", "--length", "8",
         "--vocab_size", "64", "--steps", "1", "--rounds", "1",
         "--dtypes", "float32,bfloat16", "--no_baseline", "--profile_steps", "1",
         "--hparams", "layer_prepostprocess_dropout=0.0,attention_dropout=0.0,relu_dropout=0.0"],
        capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert re.search(r"^machine: .+, \d+ cores, \w+ vectors, bfloat16 matmuls on .+; load average",
                     out, re.MULTILINE), out
    for dtype in ("float32", "bfloat16"):
        rate = re.search(rf"{dtype} tf.matmul on the model's shapes: ([\d.]+) GFLOP/s", out)
        assert rate and float(rate.group(1)) > 0, out
    steps = re.findall(r"batch 8x8 (t2t_lite(?: bfloat16)?) +\d+ tokens/s +([\d.]+) steps/s "
                       r".* of peak = +[\d.]+% of its matmul rate", out)
    assert [impl for impl, _ in steps] == ["t2t_lite", "t2t_lite bfloat16"], out
    assert all(float(rate) > 0 for _, rate in steps)
    assert re.search(r"t2t_lite bfloat16 / t2t_lite float32 speed: [\d.]+x", out), out
    # bench/isa_row.py reads the float32 line of this output.
    parsed = isa_row.parse_bench_training(out, "transformer_tiny")
    share = re.search(r"batch 8x8 t2t_lite +.* ([\d.]+)% of its matmul rate \(median round, "
                      r"wall time; by CPU time ([\d.]+)%\)", out)
    assert (parsed["wall"], parsed["cpu"]) == (float(share[1]), float(share[2]))
    assert parsed["ms"] > 0 and parsed["matmul_rate"] > 0
    assert "plain Keras" not in out
    for impl in ("t2t_lite", "t2t_lite bfloat16"):
        assert f"transformer_tiny {impl}, by category" in out
    # The bfloat16 step's profile has its matmuls and its casts.
    profile = out.split("transformer_tiny t2t_lite bfloat16, by category")[1]
    assert "matmuls (counted FLOPs)" in profile.split("by op type")[0]
    assert "casts" in profile.split("by op type")[0]
    # --hparams reached the model: without dropout no step draws or applies a mask (the
    # hashed masks' XLA kernels are not in the profile, the ops that apply them are).
    for impl in ("t2t_lite", "t2t_lite bfloat16"):
        categories = out.split(f"transformer_tiny {impl}, by category")[1].split("by op type")[0]
        assert not re.search(r"%\s+dropout (masks|apply)", categories), categories


CPUINFO = """processor\t: 0
cpu family\t: 25
model\t\t: 17
model name\t: {model}
flags\t\t: fpu sse avx512f {extra}

processor\t: 1
model name\t: {model}
flags\t\t: fpu sse avx512f {extra}
"""


@pytest.mark.parametrize("extra,units", [
    ("avx512_bf16 amx_bf16 amx_tile", "AMX-BF16"),
    ("avx512_bf16 avx512_vnni", "AVX512-BF16 (no AMX)"),
    ("avx2", "none (bfloat16 converted to float32)"),
])
def test_machine_names_the_bfloat16_units(tmp_path, extra, units):
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO.format(model="Some CPU 9000", extra=extra))
    line = machine.describe_cpu(str(path))
    assert line.startswith("Some CPU 9000 (family 25, model 17), ")
    assert line.endswith(f"AVX512 vectors, bfloat16 matmuls on {units}")
    assert machine.cpu_flags(path.read_text()) >= {"fpu", "avx512f"}


@pytest.mark.parametrize("flags,isa", [
    ("fpu sse avx avx2 fma avx512f avx512bw", "AVX512"),
    ("fpu sse avx avx2 fma", "AVX2"),  # e.g. a guest whose hypervisor hides AVX512
    ("fpu sse avx", "AVX"),
    ("fpu sse sse2", "SSE"),
])
def test_machine_names_the_widest_vector_unit(flags, isa):
    assert machine.vector_isa(set(flags.split())) == isa


def test_machine_without_cpuinfo(tmp_path):
    assert machine.describe_cpu(str(tmp_path / "missing")).startswith("unknown CPU, ")


def test_chunk_loss_bench_prints_both_layouts_and_their_ratio(capsys, monkeypatch):
    """bench/bench_chunk_loss.py times `fused_ops.softmax_cross_entropy` in both layouts
    (the layouts' equality is tests/test_common_layers.py's) and names the one t2t_lite
    takes for the vocabulary size."""
    import bench_chunk_loss

    monkeypatch.setattr(sys, "argv", [
        "bench_chunk_loss.py", "--rows", "48", "--depth", "8", "--vocab", "32", "--chunk",
        "16", "--rounds", "2", "--calls", "1"])
    bench_chunk_loss.main()
    out = capsys.readouterr().out
    assert out.startswith("machine: ")
    for name in ("d_matrixᵀ = xᵀ · e", "d_matrix = e · x", "d_x = eᵀ · matrix"):
        assert name in out
    assert re.search(r"vocab-major: \d+\.\d\dx the position-major speed by wall time, "
                     r"\d+\.\d\dx by CPU time; t2t_lite takes position-major for V = 32", out)
    assert len(re.findall(r"loss \+ gradients, \[48, 8\] x \[32, 8\]: rounds \d+ / \d+ ms", out)) == 2
    loss_difference = float(re.search(r"difference between the layouts: loss (\S+),", out)[1])
    assert loss_difference < 1e-4
