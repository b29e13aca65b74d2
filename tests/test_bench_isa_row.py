"""bench/isa_row.py: it reads the summaries the compare scripts print (lines of a real run on
an AVX2 machine), holds each figure against the per-ISA goal for the machine's vector unit,
and refuses a missing t2t venv before measuring anything."""
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench"))
import isa_row

# compare_train_speed.py and compare_decode_speed.py on AMD EPYC (family 25), 2026-11-27.
TRAIN_OUTPUT = """\
round 1 t2t:      rc 0, 234 s, peak 1669 MB, steps/s [1.19669, 1.29471, 1.29471]
round 1 t2t_lite: rc 0, 105 s, peak 1059 MB, steps/s [2.23, 2.21, 2.33, 2.25]
t2t      1.29 steps/s, peak RSS 1669 MB, 235 s per 200-step run
t2t_lite 2.29 steps/s, peak RSS 1072 MB, 102 s per 200-step run
t2t_lite/t2t training speed 1.78x, memory 0.64x
"""
DECODE_OUTPUT = """\
round 1 t2t-decoder:     69.8 s, peak 861 MB
round 1 t2t_lite decode: 30.1 s, peak 936 MB
identical output lines: 500 of 500 (t2t_lite wrote 500)
t2t 70.5 s, t2t_lite 29.4 s per whole decode process; t2t_lite decoding speed 2.40x
"""
BENCH_OUTPUT = """\
machine: AMD EPYC (family 25, model 17), 2 cores, AVX2 vectors, bfloat16 matmuls on none
transformer_tiny  float32 tf.matmul on the model's shapes: 135.8 GFLOP/s (best call of each shape)
transformer_tiny  batch 128x32 t2t_lite              9178 tokens/s   2.241 steps/s  110.2 GFLOP/s =  68.5% of peak =  83.9% of its matmul rate (median round, wall time; by CPU time 78.9%) (median round 466 ms/step; process CPU time best 867, median 893 ms/step)
transformer_tiny  batch 128x32 t2t_lite bfloat16     9000 tokens/s   2.200 steps/s  108.0 GFLOP/s =  67.0% of peak =  70.0% of its matmul rate (median round, wall time; by CPU time 69.0%) (median round 470 ms/step; process CPU time best 900, median 910 ms/step)
"""


def test_parses_the_training_comparison():
    assert isa_row.parse_train_compare(TRAIN_OUTPUT) == {
        "t2t": 1.29, "lite": 2.29, "ratio": 1.78, "t2t_rss": 1669, "lite_rss": 1072}


def test_parses_the_decoding_comparison():
    assert isa_row.parse_decode_compare(DECODE_OUTPUT) == {
        "t2t": 70.5, "lite": 29.4, "ratio": 2.40, "identical": 500, "lines": 500}


def test_parses_the_float32_step_not_the_bfloat16_one():
    assert isa_row.parse_bench_training(BENCH_OUTPUT, "transformer_tiny") == {
        "wall": 83.9, "cpu": 78.9, "ms": 466, "matmul_rate": 135.8}


@pytest.mark.parametrize("parse,text", [
    (isa_row.parse_train_compare, "t2t_lite training failed (rc != 0): see the logs"),
    (isa_row.parse_decode_compare, DECODE_OUTPUT.replace("identical output lines", "lines")),
    (lambda text: isa_row.parse_bench_training(text, "transformer_base"), BENCH_OUTPUT),
])
def test_a_missing_summary_is_an_error_naming_it(parse, text):
    with pytest.raises(isa_row.ParseError, match="no .* in the output"):
        parse(text)


def _figures(train_ratio, decode_ratio, identical, tiny, tiny_data, base):
    return ({"ratio": train_ratio}, {"ratio": decode_ratio, "identical": identical, "lines": 500},
            {"wall": tiny}, {"wall": tiny_data}, {"wall": base})


def test_goals_follow_the_vector_unit():
    figures = _figures(1.40, 2.0, 500, 94.1, 80.2, 93.6)
    avx2 = isa_row.goals("AVX2", *figures)
    assert [met for _, _, met in avx2] == [True, True, True, False, True]
    assert avx2[0][:2] == ("training >= 1.25x t2t's steps/s", "1.40x")
    # The same 1.40x misses AVX512's 1.5x.
    avx512 = isa_row.goals("AVX512", *figures)
    assert avx512[0][0] == "training >= 1.5x t2t's steps/s" and not avx512[0][2]
    # AVX512 and AMX machines decode at 2x t2t's speed or more; AVX2 ones at 1.8x.
    assert avx512[1][0] == "decoding >= 2.0x t2t, lines identical" and avx512[1][2]
    assert not isa_row.goals("AVX512", *_figures(1.6, 1.95, 500, 90, 90, 95))[1][2]
    assert isa_row.goals("AVX2", *_figures(1.6, 1.95, 500, 90, 90, 95))[1][2]
    # A decode that differs in one line misses its goal however fast it is.
    assert not isa_row.goals("AVX2", *_figures(1.4, 2.5, 499, 90, 90, 95))[1][2]


def test_the_avx2_proxy_is_judged_by_the_avx2_goals():
    assert isa_row.goal_isa("AVX512", {"ONEDNN_MAX_CPU_ISA": "avx2"}) == "AVX2"
    assert isa_row.goal_isa("AVX512", {"ONEDNN_MAX_CPU_ISA": "AVX2_VNNI"}) == "AVX2"
    assert isa_row.goal_isa("AVX512", {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}) == "AVX512"
    assert isa_row.goal_isa("AVX512", {}) == "AVX512"
    assert isa_row.goal_isa("AVX2", {}) == "AVX2"


def test_decode_figure_says_how_long_the_lines_are(tmp_path):
    outputs, reference = tmp_path / "out.txt", tmp_path / "ref.txt"
    outputs.write_text("Hallo Welt\n\n\n\n")  # what a 200-step model emits: mostly EOS
    reference.write_text("Hallo Welt\nwie geht es dir\n")
    words, reference_words = isa_row.output_words(outputs), isa_row.output_words(reference)
    assert (words, reference_words) == (0.5, 3.0)
    train, decode, *rest = _figures(1.4, 2.5, 500, 90, 90, 95)
    decode.update(words=words, reference_words=reference_words)
    assert isa_row.goals("AVX2", train, decode, *rest)[1][1:] == (
        "2.50x, 500/500 identical, 0.5 words per line (reference 3.0)", True)


def test_table_row():
    row = isa_row.table_row(
        "AMD EPYC, 2 cores, AVX2 vectors", "2026-11-27 22:00 UTC, abc1234",
        isa_row.parse_train_compare(TRAIN_OUTPUT), isa_row.parse_decode_compare(DECODE_OUTPUT),
        {"wall": 94.1}, 8192, {"wall": 83.9}, 8085, {"wall": 93.6})
    assert row == ("| `AMD EPYC, 2 cores, AVX2 vectors` | 2026-11-27 22:00 UTC, abc1234 | "
                   "1.29 -> 2.29 = **1.78x** | 70.5 -> 29.4 s = **2.40x**, 500/500 identical | "
                   "94.1% at V = 8192 (83.9% at V = 8085) | 93.6% |")
    decode = dict(isa_row.parse_decode_compare(DECODE_OUTPUT), words=18.7, reference_words=19.3)
    row = isa_row.table_row("m", "w", isa_row.parse_train_compare(TRAIN_OUTPUT), decode,
                            {"wall": 94.1}, 8192, {"wall": 83.9}, 8085, {"wall": 93.6})
    assert "500/500 identical, 18.7 words per line (reference 19.3) |" in row


def test_refuses_a_missing_t2t_venv_before_measuring(tmp_path):
    shared = tmp_path / "shared" / "t2t_speed"
    shared.mkdir(parents=True)
    (shared / "compare_train_speed.py").write_text("")
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "bench" / "isa_row.py"), "--t2t_python",
         str(tmp_path / "no-venv" / "bin" / "python"), "--shared", str(tmp_path / "shared"),
         "--out", str(tmp_path / "logs")],
        capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"isa_row: --t2t_python {tmp_path}/no-venv/bin/python is not an executable (make the "
        f"venv with {shared}/setup_t2t_venv.sh)"]
    assert not (tmp_path / "logs").exists()


def test_takes_the_shared_folder_from_t2t_lite_shared(tmp_path):
    # A worktree outside the workplace has no ../shared: the tests' variable names it.
    missing = tmp_path / "elsewhere"
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "bench" / "isa_row.py"), "--t2t_python",
         str(tmp_path / "no-venv" / "bin" / "python"), "--out", str(tmp_path / "logs")],
        capture_output=True, text=True, timeout=120, check=False,
        env=dict(os.environ, T2T_LITE_SHARED=str(missing)))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"isa_row: no compare_train_speed.py in {missing}/t2t_speed (--shared or "
        "T2T_LITE_SHARED)"]
    assert not (tmp_path / "logs").exists()
