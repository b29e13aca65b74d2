"""run.py as a user calls it: flags parse, help is readable, bad input fails clearly."""
import subprocess
import sys

from tests.conftest import REPO_ROOT


def _run(*args: str, timeout: int = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "run.py"), *args],
        check=False, capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT,
    )


def test_helpfull_lists_t2t_flags():
    result = _run("--helpfull")  # absl exits with status 1 after printing help
    for flag in ("--problem", "--hparams_set", "--hparams", "--data_dir", "--output_dir",
                 "--train_steps", "--eval_steps", "--local_eval_frequency",
                 "--keep_checkpoint_max", "--decode_hparams", "--schedule", "--mode"):
        assert flag in result.stdout, flag


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
    sys.path.insert(0, str(REPO_ROOT))
    import run

    class Flags:
        mode = None
        schedule = "continuous_train_and_eval"

    assert run.resolve_mode(Flags) == "train_and_eval"
    Flags.schedule = None
    assert run.resolve_mode(Flags) == "default"
    Flags.mode = "decode"
    assert run.resolve_mode(Flags) == "decode"
