"""The README stays a product page: short, the two commands first, the tests' command the one
CI runs, no internal issue numbers or measurement history in user-facing text, links that
resolve, and every figure of its results table recorded in bench/README.md."""
from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

README = REPO_ROOT / "README.md"
BENCH_README = REPO_ROOT / "bench" / "README.md"
CI_RUN = REPO_ROOT / ".ci" / "run"

MAX_LINES = 150
HEAD_LINES = 20
RUN_COMMAND = "pip install -e . && python run.py"
TEST_INSTALL = 'pip install -e ".[test]"'

# "issue 41", "Issue 46's", "issues 12": an internal tracker number.
ISSUE_NUMBER = re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)
# "#41" not preceded by a name: "tensor2tensor#286" (an upstream reference) is allowed.
BARE_HASH_NUMBER = re.compile(r"(?<![\w.\-/])#\d+\b")
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
# A commit hash: 7-40 hex characters with both a digit and a letter.
COMMIT = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
LOAD = re.compile(r"\bload(?: average)?s? (?:of )?\d", re.IGNORECASE)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _user_docs() -> list[Path]:
    return [README] + sorted((REPO_ROOT / "docs").glob("*.md"))


def _readme_lines() -> list[str]:
    return README.read_text(encoding="utf-8").splitlines()


def _ci_pytest_command() -> str:
    """The pytest command line of .ci/run (exactly one)."""
    lines = [line.strip() for line in CI_RUN.read_text(encoding="utf-8").splitlines()
             if line.strip().startswith("python -m pytest")]
    assert len(lines) == 1, f".ci/run has {len(lines)} pytest lines: {lines}"
    return lines[0]


def test_readme_is_at_most_150_lines():
    assert len(_readme_lines()) <= MAX_LINES


def test_the_two_commands_are_in_the_first_20_lines():
    head = [line.strip() for line in _readme_lines()[:HEAD_LINES]]
    assert RUN_COMMAND in head
    test_lines = [line for line in head if line.startswith(TEST_INSTALL + " && ")]
    assert len(test_lines) == 1, head


def test_the_readmes_test_command_is_what_ci_runs():
    head = [line.strip() for line in _readme_lines()[:HEAD_LINES]]
    (test_line,) = [line for line in head if line.startswith(TEST_INSTALL + " && ")]
    readme_pytest = test_line.split(" && ", 1)[1]
    assert shlex.split(readme_pytest) == shlex.split(_ci_pytest_command())
    # CI installs what the README's command installs.
    assert 'python -m pip install -q -e ".[test]"' in CI_RUN.read_text(encoding="utf-8")


def test_the_test_command_reports_failures_errors_and_skips():
    args = shlex.split(_ci_pytest_command())
    report = [a[2:] for a in args if a.startswith("-r")]
    assert report and set("fEs") <= set(report[0]), args


@pytest.mark.parametrize("path", _user_docs(), ids=lambda p: p.name)
def test_no_internal_issue_numbers_in_user_docs(path):
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        assert not ISSUE_NUMBER.search(line), f"{path.name}:{number}: {line}"
        assert not BARE_HASH_NUMBER.search(line), f"{path.name}:{number}: {line}"


def test_readme_has_no_dates_commits_or_loads():
    for number, line in enumerate(_readme_lines(), 1):
        for pattern in (DATE, COMMIT, LOAD):
            assert not pattern.search(line), f"README.md:{number}: {line}"


def _help_texts() -> list[tuple[str, str]]:
    """(where, text) of every string a --help can print: the module docstrings of run.py,
    t2t_lite/__main__.py and t2t_lite/bin/*.py, and every string literal inside a
    `flags.DEFINE_*(...)` call of those files and of t2t_lite/flags.py."""
    files = [REPO_ROOT / "run.py", REPO_ROOT / "t2t_lite" / "flags.py",
             REPO_ROOT / "t2t_lite" / "__main__.py",
             *sorted((REPO_ROOT / "t2t_lite" / "bin").glob("*.py"))]
    texts = []
    for path in files:
        if not path.exists():
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        where = str(path.relative_to(REPO_ROOT))
        if ast.get_docstring(tree):
            texts.append((f"{where} (docstring)", ast.get_docstring(tree)))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr.startswith("DEFINE")):
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                        texts.append((f"{where}:{sub.lineno}", sub.value))
    return texts


def test_help_texts_have_no_internal_issue_numbers():
    texts = _help_texts()
    assert any("flags.py" in where for where, _ in texts)  # the scan found the flags
    for where, text in texts:
        assert not ISSUE_NUMBER.search(text), f"{where}: {text}"
        assert not BARE_HASH_NUMBER.search(text), f"{where}: {text}"


def _github_anchor(heading: str) -> str:
    """GitHub's anchor of a markdown heading: lower case, punctuation dropped, spaces -> '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    anchors, counts, in_code = set(), {}, False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        match = re.match(r"^#+ (.*)$", line)
        if match and not in_code:
            anchor = _github_anchor(match.group(1))
            n = counts.get(anchor, 0)
            counts[anchor] = n + 1
            anchors.add(anchor if n == 0 else f"{anchor}-{n}")
    return anchors


@pytest.mark.parametrize("path", [README, BENCH_README, *sorted((REPO_ROOT / "docs").glob("*.md")),
                                  *sorted((REPO_ROOT / "bench" / "history").glob("*.md"))],
                         ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_relative_links_resolve(path):
    for target in LINK.findall(path.read_text(encoding="utf-8")):
        if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        assert linked.exists(), f"{path.name}: {target}"
        if anchor and linked.suffix == ".md":
            assert anchor in _anchors(linked), f"{path.name}: {target}"


def _results_rows() -> list[str]:
    lines = _readme_lines()
    start = lines.index("## Results")
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        if line.startswith("| ") and not line.startswith("| ---"):
            rows.append(line)
    return rows[1:]  # without the header


def test_every_figure_of_the_results_table_is_in_bench_readme():
    bench = BENCH_README.read_text(encoding="utf-8")
    rows = _results_rows()
    assert len(rows) >= 5
    for row in rows:
        result = row.split("|")[2]
        figures = re.findall(r"\d[\d,]*(?:\.\d+)?x?%?", result)
        assert figures, row
        for figure in figures:
            assert re.search(rf"(?<![\d.]){re.escape(figure)}(?![\d])", bench), (figure, row)
        assert "bench/README.md" in row or "docs/" in row, row
