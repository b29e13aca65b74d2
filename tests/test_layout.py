"""The source tree keeps the layout DESIGN.md describes: t2t_lite's modules stand on floors,
each imports only its own room and the floors below it, and no import circle exists between
any two modules.

Import rules are checked on the source (ast), not by importing: an import inside a function
(a lazy one) counts as any other.
"""
from __future__ import annotations

import ast
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = REPO / "t2t_lite"

# The floors of t2t_lite, lowest first: the one statement of the order (DESIGN.md's "Floors"
# block repeats it, checked below). A room is a top-level module or folder of t2t_lite (named
# without the `t2t_lite.` prefix; "__init__" is the package's own, empty, module) or "run"
# (the repository's run.py). A module may import modules of its own room and of lower floors;
# rooms that share a floor stand side by side and import nothing of each other.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("__init__", "search"),  # the search: TensorFlow, numpy and the standard library only
    ("errors", "file_io", "quiet_start"),
    ("hparams", "registry"),
    ("hparams_sets",),  # t2t's sets, which hparams_support reads each default from
    ("hparams_support",),
    ("utils",),  # leaves: nothing above the base modules
    ("hparams_lib", "layers", "data_generators", "visualization"),
    ("models", "problems", "evaluation"),
    ("decoding",),
    ("training",),
    ("export",),
    ("serving",),
    ("flags",),
    ("bin",),
    ("__main__", "run"),
)
# Modules that may read command-line flags: the tools, the flag definitions, the entry points.
FLAG_READERS = ("t2t_lite.bin.", "t2t_lite.flags", "t2t_lite.__main__", "run")


def _source_files(package: pathlib.Path = PACKAGE,
                  run_py: pathlib.Path | None = REPO / "run.py") -> dict[str, pathlib.Path]:
    """module name -> file, for a package (symlinked folders included) and run.py."""
    files = {"run": run_py} if run_py is not None else {}
    root = package.parent
    for directory, _, names in os.walk(package, followlinks=True):
        for name in names:
            if name.endswith(".py"):
                path = pathlib.Path(directory) / name
                parts = path.relative_to(root).with_suffix("").parts
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


def _statements(module: str, path: pathlib.Path) -> list[tuple[str, tuple[str, ...], int]]:
    """Every import statement of `path`, anywhere in the file: (module, (), line) for
    `import module`, (module, names, line) for `from module import names` (relative imports
    made absolute)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(_parse(path)):
        if isinstance(node, ast.Import):
            found.extend((alias.name, (), node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found.append((base, tuple(alias.name for alias in node.names), node.lineno))
    return found


def _imported_names(module: str, path: pathlib.Path) -> set[tuple[str, int]]:
    """Every (name, line) `path` imports (for `from a import b`: a and a.b)."""
    return {(name, line) for base, names, line in _statements(module, path)
            for name in (base, *(f"{base}.{n}" for n in names))}


def import_graph(files: dict[str, pathlib.Path]) -> dict[str, dict[str, int]]:
    """module -> {module of `files` it imports: the first line that does}. `import a.b` imports
    the longest of a.b, a that is a module; `from a import b` the module a.b when there is
    one, else a (b is a name in a)."""
    graph: dict[str, dict[str, int]] = {}
    for module, path in files.items():
        edges: dict[str, int] = {}
        for base, names, line in _statements(module, path):
            if names:
                targets = [f"{base}.{n}" if f"{base}.{n}" in files else base for n in names]
            else:
                parts = base.split(".")
                targets = [next((".".join(parts[:k]) for k in range(len(parts), 0, -1)
                                 if ".".join(parts[:k]) in files), base)]
            for target in targets:
                if target in files and target != module:
                    edges[target] = min(line, edges.get(target, line))
        graph[module] = edges
    return graph


def room_of(module: str) -> str:
    """The room of a module name: "run", or its top-level name inside t2t_lite."""
    if module == "run":
        return "run"
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def floor_of(room: str, floors: tuple[tuple[str, ...], ...] = FLOORS) -> int:
    """The index of the floor holding `room` (KeyError: a room no floor names)."""
    for index, rooms in enumerate(floors):
        if room in rooms:
            return index
    raise KeyError(room)


def allowed(importer: str, imported: str,
            floors: tuple[tuple[str, ...], ...] = FLOORS) -> bool:
    """The one import rule: the same room, or a lower floor."""
    source, target = room_of(importer), room_of(imported)
    return source == target or floor_of(target, floors) < floor_of(source, floors)


def upward_imports(graph: dict[str, dict[str, int]],
                   floors: tuple[tuple[str, ...], ...] = FLOORS) -> list[tuple[str, str, int]]:
    """(importer, imported, line) for every import that breaks the floors."""
    return [(source, target, line) for source, targets in sorted(graph.items())
            for target, line in sorted(targets.items()) if not allowed(source, target, floors)]


def circles(graph: dict[str, dict[str, int]] | dict[str, set[str]]) -> list[list[str]]:
    """The import circles of a module graph: every strongly connected set of two or more
    modules (Tarjan's algorithm), each sorted, the list sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def _describe(offenders: list[tuple[str, str, int]], files: dict[str, pathlib.Path]) -> list[str]:
    """`file:line: a (floor i) imports b (floor j)` for each offender."""
    return [f"{files[source].relative_to(REPO)}:{line}: {source} (floor {floor_of(room_of(source))}"
            f") imports {target} (floor {floor_of(room_of(target))})"
            for source, target, line in offenders]


# ---------------------------------------------------------------------------- the real tree
def test_every_module_stands_on_a_floor():
    rooms = {room_of(module) for module in _source_files()}
    named = [room for rooms_of_floor in FLOORS for room in rooms_of_floor]
    assert len(named) == len(set(named)), "a room is named on two floors"
    assert rooms - set(named) == set(), "place the new module or folder on a floor"
    assert set(named) - rooms == set(), "a floor names a room that does not exist"


def test_no_import_circle_between_modules():
    assert circles(import_graph(_source_files())) == []


def test_no_import_from_a_lower_floor_to_a_higher_one():
    files = _source_files()
    offenders = upward_imports(import_graph(files))
    assert _describe(offenders, files) == []


def test_design_md_states_the_same_floors():
    design = (REPO / "DESIGN.md").read_text(encoding="utf-8")
    block = re.search(r"Floors, lowest first.*?\n```\n(.*?)```", design, re.DOTALL)
    assert block, "DESIGN.md's Layout has a ``` block after 'Floors, lowest first'"
    stated = []
    for line in block.group(1).splitlines():
        match = re.match(r"\s*\d+\s+(.*?)(\s{2,}#.*)?$", line)
        if match:
            stated.append(tuple(room.strip("/") for room in match.group(1).split()))
    assert tuple(stated) == FLOORS


def test_only_the_tools_read_flags_and_nothing_imports_the_tools():
    offenders = []
    for module, path in _source_files().items():
        if module.startswith(FLAG_READERS) or module == "t2t_lite.bin":
            continue
        for name, line in _imported_names(module, path):
            if name in ("absl.flags", "t2t_lite.flags") or name.startswith("t2t_lite.bin"):
                offenders.append(f"{module}:{line} imports {name}")
    assert offenders == []


# ------------------------------------------------------------------ the checker catches them
def _made_up_package(tmp_path: pathlib.Path, modules: dict[str, str]) -> dict[str, pathlib.Path]:
    """A package `t2t_lite` under tmp_path with the given {relative module path: source}."""
    for relative, source in modules.items():
        path = tmp_path / "t2t_lite" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in [path.parent, *path.parent.parents]:
            if parent == tmp_path:
                break
            (parent / "__init__.py").touch()
        path.write_text(textwrap.dedent(source))
    return _source_files(tmp_path / "t2t_lite", run_py=None)


def test_the_checker_finds_a_made_up_circle(tmp_path):
    files = _made_up_package(tmp_path, {
        "utils/a.py": "from t2t_lite.utils import b\n",
        "utils/b.py": "def f():\n    from t2t_lite.utils.c import g  # lazy\n    return g\n",
        "utils/c.py": "import t2t_lite.utils.a\n",
        "utils/d.py": "from t2t_lite.utils import a\n",
    })
    graph = import_graph(files)
    assert graph["t2t_lite.utils.b"] == {"t2t_lite.utils.c": 2}
    assert circles(graph) == [["t2t_lite.utils.a", "t2t_lite.utils.b", "t2t_lite.utils.c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
    assert circles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}) == [["a", "b"], ["c", "d"]]


def test_the_checker_finds_a_made_up_upward_import(tmp_path):
    files = _made_up_package(tmp_path, {
        "errors.py": "",
        "utils/leaf.py": "def f():\n    from t2t_lite.models import net  # lazy, upward\n",
        "models/net.py": "from t2t_lite.utils import leaf\nfrom t2t_lite import errors\n",
        "decoding/runs.py": "from ..models import net\n",
        "training/loop.py": "from t2t_lite.decoding.runs import x\n",
        "layers/a.py": "from t2t_lite.data_generators import b\n",  # side by side
        "data_generators/b.py": "",
    })
    graph = import_graph(files)
    assert graph["t2t_lite.decoding.runs"] == {"t2t_lite.models.net": 1}
    assert upward_imports(graph) == [
        ("t2t_lite.layers.a", "t2t_lite.data_generators.b", 1),
        ("t2t_lite.utils.leaf", "t2t_lite.models.net", 2),
    ]


def test_the_rule_on_real_names():
    assert not allowed("t2t_lite.errors", "t2t_lite.hparams")
    assert not allowed("t2t_lite.hparams", "t2t_lite.utils.run_metadata")
    assert not allowed("t2t_lite.layers.common_layers", "t2t_lite.models.transformer")
    assert not allowed("t2t_lite.evaluation.parsing_eval", "t2t_lite.problems.wsj_parsing")
    assert not allowed("t2t_lite.decoding.runs", "t2t_lite.training.keep_best")
    assert not allowed("t2t_lite.models.transformer", "t2t_lite.decoding.runs")
    assert not allowed("t2t_lite.search.driver", "t2t_lite.models.transformer")
    assert not allowed("t2t_lite.utils.precision", "t2t_lite.layers.common_layers")
    assert not allowed("t2t_lite.serving.engines", "t2t_lite.bin.t2t_server")
    assert not allowed("t2t_lite.export.ct2", "t2t_lite.serving.engines")
    assert allowed("t2t_lite.utils.beam_search", "t2t_lite.search.beam_search")
    assert allowed("t2t_lite.training.dev_decode", "t2t_lite.decoding.decoding")
    assert allowed("t2t_lite.serving.engines", "t2t_lite.export.ct2")
    assert allowed("run", "t2t_lite.bin.main")
    with pytest.raises(KeyError):
        floor_of("no_such_room")


# ---------------------------------------------------------------------------- file sizes
# Files over ~600 lines, each one cohesive job (t2t keeps the same job in one module).
LONG_FILES = {
    "t2t_lite/layers/common_layers.py": "t2t's common_layers: the layer primitives",
    "t2t_lite/layers/common_attention.py": "t2t's common_attention: timing, biases, attention",
    "t2t_lite/data_generators/text_encoder.py": "t2t's text_encoder: the encoders",
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
