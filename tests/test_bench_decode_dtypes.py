"""bench/compare_decode_dtypes.py on the session's tiny run: each dtype decodes through
run.py, float32's own lines count as identical, and the table holds what the decodes say."""
import sys

import pytest

from tests.conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench"))
import compare_decode_dtypes

from t2t_lite.evaluation import bleu_hook

LINES = ["0 1 0 1 1", "1 1 0", "0 0 0 1 0 1 0", "1 0 1 1 0 0 1 0"]


@pytest.mark.slow
def test_prints_each_dtype_with_equal_lines_and_bleu_of_its_own_decodes(
        tiny_run_trained, tmp_path, capsys):
    source, reference = tmp_path / "src.txt", tmp_path / "ref.txt"
    source.write_text("\n".join(LINES) + "\n")
    reference.write_text("\n".join(" ".join(reversed(line.split())) for line in LINES) + "\n")
    work = tmp_path / "work"
    assert compare_decode_dtypes.main([
        f"--output_dir={tiny_run_trained}", f"--source={source}", f"--reference={reference}",
        "--rounds=1", "--decode_hparams=beam_size=2,extra_length=4", f"--work={work}"]) == 0
    out = capsys.readouterr().out
    rows = {line.split("|")[0].strip(): [c.strip() for c in line.split("|")[1:]]
            for line in out.splitlines() if line.startswith(("float32 ", "bfloat16 "))}
    assert set(rows) == {"float32", "bfloat16"}
    assert rows["float32"][1] == "1.00x" and rows["float32"][2] == f"{len(LINES)} of {len(LINES)}"
    decodes = {d: (work / f"decodes.{d}.round0").read_text().splitlines() for d in rows}
    same = sum(a == b for a, b in zip(decodes["float32"], decodes["bfloat16"]))
    assert rows["bfloat16"][2] == f"{same} of {len(LINES)}"
    refs = reference.read_text().splitlines()
    for dtype, row in rows.items():
        assert float(row[3]) == pytest.approx(
            bleu_hook.sacrebleu_corpus_bleu(refs, decodes[dtype])[0].score, abs=0.005)
    assert "round 0 bfloat16  decode loop" in out
