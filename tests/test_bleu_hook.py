"""BLEU: t2t's compute_bleu / bleu_tokenize / bleu_wrapper on hand-computed cases, and
sacrebleu through its Python API against its own command line."""
import json
import math
import os
import pathlib
import shutil
import subprocess
import sys
import types
import unicodedata

import numpy as np
import pytest

from t2t_lite.bin import t2t_bleu
from t2t_lite.errors import UserError
from t2t_lite.evaluation import bleu_hook

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_reference_example():
    # §8.2: p = 3/4, 1/3, then two orders without matches smoothed to 1/(2*2), 1/(4*1);
    # BP = exp(1 - 5/4).
    value = bleu_hook.compute_bleu([list("abcde")], [list("abxd")])
    assert value == np.float32(0.27534765)
    expected = (0.75 * (1 / 3) * 0.25 * 0.25) ** 0.25 * math.exp(1 - 5 / 4)
    assert value == np.float32(expected)
    assert isinstance(value, np.float32)


def test_identical_corpus_is_one():
    corpus = [["the", "cat", "sat", "on", "the", "mat"], ["hello", "there", "you", "all"]]
    assert bleu_hook.compute_bleu(corpus, corpus) == np.float32(1.0)


def test_hand_counted_two_segments():
    refs = [["the", "cat", "sat"], ["a", "b"]]
    hyps = [["the", "cat"], ["a", "c", "b"]]
    # Clipped matches by order [4, 1, 0, 0] of hypothesis n-grams [5, 3, 1, 0]:
    # p1 = 4/5, p2 = 1/3, p3 smoothed to 1/(2 * 1), p4 = 0 (no 4-grams: skipped, divisor 4).
    # Lengths 5 and 5: no brevity penalty.
    expected = math.exp((math.log(0.8) + math.log(1 / 3) + math.log(0.5)) / 4)
    assert bleu_hook.compute_bleu(refs, hyps) == np.float32(expected)
    assert bleu_hook.compute_bleu(refs, hyps, max_order=2) == np.float32(
        math.exp((math.log(0.8) + math.log(1 / 3)) / 2))


def test_clipping_and_brevity_penalty():
    # "the the the" against "the cat": one clipped unigram match of 3; bigrams 0 of 2 -> 1/4;
    # trigram 0 of 1 -> 1/(4 * 1); no 4-grams. Longer than the reference: BP 1.
    value = bleu_hook.compute_bleu([["the", "cat"]], [["the", "the", "the"]])
    assert value == np.float32(math.exp((math.log(1 / 3) + math.log(1 / 4) + math.log(1 / 4)) / 4))
    # Shorter hypothesis: BP = exp(1 - 4/2); without BP the precisions alone.
    refs, hyps = [["a", "b", "c", "d"]], [["a", "b"]]
    geo = math.exp((math.log(1.0) + math.log(1.0)) / 4)
    assert bleu_hook.compute_bleu(refs, hyps) == np.float32(geo * math.exp(1 - 2))
    assert bleu_hook.compute_bleu(refs, hyps, use_bp=False) == np.float32(geo)


def test_degenerate_corpora():
    assert bleu_hook.compute_bleu([["a", "b"]], [[]]) == 0.0
    assert bleu_hook.compute_bleu([[]], [[]]) == 0.0
    assert bleu_hook.compute_bleu([["a"]], [["b"]]) == np.float32(math.exp(math.log(0.5) / 4))
    # Ids work as tokens too (approx_bleu uses subword ids).
    assert bleu_hook.compute_bleu([[3, 4, 5, 6]], [[3, 4, 5, 6]]) == 1.0


def test_bleu_tokenize_reference_example():
    tokens = bleu_hook.bleu_tokenize("Hello, world! It costs 1,000.5 $5 in 2014.")
    assert tokens == ["Hello", ",", "world", "!", "It", "costs", "1,000.5", "$", "5", "in",
                      "2014."]


@pytest.mark.parametrize("text,tokens", [
    ("Er sagte: „Ja“ – nein.", ["Er", "sagte", ":", "„", "Ja", "“", "–", "nein", "."]),
    ("3.5% von 1.000", ["3.5", "%", "von", "1.000"]),
    ("a+b=c <tag> €10", ["a", "+", "b", "=", "c", "<", "tag", ">", "€", "10"]),
    ("U.S.A. e.g.", ["U", ".", "S", ".", "A", ".", "e", ".", "g", "."]),
    # t2t's character class loses the backslash: it is not split off.
    ("a\\b c", ["a\\b", "c"]),
])
def test_bleu_tokenize_cases(text, tokens):
    assert bleu_hook.bleu_tokenize(text) == tokens


@pytest.mark.parametrize("prefix", ["P", "S"])
def test_character_classes_equal_t2t_full_scan(prefix):
    # t2t's own construction: every code point below sys.maxunicode tested with unicodedata.
    full = "".join(chr(x) for x in range(sys.maxunicode)
                   if unicodedata.category(chr(x)).startswith(prefix))
    assert bleu_hook._property_chars(prefix) == full


def test_bleu_wrapper_cased_uncased_and_line_counts(tmp_path):
    ref = tmp_path / "ref"
    hyp = tmp_path / "hyp"
    ref.write_text("The cat sat on the mat.\nHello world!\n", encoding="utf-8")
    hyp.write_text("the cat sat on the mat.\nHello world!\n", encoding="utf-8")
    assert bleu_hook.bleu_wrapper(str(ref), str(hyp)) == np.float32(1.0)
    cased = bleu_hook.bleu_wrapper(str(ref), str(hyp), case_sensitive=True)
    # Tokens: [The|the, cat, sat, on, the, mat, .] + [Hello, world, !] (+ the empty last
    # line): the first unigram differs; n-gram matches 9/10, 7/8, 5/6, 3/4.
    expected = math.exp((math.log(9 / 10) + math.log(7 / 8) + math.log(5 / 6)
                         + math.log(3 / 4)) / 4)
    assert cased == np.float32(expected)
    hyp.write_text("the cat sat on the mat.\nHello world!", encoding="utf-8")
    with pytest.raises(ValueError, match="3 lines but .* has 2"):
        bleu_hook.bleu_wrapper(str(ref), str(hyp))


def _perturbed_pair(wmt_toy_dir, tmp_path, n=25):
    """The first n lines of dev.de as reference and perturbed copies as hypotheses."""
    lines = (wmt_toy_dir / "dev.de").read_text(encoding="utf-8").split("\n")[:n]
    hyps = []
    for i, line in enumerate(lines):
        words = line.split()
        if i % 4 == 0:
            words = words[:-2]
        elif i % 4 == 1:
            words = words[::-1]
        elif i % 4 == 2:
            words = [w.lower() for w in words]
        hyps.append(" ".join(words))
    ref = tmp_path / "ref.de"
    hyp = tmp_path / "hyp.de"
    ref.write_text("\n".join(lines) + "\n", encoding="utf-8")
    hyp.write_text("\n".join(hyps) + "\n", encoding="utf-8")
    return ref, hyp


def _sacrebleu_cli(*args):
    exe = shutil.which("sacrebleu")
    command = [exe] if exe else [sys.executable, "-m", "sacrebleu"]
    return subprocess.run(command + list(args), check=True, capture_output=True,
                          text=True).stdout.strip()


def test_sacrebleu_matches_its_command_line(wmt_toy_dir, tmp_path):
    ref, hyp = _perturbed_pair(wmt_toy_dir, tmp_path)
    refs = bleu_hook.read_lines(str(ref))
    hyps = bleu_hook.read_lines(str(hyp))
    score, signature = bleu_hook.sacrebleu_corpus_bleu(refs, hyps)
    assert 5 < score.score < 95
    assert f"{score.score:.4f}" == _sacrebleu_cli(str(ref), "-i", str(hyp), "-b", "-w", "4")
    assert str(signature).startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    lower, _ = bleu_hook.sacrebleu_corpus_bleu(refs, hyps, lowercase=True)
    assert f"{lower.score:.4f}" == _sacrebleu_cli(str(ref), "-i", str(hyp), "-b", "-w", "4",
                                                  "-lc")


def test_main_prints_sacrebleu_and_t2t_bleu(wmt_toy_dir, tmp_path, capsys):
    ref, hyp = _perturbed_pair(wmt_toy_dir, tmp_path)
    flags = types.SimpleNamespace(translation=str(hyp), reference=str(ref), bleu_variant="both")
    t2t_bleu.main(flags)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    uncased = 100 * bleu_hook.bleu_wrapper(str(ref), str(hyp))
    cased = 100 * bleu_hook.bleu_wrapper(str(ref), str(hyp), case_sensitive=True)
    assert uncased > cased  # the lowercased lines only match uncased
    assert lines[1:] == [f"BLEU_uncased = {uncased:6.2f}", f"BLEU_cased = {cased:6.2f}"]
    flags.bleu_variant = "cased"
    t2t_bleu.main(flags)
    assert capsys.readouterr().out.splitlines()[1:] == [f"BLEU_cased = {cased:6.2f}"]


def test_main_errors_name_the_flag(tmp_path):
    flags = types.SimpleNamespace(translation=None, reference="x", bleu_variant="both")
    with pytest.raises(UserError, match="--translation"):
        t2t_bleu.main(flags)
    flags.translation = str(tmp_path / "missing")
    with pytest.raises(UserError, match="no such file"):
        t2t_bleu.main(flags)


def test_run_py_bleu_mode(wmt_toy_dir, tmp_path):
    ref, hyp = _perturbed_pair(wmt_toy_dir, tmp_path, n=8)
    out = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "run.py"), "--mode=bleu",
         f"--translation={hyp}", f"--reference={ref}"],
        check=True, capture_output=True, text=True, cwd=REPO_ROOT).stdout.splitlines()
    assert out[0].startswith("BLEU|nrefs:1")
    assert out[1].startswith("BLEU_uncased = ") and out[2].startswith("BLEU_cased = ")


@pytest.mark.slow  # sacreBLEU's command line: a few seconds a call
def test_chrf_chrfpp_ter_equal_sacrebleu_command_line(wmt_toy_dir, tmp_path):
    ref, hyp = _perturbed_pair(wmt_toy_dir, tmp_path, n=30)
    lines = bleu_hook.bleu_report(str(ref), str(hyp), metrics=("chrf", "ter", "chrf++"))
    assert len(lines) == 3  # no BLEU lines without "bleu"
    cli = json.loads(_sacrebleu_cli(str(ref), "-i", str(hyp), "-m", "chrf", "ter", "-w", "2"))
    cli.append(json.loads(_sacrebleu_cli(str(ref), "-i", str(hyp), "-m", "chrf",
                                         "--chrf-word-order", "2", "-w", "2")))
    for line, expected, name in zip(lines, cli, ("chrF2", "TER", "chrF2++")):
        assert expected["name"] == name
        assert line == f"{name}|{expected['signature']} = {expected['score']:.2f}"
    assert 10 < float(lines[1].rsplit("= ", 1)[1]) < 90  # a TER that tells the files apart


@pytest.mark.slow  # sacreBLEU's command line: a few seconds a call
def test_paired_bootstrap_equals_sacrebleu_command_line(wmt_toy_dir, tmp_path, capsys,
                                                        monkeypatch):
    ref, hyp = _perturbed_pair(wmt_toy_dir, tmp_path, n=30)
    monkeypatch.chdir(tmp_path)  # system names without LaTeX escapes in sacreBLEU's table
    ref, hyp, other = pathlib.Path("ref.de"), pathlib.Path("hyp.de"), pathlib.Path("other.de")
    # The reference itself with every third line emptied: a second system, far better.
    other.write_text("\n".join("" if i % 3 == 0 else line for i, line in
                               enumerate(bleu_hook.read_lines(str(ref)))) + "\n",
                     encoding="utf-8")
    flags = types.SimpleNamespace(translation=f"{hyp},{other}", reference=str(ref),
                                  bleu_variant="both", metrics="bleu,chrf,ter",
                                  paired_bootstrap=300)
    t2t_bleu.main(flags)
    ours = capsys.readouterr().out.splitlines()
    table = _sacrebleu_cli(str(ref), "-i", str(hyp), str(other), "-m", "bleu", "chrf", "ter",
                           "--paired-bs", "--paired-bs-n", "300", "-f", "latex", "--no-color",
                           "-q", "-w", "2")
    rows = [[cell.strip() for cell in line.rstrip("\\ ").split("&")]
            for line in table.splitlines() if "&" in line and "System" not in line][:2]
    assert rows[0][0] == f"Baseline: {hyp}" and rows[1][0] == str(other)
    for metric_index, metric in enumerate(("BLEU", "chrF2", "TER")):
        for row in rows:
            assert f"{metric} {row[0]} = {row[1 + metric_index]}" in ours
    signatures = [line for line in table.splitlines() if line.startswith(" - ") and "nrefs:" in line]
    for line in signatures:
        name, signature = line[3:].split()
        assert f"{name} signature: {signature}" in ours
    assert len(signatures) == 3 and "bs:300|seed:12345" in signatures[0]
    with pytest.raises(UserError, match="--paired_bootstrap"):
        t2t_bleu.main(types.SimpleNamespace(translation=str(hyp), reference=str(ref),
                                            bleu_variant="both", metrics="bleu",
                                            paired_bootstrap=10))
    with pytest.raises(UserError, match="--metrics=bleu,cher: unknown cher"):
        t2t_bleu.main(types.SimpleNamespace(translation=str(hyp), reference=str(ref),
                                            bleu_variant="both", metrics="bleu,cher",
                                            paired_bootstrap=0))
