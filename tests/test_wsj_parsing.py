"""WSJ trees: .mrg reading, preprocessing, t2t's linearization, its repairing inverse, tmp_dir."""
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from t2t_lite.data_generators import tree_linearization, treebank
from t2t_lite.problems import wsj_parsing as wsj

SAMPLE_TREES = 3669  # wsj/00 (1921 trees) + wsj/01 (1748 trees), per data/README.md.


@pytest.fixture(scope="module")
def raw_sample(ptb_sample_dir):
    return treebank.read_wsj_sections(ptb_sample_dir, "00-01", preprocess=False)


@pytest.fixture(scope="module")
def sample(raw_sample):
    return [treebank.preprocess_tree(t) for t in raw_sample]


def _mrg(tmp_path, section, name, text):
    folder = tmp_path / "wsj" / section
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


# --- Linearization -------------------------------------------------------------------------


def test_reference_example():
    # T2T_REFERENCE.md §5.5.
    words, tags = tree_linearization.words_and_tags_from_wsj_tree(
        "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)))")
    assert words == "The cat sat ."
    assert tags == "S NP DT NN /NP VP VBD /VP . /S"


def test_first_sample_tree(sample):
    tree = sample[0]
    assert tree.to_string() == (
        "(TOP (S (NP (NP (NNP Pierre) (NNP Vinken)) (, ,) (ADJP (NP (CD 61) (NNS years)) "
        "(JJ old)) (, ,)) (VP (MD will) (VP (VB join) (NP (DT the) (NN board)) (PP (IN as) "
        "(NP (DT a) (JJ nonexecutive) (NN director))) (NP (NNP Nov.) (CD 29)))) (. .)))")
    words, tags = tree_linearization.linearize(tree)
    assert words == ("Pierre Vinken , 61 years old , will join the board as a nonexecutive "
                     "director Nov. 29 .")
    assert tags == ("S NP NP NNP NNP /NP , ADJP NP CD NNS /NP JJ /ADJP , /NP VP MD VP VB NP DT "
                    "NN /NP PP IN NP DT JJ NN /NP /PP NP NNP CD /NP /VP /VP . /S")


@pytest.mark.parametrize("bad", [
    "(TOP (S (NN a) ) )", "(TOP (NN a)) b)", "a)", "(TOP x))))", "(TOP (S (NN a))",
    "(TOP (NN a)) (TOP (NN b))",
])
def test_linearization_rejects_malformed(bad):
    with pytest.raises(treebank.TreeError):
        tree_linearization.words_and_tags_from_wsj_tree(bad)


def test_round_trip_every_sample_tree(raw_sample, sample):
    assert len(sample) == SAMPLE_TREES
    for raw, tree in zip(raw_sample, sample):
        words, tags = tree_linearization.linearize(tree)
        back = tree_linearization.tree_from_words_and_tags(words, tags)
        assert back == tree, tree.to_string()
        assert tree_linearization.is_well_formed(back, words.split())
        # Preprocessing keeps every real word, in order.
        assert tree.leaves() == [w for w, tag in raw.pos() if tag != "-NONE-"]


def test_mask_pos_tags():
    _, tags = tree_linearization.words_and_tags_from_wsj_tree(
        "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat) (, ,) (`` ``) (NP (PRP it)) (. .))))")
    assert tree_linearization.mask_pos_tags(tags) == "S NP XX XX /NP VP XX , `` NP XX /NP . /VP /S"
    # Phrase labels that are also words' text, and unknown tokens, are left alone.
    assert tree_linearization.mask_pos_tags("NP X NNP : /NP", placeholder="T") == "NP X T : /NP"
    assert tree_linearization.mask_pos_tags("S DT '' /S", keep=()) == "S XX XX /S"


def test_masked_round_trip_scores_every_sample_tree(sample):
    # The masked targets keep the brackets and one tag per word: repaired, every sample tree
    # has its gold brackets back (F1 100 with evalb's rules) and no sentence is an evalb
    # error, so the punctuation tags line up with the gold ones (possessive "'" included).
    from t2t_lite.evaluation import parsing_eval

    repaired = []
    for tree in sample:
        words, tags = tree_linearization.linearize(tree)
        masked = tree_linearization.mask_pos_tags(tags)
        assert masked.split().count("XX") + sum(
            t in tree_linearization.PUNCTUATION_POS_TAGS for t in masked.split()) == \
            len(words.split())
        back = tree_linearization.tree_from_words_and_tags(words, masked)
        assert tree_linearization.is_well_formed(back, words.split())
        repaired.append(back)
    result = parsing_eval.evalb(sample, repaired)
    assert result["num_valid_sentences"] == len(sample)
    assert result["f1"] == result["exact_match"] == 100.0
    # evalb compares the tags of non-punctuation words only: all XX.
    assert result["tagging_accuracy"] == 0.0


def test_linearize_words(sample):
    tree = treebank.parse_tree("(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)))")
    assert tree_linearization.linearize_words(tree) == (
        "The cat sat .", "(S (NP The cat )NP (VP sat )VP . )S")
    # Every sample tree: t2t's brackets, with the i-th word where the i-th POS tag was.
    for tree in sample:
        words, tags = tree_linearization.linearize(tree)
        same_words, target = tree_linearization.linearize_words(tree)
        assert same_words == words
        pos = iter(tag for _, tag in tree.pos())
        assert " ".join(tok[1:] if tok[0] == "(" else "/" + tok[1:] if tok[0] == ")"
                        else next(pos) for tok in target.split()) == tags, target


def test_bracketed_words_round_trip_scores_every_sample_tree(sample):
    # Repaired from their own targets, the sample trees get their brackets back; the
    # preterminals are read from the words, so evalb deletes the same punctuation, except
    # where the treebank tags "'" as '' (the repair says POS, the possessive) or a word as
    # "," (tree 452): evalb errors there, and nowhere else.
    from t2t_lite.evaluation import parsing_eval

    repaired = []
    for tree in sample:
        words, target = tree_linearization.linearize_words(tree)
        back = tree_linearization.tree_from_bracketed_words(words, target)
        assert tree_linearization.is_well_formed(back, words.split())
        assert [t for _, t in back.pos()] == [
            tree_linearization.WORD_FORM_TAGS.get(w, "XX") for w in tree.leaves()]
        repaired.append(back)
    result = parsing_eval.evalb(sample, repaired)
    errors = {s.index for s in result["sentences"] if s.status}
    odd = {i for i, t in enumerate(sample)
           if ("'", "''") in t.pos() or any(w not in tree_linearization.WORD_FORM_TAGS
                                            and tag in tree_linearization.PUNCTUATION_POS_TAGS
                                            for w, tag in t.pos())}
    assert 452 in odd and errors == odd and len(odd) <= 12
    assert result["f1"] == result["exact_match"] == 100.0


def test_sample_labels_are_known(sample):
    labels = {n.label for t in sample for e, n in t.walk() if e == "open"}
    pos = {n.label for t in sample for e, n in t.walk() if e == "open" and n.is_preterminal}
    assert pos <= tree_linearization.PTB_POS_TAGS
    assert labels - pos == tree_linearization.PTB_PHRASE_LABELS | {"TOP"}


# --- Preprocessing -------------------------------------------------------------------------


def test_preprocess_strips_tags_and_empty_elements():
    raw = treebank.parse_tree(
        "( (S (NP-SBJ-1 (-NONE- *-2)) (S-TPC=2 (NP-SBJ (PRP He)) (VP (VBD left))) "
        "(PRN (-LRB- -LRB-) (ADVP|PRT (RB soon)) (-RRB- -RRB-)) "
        "(SBAR (-NONE- 0) (S (NP (-NONE- *T*-1)))) (. .)) )")
    assert treebank.preprocess_tree(raw).to_string() == (
        "(TOP (S (S (NP (PRP He)) (VP (VBD left))) (PRN (-LRB- -LRB-) (ADVP (RB soon)) "
        "(-RRB- -RRB-)) (. .)))")


def test_preprocess_root_handling():
    assert treebank.preprocess_tree(treebank.parse_tree("(S (NN x))")).to_string() == "(TOP (S (NN x)))"
    assert treebank.preprocess_tree(treebank.parse_tree("(ROOT (S (NN x)))")).to_string() == \
        "(TOP (S (NN x)))"
    with pytest.raises(treebank.TreeError, match="no word"):
        treebank.preprocess_tree(treebank.parse_tree("( (S (-NONE- *)))"), "f.mrg: tree 3")


@pytest.mark.parametrize("label,bare", [
    ("NP-SBJ-1", "NP"), ("PP-LOC=2", "PP"), ("NP=3", "NP"), ("ADVP-LOC-PRD-TPC-1", "ADVP"),
    ("-NONE-", "-NONE-"), ("-LRB-", "-LRB-"), ("PRT|ADVP", "PRT"), ("PRP$", "PRP$"), ("S", "S"),
])
def test_strip_function_tags(label, bare):
    assert treebank.strip_function_tags(label) == bare


def test_unary_chains_are_kept():
    raw = treebank.parse_tree("( (NP (NP-SBJ (NN dogs)) (SBAR (-NONE- 0))) )")
    assert treebank.preprocess_tree(raw).to_string() == "(TOP (NP (NP (NN dogs))))"


# --- Repair --------------------------------------------------------------------------------


@pytest.mark.parametrize("words,decoded,expected", [
    ("The cat sat .", "(S (NP The cat )NP (VP sat )VP . )S",
     "(TOP (S (NP (XX The) (XX cat)) (VP (XX sat)) (. .)))"),
    # Words that are phrase labels too are words here.
    ("Title X funds", "(NP Title X funds )NP", "(TOP (NP (XX Title) (XX X) (XX funds)))"),
    # A skipped word goes after its left neighbour's closers; a repeated one is dropped.
    ("The cat sat .", "(S (NP The )NP (VP cat sat sat )VP )S",
     "(TOP (S (NP (XX The)) (VP (XX cat) (XX sat)) (. .)))"),
    # A miscopied word stands for the input word at its place (here "dog" for "cat").
    ("The cat sat .", "(S (NP The dog )NP (VP sat )VP",
     "(TOP (S (NP (XX The) (XX cat)) (VP (XX sat)) (. .)))"),
    # ... but punctuation only for punctuation: "," for "." and not for "sat".
    ("The cat sat .", "(S (NP The cat )NP , )S",
     "(TOP (S (NP (XX The) (XX cat)) (XX sat) (. .)))"),
    # Nothing usable: the words under TOP; "'" is tagged as the possessive.
    ("The boys ' toys", "", "(TOP (XX The) (XX boys) (POS ') (XX toys))"),
    # Unknown labels and bracket debris are dropped; a wrong closer closes the innermost.
    ("a b", "(NP a (FOO ( b )) (TOP )VP", "(TOP (NP (XX a) (XX b)))"),
    # Too many words: the extra ones are dropped; missing closers are added.
    ("a b", "(S (NP a c b d e", "(TOP (S (NP (XX a) (XX b))))"),
])
def test_bracketed_word_repairs(words, decoded, expected):
    tree = tree_linearization.tree_from_bracketed_words(words, decoded)
    assert tree.to_string() == expected
    assert tree_linearization.is_well_formed(tree, words.split())


@settings(max_examples=200, deadline=None)
@given(words=st.lists(st.sampled_from(["a", "b", "-LRB-", ",", ".", "'", "S"]), min_size=1,
                      max_size=10),
       tokens=st.lists(st.sampled_from(["a", "b", "c", ",", ".", "'", "S", "(S", "(NP", ")NP",
                                        ")S", "(VP", ")VP", ")", "(", "TOP"]), max_size=30))
def test_arbitrary_word_sequences_give_well_formed_trees(words, tokens):
    tree = tree_linearization.tree_from_bracketed_words(words, " ".join(tokens))
    assert tree_linearization.is_well_formed(tree, words)


@pytest.mark.parametrize("words,tags,expected", [
    # Well-formed.
    ("The cat sat", "S NP DT NN /NP VP VBD /VP /S",
     "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat))))"),
    # Missing closers: NP never closed, VP opens inside it; all closed at the end.
    ("The cat sat", "S NP DT NN VP VBD",
     "(TOP (S (NP (DT The) (NN cat) (VP (VBD sat)))))"),
    # A closer of an outer label closes the inner constituents too.
    ("The cat", "S NP DT NN /S", "(TOP (S (NP (DT The) (NN cat))))"),
    # Extra closers are dropped once only TOP is open.
    ("The cat sat", "S NP DT NN /NP /NP /S /S VP VBD /VP /VP",
     "(TOP (S (NP (DT The) (NN cat))) (VP (VBD sat)))"),
    # Wrong closer label (VP not open): closes the innermost constituent (NP).
    ("The cat sat", "S NP DT NN /VP VP VBD /VP /S",
     "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat))))"),
    # Too few POS tags, all closed: the rest goes to the last phrase under TOP, tagged XX
    # (punctuation gets its treebank tag).
    ("The cat sat .", "S NP DT NN /NP VP /VP /S",
     "(TOP (S (NP (DT The) (NN cat)) (XX sat) (. .)))"),
    ("a , b -- c ...", "", "(TOP (XX a) (, ,) (XX b) (: --) (XX c) (: ...))"),
    # Too few POS tags, still open: the rest goes to the innermost open constituent.
    ("The cat", "S NP DT", "(TOP (S (NP (DT The) (XX cat))))"),
    # Masked targets (`mask_pos_tags`): XX is a preterminal like any POS tag.
    ("The cat sat .", "S NP XX XX /NP VP XX /VP . /S",
     "(TOP (S (NP (XX The) (XX cat)) (VP (XX sat)) (. .)))"),
    # ... and, too few of them, never pairs with punctuation; the possessive "'" takes XX.
    ("The cat sat .", "S NP XX /NP VP XX /VP . /S",
     "(TOP (S (NP (XX The)) (VP (XX cat)) (XX sat) (. .)))"),
    ("The boys ' toys", "NP NP XX XX XX /NP XX XX /NP",
     "(TOP (NP (NP (XX The) (XX boys) (XX ')) (XX toys)))"),
    # As many tags as words, but a punctuation word would get a word's tag (the "," tag is
    # missing, a word's tag is extra): aligned instead, so evalb deletes the "," as in gold.
    ("a , b .", "S XX XX XX . /S", "(TOP (S (XX a) (, ,) (XX b) (. .)))"),
    ("a , b .", "S NP DT NN /NP VB . /S", "(TOP (S (NP (DT a) (, ,) (NN b)) (. .)))"),
    # ... while a word given a punctuation tag keeps it (the treebank does that: "Wa" ",").
    ("Wa b", "S , NN /S", "(TOP (S (, Wa) (NN b)))"),
    # Too many POS tags: the extra ones are dropped.
    ("The cat", "S NP DT NN NN JJ /NP /S", "(TOP (S (NP (DT The) (NN cat))))"),
    # Empty output.
    ("The cat", "", "(TOP (XX The) (XX cat))"),
    # Only closers.
    ("The cat", "/S /NP", "(TOP (XX The) (XX cat))"),
    # Unknown tokens ("FOO", "TOP", "/", lower-case words) are dropped.
    ("The cat", "TOP S NP DT FOO / cat NN /NP /S", "(TOP (S (NP (DT The) (NN cat))))"),
    # Empty constituents, nested ones too, are removed.
    ("sat", "S NP /NP VP ADJP /ADJP VBD /VP /S", "(TOP (S (VP (VBD sat))))"),
    ("sat", "S NP ADJP /ADJP /NP VBD /S", "(TOP (S (VBD sat)))"),
    # A trailing open phrase with nothing in it.
    ("sat", "VBD NP", "(TOP (VBD sat))"),
    # POS tags only.
    ("The cat", "DT NN", "(TOP (DT The) (NN cat))"),
    # One tag missing: tags pair with words as early as possible; the untagged word goes
    # between its neighbours, and "." still pairs with the "." tag.
    ("The cat sat .", "S NP DT /NP VP VBD /VP . /S",
     "(TOP (S (NP (DT The)) (VP (VBD cat)) (XX sat) (. .)))"),
    # An untagged word is attached after the previous word's closers (here at S level).
    ("The cat , sat", "S NP DT NN /NP VP VBD /VP /S",
     "(TOP (S (NP (DT The) (NN cat)) (, ,) (VP (VBD sat))))"),
    # An untagged first word goes just before the first tag.
    ("`` Go", "S VP VB /VP /S", "(TOP (S (VP (`` ``) (VB Go))))"),
    # Too many tags: a punctuation tag never takes a word that is not punctuation.
    ("The cat sat", "S NP DT , NN /NP VP VBD /VP /S",
     "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat))))"),
    ("The cat .", "S NP DT JJ NN /NP . /S", "(TOP (S (NP (DT The) (JJ cat)) (. .)))"),
    # As many tags as words: each tag takes its word, as the model says, even "," on "b".
    ("a b", "S NN , /S", "(TOP (S (NN a) (, b)))"),
])
def test_repairs(words, tags, expected):
    tree = tree_linearization.tree_from_words_and_tags(words, tags)
    assert tree.to_string() == expected
    assert tree_linearization.is_well_formed(tree, words.split())


def test_repair_rejects_unusable_words():
    with pytest.raises(ValueError, match="no word"):
        tree_linearization.tree_from_words_and_tags("  ", "S /S")
    with pytest.raises(ValueError, match="-LRB-"):
        tree_linearization.tree_from_words_and_tags(["a", "(", "b"], "S /S")


def test_repair_deep_degenerate_output():
    # 5000 nested openers (a runaway decode) must not hit Python's recursion limit.
    tree = tree_linearization.tree_from_words_and_tags("a b", "NP " * 5000 + "NN")
    assert tree_linearization.is_well_formed(tree, ["a", "b"])
    assert tree.to_string().count("(NP") == 5000


_CORRUPT_TOKENS = sorted(tree_linearization.PTB_POS_TAGS | tree_linearization.PTB_PHRASE_LABELS) + [
    "/" + x for x in sorted(tree_linearization.PTB_PHRASE_LABELS)] + ["/NN", "/", "TOP", "/TOP", "FOO", "s_"]


def _corrupt(tokens, rng):
    tokens = list(tokens)
    for _ in range(rng.randint(1, 6)):
        op = rng.choice(["drop", "insert", "swap", "dup", "drop_closers", "truncate"])
        i = rng.randrange(len(tokens) + 1)
        if op == "drop" and tokens:
            del tokens[min(i, len(tokens) - 1)]
        elif op == "insert":
            tokens.insert(i, rng.choice(_CORRUPT_TOKENS))
        elif op == "swap" and len(tokens) > 1:
            j = min(i, len(tokens) - 2)
            tokens[j], tokens[j + 1] = tokens[j + 1], tokens[j]
        elif op == "dup" and tokens:
            j = min(i, len(tokens) - 1)
            tokens.insert(j, tokens[j])
        elif op == "drop_closers":
            tokens = [t for t in tokens if not t.startswith("/") or rng.random() < 0.5]
        elif op == "truncate":
            tokens = tokens[:i]
    return tokens


def test_random_corruptions_give_well_formed_trees(sample):
    rng = random.Random(1234)
    for _ in range(3000):
        words, tags = tree_linearization.linearize(rng.choice(sample))
        corrupted = " ".join(_corrupt(tags.split(), rng))
        tree = tree_linearization.tree_from_words_and_tags(words, corrupted)
        assert tree_linearization.is_well_formed(tree, words.split()), (words, corrupted)
        assert treebank.parse_tree(tree.to_string()) == tree


@pytest.mark.slow
def test_tag_count_errors_never_break_evalb(sample):
    # Decodes with POS tags dropped, or added (so the tag count differs from the word count)
    # and brackets corrupted: every repaired tree is scored by evalb (no "Length unmatch" /
    # "Words unmatch"), except tree 452, whose gold tree tags the word "Wa" as ",", and maybe
    # trees with the word "'", which the treebank tags as punctuation ('') or not (POS).
    from t2t_lite.evaluation import parsing_eval

    rng = random.Random(7)
    inputs, decodes = [], []
    for tree in sample:
        words, tags = tree_linearization.linearize(tree)
        tokens = tags.split()
        drop = rng.random() < 0.5
        for _ in range(rng.randint(1, 3)):
            pos = [k for k, t in enumerate(tokens) if t in tree_linearization.PTB_POS_TAGS]
            if drop and len(pos) > 1:
                del tokens[rng.choice(pos)]
            elif not drop:
                tokens.insert(rng.randrange(len(tokens) + 1), rng.choice(sorted(tree_linearization.PTB_POS_TAGS)))
            k = rng.randrange(len(tokens))
            if tokens[k].startswith("/") or tokens[k] in tree_linearization.PTB_PHRASE_LABELS:
                del tokens[k]
        inputs.append(words)
        decodes.append(" ".join(tokens))
    result = parsing_eval.evalb_decodes(inputs, decodes, sample)
    errors = {s.index for s in result["sentences"] if s.status}
    assert 452 in errors
    assert {i for i in errors if "'" not in sample[i].leaves()} == {452}
    assert len(errors) <= 3
    assert 0 < result["f1"] < 100


@settings(max_examples=300, deadline=None)
@given(words=st.lists(st.sampled_from(["a", "b", "-LRB-", ",", "."]), min_size=1, max_size=12),
       tokens=st.lists(st.sampled_from(_CORRUPT_TOKENS), max_size=40))
def test_arbitrary_sequences_give_well_formed_trees(words, tokens):
    tree = tree_linearization.tree_from_words_and_tags(words, " ".join(tokens))
    assert tree_linearization.is_well_formed(tree, words)
    assert tree_linearization.words_and_tags_from_wsj_tree(tree.to_string())[0] == " ".join(words)


# --- Reading and errors --------------------------------------------------------------------


def test_parse_sections():
    assert treebank.parse_sections("02-21") == [f"{i:02d}" for i in range(2, 22)]
    assert treebank.parse_sections("22") == ["22"]
    assert treebank.parse_sections("01, 00,01") == ["00", "01"]
    assert treebank.parse_sections(["2-3", "24"]) == ["02", "03", "24"]
    for bad in ["", "2a", "21-02", "1-", "100"]:
        with pytest.raises(ValueError, match="bad WSJ section spec"):
            treebank.parse_sections(bad)


def test_parse_file_ranges():
    assert treebank.parse_sections("0160-0179") == [f"{i:04d}" for i in range(160, 180)]
    assert treebank.parse_sections("0099-0101") == ["0099", "0100", "0101"]
    # Mixed kinds across items; sections sort before their own files.
    assert treebank.parse_sections("0101, 01,0001") == ["0001", "01", "0101"]
    # Two-digit specs are unchanged by the file syntax.
    assert treebank.parse_sections("2-3") == ["02", "03"]
    for bad in ["01-0159", "0001-01", "001-0159", "00001", "0179-0160", "0001-", "0001,"]:
        with pytest.raises(ValueError, match="bad WSJ section spec"):
            treebank.parse_sections(bad)
    with pytest.raises(ValueError, match=r"'01-0159' is not a section number .* file number"):
        treebank.parse_sections("01-0159")


def test_sample_file_ranges(ptb_sample_dir):
    train = treebank.mrg_files(ptb_sample_dir, "0001-0159")
    dev = treebank.mrg_files(ptb_sample_dir, "0160-0179")
    assert [p.name for p in train] == [f"wsj_{i:04d}.mrg" for i in range(1, 160)]
    assert [p.name for p in dev] == [f"wsj_{i:04d}.mrg" for i in range(160, 180)]
    assert train[98].parent.name == "00" and train[99].parent.name == "01"
    assert train + dev == treebank.mrg_files(ptb_sample_dir, "00-01")
    # A file named twice (as a file and by its section) is read once, in order.
    assert treebank.mrg_files(ptb_sample_dir, "0005,00,0003") == train[:99]
    # A range skips absent numbers (wsj_0000 does not exist) but must find one file.
    assert treebank.mrg_files(ptb_sample_dir, "0000-0002") == train[:2]
    with pytest.raises(FileNotFoundError, match=r"WSJ files 0180-0199: no wsj_NNNN\.mrg"):
        treebank.mrg_files(ptb_sample_dir, "0160-0179,0180-0199")
    with pytest.raises(FileNotFoundError, match=r"WSJ file 0000 not found: .*wsj_0000\.mrg"):
        treebank.mrg_files(ptb_sample_dir, "0000")
    trees = treebank.read_wsj_sections(ptb_sample_dir, "0160-0179")
    assert trees == treebank.read_wsj_sections(ptb_sample_dir, "01")[-len(trees):]


def test_sample_sections(ptb_sample_dir):
    files = treebank.mrg_files(ptb_sample_dir, "00-01")
    assert len(files) == 179
    assert files[0].name == "wsj_0001.mrg" and files[-1].name == "wsj_0179.mrg"
    assert len(treebank.mrg_files(ptb_sample_dir, "00")) == 99
    # The wsj folder itself is accepted too.
    assert treebank.mrg_files(ptb_sample_dir / "wsj", "01") == files[99:]
    assert len(treebank.read_mrg_file(files[0])) == 2


def test_unbalanced_tree_names_file_and_line(tmp_path):
    text = ("\n( (S (NP (DT a) (NN b))\n    (VP (VBD c)) )\n"  # Missing one ")" (tree at 2).
            "\n( (S (NP (PRP d)) (VP (VBD e))) )\n")
    path = _mrg(tmp_path, "00", "wsj_0001.mrg", text)
    with pytest.raises(treebank.TreeError, match=r"wsj_0001\.mrg:2: unbalanced.*line 5"):
        treebank.read_mrg_file(path)
    path.write_text("( (S (NN a)) )\n( (S (NN b)) ))\n")
    with pytest.raises(treebank.TreeError, match=r"wsj_0001\.mrg:2: unbalanced.*closes nothing"):
        treebank.read_mrg_file(path)
    path.write_text("( (S (NN a)) )\n\n( (S (NN b)\n")
    with pytest.raises(treebank.TreeError, match=r"wsj_0001\.mrg:3: unbalanced.*end of the input"):
        treebank.read_wsj_sections(tmp_path, "00")


@pytest.mark.parametrize("text,message", [
    ("( (S (NN a)) )\nstray\n", r":2: text 'stray' outside"),
    ("( (S (NN a b)) )\n", r":1: .*\(NN' .*second word"),
    ("( (S (NN a) b) )\n", r":1: .*\(S' .*word among subtrees"),
    ("( (S (NN a (DT b))) )\n", r":1: the POS tag 'NN'"),
    ("( (S (NP ) (NN a)) )\n", r":1: empty constituent '\(NP\)'"),
    ("\n\n", r":1: no tree in this file"),
])
def test_ill_formed_mrg(tmp_path, text, message):
    path = _mrg(tmp_path, "00", "wsj_0002.mrg", text)
    with pytest.raises(treebank.TreeError, match=r"wsj_0002\.mrg" + message):
        treebank.read_mrg_file(path)


def test_missing_directory_and_sections(tmp_path, ptb_sample_dir):
    with pytest.raises(FileNotFoundError, match="nowhere.*does not exist"):
        treebank.read_wsj_sections(tmp_path / "nowhere", "00")
    with pytest.raises(FileNotFoundError, match=r"section 22 not found.*present in .*: 00, 01"):
        treebank.read_wsj_sections(ptb_sample_dir, "00,22")
    (tmp_path / "wsj" / "05").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match=r"section 05: no \.mrg file"):
        treebank.read_wsj_sections(tmp_path, "05")


def test_read_trees_file_errors(tmp_path):
    path = tmp_path / "wsjEval.trees"
    path.write_text("(TOP (S (NN a)))\n\n(TOP (S (NN b))\n")
    with pytest.raises(treebank.TreeError, match=r"wsjEval\.trees:3: unbalanced"):
        treebank.read_trees_file(path)


# --- tmp_dir layout ------------------------------------------------------------------------


def test_write_wsj_tmp_dir(ptb_sample_dir, tmp_path, sample):
    paths = wsj.write_wsj_tmp_dir(ptb_sample_dir, tmp_path / "tmp", "00", "01")
    assert sorted(p.name for p in (tmp_path / "tmp").iterdir()) == sorted(
        ["wsjTrain.trees", "wsjEval.trees", "wsj.train.text.txt", "wsj.train.tags.txt"])
    lines = paths["wsjTrain.trees"].read_text().splitlines()
    assert lines == [t.to_string() for t in sample[:1921]]  # Section 00 has 1921 trees.
    assert treebank.read_trees_file(paths["wsjEval.trees"]) == sample[1921:]
    texts = paths["wsj.train.text.txt"].read_text().splitlines()
    tags = paths["wsj.train.tags.txt"].read_text().splitlines()
    assert len(texts) == len(tags) == 1921
    for line, text, tag in zip(lines, texts, tags):
        assert tree_linearization.words_and_tags_from_wsj_tree(line) == (text, tag)


# --- Problems (datagen on the sample: section 00 trains, section 01 is dev) ---------------


def _read_shards(data_dir, pattern):
    import tensorflow as tf

    examples = []
    files = sorted(data_dir.glob(pattern))
    for path in files:
        for record in tf.data.TFRecordDataset(str(path)).as_numpy_iterator():
            feature = tf.train.Example.FromString(record).features.feature
            examples.append((list(feature["inputs"].int64_list.value),
                             list(feature["targets"].int64_list.value)))
    return files, examples


def _decoded(examples, source, target):
    pairs = []
    for inputs, targets in examples:
        assert inputs[-1] == 1 and targets[-1] == 1  # EOS appended to both sides.
        assert 1 not in inputs[:-1] and 1 not in targets[:-1] and 0 not in inputs + targets
        pairs.append((source.decode(inputs[:-1]), target.decode(targets[:-1])))
    return sorted(pairs)


@pytest.fixture(scope="module")
def sample_pairs(sample):
    pairs = [tree_linearization.linearize(t) for t in sample]
    return sorted(pairs[:1921]), sorted(pairs[1921:])


def _generate(name, ptb_sample_dir, tmp_path_factory, train_shards=100, **kwargs):
    from t2t_lite import registry

    class Problem(type(registry.problem(name))):
        # Fewer train shards keep the test quick; the file names are the problem's own.
        @property
        def dataset_splits(self):
            return [{"split": "train", "shards": train_shards}, {"split": "eval", "shards": 1}]

    prob = Problem(**kwargs)
    prob.set_wsj_source(wsj_dir=str(ptb_sample_dir), train_sections="00", dev_sections="01")
    data_dir = tmp_path_factory.mktemp(name)
    tmp_dir = tmp_path_factory.mktemp(name + "_tmp")
    prob.generate_data(str(data_dir), str(tmp_dir))
    return prob, data_dir, tmp_dir


@pytest.mark.slow
def test_wsj_parsing_datagen(ptb_sample_dir, tmp_path_factory, sample, sample_pairs):
    from t2t_lite import registry

    assert registry.problem("wsj_parsing").dataset_splits == [
        {"split": "train", "shards": 100}, {"split": "eval", "shards": 1}]
    _, data_dir, tmp_dir = _generate("wsj_parsing", ptb_sample_dir, tmp_path_factory,
                                     train_shards=4, approx_vocab_size=2**10)
    # t2t's tmp_dir layout was written from the treebank.
    assert (tmp_dir / "wsj.train.tags.txt").read_text().splitlines()[0] == \
        tree_linearization.linearize(sample[0])[1]
    train_files, train = _read_shards(data_dir, "wsj_parsing-train-*")
    dev_files, dev = _read_shards(data_dir, "wsj_parsing-dev-*")
    assert [f.name for f in train_files + dev_files] == [
        f"wsj_parsing-train-0000{i}-of-00004" for i in range(4)] + [
        "wsj_parsing-dev-00000-of-00001"]
    # Reading back: a fresh instance loads the vocab written by datagen.
    fresh = registry.problem("wsj_parsing")
    assert fresh.vocab_filename == "vocab.wsj_parsing.32768.subwords"
    encoders = type(fresh)(approx_vocab_size=2**10).feature_encoders(str(data_dir))
    assert encoders["inputs"] is encoders["targets"]
    assert _decoded(train, encoders["inputs"], encoders["targets"]) == sample_pairs[0]
    assert _decoded(dev, encoders["inputs"], encoders["targets"]) == sample_pairs[1]
    hp = fresh.get_hparams(data_dir=str(data_dir))
    assert (hp.input_space_id, hp.target_space_id) == (0, 0)
    assert "approx_bleu_score" in fresh.eval_metrics()


@pytest.mark.slow
def test_parsing_english_ptb16k_datagen(ptb_sample_dir, tmp_path_factory, sample_pairs):
    from t2t_lite import registry

    _, data_dir, _ = _generate("parsing_english_ptb16k", ptb_sample_dir, tmp_path_factory,
                               train_shards=3)
    assert (data_dir / "wsj_source.vocab.512").exists()
    assert (data_dir / "wsj_target.vocab.16384").exists()
    fresh = registry.problem("parsing_english_ptb16k")
    encoders = fresh.feature_encoders(str(data_dir))
    source, target = encoders["inputs"], encoders["targets"]
    assert abs(source.vocab_size - 512) <= 512 // 100 + 1
    # Tag text has few distinct tokens: the target vocab is small whatever its file name.
    assert target.vocab_size < 1000 and target.vocab_size != source.vocab_size
    _, train = _read_shards(data_dir, "parsing_english_ptb16k-train-*")
    _, dev = _read_shards(data_dir, "parsing_english_ptb16k-dev-*")
    assert _decoded(train, source, target) == sample_pairs[0]
    assert _decoded(dev, source, target) == sample_pairs[1]
    hp = fresh.get_hparams(data_dir=str(data_dir))
    assert hp.vocab_size == {"inputs": source.vocab_size, "targets": target.vocab_size}
    assert (hp.input_space_id, hp.target_space_id) == (3, 15)
    assert fresh.eval_metrics() == ["accuracy", "accuracy_top5", "accuracy_per_sequence",
                                    "neg_log_perplexity"]
    rev = registry.problem("parsing_english_ptb16k_rev").get_hparams(data_dir=str(data_dir))
    assert rev.vocab_size == {"inputs": target.vocab_size, "targets": source.vocab_size}


@pytest.mark.slow
def test_parsing_english_ptb16k_xx_datagen(ptb_sample_dir, tmp_path_factory, sample_pairs):
    from t2t_lite import registry

    _, data_dir, _ = _generate("parsing_english_ptb16k_xx", ptb_sample_dir, tmp_path_factory,
                               train_shards=2)
    fresh = registry.problem("parsing_english_ptb16k_xx")
    assert fresh.vocab_filename == "wsj_xx_target.vocab.16384"
    assert sorted(p.name for p in data_dir.glob("*vocab*")) == [
        "wsj_source.vocab.512", "wsj_xx_target.vocab.16384"]
    encoders = fresh.feature_encoders(str(data_dir))
    source, target = encoders["inputs"], encoders["targets"]
    _, dev = _read_shards(data_dir, "parsing_english_ptb16k_xx-dev-*")
    masked = sorted((w, tree_linearization.mask_pos_tags(t)) for w, t in sample_pairs[1])
    assert _decoded(dev, source, target) == masked
    assert "NN" not in " ".join(t for _, t in masked).split()
    hp = fresh.get_hparams(data_dir=str(data_dir))
    assert (hp.input_space_id, hp.target_space_id) == (3, 15)


@pytest.mark.slow
def test_parsing_english_ptb_words_datagen(ptb_sample_dir, tmp_path_factory, sample):
    from t2t_lite import registry

    _, data_dir, _ = _generate("parsing_english_ptb_words", ptb_sample_dir, tmp_path_factory,
                               train_shards=2, approx_vocab_size=2**10)
    assert sorted(p.name for p in data_dir.glob("vocab*")) == [
        "vocab.parsing_english_ptb_words.1024.subwords"]
    assert registry.problem("parsing_english_ptb_words").vocab_filename == \
        "vocab.parsing_english_ptb_words.4096.subwords"
    prob = type(registry.problem("parsing_english_ptb_words"))(approx_vocab_size=2**10)
    encoders = prob.feature_encoders(str(data_dir))
    assert encoders["inputs"] is encoders["targets"]  # One vocab: a copied word, same ids.
    _, dev = _read_shards(data_dir, "parsing_english_ptb_words-dev-*")
    expected = sorted(tree_linearization.linearize_words(t) for t in sample[1921:])
    assert _decoded(dev, encoders["inputs"], encoders["targets"]) == expected
    hp = prob.get_hparams(data_dir=str(data_dir))
    assert (hp.input_space_id, hp.target_space_id) == (3, 15)


@pytest.mark.slow
def test_parsing_english_ptb8k_datagen(ptb_sample_dir, tmp_path_factory, sample_pairs):
    from t2t_lite import registry

    _, data_dir, _ = _generate("parsing_english_ptb8k", ptb_sample_dir, tmp_path_factory,
                               train_shards=2, approx_vocab_size=2**11)
    assert (data_dir / "vocab.endefr.2048").exists()
    prob = type(registry.problem("parsing_english_ptb8k"))(approx_vocab_size=2**11)
    encoders = prob.feature_encoders(str(data_dir))
    assert encoders["inputs"] is encoders["targets"]
    _, dev = _read_shards(data_dir, "parsing_english_ptb8k-dev-*")
    assert _decoded(dev, encoders["inputs"], encoders["targets"]) == sample_pairs[1]
    hp = prob.get_hparams(data_dir=str(data_dir))
    assert (hp.batch_size_multiplier, hp.loss_multiplier) == (256, 2.0)
    assert (hp.input_space_id, hp.target_space_id) == (3, 15)
    assert registry.problem("parsing_english_ptb8k").vocab_filename == "vocab.endefr.8192"


def test_problem_source_errors(tmp_path, ptb_sample_dir):
    from t2t_lite import registry

    prob = registry.problem("parsing_english_ptb8k")
    with pytest.raises(ValueError, match="--wsj_train_sections: bad WSJ section spec '2-a'"):
        prob.set_wsj_source(train_sections="2-a")
    # No treebank in tmp_dir and none named: the message says how to point at it.
    with pytest.raises(FileNotFoundError, match="--wsj_dir"):
        list(prob.generate_samples(None, str(tmp_path), "train"))
    prob.set_wsj_source(wsj_dir=str(ptb_sample_dir))
    with pytest.raises(FileNotFoundError, match="section 02 not found.*--wsj_dir"):
        list(prob.generate_samples(None, str(tmp_path), "train"))
    parsing = registry.problem("wsj_parsing")
    with pytest.raises(FileNotFoundError, match=r"wsj_parsing needs .*wsjTrain\.trees"):
        list(parsing.generate_samples(None, str(tmp_path), "train"))


def test_wsj_parsing_uses_existing_tmp_files(tmp_path):
    from t2t_lite import registry

    # The user's own files in tmp_dir are read as they are (t2t's behaviour).
    (tmp_path / "wsjTrain.trees").write_text(
        "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)))\n\n")
    (tmp_path / "wsjEval.trees").write_text("(TOP (S (NP (DT A) (NN dog)) (VP (VBD ran)))\n")
    for name in ("wsj.train.text.txt", "wsj.train.tags.txt"):
        (tmp_path / name).write_text("x\n")
    prob = registry.problem("wsj_parsing")
    assert list(prob.generate_samples(None, str(tmp_path), "train")) == [
        {"inputs": "The cat sat .", "targets": "S NP DT NN /NP VP VBD /VP . /S"}]
    with pytest.raises(treebank.TreeError, match=r"wsjEval\.trees:1: .*unbalanced"):
        list(prob.generate_samples(None, str(tmp_path), "eval"))
    assert list(prob.generate_text_for_vocab(None, str(tmp_path))) == ["x", "x"]


def test_write_sentences_and_trees(ptb_sample_dir, tmp_path, sample):
    n = treebank.write_sentences_and_trees(ptb_sample_dir, "01", tmp_path / "s.txt", tmp_path / "t")
    assert n == 1748
    sentences = (tmp_path / "s.txt").read_text().splitlines()
    assert sentences == [tree_linearization.linearize(t)[0] for t in sample[1921:]]
    assert (tmp_path / "t").read_text().splitlines() == [t.to_string() for t in sample[1921:]]


def test_is_well_formed_rejects_bad_trees():
    tree = treebank.Tree
    assert tree_linearization.is_well_formed(tree("TOP", [tree("NN", ["a"])]), ["a"])
    assert not tree_linearization.is_well_formed(tree("TOP", [tree("NN", ["a"])]), ["b"])
    for bad in [tree("", [tree("NN", ["a"])]), tree("TOP", [tree("NN", ["a b"])]),
                tree("TOP", []), tree("TOP", [tree("NN", ["a"]), "b"]),
                tree("(", [tree("NN", ["a"])]), tree("TOP", [tree("NP", [])])]:
        assert not tree_linearization.is_well_formed(bad), bad
