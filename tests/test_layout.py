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


# utils modules with one small job each, which layers/models/data may use (as in t2t, where
# models import utils.beam_search and data_generators import utils.data_reader).
LEAF_UTILS = {"beam_search", "optimize", "adafactor", "learning_rate", "data_reader", "metrics",
              "bleu_hook", "parsing_eval", "subword_graph", "summaries", "validation", "progress",
              "run_card", "run_lock"}
TOP_LEVEL = {"t2t_lite", "t2t_lite.errors", "t2t_lite.file_io", "t2t_lite.hparams",
             "t2t_lite.hparams_support", "t2t_lite.registry", "t2t_lite.quiet_start"}


def _allowed(importer: str, imported: str) -> bool:
    """The import rules of DESIGN.md: bin -> library; layers <- models <- utils;
    data_generators <- problems; leaf utils import no tools; nothing imports bin."""
    package = importer.split(".")[1] if "." in importer else importer
    parts = imported.split(".")
    if len(parts) < 2 or ".".join(parts[:2]) in TOP_LEVEL or parts[1] == "hparams_sets":
        return True
    target = parts[1]
    if target == "bin":
        return package == "bin"
    if package in ("bin", "run"):
        return True
    leaf = target == "utils" and (len(parts) == 2 or parts[2] in LEAF_UTILS)
    if package == "layers":
        return target == "layers"
    if package == "models":
        return target in ("layers", "models") or leaf
    if package == "data_generators":
        return target == "data_generators" or leaf
    if package == "problems":
        return target in ("data_generators", "problems") or leaf
    if package == "utils" and importer.split(".")[2] in LEAF_UTILS:
        return target in ("layers", "data_generators") or leaf
    return True


def test_import_rules_between_packages():
    offenders = []
    for module, path in _source_files().items():
        for name in _imports(path):
            if name.startswith("t2t_lite") and not _allowed(module, name):
                offenders.append(f"{module} imports {name}")
    assert offenders == []


def test_import_rules_catch_a_violation():
    assert not _allowed("t2t_lite.layers.common_layers", "t2t_lite.models.transformer")
    assert not _allowed("t2t_lite.utils.parsing_eval", "t2t_lite.problems.wsj_parsing")
    assert not _allowed("t2t_lite.data_generators.problem", "t2t_lite.utils.trainer_lib")
    assert not _allowed("t2t_lite.utils.decoding", "t2t_lite.bin.t2t_decoder")
    assert _allowed("t2t_lite.models.transformer", "t2t_lite.utils.beam_search")
    assert _allowed("t2t_lite.utils.trainer_lib", "t2t_lite.models.transformer")


# Files over ~600 lines, each one cohesive job (t2t keeps the same job in one module).
LONG_FILES = {
    "t2t_lite/layers/common_layers.py": "t2t's common_layers: the layer primitives",
    "t2t_lite/layers/common_attention.py": "t2t's common_attention: timing, biases, attention",
    "t2t_lite/models/transformer.py": "t2t's transformer.py: encoder, decoder, fast decoding",
    "t2t_lite/data_generators/text_encoder.py": "t2t's text_encoder: the encoders",
    "t2t_lite/utils/decoding.py": "t2t's decoding.py: decode from dataset, file, interactive",
    "t2t_lite/utils/trainer_lib.py": "the training loop: steps, checkpoints, eval, summaries",
}


def test_no_file_over_600_lines_unless_listed():
    too_long = []
    for path in sorted(set(_source_files().values())):
        relative = str(path.relative_to(REPO))
        relative = relative.replace("t2t_lite/problems/", "problems/")
        lines = len(path.read_text(encoding="utf-8").splitlines())
        limit = 1000 if relative in LONG_FILES else 600
        if lines > limit:
            too_long.append(f"{relative}: {lines} lines")
    assert too_long == []


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
