"""The training loop on one device: outputs, TensorBoard events, resume, multistep, fp16."""
import json
import logging
import os

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.bin import t2t_trainer
from t2t_lite.training import distribution, trainer_lib
from t2t_lite.utils import checkpoint_guard, run_metadata
from tests.trainer_utils import LENGTH, ReverseProblem, model_fn, read_events, tiny_hparams

TRAIN_SCALARS = ("loss", "losses/training", "learning_rate", "global_norm/gradient_norm",
                 "global_step/sec", "tokens/sec")


def _trainer(output_dir, hparams=None, problem=None, **config):
    hparams = hparams or tiny_hparams()
    defaults = {"train_steps": 12, "log_step_count_steps": 4, "local_eval_frequency": 6,
                "eval_steps": 2, "random_seed": 1, "num_decode_examples": 2}
    defaults.update(config)
    tf.keras.utils.set_random_seed(1)
    return trainer_lib.Trainer(model_fn(hparams), hparams, problem or ReverseProblem(), "",
                               trainer_lib.RunConfig(output_dir=str(output_dir), **defaults))


@pytest.mark.slow
def test_train_and_eval_writes_checkpoints_and_events(tmp_path):
    trainer = _trainer(tmp_path)
    stats = trainer.train(eval_every=6)
    assert trainer.step == 12
    assert np.isfinite(stats["loss"]) and stats["learning_rate"] > 0
    assert trainer.train_step_fns[True, False].experimental_get_tracing_count() == 1
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-12")
    assert sorted(os.path.basename(p) for p in tf.io.gfile.glob(str(tmp_path / "ckpt-*.index"))) \
        == ["ckpt-12.index", "ckpt-6.index"]

    train_events = read_events(str(tmp_path))
    for tag in TRAIN_SCALARS:
        assert [step for step, _ in train_events[tag]] == [4, 8, 12], tag
    lr = dict(train_events["learning_rate"])
    expected_lr = trainer.optimizer.schedule(11)  # the update at global step 11
    assert float(lr[12]) == pytest.approx(float(expected_lr), rel=1e-6)
    assert all(float(v) > 0 for _, v in train_events["tokens/sec"])

    eval_events = read_events(str(tmp_path / "eval"))
    prefix = "metrics-reverse_standin/targets/"
    for tag in ["loss"] + [prefix + m for m in ("accuracy", "accuracy_top5",
                                                 "accuracy_per_sequence", "neg_log_perplexity")]:
        assert [step for step, _ in eval_events[tag]] == [6, 12], tag
    results = trainer.last_eval_results
    # Loss = mean of batch losses; -neg_log_perplexity = token-weighted mean: close, not equal.
    assert results["loss"] == pytest.approx(-results[prefix + "neg_log_perplexity"], rel=0.05)
    assert 0 <= results[prefix + "accuracy"] <= results[prefix + "accuracy_top5"] <= 1
    decodes = eval_events["decodes"][-1][1]
    assert b"| inputs | targets | outputs |" in decodes.item()


@pytest.mark.slow
def test_eval_metrics_match_a_direct_computation(tmp_path):
    trainer = _trainer(tmp_path, eval_steps=0, num_decode_examples=0)
    results = trainer.evaluate()
    data = ReverseProblem().data["eval"]
    logits = trainer.model({"inputs": data["inputs"], "targets": data["targets"],
                            "target_space_id": tf.constant(0)}, training=False).numpy()
    labels = data["targets"]
    weights = labels != 0
    acc = ((logits.argmax(-1) == labels) * weights).sum() / weights.sum()
    assert results["metrics-reverse_standin/targets/accuracy"] == pytest.approx(acc, rel=1e-5)
    # Eval loss: unsmoothed token cross-entropy, mean over the 4 batches of 8.
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    xent = -np.take_along_axis(logp, labels[..., None], -1)[..., 0] * weights
    batch_losses = [xent[i:i + 8].sum() / weights[i:i + 8].sum() for i in range(0, 32, 8)]
    assert results["loss"] == pytest.approx(np.mean(batch_losses), rel=1e-4)


@pytest.mark.slow
def test_restart_resumes_from_latest_checkpoint(tmp_path, caplog):
    first = _trainer(tmp_path, train_steps=6, save_checkpoints_steps=3)
    first.train()
    saved = [v.numpy() for v in first.model.trainable_variables]
    second = _trainer(tmp_path, train_steps=9, save_checkpoints_steps=3)
    assert second.restore() == 6
    for a, b in zip(saved, second.model.trainable_variables):
        np.testing.assert_array_equal(a, b.numpy())
    assert int(second.optimizer.inner_optimizer.iterations) == 6
    with caplog.at_level(logging.INFO):
        second.train()
    # One line says where training resumes and that the data order starts over (t2t's).
    assert ("Resuming training at global step 6: the training data order restarts from its "
            "beginning" in caplog.text)
    assert "--deterministic restores the input position" in caplog.text
    assert second.step == 9
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-9")
    # t2t's continuous_eval: evaluates the newest checkpoint, stops once it is at train_steps.
    evaluator = _trainer(tmp_path, train_steps=9, num_decode_examples=0)
    results = evaluator.continuous_eval(timeout_secs=5)
    assert evaluator.step == 9 and "loss" in results
    assert [s for s, _ in read_events(str(tmp_path / "eval"))["loss"]][-1] == 9


def test_a_resume_reads_its_checkpoint_for_damage_once_and_restores_it_once(tmp_path,
                                                                           monkeypatch):
    def create(train_steps):
        tf.keras.utils.set_random_seed(1)
        return trainer_lib.create_trainer(
            ReverseProblem(), "transformer_tiny",
            "hidden_size=32,filter_size=64,num_heads=2,num_hidden_layers=1", "transformer", "",
            trainer_lib.RunConfig(output_dir=str(tmp_path), train_steps=train_steps,
                                  save_checkpoints_steps=2, num_decode_examples=0),
            lock=True)

    first = create(2)
    first.train()
    first.run_lock.release()
    read_whole, restored = [], []
    damage, restore = checkpoint_guard.damage, trainer_lib.Trainer._restore_strictly
    monkeypatch.setattr(checkpoint_guard, "damage",
                        lambda path: read_whole.append(path) or damage(path))
    monkeypatch.setattr(trainer_lib.Trainer, "_restore_strictly",
                        lambda self, checkpoint, path, **kw: restored.append(path) or restore(
                            self, checkpoint, path, **kw))
    second = create(3)
    checkpoint = str(tmp_path / "ckpt-2")
    # Checked before anything is written (damage, names and shapes), with its step; not
    # restored yet.
    assert (read_whole, restored, second.step) == ([checkpoint], [], 2)
    second.train()
    second.run_lock.release()
    assert (read_whole, restored, second.step) == ([checkpoint], [checkpoint], 3)
    # The optimizer state was restored (2 updates) before the third step.
    assert int(second.optimizer.inner_optimizer.iterations) == 3


@pytest.mark.slow
def test_multistep_accumulation_in_the_loop(tmp_path):
    """4 micro-batches of 2 examples == 1 batch of 8 (dropout off, constant learning rate)."""
    common = {"learning_rate_schedule": "constant", "learning_rate_constant": 0.01}
    # Sequences of one length: every micro-batch has the same token count, so the mean of
    # micro-batch means (t2t's multistep) equals the big batch's token mean.
    single = _trainer(tmp_path / "a", tiny_hparams(0.0, **common),
                      ReverseProblem(8, shuffle=False, min_length=LENGTH), train_steps=2)
    multi_hp = tiny_hparams(0.0, optimizer="multistep_adam",
                            optimizer_multistep_accumulate_steps=4, **common)
    multi = _trainer(tmp_path / "b", multi_hp,
                     ReverseProblem(2, shuffle=False, min_length=LENGTH), train_steps=8)
    initial = [v.numpy() for v in single.model.trainable_variables]
    single.train()
    multi.train()
    assert int(multi.optimizer.inner_optimizer.iterations) == 2
    moved = 0
    for a, b, c in zip(single.model.trainable_variables, multi.model.trainable_variables,
                       initial):
        moved += np.max(np.abs(a.numpy() - c)) > 5e-3
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    assert moved == len(initial)


@pytest.mark.slow
def test_adafactor_trains_and_resumes_with_its_slots(tmp_path):
    hparams = tiny_hparams(0.0, optimizer="adafactor", optimizer_adafactor_beta1=0.9)
    first = _trainer(tmp_path, hparams, train_steps=6, save_checkpoints_steps=3)
    initial = [v.numpy() for v in first.model.trainable_variables]
    first.train()
    optimizer = first.optimizer.inner_optimizer
    assert int(optimizer.iterations) == 6
    kernel = next(v for v in first.model.trainable_variables if len(v.shape) == 2)
    assert sorted(optimizer.slots(kernel)) == ["m", "vc", "vr"]
    saved = {name: var.numpy() for name, var in optimizer.slots(kernel).items()}
    assert all(np.max(np.abs(a.numpy() - b)) > 0
               for a, b in zip(first.model.trainable_variables, initial))
    second = _trainer(tmp_path, tiny_hparams(0.0, optimizer="adafactor",
                                             optimizer_adafactor_beta1=0.9), train_steps=9)
    assert second.restore() == 6
    restored = second.optimizer.inner_optimizer
    second_kernel = second.model.trainable_variables[
        [v.path for v in first.model.trainable_variables].index(kernel.path)]
    for name, var in restored.slots(second_kernel).items():
        np.testing.assert_array_equal(var.numpy(), saved[name])
    assert int(restored.iterations) == 6


@pytest.mark.slow
def test_summarize_grads_and_vars_write_t2ts_summaries(tmp_path):
    hparams = tiny_hparams(summarize_grads=True, summarize_vars=True, clip_grad_norm=0.5)
    trainer = _trainer(tmp_path, hparams, train_steps=4, log_step_count_steps=2)
    trainer.train()
    events = read_events(str(tmp_path))
    variables = trainer.model.trainable_variables
    assert len(variables) > 10
    for v in variables:
        name = v.path + "_0"
        for tag in (f"gradients/{name}", f"training_variables/{name}"):
            assert [step for step, _ in events[tag]] == [2, 4], tag
        # A variable histogram counts every entry of the variable once.
        counts = events[f"training_variables/{name}"][-1][1][:, 2]
        assert counts.sum() == pytest.approx(np.prod(v.shape))
    # The per-variable norms make up the clipped global norm, which clipping bounds.
    for step_index in (0, 1):
        norms = [float(events[f"gradient_norm/{v.path}_0"][step_index][1]) for v in variables]
        clipped = float(events["global_norm/clipped_gradient_norm"][step_index][1])
        assert np.sqrt(np.sum(np.square(norms))) == pytest.approx(clipped, rel=1e-4)
        assert clipped <= 0.5 + 1e-5
    unclipped = [float(value) for _, value in events["global_norm/gradient_norm"]]
    assert min(unclipped) > 0.5  # so the clipping acted
    plain = tmp_path / "plain"
    _trainer(plain, tiny_hparams(), train_steps=2, log_step_count_steps=2).train()
    assert not [tag for tag in read_events(str(plain))
                if tag.startswith(("gradients/", "training_variables/", "gradient_norm/"))]


@pytest.mark.slow
def test_float16_training_uses_loss_scaling(tmp_path):
    trainer = _trainer(tmp_path, tiny_hparams(activation_dtype="float16"), train_steps=4,
                       log_step_count_steps=2)
    stats = trainer.train()
    assert np.isfinite(stats["loss"])
    assert float(trainer.optimizer.loss_scale) == 2.0**15
    assert trainer.model.trainable_variables[0].dtype == tf.float32
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(tmp_path)))
    assert any("dynamic_scale" in name for name in reader.get_variable_to_shape_map())


@pytest.mark.slow
def test_symbol_dropout_is_drawn_in_the_training_step_from_the_step_seed(tmp_path):
    """symbol_dropout (every other dropout off) changes the training loss, and two runs with
    the same --random_seed draw the same dropped ids."""
    losses = {}
    for name, rate in (("off", 0.0), ("on", 0.5), ("on_again", 0.5)):
        trainer = _trainer(tmp_path / name, tiny_hparams(dropout=0.0, symbol_dropout=rate))
        iterator = iter(trainer.distributed_dataset(trainer_lib.TRAIN))
        step = trainer._make_train_step(iterator.element_spec, update=True)
        losses[name] = [float(step(next(iterator))["loss"]) for _ in range(3)]
    np.testing.assert_array_equal(losses["on"], losses["on_again"])
    assert abs(losses["on"][0] - losses["off"][0]) > 1e-4


@pytest.mark.slow
def test_xla_compiled_step_trains_as_the_graph_step(tmp_path):
    # Without dropout both steps compute the same maths: the losses agree step by step.
    losses = {}
    for xla in (False, True):
        trainer = _trainer(tmp_path / str(xla), tiny_hparams(dropout=0.0), train_steps=6,
                           log_step_count_steps=1, xla_compile=xla)
        iterator = iter(trainer.distributed_dataset(trainer_lib.TRAIN))
        step = trainer._make_train_step(iterator.element_spec, update=True)
        losses[xla] = [float(step(next(iterator))["loss"]) for _ in range(6)]
    np.testing.assert_allclose(losses[True], losses[False], rtol=2e-5)
    assert losses[True][-1] < losses[True][0]


@pytest.mark.slow
def test_xla_compiled_step_draws_the_same_dropout_masks_for_the_same_seed(tmp_path):
    # The hashed mask kernel (its own XLA function) inside the XLA-compiled step: two runs
    # with one --random_seed train alike, and the masks do drop units (loss != dropout off).
    losses = {}
    for name, rate in (("on", 0.3), ("on_again", 0.3), ("off", 0.0)):
        trainer = _trainer(tmp_path / name, tiny_hparams(dropout=rate), train_steps=3,
                           log_step_count_steps=1, xla_compile=True)
        iterator = iter(trainer.distributed_dataset(trainer_lib.TRAIN))
        step = trainer._make_train_step(iterator.element_spec, update=True)
        losses[name] = [float(step(next(iterator))["loss"]) for _ in range(3)]
    np.testing.assert_array_equal(losses["on"], losses["on_again"])
    assert abs(losses["on"][0] - losses["off"][0]) > 1e-3


def test_deterministic_needs_seed():
    with pytest.raises(ValueError, match="--random_seed"):
        distribution.setup_determinism(None, True)


def test_bad_activation_dtype_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="activation_dtype"):
        _trainer(tmp_path, tiny_hparams(activation_dtype="float64"))


def test_hparams_and_flags_files(tmp_path):
    hp = tiny_hparams()
    run_metadata.save_hparams(str(tmp_path), hp)
    text = (tmp_path / "hparams.json").read_text()
    assert run_metadata.read_hparams_json(str(tmp_path / "hparams.json")) == hp.values()
    assert set(json.loads(text)) == set(hp.values()) | {run_metadata.CHECKSUM_KEY}
    keys = [line.split('"')[1] for line in text.splitlines() if line.startswith('"')]
    assert keys == sorted(keys)

    class Flags:
        problem = "p"
        train_steps = 3

    assert t2t_trainer.flag_values(Flags()) == {}
    flags = type("F", (), {})()
    flags.problem, flags.train_steps = "p", 3
    run_metadata.save_flags(str(tmp_path), t2t_trainer.flag_values(flags))
    assert json.loads((tmp_path / "flags.json").read_text()) == {"problem": "p", "train_steps": 3}


def _run_default(tmp_path, *flags, timeout=900):
    import subprocess
    import sys
    import time

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CONFIG", None)
    start = time.time()
    result = subprocess.run(
        [sys.executable, os.path.join(repo, "run.py"), f"--data_dir={tmp_path / 'data'}",
         f"--output_dir={tmp_path / 'train'}", *flags],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout, time.time() - start


@pytest.mark.slow
def test_default_run_shortened_then_resumed_to_99_percent_within_10_minutes(tmp_path):
    """`python run.py` (no mode) with a 20-step budget: datagen, train, eval, decode, report;
    then the plain `python run.py` resumes that run and reaches 99% (about 75 s on 2 idle cores
    from scratch; one test, so that the data and the first 20 steps are made once)."""
    stdout, shortened_seconds = _run_default(
        tmp_path, "--train_steps=20", "--local_eval_frequency=20")
    assert "Greedy decodes of dev examples" in stdout
    assert "Step 20: accuracy_per_sequence" in stdout and "did NOT reach" in stdout
    assert f"tensorboard --logdir {tmp_path / 'train'}" in stdout
    assert tf.train.latest_checkpoint(str(tmp_path / "train")).endswith("ckpt-20")
    hparams = json.loads((tmp_path / "train" / "hparams.json").read_text())
    assert hparams["batch_size"] == 1024 and hparams["hidden_size"] == 128
    events = read_events(str(tmp_path / "train" / "eval"))
    assert "metrics-algorithmic_identity_decimal40_small/targets/accuracy_per_sequence" in events
    _assert_tensorboard_reads_the_run(tmp_path / "train")
    card = json.loads((tmp_path / "train" / "run_card.json").read_text())
    assert card["setup"]["problem"] == "algorithmic_identity_decimal40_small"
    assert card["setup"]["global batch per update"] == "1024 tokens"
    assert card["training"]["global step"] == 20 and card["eval"]["step"] == 20

    stdout, seconds = _run_default(tmp_path)
    assert "(reached 99%)" in stdout, stdout[-3000:]
    assert shortened_seconds + seconds < 600, (shortened_seconds, seconds)
    card = json.loads((tmp_path / "train" / "run_card.json").read_text())
    assert card["training"]["steps this session"] == card["training"]["global step"] - 20


def _assert_tensorboard_reads_the_run(run_dir):
    """TensorBoard's own loader finds the scalars, the decoded samples and the hparams."""
    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    def load(directory):
        accumulator = event_accumulator.EventAccumulator(str(directory), size_guidance={
            event_accumulator.TENSORS: 0})
        return accumulator.Reload()

    train, evaluation = load(run_dir), load(run_dir / "eval")
    loss = [event.step for event in train.Tensors("loss")]
    assert loss and loss[-1] == 20
    assert train.SummaryMetadata("loss").plugin_data.plugin_name == "scalars"
    decodes = evaluation.Tensors("decodes")
    assert evaluation.SummaryMetadata("decodes").plugin_data.plugin_name == "text"
    assert "|" in decodes[-1].tensor_proto.string_val[0].decode()  # a markdown table
    session = plugin_data_pb2.HParamsPluginData.FromString(
        train.PluginTagToContent("hparams")["_hparams_/session_start_info"])
    assert session.session_start_info.hparams["hidden_size"].number_value == 128
    assert session.session_start_info.group_name == str(run_dir)


@pytest.mark.slow
def test_run_py_datagen_then_train_and_eval_then_restart(tmp_path):
    """run.py --mode=datagen, then --schedule=train_and_evaluate twice: the second run reads
    hparams.json (which overrides the set, as in t2t) and resumes from the checkpoint."""
    import subprocess
    import sys

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CONFIG", None)
    common = ["--problem=algorithmic_reverse_binary40_test", f"--data_dir={tmp_path / 'data'}"]
    train = common + ["--hparams_set=transformer_tiny", f"--output_dir={tmp_path / 'train'}",
                      "--local_eval_frequency=6", "--eval_steps=2", "--log_step_count_steps=3",
                      "--random_seed=3"]

    def run(*flags):
        result = subprocess.run([sys.executable, os.path.join(repo, "run.py"), *flags],
                                cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=600, check=False)
        assert result.returncode == 0, result.stderr[-4000:]
        return result.stderr

    run("--mode=datagen", *common)
    run("--schedule=train_and_evaluate", "--train_steps=6",
        "--hparams=hidden_size=32,filter_size=64,num_heads=2,symbol_modality_num_shards=4,"
        "batch_shuffle_size=4",
        *train)
    hparams = json.loads((tmp_path / "train" / "hparams.json").read_text())
    assert hparams["hidden_size"] == 32
    flags = json.loads((tmp_path / "train" / "flags.json").read_text())
    assert flags["train_steps"] == 6 and flags["problem"] == "algorithmic_reverse_binary40_test"
    log = run("--schedule=train_and_evaluate", "--train_steps=9", *train)
    assert "Restored" in log and "ckpt-6" in log
    assert tf.train.latest_checkpoint(str(tmp_path / "train")).endswith("ckpt-9")
    events = read_events(str(tmp_path / "train" / "eval"))
    accuracy = events["metrics-algorithmic_reverse_binary40_test/targets/accuracy"]
    assert [step for step, _ in accuracy] == [6, 9]
    assert json.loads((tmp_path / "train" / "flags.json").read_text())["train_steps"] == 9
    # train_and_eval ends with the PNGs of its curves and a run card of the resumed session.
    assert {"loss.png", "learning_rate.png", "dev_accuracy.png"} <= set(
        os.listdir(tmp_path / "train" / "plots"))
    card = json.loads((tmp_path / "train" / "run_card.json").read_text())
    assert "--train_steps=9" in card["setup"]["command"]
    assert card["training"]["global step"] == 9 and card["training"]["steps this session"] == 3
    assert card["eval"]["step"] == 9


@pytest.mark.slow
def test_bfloat16_training_and_eval_without_loss_scaling(tmp_path):
    trainer = _trainer(tmp_path, tiny_hparams(activation_dtype="bfloat16"), train_steps=2,
                       log_step_count_steps=2, eval_steps=1)
    stats = trainer.train(eval_every=2)
    assert np.isfinite(stats["loss"]) and np.isfinite(trainer.last_eval_results["loss"])
    assert trainer.optimizer.loss_scale is None
    assert trainer.model.dtype_policy.compute_dtype == "bfloat16"
    assert trainer.model.trainable_variables[0].dtype == tf.float32


def _graph_ops(graph, seen=None):
    """Every op of a traced graph and of the functions it calls (while bodies, gradients,
    cond branches), each function once: a cond branch inside a while body is registered in
    the body's graph and in the outer one."""
    seen = set() if seen is None else seen
    ops = list(graph.get_operations())
    for name, function in graph._functions.items():
        if name not in seen:
            seen.add(name)
            ops += _graph_ops(function.graph, seen)
    return ops


@pytest.mark.parametrize("fused", [True, False])
def test_bfloat16_train_step_runs_every_matmul_in_bfloat16(tmp_path, fused):
    # The fast path of a bfloat16 run on CPUs with bf16 matmul units (AMX): a float32
    # matmul in the step (an fp32 island: a weight or activation not cast) would run at
    # half the rate or less. The loss and the layer-norm statistics stay float32.
    hparams = tiny_hparams(activation_dtype="bfloat16", use_fused_kernels=fused)
    trainer = _trainer(tmp_path, hparams)
    iterator = iter(trainer.distributed_dataset(trainer_lib.TRAIN))
    step = trainer._make_train_step(iterator.element_spec, update=True)
    ops = _graph_ops(step.get_concrete_function().graph)
    matmuls = [op for op in ops if op.type in ("MatMul", "BatchMatMulV2", "BatchMatMulV3")]
    # Forward + 2 gradients of a 1-layer encoder-decoder's projections (self-attention's
    # Q, K, V as one matmul, encoder-decoder attention's K, V as one: 7), its 4 FFN matmuls
    # and 6 attention products, and the softmax layer's 3 (one chunk's loop body; fused,
    # a fourth computes a chunk's logits again on the rare max-shifted path).
    assert len(matmuls) == 3 * (7 + 4 + 6) + 3 + fused, [op.name for op in matmuls]
    assert {op.get_attr("T") for op in matmuls} == {tf.bfloat16}, [
        op.name for op in matmuls if op.get_attr("T") != tf.bfloat16]
    if fused:  # the chunked loss's exp(logits - row max) (the plain loss: the xent kernel)
        assert tf.float32 in {op.get_attr("T") for op in ops if op.type == "Exp"}
    assert float(step(next(iterator))["loss"]) > 0


def test_eval_run_autoregressive_feeds_back_the_models_own_outputs(tmp_path):
    hparams = tiny_hparams(eval_run_autoregressive=True)
    trainer = _trainer(tmp_path, hparams=hparams, eval_steps=1, num_decode_examples=0)
    trainer.train()  # 12 steps: the model's outputs are still often wrong
    results = trainer.evaluate()
    batch = {k: v[:8] for k, v in ReverseProblem().data["eval"].items()}
    labels = batch["targets"]

    def logits_of(targets):
        return trainer.model({"inputs": batch["inputs"], "targets": targets,
                              "target_space_id": tf.constant(0)}, training=False).numpy()

    # Greedy decoding written out: position t sees the argmax of positions < t.
    ids = np.zeros_like(labels)
    for t in range(labels.shape[1]):
        ids[:, t] = logits_of(ids)[:, t].argmax(-1)
    logits = logits_of(ids)
    assert (logits.argmax(-1) != labels)[labels != 0].any()  # not the teacher-forced outputs
    weights = labels != 0
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    xent = -np.take_along_axis(logp, labels[..., None], -1)[..., 0] * weights
    assert results["loss"] == pytest.approx(xent.sum() / weights.sum(), rel=1e-4)
    accuracy = ((logits.argmax(-1) == labels) * weights).sum() / weights.sum()
    assert results["metrics-reverse_standin/targets/accuracy"] == pytest.approx(accuracy)
    teacher_forced = _trainer(tmp_path, eval_steps=1, num_decode_examples=0)
    teacher_forced.restore()
    assert teacher_forced.evaluate()["loss"] != pytest.approx(results["loss"], rel=1e-3)


def _flags(**values):
    """run.py's flags as a namespace: t2t_lite's defaults, then `values`."""
    import types

    from t2t_lite import flags as t2t_flags

    defaults = {f.name: f.default
                for f in t2t_flags.FLAGS.get_flags_for_module("t2t_lite.flags")}
    return types.SimpleNamespace(**{**defaults, **values})


@pytest.mark.slow
def test_train_eval_and_decode_decodes_the_dev_set_after_each_eval(tmp_path, caplog):
    from t2t_lite import registry
    from t2t_lite.evaluation import bleu_hook

    problem = "algorithmic_reverse_binary40_test"
    registry.problem(problem).generate_data(str(tmp_path / "data"), str(tmp_path / "tmp"))
    output_dir = tmp_path / "train"
    flags = _flags(
        schedule="train_eval_and_decode", problem=problem, hparams_set="transformer_tiny",
        hparams="hidden_size=32,filter_size=64,num_heads=2,symbol_modality_num_shards=4,"
                "batch_shuffle_size=4",
        data_dir=str(tmp_path / "data"), output_dir=str(output_dir), train_steps=12,
        local_eval_frequency=6, eval_steps=2, random_seed=3,
        decode_hparams="num_samples=20,batch_size=8")
    caplog.set_level(logging.INFO)
    t2t_trainer.train_and_eval(flags)
    events = read_events(str(output_dir / "decode_eval"))
    assert [step for step, _ in events["BLEU"]] == [6, 12]
    for step, bleu in events["BLEU"]:
        decodes = output_dir / "decode_eval" / (
            f"dev-{step}.transformer.transformer_tiny.{problem}.beam4.alpha0.6.decodes")
        targets = str(decodes).replace(".decodes", ".targets")
        assert len(decodes.read_text().splitlines()) == 20
        expected = 100 * float(bleu_hook.bleu_wrapper(targets, str(decodes)))
        assert float(bleu) == pytest.approx(expected, rel=1e-5)
        assert f"Decode at step {step}: BLEU = {expected:.2f}" in caplog.text


def test_dev_decode_bleu_is_t2ts_bleu_of_the_decodes(tmp_path):
    """decode_dev_and_bleu with a model that reverses its inputs (the reverse problem's exact
    answer, except where it is told to be wrong): BLEU 100, then less."""
    from t2t_lite import registry
    from t2t_lite.decoding import decode_hparams
    from t2t_lite.training import dev_decode

    problem = registry.problem("algorithmic_reverse_binary40_test")
    data_dir = str(tmp_path / "data")
    problem.generate_data(data_dir, str(tmp_path / "tmp"))

    class Reverser:
        wrong = False

        def infer(self, features, **unused):
            inputs = features["inputs"].numpy()
            outputs = np.zeros_like(inputs)
            for row, ids in enumerate(inputs):
                ids = [i for i in ids if i > 1]
                outputs[row, :len(ids) + 1] = ids[::-1] + [1]  # then EOS
                if self.wrong and ids and row % 2:
                    outputs[row, 0] = 2 + (ids[-1] == 2)
            return {"outputs": outputs, "scores": np.zeros(len(inputs))}

    hparams = tiny_hparams()
    decode_hp = decode_hparams.decode_hparams("num_samples=30,batch_size=8,beam_size=1")
    names = ("transformer", "transformer_tiny", problem.name)
    model = Reverser()
    bleu = dev_decode.decode_dev_and_bleu(model, problem, hparams, data_dir, decode_hp,
                                          str(tmp_path), 5, names)
    assert bleu == pytest.approx(100.0)
    model.wrong = True
    worse = dev_decode.decode_dev_and_bleu(model, problem, hparams, data_dir, decode_hp,
                                           str(tmp_path), 6, names)
    assert 0 < worse < 100
    events = dict(read_events(str(tmp_path / "decode_eval"))["BLEU"])
    assert float(events[5]) == pytest.approx(100.0) and float(events[6]) == pytest.approx(worse)
    # --metrics: sacreBLEU's chrF2 and TER of the same decodes, to TensorBoard and the card.
    model.wrong = False
    scores = dev_decode.decode_dev_and_score(model, problem, hparams, data_dir, decode_hp,
                                             str(tmp_path), 7, names,
                                             metrics=("bleu", "chrf", "ter"))
    assert scores == pytest.approx({"BLEU": 100.0, "chrF2": 100.0, "TER": 0.0})
    assert float(dict(read_events(str(tmp_path / "decode_eval"))["TER"])[7]) == 0.0
    from t2t_lite.training import run_card

    card = run_card.read(str(tmp_path))["bleu"]
    assert card["checkpoint step"] == 7 and card["t2t BLEU_uncased"] == "100.00"
    assert card["chrF2"].startswith("chrF2|nrefs:1|") and card["chrF2"].endswith("= 100.00")


def test_worker_replicas_must_match_tf_config(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ValueError, match=r"^--worker_replicas=2 but TF_CONFIG lists 0 worker"):
        trainer_lib.create_strategy(worker_gpu=1, worker_replicas=2)
    cluster = {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2", "127.0.0.1:3"]}
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster,
                                                "task": {"type": "chief", "index": 0}}))
    with pytest.raises(ValueError, match=r"--worker_replicas=2 but TF_CONFIG lists 3 worker"):
        trainer_lib.create_strategy(worker_gpu=1, worker_replicas=2)
