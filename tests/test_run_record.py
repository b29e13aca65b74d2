"""A run records what it was made of (issue 40, item 2): hparams.json's checksum, the
vocabulary files' and data markers' hashes (run_inputs.json), the architecture checks of the
tools that read a run, datagen --overwrite_data under a live run, the one attention-depth
check and one-line vocabulary errors. Library tests first, then run.py on the tiny run."""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil

import pytest

from t2t_lite import errors
from t2t_lite.errors import UserError
from t2t_lite.hparams_lib import create_hparams
from t2t_lite.utils import run_lock, run_metadata, validation
from tests.conftest import error_line
from tests.run_py import PROBLEM, TINY, run, steps, train_flags
from tests.run_py import snapshot as _snapshot


# --- hparams.json's checksum ---------------------------------------------------------------------
def test_hparams_json_checksum_refuses_a_hand_edit_and_reads_an_old_file(tmp_path):
    hparams = create_hparams("transformer_tiny", TINY)
    run_metadata.save_hparams(str(tmp_path), hparams)
    path = tmp_path / "hparams.json"
    assert run_metadata.read_hparams_json(str(path)) == hparams.values()
    # Another layout of the same entries is the same file.
    stored = json.loads(path.read_text())
    path.write_text(json.dumps(stored, indent=4))
    assert create_hparams("transformer_tiny", hparams_json_path=str(path)) == hparams

    stored["learning_rate_constant"] = 0.5
    path.write_text(json.dumps(stored, indent=0, sort_keys=True))
    with pytest.raises(UserError, match=rf"^{path}: the run's hparams were edited outside "
                                        r"t2t_lite .* --hparams=name=value on the resumed "
                                        "training command"):
        create_hparams("transformer_tiny", hparams_json_path=str(path))

    # A file written before checksums (no entry) is read as it is.
    del stored[run_metadata.CHECKSUM_KEY]
    path.write_text(json.dumps(stored))
    assert create_hparams("transformer_tiny", hparams_json_path=str(path)
                          ).learning_rate_constant == 0.5


# --- What a tool may change ----------------------------------------------------------------------
def test_readers_refuse_the_changes_resume_refuses(tmp_path):
    hparams = create_hparams("transformer_tiny", TINY)
    run_metadata.save_hparams(str(tmp_path), hparams)
    changed = create_hparams("transformer_tiny", TINY.replace("num_heads=2", "num_heads=4")
                             + ",pos=none")
    with pytest.raises(UserError, match=rf"^--mode=decode --hparams changes what {tmp_path} "
                                        "was trained with: num_heads 2 -> 4, pos 'timing' -> "
                                        "'none'; "):
        run_metadata.check_same_model(str(tmp_path), changed.values(), "decode")
    safe = create_hparams("transformer_tiny", TINY + ",learning_rate_constant=0.5")
    run_metadata.check_same_model(str(tmp_path), safe.values(), "decode")
    assert run_metadata.model_changes(hparams.values(), changed.values()) == (
        ["num_heads 2 -> 4", "pos 'timing' -> 'none'"], [])


# --- The vocabulary and the data -----------------------------------------------------------------
class _Encoder:
    def __init__(self, filename):
        self.filename = filename


def test_changed_vocabulary_is_refused_naming_the_file_and_data_changes_are_listed(tmp_path):
    from t2t_lite.data_generators import data_marker

    run_dir, data_dir = tmp_path / "run", tmp_path / "data"
    data_dir.mkdir()
    vocab = data_dir / "vocab.x.subwords"
    vocab.write_text("'<pad>'\n'<EOS>'\n'a_'\n'b_'\n")
    marker = data_dir / f"x.train{data_marker.MARKER_SUFFIX}"
    marker.write_text('{"shards": []}')
    encoders = {"inputs": _Encoder(str(vocab)), "targets": _Encoder(str(vocab))}
    recorded = data_marker.run_inputs(encoders, str(data_dir), "x")
    assert list(recorded["vocab"]) == ["vocab.x.subwords"]
    assert list(recorded["data"]) == [marker.name]

    # A run made before the record: nothing to compare, nothing refused.
    run_metadata.save_hparams(str(run_dir), create_hparams("transformer_tiny"))
    assert run_metadata.check_inputs(str(run_dir), recorded, "decode") == []
    run_metadata.save_inputs(str(run_dir), recorded)
    assert run_metadata.check_inputs(str(run_dir), recorded, "decode") == []

    marker.write_text('{"shards": [1]}')  # the data made again
    changes = run_metadata.check_inputs(
        str(run_dir), data_marker.run_inputs(encoders, str(data_dir), "x"), "train")
    now = data_marker.run_inputs({}, str(data_dir), "x")["data"][marker.name]
    assert changes == [f"data {marker.name} sha256 {recorded['data'][marker.name][:12]} -> "
                       + now[:12]]

    vocab.write_text("'<pad>'\n'<EOS>'\n'b_'\n'a_'\n")  # same size, other order
    old = recorded["vocab"]["vocab.x.subwords"]["sha256"][:12]
    new = data_marker.run_inputs(encoders, None, None)["vocab"]["vocab.x.subwords"]["sha256"]
    with pytest.raises(UserError, match=rf"^the vocabulary {vocab} changed since run {run_dir} "
                                        rf"was trained \(sha256 {old}\.\. now {new[:12]}\.\.\)"):
        run_metadata.check_inputs(
            str(run_dir), data_marker.run_inputs(encoders, None, None), "decode")
    # --mode=average loads no problem: it hashes the files at the recorded paths.
    with pytest.raises(UserError, match=rf"^the vocabulary {vocab} changed since run "):
        run_metadata.check_recorded_vocab(str(run_dir), "average")


def test_duplicated_vocab_line_is_one_error_line_naming_file_and_line(tmp_path, capsys):
    from t2t_lite.data_generators import text_encoder

    path = tmp_path / "vocab.subwords"
    path.write_text("'<pad>'\n'<EOS>'\n'a_'\n'a_'\n")
    with pytest.raises(SystemExit) as exit_info, errors.report_user_errors():
        text_encoder.SubwordTextEncoder(str(path))
    assert exit_info.value.code == 1
    assert capsys.readouterr().err == (f"error: {path}:4: duplicate subtoken 'a_' (first on "
                                       "line 3); every subtoken must appear once\n")


# --- One declaration per hparam ------------------------------------------------------------------
def test_every_hparam_of_every_set_is_declared_once():
    from t2t_lite import hparams_support, registry

    declared = hparams_support.HPARAMS
    for name in registry.list_hparams():
        missing = set(create_hparams(name).values()) - set(declared)
        assert not missing, (name, missing)
    for name, h in declared.items():
        assert h.doc and h.support in (hparams_support.USED_KIND, hparams_support.NO_EFFECT_KIND,
                                       hparams_support.NOT_SUPPORTED_KIND,
                                       hparams_support.OWN_KIND), name
        assert h.resume in (hparams_support.SAFE, hparams_support.VARIABLES,
                            hparams_support.COMPUTATION), name
    # The resume check reads the same declarations.
    assert set(run_metadata.CHANGES_VARIABLES) == {
        n for n, h in declared.items() if h.resume == hparams_support.VARIABLES}
    assert set(run_metadata.CHANGES_COMPUTATION) == {"multiply_embedding_mode", "norm_epsilon",
                                                     "num_heads", "pos"}


def _outside_and_inside(interval) -> tuple[list[float], float]:
    """Values outside an interval (at each finite end: the end itself when it is open, one
    past it when it is closed) and one inside."""
    outside = []
    if math.isfinite(interval.low):
        outside.append(interval.low - (1 if interval.low_closed else 0))
    if math.isfinite(interval.high):
        outside.append(interval.high + (1 if interval.high_closed else 0))
    if math.isfinite(interval.low) and math.isfinite(interval.high):
        inside = (interval.low + interval.high) / 2
    else:
        inside = interval.low + 1 if math.isfinite(interval.low) else interval.high - 1
    return outside, inside


def test_every_declared_range_is_enforced_by_validation():
    from t2t_lite import hparams_support

    checked = {n: h.check for n, h in hparams_support.HPARAMS.items() if h.check}
    assert {"hidden_size", "num_heads", "batch_size", "attention_key_channels",
            "relu_dropout", "label_smoothing", "sampling_keep_top_p"} <= set(checked)
    rules = {"must be > 0", "must be >= 0", "must be in [0, 1)", "must be in (0, 1]"}
    assert {interval.rule for interval in checked.values()} == rules
    for name, interval in checked.items():
        outside, inside = _outside_and_inside(interval)
        assert outside
        for bad in outside:
            with pytest.raises(UserError,
                               match=rf"^hparams {name}={bad!r}: {re.escape(interval.rule)} "):
                validation.check_hparams({name: bad})
        validation.check_hparams({name: inside})
        # The one default of each hparam lies in its interval.
        assert hparams_support.default(name) in interval, name


def test_resume_rule_of_each_declaration_decides_what_a_reader_may_change(tmp_path):
    from t2t_lite import hparams_support

    stored = create_hparams("transformer_tiny").values()
    for name, h in hparams_support.HPARAMS.items():
        if name not in stored or not isinstance(stored[name], (int, float, str)):
            continue
        other = dict(stored, **{name: not stored[name] if isinstance(stored[name], bool)
                                else stored[name] + 1 if isinstance(stored[name], (int, float))
                                else stored[name] + "x"})
        refused, safe = run_metadata.model_changes(stored, other)
        assert (refused, safe)[h.resume == hparams_support.SAFE] != [], name
        assert (safe, refused)[h.resume == hparams_support.SAFE] == [], name


# --- One attention-depth check -------------------------------------------------------------------
@pytest.mark.parametrize("overrides, message", [
    ("num_heads=3,attention_key_channels=64",
     "hparams.attention_key_channels=64 is not divisible by hparams.num_heads=3: "),
    ("num_heads=3,attention_key_channels=63",
     ("hparams.hidden_size=128 is not divisible by hparams.num_heads=3: each head takes an "
      "equal share of the attention value depth; ")),
    ("num_heads=5", "hparams.hidden_size=128 is not divisible by hparams.num_heads=5: "),
])
def test_attention_depth_check_is_the_same_in_validation_and_the_layers(overrides, message):
    from t2t_lite.layers import common_attention

    hparams = create_hparams("transformer_tiny", overrides)
    with pytest.raises(UserError) as from_validation:
        validation.check_hparams(hparams)
    assert str(from_validation.value).startswith(message)
    with pytest.raises(UserError) as from_layer:
        common_attention.MultiheadAttention(
            hparams.num_heads, hparams.hidden_size, key_depth=hparams.attention_key_channels,
            value_depth=hparams.attention_value_channels)
    assert str(from_layer.value) == str(from_validation.value)
    # Depths the heads share equally pass both.
    good = create_hparams("transformer_tiny", "num_heads=3,attention_key_channels=63,"
                                              "attention_value_channels=63")
    validation.check_hparams(good)
    common_attention.MultiheadAttention(3, 128, key_depth=63, value_depth=63)


# --- datagen --overwrite_data under a live run ---------------------------------------------------
def test_readers_lock_refuses_overwrite_while_held(tmp_path):
    assert run_lock.refuse_if_read(str(tmp_path)) is None  # never read: nothing created
    assert run_lock.hold_data_dir("") is None  # no data_dir: no file in the current directory
    assert not os.listdir(tmp_path)
    reader = run_lock.hold_data_dir(str(tmp_path))
    assert reader is not None
    try:
        # A second open file description, as another process has.
        with pytest.raises(UserError, match=rf"^--overwrite_data: a live training run reads "
                                            rf"--data_dir={tmp_path} "):
            run_lock.refuse_if_read(str(tmp_path))
    finally:
        os.close(reader)
    writer = run_lock.refuse_if_read(str(tmp_path))  # the run ended
    assert writer is not None
    os.close(writer)


# --- Through run.py ------------------------------------------------------------------------------
@pytest.mark.slow
def test_eval_with_other_architecture_and_hand_edited_hparams_are_refused(
        tiny_run_data_dir, tiny_run_trained, tmp_path):
    output_dir = shutil.copytree(tiny_run_trained, tmp_path / "run")
    assert (output_dir / run_metadata.INPUTS_NAME).exists()
    before = _snapshot(output_dir)
    line = error_line(run("--mode=eval", f"--output_dir={output_dir}", "--eval_steps=1",
                          "--hparams=num_heads=1,pos=none", cwd=tmp_path))
    assert line.startswith(f"error: --mode=eval --hparams changes what {output_dir} was "
                           "trained with: num_heads 2 -> 1, pos 'timing' -> 'none'; ")
    assert _snapshot(output_dir) == before

    path = output_dir / "hparams.json"
    stored = json.loads(path.read_text())
    stored["learning_rate_constant"] = 0.5
    path.write_text(json.dumps(stored, indent=0, sort_keys=True))
    before = _snapshot(output_dir)
    line = error_line(run(*train_flags(tiny_run_data_dir, output_dir, "--train_steps=6"),
                          cwd=tmp_path))
    assert line.startswith(f"error: {path}: the run's hparams were edited outside t2t_lite")
    assert _snapshot(output_dir) == before and steps(output_dir) == [2, 4]


@pytest.mark.slow
def test_datagen_overwrite_refuses_while_a_training_run_reads_the_data(tiny_run_data_dir,
                                                                       tmp_path):
    data_dir = shutil.copytree(tiny_run_data_dir, tmp_path / "data")
    reader = run_lock.hold_data_dir(str(data_dir))  # as a live training run holds it
    before = _snapshot(data_dir)
    try:
        line = error_line(run("--mode=datagen", f"--problem={PROBLEM}", f"--data_dir={data_dir}",
                              "--overwrite_data", cwd=tmp_path))
    finally:
        os.close(reader)
    assert line.startswith(f"error: --overwrite_data: a live training run reads "
                           f"--data_dir={data_dir} ")
    assert _snapshot(data_dir) == before


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["decode", "train"])
def test_decode_and_resume_refuse_a_vocabulary_edited_after_training(tmp_path, mode):
    from t2t_lite.data_generators import data_marker, text_encoder

    data_dir, run_dir = tmp_path / "data", tmp_path / "run"
    data_dir.mkdir()
    vocab = data_dir / "vocab.translate_files.100.subwords"
    vocab.write_text("'<pad>'\n'<EOS>'\n'a_'\n'b_'\n'a'\n'b'\n'_'\n")
    # The record a training run on this vocabulary writes (its checkpoint is never reached).
    run_metadata.save_hparams(str(run_dir), create_hparams("transformer_tiny", TINY))
    run_metadata.save_flags(str(run_dir), {"problem": "translate_files", "model": "transformer",
                                           "hparams_set": "transformer_tiny",
                                           "data_dir": str(data_dir)})
    encoder = text_encoder.SubwordTextEncoder(str(vocab))
    recorded = data_marker.run_inputs({"inputs": encoder, "targets": encoder}, None, None)
    run_metadata.save_inputs(str(run_dir), recorded)
    # A complete checkpoint on disk, which makes a training run a resume, and a train shard
    # for run.py's first checks (their contents are never read).
    (run_dir / "ckpt-2.index").write_bytes(b"")
    (run_dir / "ckpt-2.data-00000-of-00001").write_bytes(b"")
    (data_dir / "translate_files-train-00000-of-00001").write_bytes(b"")
    vocab.write_text("'<pad>'\n'<EOS>'\n'b_'\n'a_'\n'a'\n'b'\n'_'\n")  # same size, reordered
    (tmp_path / "in.txt").write_text("a b\n")
    before = {**_snapshot(run_dir), **_snapshot(data_dir)}
    if mode == "decode":
        flags = [f"--output_dir={run_dir}", f"--decode_from_file={tmp_path / 'in.txt'}",
                 f"--decode_to_file={tmp_path / 'out.txt'}"]
    else:
        flags = ["--problem=translate_files", f"--data_dir={data_dir}",
                 "--hparams_set=transformer_tiny", f"--hparams={TINY}",
                 f"--output_dir={run_dir}", "--train_steps=6"]
    result = run(f"--mode={mode}", *flags, cwd=tmp_path)
    assert result.returncode == 1
    old = recorded["vocab"][vocab.name]["sha256"][:12]
    new = hashlib.sha256(vocab.read_bytes()).hexdigest()[:12]
    assert error_line(result) == (
        f"error: the vocabulary {vocab} changed since run {run_dir} was trained (sha256 "
        f"{old}.. now {new}..): the model's ids would mean other subwords; restore the "
        f"vocabulary the run was trained with (--mode={mode} --data_dir=<its data>), or train "
        "a new run in another --output_dir")
    assert {**_snapshot(run_dir), **_snapshot(data_dir)} == before
    assert not (tmp_path / "out.txt").exists()
