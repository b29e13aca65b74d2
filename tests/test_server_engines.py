"""The translation server's engines on one tiny random model, in process: t2t_lite's decoder
and CTranslate2 give the same greedy translations through the batcher as each sentence
decoded alone, with rows decoded again where the batch's decode limit was longer. (The
SavedModel engine is not tested here: exporting even a tiny SavedModel takes minutes on the
shared CI machine.)"""
from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import require_extra

tf = pytest.importorskip("tensorflow")
pytestmark = pytest.mark.slow
from t2t_lite.data_generators import text_encoder
from t2t_lite.decoding import decode_hparams, decoding
from t2t_lite.hparams_lib import create_hparams
from t2t_lite.models.transformer import Transformer
from t2t_lite.serving import batching, engines

EXTRA_LENGTH = 4
# Subword sentences of several lengths ("tN_" are the made-up subtokens of the vocab).
SENTENCES = ["t3 t7 t1 t15 t0", "t6 t2", "t28 t29 t30 t31 t32 t33 t34", "t10", "t4 t4 t4"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """(model, encoder, decode hparams) of a 2-layer random model over a 40-subtoken vocab."""
    path = tmp_path_factory.mktemp("engines") / "vocab.subwords"
    tokens = ["<pad>", "<EOS>"] + [f"t{i}_" for i in range(38)]
    path.write_text("".join(f"'{t}'\n" for t in tokens), encoding="utf-8")
    encoder = text_encoder.SubwordTextEncoder(str(path))
    tf.keras.utils.set_random_seed(3)
    model = Transformer(create_hparams(
        "transformer_tiny", "num_heads=4,num_hidden_layers=2,hidden_size=16,filter_size=32"),
        40, 40)
    decode_hp = decode_hparams.decode_hparams(f"beam_size=1,extra_length={EXTRA_LENGTH}")
    return model, encoder, decode_hp, path.parent


def _through_batcher(engine, texts, options):
    """Each text's best hypothesis decoded in batches of up to 8, and the batch sizes."""
    sizes = []
    batcher = batching.Batcher(engine, max_batch_size=8, batch_timeout_secs=0.05,
                               on_batch=sizes.append)
    jobs = batching.jobs_for([engine.encode(t) for t in texts], options)
    batcher.submit(jobs)
    batcher.start()
    batcher.close()
    return [job.future.result().row.hypotheses[0] for job in jobs], sizes


def _alone(engine, texts, options):
    return [engine.decode([engine.encode(t)], options)[0].hypotheses[0] for t in texts]


def test_t2t_lite_engine_batched_equals_alone_and_decode_mode(setup):
    model, encoder, decode_hp, _ = setup
    engine = engines.T2tLiteEngine(model, {"inputs": encoder, "targets": encoder}, 0, decode_hp,
                                   40, {})
    options = batching.Options(1, 0.6, 1)
    batched, sizes = _through_batcher(engine, SENTENCES, options)
    alone = _alone(engine, SENTENCES, options)
    assert [h.text for h in batched] == [h.text for h in alone]
    np.testing.assert_allclose([h.score for h in batched], [h.score for h in alone], rtol=1e-5)
    # The random model never emits EOS: each row ran to its own limit (input length +
    # extra_length) inside the one batch, and none was decoded again.
    assert sizes == [5]
    assert len({len(h.ids) for h in batched}) > 1
    infer = decoding.make_infer_fn(model, decode_hp)
    expected = decoding.decode_lines(SENTENCES, infer, encoder, encoder,
                                     decode_hparams.decode_hparams(f"beam_size=1,extra_length="
                                                                   f"{EXTRA_LENGTH},batch_size=1"))
    assert [h.text for h in batched] == expected
    with pytest.raises(engines.SentenceError, match="outside the input vocabulary"):
        engines.T2tLiteEngine(model, {"inputs": encoder, "targets": encoder}, 0, decode_hp,
                              20, {}).encode("t30")


def test_ctranslate2_engine_gives_t2t_lite_greedy_translations(setup, tmp_path):
    require_extra("ctranslate2", "ctranslate2")
    from t2t_lite.export import ct2

    model, encoder, decode_hp, _ = setup
    path = ct2.export(model, str(tmp_path / "ct2"), encoder, encoder, 0)
    engine = engines.CTranslate2Engine(ct2.Translator(path, intra_threads=1), decode_hp, {})
    reference = engines.T2tLiteEngine(model, {"inputs": encoder, "targets": encoder}, 0,
                                      decode_hp, 40, {})
    options = batching.Options(1, 0.6, 1)
    batched, _ = _through_batcher(engine, SENTENCES, options)
    assert [h.text for h in batched] == [h.text for h in _alone(reference, SENTENCES, options)]


@pytest.mark.parametrize("options", [batching.Options(1, 0.6, 1), batching.Options(3, 0.6, 2)])
def test_continuous_batching_gives_each_sentence_its_alone_translation(setup, options):
    from t2t_lite.serving.continuous_batching import ContinuousBatcher

    model, encoder, decode_hp, _ = setup
    engine = engines.T2tLiteEngine(model, {"inputs": encoder, "targets": encoder}, 0, decode_hp,
                                   40, {})
    assert engine.continuous_refusal() is None
    live = []
    # 3 places, 1 step a call: sentences join while others are half decoded.
    batcher = ContinuousBatcher(engine, 16, steps_per_call=1, max_batch_size=3,
                                on_batch=live.append)
    texts = SENTENCES * 2
    jobs = batching.jobs_for([engine.encode(t) for t in texts], options)
    batcher.submit(jobs)
    batcher.start()
    batcher.close()
    alone = [engine.decode([engine.encode(t)], options)[0].hypotheses for t in texts]
    got = [job.future.result().row.hypotheses for job in jobs]
    assert [[h.text for h in row] for row in got] == [[h.text for h in row] for row in alone]
    assert [len(row) for row in got] == [options.n_best] * len(texts)
    np.testing.assert_allclose([[h.score for h in row] for row in got],
                               [[h.score for h in row] for row in alone], rtol=1e-5)
    # At most 3 live at once, and all 3 places used; nothing left in the queue.
    assert max(live) == 3 and batcher.depth() == 0
