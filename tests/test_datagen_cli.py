"""run.py --mode=datagen end to end on the shipped WSJ sample, with the section flags."""
import subprocess
import sys

import pytest
import tensorflow as tf

from t2t_lite.data_generators import generator_utils, text_encoder, tree_linearization, treebank
from tests.conftest import REPO_ROOT


@pytest.mark.slow
def test_run_py_datagen_parsing_from_mrg_sections(ptb_sample_dir, tmp_path):
    data_dir = tmp_path / "data"
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "run.py"), "--mode=datagen",
         "--problem=parsing_english_ptb16k", f"--data_dir={data_dir}",
         f"--tmp_dir={tmp_path / 'tmp'}", f"--wsj_dir={ptb_sample_dir}",
         "--wsj_train_sections=00", "--wsj_dev_sections=01"],
        check=False, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    dev = sorted(data_dir.glob("parsing_english_ptb16k-dev-*"))
    train = sorted(data_dir.glob("parsing_english_ptb16k-train-*"))
    assert len(dev) == 1 and len(train) == 100
    source = text_encoder.SubwordTextEncoder(str(data_dir / "wsj_source.vocab.512"))
    target = text_encoder.SubwordTextEncoder(str(data_dir / "wsj_target.vocab.16384"))
    examples = [tf.train.Example.FromString(r) for r in generator_utils.read_records(str(dev[0]))]
    decoded = []
    for ex in examples:
        inputs = list(ex.features.feature["inputs"].int64_list.value)
        targets = list(ex.features.feature["targets"].int64_list.value)
        assert inputs[-1] == 1 and targets[-1] == 1
        decoded.append((source.decode(inputs[:-1]), target.decode(targets[:-1])))
    expected = [tree_linearization.linearize(t) for t in treebank.read_wsj_sections(ptb_sample_dir, "01")]
    assert sorted(decoded) == sorted(expected)


def test_run_py_datagen_bad_section_names_the_flag(ptb_sample_dir, tmp_path):
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "run.py"), "--mode=datagen",
         "--problem=parsing_english_ptb16k", f"--data_dir={tmp_path / 'data'}",
         f"--tmp_dir={tmp_path / 'tmp'}", f"--wsj_dir={ptb_sample_dir}",
         "--wsj_train_sections=2x-21"],
        check=False, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode != 0
    assert "2x-21" in result.stderr
    assert not list(tmp_path.glob("data/*-train-*"))
