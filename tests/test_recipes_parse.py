"""recipes/parse_ptb_sample.py --quick end to end: datagen, train, decode, repair, score."""
import json
import pathlib
import re
import subprocess
import sys

import pytest

from t2t_lite.data_generators import tree_linearization, treebank

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_PROBLEM = "parsing_english_ptb_words"

RESULT_RE = re.compile(
    r"^RESULT parse_ptb_sample: dev_f1=(?P<dev_f1>\d+\.\d\d) precision=\d+\.\d\d "
    r"recall=\d+\.\d\d exact_match=\d+\.\d\d rb_f1=(?P<rb_f1>\d+\.\d\d) "
    r"rb_unlabeled_f1=(?P<rb_unlabeled_f1>\d+\.\d\d) sentences=(?P<sentences>\d+) "
    r"error_sentences=(?P<errors>\d+) steps=(?P<steps>\d+) train_wall_s=\d+\.\d\d "
    r"total_wall_s=\d+\.\d\d$", re.MULTILINE)


@pytest.mark.slow
@pytest.mark.parametrize("problem", [None, "parsing_english_ptb16k"])
def test_quick_recipe_end_to_end(ptb_sample_dir, tmp_path, problem):
    work = tmp_path / "work"
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "recipes" / "parse_ptb_sample.py"), "--quick",
         f"--work_dir={work}", f"--ptb_dir={ptb_sample_dir}",
         *([f"--problem={problem}"] if problem else [])],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    # Each step is printed as the command a user would type, before it runs.
    for mode in ("datagen", "train", "decode"):
        assert f"+ python run.py --mode={mode} --problem={problem or DEFAULT_PROBLEM} " in out
    assert "--wsj_train_sections=0001-0159 --wsj_dev_sections=0160-0179" in out
    match = RESULT_RE.search(out)
    assert match, out[-3000:]
    assert out.rstrip().endswith(match.group(0))  # The summary is the last line.
    assert int(match["sentences"]) == 20 and int(match["errors"]) == 0
    assert int(match["steps"]) == 20
    # The baseline depends on the gold trees only; merging labels can only add matches.
    assert 0 < float(match["rb_f1"]) < float(match["rb_unlabeled_f1"]) < 100

    sentences = (work / "dev.sentences.txt").read_text().splitlines()
    gold = treebank.read_trees_file(work / "dev.gold.trees")
    expected = treebank.read_wsj_sections(ptb_sample_dir, "0160-0179")[:20]
    assert gold == expected and sentences == [" ".join(t.leaves()) for t in expected]
    assert len((work / "dev.decodes").read_text().splitlines()) == 20
    parsed = treebank.read_trees_file(work / "dev.parsed.trees")
    assert all(tree_linearization.is_well_formed(t, s.split())
               for t, s in zip(parsed, sentences, strict=True))
    baseline = treebank.read_trees_file(work / "dev.right_branching.trees")
    assert [t.pos() for t in baseline] == [t.pos() for t in gold]
    scores = json.loads((work / "scores.json").read_text())
    assert f"{scores['dev_f1']:.2f}" == match["dev_f1"]
    assert scores["hparams_set"] == "transformer_tiny"
    assert scores["problem"] == (problem or DEFAULT_PROBLEM)
    assert (work / "train" / "ckpt-20.index").exists()
