"""Shared pytest fixtures: where ../shared is, and quiet TensorFlow logs."""
import importlib.util
import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED_DIR = pathlib.Path(os.environ.get("T2T_LITE_SHARED", REPO_ROOT.parent / "shared"))
FIXTURES_DIR = SHARED_DIR / "fixtures" / "t2t"
DATA_DIR = SHARED_DIR / "data"


def error_line(result) -> str:
    """The one `error: ...` line of a run.py subprocess that failed on a user error: exit 1,
    no traceback, the error line last on stderr.

    Args:
      result: the finished subprocess.CompletedProcess (text mode).
    """
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr[-3000:]
    assert result.stderr.rstrip().endswith(errors[0])
    return errors[0]


def load_script(path: pathlib.Path, name: str):
    """Imports the Python file at `path` (a recipe or bench script, not in a package) as `name`."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def require_extra(module: str, extra: str):
    """Imports an optional extra's module for a test: skips without it, except under CI.

    CI installs every extra its tests use (`pip install -e ".[test]"`), so a missing one there
    is an install defect and fails instead of letting the tests of that path skip silently.
    """
    if os.environ.get("T2T_LITE_REQUIRE_SHARED") or os.environ.get("CI"):
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f"{module} is not installed (the [{extra}] extra)")


def _require(path: pathlib.Path) -> pathlib.Path:
    if path.exists():
        return path
    reason = f"{path} is absent (../shared only exists in the t2t_lite workplace)"
    if os.environ.get("T2T_LITE_REQUIRE_SHARED"):
        pytest.fail(reason + "; T2T_LITE_REQUIRE_SHARED is set, so this is an error")
    pytest.skip(reason)
    return path


@pytest.fixture(scope="session")
def t2t_fixtures() -> pathlib.Path:
    """Directory of the original tensor2tensor fixtures (../shared/fixtures/t2t)."""
    return _require(FIXTURES_DIR)


@pytest.fixture(scope="session")
def wmt_toy_dir() -> pathlib.Path:
    """Directory of the toy WMT En-De corpus (train/dev .en/.de)."""
    return _require(DATA_DIR / "wmt_toy_ende")


@pytest.fixture(scope="session")
def ptb_sample_dir() -> pathlib.Path:
    """Root of the Penn Treebank sample in its LDC layout (contains wsj/SS/wsj_SSNN.mrg)."""
    return _require(DATA_DIR / "ptb_sample")
