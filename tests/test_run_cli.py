"""run.py as a user calls it: flags parse, help is readable, bad input fails clearly."""
import os
import subprocess
import sys

from tests.conftest import REPO_ROOT


def _run(*args: str, timeout: int = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "run.py"), *args],
        check=False, capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT,
    )


def test_helpfull_lists_t2t_flags():
    result = _run("--helpfull")
    for flag in ("--problem", "--hparams_set", "--hparams", "--data_dir", "--output_dir",
                 "--train_steps", "--eval_steps", "--local_eval_frequency",
                 "--keep_checkpoint_max", "--decode_hparams", "--schedule", "--mode"):
        assert flag in result.stdout, flag
    assert result.returncode == 0  # absl's help exits 1; run.py's says it succeeded


def test_unknown_mode_is_rejected_with_choices():
    result = _run("--mode=trian")
    assert result.returncode != 0
    assert "--mode=trian" in result.stderr and "train" in result.stderr


def test_stray_argument_is_rejected():
    result = _run("--mode=bleu", "extra_arg")
    assert result.returncode != 0
    assert "extra_arg" in result.stderr


def test_flagfile_is_supported(tmp_path):
    flagfile = tmp_path / "flags.txt"
    flagfile.write_text("--mode=trian\n")
    result = _run(f"--flagfile={flagfile}")
    assert result.returncode != 0 and "--mode=trian" in result.stderr


def test_schedule_maps_to_mode():
    from t2t_lite.bin import main as entry_point  # run.py's body

    class Flags:
        mode = None
        schedule = "continuous_train_and_eval"

    assert entry_point.resolve_mode(Flags) == "train_and_eval"
    Flags.schedule = None
    assert entry_point.resolve_mode(Flags) == "default"
    Flags.mode = "decode"
    assert entry_point.resolve_mode(Flags) == "decode"


def _console_script(*args: str) -> subprocess.CompletedProcess:
    """Runs `t2t_lite.bin.main:main` the way the `t2t-lite` console script does (`__main__`
    is a wrapper module without a docstring)."""
    wrapper = ("import sys; sys.argv[0] = 't2t-lite'; from t2t_lite.bin.main import main; "
               "sys.exit(main())")
    return subprocess.run(
        [sys.executable, "-c", wrapper, *args],
        check=False, capture_output=True, text=True, timeout=60, cwd=REPO_ROOT,
    )


def test_help_is_the_same_for_run_py_and_the_console_script():
    direct, script = _run("--help"), _console_script("--help")
    module = subprocess.run([sys.executable, "-m", "t2t_lite", "--help"], check=False,
                            capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    for result in (direct, script, module):
        assert result.returncode == 0, result.stderr
        text = result.stdout
        assert "t2t_lite's single entry point" in text
        # The wrapped example command keeps its line break (a raw docstring).
        assert "--hparams_set=transformer_base \\\n        --data_dir=" in text
        for flag in ("--problem", "--hparams_set", "--output_dir", "--decode_hparams"):
            assert flag in text, flag
    def flag_lines(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.startswith("  --")]

    assert flag_lines(direct.stdout) == flag_lines(script.stdout) == flag_lines(module.stdout)


def test_tensorflow_start_prints_nothing_but_the_answer(tmp_path):
    # decode mode imports TensorFlow before it reads its flags: neither the machine's CUDA
    # start-up lines nor the oneDNN / CPU-feature banners may reach stderr, only the error.
    result = _run("--mode=decode", f"--output_dir={tmp_path / 'no_run'}")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "error: --mode=decode needs --problem (or an --output_dir whose flags.json names it)"]


def _run_without_tensorflow(tmp_path, *args: str) -> subprocess.CompletedProcess:
    """run.py with a `tensorflow` package on the path whose import fails."""
    fake = tmp_path / "fake_site" / "tensorflow"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise ImportError("tensorflow was imported")\n')
    env = {**os.environ, "PYTHONPATH": str(fake.parent)}
    return subprocess.run([sys.executable, str(REPO_ROOT / "run.py"), *args], check=False,
                          capture_output=True, text=True, timeout=60, cwd=REPO_ROOT, env=env)


def test_bleu_mode_runs_without_tensorflow(tmp_path):
    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hyp.write_text("the cat sat on the mat\n")
    ref.write_text("the cat sat on the mat\n")
    result = _run_without_tensorflow(tmp_path, "--mode=bleu", f"--translation={hyp}",
                                     f"--reference={ref}")
    assert result.returncode == 0, result.stderr
    assert "BLEU_cased = 100.00" in result.stdout


def test_bleu_mode_metrics_run_without_tensorflow(tmp_path):
    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hyp.write_text("the cat sat on the mat\n")
    ref.write_text("the cat sat on a mat\n")
    result = _run_without_tensorflow(tmp_path, "--mode=bleu", f"--translation={hyp}",
                                     f"--reference={ref}", "--metrics=bleu,chrf,chrf++,ter")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    # t2t's lines where they were, sacreBLEU's other metrics after them.
    assert lines[1].startswith("BLEU_uncased = ") and lines[2].startswith("BLEU_cased = ")
    assert [line.split("|")[0] for line in lines[3:]] == ["chrF2", "chrF2++", "TER"]
    assert lines[5].endswith("= 16.67")  # one substitution in six words


def test_misspelled_hparams_set_is_refused_before_tensorflow(tmp_path):
    result = _run_without_tensorflow(
        tmp_path, "--mode=train", "--hparams_set=transformer_tinyy", "--problem=x",
        f"--data_dir={tmp_path}", f"--output_dir={tmp_path / 'run'}")
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "error: Unknown hparams set 'transformer_tinyy'. Did you mean: transformer_tiny"), lines
    assert not (tmp_path / "run").exists()
