"""WSJ constituency parsing as sequence to sequence (t2t's `wsj_parsing`, `parsing_english_ptb*`).

The tree side is pure Python:

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
* t2t's linearization `words_and_tags_from_wsj_tree` (§5.5 of the reference: POS tags appear
  once, phrases as `X ... /X`, the TOP label is dropped) and its inverse
  `tree_from_words_and_tags`, which repairs any decoded sequence into a well-formed tree over
  exactly the input words.
* `write_wsj_tmp_dir`: the files t2t's `wsj_parsing` problem expects in tmp_dir
  (`wsjTrain.trees`, `wsjEval.trees`, `wsj.train.text.txt`, `wsj.train.tags.txt`), written from
  the .mrg directory, since t2t ships no generator for them; `write_sentences_and_trees`: the
  sentences to decode (`--decode_from_file`) and the gold trees of any sections, e.g. 23 for
  the test F1 (`t2t_lite.utils.parsing_eval.evalb_decode_files` scores the decodes).

The problems (`wsj_parsing`, `parsing_english_ptb8k`, `parsing_english_ptb16k`, see their
docstrings) read the treebank from `set_wsj_source(wsj_dir, train_sections, dev_sections)`
(datagen's --wsj_dir, --wsj_train_sections, --wsj_dev_sections) or from tmp_dir.

One-line trees (the `.trees` files and `Tree.to_string`) look like
`(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)))`: closing brackets attached to the last
word, which is the form t2t's linearization reads.
"""
from __future__ import annotations

import os
import pathlib
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence

from t2t_lite.data_generators import problem, text_problems
from t2t_lite.registry import register_problem

TRAIN_SECTIONS = "02-21"
DEV_SECTIONS = "22"
TEST_SECTIONS = "23"

# File names t2t's wsj_parsing problem reads from tmp_dir.
TRAIN_TREES_FILE = "wsjTrain.trees"
EVAL_TREES_FILE = "wsjEval.trees"
TRAIN_TEXT_FILE = "wsj.train.text.txt"
TRAIN_TAGS_FILE = "wsj.train.tags.txt"

ROOT_LABEL = "TOP"
NONE_TAG = "-NONE-"
# Tag given to (non-punctuation) words that a decoded sequence left without a POS tag (never a
# PTB tag, so it counts as a tagging error; Vinyals et al. use the same placeholder).
DEFAULT_TAG = "XX"

# Tags given to punctuation words that a decoded sequence left untagged: their (nearly
# deterministic) treebank tags, so that evalb deletes them from the test tree as it does from the
# gold tree; tagging a gold "." as XX would make the sentence an evalb "Length unmatch" error.
PTB_PUNCTUATION_TAGS = {
    ".": ".", "?": ".", "!": ".", ",": ",", ":": ":", ";": ":", "-": ":", "--": ":",
    "...": ":", "``": "``", "`": "``", "''": "''",
}

# Words the treebank tags either as punctuation or not: the tags they may pair with when a
# decode's tags are realigned to the words.
_AMBIGUOUS_WORD_TAGS = {"'": frozenset({"POS", "''"})}

# The 45 Penn Treebank POS tags (the empty-element tag -NONE- is removed by preprocessing).
PTB_POS_TAGS = frozenset({
    "#", "$", "''", ",", "-LRB-", "-RRB-", ".", ":", "CC", "CD", "DT", "EX", "FW", "IN", "JJ",
    "JJR", "JJS", "LS", "MD", "NN", "NNP", "NNPS", "NNS", "PDT", "POS", "PRP", "PRP$", "RB",
    "RBR", "RBS", "RP", "SYM", "TO", "UH", "VB", "VBD", "VBG", "VBN", "VBP", "VBZ", "WDT", "WP",
    "WP$", "WRB", "``",
})
# The Penn Treebank phrase labels after function tags are stripped.
PTB_PHRASE_LABELS = frozenset({
    "ADJP", "ADVP", "CONJP", "FRAG", "INTJ", "LST", "NAC", "NP", "NX", "PP", "PRN", "PRT", "QP",
    "RRC", "S", "SBAR", "SBARQ", "SINV", "SQ", "UCP", "VP", "WHADJP", "WHADVP", "WHNP", "WHPP",
    "X",
})

_TOKEN_RE = re.compile(r"\(|\)|[^\s()]+")
_ATOM_RE = re.compile(r"[^\s()]+")


class TreeError(ValueError):
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
    """Expands a section spec such as "02-21", "22", "00,01" or "02-21,24" (or a list).

    Args:
        spec: comma-separated section numbers and inclusive ranges (a list of such items is
            also accepted).
    Returns:
        Two-digit section names, sorted, without duplicates, e.g. ["02", "03", ..., "21"].
    Raises:
        ValueError: a malformed item or an empty spec (the message quotes the spec).
    """
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    sections: set[int] = set()
    for item in items:
        m = re.fullmatch(r"\s*(\d{1,2})\s*(?:-\s*(\d{1,2})\s*)?", str(item))
        if not m:
            raise ValueError(f"bad WSJ section spec {spec!r}: item {item!r} is not a section "
                             f"number (00-99) or a range like 02-21")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise ValueError(f"bad WSJ section spec {spec!r}: range {item!r} is reversed")
        sections.update(range(lo, hi + 1))
    if not sections:
        raise ValueError(f"bad WSJ section spec {spec!r}: no section given")
    return [f"{s:02d}" for s in sorted(sections)]


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


def mrg_files(wsj_dir: str | os.PathLike, sections: str | Sequence[str]) -> list[pathlib.Path]:
    """The .mrg files of the given sections, in section and file-name order.

    Args:
        wsj_dir: see `wsj_root`.
        sections: a spec for `parse_sections`.
    Returns:
        Paths of all `*.mrg` files of those sections.
    Raises:
        FileNotFoundError: the directory, a section folder, or any .mrg file in a section is
            missing (the message names the path and what was expected).
    """
    root = wsj_root(wsj_dir)
    if not root.is_dir():
        raise FileNotFoundError(
            f"Penn Treebank directory {str(wsj_dir)!r} does not exist; pass the folder that "
            f"holds wsj/SS/wsj_SSNN.mrg (or the wsj folder itself)")
    files: list[pathlib.Path] = []
    for section in parse_sections(sections):
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
        files.extend(found)
    return files


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
# Linearization (t2t) and its inverse


def words_and_tags_from_wsj_tree(tree_string: str) -> tuple[str, str]:
    """t2t's linearization of a one-line tree (Vinyals et al. 2015, arXiv:1412.7449).

    Split on whitespace; a token starting with "(" pushes its label and appends it to the
    tags; any other token must end with ")": pop once (the POS tag, emitting nothing), then
    pop a label X and append "/X" for every further trailing ")"; the word is the token
    without its trailing ")". The outermost label and its closer are dropped (tags[1:-1]).

    Args:
        tree_string: one tree on one line, closers attached to words, e.g.
            "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)))".
    Returns:
        (words, tags): "The cat sat ." and "S NP DT NN /NP VP VBD /VP . /S".
    Raises:
        TreeError: a token that is neither "(label" nor "word)" (t2t asserts instead), or
            unbalanced brackets or two trees on the line (t2t returns garbage for those).
    """
    stack: list[str] = []
    tags: list[str] = []
    words: list[str] = []
    for tok in tree_string.strip().split():
        if tok[0] == "(":
            if not stack and tags:
                raise TreeError(f"words_and_tags_from_wsj_tree: more than one tree in "
                                f"{tree_string.strip()!r}")
            symbol = tok[1:]
            tags.append(symbol)
            stack.append(symbol)
            continue
        if len(tok) < 2 or tok[-1] != ")" or tok[0] == ")":
            raise TreeError(f"words_and_tags_from_wsj_tree: token {tok!r} is neither '(LABEL' "
                            f"nor 'word)' in {tree_string.strip()!r}; trees must be one-line "
                            f"with closers attached to words")
        if not stack:
            raise TreeError(f"words_and_tags_from_wsj_tree: unbalanced tree "
                            f"{tree_string.strip()!r}")
        stack.pop()  # The POS tag.
        while tok[-2] == ")":
            if not stack:
                raise TreeError(f"words_and_tags_from_wsj_tree: unbalanced tree "
                                f"{tree_string.strip()!r}")
            tags.append("/" + stack.pop())
            tok = tok[:-1]
        words.append(tok[:-1])
    if stack:
        raise TreeError(f"words_and_tags_from_wsj_tree: unbalanced tree "
                        f"{tree_string.strip()!r}: {len(stack)} unclosed '('")
    return " ".join(words), " ".join(tags[1:-1])


def linearize(tree: Tree) -> tuple[str, str]:
    """`words_and_tags_from_wsj_tree(tree.to_string())`: (inputs text, targets text)."""
    return words_and_tags_from_wsj_tree(tree.to_string())


def _align_tags_to_words(tags: Sequence[str], words: Sequence[str],
                         punctuation_tags: Mapping[str, str]) -> tuple[list, list]:
    """Monotone alignment of POS-tag tokens to words when their counts differ.

    Minimum cost with: dropping a tag 1, leaving a word untagged 1, pairing a tag with a word
    0 if they agree on being punctuation (a punctuation tag with a punctuation word, any other
    tag with any other word; the ambiguous "'" with POS or ''), else never. Among optimal
    alignments, the one that pairs tags and words as early as possible (untagged words and
    dropped tags as late as possible) is chosen, as a left-to-right reading would.

    Args:
        tags: the m POS-tag tokens, in order.
        words: the n words.
        punctuation_tags: punctuation word -> its tag; its values are the punctuation tags.
    Returns:
        (match, gaps): match[i] = word index of tag i, or None if tag i is dropped;
        gaps = [(j, i)] for each untagged word j, which goes before tag i (i = m: after all).
    """
    punct_tags = frozenset(punctuation_tags.values())
    m, n = len(tags), len(words)
    tag_is_punct = [t in punct_tags for t in tags]
    word_is_punct = [w in punctuation_tags for w in words]

    def compatible(i: int, j: int) -> bool:
        if words[j] in _AMBIGUOUS_WORD_TAGS:
            return tags[i] in _AMBIGUOUS_WORD_TAGS[words[j]]
        return tag_is_punct[i] == word_is_punct[j]

    big = m + n + 1
    cost = [[0] * (n + 1) for _ in range(m + 1)]
    for i in range(m + 1):
        row, up = cost[i], cost[i - 1] if i else None
        for j in range(n + 1):
            if i == 0 and j == 0:
                continue
            best = big
            if i and j and compatible(i - 1, j - 1):
                best = up[j - 1]
            if i and up[j] + 1 < best:
                best = up[j] + 1
            if j and row[j - 1] + 1 < best:
                best = row[j - 1] + 1
            row[j] = best
    match: list = [None] * m
    gaps: list[tuple[int, int]] = []
    i, j = m, n
    while i or j:
        # Walking back from the end, prefer the moves that push gaps to the end.
        if j and cost[i][j - 1] + 1 == cost[i][j]:
            j -= 1
            gaps.append((j, i))
        elif i and cost[i - 1][j] + 1 == cost[i][j]:
            i -= 1
        else:
            i, j = i - 1, j - 1
            match[i] = j
    gaps.reverse()
    return match, gaps


def tree_from_words_and_tags(
    words: str | Sequence[str],
    tags: str,
    pos_tags: Iterable[str] = PTB_POS_TAGS,
    phrase_labels: Iterable[str] = PTB_PHRASE_LABELS,
    punctuation_tags: Mapping[str, str] = PTB_PUNCTUATION_TAGS,
    default_tag: str = DEFAULT_TAG,
) -> Tree:
    """Inverts the linearization, repairing any sequence into a tree over exactly `words`.

    Tokens of `tags` that are neither a phrase label (in `phrase_labels`), a POS tag (in
    `pos_tags`) nor a closer "/X" (unknown tokens, "TOP", "/" alone, subword debris) are
    dropped. The rest is read left to right with a stack of open constituents whose bottom is
    the TOP root:

    * a phrase label opens a constituent under the innermost open one;
    * a POS tag is the preterminal of its word (below);
    * a closer "/X" closes the innermost open X, and with it any constituent opened inside X
      (missing closers); a closer whose label is not open closes the innermost open
      constituent (wrong label); a closer with only TOP open is dropped (extra closer).

    Words and POS tags: when there are as many POS tags as words, the i-th tag takes the i-th
    word, as the model says. Otherwise (too few or too many tags) tags and words are aligned
    by `_align_tags_to_words`, which never pairs a punctuation tag with a non-punctuation word
    or the reverse: unpaired tags are dropped, and each unpaired word becomes a preterminal
    tagged by `punctuation_tags` (punctuation words, so evalb deletes them as in the gold
    tree) or `default_tag`, placed between its neighbours: before the first phrase label or
    POS tag that follows the previous word's tag (so after that word's closers), or just
    before the first tag for a leading word. Unpaired words after the last tag go to the
    innermost constituent still open at the end, or if none is, to the last phrase under
    TOP, or else to TOP itself. Word order is always kept.

    At the end, constituents still open are closed; a constituent that ends with no child
    (e.g. "NP /NP") is removed. A well-formed sequence is rebuilt exactly.

    Args:
        words: the input sentence, a string (split on whitespace) or a list of words.
        tags: the decoded target text, e.g. "S NP DT NN /NP VP VBD /VP . /S".
        pos_tags: the POS tag inventory (PTB's 45 by default).
        phrase_labels: the phrase label inventory (PTB's by default).
        punctuation_tags: punctuation word -> its POS tag (its values are the tags treated
            as punctuation when aligning).
        default_tag: POS tag for the other words the sequence left untagged.
    Returns:
        A Tree rooted at TOP whose leaves are exactly `words`, in order.
    Raises:
        ValueError: `words` is empty, or a word holds "(" or ")" (use the treebank's escapes
            -LRB- / -RRB-), which no bracketed tree can carry.
    """
    words = words.split() if isinstance(words, str) else list(words)
    if not words:
        raise ValueError("tree_from_words_and_tags: the input sentence has no word")
    for i, w in enumerate(words):
        if not w or "(" in w or ")" in w or w != w.strip() or len(w.split()) != 1:
            raise ValueError(f"tree_from_words_and_tags: word {i} {w!r} cannot appear in a "
                             f"bracketed tree; escape brackets as -LRB- / -RRB-")
    pos_tags = frozenset(pos_tags)
    phrase_labels = frozenset(phrase_labels)
    tokens: list[tuple[str, str]] = []
    for tok in tags.split():
        if tok.startswith("/") and len(tok) > 1:
            tokens.append(("close", tok[1:]))
        elif tok in phrase_labels:
            tokens.append(("open", tok))
        elif tok in pos_tags:
            tokens.append(("pos", tok))
    pos_at = [k for k, (kind, _) in enumerate(tokens) if kind == "pos"]
    if len(pos_at) == len(words):
        match: list = list(range(len(words)))
        gaps: list[tuple[int, int]] = []
    else:
        match, gaps = _align_tags_to_words([tokens[k][1] for k in pos_at], words,
                                           punctuation_tags)
    # Untagged words: token index before which they are attached (None: after the last).
    inserted: dict[int | None, list[int]] = {}
    for j, gap in gaps:
        if gap == len(pos_at):
            anchor = None
        elif gap == 0:
            anchor = pos_at[0]
        else:
            anchor = next(k for k in range(pos_at[gap - 1] + 1, len(tokens))
                          if tokens[k][0] != "close")
        inserted.setdefault(anchor, []).append(j)

    def untagged(indices: list[int]) -> list[Tree]:
        return [Tree(punctuation_tags.get(words[j], default_tag), [words[j]]) for j in indices]

    root = Tree(ROOT_LABEL)
    stack = [root]

    def close_innermost() -> None:
        node = stack.pop()
        if not node.children:  # An empty constituent is the last child of its parent.
            stack[-1].children.pop()

    n_tags = 0
    for k, (kind, label) in enumerate(tokens):
        stack[-1].children.extend(untagged(inserted.get(k, [])))
        if kind == "close":
            if len(stack) == 1:
                continue
            depth = next((d for d in range(len(stack) - 1, 0, -1) if stack[d].label == label),
                         len(stack) - 1)
            while len(stack) > depth:
                close_innermost()
        elif kind == "open":
            node = Tree(label)
            stack[-1].children.append(node)
            stack.append(node)
        else:
            if match[n_tags] is not None:
                stack[-1].children.append(Tree(label, [words[match[n_tags]]]))
            n_tags += 1
    if None in inserted:
        if len(stack) > 1:
            target = stack[-1]
        elif root.children and not root.children[-1].is_preterminal:
            target = root.children[-1]
        else:
            target = root
        target.children.extend(untagged(inserted[None]))
    while len(stack) > 1:
        close_innermost()
    return root


def is_well_formed(tree: Tree, words: Sequence[str] | None = None) -> bool:
    """True if every node is a preterminal (one word) or a phrase (>= 1 subtree), the labels
    are non-empty atoms, and (when given) the leaves are exactly `words`.

    Args:
        tree: any Tree.
        words: the expected leaves, in order.
    Returns:
        Whether the tree is a proper constituency tree (over `words`).
    """
    for event, x in tree.walk():
        if event != "open":
            continue
        if not _ATOM_RE.fullmatch(x.label):
            return False
        if not x.children:
            return False
        if not x.is_preterminal and any(isinstance(c, str) for c in x.children):
            return False
        if x.is_preterminal and not _ATOM_RE.fullmatch(x.children[0]):
            return False
    return words is None or tree.leaves() == list(words)


# ----------------------------------------------------------------------------------------------
# t2t's wsj_parsing tmp_dir layout


def _write_lines_atomically(path: pathlib.Path, lines: Iterable[str]) -> None:
    """Writes `lines` (one per line) to `path` via a temporary name, so no half file remains."""
    tmp = path.with_name(path.name + ".incomplete")
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in lines)
    os.replace(tmp, path)


def write_trees(trees: Iterable[Tree], path: str | os.PathLike) -> None:
    """Writes one-line trees, one per line (the `.trees` layout), atomically.

    Args:
        trees: preprocessed trees.
        path: output file.
    """
    _write_lines_atomically(pathlib.Path(path), (t.to_string() for t in trees))


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
    _write_lines_atomically(pathlib.Path(sentences_path), (" ".join(t.leaves()) for t in trees))
    write_trees(trees, trees_path)
    return len(trees)


def write_wsj_tmp_dir(
    wsj_dir: str | os.PathLike,
    tmp_dir: str | os.PathLike,
    train_sections: str | Sequence[str] = TRAIN_SECTIONS,
    dev_sections: str | Sequence[str] = DEV_SECTIONS,
) -> dict[str, pathlib.Path]:
    """Writes the files t2t's `wsj_parsing` problem reads from tmp_dir.

    `wsjTrain.trees` / `wsjEval.trees`: the preprocessed train / dev trees, one per line;
    `wsj.train.text.txt` / `wsj.train.tags.txt`: the linearized train trees (words / tags),
    line i of one matching line i of the other (t2t builds its vocab from their first 1000
    pairs). Existing files are replaced; each is written under a temporary name and renamed.

    Args:
        wsj_dir: the treebank (see `wsj_root`).
        tmp_dir: output folder, created if missing.
        train_sections: sections of wsjTrain.trees (default 02-21).
        dev_sections: sections of wsjEval.trees (default 22).
    Returns:
        {file name: path} of the four files.
    Raises:
        FileNotFoundError, TreeError: see `read_wsj_sections`.
    """
    train = read_wsj_sections(wsj_dir, train_sections)
    dev = read_wsj_sections(wsj_dir, dev_sections)
    out = pathlib.Path(tmp_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {name: out / name for name in
             (TRAIN_TREES_FILE, EVAL_TREES_FILE, TRAIN_TEXT_FILE, TRAIN_TAGS_FILE)}
    pairs = [linearize(t) for t in train]
    write_trees(train, paths[TRAIN_TREES_FILE])
    write_trees(dev, paths[EVAL_TREES_FILE])
    _write_lines_atomically(paths[TRAIN_TEXT_FILE], (w for w, _ in pairs))
    _write_lines_atomically(paths[TRAIN_TAGS_FILE], (t for _, t in pairs))
    return paths


# ----------------------------------------------------------------------------------------------
# Problems


class _WsjSource:
    """Where a parsing problem finds the treebank, and which sections make each split.

    The treebank is `wsj_dir` (datagen's --wsj_dir) when set, else tmp_dir; either may be the
    folder holding `wsj/SS/*.mrg` or the `wsj` folder itself. Sections default to the standard
    split (train 02-21, dev 22).
    """

    def _init_wsj_source(self) -> None:
        self._wsj_dir: str | None = None
        self._sections = {problem.DatasetSplit.TRAIN: TRAIN_SECTIONS,
                          problem.DatasetSplit.EVAL: DEV_SECTIONS}
        self._tree_cache: dict[tuple[str, str], list[Tree]] = {}

    def set_wsj_source(self, wsj_dir: str | None = None, train_sections: str | None = None,
                       dev_sections: str | None = None) -> None:
        """Overrides the treebank folder and the sections of the train / dev splits.

        Args:
            wsj_dir: folder of the LDC treebank (`.../parsed/mrg`, holding wsj/SS/*.mrg).
            train_sections: e.g. "02-21" (datagen's --wsj_train_sections).
            dev_sections: e.g. "22" (datagen's --wsj_dev_sections).
        Raises:
            ValueError: a malformed section spec.
        """
        if wsj_dir:
            self._wsj_dir = str(wsj_dir)
        for split, spec, flag in ((problem.DatasetSplit.TRAIN, train_sections,
                                   "--wsj_train_sections"),
                                  (problem.DatasetSplit.EVAL, dev_sections, "--wsj_dev_sections")):
            if spec:
                try:
                    parse_sections(spec)
                except ValueError as e:
                    raise ValueError(f"{flag}: {e}") from None
                self._sections[split] = spec

    def _treebank_dir(self, tmp_dir: str) -> str:
        return self._wsj_dir or tmp_dir

    def wsj_trees(self, tmp_dir: str, dataset_split: str) -> list[Tree]:
        """The preprocessed trees of a split, read once per problem instance.

        Args:
            tmp_dir: datagen's tmp_dir (the treebank unless `set_wsj_source` named one).
            dataset_split: problem.DatasetSplit.TRAIN or EVAL.
        Returns:
            The trees, in corpus order.
        Raises:
            FileNotFoundError: no treebank there (the message says how to point at it).
        """
        key = (self._treebank_dir(tmp_dir), self._sections[dataset_split])
        if key not in self._tree_cache:
            try:
                self._tree_cache[key] = read_wsj_sections(*key)
            except FileNotFoundError as e:
                raise FileNotFoundError(
                    f"{e}. The Penn Treebank (LDC99T42) cannot be downloaded automatically: "
                    f"pass --wsj_dir=<treebank_3/parsed/mrg> or put its wsj/ folder in "
                    f"--tmp_dir") from None
        return self._tree_cache[key]

    def _source_text(self, tmp_dir: str, dataset_split: str) -> str:
        return (f"WSJ sections {self._sections[dataset_split]} of "
                f"{wsj_root(self._treebank_dir(tmp_dir))}")


@register_problem("wsj_parsing")
class WsjParsing(_WsjSource, text_problems.Text2textTmpdir):
    """t2t's `wsj_parsing`: linearized trees from one-line tree files in tmp_dir.

    Reads `wsjTrain.trees` / `wsjEval.trees` (one tree per line, blank lines skipped) and builds
    a shared 2^15 subword vocab (`vocab.wsj_parsing.32768.subwords`) from the first 1000 pairs
    of `wsj.train.text.txt` / `wsj.train.tags.txt`, as t2t. t2t ships nothing that writes those
    files; here, when they are absent (or when `set_wsj_source` named a treebank), they are
    written from the .mrg treebank by `write_wsj_tmp_dir` with the chosen sections.
    """

    TRAIN_FILES = (TRAIN_TEXT_FILE, TRAIN_TAGS_FILE)
    TRAIN_FILES_TREE = TRAIN_TREES_FILE
    EVAL_FILES_TREE = EVAL_TREES_FILE

    def __init__(self, was_reversed: bool = False, was_copy: bool = False,
                 approx_vocab_size: int | None = None):
        super().__init__(was_reversed, was_copy, approx_vocab_size)
        self._init_wsj_source()
        self._tmp_files_written = False

    @property
    def max_samples_for_vocab(self) -> int:
        return 1000

    def _tmp_files(self, tmp_dir: str) -> list[pathlib.Path]:
        names = (TRAIN_TREES_FILE, EVAL_TREES_FILE, TRAIN_TEXT_FILE, TRAIN_TAGS_FILE)
        return [pathlib.Path(tmp_dir) / name for name in names]

    def prepare_tmp_dir(self, tmp_dir: str) -> None:
        """Writes the four tmp_dir files from the treebank unless the user's files are there.

        They are (re)written once per instance when `set_wsj_source` named a treebank, or when
        any of them is missing.

        Args:
            tmp_dir: datagen's tmp_dir.
        Raises:
            FileNotFoundError: files missing and no treebank found.
        """
        if self._tmp_files_written:
            return
        if self._wsj_dir is None and all(p.exists() for p in self._tmp_files(tmp_dir)):
            return
        try:
            write_wsj_tmp_dir(self._treebank_dir(tmp_dir), tmp_dir,
                              self._sections[problem.DatasetSplit.TRAIN],
                              self._sections[problem.DatasetSplit.EVAL])
        except FileNotFoundError as e:
            missing = ", ".join(str(p) for p in self._tmp_files(tmp_dir) if not p.exists())
            raise FileNotFoundError(
                f"wsj_parsing needs {missing}; they are written from the Penn Treebank, but "
                f"{e}. Pass --wsj_dir=<treebank_3/parsed/mrg> (or put its wsj/ folder in "
                f"--tmp_dir), or provide the files") from None
        self._tmp_files_written = True

    def source_description(self, tmp_dir: str, dataset_split: str) -> str:
        tree_file = (self.TRAIN_FILES_TREE if dataset_split == problem.DatasetSplit.TRAIN
                     else self.EVAL_FILES_TREE)
        return os.path.join(tmp_dir, tree_file)

    def generate_samples(self, data_dir: str, tmp_dir: str, dataset_split: str):
        """Yields {"inputs": words, "targets": linearized tags} per line of the tree file."""
        del data_dir
        self.prepare_tmp_dir(tmp_dir)
        path = self.source_description(tmp_dir, dataset_split)
        with open(path, encoding="utf-8") as f:
            for line_no, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    words, tags = words_and_tags_from_wsj_tree(line)
                except TreeError as e:
                    raise TreeError(f"{path}:{line_no}: {e}") from None
                yield {"inputs": words, "targets": tags}

    def generate_text_for_vocab(self, data_dir: str, tmp_dir: str) -> Iterator[str]:
        """Inputs then targets of the first 1000 lines of wsj.train.text.txt / .tags.txt."""
        del data_dir
        self.prepare_tmp_dir(tmp_dir)
        files = [os.path.join(tmp_dir, f) for f in self.TRAIN_FILES]
        for i, sample in enumerate(text_problems.text2text_txt_iterator(*files)):
            yield sample["inputs"]
            yield sample["targets"]
            if (i + 1) >= self.max_samples_for_vocab:
                break


class _ParsingEnglishPtb(_WsjSource, text_problems.Text2TextProblem):
    """Shared part of t2t's `parsing_english_ptb8k` / `_ptb16k`: samples read from .mrg files.

    t2t declares these as plain `Problem`s whose datagen stops at `assert False`; here they are
    generated like any text2text problem (100 train shards, 1 dev shard, EOS appended), the
    samples being the linearized trees of the chosen sections, and the vocab built from the
    whole training split (inputs then targets of every tree). Eval metrics: the `Problem`
    defaults (no approx BLEU, no ROUGE), input space 3 (EN_TOK), target space 15 (PARSE_TOK).
    """

    def __init__(self, was_reversed: bool = False, was_copy: bool = False,
                 approx_vocab_size: int | None = None):
        super().__init__(was_reversed, was_copy, approx_vocab_size)
        self._init_wsj_source()

    @property
    def is_generate_per_split(self) -> bool:
        return True

    def source_description(self, tmp_dir: str, dataset_split: str) -> str:
        return self._source_text(tmp_dir, dataset_split)

    def generate_samples(self, data_dir: str, tmp_dir: str, dataset_split: str):
        """Yields {"inputs": words, "targets": linearized tags} per tree of the split."""
        del data_dir
        for tree in self.wsj_trees(tmp_dir, dataset_split):
            words, tags = linearize(tree)
            yield {"inputs": words, "targets": tags}

    def eval_metrics(self) -> list[str]:
        return problem.Problem.eval_metrics(self)

    def hparams(self, defaults, model_hparams) -> None:
        super().hparams(defaults, model_hparams)
        defaults.input_space_id = problem.SpaceID.EN_TOK
        defaults.target_space_id = problem.SpaceID.PARSE_TOK


@register_problem("parsing_english_ptb8k")
class ParsingEnglishPtb8k(_ParsingEnglishPtb):
    """t2t's `parsing_english_ptb8k`: one shared 2^13 subword vocab, file `vocab.endefr.8192`.

    The file name is t2t's (it loaded the En-De-Fr translation vocab of that name); a vocab
    already in data_dir under that name is used as it is, else one is built from the WSJ
    training split. t2t's legacy `batch_size_multiplier=256` and `loss_multiplier=2.0` are kept.
    """

    @property
    def default_approx_vocab_size(self) -> int:
        return 2**13

    @property
    def vocab_filename(self) -> str:
        return f"vocab.endefr.{self.approx_vocab_size}"

    def hparams(self, defaults, model_hparams) -> None:
        super().hparams(defaults, model_hparams)
        defaults.batch_size_multiplier = 256
        defaults.loss_multiplier = 2.0


@register_problem("parsing_english_ptb16k")
class ParsingEnglishPtb16k(_ParsingEnglishPtb):
    """t2t's `parsing_english_ptb16k`: separate subword vocabs for words and tags.

    Inputs (words): `wsj_source.vocab.512` (2^9); targets (linearized tags):
    `wsj_target.vocab.16384` (2^14, the constructor's approx_vocab_size overrides it). Both
    are built from the WSJ training split when absent. The tag text has few distinct tokens,
    so the target vocab ends up far smaller than 2^14 (the size only names the file).
    """

    vocab_prefix = "wsj"
    inputs_target_vocab_size = 2**9

    @property
    def default_approx_vocab_size(self) -> int:
        return 2**14

    @property
    def vocab_filename(self) -> str:
        return f"{self.vocab_prefix}_target.vocab.{self.approx_vocab_size}"

    @property
    def source_vocab_filename(self) -> str:
        """`wsj_source.vocab.512`."""
        return f"{self.vocab_prefix}_source.vocab.{self.inputs_target_vocab_size}"

    def generate_text_for_vocab(self, data_dir: str, tmp_dir: str) -> Iterator[str]:
        """The targets (tags) of the training split: the text of the target vocab."""
        for sample in self.generate_samples(data_dir, tmp_dir, problem.DatasetSplit.TRAIN):
            yield sample["targets"]

    def get_or_create_source_vocab(self, data_dir: str, tmp_dir: str | None,
                                   force_get: bool = False):
        """Loads `wsj_source.vocab.512`, building it from the training words if absent.

        Args:
            data_dir: where the vocab file lives.
            tmp_dir: raw data directory (only used when building).
            force_get: only load; never build.
        Returns:
            A SubwordTextEncoder.
        """
        from t2t_lite.data_generators import generator_utils, text_encoder

        path = os.path.join(data_dir, self.source_vocab_filename)
        if force_get:
            if not os.path.exists(path):
                raise FileNotFoundError(
                    f"Vocab file {path} not found. Generate the data first: python run.py "
                    f"--mode=datagen --problem={self.name} --data_dir={data_dir}")
            return text_encoder.SubwordTextEncoder(path)
        words = (s["inputs"] for s in
                 self.generate_samples(data_dir, tmp_dir, problem.DatasetSplit.TRAIN))
        return generator_utils.get_or_generate_vocab_inner(
            data_dir, self.source_vocab_filename, self.inputs_target_vocab_size, words,
            max_subtoken_length=self.max_subtoken_length,
            reserved_tokens=text_encoder.RESERVED_TOKENS)

    def feature_encoders(self, data_dir: str | None) -> dict:
        if data_dir is None:
            raise ValueError(f"{self.name} needs data_dir to load its vocabs "
                             f"({self.source_vocab_filename}, {self.vocab_filename})")
        return {"inputs": self.get_or_create_source_vocab(data_dir, None, force_get=True),
                "targets": self.get_or_create_vocab(data_dir, None, force_get=True)}

    def generate_encoded_samples(self, data_dir: str, tmp_dir: str, dataset_split: str):
        source = self.get_or_create_source_vocab(data_dir, tmp_dir)
        target = self.get_or_create_vocab(data_dir, tmp_dir)
        samples = self.generate_samples(data_dir, tmp_dir, dataset_split)
        return text_problems.text2text_generate_encoded(samples, source, targets_vocab=target)

    def generate_data(self, data_dir: str, tmp_dir: str, task_id: int = -1,
                      max_cases: int | None = None) -> None:
        # The base class removes what it created on failure, but knows only the target vocab.
        source_path = os.path.join(data_dir, self.source_vocab_filename)
        existed = os.path.exists(source_path)
        try:
            super().generate_data(data_dir, tmp_dir, task_id, max_cases)
        except BaseException:
            if not existed and os.path.exists(source_path):
                os.remove(source_path)
            raise
