"""What `pip install .` installs: the wheel holds every package folder and data file of the
source tree, and a tiny datagen + train + decode runs from it alone.

The README's and CI's editable install (`pip install -e .`) reads the source tree, so a folder
that setup.py forgot is only noticed by a user who installs the wheel: this test builds it
(`pip wheel`, no build isolation, so nothing is downloaded), installs it into an empty target
folder and runs it from outside the repository with only that folder on PYTHONPATH.
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

# What setup.py packages: the package, the folders mapped into it, the entry point.
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
    assert "run.py" in names
    data = _source_data_files(REPO_ROOT) | {"t2t_lite/serving/static/probe.html"}
    assert data <= set(names)


def _run_installed(target: pathlib.Path, cwd: pathlib.Path, *args: str):
    """`python -m run args` with only the installed wheel's folder as the package's source."""
    values = dict(env(), PYTHONPATH=str(target))
    return subprocess.run([sys.executable, *args], cwd=cwd, env=values, capture_output=True,
                          text=True, timeout=600, check=False)


@pytest.mark.slow
def test_installed_wheel_trains_and_decodes_outside_the_repository(wheel, tmp_path):
    target = tmp_path / "target"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
         str(wheel)], cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    work = tmp_path / "work"
    work.mkdir()
    assert REPO_ROOT not in work.parents

    output_dir = work / "train"
    result = _run_installed(
        target, work, "-m", "run", "--mode=train", "--generate_data",
        f"--problem={PROBLEM}", "--data_dir=data", "--hparams_set=transformer_tiny",
        f"--hparams={TINY}", f"--output_dir={output_dir}", "--train_steps=2",
        "--random_seed=1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert (output_dir / "ckpt-2.index").exists()
    (work / "in.txt").write_text("0 1 1\n1 0\n")
    # Decoding in a process that first says where the modules come from (the editable
    # install's finder must not win).
    decode = (
        "import sys, run, t2t_lite\n"
        "print(run.__file__); print(t2t_lite.__file__)\n"
        f"sys.argv = ['run.py', '--mode=decode', '--output_dir={output_dir}',\n"
        "            '--decode_from_file=in.txt', '--decode_to_file=out.txt']\n"
        "run.main()\n")
    result = _run_installed(target, work, "-c", decode)
    assert result.returncode == 0, result.stderr[-3000:]
    run_file, package_file = result.stdout.split()[:2]
    assert pathlib.Path(run_file).parent == target
    assert pathlib.Path(package_file).parent.parent == target
    lines = (work / "out.txt").read_text().splitlines()
    assert len(lines) == 2 and all(set(line) <= set("01 ") for line in lines)
