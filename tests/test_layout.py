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


def _parse(path: pathlib.Path) -> ast.Module:
    """The syntax tree of a source file, parsed again after CPython 3.11's spurious
    "AST constructor recursion depth mismatch" SystemError (python/cpython#106905: the
    interpreter-wide AST state is shared with threads that parse at the same moment, such as
    those an earlier test of the same pytest-xdist worker left running)."""
    source = path.read_text(encoding="utf-8")
    for attempt in range(3):
        try:
            return ast.parse(source, str(path))
        except SystemError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _imports(path: pathlib.Path) -> set[str]:
    """Every module name `path` imports (for `from a import b`: both a and a.b)."""
    names = set()
    for node in ast.walk(_parse(path)):
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


# The folders of t2t_lite and the folders each may import (DESIGN.md "Layout"). The graph has
# no cycle, so no import loop between folders is possible; the top-level modules (errors,
# file_io, hparams, hparams_support, registry, quiet_start) and hparams_sets are the base
# every folder may import. `utils` holds only leaves: modules that import no other folder.
FOLDER_IMPORTS = {
    "utils": set(),
    "layers": {"utils"},
    "search": set(),
    "models": {"layers", "utils", "search"},
    "data_generators": {"utils"},
    "problems": {"data_generators", "utils"},
    "evaluation": {"data_generators", "utils"},
    "training": {"models", "layers", "data_generators", "evaluation", "utils"},
    "decoding": {"training", "models", "layers", "data_generators", "evaluation", "utils",
                 "search"},
    "serving": {"decoding", "search", "models", "layers", "data_generators", "utils"},
    "visualization": {"utils"},
}
# Rooms inside a folder, placed in the graph on their own: the search sits beneath the
# models that call it, while the rest of decoding/ loads runs of those models.
ROOMS: tuple[str, ...] = ()
# t2t's module paths kept as aliases of a module that moved: only the alias may import it.
T2T_ALIASES = {"t2t_lite.utils.beam_search": "t2t_lite.search.beam_search"}
TOP_LEVEL = {"t2t_lite", "t2t_lite.errors", "t2t_lite.file_io", "t2t_lite.hparams",
             "t2t_lite.hparams_support", "t2t_lite.registry", "t2t_lite.quiet_start",
             "t2t_lite.hparams_sets"}


def _folder(module: str) -> str | None:
    """The t2t_lite folder of a module name ("run" and top-level modules: None)."""
    parts = module.split(".")
    if parts[0] != "t2t_lite" or len(parts) < 2 or ".".join(parts[:2]) in TOP_LEVEL:
        return None
    if ".".join(parts[1:3]) in ROOMS:
        return ".".join(parts[1:3])
    return parts[1]


def _allowed(importer: str, imported: str) -> bool:
    """The import rules of DESIGN.md: bin and run.py import anything but are imported by
    nothing; a folder imports itself, the top level and the folders FOLDER_IMPORTS lists."""
    source, target = _folder(importer), _folder(imported)
    if target is None or source == target:
        return True
    if T2T_ALIASES.get(importer, "").startswith(imported):
        return True
    if target == "bin":
        return False
    if importer in ("run", "t2t_lite.flags") or source == "bin":
        return True
    if source is None:  # a top-level module: only leaves below it
        return target == "utils"
    return target in FOLDER_IMPORTS[source]


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle of a directed graph found by depth-first search (each as a node path)."""
    found, state = [], {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                found.append(path[path.index(nxt):] + [nxt] if nxt in path else [node, nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    return found


def test_every_folder_is_in_the_rules():
    folders = {p.name for p in PACKAGE.iterdir()
               if p.is_dir() and (p / "__init__.py").exists()}
    assert folders - {"bin", "hparams_sets"} == set(FOLDER_IMPORTS) - set(ROOMS)


def test_folder_rules_have_no_cycle():
    assert _cycles({k: set(v) for k, v in FOLDER_IMPORTS.items()}) == []


def test_no_import_loop_between_folders():
    edges: dict[str, set[str]] = {}
    for module, path in _source_files().items():
        source = _folder(module)
        for name in _imports(path):
            target = _folder(name)
            if name.startswith("t2t_lite") and target and source and target != source:
                edges.setdefault(source, set()).add(target)
    assert _cycles(edges) == []


def test_import_loop_check_finds_a_loop():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_import_rules_between_folders():
    offenders = []
    for module, path in _source_files().items():
        for name in _imports(path):
            if name.startswith("t2t_lite") and not _allowed(module, name):
                offenders.append(f"{module} imports {name}")
    assert offenders == []


def test_import_rules_catch_a_violation():
    assert not _allowed("t2t_lite.layers.common_layers", "t2t_lite.models.transformer")
    assert not _allowed("t2t_lite.evaluation.parsing_eval", "t2t_lite.problems.wsj_parsing")
    assert not _allowed("t2t_lite.data_generators.problem", "t2t_lite.training.trainer_lib")
    assert not _allowed("t2t_lite.decoding.decoding", "t2t_lite.bin.t2t_decoder")
    assert not _allowed("t2t_lite.models.transformer", "t2t_lite.training.optimize")
    assert not _allowed("t2t_lite.utils.beam_search", "t2t_lite.data_generators.text_encoder")
    assert not _allowed("t2t_lite.training.trainer_lib", "t2t_lite.decoding.runs")
    assert _allowed("t2t_lite.models.transformer", "t2t_lite.utils.beam_search")
    assert _allowed("t2t_lite.models.transformer", "t2t_lite.search.driver")
    assert not _allowed("t2t_lite.models.transformer", "t2t_lite.decoding.runs")
    assert not _allowed("t2t_lite.search.driver", "t2t_lite.models.transformer")
    assert not _allowed("t2t_lite.utils.precision", "t2t_lite.search.beam_search")
    assert _allowed("t2t_lite.training.trainer_lib", "t2t_lite.models.transformer")
    assert _allowed("t2t_lite.export.ct2", "t2t_lite.decoding.decoding")


# Files over ~600 lines, each one cohesive job (t2t keeps the same job in one module).
LONG_FILES = {
    "t2t_lite/layers/common_layers.py": "t2t's common_layers: the layer primitives",
    "t2t_lite/layers/common_attention.py": "t2t's common_attention: timing, biases, attention",
    "t2t_lite/data_generators/text_encoder.py": "t2t's text_encoder: the encoders",
    "t2t_lite/decoding/decoding.py": "t2t's decoding.py: decode from dataset, file, interactive",
    "t2t_lite/search/beam_search.py": "t2t's beam_search: the search and its steps "
                                               "(grow_topk, grow_alive, grow_finished)",
    "t2t_lite/training/trainer_lib.py": "the training loop: steps, checkpoints, eval, summaries",
    "t2t_lite/utils/checkpoint_guard.py": "checkpoints on disk: the state file, damage, strict "
                                          "restore checks, failed saves, temp folders",
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
        from t2t_lite.decoding import decoding  # noqa: E402,F401
        from t2t_lite.export import export
        from t2t_lite.training import trainer_lib
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
