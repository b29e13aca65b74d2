"""Penn Treebank trees: the tree type and its reader, the .mrg corpus, preprocessing, writing.

* Reading the Penn Treebank as the LDC distributes it: `wsj/SS/wsj_SSNN.mrg`, multi-line
  bracketed trees, each wrapped in an unlabeled outer `( ... )`. Standard sections: 02-21
  train, 22 dev, 23 test (`TRAIN_SECTIONS`, `DEV_SECTIONS`, `TEST_SECTIONS`; any spec such as
  "00,01" or "02-21" may be given instead).
* Standard preprocessing (`preprocess_tree`): the unlabeled root becomes `TOP`; function tags,
  coindices and gap indices are stripped (NP-SBJ-1 -> NP, PP-LOC=2 -> PP; labels that start
  with "-" such as -NONE-, -LRB-, -RRB- are kept whole); -NONE- empty elements are removed, and
  so is every constituent left without children by that removal. Unary chains, X -> X ones
  included, are NOT collapsed: EVALB (COLLINS.prm) scores the raw gold trees with exactly these
  brackets (it strips function tags, deletes -NONE- words and zero-width brackets, and keeps
  duplicated X over X brackets as separate brackets), so collapsing would change the gold
  standard the parser is scored against.
* `write_trees`, `write_sentences_and_trees`: one-line tree files, and the sentences to decode
  (`--decode_from_file`) with the gold trees of any sections, e.g. 23 for the test F1
  (`t2t_lite.evaluation.parsing_eval.evalb_decode_files` scores the decodes).

t2t's linearization of these trees and its inverse live in `tree_linearization`; the parsing
problems in `t2t_lite.problems.wsj_parsing`.

One-line trees (the `.trees` files and `Tree.to_string`) look like
`(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)))`: closing brackets attached to the last
word, which is the form t2t's linearization reads.
"""
from __future__ import annotations

import os
import pathlib
import re
from collections.abc import Iterable, Iterator, Sequence

from t2t_lite import file_io
from t2t_lite.errors import UserError

TRAIN_SECTIONS = "02-21"
DEV_SECTIONS = "22"
TEST_SECTIONS = "23"

ROOT_LABEL = "TOP"
NONE_TAG = "-NONE-"

_TOKEN_RE = re.compile(r"\(|\)|[^\s()]+")


class TreeError(UserError):
    """A bracketed tree that cannot be read; the message names the file and line."""


# ----------------------------------------------------------------------------------------------
# Trees


class Tree:
    """A constituency tree node: a label and children (subtrees, or one word for a POS tag).

    A preterminal has exactly one child, a `str` word; a phrase has one or more `Tree`
    children. Traversals are iterative, so arbitrarily deep trees (from degenerate decodes)
    are safe.
    """

    __slots__ = ("children", "label")

    def __init__(self, label: str, children: list[Tree | str] | None = None):
        self.label = label
        self.children = [] if children is None else children

    @property
    def is_preterminal(self) -> bool:
        """True for a POS-tag node holding one word."""
        return len(self.children) == 1 and isinstance(self.children[0], str)

    def walk(self) -> Iterator[tuple[str, Tree | str]]:
        """Pre-order events: ("open", node), ("word", word), ("close", node).

        Returns:
            An iterator over the events, in the order of the bracketed string.
        """
        stack: list[tuple[Tree, int]] = [(self, 0)]
        yield "open", self
        while stack:
            node, i = stack[-1]
            if i == len(node.children):
                stack.pop()
                yield "close", node
                continue
            stack[-1] = (node, i + 1)
            child = node.children[i]
            if isinstance(child, str):
                yield "word", child
            else:
                yield "open", child
                stack.append((child, 0))

    def leaves(self) -> list[str]:
        """The words, left to right."""
        return [x for event, x in self.walk() if event == "word"]

    def pos(self) -> list[tuple[str, str]]:
        """(word, POS tag) pairs, left to right."""
        return [(n.children[0], n.label) for event, n in self.walk()
                if event == "open" and n.is_preterminal]

    def to_string(self) -> str:
        """One-line bracketed form, e.g. `(TOP (S (NP (DT The) (NN cat)) (. .)))`."""
        parts: list[str] = []
        for event, x in self.walk():
            if event == "open":
                parts.append(("(" if not parts else " (") + x.label)
            elif event == "word":
                parts.append(" " + x)
            else:
                parts.append(")")
        return "".join(parts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tree) and self.to_string() == other.to_string()

    def __hash__(self) -> int:
        return hash(self.to_string())

    def __repr__(self) -> str:
        return f"Tree({self.to_string()!r})"


def _tokens_with_lines(text: str, first_line: int = 1) -> Iterator[tuple[str, int, int]]:
    """Yields (token, line number, column) for "(", ")" and atoms of `text`."""
    for line_no, line in enumerate(text.split("\n"), start=first_line):
        for m in _TOKEN_RE.finditer(line):
            yield m.group(), line_no, m.start()


def _parse_trees(tokens: Iterable[tuple[str, int, int]], source: str,
                 new_tree_at_column0: bool) -> Iterator[Tree]:
    """Builds trees from a token stream, raising TreeError with `source:line` on bad input.

    Args:
        tokens: (token, line, column) triples.
        source: file name (or description) used in error messages.
        new_tree_at_column0: treat "(" in column 0 inside an open tree as proof of a missing
            ")" (the .mrg convention: every tree starts at column 0, inner lines are indented),
            so the error points at the broken tree instead of the end of the file.
    Yields:
        One Tree per top-level bracket.
    """
    stack: list[Tree] = []
    # Per open node: line of its "(" and whether the label slot is still open.
    lines: list[int] = []
    expect_label = False
    start_line = 0
    last_line = 0
    for tok, line, col in tokens:
        last_line = line
        if tok == "(":
            if stack and new_tree_at_column0 and col == 0:
                raise TreeError(
                    f"{source}:{start_line}: unbalanced parentheses: the tree starting here "
                    f"still has {len(stack)} unclosed '(' when the next tree starts at line "
                    f"{line}")
            if stack and stack[-1].is_preterminal:
                raise TreeError(f"{source}:{line}: the POS tag '{stack[-1].label}' (line "
                                f"{lines[-1]}) has both a word and a subtree")
            node = Tree("")
            if stack:
                stack[-1].children.append(node)
            else:
                start_line = line
            stack.append(node)
            lines.append(line)
            expect_label = True
        elif tok == ")":
            if not stack:
                raise TreeError(f"{source}:{line}: unbalanced parentheses: ')' closes nothing")
            node = stack.pop()
            opened = lines.pop()
            expect_label = False
            if not node.children:
                raise TreeError(f"{source}:{opened}: empty constituent '({node.label})' "
                                f"(no word and no subtree)")
            if not stack:
                yield node
        elif not stack:
            raise TreeError(f"{source}:{line}: text {tok!r} outside any bracketed tree")
        elif expect_label:
            stack[-1].label = tok
            expect_label = False
        else:
            node = stack[-1]
            if node.children:
                what = "a second word" if node.is_preterminal else "a word among subtrees"
                raise TreeError(f"{source}:{line}: constituent '({node.label}' (line "
                                f"{lines[-1]}) has {what}: {tok!r}")
            node.children.append(tok)
    if stack:
        raise TreeError(f"{source}:{start_line}: unbalanced parentheses: the tree starting here "
                        f"has {len(stack)} unclosed '(' at the end of the input (line "
                        f"{last_line})")


def parse_tree(text: str, source: str = "<string>", line: int = 1) -> Tree:
    """Parses exactly one bracketed tree (one-line or multi-line).

    Args:
        text: the tree, e.g. "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)))".
        source: file name for error messages.
        line: line number of the first line of `text`, for error messages.
    Returns:
        The Tree. An unlabeled bracket gets the label "".
    Raises:
        TreeError: unbalanced or ill-formed brackets, no tree, or more than one tree.
    """
    trees = list(_parse_trees(_tokens_with_lines(text, line), source, False))
    if len(trees) != 1:
        raise TreeError(f"{source}:{line}: expected one bracketed tree, found {len(trees)}")
    return trees[0]


def read_mrg_file(path: str | os.PathLike) -> list[Tree]:
    """Reads the trees of one .mrg file, as they are (unlabeled roots, function tags, -NONE-).

    Args:
        path: a `wsj_SSNN.mrg` file.
    Returns:
        The raw trees, in file order.
    Raises:
        TreeError: unbalanced brackets or text outside a tree (message names file and line),
            or a file without any tree.
    """
    path = pathlib.Path(path)
    text = path.read_text(encoding="utf-8", errors="strict")
    trees = list(_parse_trees(_tokens_with_lines(text), str(path), True))
    if not trees:
        raise TreeError(f"{path}:1: no tree in this file (empty or truncated .mrg file)")
    return trees


def read_trees_file(path: str | os.PathLike) -> list[Tree]:
    """Reads a file of one bracketed tree per line (the `.trees` layout); blank lines skipped.

    Args:
        path: e.g. `<tmp_dir>/wsjEval.trees`.
    Returns:
        The trees, in file order.
    Raises:
        TreeError: a line that is not exactly one tree (message names file and line).
    """
    path = pathlib.Path(path)
    with open(path, encoding="utf-8") as f:
        return [parse_tree(line, str(path), i) for i, line in enumerate(f, start=1)
                if line.strip()]


# ----------------------------------------------------------------------------------------------
# Sections and the .mrg directory


def parse_sections(spec: str | Sequence[str]) -> list[str]:
    """Expands a spec of sections and/or files, e.g. "02-21", "22", "00,01", "0001-0159".

    Items of one or two digits are sections (`wsj/SS/`); items of four digits are file
    numbers (`wsj_NNNN.mrg`, which lives in section NN). A range joins two items of the same
    kind ("02-21", "0160-0179"; a file range may cross sections). Kinds may be mixed across
    items ("02-21,2201-2210").

    Args:
        spec: comma-separated items and inclusive ranges (a list of such items is also
            accepted).
    Returns:
        Sorted names without duplicates: two-digit sections ("02") and four-digit file
        numbers ("0160"); lexicographic order puts each section before its files. A
        section-only spec gives exactly the sections, e.g. ["02", "03", ..., "21"].
    Raises:
        ValueError: a malformed item, a reversed or mixed-kind range, or an empty spec (the
            message quotes the spec and the item).
    """
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    names: set[str] = set()
    for item in items:
        m = re.fullmatch(r"\s*(\d{1,2}|\d{4})\s*(?:-\s*(\d{1,2}|\d{4})\s*)?", str(item))
        four = m is not None and len(m.group(1)) == 4
        if not m or (m.group(2) is not None and (len(m.group(2)) == 4) != four):
            raise ValueError(f"bad WSJ section spec {spec!r}: item {item!r} is not a section "
                             f"number (00-99), a file number (0000-9999, for wsj_NNNN.mrg) or "
                             f"a range of one kind like 02-21 or 0001-0159")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise ValueError(f"bad WSJ section spec {spec!r}: range {item!r} is reversed")
        names.update(f"{n:04d}" if four else f"{n:02d}" for n in range(lo, hi + 1))
    if not names:
        raise ValueError(f"bad WSJ section spec {spec!r}: no section given")
    return sorted(names)


def wsj_root(path: str | os.PathLike) -> pathlib.Path:
    """The directory holding the two-digit section folders.

    Args:
        path: either that directory or a parent holding it as `wsj/` (the LDC `parsed/mrg`
            folder, or our `ptb_sample`).
    Returns:
        `path/wsj` if it exists, else `path`.
    """
    path = pathlib.Path(path)
    return path / "wsj" if (path / "wsj").is_dir() else path


def _section_files(root: pathlib.Path, section: str) -> list[pathlib.Path]:
    """The .mrg files of one two-digit section folder (FileNotFoundError if none)."""
    folder = root / section
    if not folder.is_dir():
        present = sorted(p.name for p in root.iterdir() if p.is_dir())
        raise FileNotFoundError(
            f"WSJ section {section} not found: {folder} is not a directory (sections "
            f"present in {root}: {', '.join(present) or 'none'}); check the section "
            f"flags or the treebank path")
    found = sorted(folder.glob("*.mrg"))
    if not found:
        raise FileNotFoundError(f"WSJ section {section}: no .mrg file in {folder}")
    return found


def mrg_files(wsj_dir: str | os.PathLike, sections: str | Sequence[str]) -> list[pathlib.Path]:
    """The .mrg files of the given sections and file numbers, in section and file-name order.

    Args:
        wsj_dir: see `wsj_root`.
        sections: a spec for `parse_sections`, e.g. "02-21" or "0001-0159".
    Returns:
        Paths of all `*.mrg` files of the named sections, and the `wsj_NNNN.mrg` files of the
        named file numbers, each once. A file range skips numbers without a file (sections
        have fewer than 100 files); a single file number must exist.
    Raises:
        FileNotFoundError: the directory, a section folder, any .mrg file in a section, a
            single named file, or every file of a file range is missing (the message names the
            path and what was expected).
    """
    root = wsj_root(wsj_dir)
    if not root.is_dir():
        raise FileNotFoundError(
            f"Penn Treebank directory {str(wsj_dir)!r} does not exist; pass the folder that "
            f"holds wsj/SS/wsj_SSNN.mrg (or the wsj folder itself)")
    parse_sections(sections)  # Refuses a bad spec as a whole, quoting it.
    files: dict[pathlib.Path, None] = {}  # Ordered set: a file named twice is read once.
    for item in sections.split(",") if isinstance(sections, str) else sections:
        names = parse_sections([item])
        if len(names[0]) == 2:
            for section in names:
                files.update(dict.fromkeys(_section_files(root, section)))
            continue
        paths = [root / name[:2] / f"wsj_{name}.mrg" for name in names]
        found = [path for path in paths if path.is_file()]
        if not found:
            what = (f"WSJ file {names[0]} not found: {paths[0]} does not exist" if len(names) == 1
                    else f"WSJ files {names[0]}-{names[-1]}: no wsj_NNNN.mrg of that range in "
                         f"{root}")
            raise FileNotFoundError(f"{what}; check the section flags or the treebank path")
        files.update(dict.fromkeys(found))
    return sorted(files, key=lambda path: (path.parent.name, path.name))


def read_wsj_sections(wsj_dir: str | os.PathLike, sections: str | Sequence[str],
                      preprocess: bool = True) -> list[Tree]:
    """All trees of the given sections, preprocessed by default.

    Args:
        wsj_dir: see `wsj_root`.
        sections: a spec for `parse_sections`, e.g. TRAIN_SECTIONS.
        preprocess: apply `preprocess_tree` (TOP root, no function tags, no empty elements).
    Returns:
        The trees in corpus order.
    Raises:
        FileNotFoundError: see `mrg_files`.
        TreeError: an unreadable tree, or a .mrg file without any tree.
    """
    trees: list[Tree] = []
    for path in mrg_files(wsj_dir, sections):
        for i, tree in enumerate(read_mrg_file(path)):
            if preprocess:
                tree = preprocess_tree(tree, f"{path}: tree {i + 1}")
            trees.append(tree)
    return trees


# ----------------------------------------------------------------------------------------------
# Preprocessing


def strip_function_tags(label: str) -> str:
    """NP-SBJ-1 -> NP, PP-LOC=2 -> PP, ADVP|PRT -> ADVP; -NONE-, -LRB-, -RRB- kept whole.

    Args:
        label: a raw treebank label.
    Returns:
        The bare category. An alternative `A|B` (rare in the treebank) keeps its first member.
    """
    if label.startswith("-"):
        return label
    return re.split(r"[-=|]", label, maxsplit=1)[0]


def preprocess_tree(tree: Tree, source: str = "<tree>") -> Tree:
    """Standard preprocessing of a raw treebank tree (see the module docstring).

    Args:
        tree: a raw tree as read from a .mrg file.
        source: where the tree comes from, for the error message.
    Returns:
        A new tree with root TOP: an unlabeled, TOP or ROOT root is relabeled TOP; any other
        root gets a TOP parent. Function tags are stripped from phrase labels (POS tags are
        kept as they are), -NONE- elements and constituents left empty are removed.
    Raises:
        TreeError: the tree holds nothing but empty elements.
    """
    def clean(node: Tree) -> Tree | None:
        children = node.children
        if len(children) == 1 and isinstance(children[0], str):
            return None if node.label == NONE_TAG else Tree(node.label, [children[0]])
        kids = []
        for child in children:
            kid = clean(child)
            if kid is not None:
                kids.append(kid)
        return Tree(strip_function_tags(node.label), kids) if kids else None

    cleaned = clean(tree)
    if cleaned is None:
        raise TreeError(f"{source}: tree has no word once -NONE- elements are removed")
    if tree.label in ("", ROOT_LABEL, "ROOT"):
        cleaned.label = ROOT_LABEL
        return cleaned
    return Tree(ROOT_LABEL, [cleaned])


# ----------------------------------------------------------------------------------------------
# Writing


def write_trees(trees: Iterable[Tree], path: str | os.PathLike) -> None:
    """Writes one-line trees, one per line (the `.trees` layout), atomically.

    Args:
        trees: preprocessed trees.
        path: output file.
    """
    file_io.atomic_write_lines(os.fspath(path), (t.to_string() for t in trees))


def write_sentences_and_trees(wsj_dir: str | os.PathLike, sections: str | Sequence[str],
                              sentences_path: str | os.PathLike,
                              trees_path: str | os.PathLike) -> int:
    """Writes the sentences (words joined by spaces) and gold trees of some sections.

    Args:
        wsj_dir: the treebank (see `wsj_root`).
        sections: e.g. TEST_SECTIONS ("23").
        sentences_path: one sentence per line, the input of `--decode_from_file`.
        trees_path: the preprocessed gold trees, one per line.
    Returns:
        The number of sentences.
    Raises:
        FileNotFoundError, TreeError: see `read_wsj_sections`.
    """
    trees = read_wsj_sections(wsj_dir, sections)
    file_io.atomic_write_lines(
        os.fspath(sentences_path), (" ".join(t.leaves()) for t in trees)
    )
    write_trees(trees, trees_path)
    return len(trees)
