"""Shared pytest fixtures: where ../shared is, and quiet TensorFlow logs."""
import contextlib
import fcntl
import importlib.util
import os
import pathlib
import shutil
import subprocess

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# run.py's --onednn=auto may turn oneDNN on where TensorFlow leaves it off (after a benchmark);
# tests compare run.py subprocesses with in-process results, so both keep TensorFlow's own
# default on this CPU (a TF_ENABLE_ONEDNN_OPTS given to pytest still applies to both).
from t2t_lite.utils import onednn as _onednn

_TF_DEFAULT_ONEDNN = _onednn.tensorflow_default(_onednn.cpu_info(_onednn.read_cpuinfo())[1])
if _TF_DEFAULT_ONEDNN is not None:
    os.environ.setdefault(_onednn.ENV, "1" if _TF_DEFAULT_ONEDNN else "0")

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


@contextlib.contextmanager
def small_disk(path: pathlib.Path, size: str):
    """A tmpfs of `size` ("40k") mounted at `path` (created) for the block: a disk that
    really fills up. Skips the test where mounting needs root or is not allowed."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a small tmpfs needs root")
    path.mkdir(parents=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                      capture_output=True, check=False).returncode:
        pytest.skip("this machine does not allow mounting a tmpfs")
    try:
        yield path
    finally:
        subprocess.run(["umount", "--lazy", str(path)], check=False)


@contextlib.contextmanager
def read_only_view(source: pathlib.Path, path: pathlib.Path):
    """`source` seen read-only at `path` (a read-only bind mount) for the block: a file system
    that refuses every write, also to root. Skips the test where mounting needs root or is
    not allowed."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("a read-only bind mount needs root")
    path.mkdir(parents=True)
    if subprocess.run(["mount", "--bind", str(source), str(path)],
                      capture_output=True, check=False).returncode:
        pytest.skip("this machine does not allow bind mounts")
    try:
        if subprocess.run(["mount", "-o", "remount,bind,ro", str(path)],
                          capture_output=True, check=False).returncode:
            pytest.skip("this machine does not allow a read-only remount")
        yield path
    finally:
        subprocess.run(["umount", "--lazy", str(path)], check=False)


def fill_up(disk: pathlib.Path) -> None:
    """Writes zeros to `disk`/filler until the file system is full."""
    with open(disk / "filler", "wb", buffering=0) as f, contextlib.suppress(OSError):
        while True:
            f.write(bytes(1 << 16))


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


@contextlib.contextmanager
def _once_per_run(tmp_path_factory, name: str):
    """The folder `name` shared by every pytest-xdist worker of this test run, and whether the
    caller must build it: the first worker to arrive builds it while holding a lock, the others
    wait and reuse it, so that a session fixture costs one build per run, not one per worker.

    Yields (path, build): `path` (not yet created) and True if the caller is to fill it; the
    build counts as done only when the block exits without an exception.
    """
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the run's own folder, above each worker's basetemp
    path, done = base / name, base / f"{name}.done"
    with open(base / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        build = not done.exists()
        yield path, build
        if build:
            done.touch()


@pytest.fixture(scope="session")
def tiny_run_data_dir(tmp_path_factory):
    """The data of `tests.run_py.PROBLEM`, generated by run.py once per test run."""
    from tests.run_py import PROBLEM, run

    with _once_per_run(tmp_path_factory, "tiny_run") as (folder, build):
        path = folder / "data"
        if build:
            folder.mkdir(exist_ok=True)
            result = run("--mode=datagen", f"--problem={PROBLEM}", f"--data_dir={path}",
                         cwd=folder)
            assert result.returncode == 0, result.stderr[-3000:]
    return path


@pytest.fixture(scope="session")
def tiny_run_trained(tiny_run_data_dir, tmp_path_factory):
    """A run.py training run of 4 steps with checkpoints at steps 2 and 4, once per test run
    (tests copy it before changing it); its stderr is in `trained.stderr` beside it."""
    from tests.run_py import run, steps, train_flags

    with _once_per_run(tmp_path_factory, "tiny_run_trained") as (_, build):
        output_dir = tiny_run_data_dir.parent / "trained"
        if build:
            result = run(*train_flags(tiny_run_data_dir, output_dir, "--train_steps=4"),
                         cwd=tiny_run_data_dir.parent)
            assert result.returncode == 0, result.stderr[-3000:]
            (output_dir.parent / "trained.stderr").write_text(result.stderr, encoding="utf-8")
    assert steps(output_dir) == [2, 4]
    return output_dir


@pytest.fixture(scope="session")
def copy_model(tmp_path_factory):
    """(model, encoder, vocab file): a tiny Transformer trained in-process to copy digit
    strings (and to reverse them with target_space_id 1), once per session
    (`tests/copy_task.py`)."""
    from t2t_lite.data_generators import text_encoder
    from tests import copy_task

    vocab = copy_task.write_vocab(tmp_path_factory.mktemp("copy_task") / "digits.subwords")
    return copy_task.train(), text_encoder.SubwordTextEncoder(str(vocab)), vocab
