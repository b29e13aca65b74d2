"""A SentencePiece vocabulary through a run: datagen (with sampling), training, decode with
BLEU, the SavedModel called from a plain TensorFlow process after `import tensorflow_text`,
the CTranslate2 export; `--vocab_from` and the warm start that refuses another vocabulary.

One tiny run (4 steps) is shared by the module; an untrained model's decodes are junk, but
every path must give the same junk from the same ids. Slow: a training and a decode
subprocess and a SavedModel export (about 3-5 minutes on a loaded 2-core machine).
"""
import json
import os
import shutil
import subprocess
import sys
import types
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import error_line, require_extra

sentencepiece = require_extra("sentencepiece", "sentencepiece")

import tensorflow as tf

from t2t_lite.bin import t2t_datagen, t2t_exporter
from t2t_lite.data_generators import sentencepiece_encoder
from t2t_lite.decoding import decode_hparams, runs, text_batches
from t2t_lite.errors import UserError
from t2t_lite.export import export
from tests.run_py import TINY, run

pytestmark = pytest.mark.slow

MODEL = "vocab.translate_files.sentencepiece.model"
DECODE_HPARAMS = "beam_size=1,extra_length=6"
UNSEEN = "Zwölf Boxkämpfer jagen Viktor ☃ 日本語"

# A plain TensorFlow process: tensorflow_text registers the SentencePiece ops, nothing of
# t2t_lite is imported; it encodes and translates the lines given as JSON.
FRESH_PROCESS_SCRIPT = """
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  the SentencepieceTokenizer ops
model = tf.saved_model.load(sys.argv[1])
with open(sys.argv[2], encoding="utf-8") as f:
    lines = json.load(f)
ids = model.signatures["encode"](inputs=tf.constant(lines))["outputs"].numpy().tolist()
outputs = model.signatures["serving_default"](inputs=tf.constant(lines))["outputs"].numpy()
loaded = sorted({m.split(".")[0] for m in sys.modules} & {"t2t_lite", "tensorflow_text"})
print(json.dumps({"ids": ids, "outputs": [t.decode("utf-8") for t in outputs],
                  "loaded": loaded}))
"""


def _datagen(data_dir, corpus, **flags) -> None:
    t2t_datagen.main(types.SimpleNamespace(
        problem="translate_files", data_dir=str(data_dir), tmp_dir=str(data_dir) + "_tmp",
        train_src=str(corpus / "train.en"), train_tgt=str(corpus / "train.de"),
        dev_src=str(corpus / "dev.en"), dev_tgt=str(corpus / "dev.de"), **flags))


@pytest.fixture(scope="module")
def corpus(wmt_toy_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("sp_corpus")
    for name, count in (("train", 120), ("dev", 12)):
        for lang in ("en", "de"):
            lines = (wmt_toy_dir / f"{name}.{lang}").read_text(encoding="utf-8").split("\n")
            (root / f"{name}.{lang}").write_text("\n".join(lines[:count]) + "\n",
                                                 encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def trained(corpus):
    """datagen (a 400-piece BPE model, training split written twice with sampling), then a
    4-step training run."""
    data_dir = corpus.parent / "sp_data"
    _datagen(data_dir, corpus, vocab_type="sentencepiece", approx_vocab_size=400,
             sentencepiece_model_type="bpe", subword_dropout=0.2, subword_dropout_copies=2)
    output_dir = corpus.parent / "sp_run"
    result = run("--mode=train", "--problem=translate_files", f"--data_dir={data_dir}",
                 f"--output_dir={output_dir}", "--hparams_set=transformer_tiny",
                 f"--hparams={TINY}", "--train_steps=4", "--save_checkpoints_steps=4",
                 "--random_seed=1", cwd=corpus.parent)
    assert result.returncode == 0, result.stderr[-3000:]
    return types.SimpleNamespace(data_dir=data_dir, output_dir=output_dir,
                                 encoder=sentencepiece_encoder.SentencePieceEncoder(
                                     str(data_dir / MODEL)))


@pytest.fixture(scope="module")
def decoded(trained, corpus):
    """run.py --mode=decode of the dev inputs with --decode_reference (BLEU)."""
    decodes = corpus.parent / "dev.decodes"
    result = run("--mode=decode", f"--output_dir={trained.output_dir}",
                 f"--decode_hparams={DECODE_HPARAMS}", f"--decode_from_file={corpus / 'dev.en'}",
                 f"--decode_to_file={decodes}", f"--decode_reference={corpus / 'dev.de'}",
                 cwd=corpus.parent)
    assert result.returncode == 0, result.stderr[-3000:]
    return types.SimpleNamespace(lines=decodes.read_text(encoding="utf-8").split("\n")[:-1],
                                 log=result.stdout + result.stderr)


def _records(data_dir, split: str) -> list[dict]:
    paths = sorted(str(p) for p in data_dir.glob(f"translate_files-{split}-*"))
    records = []
    for record in tf.data.TFRecordDataset(paths).as_numpy_iterator():
        feature = tf.train.Example.FromString(record).features.feature
        records.append({k: list(feature[k].int64_list.value) for k in ("inputs", "targets")})
    return records


def test_datagen_records_decode_back_to_the_corpus(trained, corpus):
    encoder = trained.encoder
    for split, name, copies in (("dev", "dev", 1), ("train", "train", 2)):
        sources = (corpus / f"{name}.en").read_text(encoding="utf-8").split("\n")[:-1]
        targets = (corpus / f"{name}.de").read_text(encoding="utf-8").split("\n")[:-1]
        records = _records(trained.data_dir, split)
        assert all(r["inputs"][-1] == 1 and r["targets"][-1] == 1 for r in records)  # EOS
        pairs = sorted((encoder.decode(r["inputs"][:-1]), encoder.decode(r["targets"][:-1]))
                       for r in records)
        assert pairs == sorted([(" ".join(s.split()), " ".join(t.split()))
                                for s, t in zip(sources, targets)] * copies)
    # The sampled passes segment differently from the model's best segmentation.
    train = _records(trained.data_dir, "train")
    best = {tuple(encoder.encode(encoder.decode(r["inputs"][:-1]))) for r in train}
    assert any(tuple(r["inputs"][:-1]) not in best for r in train)
    marker = json.loads((trained.data_dir / "translate_files.train.complete.json").read_text())
    assert marker["vocab_files"] == [MODEL]
    assert marker["made_from"]["settings"]["--vocab_type"] == "sentencepiece"
    recorded = json.loads((trained.output_dir / "run_inputs.json").read_text())
    assert recorded["features"] == {"inputs": MODEL, "targets": MODEL}
    assert recorded["vocab"][MODEL]["sha256"] == sentencepiece_encoder.file_io.sha256_of(
        str(trained.data_dir / MODEL))


def test_decode_writes_a_line_per_input_and_scores_bleu(decoded):
    assert len(decoded.lines) == 12
    assert "BLEU" in decoded.log


def test_a_changed_model_in_data_dir_is_refused(trained, corpus, tmp_path):
    data_dir = tmp_path / "data"
    shutil.copytree(trained.data_dir, data_dir)
    lines = (corpus / "train.de").read_text(encoding="utf-8").split("\n")
    sentencepiece_encoder.train_model(lines, str(data_dir / MODEL), 350, model_type="bpe")
    spec = runs.resolve("decode", str(trained.output_dir), data_dir=str(data_dir))
    with pytest.raises(UserError, match=f"the vocabulary {data_dir / MODEL} changed since run"):
        runs.open_run(spec)


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
    """(the SavedModel's version folder, its in-process module) of the trained run."""
    run_ = runs.open_run(runs.resolve("export", str(trained.output_dir)))
    _, model = runs.restore_model(run_)
    vocab = export.graph_vocabulary(run_.encoders["inputs"])
    hp = decode_hparams.decode_hparams(DECODE_HPARAMS)
    module = export.ServingModule(model, vocab, vocab, hp, text_batches.input_length_limit(hp),
                                  run_.target_space_id)
    path = export.export(module, str(tmp_path_factory.mktemp("sp_export") / "export"))
    return types.SimpleNamespace(path=path, module=module)


def test_saved_model_from_plain_tensorflow_with_tensorflow_text(trained, decoded, corpus,
                                                                exported, tmp_path):
    lines = (corpus / "dev.en").read_text(encoding="utf-8").split("\n")[:-1]
    # Decode mode's one batch: sorted by word count, longest first.
    sorted_lines, sorted_keys = text_batches.sort_inputs(lines)
    (tmp_path / "lines.json").write_text(json.dumps(sorted_lines + [UNSEEN]), encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS_SCRIPT, exported.path, str(tmp_path / "lines.json")],
        check=False, capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=""))
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().split("\n")[-1])
    assert report["loaded"] == ["tensorflow_text"]
    for text, ids in zip(sorted_lines + [UNSEEN], report["ids"]):
        expected = trained.encoder.encode(text) + [1]
        assert ids[:len(expected)] == expected and not any(ids[len(expected):])
    served = report["outputs"][:len(lines)]
    assert [served[sorted_keys[i]] for i in range(len(lines))] == decoded.lines


def test_served_by_the_run_and_by_its_saved_model_as_each_line_decoded_alone(
        trained, corpus, exported, tmp_path):
    """`--mode=serve` of the SentencePiece run (t2t_lite engine) and of its SavedModel (which
    the server loads after registering tensorflow-text's ops): lines sent by concurrent
    clients come back as the SavedModel decodes each line alone (the 4-step model runs each
    line to its own limit, so a batch-dependent length would show)."""
    require_extra("fastapi", "serve")
    from t2t_lite.serving import client
    from tests.server_helpers import ServerProcess

    lines = (corpus / "dev.en").read_text(encoding="utf-8").split("\n")[:5] + [UNSEEN]
    servers = [ServerProcess(trained.output_dir, "--batch_timeout_ms=200", cwd=tmp_path,
                             decode_hparams=DECODE_HPARAMS),
               ServerProcess(None, f"--saved_model_dir={exported.path}",
                             "--batch_timeout_ms=200", cwd=tmp_path,
                             decode_hparams=DECODE_HPARAMS)]
    try:
        alone = [exported.module.serving_default(tf.constant([line]))["outputs"][0]
                 .numpy().decode("utf-8") for line in lines]
        assert alone[-1] and all(alone)
        for server in servers:
            server.wait_ready()
            translator = client.Translator(server.url)
            with ThreadPoolExecutor(len(lines)) as pool:
                served = list(pool.map(translator.translate, [[line] for line in lines]))
            assert [outputs[0] for outputs in served] == alone, server.stdout
    finally:
        for server in servers:
            server.stop()


def test_ctranslate2_export_decodes_as_decode_mode(trained, decoded, corpus, tmp_path):
    require_extra("ctranslate2", "ctranslate2")
    from t2t_lite.export import ct2

    path = t2t_exporter.export_ctranslate2(types.SimpleNamespace(
        output_dir=str(trained.output_dir), problem=None, hparams_set=None, data_dir=None,
        model=None, hparams="", checkpoint_path=None, export_dir=str(tmp_path / "ct2"),
        quantization="none", ct2_max_position=256, decode_hparams=""))
    assert "t2t_inputs.sentencepiece.model" in os.listdir(path), os.listdir(path)
    translator = ct2.Translator(path, intra_threads=1)
    lines = (corpus / "dev.en").read_text(encoding="utf-8").split("\n")[:-1]
    outputs = translator.translate(lines, beam_size=1, extra_length=6)
    assert [hyps[0].text for hyps in outputs] == decoded.lines


def test_vocab_from_copies_the_parents_model_and_warm_start_refuses_another(trained, corpus):
    child = corpus.parent / "child_data"
    _datagen(child, corpus, vocab_from=str(trained.output_dir))
    assert (child / MODEL).read_bytes() == (trained.data_dir / MODEL).read_bytes()
    marker = json.loads((child / "translate_files.train.complete.json").read_text())
    assert marker["made_from"]["inputs"]["--vocab_from (inputs)"]["path"] == str(
        trained.data_dir / MODEL)
    # A child whose data has its own model: refused before anything is written.
    other = corpus.parent / "other_data"
    _datagen(other, corpus, vocab_type="sentencepiece", approx_vocab_size=350,
             sentencepiece_model_type="bpe")
    output_dir = corpus.parent / "refused_run"
    result = run("--mode=train", "--problem=translate_files", f"--data_dir={other}",
                 f"--output_dir={output_dir}", "--hparams_set=transformer_tiny",
                 f"--hparams={TINY}", "--train_steps=1",
                 f"--warm_start_from={trained.output_dir}", cwd=corpus.parent)
    line = error_line(result)
    assert f"the inputs vocabulary {other / MODEL} " in line
    assert f"is not the parent's {trained.data_dir / MODEL} " in line
    assert not output_dir.exists()


SEPARATE_MODELS = [f"vocab.translate_files.{side}.sentencepiece.model"
                   for side in ("inputs", "targets")]


@pytest.fixture(scope="module")
def separate_models(corpus, tmp_path_factory):
    """A data dir made by datagen with two BPE models trained, one per side (one worker)."""
    data_dir = tmp_path_factory.mktemp("sp_separate") / "data"
    _datagen(data_dir, corpus, vocab_type="sentencepiece", approx_vocab_size=350,
             sentencepiece_model_type="bpe", sentencepiece_separate=True)
    return data_dir


def test_separate_models_trained_or_given_encode_each_side(corpus, separate_models, tmp_path):
    from t2t_lite import registry

    trained_dir, names = separate_models, SEPARATE_MODELS
    marker = json.loads((trained_dir / "translate_files.dev.complete.json").read_text())
    assert marker["vocab_files"] == names
    encoders = registry.problem("translate_files").feature_encoders(str(trained_dir))
    assert [encoders[f].filename for f in ("inputs", "targets")] == [
        str(trained_dir / name) for name in names]
    sources = (corpus / "dev.en").read_text(encoding="utf-8").split("\n")[:-1]
    targets = (corpus / "dev.de").read_text(encoding="utf-8").split("\n")[:-1]
    records = _records(trained_dir, "dev")
    assert sorted((encoders["inputs"].decode(r["inputs"][:-1]),
                   encoders["targets"].decode(r["targets"][:-1])) for r in records) == sorted(
        (" ".join(s.split()), " ".join(t.split())) for s, t in zip(sources, targets))
    # The same two models given by flag are copied as they are.
    given_dir = tmp_path / "given"
    _datagen(given_dir, corpus, vocab_type="sentencepiece",
             sentencepiece_model=str(trained_dir / names[0]),
             target_sentencepiece_model=str(trained_dir / names[1]))
    assert [(given_dir / n).read_bytes() for n in names] == [
        (trained_dir / n).read_bytes() for n in names]
    assert _records(given_dir, "dev") == records


def test_sentencepiece_shards_are_byte_identical_for_any_number_of_workers(
        corpus, separate_models, tmp_path):
    from t2t_lite import registry
    from t2t_lite.data_generators import text_problems

    first, names = separate_models, SEPARATE_MODELS

    def shards(data_dir) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted(data_dir.glob("translate_files-*"))}

    expected = shards(first)
    assert len([n for n in expected if "-train-" in n]) > 1
    # The records are t2t's encoding of each pair, each side by its own model.
    encoders = registry.problem("translate_files").feature_encoders(str(first))
    pairs = text_problems.text2text_txt_iterator(str(corpus / "train.en"),
                                                 str(corpus / "train.de"))
    encoded = text_problems.text2text_generate_encoded(pairs, encoders["inputs"],
                                                       encoders["targets"])
    assert sorted(map(repr, _records(first, "train"))) == sorted(
        repr({k: list(sample[k]) for k in ("inputs", "targets")}) for sample in encoded)
    for workers in (2, 3):
        data_dir = tmp_path / f"w{workers}"
        _datagen(data_dir, corpus, vocab_type="sentencepiece",
                 sentencepiece_model=str(first / names[0]),
                 target_sentencepiece_model=str(first / names[1]),
                 num_datagen_workers=workers)
        report = json.loads((data_dir / "datagen_report.json").read_text())
        assert report["translate_files"]["splits"]["train"]["workers"] == workers, report
        assert shards(data_dir) == expected, workers
