"""An ensemble of checkpoints through run.py: `--checkpoint_path=A,B` in decode mode and the
SavedModel export (`decoding.runs.restore_ensemble`), and its one-line refusals."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.decoding import decode_hparams, decoding, runs, text_batches
from t2t_lite.errors import UserError
from t2t_lite.models.ensemble import TransformerEnsemble
from tests.conftest import error_line
from tests.run_py import run

LINES = ["0 1 0 1 1", "1 1 0", "0 0 0 1 0 1 0"]  # binary symbols (ids 2 and 3)
DECODE_HPARAMS = "beam_size=2,extra_length=4,log_results=False"


@pytest.fixture(scope="module")
def trained(tiny_run_trained):
    return tiny_run_trained


@pytest.fixture(scope="module")
def other(trained, tmp_path_factory):
    """A second run: a copy of `trained` whose ckpt-4 weights are scaled by 3, so that its
    decodes and scores differ from the original's (4 training steps barely move them)."""
    path = tmp_path_factory.mktemp("ensemble") / "other"
    shutil.copytree(trained, path)
    run_ = runs.open_run(runs.resolve("decode", str(trained)))
    _, model = runs.restore_model(run_, f"{trained}/ckpt-4")
    for variable in model.trainable_weights:
        variable.assign(variable * 3.0)
    for name in path.glob("ckpt-4.*"):
        name.unlink()
    tf.train.Checkpoint(model=model).write(str(path / "ckpt-4"))
    return path


def _decode(trained, tmp_path, checkpoint_path: str, name: str) -> list[str]:
    source = tmp_path / "inputs.txt"
    source.write_text("\n".join(LINES) + "\n")
    out = tmp_path / name
    result = run("--mode=decode", f"--output_dir={trained}",
                 f"--checkpoint_path={checkpoint_path}", f"--decode_hparams={DECODE_HPARAMS}",
                 f"--decode_from_file={source}", f"--decode_to_file={out}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    return out.read_text().splitlines()


@pytest.mark.slow
def test_decode_mode_decodes_with_the_ensemble_of_the_checkpoints(trained, other, tmp_path):
    both = f"{trained}/ckpt-4,{other}"
    decoded = _decode(trained, tmp_path, both, "ensemble.txt")
    # The same decodes as the library's ensemble of the two checkpoints ...
    run_ = runs.open_run(runs.resolve("decode", str(trained)))
    checkpoints, model = runs.restore_model(run_, both)
    assert isinstance(model, TransformerEnsemble) and len(model.members) == 2
    assert checkpoints == f"{trained}/ckpt-4,{other}/ckpt-4"
    hp = decode_hparams.decode_hparams(DECODE_HPARAMS)
    expected = decoding.decode_lines(LINES, decoding.make_infer_fn(model, hp, run_.target_space_id),
                                     run_.encoders["inputs"], run_.encoders["targets"], hp)
    assert decoded == expected and len(decoded) == len(LINES)
    # ... and a checkpoint ensembled with itself decodes as that checkpoint alone.
    alone = _decode(trained, tmp_path, f"{trained}/ckpt-4", "alone.txt")
    assert _decode(trained, tmp_path, f"{trained}/ckpt-4,{trained}", "self.txt") == alone


@pytest.mark.slow
def test_the_saved_model_of_an_ensemble_serves_its_decodes(trained, other, tmp_path):
    both = f"{trained}/ckpt-4,{other}/ckpt-4"
    export_dir = tmp_path / "export"
    result = run("--mode=export", f"--output_dir={trained}", f"--checkpoint_path={both}",
                 f"--export_dir={export_dir}", f"--decode_hparams={DECODE_HPARAMS}",
                 cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    (version,) = list(export_dir.iterdir())
    served = tf.saved_model.load(str(version)).signatures["encode_decode_ids"]
    run_ = runs.open_run(runs.resolve("export", str(trained)))
    _, model = runs.restore_model(run_, both)
    inputs = np.array([[2, 3, 2, 3, 1], [3, 3, 1, 0, 0]], np.int32)
    features = {"inputs": inputs, "target_space_id": run_.target_space_id}
    expected = model.infer(features, decode_length=4, beam_size=2)
    result = served(inputs=tf.constant(inputs))
    for served_row, expected_row in zip(result["outputs"].numpy(), expected["outputs"].numpy()):
        np.testing.assert_array_equal(text_batches.save_until_eos(served_row),
                                      text_batches.save_until_eos(expected_row))
    np.testing.assert_allclose(result["scores"], expected["scores"], rtol=1e-5)
    # The ensemble's scores, not those of either member alone.
    for member in model.members:
        alone = member.infer(features, decode_length=4, beam_size=2)
        assert not np.allclose(alone["scores"], expected["scores"], rtol=1e-4)


def test_a_member_with_another_vocabulary_is_refused(trained, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(trained, other)
    flags = json.loads((other / "flags.json").read_text())
    flags["problem"] = "algorithmic_reverse_decimal40"  # 10 symbols, not 2
    (other / "flags.json").write_text(json.dumps(flags))
    run_ = runs.open_run(runs.resolve("decode", str(trained)))
    with pytest.raises(UserError) as error:
        runs.restore_model(run_, f"{trained}/ckpt-4,{other}/ckpt-4")
    message = str(error.value)
    assert f"{other}/ckpt-4 was trained with another vocabulary" in message
    assert "algorithmic_reverse_decimal40" in message and "\n" not in message


@pytest.mark.parametrize("mode, flag, expected", [
    ("decode", "--xla_compile", "--xla_compile works with one model, not an ensemble"),
    ("export", "--export_format=ctranslate2",
     "--export_format=ctranslate2 exports one model, not an ensemble"),
    ("attention", "--decode_from_file=inputs.txt",
     "--mode=attention shows one model's attention, not an ensemble's"),
])
def test_what_takes_one_model_refuses_an_ensemble_in_one_line(trained, tmp_path, mode, flag,
                                                               expected):
    (tmp_path / "inputs.txt").write_text("0 1\n")
    result = run(f"--mode={mode}", f"--output_dir={trained}",
                 f"--checkpoint_path={trained}/ckpt-2,{trained}/ckpt-4", flag,
                 "--decode_to_file=out.txt", cwd=tmp_path)
    assert result.returncode != 0
    assert error_line(result).startswith(f"error: {expected}")
