"""EVALB-compatible bracketing scores (Sekine & Collins' evalb with COLLINS.prm), in Python.

Conventions of evalb + COLLINS.prm, reproduced here:

* DELETE_LABEL for the POS tags -NONE- , : `` '' . : those words are removed with their
  brackets before spans are computed (so punctuation never counts, and a constituent covering
  only such words has zero width and is ignored); DELETE_LABEL TOP: brackets labeled TOP are
  not counted (their children are).
* DELETE_LABEL_FOR_LENGTH -NONE- : the sentence length used for the `len<=40` figures counts
  every word except -NONE- (punctuation included), from the gold tree.
* Phrase labels are cut at the first "-" or "=" (NP-SBJ-1 -> NP, so function tags in either
  file do not matter); a label starting with "-" is thus cut to "" (evalb does the same).
* EQ_LABEL ADVP PRT: the two labels match each other.
* Labeled brackets are compared as multisets: two identical gold brackets (an X over X unary)
  need two identical test brackets.
* A test tree with no word left after deletion (empty output, "") is a *skip* sentence; a test
  tree whose (non-deleted) word count differs from the gold one ("Length unmatch"), whose words
  differ ("Words unmatch"), or that cannot be read (unbalanced brackets) is an *error*
  sentence. Both are left out of every total, exactly as evalb does, and are reported in
  `num_skip_sentences` / `num_error_sentences` and per sentence. evalb's MAX_ERROR abort is not
  reproduced: all sentences are always scored.
* Precision / recall / F1 / exact match / tagging accuracy are percentages over the valid
  sentences, from corpus totals; F1 = 2PR / (P + R) with P and R in percent (0.0 where evalb
  would print nan). Numbers are returned unrounded; `summary_text` prints them as evalb does.

Deliberate difference: an unlabeled outermost bracket, as in the raw `.mrg` form "( (S ...) )",
is removed like TOP. evalb would count it as a bracket labeled "" (matched only when the other
file has one too), which inflates scores when both files have it and penalises a file that uses
TOP. evalb's limits (200 words and brackets per sentence) do not apply.

Gold trees must be readable: a gold tree that is not raises a ValueError naming its index.

Command line (like `evalb -p COLLINS.prm GOLD TEST`):
    python -m t2t_lite.evaluation.parsing_eval GOLD_TREES TEST_TREES
    python -m t2t_lite.evaluation.parsing_eval --inputs=SENTENCES GOLD DECODES
The second form repairs decoded linearized trees first (`evalb_decode_files`).

Baseline: `right_branching_baseline` scores the right-branching chain (`right_branching_tree`,
gold POS tags, one phrase label) on the same gold trees, labeled and `unlabeled`.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import re
from collections import Counter
from collections.abc import Sequence

from t2t_lite.data_generators import tree_linearization, treebank

DELETE_LABELS = frozenset({"TOP", "-NONE-", ",", ":", "``", "''", "."})
DELETE_LABELS_FOR_LENGTH = frozenset({"-NONE-"})
EQ_LABELS = (("ADVP", "PRT"),)
CUTOFF_LEN = 40
# The phrase label of the right-branching baseline (`right_branching_tree`).
RIGHT_BRANCHING_LABEL = "S"

_CANONICAL = {b: a for a, b in EQ_LABELS}

STATUS_OK, STATUS_ERROR, STATUS_SKIP = 0, 1, 2


def modify_label(label: str) -> str:
    """evalb's `modify_label`: the label up to the first "-" or "=" (NP-SBJ=2 -> NP)."""
    for i, ch in enumerate(label):
        if ch in "-=":
            return label[:i]
    return label


def _label_match_key(label: str) -> str:
    """Maps EQ_LABEL-equivalent labels to one key (PRT -> ADVP)."""
    return _CANONICAL.get(label, label)


@dataclasses.dataclass(frozen=True)
class _Scored:
    """What evalb extracts from one tree."""

    terminals: list[tuple[str, str]]  # (word, POS tag) of the words not deleted.
    brackets: list[tuple[int, int, str]]  # (start, end, modified label), end exclusive.
    length: int  # Words not in DELETE_LABELS_FOR_LENGTH (r_wn1).


def _extract(tree: treebank.Tree) -> _Scored:
    """Terminals, countable brackets and length of `tree`, by evalb's rules."""
    terminals: list[tuple[str, str]] = []
    brackets: list[tuple[int, int, str]] = []
    starts: list[int] = []
    length = 0
    for event, node in tree.walk():
        if event == "word":
            continue
        if node.is_preterminal:
            if event == "open":
                length += node.label not in DELETE_LABELS_FOR_LENGTH
                if node.label not in DELETE_LABELS:
                    terminals.append((node.children[0], node.label))
            continue
        if event == "open":
            starts.append(len(terminals))
            continue
        start = starts.pop()
        if node is tree and node.label == "":
            continue  # The unlabeled root of the .mrg form (see the module docstring).
        label = modify_label(node.label)
        if start == len(terminals) or label in DELETE_LABELS:
            continue
        brackets.append((start, len(terminals), label))
    return _Scored(terminals, brackets, length)


@dataclasses.dataclass(frozen=True)
class SentenceResult:
    """One line of evalb's per-sentence table.

    Attributes:
        index: 0-based position in the input lists (evalb prints index + 1).
        length: gold length (words except -NONE-, punctuation included).
        status: 0 valid, 1 error, 2 skip (evalb's Stat. column).
        message: why the sentence is an error or a skip ("" when valid).
        matched, gold_brackets, test_brackets: bracket counts (0 unless valid).
        crossing: test brackets crossing at least one gold bracket.
        words: words compared for tagging (punctuation excluded).
        correct_tags: words whose test POS tag equals the gold one.
    """

    index: int
    length: int
    status: int
    message: str = ""
    matched: int = 0
    gold_brackets: int = 0
    test_brackets: int = 0
    crossing: int = 0
    words: int = 0
    correct_tags: int = 0

    @property
    def recall(self) -> float:
        """Percent of gold brackets matched (0 when there is none)."""
        return 100.0 * self.matched / self.gold_brackets if self.gold_brackets else 0.0

    @property
    def precision(self) -> float:
        """Percent of test brackets matched (0 when there is none)."""
        return 100.0 * self.matched / self.test_brackets if self.test_brackets else 0.0

    @property
    def tagging_accuracy(self) -> float:
        """Percent of correct POS tags (0 when no word is compared)."""
        return 100.0 * self.correct_tags / self.words if self.words else 0.0

    @property
    def exact_match(self) -> bool:
        """Valid, and gold and test brackets are the same multiset (evalb's complete match)."""
        return (self.status == STATUS_OK and self.gold_brackets == self.test_brackets
                == self.matched)


def _crosses(a: tuple[int, int, str], b: tuple[int, int, str]) -> bool:
    return (a[0] < b[0] < a[1] < b[1]) or (b[0] < a[0] < b[1] < a[1])


def score_sentence(index: int, gold: treebank.Tree,
                   test: treebank.Tree | str | None) -> SentenceResult:
    """Scores one test tree against its gold tree, as evalb's `calc_result`.

    Args:
        index: sentence position (reported back).
        gold: the gold tree.
        test: the test tree, or a str error message when it could not be read, or None for
            an empty test line.
    Returns:
        The SentenceResult.
    """
    g = _extract(gold)
    if test is None:
        return SentenceResult(index, g.length, STATUS_SKIP, "empty test tree")
    if isinstance(test, str):
        return SentenceResult(index, g.length, STATUS_ERROR, test)
    t = _extract(test)
    if not t.terminals:
        return SentenceResult(index, g.length, STATUS_SKIP, "no word in the test tree")
    if len(g.terminals) != len(t.terminals):
        return SentenceResult(index, g.length, STATUS_ERROR,
                              f"Length unmatch ({len(g.terminals)}|{len(t.terminals)})")
    for (gw, _), (tw, _) in zip(g.terminals, t.terminals):
        if gw != tw:
            return SentenceResult(index, g.length, STATUS_ERROR, f"Words unmatch ({gw}|{tw})")
    gold_keys = Counter((s, e, _label_match_key(lab)) for s, e, lab in g.brackets)
    test_keys = Counter((s, e, _label_match_key(lab)) for s, e, lab in t.brackets)
    matched = sum((gold_keys & test_keys).values())
    crossing = sum(any(_crosses(gb, tb) for gb in g.brackets) for tb in t.brackets)
    correct = sum(_label_match_key(gt) == _label_match_key(tt)
                  for (_, gt), (_, tt) in zip(g.terminals, t.terminals))
    return SentenceResult(index, g.length, STATUS_OK, "", matched, len(g.brackets),
                          len(t.brackets), crossing, len(g.terminals), correct)


def _totals(sentences: Sequence[SentenceResult]) -> dict:
    """evalb's summary block over `sentences` (all of them, or those within the cutoff)."""
    valid = [s for s in sentences if s.status == STATUS_OK]
    matched = sum(s.matched for s in valid)
    gold = sum(s.gold_brackets for s in valid)
    test = sum(s.test_brackets for s in valid)
    words = sum(s.words for s in valid)
    tags = sum(s.correct_tags for s in valid)
    crossing = sum(s.crossing for s in valid)
    recall = 100.0 * matched / gold if gold else 0.0
    precision = 100.0 * matched / test if test else 0.0
    n = len(valid)
    return {
        "num_sentences": len(sentences),
        "num_error_sentences": sum(s.status == STATUS_ERROR for s in sentences),
        "num_skip_sentences": sum(s.status == STATUS_SKIP for s in sentences),
        "num_valid_sentences": n,
        "recall": recall,
        "precision": precision,
        "f1": 2 * precision * recall / (precision + recall) if precision + recall else 0.0,
        "exact_match": 100.0 * sum(s.exact_match for s in valid) / n if n else 0.0,
        "average_crossing": crossing / n if n else 0.0,
        "no_crossing": 100.0 * sum(s.crossing == 0 for s in valid) / n if n else 0.0,
        "two_or_less_crossing": 100.0 * sum(s.crossing <= 2 for s in valid) / n if n else 0.0,
        "tagging_accuracy": 100.0 * tags / words if words else 0.0,
        "matched_brackets": matched,
        "gold_brackets": gold,
        "test_brackets": test,
        "words": words,
        "correct_tags": tags,
    }


def _read_test(text: str, index: int) -> treebank.Tree | str | None:
    if not text.strip():
        return None
    try:
        return treebank.parse_tree(text, f"test tree {index}")
    except treebank.TreeError as e:
        return str(e)


def evalb(gold_trees: Sequence[str | treebank.Tree],
          test_trees: Sequence[str | treebank.Tree],
          cutoff_len: int = CUTOFF_LEN) -> dict:
    """Scores test trees against gold trees with evalb's COLLINS.prm conventions.

    Args:
        gold_trees: bracketed gold trees (strings in any evalb-readable layout, or Trees).
        test_trees: the parser's trees, same order and count; "" for a failed parse.
        cutoff_len: the length bound of the second summary (evalb's CUTOFF_LEN, 40).
    Returns:
        A dict with `recall`, `precision`, `f1`, `exact_match`, `tagging_accuracy`,
        `average_crossing`, `no_crossing`, `two_or_less_crossing` (percent, except average
        crossing), the counts `num_sentences`, `num_error_sentences`, `num_skip_sentences`,
        `num_valid_sentences`, `matched_brackets`, `gold_brackets`, `test_brackets`,
        `words`, `correct_tags`; `len<=N` (N = cutoff_len): the same keys over sentences of
        gold length <= N; `cutoff_len`; and `sentences`: one SentenceResult per sentence.
    Raises:
        ValueError: the lists differ in length (evalb: "Number of lines unmatch"), or a gold
            tree cannot be read or is empty (the message names its index).
    """
    if len(gold_trees) != len(test_trees):
        raise ValueError(f"evalb: {len(gold_trees)} gold trees but {len(test_trees)} test "
                         f"trees; both lists must have one tree per sentence")
    sentences = []
    for i, (gold, test) in enumerate(zip(gold_trees, test_trees)):
        if isinstance(gold, str):
            gold = treebank.parse_tree(gold, f"gold tree {i}")
        if isinstance(test, str):
            test = _read_test(test, i)
        sentences.append(score_sentence(i, gold, test))
    result = _totals(sentences)
    result[f"len<={cutoff_len}"] = _totals([s for s in sentences if s.length <= cutoff_len])
    result["cutoff_len"] = cutoff_len
    result["sentences"] = sentences
    return result


def summary_text(result: dict) -> str:
    """evalb's "=== Summary ===" block for a result of `evalb` (numbers as evalb prints them).

    Args:
        result: the dict returned by `evalb`.
    Returns:
        The text, one statistic per line.
    """
    lines = ["=== Summary ==="]
    for title, block in (("All", result), (f"len<={result['cutoff_len']}",
                                           result[f"len<={result['cutoff_len']}"])):
        lines += [
            "",
            f"-- {title} --",
            f"Number of sentence        = {block['num_sentences']:6d}",
            f"Number of Error sentence  = {block['num_error_sentences']:6d}",
            f"Number of Skip  sentence  = {block['num_skip_sentences']:6d}",
            f"Number of Valid sentence  = {block['num_valid_sentences']:6d}",
            f"Bracketing Recall         = {block['recall']:6.2f}",
            f"Bracketing Precision      = {block['precision']:6.2f}",
            f"Bracketing FMeasure       = {block['f1']:6.2f}",
            f"Complete match            = {block['exact_match']:6.2f}",
            f"Average crossing          = {block['average_crossing']:6.2f}",
            f"No crossing               = {block['no_crossing']:6.2f}",
            f"2 or less crossing        = {block['two_or_less_crossing']:6.2f}",
            f"Tagging accuracy          = {block['tagging_accuracy']:6.2f}",
        ]
    return "\n".join(lines)


# The linearizations a decode may be in, and the repair that turns it into a tree.
REPAIRS = {
    "tags": tree_linearization.tree_from_words_and_tags,  # t2t's: "S NP DT NN /NP ..."
    "words": tree_linearization.tree_from_bracketed_words,  # "(S (NP The cat )NP ..."
}


# A closer with its label attached, ")NP": in `linearize_words` targets, never in a tree.
_LABELED_CLOSER_RE = re.compile(r"\)[^\s()]")


def _is_tree(text: str, linearization: str) -> bool:
    """Whether a gold line is a bracketed tree rather than a linearized target."""
    if not text.lstrip().startswith("("):
        return False
    return linearization != "words" or not _LABELED_CLOSER_RE.search(text)


def evalb_decodes(inputs: Sequence[str], decodes: Sequence[str],
                  gold: Sequence[str | treebank.Tree], cutoff_len: int = CUTOFF_LEN,
                  linearization: str = "tags") -> dict:
    """Decoded linearized trees -> repaired trees -> evalb scores.

    Args:
        inputs: the input sentences (space-separated words), one per decode.
        decodes: the decoded target texts ("S NP DT NN /NP ..."). Text after a tab (further
            beams, or t2t's beam scores) is ignored.
        gold: the gold trees, or the gold linearized targets (t2t's `.targets` file), which are
            turned into trees with the inputs; a string starting with "(" is a tree (for
            "words", unless it has a closer with its label attached, ")NP").
        cutoff_len: see `evalb`.
        linearization: "tags" (t2t's, `tree_linearization.tree_from_words_and_tags` repairs)
            or "words" (`linearize_words`, repaired by `tree_from_bracketed_words`).
    Returns:
        The `evalb` result, plus `test_trees`: the repaired one-line trees.
    Raises:
        ValueError: the three lists differ in length, an unknown linearization, or see
            `evalb`.
    """
    if linearization not in REPAIRS:
        raise ValueError(f"evalb_decodes: linearization {linearization!r} is not one of "
                         f"{sorted(REPAIRS)}")
    repair = REPAIRS[linearization]
    if not len(inputs) == len(decodes) == len(gold):
        raise ValueError(f"evalb_decodes: {len(inputs)} inputs, {len(decodes)} decodes and "
                         f"{len(gold)} gold lines; they must correspond line by line")
    gold_trees = [
        g if isinstance(g, treebank.Tree) or _is_tree(g, linearization) else repair(words, g)
        for words, g in zip(inputs, gold)
    ]
    test_trees = [
        repair(words, decode.split("\t", 1)[0])
        for words, decode in zip(inputs, decodes)
    ]
    result = evalb(gold_trees, test_trees, cutoff_len)
    result["test_trees"] = [t.to_string() for t in test_trees]
    return result


def right_branching_tree(tagged_words: Sequence[tuple[str, str]],
                         label: str = RIGHT_BRANCHING_LABEL) -> treebank.Tree:
    """The right-branching baseline parse: a binary chain of one phrase label over the words.

    For words w1..wn the tree is `(TOP (L (t1 w1) (L (t2 w2) ... (L (tn-1 wn-1) (tn wn)))))`:
    each word attaches to the chain, so the brackets are the suffixes [i, n) for i < n - 1
    plus the whole sentence (n - 1 phrases; a one-word sentence gets `(TOP (L (t1 w1)))`).

    The POS tags are given (normally the gold ones): the baseline is about brackets, and evalb
    deletes punctuation by the test tree's own tags, so made-up tags would turn sentences into
    "Length unmatch" errors instead of scoring the brackets. Punctuation stays in the chain,
    as the parser sees it; evalb then scores the spans without it. One label for every
    phrase, `S` by default (the usual whole-sentence label), so the labeled score counts only
    the S brackets the chain happens to hit; `unlabeled` gives the bracket-only score.

    Args:
        tagged_words: (word, POS tag) pairs, e.g. `Tree.pos()` of the gold tree; at least one.
        label: the phrase label of every chain node.
    Returns:
        The tree, rooted at TOP.
    Raises:
        ValueError: no words.
    """
    if not tagged_words:
        raise ValueError("right_branching_tree: a sentence needs at least one word")
    leaves = [treebank.Tree(tag, [word]) for word, tag in tagged_words]
    node = treebank.Tree(label, [leaves[-1]]) if len(leaves) == 1 else leaves[-1]
    for leaf in reversed(leaves[:-1]):
        node = treebank.Tree(label, [leaf, node])
    return treebank.Tree(treebank.ROOT_LABEL, [node])


def unlabeled(tree: treebank.Tree, label: str = "X") -> treebank.Tree:
    """A copy of `tree` with every phrase label except TOP replaced by `label`.

    Scoring `unlabeled` gold and test trees with `evalb` gives unlabeled bracketing scores
    (duplicated spans still count as a multiset, as in evalb). POS tags are kept, so the same
    words are deleted as punctuation.

    Args:
        tree: any tree.
        label: the one phrase label.
    Returns:
        The relabeled copy.
    """
    copies: dict[int, treebank.Tree] = {}
    for event, node in tree.walk():
        if event != "close":
            continue
        children = [c if isinstance(c, str) else copies.pop(id(c)) for c in node.children]
        keep = node.is_preterminal or node.label == treebank.ROOT_LABEL
        copies[id(node)] = treebank.Tree(node.label if keep else label, children)
    return copies[id(tree)]


def right_branching_baseline(gold_trees: Sequence[str | treebank.Tree],
                             label: str = RIGHT_BRANCHING_LABEL,
                             cutoff_len: int = CUTOFF_LEN) -> dict:
    """evalb scores of `right_branching_tree` (gold POS tags) against the gold trees.

    Args:
        gold_trees: bracketed gold trees (strings or Trees), e.g. the lines of wsjEval.trees.
        label: see `right_branching_tree`.
        cutoff_len: see `evalb`.
    Returns:
        The labeled `evalb` result, plus `unlabeled`: the `evalb` result of the same trees
        with all phrase labels merged (see `unlabeled`), and `test_trees`: the baseline trees.
    Raises:
        ValueError: an unreadable or empty gold tree (the message names its index).
    """
    gold = [treebank.parse_tree(g, f"gold tree {i}") if isinstance(g, str) else g
            for i, g in enumerate(gold_trees)]
    test = [right_branching_tree(g.pos(), label) for g in gold]
    result = evalb(gold, test, cutoff_len)
    result["unlabeled"] = evalb([unlabeled(g) for g in gold], [unlabeled(t) for t in test],
                                cutoff_len)
    result["test_trees"] = [t.to_string() for t in test]
    return result


def _read_lines(path: str | os.PathLike) -> list[str]:
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def evalb_decode_files(inputs_path: str | os.PathLike, decodes_path: str | os.PathLike,
                       gold_path: str | os.PathLike, cutoff_len: int = CUTOFF_LEN,
                       linearization: str = "tags") -> dict:
    """`evalb_decodes` on files: one sentence / decode / gold tree or target per line.

    Args:
        inputs_path: the sentences that were decoded (`--decode_from_file`, or t2t's
            `.inputs` file when decoding the dev set).
        decodes_path: the decoder's output (`--decode_to_file`, or `.decodes`).
        gold_path: gold trees one per line (e.g. `wsjEval.trees`), or t2t's `.targets`.
        cutoff_len: see `evalb`.
        linearization: see `evalb_decodes`.
    Returns:
        See `evalb_decodes`.
    Raises:
        ValueError: line counts differ (the message names the files).
    """
    inputs, decodes, gold = (_read_lines(p) for p in (inputs_path, decodes_path, gold_path))
    if not len(inputs) == len(decodes) == len(gold):
        raise ValueError(f"{inputs_path}: {len(inputs)} lines, {decodes_path}: {len(decodes)} "
                         f"lines, {gold_path}: {len(gold)} lines; they must match line by line")
    return evalb_decodes(inputs, decodes, gold, cutoff_len, linearization)


def main(argv: Sequence[str] | None = None) -> int:
    """Prints evalb's summary for two tree files, or for decodes with `--inputs`.

    Args:
        argv: command-line arguments (default: sys.argv[1:]).
    Returns:
        The exit status (0).
    """
    parser = argparse.ArgumentParser(
        prog="python -m t2t_lite.evaluation.parsing_eval",
        description="EVALB (COLLINS.prm) bracketing scores.")
    parser.add_argument("gold", help="gold trees, one per line (or t2t .targets with --inputs)")
    parser.add_argument("test", help="test trees, one per line (decodes with --inputs)")
    parser.add_argument("--inputs", help="sentences that were decoded; TEST is then decodes")
    parser.add_argument("--cutoff_len", type=int, default=CUTOFF_LEN)
    parser.add_argument("--linearization", choices=sorted(REPAIRS), default="tags",
                        help="of the decodes: tags (t2t's, parsing_english_ptb8k/16k) or "
                             "words (parsing_english_ptb_words)")
    args = parser.parse_args(argv)
    if args.inputs:
        result = evalb_decode_files(args.inputs, args.test, args.gold, args.cutoff_len,
                                    args.linearization)
    else:
        gold, test = _read_lines(args.gold), _read_lines(args.test)
        if len(gold) != len(test):
            raise ValueError(f"{args.gold}: {len(gold)} lines but {args.test}: {len(test)} "
                             f"lines; each line must hold one tree")
        result = evalb(gold, test, args.cutoff_len)
    print(summary_text(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
