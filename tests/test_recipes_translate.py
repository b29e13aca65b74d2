"""The translation recipe (recipes/translate_toy_ende.py) end to end, a few steps of a tiny model.

The full recipe takes ~45 minutes; this runs the same commands (datagen, train_and_eval,
decode, BLEU, averaging, decode of the average) so that the path cannot rot.
"""
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT, load_script


@pytest.mark.slow
def test_quick_recipe_runs_every_step_and_prints_its_numbers(wmt_toy_dir, tmp_path):
    work = tmp_path / "work"
    proc = subprocess.run(
        [sys.executable, "recipes/translate_toy_ende.py", "--quick", f"--work_dir={work}",
         f"--corpus={wmt_toy_dir}", "--dev_lines=5"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    # Every step ran, as the command a user would type.
    for mode in ("datagen", "train_and_eval", "decode", "bleu", "average"):
        assert re.search(rf"^\$ .*run\.py --mode={mode}\b", out, re.MULTILINE), mode
    last = out.strip().splitlines()[-1]
    m = re.fullmatch(r"RESULT translate_toy_ende: steps (\d+) \| dev loss ([0-9.]+) acc ([0-9.]+)"
                     r" \| sacreBLEU ([0-9.]+) \(avg3 ([0-9.]+)\) \| t2t BLEU cased ([0-9.]+) \|.*"
                     r"total [0-9.]+ min", last)
    assert m, last
    assert int(m.group(1)) == 12
    assert 0 < float(m.group(2)) < 10 and 0 <= float(m.group(3)) <= 1
    # Two evaluations (steps 6 and 12), as --eval_every says.
    assert re.search(r"^\s+6\s+[0-9.]+\s+[0-9.]+$", out, re.MULTILINE)
    for name in ("dev.last.decodes", "dev.avg3.decodes"):
        lines = (work / name).read_text(encoding="utf-8").splitlines()
        assert len(lines) == 5, name
    assert (work / "avg3").is_dir() and os.listdir(work / "train")


def _recipe_module():
    """recipes/translate_toy_ende.py as a module (recipes/ is not a package)."""
    return load_script(REPO_ROOT / "recipes" / "translate_toy_ende.py", "translate_toy_ende")


def test_presets_fill_only_what_the_command_line_leaves_open(wmt_toy_dir):
    recipe = _recipe_module()
    corpus = f"--corpus={wmt_toy_dir}"
    t2t = recipe.parse_args([corpus])
    assert (t2t.approx_vocab_size, t2t.hparams_set, t2t.train_steps, t2t.average_last,
            t2t.decode_hparams) == (8192, "transformer_tiny", 4800, 3, "beam_size=4,alpha=0.6")
    tuned = recipe.parse_args([corpus, "--tuned"])
    assert (tuned.approx_vocab_size, tuned.hparams_set, tuned.train_steps, tuned.eval_every,
            tuned.average_last) == (4096, "transformer_small", 4800, 500, 5)
    # The tuned budget is t2t's: the same steps, and no batch_size override.
    assert "num_hidden_layers=3" in tuned.hparams and "batch_size" not in tuned.hparams
    assert tuned.decode_hparams == "beam_size=4,alpha=1.0"
    overridden = recipe.parse_args([corpus, "--tuned", "--approx_vocab_size=2048",
                                    "--hparams=label_smoothing=0.1", "--average_last=0"])
    assert (overridden.approx_vocab_size, overridden.hparams, overridden.average_last,
            overridden.hparams_set) == (2048, "label_smoothing=0.1", 0, "transformer_small")


def test_tuned_and_quick_are_refused_together(wmt_toy_dir, capsys):
    recipe = _recipe_module()
    with pytest.raises(SystemExit) as exit_info:
        recipe.parse_args([f"--corpus={wmt_toy_dir}", "--tuned", "--quick"])
    assert exit_info.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_bidirectional_corpus_pairs_every_line_both_ways(tmp_path):
    recipe = _recipe_module()
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, text in (("train.en", "a house\nthe cat\n"), ("train.de", "ein Haus\ndie Katze\n"),
                       ("dev.en", "a cat\n"), ("dev.de", "eine Katze\n")):
        (corpus / name).write_text(text, encoding="utf-8")
    paths = recipe.write_bidirectional_corpus(str(corpus), str(tmp_path / "bidi"))

    def lines(key):
        with open(paths[key], encoding="utf-8") as f:
            return f.read().splitlines()

    assert lines("train_src") == ["<2de> a house", "<2de> the cat",
                                  "<2en> ein Haus", "<2en> die Katze"]
    assert lines("train_tgt") == ["ein Haus", "die Katze", "a house", "the cat"]
    # Dev measures the recipe's direction only: En->De, with its tag; references untouched.
    assert lines("dev_src") == ["<2de> a cat"] and lines("dev_tgt") == ["eine Katze"]


def test_bidirectional_corpus_refuses_unpaired_files(tmp_path):
    recipe = _recipe_module()
    for name, text in (("train.en", "a\nb\n"), ("train.de", "a\n"), ("dev.en", "c\n"),
                       ("dev.de", "c\n")):
        (tmp_path / name).write_text(text, encoding="utf-8")
    with pytest.raises(SystemExit, match="train.en has 2 lines, train.de 1"):
        recipe.write_bidirectional_corpus(str(tmp_path), str(tmp_path / "bidi"))
