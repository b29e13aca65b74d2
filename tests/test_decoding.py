"""Decoding (`--mode=decode`): t2t's file reading, sorting, batching, output order and
formats with a fake model; end to end with a real Transformer on the t2t fixture checkpoint."""
import io
import json
import re
import shutil
import threading
import time
import types

import numpy as np
import pytest

from t2t_lite.bin import t2t_decoder
from t2t_lite.data_generators import text_encoder
from t2t_lite.decoding import decode_hparams, decoding, input_files, text_batches
from t2t_lite.errors import UserError

ENCODER = text_encoder.TextEncoder()  # "3 4" <-> [5, 6]
ENCODERS = {"inputs": ENCODER, "targets": ENCODER}
EOS = 1


class FakeModel:
    """infer_fn: beam 0 = the input reversed + EOS + junk, beam 1 = the input as is + EOS;
    scores -1.234 * len and -5.678. Records every batch it receives."""

    def __init__(self, beams=1):
        self.beams = beams
        self.batches = []

    def __call__(self, inputs):
        self.batches.append(inputs.copy())
        rows, scores = [], []
        for row in inputs:
            ids = list(text_batches.save_until_eos(row))
            beam_rows = [ids[::-1] + [EOS, 7, 7], ids + [EOS]]
            rows.append(beam_rows[: self.beams])
            scores.append([-1.234 * len(ids), -5.678][: self.beams])
        width = max(len(b) for r in rows for b in r)
        out = np.zeros((len(rows), self.beams, width), np.int32)
        for i, r in enumerate(rows):
            for k, b in enumerate(r):
                out[i, k, : len(b)] = b
        scores = np.array(scores, np.float32)
        if self.beams == 1:
            return out[:, 0], scores[:, 0]
        return out, scores


def _read(path) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def hp(**overrides):
    text = ",".join(f"{k}={v}" for k, v in overrides.items())
    return decode_hparams.decode_hparams(text)


def test_decode_hparams_defaults_are_t2ts():
    h = decode_hparams.decode_hparams()
    assert (h.beam_size, h.alpha, h.extra_length, h.batch_size) == (4, 0.6, 100, 0)
    assert (h.return_beams, h.write_beam_scores, h.max_input_size, h.delimiter) == (
        False, False, -1, "\n")
    h = decode_hparams.decode_hparams("beam_size=21,alpha=0.3,extra_length=300,return_beams=true")
    assert (h.beam_size, h.alpha, h.extra_length, h.return_beams) == (21, 0.3, 300, True)
    with pytest.raises(ValueError, match="beam_siz"):
        decode_hparams.decode_hparams("beam_siz=2")


def test_read_inputs(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("  a b \n\nc\n", encoding="utf-8")
    assert input_files.read_inputs(str(path)) == ["a b", "", "c"]
    path.write_text("x y|z|", encoding="utf-8")
    assert input_files.read_inputs(str(path), delimiter="|") == ["x y", "z"]


def test_sort_inputs_stable_longest_first():
    inputs = ["1 2", "3", "4 5 6", "7 8", "9"]
    sorted_inputs, keys = text_batches.sort_inputs(inputs)
    assert sorted_inputs == ["4 5 6", "1 2", "7 8", "3", "9"]
    assert [sorted_inputs[keys[i]] for i in range(len(inputs))] == inputs


def test_batch_inputs_pads_appends_eos_and_truncates():
    batches = list(text_batches.batch_inputs(["1 2 3", "4", "5 6"], ENCODER, 2))
    np.testing.assert_array_equal(batches[0], [[3, 4, 5, EOS], [6, EOS, 0, 0]])
    np.testing.assert_array_equal(batches[1], [[7, 8, EOS]])
    assert batches[0].dtype == np.int32
    truncated = list(text_batches.batch_inputs(["1 2 3"], ENCODER, 2, max_input_size=3))
    np.testing.assert_array_equal(truncated[0], [[3, 4, EOS]])


def test_decode_lines_batches_in_t2t_order_and_writes_in_input_order():
    lines = ["1", "2 3 4", "5 6", "7 8 9", "10"]
    model = FakeModel()
    out = decoding.decode_lines(lines, model, ENCODER, ENCODER, hp(batch_size=2))
    # Reversed inputs, cut at the EOS, in the input order.
    assert out == ["1", "4 3 2", "6 5", "9 8 7", "10"]
    # Batches: the sorted records (2 3 4, 7 8 9 | 5 6, 1 | 10), each padded to its longest.
    np.testing.assert_array_equal(model.batches[0], [[4, 5, 6, EOS], [9, 10, 11, EOS]])
    np.testing.assert_array_equal(model.batches[1], [[7, 8, EOS], [3, EOS, 0]])
    np.testing.assert_array_equal(model.batches[2], [[12, EOS]])


def test_decode_lines_default_batch_size_is_32():
    model = FakeModel()
    decoding.decode_lines([str(i) for i in range(70)], model, ENCODER, ENCODER, hp())
    assert [len(b) for b in model.batches] == [32, 32, 6]


class SlowFakeModel(FakeModel):
    """FakeModel whose call sleeps longer for earlier batches (so later batches finish first
    when decoded in parallel) and records how many calls ran at once."""

    def __init__(self):
        super().__init__()
        self.lock = threading.Lock()
        self.active = self.most_active = self.calls = 0

    def __call__(self, inputs):
        with self.lock:
            self.active += 1
            self.most_active = max(self.most_active, self.active)
            delay = 0.04 * max(0, 5 - self.calls)
            self.calls += 1
        time.sleep(delay)
        try:
            with self.lock:
                return super().__call__(inputs)
        finally:
            with self.lock:
                self.active -= 1


def test_parallel_batches_run_at_once_and_keep_the_order():
    lines = [" ".join(str(i + j) for j in range(1 + i % 4)) for i in range(2, 23)]
    expected = decoding.decode_lines(lines, FakeModel(), ENCODER, ENCODER, hp(batch_size=2))
    model = SlowFakeModel()
    out = decoding.decode_lines(lines, model, ENCODER, ENCODER, hp(batch_size=2),
                                parallel_batches=3)
    assert out == expected
    assert model.calls == 11 and model.most_active >= 2
    assert model.most_active <= 3


def test_parallel_batch_count_from_the_flag(monkeypatch):
    from t2t_lite.hparams_lib import create_hparams

    monkeypatch.setattr(decoding, "usable_cores", lambda: 3)
    hparams = create_hparams("transformer_tiny")
    beam = hp(beam_size=4)
    assert t2t_decoder.parallel_batches(_flags(decode_parallel_batches=2), hparams, beam) == 2
    auto = t2t_decoder.parallel_batches(_flags(decode_parallel_batches=0), hparams, beam)
    import tensorflow as tf

    assert auto == (1 if tf.config.list_logical_devices("GPU") else 3)
    monkeypatch.setattr(decoding, "usable_cores", lambda: 64)
    many = t2t_decoder.parallel_batches(_flags(decode_parallel_batches=0), hparams, beam)
    assert many == (1 if tf.config.list_logical_devices("GPU") else 4)
    # Seeded sampling draws in batch order: one batch at a time whatever the flag says.
    sampling = create_hparams("transformer_tiny", "sampling_method=random")
    assert t2t_decoder.parallel_batches(
        _flags(decode_parallel_batches=2), sampling, hp(beam_size=1)) == 1
    with pytest.raises(UserError, match="--decode_parallel_batches=-1"):
        t2t_decoder.parallel_batches(_flags(decode_parallel_batches=-1), hparams, beam)


@pytest.mark.slow
def test_parallel_batches_decode_a_real_model_to_the_same_lines(t2t_fixtures, wmt_toy_dir):
    """Beam search and greedy decoding of 40 dev lines with the t2t fixture checkpoint, 4
    lines a batch: 3 batches at a time on threads give the same ids and bit-equal scores for
    every batch, and the same lines, as one at a time."""
    from t2t_lite.hparams_lib import create_hparams
    from t2t_lite.models import t2t_checkpoint

    vocab = text_encoder.SubwordTextEncoder(
        str(t2t_fixtures / "vocab.translate_toy_ende1k.1024.subwords"))
    model = t2t_checkpoint.load_model(str(t2t_fixtures / "ckpt_A_trained"),
                                      create_hparams("transformer_tiny"))
    lines = input_files.read_inputs(str(wmt_toy_dir / "dev.en"))[:40]
    for settings in ({"beam_size": 4, "alpha": 0.6}, {"beam_size": 1}):
        decode_hp = hp(batch_size=4, extra_length=10, **settings)
        infer_fn = decoding.make_infer_fn(model, decode_hp)
        results = {1: {}, 3: {}}

        def recording(batch, parallel, infer_fn=infer_fn, results=results):
            outputs, scores = infer_fn(batch)
            results[parallel][batch.tobytes()] = (outputs, scores)
            return outputs, scores

        texts = {parallel: decoding.decode_lines(
            lines, lambda batch, p=parallel: recording(batch, p), vocab, vocab, decode_hp,
            parallel_batches=parallel) for parallel in (1, 3)}
        assert texts[3] == texts[1]
        assert results[3].keys() == results[1].keys() and len(results[1]) == 10
        for key, (outputs, scores) in results[1].items():
            np.testing.assert_array_equal(results[3][key][0], outputs)
            np.testing.assert_array_equal(results[3][key][1], scores)
        all_scores = np.concatenate([scores for _, scores in results[1].values()])
        assert len(set(all_scores.tolist())) > 30  # 40 different hypotheses' scores


def test_format_decodes_beams_and_scores():
    outputs = np.array([[[5, 6, EOS, 9], [7, EOS, 0, 0]]])
    scores = np.array([[-1.234, -5.678]])
    assert text_batches.format_decodes(outputs, scores, ENCODER) == ["3 4"]
    assert text_batches.format_decodes(outputs, scores, ENCODER, return_beams=True) == ["3 4\t5"]
    assert text_batches.format_decodes(outputs, scores, ENCODER, True, True) == [
        "3 4\t-1.23\t5\t-5.68"]
    # No EOS: everything is kept. Beam size 1 with return_beams: a single beam.
    assert text_batches.format_decodes(np.array([[5, 6]]), np.array([-0.5]), ENCODER, True,
                                       True) == ["3 4\t-0.50"]


def test_return_beams_through_decode_lines():
    model = FakeModel(beams=2)
    out = decoding.decode_lines(["1 2", "3"], model, ENCODER, ENCODER,
                                hp(return_beams=True, write_beam_scores=True, beam_size=2))
    assert out == ["2 1\t-2.47\t1 2\t-5.68", "3\t-1.23\t3\t-5.68"]


def test_decode_filename():
    h = hp(beam_size=4, alpha=0.6)
    assert decoding.decode_filename("in.en", "transformer", "transformer_base",
                                    "translate_ende_wmt32k", h) == (
        "in.en.transformer.transformer_base.translate_ende_wmt32k.beam4.alpha0.6.decodes")
    already = "x.beam4.alpha0.6.decodes"
    assert decoding.decode_filename(already, "m", "h", "p", h) == already
    sharded = hp(shards=4, shard_id=2)
    assert decoding.add_shard_to_filename("in.en", sharded) == "in.en002"


def test_decode_from_file_default_name_and_delimiter(tmp_path):
    src = tmp_path / "src.txt"
    src.write_text("1 2\n3 4 5\n6\n", encoding="utf-8")
    parts = ("transformer", "transformer_tiny", "translate_files")
    out = decoding.decode_from_file(FakeModel(), str(src), ENCODERS, hp(), None, parts)
    assert out == str(src) + ".transformer.transformer_tiny.translate_files.beam4.alpha0.6.decodes"
    assert _read(out) == "2 1\n5 4 3\n6\n"
    target = tmp_path / "out" / "decoded.txt"
    out = decoding.decode_from_file(FakeModel(), str(src), ENCODERS, hp(delimiter="|"),
                                    str(target), parts)
    assert out == str(target)
    # With "|" as delimiter the whole file is one record (t2t's behaviour); each output
    # record is followed by the delimiter.
    assert target.read_text(encoding="utf-8") == "6 5 4 3 2 1|"
    with pytest.raises(FileNotFoundError, match="no such file"):
        decoding.decode_from_file(FakeModel(), str(tmp_path / "nope"), ENCODERS, hp(), None,
                                  parts)


def test_decode_interactively():
    out = io.StringIO()
    count = decoding.decode_interactively(FakeModel(), ENCODERS, hp(),
                                          io.StringIO("1 2 3\n\n4\nq\n5\n"), out)
    assert count == 2
    assert out.getvalue() == "3 2 1\n4\n"
    out = io.StringIO()
    decoding.decode_interactively(FakeModel(beams=2), ENCODERS, hp(return_beams=True),
                                  io.StringIO("1 2"), out)
    assert out.getvalue() == '"2 1"\tScore:-2.468000\n"1 2"\tScore:-5.678000\n'


def test_a_word_where_ids_are_expected_is_named_by_file_line(tmp_path, capsys):
    # ENCODER reads ids (t2t's TextEncoder, as the algorithmic problems).
    with pytest.raises(UserError, match=r"^--decode_from_file=f:3: 'two' is not a token id; "):
        text_batches.check_id_inputs(["1 2", "3", "4 two"], ENCODER, "--decode_from_file=f")
    with pytest.raises(UserError, match=r"^F: record 2: '\+' is not a token id"):
        text_batches.check_id_inputs(["1", "2 +"], ENCODER, "F", delimiter=";")
    text_batches.check_id_inputs(["any words"], text_encoder.ByteTextEncoder(), "F")
    # Interactive decoding says why and goes on with the next line.
    out = io.StringIO()
    count = decoding.decode_interactively(FakeModel(), ENCODERS, hp(),
                                          io.StringIO("1 2\nx 1\n3\n"), out)
    assert count == 2 and out.getvalue() == "2 1\n3\n"
    assert capsys.readouterr().err == ("error: stdin:2: 'x' is not a token id; this problem's "
                                       "inputs are integer ids separated by spaces\n")


def test_decode_from_dataset_writes_three_files(tmp_path):
    examples = [
        {"inputs": np.array([3, 4, EOS]), "targets": np.array([5, EOS])},
        {"inputs": np.array([6, EOS]), "targets": np.array([7, 8, EOS])},
        {"inputs": np.array([9, 10, 11, EOS]), "targets": np.array([2, EOS])},
    ]
    model = FakeModel()
    out = decoding.decode_from_dataset(model, iter(examples), ENCODERS, hp(batch_size=2),
                                       str(tmp_path / "dev"), ("m", "h", "p"))
    assert out == str(tmp_path / "dev.m.h.p.beam4.alpha0.6.decodes")
    assert _read(out) == "2 1\n4\n9 8 7\n"
    assert _read(out[: -len("decodes")] + "targets") == "3\n5 6\n0\n"
    assert _read(out[: -len("decodes")] + "inputs") == "1 2\n4\n7 8 9\n"
    np.testing.assert_array_equal(model.batches[0], [[3, 4, EOS], [6, EOS, 0]])


# ---------------------------------------------------------------------------------------------
# End to end with the real Transformer and the t2t fixture checkpoint (trained 25 steps).

def _fixture_setup(t2t_fixtures, wmt_toy_dir, tmp_path):
    """data_dir with the fixture's vocab under translate_files' name; the 3 source lines of
    model_A_trained.npz in a file; their references."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    shutil.copy(t2t_fixtures / "vocab.translate_toy_ende1k.1024.subwords",
                data_dir / "vocab.translate_files.1024.subwords")
    info = json.loads((t2t_fixtures / "model_A.json").read_text())
    src = tmp_path / "src.en"
    src.write_text("\n".join(info["examples"]["source_text"]) + "\n", encoding="utf-8")
    ref = tmp_path / "ref.de"
    ref.write_text("\n".join(info["examples"]["target_text"]) + "\n", encoding="utf-8")
    return data_dir, src, ref


def _flags(**kwargs):
    values = {
        "problem": None, "hparams_set": None, "hparams": "", "data_dir": None,
        "output_dir": None, "model": "transformer", "checkpoint_path": None,
        "decode_hparams": "", "decode_from_file": None, "decode_to_file": None,
        "decode_reference": None, "decode_interactive": False, "score_file": None,
        "random_seed": None, "xla_compile": False,
    }
    values.update(kwargs)
    return types.SimpleNamespace(**values)


@pytest.mark.slow
def test_end_to_end_greedy_matches_t2t_and_checkpoint_round_trip(t2t_fixtures, wmt_toy_dir,
                                                                  tmp_path, capsys):
    import tensorflow as tf

    from t2t_lite.training import avg_checkpoints

    data_dir, src, ref = _fixture_setup(t2t_fixtures, wmt_toy_dir, tmp_path)
    vocab = text_encoder.SubwordTextEncoder(str(data_dir / "vocab.translate_files.1024.subwords"))
    fixture = np.load(t2t_fixtures / "model_A_trained.npz")
    # t2t's greedy decodes of the same three sentences, batched together as decode_from_file
    # batches them (same padded length 17, so the same 37 decode steps).
    expected = [vocab.decode(text_batches.save_until_eos(row)) for row in fixture["greedy_outputs"]]
    assert expected[1:] == ["Vielen Dank", "Die Aussprache ist geschlossen."]

    out_file = tmp_path / "greedy.de"
    t2t_decoder.main(_flags(
        problem="translate_files", hparams_set="transformer_tiny", data_dir=str(data_dir),
        checkpoint_path=str(t2t_fixtures / "ckpt_A_trained"),
        decode_hparams="beam_size=1,extra_length=20", decode_from_file=str(src),
        decode_to_file=str(out_file), decode_reference=str(ref)))
    assert out_file.read_text(encoding="utf-8").split("\n")[:-1] == expected
    printed = capsys.readouterr().out
    assert "BLEU|nrefs:1" in printed and "BLEU_uncased = " in printed

    # The same weights as a t2t_lite run directory (hparams.json, flags.json, ckpt-25):
    # decoding from --output_dir alone, then from its averaged checkpoint, gives the same.
    from t2t_lite.hparams_lib import create_hparams
    from t2t_lite.models import t2t_checkpoint

    hparams = create_hparams("transformer_tiny")
    model = t2t_checkpoint.load_model(str(t2t_fixtures / "ckpt_A_trained"), hparams)
    run_dir = tmp_path / "run"
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), str(run_dir), 3,
                                         checkpoint_name="ckpt")
    manager.save(checkpoint_number=25)
    (run_dir / "hparams.json").write_text(model.hparams.to_json())
    (run_dir / "flags.json").write_text(json.dumps(
        {"problem": "translate_files", "hparams_set": "transformer_tiny",
         "data_dir": str(data_dir)}))
    beam_file = tmp_path / "beam.de"
    t2t_decoder.main(_flags(output_dir=str(run_dir), decode_from_file=str(src),
                         decode_hparams="beam_size=1,extra_length=20",
                         decode_to_file=str(beam_file)))
    assert beam_file.read_text(encoding="utf-8").split("\n")[:-1] == expected
    avg_checkpoints.average_checkpoints([str(run_dir / "ckpt-25")], str(run_dir / "avg"))
    avg_file = tmp_path / "avg.de"
    t2t_decoder.main(_flags(output_dir=str(run_dir / "avg"), decode_from_file=str(src),
                         decode_hparams="beam_size=1,extra_length=20",
                         decode_to_file=str(avg_file)))
    assert avg_file.read_text(encoding="utf-8") == beam_file.read_text(encoding="utf-8")


@pytest.mark.slow
def test_end_to_end_beam_search_n_best(t2t_fixtures, wmt_toy_dir, tmp_path):
    data_dir, src, _ = _fixture_setup(t2t_fixtures, wmt_toy_dir, tmp_path)
    # With write_beam_scores, also the n-best file <decodes>.nbest (docs/decoding.md).
    t2t_decoder.main(_flags(
        problem="translate_files", hparams_set="transformer_tiny", data_dir=str(data_dir),
        checkpoint_path=str(t2t_fixtures / "ckpt_A_trained"),
        decode_hparams="beam_size=3,alpha=0.6,extra_length=20,return_beams=true,"
                       "write_beam_scores=true",
        decode_from_file=str(src)))
    out_default = (str(src) + ".transformer.transformer_tiny.translate_files."
                   "beam3.alpha0.6.decodes")
    lines = _read(out_default).split("\n")[:-1]
    assert len(lines) == 3
    for line in lines:
        fields = line.split("\t")
        assert len(fields) == 6  # 3 beams, each "text\tscore"
        scores = [float(s) for s in fields[1::2]]
        assert scores == sorted(scores, reverse=True)
        assert all(len(s.split(".")[1]) == 2 for s in fields[1::2])
    assert lines[2].split("\t")[0] == "Die Aussprache ist geschlossen."
    nbest = _read(out_default + ".nbest").split("\n")[:-1]
    assert [line.split(" ||| ")[:2] for line in nbest] == [
        [str(i), text] for i, line in enumerate(lines) for text in line.split("\t")[::2]]
    assert all(re.fullmatch(r"-\d+\.\d{6}", line.split(" ||| ")[2]) for line in nbest)


@pytest.mark.slow
def test_xla_compiled_decode_writes_the_same_file(t2t_fixtures, wmt_toy_dir, tmp_path):
    """`--xla_compile` in decode mode: the same n-best file with scores as the graph decoder;
    sampling is refused in one line."""
    data_dir, src, _ = _fixture_setup(t2t_fixtures, wmt_toy_dir, tmp_path)
    common = {
        "problem": "translate_files", "hparams_set": "transformer_tiny",
        "data_dir": str(data_dir), "checkpoint_path": str(t2t_fixtures / "ckpt_A_trained"),
        "decode_from_file": str(src),
        "decode_hparams": "beam_size=3,alpha=0.6,extra_length=20,return_beams=true,"
                          "write_beam_scores=true"}
    outputs = {}
    for xla in (False, True):
        outputs[xla] = tmp_path / f"xla_{xla}.de"
        t2t_decoder.main(_flags(xla_compile=xla, decode_to_file=str(outputs[xla]), **common))
    assert _read(outputs[True]) == _read(outputs[False])
    assert _read(outputs[True]).split("\n")[2].split("\t")[0] == "Die Aussprache ist geschlossen."
    with pytest.raises(UserError, match="does not sample"):
        t2t_decoder.main(_flags(
            xla_compile=True, decode_to_file=str(tmp_path / "x"),
            hparams="sampling_method=random",
            **{**common, "decode_hparams": "beam_size=1"}))


def test_main_errors_name_the_flags(tmp_path):
    with pytest.raises(UserError, match="--problem"):
        t2t_decoder.main(_flags())
    with pytest.raises(UserError, match="exclude each other"):
        t2t_decoder.main(_flags(decode_interactive=True, decode_from_file="x"))
    with pytest.raises(UserError, match="--hparams_set"):
        t2t_decoder.main(_flags(problem="translate_files", output_dir=str(tmp_path)))


@pytest.mark.slow
def test_run_py_decodes_the_dev_set(t2t_fixtures, wmt_toy_dir, tmp_path):
    """`run.py --mode=decode` without a file decodes the problem's dev shards (written here
    with the fixture's three sentence pairs) and writes .decodes/.targets/.inputs."""
    import subprocess
    import sys

    import tensorflow as tf

    from t2t_lite.data_generators import generator_utils

    data_dir, _, _ = _fixture_setup(t2t_fixtures, wmt_toy_dir, tmp_path)
    fixture = np.load(t2t_fixtures / "model_A_trained.npz")
    vocab = text_encoder.SubwordTextEncoder(str(data_dir / "vocab.translate_files.1024.subwords"))
    dev_file = data_dir / "translate_files-dev-00000-of-00001"
    with tf.io.TFRecordWriter(str(dev_file)) as writer:
        for inputs, targets in zip(fixture["inputs"], fixture["targets"]):
            example = generator_utils.to_example({
                "inputs": [int(i) for i in inputs if i], "targets": [int(t) for t in targets if t]})
            writer.write(example.SerializeToString())
    out_base = tmp_path / "decoded" / "dev"
    repo = decoding.__file__.rsplit("/t2t_lite/", 1)[0]
    result = subprocess.run(
        [sys.executable, "run.py", "--mode=decode", "--problem=translate_files",
         "--hparams_set=transformer_tiny", f"--data_dir={data_dir}",
         f"--checkpoint_path={t2t_fixtures / 'ckpt_A_trained'}",
         "--decode_hparams=beam_size=1,extra_length=20", f"--decode_to_file={out_base}"],
        check=False, cwd=repo, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    base = f"{out_base}.transformer.transformer_tiny.translate_files.beam1.alpha0.6."
    expected = [vocab.decode(text_batches.save_until_eos(row)) for row in fixture["greedy_outputs"]]
    assert _read(base + "decodes").split("\n")[:-1] == expected
    info = json.loads((t2t_fixtures / "model_A.json").read_text())
    assert _read(base + "targets").split("\n")[:-1] == info["examples"]["target_text"]
    assert _read(base + "inputs").split("\n")[:-1] == info["examples"]["source_text"]


# t2t 1.15's decode_hparams() names, written out independently of the code under test.
T2T_DECODE_HPARAMS = [
    "save_images", "log_results", "extra_length", "min_length_ratio", "batch_size", "beam_size",
    "alpha", "eos_penalty", "block_size", "guess_and_check_top_k", "guess_and_check_epsilon",
    "insertion_parallel", "return_beams", "write_beam_scores", "max_input_size",
    "identity_output", "num_samples", "delimiter", "decode_to_file", "decode_reference",
    "decode_in_memory", "decode_timeout_mins", "summaries_log_dir", "shards", "shard_id",
    "shards_start_offset", "shard_google_format", "num_decodes", "force_decode_length",
    "display_decoded_images", "multiproblem_task_id", "frames_per_second", "skip_eos_postprocess",
    "border_percent", "max_display_outputs", "max_display_decodes", "vgg_ckpt_path",
    "mlperf_decode_step", "mlperf_threshold", "mlperf_success", "export_extra_infer_outputs",
]
NON_DEFAULT = {bool: "true", int: "7", float: "0.5", str: "x"}


def test_every_t2t_decode_hparam_exists_and_unsupported_ones_are_refused_by_name():
    defaults = decode_hparams.decode_hparams()
    assert sorted(defaults.values()) == sorted(T2T_DECODE_HPARAMS)
    assert set(decode_hparams.UNSUPPORTED_DECODE_HPARAMS) < set(T2T_DECODE_HPARAMS)
    for name in decode_hparams.UNSUPPORTED_DECODE_HPARAMS:
        value = NON_DEFAULT[defaults.type_of(name)[0]]
        with pytest.raises(ValueError) as info:
            decode_hparams.decode_hparams(f"{name}={value}")
        text = str(info.value)
        assert f"{name}=" in text and "is not supported" in text and "\n" not in text
        # Its default is accepted.
        decode_hparams.decode_hparams(f"{name}={getattr(defaults, name)}" if
                                      defaults.type_of(name)[0] is not str else f"{name}=")


def test_decode_hparam_combinations_that_t2t_ignores_are_refused():
    with pytest.raises(ValueError, match="force_decode_length=True applies to greedy"):
        decode_hparams.decode_hparams("force_decode_length=true,beam_size=4")
    decode_hparams.decode_hparams("force_decode_length=true,beam_size=1")
    greedy, beam = decode_hparams.decode_hparams("beam_size=1"), decode_hparams.decode_hparams()
    sampling = types.SimpleNamespace(
        get=lambda name, default=None: {"sampling_method": "random"}.get(name, default))
    decode_hparams.check_sampling(sampling, greedy)
    with pytest.raises(ValueError, match="sampling_method=random applies to greedy"):
        decode_hparams.check_sampling(sampling, beam)
    per_example = types.SimpleNamespace(
        get=lambda name, default=None: {"sampling_method": "random_per_example"}.get(
            name, default))
    with pytest.raises(ValueError, match="sampling_method='random_per_example' is not"):
        decode_hparams.check_sampling(per_example, greedy)
    top_k = types.SimpleNamespace(
        get=lambda name, default=None: {"sampling_keep_top_k": 0}.get(name, default))
    with pytest.raises(ValueError, match="sampling_keep_top_k=0"):
        decode_hparams.check_sampling(top_k, greedy)


def test_skip_eos_postprocess_and_identity_output():
    outputs = np.array([[5, 6, EOS, 9, 0]])
    assert text_batches.format_decodes(outputs, None, ENCODER) == ["3 4"]
    # All ids decoded (TextEncoder shows EOS and padding as their reserved tokens).
    assert text_batches.format_decodes(outputs, None, ENCODER, skip_eos_postprocess=True) == [
        ENCODER.decode([5, 6, EOS, 9, 0])]
    assert text_batches.format_decodes(outputs, None, ENCODER, identity_output=True) == [
        "5 6 1 9 0"]
    lines = decoding.decode_lines(["1 2"], FakeModel(), ENCODER, ENCODER,
                                  hp(skip_eos_postprocess=True))
    assert lines == [ENCODER.decode([4, 3, EOS, 7, 7])]


def test_shard_google_format():
    assert decoding.add_shard_to_filename("f", hp(shards=4, shard_id=2)) == "f002"
    assert decoding.add_shard_to_filename(
        "f", hp(shards=4, shard_id=2, shard_google_format=True)) == "f-00002-of-00004"


def test_num_decodes_goes_over_the_dev_set_n_times(tmp_path):
    model = FakeModel()
    examples = [{"inputs": np.array([5, 6, EOS]), "targets": np.array([6, 5, EOS])}]
    output = decoding.decode_from_dataset(model, iter(examples), ENCODERS, hp(num_decodes=3),
                                          str(tmp_path / "dev"), ("m", "h", "p"))
    assert len(model.batches) == 3
    assert _read(output) == "4 3\n"
    with pytest.raises(ValueError, match="num_decodes applies to decoding the dev set"):
        decoding.decode_from_file(model, str(tmp_path / "x"), ENCODERS, hp(num_decodes=2),
                                  None, ("m", "h", "p"))


@pytest.mark.slow
def test_force_decode_length_runs_every_greedy_step(t2t_fixtures):
    from t2t_lite.hparams_lib import create_hparams
    from t2t_lite.models import t2t_checkpoint

    model = t2t_checkpoint.load_model(str(t2t_fixtures / "ckpt_A_trained"),
                                      create_hparams("transformer_tiny"))
    # Rows 1 and 2 of the fixture emit EOS: greedy decoding stops once both have.
    inputs = np.load(t2t_fixtures / "model_A_trained.npz")["inputs"][1:]
    free = decoding.make_infer_fn(model, hp(beam_size=1, extra_length=20))(inputs)[0]
    forced = decoding.make_infer_fn(
        model, hp(beam_size=1, extra_length=20, force_decode_length=True))(inputs)[0]
    assert free.shape[1] < inputs.shape[1] + 20 == forced.shape[1]
    np.testing.assert_array_equal(forced[:, :free.shape[1]], free)


@pytest.mark.slow
def test_score_file_gives_t2t_per_line_losses(t2t_fixtures, wmt_toy_dir, tmp_path):
    """The per-line scores, weighted by their token counts, average to t2t's eval loss of
    the three fixture pairs (model_A_trained.npz loss_eval)."""
    data_dir, _, _ = _fixture_setup(t2t_fixtures, wmt_toy_dir, tmp_path)
    info = json.loads((t2t_fixtures / "model_A.json").read_text())
    pairs = list(zip(info["examples"]["source_text"], info["examples"]["target_text"]))
    score_file = tmp_path / "pairs.tsv"
    score_file.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    out = tmp_path / "scores.txt"
    t2t_decoder.main(_flags(
        problem="translate_files", hparams_set="transformer_tiny", data_dir=str(data_dir),
        checkpoint_path=str(t2t_fixtures / "ckpt_A_trained"), score_file=str(score_file),
        decode_to_file=str(out)))
    lines = out.read_text(encoding="utf-8").split("\n")
    assert lines[-1] == "" and all(len(v.split(".")[1]) == 6 for v in lines[:-1])
    scores = [float(v) for v in lines[:-1]]
    vocab = text_encoder.SubwordTextEncoder(str(data_dir / "vocab.translate_files.1024.subwords"))
    tokens = [len(vocab.encode(t)) + 1 for _, t in pairs]
    fixture = np.load(t2t_fixtures / "model_A_trained.npz")
    assert tokens == [int((row != 0).sum()) for row in fixture["targets"]]
    weighted = sum(s * n for s, n in zip(scores, tokens)) / sum(tokens)
    assert weighted == pytest.approx(float(fixture["loss_eval"]), abs=1e-5)
    with pytest.raises(UserError, match="--score_file needs --decode_to_file"):
        t2t_decoder.main(_flags(problem="translate_files", score_file=str(score_file)))
    score_file.write_text("no tab here\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"pairs.tsv:1: expected 'input<TAB>target'"):
        t2t_decoder.main(_flags(
            problem="translate_files", hparams_set="transformer_tiny", data_dir=str(data_dir),
            checkpoint_path=str(t2t_fixtures / "ckpt_A_trained"), score_file=str(score_file),
            decode_to_file=str(out)))
