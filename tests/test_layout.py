"""The source tree keeps the layout DESIGN.md describes.

Import rules are checked on the source (ast), not by importing: a rule broken by a lazy
import inside a function is caught too.
"""
from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys
import textwrap

REPO = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = REPO / "t2t_lite"
# Modules that may read command-line flags: the tools, the flag definitions, the entry point.
FLAG_READERS = ("t2t_lite.bin.", "t2t_lite.flags", "run")


def _source_files() -> dict[str, pathlib.Path]:
    """module name -> file, for t2t_lite (symlinked folders included) and run.py."""
    files = {"run": REPO / "run.py"}
    for directory, _, names in os.walk(PACKAGE, followlinks=True):
        for name in names:
            if name.endswith(".py"):
                path = pathlib.Path(directory) / name
                parts = path.relative_to(REPO).with_suffix("").parts
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                files[".".join(parts)] = path
    return files


def _imports(path: pathlib.Path) -> set[str]:
    """Every module name `path` imports (for `from a import b`: both a and a.b)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_only_the_tools_read_flags_and_nothing_imports_the_tools():
    offenders = []
    for module, path in _source_files().items():
        if module.startswith(FLAG_READERS) or module == "t2t_lite.bin":
            continue
        for name in _imports(path):
            if name in ("absl.flags", "t2t_lite.flags") or name.startswith("t2t_lite.bin"):
                offenders.append(f"{module} imports {name}")
    assert offenders == []


def test_library_imports_in_a_program_with_its_own_model_flag(tmp_path):
    # t2t-style flag names (--model, --problem, --hparams) belong to the program, not to us.
    program = tmp_path / "program.py"
    program.write_text(textwrap.dedent("""
        from absl import app, flags
        flags.DEFINE_string("model", "mine", "")
        flags.DEFINE_string("problem", "mine", "")
        flags.DEFINE_string("hparams", "", "")
        from t2t_lite.utils import decoding, export, trainer_lib  # noqa: E402,F401
        from t2t_lite.data_generators import datagen  # noqa: E402,F401

        def main(argv):
            print("model flag:", flags.FLAGS.model)

        app.run(main)
    """))
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, str(program), "--model=x"], check=False,
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "model flag: x" in result.stdout
