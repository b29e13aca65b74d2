"""Every third-party module t2t_lite imports is declared by setup.py: in `install_requires`, or
in the extra of the feature that imports it.

The imports are read from the source (ast; an import inside a function counts as any other),
setup.py's arguments by running it with `setuptools.setup` replaced.
"""
from __future__ import annotations

import ast
import importlib.metadata
import os
import pathlib
import re
import runpy
import sys
from unittest import mock

import setuptools

from tests.conftest import REPO_ROOT

# Import name -> (distribution, the extra that must declare it; None: install_requires).
# A dotted name stands for the modules under it (`google` is a namespace of several).
DISTRIBUTIONS: dict[str, tuple[str, str | None]] = {
    "absl": ("absl-py", None),
    "google.protobuf": ("protobuf", None),
    "google_crc32c": ("google-crc32c", None),
    "keras": ("keras", None),
    "numpy": ("numpy", None),
    "regex": ("regex", None),
    "sacrebleu": ("sacrebleu", None),
    "tensorboard": ("tensorboard", None),
    "tensorflow": ("tensorflow", None),
    "tensorflow_datasets": ("tensorflow-datasets", None),
    "tqdm": ("tqdm", None),
    "tensorflow_text": ("tensorflow-text", "text"),
    "sentencepiece": ("sentencepiece", "sentencepiece"),
    "ctranslate2": ("ctranslate2", "ctranslate2"),
    "matplotlib": ("matplotlib", "viz"),
    "fastapi": ("fastapi", "serve"),
    "h11": ("h11", "serve"),
    "prometheus_client": ("prometheus-client", "serve"),
    "pydantic": ("pydantic", "serve"),
    "starlette": ("starlette", "serve"),
    "uvicorn": ("uvicorn", "serve"),
}


def _canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(requirement: str) -> str:
    """The distribution of a requirement string ("tensorflow>=2.16,<2.22" -> "tensorflow")."""
    return _canonical(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement).group(0))


def _setup_arguments() -> dict:
    """The keyword arguments setup.py passes to `setuptools.setup`."""
    captured: dict = {}
    with mock.patch.object(setuptools, "setup", lambda **kwargs: captured.update(kwargs)):
        runpy.run_path(str(REPO_ROOT / "setup.py"), run_name="setup")
    return captured


def _third_party_imports() -> dict[str, set[str]]:
    """Every import of a module outside the standard library and t2t_lite -> the files."""
    found: dict[str, set[str]] = {}
    for folder, dirs, names in os.walk(REPO_ROOT / "t2t_lite", followlinks=True):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in names:
            if not name.endswith(".py"):
                continue
            path = pathlib.Path(folder) / name
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                if isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    modules = [node.module]
                else:
                    continue
                for module in modules:
                    top = module.split(".")[0]
                    if top not in sys.stdlib_module_names and top != "t2t_lite":
                        found.setdefault(module, set()).add(
                            str(path.relative_to(REPO_ROOT)))
    return found


def _declared_as(module: str) -> str | None:
    """The DISTRIBUTIONS key that stands for an imported module name."""
    parts = module.split(".")
    for length in range(len(parts), 0, -1):
        if ".".join(parts[:length]) in DISTRIBUTIONS:
            return ".".join(parts[:length])
    return None


def test_every_third_party_import_is_declared_where_it_is_needed():
    arguments = _setup_arguments()
    core = {_requirement_name(r) for r in arguments["install_requires"]}
    extras = {extra: {_requirement_name(r) for r in requirements}
              for extra, requirements in arguments["extras_require"].items()}
    imports = _third_party_imports()
    unknown = {module: sorted(files) for module, files in imports.items()
               if _declared_as(module) is None}
    assert unknown == {}, "declare it in setup.py and name it in DISTRIBUTIONS"
    missing = []
    for key in sorted({_declared_as(module) for module in imports}):
        distribution, extra = DISTRIBUTIONS[key]
        declared = core if extra is None else extras.get(extra, set())
        if _canonical(distribution) not in declared:
            missing.append(f"{key}: {distribution} not in "
                           f"{'install_requires' if extra is None else f'[{extra}]'}")
    assert missing == []
    # CI installs [test]: it holds every extra's distributions.
    assert set().union(*(v for k, v in extras.items() if k != "test")) <= extras["test"]
    # No table entry outlives its import.
    assert {_declared_as(module) for module in imports} == set(DISTRIBUTIONS)


def test_the_table_names_the_distributions_that_provide_the_modules():
    installed = importlib.metadata.packages_distributions()
    for key, (distribution, _) in DISTRIBUTIONS.items():
        top = key.split(".")[0]
        providers = {_canonical(d) for d in installed.get(top, ())}
        if providers:  # installed here (CI installs them all, with [test])
            assert _canonical(distribution) in providers, (key, providers)
    assert {_canonical(d) for d in installed["google"]} >= {"protobuf"}
    assert _canonical(installed["google_crc32c"][0]) == "google-crc32c"


def test_setup_py_packages_no_top_level_module_and_no_missing_data():
    arguments = _setup_arguments()
    assert "py_modules" not in arguments
    assert arguments["entry_points"]["console_scripts"] == ["t2t-lite=t2t_lite.bin.main:main"]
    package = REPO_ROOT / "t2t_lite"
    for pattern in arguments["package_data"]["t2t_lite"]:
        assert list(package.glob(pattern)), f"package_data {pattern!r} matches nothing"
