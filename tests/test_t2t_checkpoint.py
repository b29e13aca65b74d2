"""Loading t2t checkpoints: both layouts (§2.11), shared/unshared vocab, all-or-nothing checks,
optimizer-slot filtering and the import_t2t mode."""
import json
import pathlib
import subprocess
import sys
import types

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.bin import import_t2t
from t2t_lite.hparams_lib import create_hparams
from t2t_lite.models import t2t_checkpoint
from t2t_lite.models.transformer import Transformer

POST_NORM = "layer_preprocess_sequence=none,layer_postprocess_sequence=dan"
TINY = "hidden_size=16,filter_size=24,num_heads=2,num_hidden_layers=2,symbol_modality_num_shards=4"


def expected_t2t_names(d, f, layers, pre_norm, vocab_in, vocab_out, shared, shards=4):
    """Name -> shape per T2T_REFERENCE §2.11, written independently of the model code."""
    names = {}

    def rows(v):
        return [v // shards + (1 if i < v % shards else 0) for i in range(shards)]

    def modality(v, scope):
        for i, r in enumerate(rows(v)):
            names[f"transformer/symbol_modality_{v}_{d}/{scope}/weights_{i}"] = [r, d]

    if shared:
        modality(vocab_out, "shared")
    else:
        modality(vocab_in, "input_emb")
        modality(vocab_out, "target_emb")
        modality(vocab_out, "softmax")
    body = "transformer/body"
    names[f"{body}/target_space_embedding/kernel"] = [32, d]
    norm_scope = "layer_prepostprocess" if pre_norm else "layer_postprocess"

    def norm(scope):
        names[f"{scope}/layer_norm/layer_norm_scale"] = [d]
        names[f"{scope}/layer_norm/layer_norm_bias"] = [d]

    for stack, sublayers in (("encoder", ["self_attention"]),
                             ("decoder", ["self_attention", "encdec_attention"])):
        for layer in range(layers):
            scope = f"{body}/{stack}/layer_{layer}"
            for sub in sublayers:
                norm(f"{scope}/{sub}/{norm_scope}")
                for proj in ("q", "k", "v", "output_transform"):
                    names[f"{scope}/{sub}/multihead_attention/{proj}/kernel"] = [d, d]
            norm(f"{scope}/ffn/{norm_scope}")
            names[f"{scope}/ffn/conv1/kernel"] = [d, f]
            names[f"{scope}/ffn/conv1/bias"] = [f]
            names[f"{scope}/ffn/conv2/kernel"] = [f, d]
            names[f"{scope}/ffn/conv2/bias"] = [d]
        if pre_norm:
            norm(f"{body}/{stack}/layer_prepostprocess")
    return names


def save_t2t_style(prefix, tensors):
    """Writes a name-based (TF1-style) checkpoint with exactly the given variable names."""
    names = sorted(tensors)
    tf.raw_ops.SaveV2(prefix=str(prefix), tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(tensors[n]) for n in names])
    return str(prefix)


def random_values(names, seed=0):
    rng = np.random.default_rng(seed)
    return {n: rng.normal(size=s).astype(np.float32) for n, s in names.items()}


TRAINING_EXTRAS = {
    "global_step": np.int64(1234),
    "losses_avg/problem_0/total_loss": np.float32(100.0),
    "train_stats/problem_0_steps": np.int32(7),
    "training/beta1_power": np.float32(0.9),
    "training/transformer/body/target_space_embedding/kernel/Adam": np.zeros([32, 16], np.float32),
    "training/LazyAdam/transformer/body/target_space_embedding/kernel/m": np.zeros(
        [32, 16], np.float32),
}


@pytest.mark.parametrize("pre_norm", [True, False])
@pytest.mark.parametrize("vocab", [(23, 23), (23, 19)])
def test_name_map_covers_both_layouts(pre_norm, vocab):
    overrides = TINY + ("" if pre_norm else "," + POST_NORM)
    model = Transformer(create_hparams("transformer_tiny", overrides), *vocab)
    shared = vocab[0] == vocab[1]
    expected = expected_t2t_names(16, 24, 2, pre_norm, *vocab, shared=shared)
    got = {n: list(v.shape) for n, v in t2t_checkpoint.t2t_variable_map(model).items()}
    assert got == expected
    assert len(model.trainable_weights) == len(expected)


def test_post_norm_unshared_checkpoint_loads(tmp_path):
    names = expected_t2t_names(16, 24, 2, False, 23, 19, shared=False)
    values = random_values(names)
    prefix = save_t2t_style(tmp_path / "model.ckpt-1234", {**values, **TRAINING_EXTRAS})
    hp = create_hparams("transformer_tiny", TINY + "," + POST_NORM)
    assert t2t_checkpoint.checkpoint_vocab_sizes(prefix) == (23, 19)
    model = t2t_checkpoint.load_model(prefix, hp)
    assert (model.input_vocab_size, model.target_vocab_size) == (23, 19)
    for name, var in t2t_checkpoint.t2t_variable_map(model).items():
        np.testing.assert_array_equal(var.numpy(), values[name], err_msg=name)
    logits = model({"inputs": tf.constant([[3, 4, 1]]), "targets": tf.constant([[5, 6, 1]])})
    assert logits.shape == (1, 3, 19)


def test_mismatches_fail_listing_names_and_leave_model_unchanged(tmp_path):
    names = expected_t2t_names(16, 24, 2, True, 23, 23, shared=True)
    values = random_values(names)
    dropped = "transformer/body/decoder/layer_1/ffn/conv2/bias"
    del values[dropped]
    values["transformer/body/decoder/layer_1/ffn/conv3/bias"] = np.zeros(16, np.float32)
    prefix = save_t2t_style(tmp_path / "model.ckpt-5", values)
    model = Transformer(create_hparams("transformer_tiny", TINY), 23, 23)
    before = [w.numpy() for w in model.weights]
    with pytest.raises(t2t_checkpoint.T2TCheckpointError) as error:
        t2t_checkpoint.load_t2t_weights(model, prefix)
    message = str(error.value)
    assert "Missing from the checkpoint (1):\n  " + dropped in message
    assert "Unexpected in the checkpoint (1):\n  transformer/body/decoder/layer_1/ffn/conv3/bias" \
        in message
    for old, new in zip(before, model.weights):
        np.testing.assert_array_equal(old, new.numpy())


def test_shape_mismatch_and_layout_hint(tmp_path):
    names = expected_t2t_names(16, 24, 2, False, 23, 23, shared=True)
    prefix = save_t2t_style(tmp_path / "post.ckpt-1", random_values(names))
    pre_norm_model = Transformer(create_hparams("transformer_tiny", TINY), 23, 23)
    with pytest.raises(t2t_checkpoint.T2TCheckpointError, match="checkpoint is post-norm"):
        t2t_checkpoint.load_t2t_weights(pre_norm_model, prefix)
    wider = Transformer(create_hparams("transformer_tiny", TINY.replace(
        "filter_size=24", "filter_size=32") + "," + POST_NORM), 23, 23)
    with pytest.raises(t2t_checkpoint.T2TCheckpointError,
                       match=r"encoder/layer_0/ffn/conv1/bias: checkpoint \[24\] vs model \[32\]"):
        t2t_checkpoint.load_t2t_weights(wider, prefix)


def test_training_checkpoint_extras_are_ignored(t2t_fixtures):
    shapes = dict(tf.train.list_variables(str(t2t_fixtures / "ckpt_A_trained")))
    model_names = {n for n in shapes if not t2t_checkpoint.is_ignored(n)}
    model = Transformer(create_hparams("transformer_tiny"), 1018, 1018)
    assert model_names == set(t2t_checkpoint.t2t_variable_map(model))
    assert any("LazyAdam" in n for n in shapes) and "global_step" in shapes


def test_missing_checkpoint_errors(tmp_path):
    with pytest.raises(t2t_checkpoint.T2TCheckpointError, match="no 'checkpoint' file"):
        t2t_checkpoint.checkpoint_vocab_sizes(str(tmp_path))
    with pytest.raises(t2t_checkpoint.T2TCheckpointError, match="model.ckpt-9.index does not"):
        t2t_checkpoint.checkpoint_vocab_sizes(str(tmp_path / "model.ckpt-9"))


def test_import_t2t_main_round_trip(tmp_path, t2t_fixtures):
    out = tmp_path / "imported"
    flags = types.SimpleNamespace(checkpoint_path=str(t2t_fixtures / "ckpt_A_trained"),
                                  hparams_set="transformer_tiny", hparams="",
                                  output_dir=str(out))
    path = import_t2t.main(flags)
    assert tf.train.latest_checkpoint(str(out)) == path
    assert json.loads((out / "hparams.json").read_text())["hidden_size"] == 128
    info = json.loads((out / "t2t_import.json").read_text())
    assert (info["global_step"], info["target_vocab_size"]) == (25, 1018)

    restored = Transformer(create_hparams("transformer_tiny"), 1018, 1018)
    step = tf.Variable(0, dtype=tf.int64)
    tf.train.Checkpoint(step=step, model=restored).restore(path).assert_existing_objects_matched()
    assert int(step) == 25
    data = np.load(t2t_fixtures / "model_A_trained.npz")
    logits = restored({"inputs": data["inputs"], "targets": data["targets"]})
    np.testing.assert_allclose(logits, data["logits"][:, :, 0, 0], atol=1e-4)
    with pytest.raises(ValueError, match="already holds a checkpoint"):
        import_t2t.main(flags)
    with pytest.raises(ValueError, match="--hparams_set is required"):
        import_t2t.main(types.SimpleNamespace(
            checkpoint_path=flags.checkpoint_path, hparams_set=None, hparams="",
            output_dir=str(tmp_path / "other")))


@pytest.mark.slow
def test_import_t2t_through_run_py(tmp_path, t2t_fixtures):
    repo = pathlib.Path(__file__).resolve().parents[1]
    out = tmp_path / "imported"
    result = subprocess.run(
        [sys.executable, str(repo / "run.py"), "--mode=import_t2t",
         f"--checkpoint_path={t2t_fixtures / 'ckpt_A' / 'model.ckpt-0'}",
         "--hparams_set=transformer_tiny", f"--output_dir={out}"],
        check=False, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert tf.train.latest_checkpoint(str(out)).endswith("ckpt-0")
    assert (out / "hparams.json").exists()
