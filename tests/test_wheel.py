"""What `pip install .` installs: the wheel holds every package folder and data file of the
source tree and no top-level module, and a tiny datagen + train + decode runs from it alone
through both of its commands, `t2t-lite` and `python -m t2t_lite`.

The README's and CI's editable install (`pip install -e .`) reads the source tree, so a folder
that setup.py forgot is only noticed by a user who installs the wheel: this test builds it
(`pip wheel`, no build isolation, so nothing is downloaded), installs it into a fresh virtual
environment (`--system-site-packages`, `--no-deps`: the dependencies are this machine's) and
runs it from outside the repository.
"""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest

from tests.conftest import REPO_ROOT
from tests.run_py import PROBLEM, TINY, env

# The source tree setup.py reads: the package and the folders mapped into it (run.py, the
# repository's entry point, is copied too: it must stay out of the wheel).
SOURCES = ("setup.py", "run.py", "t2t_lite", "problems", "hparams")
# Installed name -> source folder, for the folders setup.py maps into the package.
MAPPED = {"t2t_lite/problems": "problems", "t2t_lite/hparams_sets": "hparams"}


def _source_packages(root: pathlib.Path) -> set[str]:
    """Every package folder (one with __init__.py) under root/t2t_lite, as installed paths
    ("t2t_lite/training"); the symlinked folders count once, under their installed name."""
    found = set()
    for folder, dirs, names in os.walk(root / "t2t_lite", followlinks=True):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        if "__init__.py" in names:
            found.add(pathlib.Path(folder).relative_to(root).as_posix())
    return found


def _source_data_files(root: pathlib.Path) -> set[str]:
    """Every non-Python file under root/t2t_lite the package may read at run time."""
    found = set()
    for folder, dirs, names in os.walk(root / "t2t_lite", followlinks=True):
        dirs[:] = [d for d in dirs if d != "__pycache__" and not d.startswith(".")]
        for name in names:
            if not name.endswith((".py", ".pyc")) and not name.startswith("."):
                found.add((pathlib.Path(folder) / name).relative_to(root).as_posix())
    return found


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> pathlib.Path:
    """The wheel of a copy of the source tree with one probe folder and one probe data file
    added (a new folder or page must be packaged without an edit to setup.py)."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    source.mkdir()
    for name in SOURCES:
        path = REPO_ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, source / name)
    (source / "t2t_lite" / "probe_folder").mkdir()
    (source / "t2t_lite" / "probe_folder" / "__init__.py").write_text("")
    (source / "t2t_lite" / "serving" / "static").mkdir(exist_ok=True)
    (source / "t2t_lite" / "serving" / "static" / "probe.html").write_text("<p>probe</p>\n")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(root / "dist"), str(source)],
        cwd=root, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    (built,) = (root / "dist").glob("t2t_lite-*.whl")
    return built


def test_wheel_holds_every_package_folder_and_data_file_once(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert len(names) == len(set(names))  # the symlinked folders are not packaged twice
    folders = {n.rsplit("/", 1)[0] for n in names if n.endswith("/__init__.py")}
    expected = _source_packages(REPO_ROOT) | {"t2t_lite/probe_folder"}
    assert folders == expected
    assert {"t2t_lite/training", "t2t_lite/decoding", "t2t_lite/evaluation",
            "t2t_lite/visualization"} <= folders
    # Each mapped folder's modules, under the package's name, and nowhere else.
    for installed, source in MAPPED.items():
        modules = {p.name for p in (REPO_ROOT / source).glob("*.py")}
        assert {n.rsplit("/", 1)[1] for n in names
                if n.rsplit("/", 1)[0] == installed} == modules
    assert not [n for n in names if n.split("/")[0] in ("problems", "hparams", "tests")]
    # Nothing at the top of site-packages but the package and its metadata: no `run` module.
    assert {n.split("/")[0] for n in names} == {"t2t_lite", f"{_dist_info(wheel)}"}
    entry_points = zipfile.ZipFile(wheel).read(f"{_dist_info(wheel)}/entry_points.txt")
    assert "t2t-lite = t2t_lite.bin.main:main" in entry_points.decode()
    data = _source_data_files(REPO_ROOT) | {"t2t_lite/serving/static/probe.html"}
    assert data <= set(names)


def _dist_info(wheel: pathlib.Path) -> str:
    """The wheel's .dist-info folder name ("t2t_lite-0.1.0.dist-info")."""
    return "-".join(wheel.name.split("-")[:2]) + ".dist-info"


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> pathlib.Path:
    """A fresh virtual environment with the wheel installed (its dependencies are this
    machine's: --system-site-packages, --no-deps)."""
    folder = tmp_path_factory.mktemp("venv") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(folder)], check=True, timeout=120)
    result = subprocess.run(
        [str(folder / "bin" / "python"), "-m", "pip", "install", "--no-deps", "-q",
         str(wheel)], capture_output=True, text=True, timeout=300, check=False,
        env=_clean_env())
    assert result.returncode == 0, result.stderr[-3000:]
    return folder


def _clean_env() -> dict:
    """run.py's subprocess environment without PYTHONPATH (which may name a source tree)."""
    values = env()
    values.pop("PYTHONPATH", None)
    return values


def _site_packages(venv: pathlib.Path) -> pathlib.Path:
    (found,) = venv.glob("lib/python3*/site-packages")
    return found


def _run_command(venv: pathlib.Path, cwd: pathlib.Path, command: str, *args: str):
    """`t2t-lite args` ("script") or `python -m t2t_lite args` ("module") of the venv."""
    program = ([str(venv / "bin" / "t2t-lite")] if command == "script"
               else [str(venv / "bin" / "python"), "-m", "t2t_lite"])
    return subprocess.run([*program, *args], cwd=cwd, env=_clean_env(), capture_output=True,
                          text=True, timeout=600, check=False)


@pytest.mark.slow
def test_installed_wheel_trains_and_decodes_outside_the_repository(venv, tmp_path):
    site_packages = _site_packages(venv)
    assert not (site_packages / "run.py").exists()
    assert sorted(p.name for p in site_packages.iterdir() if p.suffix == ".py") == []
    assert (site_packages / "t2t_lite" / "__main__.py").exists()
    work = tmp_path / "work"
    work.mkdir()
    assert REPO_ROOT not in work.parents
    # The modules come from the wheel, not from the editable install or a source tree.
    where = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import t2t_lite.bin.main as m; print(m.__file__)"], cwd=work,
                           env=_clean_env(), capture_output=True, text=True, check=False,
                           timeout=120)
    assert pathlib.Path(where.stdout.strip()).is_relative_to(site_packages), where.stderr

    output_dir = work / "train"
    train = ["--mode=train", f"--problem={PROBLEM}", "--data_dir=data",
             "--hparams_set=transformer_tiny", f"--hparams={TINY}", f"--output_dir={output_dir}",
             "--random_seed=1"]
    (work / "in.txt").write_text("0 1 1\n1 0\n")
    for command, steps in (("script", 2), ("module", 4)):  # the second resumes the first run
        result = _run_command(venv, work, command, *train, "--generate_data",
                              f"--train_steps={steps}")
        assert result.returncode == 0, (command, result.stderr[-3000:])
        assert (output_dir / f"ckpt-{steps}.index").exists()
        decodes = work / f"out-{command}.txt"
        other = "module" if command == "script" else "script"
        result = _run_command(venv, work, other, "--mode=decode", f"--output_dir={output_dir}",
                              "--decode_from_file=in.txt", f"--decode_to_file={decodes}")
        assert result.returncode == 0, (other, result.stderr[-3000:])
        lines = decodes.read_text().splitlines()
        assert len(lines) == 2 and all(set(line) <= set("01 ") for line in lines)
