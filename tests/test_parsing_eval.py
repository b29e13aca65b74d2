"""EVALB (COLLINS.prm) scores against brackets counted by hand.

Notation in the comments: a bracket is LABEL(start, end) over the words that evalb keeps
(punctuation and -NONE- removed), end exclusive; P = matched / test, R = matched / gold,
F = 2PR / (P + R).
"""
import pytest

from t2t_lite.data_generators import tree_linearization, treebank
from t2t_lite.evaluation import parsing_eval as pe

CAT = "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)))"


def _one(gold, test):
    result = pe.evalb([gold], [test])
    return result, result["sentences"][0]


def test_identical_tree_with_punctuation():
    # Words kept: The cat sat (the "." is deleted) -> S(0,3) NP(0,2) VP(2,3); TOP deleted.
    result, s = _one(CAT, CAT)
    assert (s.matched, s.gold_brackets, s.test_brackets) == (3, 3, 3)
    assert (s.words, s.correct_tags, s.length) == (3, 3, 4)  # Length counts the ".".
    assert result["precision"] == result["recall"] == result["f1"] == 100.0
    assert result["exact_match"] == 100.0 and result["tagging_accuracy"] == 100.0


def test_punctuation_attachment_does_not_count():
    # "." inside the VP: VP is still VP(2,3) once the "." is removed -> 3/3.
    _, s = _one(CAT, "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat) (. .))))")
    assert (s.matched, s.gold_brackets, s.test_brackets) == (3, 3, 3)
    # A constituent over punctuation only has zero width and is ignored: gold brackets
    # S(0,2) NP(0,1) VP(1,2); PRN covers only "," -> ignored.
    gold = "(TOP (S (NP (NNS Dogs)) (PRN (, ,) (: --)) (VP (VBP bark)) (. .)))"
    _, s = _one(gold, "(TOP (S (NP (NNS Dogs)) (, ,) (: --) (VP (VBP bark)) (. .)))")
    assert (s.matched, s.gold_brackets, s.test_brackets) == (3, 3, 3)


def test_unary_chain():
    # Gold S(0,1) VP(0,1); test VP(0,1): matched 1, R = 1/2 = 50, P = 1/1 = 100,
    # F = 2*100*50/150 = 66.666...
    result, s = _one("(TOP (S (VP (VB Go))))", "(TOP (VP (VB Go)))")
    assert (s.matched, s.gold_brackets, s.test_brackets) == (1, 2, 1)
    assert result["recall"] == 50.0 and result["precision"] == 100.0
    assert result["f1"] == pytest.approx(200.0 / 3)
    assert result["exact_match"] == 0.0


def test_duplicated_brackets_are_a_multiset():
    gold = "(TOP (NP (NP (NNS dogs))))"  # NP(0,1) twice.
    # One NP in test: matched 1 of 2 gold; P = 100, R = 50.
    _, s = _one(gold, "(TOP (NP (NNS dogs)))")
    assert (s.matched, s.gold_brackets, s.test_brackets) == (1, 2, 1)
    # Three NPs in test: matched 2; P = 2/3, R = 2/2.
    result, s = _one(gold, "(TOP (NP (NP (NP (NNS dogs)))))")
    assert (s.matched, s.gold_brackets, s.test_brackets) == (2, 2, 3)
    assert result["precision"] == pytest.approx(200.0 / 3) and result["recall"] == 100.0


def test_advp_prt_equivalence():
    # Gold S(0,2) VP(0,2) PRT(1,2); test ADVP(1,2) matches PRT -> 3/3; PP(1,2) does not.
    gold = "(TOP (S (VP (VBD gave) (PRT (RP up)))))"
    _, s = _one(gold, "(TOP (S (VP (VBD gave) (ADVP (RP up)))))")
    assert (s.matched, s.gold_brackets, s.test_brackets) == (3, 3, 3)
    _, s = _one(gold, "(TOP (S (VP (VBD gave) (PP (RP up)))))")
    assert (s.matched, s.gold_brackets, s.test_brackets) == (2, 3, 3)


def test_raw_gold_function_tags_empty_elements_and_unlabeled_root():
    # Raw gold: unlabeled root ignored, NP-SBJ -> NP, the NP-SBJ over -NONE- has zero width,
    # the SBAR over an S with only a trace too. Kept words: Go now -> S(0,2) VP(0,2)
    # ADVP(1,2) = 3 brackets; length = 3 (Go, now, "."; -NONE- does not count).
    gold = ("( (S (NP-SBJ-1 (-NONE- *)) (VP (VB Go) (ADVP-TMP=2 (RB now)) "
            "(SBAR (-NONE- 0) (S (NP-SBJ (-NONE- *T*-1))))) (. .)) )")
    _, s = _one(gold, "(TOP (S (VP (VB Go) (ADVP (RB now))) (. .)))")
    assert (s.matched, s.gold_brackets, s.test_brackets, s.length) == (3, 3, 3, 3)
    # A test that copies the unlabeled root gains no bracket from it.
    _, s = _one(gold, "( (S (VP (VB Go) (ADVP (RB now))) (. .)))")
    assert (s.matched, s.test_brackets) == (3, 3)


def test_crossing_brackets_and_tagging():
    # Gold: S(0,4) NP(0,2) VP(2,4) NP(3,4). Test: S(0,4) X(0,3) NP(3,4).
    # Matched S, NP(3,4) = 2; P = 2/3, R = 2/4, F = 2*(200/3)*50/(200/3+50) = 400/7.
    # X(0,3) crosses VP(2,4) (0 < 2 < 3 < 4): 1 crossing. Tags: "d" NN vs NNS -> 3/4.
    gold = "(TOP (S (NP (DT a) (NN b)) (VP (VB c) (NP (NN d)))))"
    test = "(TOP (S (X (DT a) (NN b) (VB c)) (NP (NNS d))))"
    result, s = _one(gold, test)
    assert (s.matched, s.gold_brackets, s.test_brackets, s.crossing) == (2, 4, 3, 1)
    assert result["f1"] == pytest.approx(400.0 / 7)
    assert result["tagging_accuracy"] == 75.0
    assert result["average_crossing"] == 1.0 and result["no_crossing"] == 0.0
    assert result["two_or_less_crossing"] == 100.0


def test_length_and_word_mismatch_are_errors():
    # Test drops "sat": 2 vs 3 kept words -> error, left out of every total.
    result, s = _one(CAT, "(TOP (S (NP (DT The) (NN cat)) (. .)))")
    assert s.status == pe.STATUS_ERROR and s.message == "Length unmatch (3|2)"
    assert result["num_error_sentences"] == 1 and result["num_valid_sentences"] == 0
    assert result["gold_brackets"] == 0 and result["f1"] == 0.0
    # Tagging a real word as punctuation deletes it from the test: length mismatch too.
    _, s = _one(CAT, "(TOP (S (NP (DT The) (NN cat)) (VP (: sat)) (. .)))")
    assert s.message == "Length unmatch (3|2)"
    _, s = _one(CAT, "(TOP (S (NP (DT A) (NN cat)) (VP (VBD sat)) (. .)))")
    assert s.status == pe.STATUS_ERROR and s.message == "Words unmatch (The|A)"


def test_empty_and_unreadable_test_output():
    result = pe.evalb([CAT, CAT, CAT, CAT],
                      ["", "(TOP (. .))", "(TOP (S (NP (DT The) (NN cat))", CAT])
    status = [s.status for s in result["sentences"]]
    # "" and a tree of punctuation only: skip (no word); unbalanced: error; last: valid.
    assert status == [pe.STATUS_SKIP, pe.STATUS_SKIP, pe.STATUS_ERROR, pe.STATUS_OK]
    assert "unbalanced" in result["sentences"][2].message
    assert (result["num_skip_sentences"], result["num_error_sentences"]) == (2, 1)
    assert result["num_valid_sentences"] == 1 and result["f1"] == 100.0


def test_corpus_totals_and_cutoff():
    # Sentence 1: unary case (1 matched, 2 gold, 1 test). Sentence 2: 41 words, flat
    # S(0,41) in gold, test adds NP(0,2) -> (1 matched, 1 gold, 2 test).
    # All: P = 2/3, R = 2/3. len<=40 holds sentence 1 only: P = 1, R = 1/2.
    long_words = " ".join(f"(NN w{i})" for i in range(41))
    gold_long = f"(TOP (S {long_words}))"
    test_long = "(TOP (S (NP (NN w0) (NN w1)) " + " ".join(
        f"(NN w{i})" for i in range(2, 41)) + "))"
    result = pe.evalb(["(TOP (S (VP (VB Go))))", gold_long], ["(TOP (VP (VB Go)))", test_long])
    assert result["precision"] == pytest.approx(200.0 / 3)
    assert result["recall"] == pytest.approx(200.0 / 3)
    assert result["exact_match"] == 0.0
    short = result["len<=40"]
    assert short["num_sentences"] == 1
    assert (short["precision"], short["recall"]) == (100.0, 50.0)
    assert (result["words"], result["correct_tags"]) == (42, 42)


def test_raw_sample_against_preprocessed(ptb_sample_dir):
    # Preprocessing keeps exactly evalb's view of the raw gold trees; the one difference in
    # the sample is the label ADVP|PRT (evalb keeps it whole, preprocessing keeps ADVP).
    raw = treebank.read_wsj_sections(ptb_sample_dir, "00-01", preprocess=False)
    result = pe.evalb(raw, [treebank.preprocess_tree(t) for t in raw])
    assert result["num_valid_sentences"] == 3669
    assert result["gold_brackets"] == result["test_brackets"] == 68867
    assert result["matched_brackets"] == 68866
    assert [s.index for s in result["sentences"] if not s.exact_match] == [2560]
    assert "ADVP|PRT" in raw[2560].to_string()
    assert result["tagging_accuracy"] == 100.0


def test_bad_arguments():
    with pytest.raises(ValueError, match="1 gold trees but 2 test trees"):
        pe.evalb([CAT], [CAT, CAT])
    with pytest.raises(ValueError, match="gold tree 1"):
        pe.evalb([CAT, "(TOP (S"], [CAT, CAT])
    with pytest.raises(ValueError, match="gold tree 0"):
        pe.evalb([""], [CAT])


def test_evalb_decodes():
    inputs = ["The cat sat .", "Go"]
    gold_targets = ["S NP DT NN /NP VP VBD /VP . /S", "S VP VB /VP /S"]
    # Decode 1 misses "/NP" and "VP": VBD lands in the NP, "/S" closes NP and S, and "."
    # goes under TOP. Brackets S(0,3) NP(0,3) vs gold S(0,3) NP(0,2) VP(2,3): matched 1.
    # Decode 2 is right (2/2). Totals: 3 matched, 5 gold, 4 test; P = 75, R = 60.
    decodes = ["S NP DT NN VBD /S .\t-1.25", "S VP VB /VP /S"]
    result = pe.evalb_decodes(inputs, decodes, gold_targets)
    assert result["test_trees"][0] == \
        "(TOP (S (NP (DT The) (NN cat) (VBD sat))) (. .))"
    assert (result["matched_brackets"], result["gold_brackets"], result["test_brackets"]) == \
        (3, 5, 4)
    # Gold as trees gives the same scores.
    gold_trees = [tree_linearization.tree_from_words_and_tags(i, g).to_string()
                  for i, g in zip(inputs, gold_targets)]
    again = pe.evalb_decodes(inputs, decodes, gold_trees)
    assert again["f1"] == result["f1"] == pytest.approx(2 * 75.0 * 60.0 / 135.0)
    with pytest.raises(ValueError, match="line by line"):
        pe.evalb_decodes(inputs, decodes[:1], gold_targets)


def test_evalb_decodes_with_words():
    inputs = ["The cat sat .", "Title X"]
    gold = ["(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)))",
            "(TOP (NP (NN Title) (NNP X)))"]
    # Decode 1 misses ")NP (VP": S(0,3) and NP(0,3) hold all words, against gold S(0,3)
    # NP(0,2) VP(2,3): 1 match. Decode 2 copied "X" (a phrase label too) right: NP(0,2).
    # Totals: 2 matched, 4 gold, 3 test (P 66.7, R 50); tags are XX (0 of 4 words).
    decodes = ["(S (NP The cat sat . )S\t-0.5", "(NP Title X )NP"]
    result = pe.evalb_decodes(inputs, decodes, gold, linearization="words")
    assert result["test_trees"] == ["(TOP (S (NP (XX The) (XX cat) (XX sat) (. .))))",
                                    "(TOP (NP (XX Title) (XX X)))"]
    assert (result["matched_brackets"], result["gold_brackets"], result["test_brackets"]) == \
        (2, 4, 3)
    assert result["num_valid_sentences"] == 2 and result["tagging_accuracy"] == 0.0
    # Gold given as targets in the same linearization.
    again = pe.evalb_decodes(inputs, decodes, ["(S (NP The cat )NP (VP sat )VP . )S",
                                               "(NP Title X )NP"], linearization="words")
    assert again["f1"] == result["f1"] == pytest.approx(2 * (200 / 3) * 50.0 / (200 / 3 + 50))
    with pytest.raises(ValueError, match="linearization 'trees' is not one of"):
        pe.evalb_decodes(inputs, decodes, gold, linearization="trees")


def test_evalb_decode_files(tmp_path):
    (tmp_path / "in.txt").write_text("The cat sat .\nGo\n")
    (tmp_path / "out.txt").write_text("\nS VP VB /VP /S\n")  # First decode empty.
    (tmp_path / "gold.trees").write_text(CAT + "\n(TOP (S (VP (VB Go))))\n")
    result = pe.evalb_decode_files(tmp_path / "in.txt", tmp_path / "out.txt",
                                   tmp_path / "gold.trees")
    # Empty decode -> (TOP (XX The) (XX cat) (XX sat) (. .)): valid (the "." keeps its tag,
    # so evalb deletes it on both sides), no test bracket; tags 0/3. Sentence 2: 2/2, tags
    # 1/1. Totals: 2 matched, 5 gold, 2 test, tags 1/4.
    assert result["test_trees"][0] == "(TOP (XX The) (XX cat) (XX sat) (. .))"
    assert result["num_valid_sentences"] == 2
    assert (result["matched_brackets"], result["gold_brackets"], result["test_brackets"]) == \
        (2, 5, 2)
    assert result["tagging_accuracy"] == 25.0
    (tmp_path / "out.txt").write_text("S /S\n")
    with pytest.raises(ValueError, match=r"in\.txt: 2 lines.*out\.txt: 1 lines"):
        pe.evalb_decode_files(tmp_path / "in.txt", tmp_path / "out.txt",
                              tmp_path / "gold.trees")


def test_summary_text():
    text = pe.summary_text(pe.evalb(["(TOP (S (VP (VB Go))))"], ["(TOP (VP (VB Go)))"]))
    assert "Bracketing Recall         =  50.00" in text
    assert "Bracketing FMeasure       =  66.67" in text
    assert "-- len<=40 --" in text


def test_command_line(tmp_path, capsys):
    (tmp_path / "gold").write_text("(TOP (S (VP (VB Go))))\n")
    (tmp_path / "test").write_text("(TOP (VP (VB Go)))\n")
    assert pe.main([str(tmp_path / "gold"), str(tmp_path / "test")]) == 0
    assert "Bracketing Precision      = 100.00" in capsys.readouterr().out
    (tmp_path / "in").write_text("Go\n")
    (tmp_path / "dec").write_text("S VP VB /VP /S\n")
    assert pe.main(["--inputs", str(tmp_path / "in"), str(tmp_path / "gold"),
                    str(tmp_path / "dec")]) == 0
    assert "Bracketing FMeasure       = 100.00" in capsys.readouterr().out
    (tmp_path / "test").write_text("")
    with pytest.raises(ValueError, match="1 lines but .*test: 0 lines"):
        pe.main([str(tmp_path / "gold"), str(tmp_path / "test")])


# --- Right-branching baseline ----------------------------------------------------------------

MAT = "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .)))"


def test_right_branching_tree():
    pos = [("a", "DT"), ("b", "NN"), ("c", ".")]
    assert pe.right_branching_tree(pos).to_string() == "(TOP (S (DT a) (S (NN b) (. c))))"
    assert pe.right_branching_tree(pos[:1], "X").to_string() == "(TOP (X (DT a)))"
    with pytest.raises(ValueError, match="at least one word"):
        pe.right_branching_tree([])


def test_unlabeled():
    tree = treebank.parse_tree(MAT)
    assert pe.unlabeled(tree).to_string() == (
        "(TOP (X (X (DT The) (NN cat)) (X (VBD sat) (X (IN on) (X (DT the) (NN mat)))) (. .)))")
    assert tree.to_string() == MAT  # Not modified in place.


def test_right_branching_baseline_by_hand():
    # Words The cat sat on the mat . (the final "." is deleted by evalb: 6 words count).
    # Chain spans: S(0,6) S(1,6) S(2,6) S(3,6) S(4,6) S(5,6) -> 6 test brackets.
    # Gold: S(0,6) NP(0,2) VP(2,6) PP(3,6) NP(4,6) -> 5 gold brackets.
    # Labeled: only S(0,6) matches: P = 1/6, R = 1/5.
    # Unlabeled: (0,6) (2,6) (3,6) (4,6) match: P = 4/6, R = 4/5.
    result = pe.right_branching_baseline([MAT])
    assert result["test_trees"] == [
        "(TOP (S (DT The) (S (NN cat) (S (VBD sat) (S (IN on) (S (DT the) (S (NN mat) (. .))))))))"]
    assert (result["matched_brackets"], result["test_brackets"], result["gold_brackets"]) == (
        1, 6, 5)
    assert result["precision"] == pytest.approx(100 / 6)
    assert result["recall"] == pytest.approx(20.0)
    assert result["f1"] == pytest.approx(2 * (100 / 6) * 20 / (100 / 6 + 20))
    assert result["tagging_accuracy"] == 100.0 and result["num_error_sentences"] == 0
    flat = result["unlabeled"]
    assert flat["matched_brackets"] == 4
    assert flat["precision"] == pytest.approx(400 / 6) and flat["recall"] == pytest.approx(80.0)
    # Another label hits another gold bracket: VP(2,6) only.
    assert pe.right_branching_baseline([MAT], label="VP")["matched_brackets"] == 1
    assert pe.right_branching_baseline([MAT], label="NP")["matched_brackets"] == 1
