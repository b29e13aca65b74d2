"""t2t's linearization of constituency trees and its inverse, which repairs any decode.

* `words_and_tags_from_wsj_tree` / `linearize`: t2t's linearization (§5.5 of the reference:
  POS tags appear once, phrases as `X ... /X`, the TOP label is dropped).
* `mask_pos_tags`: the same targets with the POS tags of words written `XX` (Vinyals et al.'s
  variant; punctuation keeps its tags), the targets of `parsing_english_ptb16k_xx`.
* `linearize_words`: the same brackets, written "(X" / ")X", with each word in place of its
  POS tag (the targets of `parsing_english_ptb_words`); `tree_from_bracketed_words` repairs
  such a decode.
* `tree_from_words_and_tags`: the inverse, which repairs any decoded sequence into a
  well-formed tree over exactly the input words; `is_well_formed` checks such a tree.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from t2t_lite.data_generators.treebank import ROOT_LABEL, Tree, TreeError

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
# decode's tags are realigned to the words (XX: the masked POS of `mask_pos_tags`).
_AMBIGUOUS_WORD_TAGS = {"'": frozenset({"POS", "''", DEFAULT_TAG})}

# The 45 Penn Treebank POS tags (the empty-element tag -NONE- is removed by preprocessing).
PTB_POS_TAGS = frozenset({
    "#", "$", "''", ",", "-LRB-", "-RRB-", ".", ":", "CC", "CD", "DT", "EX", "FW", "IN", "JJ",
    "JJR", "JJS", "LS", "MD", "NN", "NNP", "NNPS", "NNS", "PDT", "POS", "PRP", "PRP$", "RB",
    "RBR", "RBS", "RP", "SYM", "TO", "UH", "VB", "VBD", "VBG", "VBN", "VBP", "VBZ", "WDT", "WP",
    "WP$", "WRB", "``",
})
# Preterminal labels of the words in a repaired `linearize_words` decode, which has no POS
# tags: the punctuation's treebank tags (so evalb deletes the same words as from the gold tree),
# POS for "'" (the possessive: 58 of its 68 uses in the sample), XX for every other word.
WORD_FORM_TAGS = {**PTB_PUNCTUATION_TAGS, "'": "POS"}
# The POS tags that evalb deletes as punctuation (COLLINS.prm), which `mask_pos_tags` keeps.
PUNCTUATION_POS_TAGS = frozenset(PTB_PUNCTUATION_TAGS.values())
# The preterminal labels `tree_from_words_and_tags` reads by default: PTB's, and the
# placeholder of masked targets.
DECODE_POS_TAGS = PTB_POS_TAGS | {DEFAULT_TAG}
# The Penn Treebank phrase labels after function tags are stripped.
PTB_PHRASE_LABELS = frozenset({
    "ADJP", "ADVP", "CONJP", "FRAG", "INTJ", "LST", "NAC", "NP", "NX", "PP", "PRN", "PRT", "QP",
    "RRC", "S", "SBAR", "SBARQ", "SINV", "SQ", "UCP", "VP", "WHADJP", "WHADVP", "WHNP", "WHPP",
    "X",
})

_ATOM_RE = re.compile(r"[^\s()]+")


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


def linearize_words(tree: Tree) -> tuple[str, str]:
    """t2t's linearization with each word written where its POS tag was.

    The target then repeats the sentence inside its brackets, so a decoder reads in its own
    output which words it has placed (with tags or XX alone, a model trained on a few
    thousand trees loses count of the words: see README, "Parsing"). Tags are not predicted.
    Brackets are written "(X" and ")X" (Vinyals et al.'s notation), which no word can be
    mistaken for: the treebank escapes brackets in words, and words such as "X" (Title X) or
    "S" are phrase labels too.

    Args:
        tree: a preprocessed tree (TOP root).
    Returns:
        (words, target): "The cat sat ." and "(S (NP The cat )NP (VP sat )VP . )S".
    """
    tokens: list[str] = []
    for event, node in tree.walk():
        if event == "word":
            tokens.append(node)
        elif not node.is_preterminal:
            tokens.append(("(" if event == "open" else ")") + node.label)
    return " ".join(tree.leaves()), " ".join(tokens[1:-1])


def mask_pos_tags(tags: str, placeholder: str = DEFAULT_TAG,
                  keep: Iterable[str] = PUNCTUATION_POS_TAGS,
                  pos_tags: Iterable[str] = PTB_POS_TAGS) -> str:
    """Writes the POS tags of a linearized tree as `placeholder`, except the `keep` ones.

    Vinyals et al. (2015, arXiv:1412.7449) replace all POS tags by XX: the output then says
    only where the words go, not how they are tagged, and (bracketing F1 ignores tags) a model
    spends none of its capacity on tagging. The punctuation tags are kept: evalb deletes
    punctuation by its tag, and `tree_from_words_and_tags` never pairs a punctuation tag with
    another word, so the repaired trees stay aligned.

    Args:
        tags: a linearized tree, e.g. "S NP DT NN /NP VP VBD /VP . /S".
        placeholder: what the masked tags become.
        keep: the tags left as they are (evalb's punctuation tags by default).
        pos_tags: the tokens that are POS tags (PTB's 45).
    Returns:
        The masked text, e.g. "S NP XX XX /NP VP XX /VP . /S".
    """
    keep, pos_tags = frozenset(keep), frozenset(pos_tags)
    return " ".join(placeholder if tok in pos_tags and tok not in keep else tok
                    for tok in tags.split())


def _monotone_alignment(m: int, n: int, pair_cost) -> tuple[list, list]:
    """Minimum-cost monotone alignment of m output items to n words.

    Costs: dropping an item 1, leaving a word unpaired 1, pairing item i with word j
    `pair_cost(i, j)` (0 or 1; None: never). Among optimal alignments, the one that pairs items
    and words as early as possible (unpaired words and dropped items as late as possible) is
    chosen, as a left-to-right reading would.

    Args:
        m: number of output items (POS tags, or words copied by the decode).
        n: number of input words.
        pair_cost: (i, j) -> the cost of item i taking word j, or None if it may not.
    Returns:
        (match, gaps): match[i] = word index of item i, or None if item i is dropped;
        gaps = [(j, i)] for each unpaired word j, which goes before item i (i = m: after all).
    """
    big = m + n + 1
    cost = [[0] * (n + 1) for _ in range(m + 1)]
    for i in range(m + 1):
        row, up = cost[i], cost[i - 1] if i else None
        for j in range(n + 1):
            if i == 0 and j == 0:
                continue
            best = big
            if i and j:
                pair = pair_cost(i - 1, j - 1)
                if pair is not None:
                    best = up[j - 1] + pair
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


def _align_tags_to_words(tags: Sequence[str], words: Sequence[str],
                         punctuation_tags: Mapping[str, str]) -> tuple[list, list]:
    """Monotone alignment of POS-tag tokens to words when their counts differ.

    `_monotone_alignment` where a tag may take a word (at no cost) if they agree on being
    punctuation (a punctuation tag with a punctuation word, any other tag with any other word;
    the ambiguous "'" with POS, '' or XX).

    Args:
        tags: the m POS-tag tokens, in order.
        words: the n words.
        punctuation_tags: punctuation word -> its tag; its values are the punctuation tags.
    Returns:
        (match, gaps): see `_monotone_alignment`.
    """
    punct_tags = frozenset(punctuation_tags.values())
    tag_is_punct = [t in punct_tags for t in tags]
    word_is_punct = [w in punctuation_tags for w in words]

    def compatible(i: int, j: int) -> bool:
        if words[j] in _AMBIGUOUS_WORD_TAGS:
            return tags[i] in _AMBIGUOUS_WORD_TAGS[words[j]]
        return tag_is_punct[i] == word_is_punct[j]

    return _monotone_alignment(len(tags), len(words),
                               lambda i, j: 0 if compatible(i, j) else None)


def _checked_words(words: str | Sequence[str], caller: str) -> list[str]:
    """The input words as a list; ValueError for none, or one no bracketed tree can carry."""
    words = words.split() if isinstance(words, str) else list(words)
    if not words:
        raise ValueError(f"{caller}: the input sentence has no word")
    for i, w in enumerate(words):
        if not w or "(" in w or ")" in w or w != w.strip() or len(w.split()) != 1:
            raise ValueError(f"{caller}: word {i} {w!r} cannot appear in a "
                             f"bracketed tree; escape brackets as -LRB- / -RRB-")
    return words


def _build_tree(words: Sequence[str], tokens: Sequence[tuple[str, str | None]],
                match: Sequence, gaps: Sequence[tuple[int, int]], word_label) -> Tree:
    """The repaired tree from read tokens and their alignment to the words.

    Args:
        words: the input words.
        tokens: ("open", label) / ("close", label) / ("pos", preterminal label or None), in
            order.
        match: per "pos" token, the word it takes, or None (dropped).
        gaps: [(j, i)]: word j, which no token took, goes before the i-th "pos" token.
        word_label: word -> preterminal label of a word that no token took, or that a "pos"
            token without a label (None) took.
    Returns:
        A Tree rooted at TOP whose leaves are exactly `words` (see `tree_from_words_and_tags`).
    """
    pos_at = [k for k, (kind, _) in enumerate(tokens) if kind == "pos"]
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
        return [Tree(word_label(words[j]), [words[j]]) for j in indices]

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
            j = match[n_tags]
            if j is not None:
                stack[-1].children.append(
                    Tree(word_label(words[j]) if label is None else label, [words[j]]))
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


def tree_from_words_and_tags(
    words: str | Sequence[str],
    tags: str,
    pos_tags: Iterable[str] = DECODE_POS_TAGS,
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
    word, as the model says, unless that gives a punctuation word (a key of
    `punctuation_tags`) another tag: the decode then missed a punctuation tag and has an extra
    tag elsewhere, and pairing them in order would keep a word that evalb deletes from the
    gold tree (the treebank never tags those words otherwise). In that case, and when there
    are too few or too many tags, tags and words are aligned by `_align_tags_to_words`, which
    never pairs a punctuation tag with a non-punctuation word or the reverse: unpaired tags
    are dropped, and each unpaired word becomes a preterminal tagged by `punctuation_tags`
    (punctuation words, so evalb deletes them as in the gold tree) or `default_tag`, placed
    between its neighbours: before the first phrase label or POS tag that follows the
    previous word's tag (so after that word's closers), or just before the first tag for a
    leading word. Unpaired words after the last tag go to the
    innermost constituent still open at the end, or if none is, to the last phrase under
    TOP, or else to TOP itself. Word order is always kept.

    At the end, constituents still open are closed; a constituent that ends with no child
    (e.g. "NP /NP") is removed. A well-formed sequence is rebuilt exactly.

    Args:
        words: the input sentence, a string (split on whitespace) or a list of words.
        tags: the decoded target text, e.g. "S NP DT NN /NP VP VBD /VP . /S".
        pos_tags: the POS tag inventory (PTB's 45 and the placeholder XX by default).
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
    words = _checked_words(words, "tree_from_words_and_tags")
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
    punct_tags = frozenset(punctuation_tags.values())
    if len(pos_at) == len(words) and not any(
            words[j] in punctuation_tags and tokens[k][1] not in punct_tags
            for j, k in enumerate(pos_at)):
        match: list = list(range(len(words)))
        gaps: list[tuple[int, int]] = []
    else:
        match, gaps = _align_tags_to_words([tokens[k][1] for k in pos_at], words,
                                           punctuation_tags)
    return _build_tree(words, tokens, match, gaps,
                       lambda word: punctuation_tags.get(word, default_tag))


def tree_from_bracketed_words(
    words: str | Sequence[str],
    decoded: str,
    phrase_labels: Iterable[str] = PTB_PHRASE_LABELS,
    word_tags: Mapping[str, str] = WORD_FORM_TAGS,
    default_tag: str = DEFAULT_TAG,
) -> Tree:
    """Repairs a decoded `linearize_words` sequence into a tree over exactly `words`.

    Tokens: ")X" closes, "(X" with X in `phrase_labels` opens, any other token holding a
    bracket is dropped (unknown labels, debris), and the rest are words the decoder wrote.
    Those are aligned to the input words (`_monotone_alignment`: an identical word pairs at no
    cost, a different one at cost 1, as a miscopied rare word standing for the input word at
    its place, but punctuation only with punctuation; dropping a written word or skipping an
    input word costs 1; the earliest pairing among the cheapest): each paired word becomes a
    preterminal where the decoder wrote it, the decoder's other words are dropped, and input
    words it skipped are placed as `tree_from_words_and_tags` places untagged words. Brackets
    are then repaired as there (missing, extra or wrong closers, empty constituents).
    Preterminal labels come from the input word's form (`word_tags`, else `default_tag`; a
    miscopied word takes its input word's), since the decode holds no tags. A well-formed
    sequence is rebuilt exactly up to those labels.

    Args:
        words: the input sentence, a string (split on whitespace) or a list of words.
        decoded: the decoded target text, e.g. "(S (NP The cat )NP (VP sat )VP . )S".
        phrase_labels: the phrase label inventory (PTB's by default).
        word_tags: word -> its preterminal label (punctuation and "'" by default).
        default_tag: the preterminal label of the other words.
    Returns:
        A Tree rooted at TOP whose leaves are exactly `words`, in order.
    Raises:
        ValueError: `words` is empty, or a word holds "(" or ")".
    """
    words = _checked_words(words, "tree_from_bracketed_words")
    phrase_labels = frozenset(phrase_labels)
    tokens: list[tuple[str, str | None]] = []
    written: list[str] = []
    for tok in decoded.split():
        if tok.startswith(")") and len(tok) > 1:
            tokens.append(("close", tok[1:]))
        elif tok.startswith("(") and tok[1:] in phrase_labels:
            tokens.append(("open", tok[1:]))
        elif "(" not in tok and ")" not in tok:
            tokens.append(("pos", None))  # Labeled from the input word it takes.
            written.append(tok)

    def pair_cost(i: int, j: int) -> int | None:
        if written[i] == words[j]:
            return 0
        # A miscopied word (a rare word misspelt) stands in for the input word at its place,
        # punctuation only for punctuation, so that evalb's deletions stay aligned.
        return 1 if (written[i] in word_tags) == (words[j] in word_tags) else None

    def tag_of(word: str) -> str:
        return word_tags.get(word, default_tag)

    match, gaps = _monotone_alignment(len(written), len(words), pair_cost)
    return _build_tree(words, tokens, match, gaps, tag_of)


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
