"""CTranslate2 export (t2t_lite.export.ct2): the exported model decodes the same ids as
t2t_lite's own decoder.

Tiny random models cover the layouts (pre-norm / post-norm, shared / separate vocabularies,
shared / separate softmax, sharded embeddings, a non-zero target space): random weights never
emit EOS, so every greedy step's argmax over the whole decode length is compared. t2t's fixture
checkpoint (trained, emits EOS) is exported by run.py and decoded from text.
"""
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tests.conftest import REPO_ROOT, require_extra

ctranslate2 = require_extra("ctranslate2", "ctranslate2")

import tensorflow as tf

from t2t_lite import registry
from t2t_lite.data_generators import text_encoder
from t2t_lite.decoding import decode_hparams, decoding, text_batches
from t2t_lite.errors import UserError
from t2t_lite.export import ct2, ct2_options
from t2t_lite.hparams_lib import create_hparams
from t2t_lite.models import t2t_checkpoint
from t2t_lite.models.transformer import Transformer

TINY = "num_heads=4,num_hidden_layers=2,symbol_modality_num_shards=3"
SMALL = ",hidden_size=16,filter_size=32"
VOCAB = "vocab.translate_toy_ende1k.1024.subwords"
EXTRA_LENGTH = 7
INPUTS = [[5, 9, 3, 17, 2], [8, 4], [30, 31, 32, 33, 34, 35, 36], [12]]


def _encoder(tmp_path, name: str, size: int) -> text_encoder.SubwordTextEncoder:
    """A SubwordTextEncoder of `size` subtokens (reserved ids, then made-up subtokens)."""
    path = tmp_path / name
    tokens = ["<pad>", "<EOS>"] + [f"t{i}_" for i in range(size - 2)]
    path.write_text("".join(f"'{t}'\n" for t in tokens), encoding="utf-8")
    return text_encoder.SubwordTextEncoder(str(path))


def _tiny_model(overrides: str, vocab=(40, 40), seed: int = 3, size: str = SMALL) -> Transformer:
    tf.keras.utils.set_random_seed(seed)
    return Transformer(create_hparams("transformer_tiny", TINY + size + overrides), *vocab)


def _export(model, tmp_path, target_space_id=0, **kwargs) -> ct2.Translator:
    tmp_path.mkdir(parents=True, exist_ok=True)
    inputs = _encoder(tmp_path, "in.subwords", model.input_vocab_size)
    targets = (inputs if model.target_vocab_size == model.input_vocab_size
               else _encoder(tmp_path, "out.subwords", model.target_vocab_size))
    path = ct2.export(model, str(tmp_path / "ct2"), inputs, targets, target_space_id, **kwargs)
    return ct2.Translator(path, intra_threads=1)


def _t2t_lite_ids(model, inputs, beam_size=1, target_space_id=0):
    batch = text_batches.pad_batch([ids + [text_encoder.EOS_ID] for ids in inputs])
    result = model.infer({"inputs": batch, "target_space_id": target_space_id},
                         decode_length=EXTRA_LENGTH, beam_size=beam_size, alpha=0.6)
    return np.asarray(result["outputs"]), np.asarray(result["scores"])


@pytest.mark.parametrize("overrides,vocab,target_space_id", [
    ("", (40, 40), 0),                                     # pre-norm, one shared matrix
    (",layer_preprocess_sequence=none,layer_postprocess_sequence=dan", (40, 40), 5),  # post-norm
    (",shared_embedding_and_softmax_weights=false", (40, 40), 2),  # separate softmax
    ("", (40, 52), 1),                                     # separate vocabularies
])
def test_greedy_ids_and_scores_match_t2t_lite(tmp_path, overrides, vocab, target_space_id):
    model = _tiny_model(overrides, vocab)
    translator = _export(model, tmp_path, target_space_id)
    expected, scores = _t2t_lite_ids(model, INPUTS, target_space_id=target_space_id)
    got = translator.translate_ids(INPUTS, beam_size=1, extra_length=EXTRA_LENGTH)
    # Random weights never emit EOS: all max(len) + 1 + EXTRA_LENGTH steps are compared.
    assert expected.shape[1] == 7 + 1 + EXTRA_LENGTH
    assert (expected != text_encoder.EOS_ID).all()
    for row, (hyp,) in enumerate(got):
        assert hyp.ids == expected[row].tolist()
        # The search's running scores differ from the summed exact log-probabilities by
        # ~1e-3 per step (CTranslate2's fast log-softmax); its teacher-forced log-probs are
        # exact (test_teacher_forced_log_probs_match_t2t_lite).
        assert hyp.score == pytest.approx(scores[row], rel=5e-3)


@pytest.mark.parametrize("overrides", [
    "", ",layer_preprocess_sequence=none,layer_postprocess_sequence=dan"])
def test_teacher_forced_log_probs_match_t2t_lite(tmp_path, overrides):
    model = _tiny_model(overrides, (40, 52))
    _export(model, tmp_path, target_space_id=4)
    translator = ctranslate2.Translator(str(tmp_path / "ct2"), intra_threads=1)
    source, target = INPUTS[2], [7, 3, 9, 12, 45, 5]
    vocab = json.loads((tmp_path / "ct2" / "target_vocabulary.json").read_text())
    source_vocab = json.loads((tmp_path / "ct2" / "source_vocabulary.json").read_text())
    (result,) = translator.score_batch([[source_vocab[i] for i in source]],
                                       [[vocab[i] for i in target]])
    logits = model({"inputs": tf.constant([source + [1]]),
                    "targets": tf.constant([target + [1]]),
                    "target_space_id": tf.constant(4)}, training=False)
    log_probs = tf.nn.log_softmax(logits, axis=-1).numpy()[0]
    expected = [log_probs[i, t] for i, t in enumerate(target + [1])]
    np.testing.assert_allclose(result.log_probs, expected, atol=1e-4)


def test_target_space_embedding_is_folded_into_the_encoder(tmp_path):
    model = _tiny_model("")
    a = _export(model, tmp_path / "a", target_space_id=0)
    b = _export(model, tmp_path / "b", target_space_id=7)
    ids_a = [h[0].ids for h in a.translate_ids(INPUTS, beam_size=1, extra_length=EXTRA_LENGTH)]
    ids_b = [h[0].ids for h in b.translate_ids(INPUTS, beam_size=1, extra_length=EXTRA_LENGTH)]
    assert ids_a != ids_b  # the target space changes the encoder input
    expected, _ = _t2t_lite_ids(model, INPUTS, target_space_id=7)
    assert ids_b == expected.tolist()


def test_beam_search_matches_t2t_lite_on_a_random_model(tmp_path):
    # Both searches keep the same alive beams (the best beam_size candidates that are not
    # EOS); here every finished hypothesis that t2t keeps is also one CTranslate2 registers.
    model = _tiny_model("")
    translator = _export(model, tmp_path)
    expected, scores = _t2t_lite_ids(model, INPUTS, beam_size=4)
    got = translator.translate_ids(INPUTS, beam_size=4, alpha=0.6, extra_length=EXTRA_LENGTH,
                                   num_hypotheses=2)
    for row, hyps in enumerate(got):
        # Up to 2: only finished hypotheses are returned when one exists (t2t's rule).
        assert 1 <= len(hyps) <= 2 and hyps[0].score >= hyps[-1].score
        assert hyps[0].ids == text_batches.save_until_eos(expected[row]).tolist()
        assert hyps[0].score == pytest.approx(scores[row], rel=5e-3)


def test_export_writes_vocabularies_and_metadata(tmp_path):
    model = _tiny_model("", (40, 52))
    _export(model, tmp_path, target_space_id=3)
    files = set(os.listdir(tmp_path / "ct2"))
    assert {"model.bin", "config.json", "source_vocabulary.json", "target_vocabulary.json",
            ct2.METADATA_FILE, ct2.INPUTS_VOCAB_FILE, ct2.TARGETS_VOCAB_FILE} <= files
    target_vocab = json.loads((tmp_path / "ct2" / "target_vocabulary.json").read_text())
    assert target_vocab[:3] == ["<pad>", "<EOS>", "t0_"] and len(target_vocab) == 52
    config = json.loads((tmp_path / "ct2" / "config.json").read_text())
    assert config["layer_norm_epsilon"] == pytest.approx(1e-6)
    assert config["eos_token"] == "<EOS>" and config["add_source_eos"] is True
    assert json.loads((tmp_path / "ct2" / ct2.METADATA_FILE).read_text())["target_space_id"] == 3


def test_timing_table_is_concatenated_sin_cos(t2t_fixtures):
    expected = np.load(t2t_fixtures / "timing.npz")["timing_50_512"][0]
    np.testing.assert_allclose(ct2.timing_table(50, 512), expected, atol=1e-6)


@pytest.mark.parametrize("overrides,message", [
    (",layer_postprocess_sequence=dan", "pre-norm"),
    (",attention_key_channels=8", "attention_key_channels=8"),
])
def test_refuses_what_ctranslate2_cannot_compute(tmp_path, overrides, message):
    model = _tiny_model(overrides)
    with pytest.raises(UserError, match=message):
        _export(model, tmp_path)


def test_user_errors_name_the_directory_and_the_limit(tmp_path):
    with pytest.raises(UserError, match="not a CTranslate2 export"):
        ct2.Translator(str(tmp_path))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "keep.txt").write_text("x")
    model = _tiny_model("")
    encoder = _encoder(tmp_path, "v.subwords", 40)
    with pytest.raises(UserError, match="--export_dir=.*other exists"):
        ct2.export(model, str(tmp_path / "other"), encoder, encoder)
    translator = _export(model, tmp_path / "small", max_position=8)
    with pytest.raises(UserError, match="longer than the 8 positions"):
        translator.translate_ids([list(range(2, 12))], beam_size=1)


def test_int8_export_is_smaller_and_translates(tmp_path):
    model = _tiny_model("", (200, 200), size=",hidden_size=64,filter_size=128")
    fp32 = _export(model, tmp_path / "fp32", max_position=32)
    int8 = _export(model, tmp_path / "int8", quantization="int8", max_position=32)
    size = {d: os.path.getsize(tmp_path / d / "ct2" / "model.bin") for d in ("fp32", "int8")}
    assert size["int8"] < 0.5 * size["fp32"]
    a = fp32.translate_ids(INPUTS, beam_size=1, extra_length=EXTRA_LENGTH)
    b = int8.translate_ids(INPUTS, beam_size=1, extra_length=EXTRA_LENGTH)
    # int8 weights move the logits a little: most greedy steps still agree.
    steps = [(x == y) for ra, rb in zip(a, b) for x, y in zip(ra[0].ids, rb[0].ids)]
    assert len(steps) == len(INPUTS) * (8 + EXTRA_LENGTH) and np.mean(steps) > 0.5


# ----------------------------------------------------------------- t2t's fixture checkpoint
def _run_py(*args: str, without_tensorflow: bool = False) -> subprocess.CompletedProcess:
    command = [sys.executable, str(REPO_ROOT / "run.py"), *args]
    if without_tensorflow:  # `import tensorflow` raises ImportError in that process
        command = [sys.executable, "-c",
                   ("import runpy, sys; sys.modules['tensorflow'] = None; "
                   f"sys.argv = {command[1:]!r}; runpy.run_path(sys.argv[0], run_name='__main__')")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO_ROOT,
                            check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def fixture_export(t2t_fixtures, tmp_path_factory):
    """t2t's fixture checkpoint exported by `run.py --mode=export --export_format=ctranslate2`
    (the directory)."""
    data_dir = tmp_path_factory.mktemp("data")
    vocab_name = registry.problem("translate_files").vocab_filename
    (data_dir / vocab_name).write_bytes((t2t_fixtures / VOCAB).read_bytes())
    export_dir = data_dir.parent / "ct2"
    _run_py("--mode=export", "--export_format=ctranslate2", "--problem=translate_files",
            f"--data_dir={data_dir}", "--hparams_set=transformer_tiny",
            f"--checkpoint_path={t2t_fixtures / 'ckpt_A_trained'}", f"--export_dir={export_dir}")
    return export_dir


@pytest.mark.slow
def test_t2t_checkpoint_exported_by_run_py_decodes_like_t2t_lite(t2t_fixtures, wmt_toy_dir,
                                                                  fixture_export, tmp_path):
    lines = (wmt_toy_dir / "dev.en").read_text(encoding="utf-8").splitlines()[:40]
    source = tmp_path / "src.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    export_dir = fixture_export
    hyp = tmp_path / "hyp.txt"
    # Serving needs no TensorFlow: the decode process runs with its import blocked. With word
    # alignments from CTranslate2's attention (the export's default layer, the last) and a
    # target prefix on every fourth line.
    prefixes = ["Die" if i % 4 == 0 else "" for i in range(len(lines))]
    prefix_file = tmp_path / "prefix.txt"
    prefix_file.write_text("\n".join(prefixes) + "\n", encoding="utf-8")
    _run_py("--mode=decode", "--decode_engine=ctranslate2", f"--export_dir={export_dir}",
            "--decode_hparams=beam_size=1,extra_length=20,return_alignment=true",
            f"--decode_from_file={source}", f"--decode_to_file={hyp}",
            f"--decode_prefix_file={prefix_file}", f"--decode_reference={source}",
            without_tensorflow=True)
    got = hyp.read_text(encoding="utf-8").splitlines()

    encoder = text_encoder.SubwordTextEncoder(str(t2t_fixtures / VOCAB))
    model = t2t_checkpoint.load_model(str(t2t_fixtures / "ckpt_A_trained"),
                                      create_hparams("transformer_tiny"))
    decode_hp = decode_hparams.decode_hparams(
        "beam_size=1,extra_length=20,log_results=False,return_alignment=true")
    aligned = []  # the t2t_lite engine's alignments (run.py's decode_from_file writes them)
    expected = decoding.decode_lines(lines, decoding.make_infer_fn(model, decode_hp), encoder,
                                     encoder, decode_hp, prefixes=prefixes, alignments=aligned)
    assert got == expected
    assert all(text.startswith("Die ") for text in got[::4])
    assert (tmp_path / "hyp.txt.align").read_text(encoding="utf-8").splitlines() == aligned
    assert len(aligned) == len(lines) and all(
        len(line.split()) == len(text.split()) for line, text in zip(aligned, got))
    # The trained fixture emits EOS on some lines and repeats a token up to the limit on others.
    assert min(len(line.split()) for line in got) <= 3
    assert max(len(line.split()) for line in got) > 20

    # The same directory through the library, with n-best lists: the best is greedy's
    # neighbour in quality, every list is sorted by t2t's score.
    translator = ct2.Translator(str(export_dir), intra_threads=1)
    nbest = translator.translate(lines[:8], beam_size=4, extra_length=20, num_hypotheses=3)
    assert max(len(row) for row in nbest) == 3
    for row in nbest:
        assert [h.score for h in row] == sorted((h.score for h in row), reverse=True)


@pytest.mark.slow
def test_serve_mode_on_ctranslate2_equals_decode_mode(fixture_export, wmt_toy_dir, tmp_path):
    # `run.py --mode=serve --decode_engine=ctranslate2` on a free port: 16 dev lines sent by
    # 8 concurrent clients (batched together) come back as `--mode=decode
    # --decode_engine=ctranslate2` gives each line alone (batch_size=1: t2t's decode length
    # is per batch), with beam search.
    require_extra("fastapi", "serve")
    from t2t_lite.serving.client import Translator
    from tests.server_helpers import ServerProcess, request

    hparams = "beam_size=4,alpha=0.6,extra_length=20"
    lines = (wmt_toy_dir / "dev.en").read_text(encoding="utf-8").splitlines()[:16]
    source = tmp_path / "src.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    served = ServerProcess(None, "--decode_engine=ctranslate2", f"--export_dir={fixture_export}",
                           "--batch_timeout_ms=200", cwd=tmp_path, decode_hparams=hparams)
    try:
        hyp = tmp_path / "hyp.txt"
        _run_py("--mode=decode", "--decode_engine=ctranslate2", f"--export_dir={fixture_export}",
                f"--decode_hparams={hparams},batch_size=1", f"--decode_from_file={source}",
                f"--decode_to_file={hyp}", without_tensorflow=True)
        expected = hyp.read_text(encoding="utf-8").splitlines()
        served.wait_ready()
        status, models, _ = request(served.url + "/v1/models")
        assert (status, models["models"][0]["engine"]) == (200, "ctranslate2")
        # One decode worker per CTranslate2 replica (one per usable core), the given timeout.
        limits = models["models"][0]["limits"]
        assert (limits["decode_workers"], limits["batch_timeout_ms"]) == (
            ct2_options.thread_counts("cpu", 0, 0)[0], 200)
        translator = Translator(served.url)
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda line: translator.translate_request([line]), lines))
        assert [a["outputs"][0] for a in answers] == expected
        # Short outputs and outputs run to their limit (those decoded again when batched
        # beside longer lines).
        assert min(len(line.split()) for line in expected) <= 3
        assert max(len(line.split()) for line in expected) > 20
    finally:
        served.stop()


def test_translate_queues_batches_in_parallel_and_keeps_input_order(tmp_path):
    """`translate` queues every batch at once on 2 workers; the result equals translating
    t2t-decoder's sorted batches one by one (each with its own decode length), in input
    order."""
    model = _tiny_model("")
    inputs = _encoder(tmp_path, "in.subwords", model.input_vocab_size)
    export_dir = ct2.export(model, str(tmp_path / "ct2"), inputs, inputs)
    rng = np.random.RandomState(0)
    lines = [" ".join(f"t{i}" for i in rng.randint(1, 30, size=rng.randint(1, 9)))
             for _ in range(11)]
    parallel = ct2.Translator(export_dir, inter_threads=2, intra_threads=1)
    assert parallel.translator.num_translators == 2
    # device="auto": the defaults of the device CTranslate2 picks (CPU: a worker per core).
    auto = ct2.Translator(export_dir, device="auto")
    on_gpu = ct2.import_ctranslate2().get_cuda_device_count() > 0
    assert auto.translator.device == ("cuda" if on_gpu else "cpu")
    assert auto.translator.num_translators == (1 if on_gpu else len(os.sched_getaffinity(0)))
    got = parallel.translate(lines, beam_size=2, extra_length=6, batch_size=3)

    one_by_one = ct2.Translator(export_dir, inter_threads=1, intra_threads=1)
    sorted_lines, keys = text_batches.sort_inputs(lines)
    expected = []
    for start in range(0, len(lines), 3):
        expected += one_by_one.translate_ids(
            [inputs.encode(text) for text in sorted_lines[start:start + 3]], beam_size=2,
            extra_length=6)
    expected = [expected[keys[i]] for i in range(len(lines))]
    assert [[(h.ids, h.score) for h in row] for row in got] == \
        [[(h.ids, h.score) for h in row] for row in expected]
    assert len({len(row[0].ids) for row in got}) > 1  # not all one trivial output


def test_thread_counts():
    cores = len(os.sched_getaffinity(0))
    assert ct2.thread_counts("cpu", 0, 0) == (cores, 1)
    assert ct2.thread_counts("cpu", 3, 0) == (3, 1)
    assert ct2.thread_counts("cpu", 0, 2) == (max(1, cores // 2), 2)
    assert ct2.thread_counts("cuda", 0, 0) == (1, 0)
    with pytest.raises(UserError, match="inter_threads=-1"):
        ct2.thread_counts("cpu", -1, 0)
