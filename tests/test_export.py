"""run.py --mode=export: a SavedModel that translates text with TensorFlow alone.

The model is t2t's own fixture checkpoint (transformer_tiny trained 25 steps) with its vocab,
so the SavedModel's answers are compared with decode mode and with t2t's greedy outputs.
"""
import json
import logging
import os
import shutil
import subprocess
import sys
import types
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite import registry
from t2t_lite.bin import import_t2t, t2t_avg_all, t2t_exporter
from t2t_lite.data_generators import text_encoder
from t2t_lite.decoding import decode_hparams, decoding, text_batches
from t2t_lite.errors import UserError
from t2t_lite.export import export
from t2t_lite.hparams_lib import create_hparams
from t2t_lite.models import t2t_checkpoint
from tests.conftest import REPO_ROOT, require_extra

VOCAB = "vocab.translate_toy_ende1k.1024.subwords"
CKPT = "ckpt_A_trained"
SIGNATURES = ("serving_default", "encode_decode_ids", "encode", "decode")
# Decode hparams of the exported model (and of decode mode when compared with it): t2t's
# defaults (beam 4, alpha 0.6) with a shorter extra length, because the fixture model often
# repeats a token until the length limit, and t2t's max_input_size=256 (decode and export cut
# inputs by this one rule; without it both decode inputs whole).
EXTRA_LENGTH = 30
DECODE_HPARAMS = f"extra_length={EXTRA_LENGTH},max_input_size=256"

# Runs in a fresh interpreter: only TensorFlow is imported, then the SavedModel translates
# the batches given as JSON and reports which packages got loaded.
FRESH_PROCESS_SCRIPT = """
import json, sys
import tensorflow as tf
model = tf.saved_model.load(sys.argv[1])
serve = model.signatures["serving_default"]
with open(sys.argv[2], encoding="utf-8") as f:
    batches = json.load(f)
outputs = [[t.decode("utf-8") for t in serve(inputs=tf.constant(b))["outputs"].numpy()]
           for b in batches]
loaded = sorted({m.split(".")[0] for m in sys.modules} & {"t2t_lite", "tensorflow_text"})
print(json.dumps({"outputs": outputs, "loaded": loaded}))
"""


def _run_py(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, str(REPO_ROOT / "run.py"), *args],
                            check=False, capture_output=True, text=True, timeout=timeout,
                            cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def data_dir(t2t_fixtures, tmp_path_factory):
    """A data_dir holding the fixture vocab under translate_files' vocab name."""
    path = tmp_path_factory.mktemp("data")
    shutil.copy(t2t_fixtures / VOCAB, path / registry.problem("translate_files").vocab_filename)
    return path


@pytest.fixture(scope="module")
def run_dir(t2t_fixtures, tmp_path_factory):
    """The fixture checkpoint imported into t2t_lite (import_t2t), then averaged (average
    mode, n=1): a run directory with a t2t_lite checkpoint and hparams.json."""
    root = tmp_path_factory.mktemp("run")
    import_t2t.main(types.SimpleNamespace(
        checkpoint_path=str(t2t_fixtures / CKPT), hparams_set="transformer_tiny", hparams="",
        output_dir=str(root / "imported")))
    t2t_avg_all.main(types.SimpleNamespace(
        output_dir=str(root / "imported"), n=1, avg_output_dir=str(root / "avg")))
    return root / "avg"


@pytest.fixture(scope="module")
def model_flags(data_dir, run_dir):
    # No --hparams_set: the run's hparams.json describes the model.
    return ["--problem=translate_files", f"--data_dir={data_dir}", f"--output_dir={run_dir}"]


@pytest.fixture(scope="module")
def encoder(t2t_fixtures):
    return text_encoder.SubwordTextEncoder(str(t2t_fixtures / VOCAB))


@pytest.fixture(scope="module")
def fixture_model(t2t_fixtures):
    return t2t_checkpoint.load_model(str(t2t_fixtures / CKPT), create_hparams("transformer_tiny"))


@pytest.fixture(scope="module")
def exported(model_flags, run_dir):
    """run.py --mode=export with DECODE_HPARAMS; the SavedModel goes to the default
    <output_dir>/export."""
    _run_py("--mode=export", *model_flags, f"--decode_hparams={DECODE_HPARAMS}")
    return run_dir / "export"


@pytest.fixture(scope="module")
def saved_model_path(exported):
    (version,) = os.listdir(exported)
    return str(exported / version)


@pytest.fixture(scope="module")
def served(saved_model_path):
    return tf.saved_model.load(saved_model_path)


def _texts(tensor) -> list:
    return [t.decode("utf-8") for t in np.asarray(tensor).reshape(-1)]


# ------------------------------------------------------------------------------ unit level
def test_limit_input_ids_cuts_long_rows_to_limit_minus_one_plus_eos():
    ids = tf.constant([[5, 6, 7, 8, 1, 0], [5, 6, 1, 0, 0, 0], [5, 6, 7, 1, 0, 0],
                       [0, 0, 0, 0, 0, 0]])
    assert export.limit_input_ids(ids, 4).numpy().tolist() == [
        [5, 6, 7, 1], [5, 6, 1, 0], [5, 6, 7, 1], [0, 0, 0, 0]]
    assert export.limit_input_ids(ids, 6).numpy().tolist() == ids.numpy().tolist()
    assert export.limit_input_ids(ids, None) is ids


def test_cut_at_eos():
    ids = tf.constant([[5, 1, 7, 1], [5, 6, 7, 8], [1, 0, 0, 0]])
    assert export.cut_at_eos(ids).to_list() == [[5], [5, 6, 7, 8], []]
    assert export.cut_at_eos(tf.zeros([2, 0], tf.int32)).to_list() == [[], []]


def test_input_length_limit_is_max_input_size_alone():
    # One rule for decode mode and export: t2t's max_input_size; the model's max_length
    # (a training filter) plays no part.
    assert text_batches.input_length_limit(decode_hparams.decode_hparams()) is None
    assert text_batches.input_length_limit(decode_hparams.decode_hparams("max_input_size=20")) == 20
    assert text_batches.encode_input("1 2 3", text_encoder.TextEncoder(), 3) == [3, 4, 1]


@pytest.mark.slow
@pytest.mark.parametrize("max_input_size", [-1, 100])
def test_decode_and_export_agree_on_a_400_subtoken_input(fixture_model, encoder, wmt_toy_dir,
                                                          max_input_size):
    dev = (wmt_toy_dir / "dev.en").read_text(encoding="utf-8").split("\n")
    text = ""
    for line in dev:
        text = f"{text} {line}".strip()
        if len(encoder.encode(text)) >= 400:
            break
    ids = encoder.encode(text)[:400]
    text = encoder.decode(ids)
    assert len(encoder.encode(text)) == 400
    hp = decode_hparams.decode_hparams(
        f"beam_size=2,extra_length=5,max_input_size={max_input_size},log_results=False")
    decoded = decoding.decode_lines([text], decoding.make_infer_fn(fixture_model, hp),
                                    encoder, encoder, hp)
    vocab = encoder.all_subtoken_strings
    module = export.ServingModule(fixture_model, vocab, vocab, hp,
                                  text_batches.input_length_limit(hp), 0)
    served_ids = module.encode(tf.constant([text]))["outputs"].numpy()[0].tolist()
    assert served_ids == text_batches.encode_input(text, encoder, max_input_size)
    assert len(served_ids) == (401 if max_input_size < 0 else 100)
    assert _texts(module.serving_default(tf.constant([text]))["outputs"]) == decoded


def test_problem_without_subword_vocab_exports_ids_only(fixture_model):
    module = export.ServingModule(
        fixture_model, None, None, decode_hparams.decode_hparams("beam_size=1,extra_length=2"),
        None, 0)
    assert not hasattr(module, "serving_default")
    assert module.signature_names == ["encode_decode_ids"]


def test_mismatched_checkpoint_fails_clearly(t2t_fixtures, data_dir, tmp_path):
    flags = types.SimpleNamespace(
        problem="translate_files", data_dir=str(data_dir), hparams_set="transformer_tiny",
        hparams="hidden_size=64", checkpoint_path=str(t2t_fixtures / CKPT), output_dir=None,
        model="transformer", decode_hparams="", export_dir=str(tmp_path / "export"))
    with pytest.raises(UserError, match=r"checkpoint \[128, 128\] vs model \[64, 64\]"):
        t2t_exporter.main(flags)
    assert not (tmp_path / "export").exists()


@pytest.mark.slow
def test_greedy_export_reproduces_t2t_greedy_decoding(fixture_model, encoder, t2t_fixtures):
    module = export.ServingModule(
        fixture_model, encoder.all_subtoken_strings, encoder.all_subtoken_strings,
        decode_hparams.decode_hparams("beam_size=1,extra_length=20"), 256, 0)
    fixture = np.load(t2t_fixtures / "model_A_trained.npz")
    info = json.loads((t2t_fixtures / "model_A.json").read_text(encoding="utf-8"))
    sources = tf.constant(info["examples"]["source_text"])
    ids = module.encode(sources)["outputs"].numpy()
    assert ids.tolist() == fixture["inputs"].tolist()
    # t2t's own greedy decode (decode_length 20); ids after the first EOS become 0.
    t2t_greedy = fixture["greedy_outputs"]
    got = module.encode_decode_ids(tf.constant(ids))["outputs"].numpy()
    after_eos = np.cumsum(t2t_greedy == 1, axis=1) - (t2t_greedy == 1) > 0
    assert got.tolist() == np.where(after_eos, 0, t2t_greedy).tolist()
    texts = _texts(module.serving_default(sources)["outputs"])
    assert texts == [encoder.decode(text_batches.save_until_eos(row)) for row in t2t_greedy]
    assert texts[1:] == ["Vielen Dank", "Die Aussprache ist geschlossen."]


# ----------------------------------------------------------------------- the SavedModel
@pytest.mark.slow
def test_export_writes_one_numbered_version(exported):
    # Exported from the averaged run directory, under its default <output_dir>/export.
    entries = os.listdir(exported)
    assert len(entries) == 1 and entries[0].isdigit(), entries  # no temporary leftovers
    version = exported / entries[0]
    assert (version / "saved_model.pb").is_file()
    assert (version / "variables" / "variables.index").is_file()


@pytest.mark.slow
def test_fresh_tensorflow_process_matches_decode_mode(saved_model_path, model_flags,
                                                      wmt_toy_dir, tmp_path):
    lines = (wmt_toy_dir / "dev.en").read_text(encoding="utf-8").split("\n")[:50]
    source = tmp_path / "dev50.en"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    decodes = tmp_path / "dev50.decodes"
    _run_py("--mode=decode", *model_flags, f"--decode_from_file={source}",
            f"--decode_to_file={decodes}", f"--decode_hparams={DECODE_HPARAMS}")
    expected = decodes.read_text(encoding="utf-8").split("\n")[:-1]
    # Decode mode's batches: t2t's sort by word count, longest first, 32 lines a batch.
    sorted_lines, sorted_keys = text_batches.sort_inputs(lines)
    batches = [sorted_lines[i:i + 32] for i in range(0, len(lines), 32)]
    batches_file = tmp_path / "batches.json"
    batches_file.write_text(json.dumps(batches), encoding="utf-8")
    env = dict(os.environ, PYTHONPATH="")
    result = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS_SCRIPT, saved_model_path, str(batches_file)],
        check=False, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().split("\n")[-1])
    assert report["loaded"] == []
    served = [text for batch in report["outputs"] for text in batch]
    assert [served[sorted_keys[i]] for i in range(len(lines))] == expected
    assert expected[0] == "Die Aussprache ist geschlossen."  # dev line 0 is "The debate is closed."


@pytest.mark.slow
def test_serve_mode_over_the_saved_model_equals_decode_mode(exported, model_flags, wmt_toy_dir,
                                                             tmp_path):
    # `run.py --mode=serve --saved_model_dir=<the export dir>` (its newest version) on a free
    # port: 12 dev lines sent by 6 concurrent clients (batched together) come back as
    # `--mode=decode` gives each line alone (batch_size=1: t2t's decode length is per batch).
    require_extra("fastapi", "serve")
    from t2t_lite.serving.client import Translator
    from tests.server_helpers import ServerProcess, request

    lines = (wmt_toy_dir / "dev.en").read_text(encoding="utf-8").split("\n")[:12]
    source = tmp_path / "dev12.en"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    served = ServerProcess(None, f"--saved_model_dir={exported}", "--batch_timeout_ms=200",
                           cwd=tmp_path, decode_hparams=DECODE_HPARAMS)
    try:
        decodes = tmp_path / "dev12.decodes"
        _run_py("--mode=decode", *model_flags, f"--decode_from_file={source}",
                f"--decode_to_file={decodes}", f"--decode_hparams={DECODE_HPARAMS},batch_size=1")
        expected = decodes.read_text(encoding="utf-8").split("\n")[:-1]
        served.wait_ready()
        status, models, _ = request(served.url + "/v1/models")
        (version,) = os.listdir(exported)
        assert (status, models["models"][0]["engine"], models["models"][0]["saved_model"]) == (
            200, "saved_model", str(exported / version))
        translator = Translator(served.url)
        with ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(lambda line: translator.translate_request([line]), lines))
        assert [a["outputs"][0] for a in answers] == expected
        assert expected[0] == "Die Aussprache ist geschlossen."
        # The export fixed beam_size 4: another is refused with the export's value.
        status, answer, _ = request(served.url + "/v1/translate",
                                    {"inputs": [lines[0]], "beam_size": 2})
        assert status == 422 and "fixed at export" in answer["error"]
    finally:
        served.stop()


@pytest.mark.slow
def test_saved_model_cli_show_lists_signatures(saved_model_path):
    result = subprocess.run(["saved_model_cli", "show", "--all", "--dir", saved_model_path],
                            check=False, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    blocks = {}
    for block in result.stdout.split("signature_def['")[1:]:
        name, body = block.split("']", 1)
        blocks[name] = body.split("Concrete Functions")[0]
    assert set(SIGNATURES) <= set(blocks)
    expected = {
        "serving_default": [("inputs", "DT_STRING", "(-1)"), ("outputs", "DT_STRING", "(-1)"),
                            ("scores", "DT_FLOAT", "(-1)")],
        "encode_decode_ids": [("inputs", "DT_INT32", "(-1, -1)"),
                              ("outputs", "DT_INT32", "(-1, -1)"),
                              ("scores", "DT_FLOAT", "(-1)")],
        "encode": [("inputs", "DT_STRING", "(-1)"), ("outputs", "DT_INT32", "(-1, -1)")],
        "decode": [("inputs", "DT_INT32", "(-1, -1)"), ("outputs", "DT_STRING", "(-1)")],
    }
    for name, tensors in expected.items():
        body = " ".join(blocks[name].split())
        for key, dtype, shape in tensors:
            kind = "inputs" if key == "inputs" else "outputs"
            assert f"{kind}['{key}'] tensor_info: dtype: {dtype} shape: {shape}" in body, name


@pytest.mark.slow
def test_saved_model_cli_run_default_signature(saved_model_path):
    result = subprocess.run(
        ["saved_model_cli", "run", "--dir", saved_model_path, "--tag_set", "serve",
         "--signature_def", "serving_default",
         "--input_exprs", 'inputs=["The debate is closed.", ""]'],
        check=False, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Result for output key outputs:" in result.stdout
    assert "b'Die Aussprache ist geschlossen.'" in result.stdout
    assert "Result for output key scores:" in result.stdout


@pytest.mark.slow
def test_edge_inputs_give_defined_outputs(served, encoder, fixture_model, wmt_toy_dir):
    serve = served.signatures["serving_default"]
    encode = served.signatures["encode"]
    dev = (wmt_toy_dir / "dev.en").read_text(encoding="utf-8").split("\n")
    long_text = " ".join(dev[:40])  # far more than max_input_size = 256 subtokens
    assert len(encoder.encode(long_text)) > 256
    batch = ["", long_text, b"caf\xc3 \xff\xfe bad bytes", "\x00\x01 \U0001F600", "a" * 2000]
    texts = [t.decode("utf-8", errors="replace") if isinstance(t, bytes) else t for t in batch]
    ids = encode(inputs=tf.constant(batch))["outputs"].numpy()
    assert ids.shape == (5, 256)
    for row, text in zip(ids, texts):
        expected = text_batches.encode_input(text, encoder, max_input_size=256)
        assert row.tolist() == expected + [0] * (256 - len(expected))
    result = serve(inputs=tf.constant(batch))
    assert result["outputs"].shape == (5,) and result["outputs"].dtype == tf.string
    assert np.all(np.isfinite(result["scores"].numpy()))
    # The long input alone is translated like decode mode with max_input_size=256.
    hp = decode_hparams.decode_hparams(f"{DECODE_HPARAMS},log_results=False")
    python = decoding.decode_lines([long_text], decoding.make_infer_fn(fixture_model, hp),
                                   encoder, encoder, hp)
    assert _texts(serve(inputs=tf.constant([long_text]))["outputs"]) == python
    # An empty batch is answered with empty outputs.
    empty = serve(inputs=tf.constant([], tf.string))
    assert empty["outputs"].shape == (0,) and empty["scores"].shape == (0,)
    empty = served.signatures["encode_decode_ids"](inputs=tf.zeros([0, 0], tf.int32))
    assert empty["outputs"].shape[0] == 0 and empty["scores"].shape == (0,)


@pytest.mark.slow
def test_bad_ids_are_a_clear_error_and_serving_goes_on(served):
    ids_fn = served.signatures["encode_decode_ids"]
    with pytest.raises(tf.errors.InvalidArgumentError, match="input vocab size 1018"):
        ids_fn(inputs=tf.constant([[5000, 1]]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=">= 0"):
        ids_fn(inputs=tf.constant([[-3, 1]]))
    out = served.signatures["serving_default"](inputs=tf.constant(["The debate is closed."]))
    assert _texts(out["outputs"]) == ["Die Aussprache ist geschlossen."]


@pytest.mark.slow
def test_encode_decode_ids_equals_model_infer(served, fixture_model, encoder, t2t_fixtures):
    inputs = np.load(t2t_fixtures / "model_A_trained.npz")["inputs"].astype(np.int32)
    got = served.signatures["encode_decode_ids"](inputs=tf.constant(inputs))
    want = fixture_model.infer({"inputs": tf.constant(inputs)}, decode_length=EXTRA_LENGTH,
                               beam_size=4, alpha=0.6)
    outputs = want["outputs"].numpy()
    after_eos = np.cumsum(outputs == 1, axis=1) - (outputs == 1) > 0
    assert got["outputs"].numpy().tolist() == np.where(after_eos, 0, outputs).tolist()
    np.testing.assert_allclose(got["scores"].numpy(), want["scores"].numpy(), rtol=1e-5)
    text = served.signatures["decode"](inputs=tf.constant(outputs))["outputs"]
    assert _texts(text) == [encoder.decode(text_batches.save_until_eos(row)) for row in outputs]


@pytest.mark.slow
def test_return_beams_gives_n_best(fixture_model, encoder):
    decode_hp = decode_hparams.decode_hparams(
        "beam_size=3,return_beams=True,extra_length=10,log_results=False")
    module = export.ServingModule(fixture_model, encoder.all_subtoken_strings,
                                  encoder.all_subtoken_strings, decode_hp, 256, 0)
    sentences = ["The debate is closed.", "Thank you very much.", ""]
    result = module.serving_default(tf.constant(sentences))
    assert result["outputs"].shape == (3, 3) and result["scores"].shape == (3, 3)
    scores = result["scores"].numpy()
    assert np.all(np.diff(scores, axis=1) <= 0)  # best first
    python = decoding.decode_lines(
        sentences, decoding.make_infer_fn(fixture_model, decode_hp), encoder, encoder, decode_hp)
    texts = result["outputs"].numpy()
    # decode mode writes a line's beams tab-joined.
    assert ["\t".join(t.decode("utf-8") for t in row) for row in texts] == python


@pytest.mark.slow
def test_tensorflow_text_segmenter_export_serves_the_same_text(fixture_model, encoder,
                                                               wmt_toy_dir, tmp_path):
    # The faster in-graph encoder: a fresh process needs tensorflow-text's ops (and only them).
    decode_hp = decode_hparams.decode_hparams(f"{DECODE_HPARAMS},beam_size=2,log_results=False")
    module = export.ServingModule(fixture_model, encoder.all_subtoken_strings,
                                  encoder.all_subtoken_strings, decode_hp, 256, 0,
                                  subword_segmenter="tensorflow_text")
    path = export.export(module, str(tmp_path / "export"))
    lines = (wmt_toy_dir / "dev.en").read_text(encoding="utf-8").split("\n")[:8]
    batches_file = tmp_path / "batches.json"
    batches_file.write_text(json.dumps([lines]), encoding="utf-8")
    script = "import tensorflow_text\n" + FRESH_PROCESS_SCRIPT
    result = subprocess.run(
        [sys.executable, "-c", script, path, str(batches_file)], check=False,
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=""))
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().split("\n")[-1])
    assert report["loaded"] == ["tensorflow_text"]
    python = decoding.decode_lines(lines, decoding.make_infer_fn(fixture_model, decode_hp),
                                   encoder, encoder, decode_hp)
    assert report["outputs"][0] == python


def test_export_removes_killed_exports_and_gives_folders_the_umask(tmp_path):
    import socket
    import stat

    class Tiny(tf.Module):
        def __init__(self):
            super().__init__()
            self.weight = tf.Variable(1.0)

        def signatures(self):
            return None

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    host = socket.gethostname()
    killed = tmp_path / f".export.tmp-{host}-{int(dead.stdout)}-0badc0de"
    live = tmp_path / f".export.tmp-{host}-{os.getpid()}-0badc0de"  # a concurrent export
    for folder in (killed, live):
        (folder / "variables").mkdir(parents=True)
    absl_level = logging.getLogger("absl").level
    umask = os.umask(0o002)
    try:
        path = export.export(Tiny(), str(tmp_path))
    finally:
        os.umask(umask)
    # tf.saved_model.save sets absl's logger to WARNING; export puts it back.
    assert logging.getLogger("absl").level == absl_level
    assert not killed.exists() and live.exists()
    for folder in (path, os.path.join(path, "variables")):
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o775, folder  # not TF's 0755
    assert sorted(os.listdir(tmp_path)) == sorted([live.name, os.path.basename(path)])


def test_export_hides_tensorflows_info_lines_and_keeps_its_own(tmp_path):
    from absl import logging as absl_logging

    class Tiny(tf.Module):
        def __init__(self):
            super().__init__()
            self.weight = tf.Variable(1.0)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def scale(self, x):
            absl_logging.warning("kept: a warning during the save")
            return x * self.weight

        def signatures(self):
            return {"serving_default": self.scale}

    records = []

    class Collect(logging.Handler):
        def emit(self, record):
            records.append(record)

    handler = Collect(level=logging.DEBUG)
    loggers = [logging.getLogger("absl"), logging.getLogger("tensorflow")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    try:
        export.export(Tiny(), str(tmp_path))
        absl_logging.info("kept: an INFO line after the export")
    finally:
        for logger, level in zip(loggers, levels):
            logger.removeHandler(handler)
            logger.setLevel(level)
    from_tensorflow = [r.getMessage()[:80] for r in records
                       if f"{os.sep}tensorflow{os.sep}" in r.pathname and r.levelno < logging.WARNING]
    assert from_tensorflow == []
    messages = [r.getMessage() for r in records]
    assert "kept: a warning during the save" in messages
    assert "kept: an INFO line after the export" in messages
