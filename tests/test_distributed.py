"""Data parallelism and fault tolerance of the trainer, each in fresh processes:

* 1 replica vs MirroredStrategy over 2 logical CPUs with the same global batch: same loss and
  weights (plain Adam after one step; multistep with weight decay and clipping after two
  updates), dropout off;
* dropout on, 2 mirrored replicas: each replica draws its own masks, new ones at every step,
  the same ones again for the same (--random_seed, step), and training runs;
* two MultiWorkerMirroredStrategy workers on loopback agree on the weights, and both report
  host-side eval metrics (approx_bleu, ROUGE) over the whole eval set;
* SIGKILL mid-run, restart: resumes from the last checkpoint and, with op determinism, ends
  with exactly the weights of an uninterrupted run.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from tests.trainer_utils import model_weights

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env(**extra):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
    env.pop("TF_CONFIG", None)
    env.update(extra)
    return env


def _run_python(code: str, timeout: int = 240) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, env=_env(),
                            capture_output=True, text=True, timeout=timeout, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


REPLICA_CHECK = """
    import json
    import numpy as np
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

    from t2t_lite.training import trainer_lib
    from tests.trainer_utils import ReverseProblem, model_fn, tiny_hparams

    def run(strategy, per_replica_batch, output_dir, overrides, steps):
        hparams = tiny_hparams(0.0, **overrides)  # no dropout: masks differ per replica
        config = trainer_lib.RunConfig(output_dir=output_dir, train_steps=steps,
                                       log_step_count_steps=1, num_decode_examples=0)
        tf.keras.utils.set_random_seed(3)
        trainer = trainer_lib.Trainer(model_fn(hparams), hparams,
                                      ReverseProblem(per_replica_batch, shuffle=False), "",
                                      config, strategy)
        stats = trainer.train()
        return stats["loss"], [v.numpy() for v in trainer.model.trainable_variables]

    cases = {
        "adam": ({}, 1),
        "multistep_decay_clip": ({"optimizer": "multistep_adam",
                                  "optimizer_multistep_accumulate_steps": 2,
                                  "weight_decay": 0.01, "clip_grad_norm": 0.5}, 4),
    }
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    report = {}
    for name, (overrides, steps) in cases.items():
        loss1, w1 = run(tf.distribute.get_strategy(), 8, f"{OUT}/{name}_1", overrides, steps)
        loss2, w2 = run(mirrored, 4, f"{OUT}/{name}_2", overrides, steps)
        report[name] = {
            "loss": [loss1, loss2],
            "max_weight_diff": max(float(np.max(np.abs(a - b))) for a, b in zip(w1, w2)),
            "max_update": max(float(np.max(np.abs(a))) for a in w1),
        }

    # Dropout on: the same features on both replicas, teacher-forced logits under the
    # trainer's per-replica dropout seeds.
    hparams = tiny_hparams(0.3)
    problem = ReverseProblem(4, shuffle=False)

    def dropout_trainer(name, seed):
        config = trainer_lib.RunConfig(output_dir=f"{OUT}/{name}", train_steps=2,
                                       log_step_count_steps=1, num_decode_examples=0,
                                       random_seed=seed)
        return trainer_lib.Trainer(model_fn(hparams), hparams, problem, "", config, mirrored)

    def per_replica_logits(trainer, step):
        trainer.global_step.assign(step)
        features = trainer._features(
            {k: tf.constant(v[:4]) for k, v in problem.data["eval"].items()})

        @tf.function
        def logits_under_dropout():
            with trainer.replica_dropout_context():
                return trainer.model(features, training=True)

        out = mirrored.run(logits_under_dropout)
        return [t.numpy() for t in mirrored.experimental_local_results(out)]

    def differ(a, b):
        return float(np.max(np.abs(a - b)))

    seed5, seed6 = dropout_trainer("seed5", 5), dropout_trainer("seed6", 6)
    seed6.model.set_weights(seed5.model.get_weights())
    step0, step0_again = per_replica_logits(seed5, 0), per_replica_logits(seed5, 0)
    step1 = per_replica_logits(seed5, 1)
    step0_seed6 = per_replica_logits(seed6, 0)
    no_dropout = seed5.model(seed5._features(
        {k: tf.constant(v[:4]) for k, v in problem.data["eval"].items()}), training=False)
    report["dropout"] = {
        "replica0_vs_replica1": differ(*step0),
        "step0_vs_step1": [differ(a, b) for a, b in zip(step0, step1)],
        "step0_vs_step0_again": [differ(a, b) for a, b in zip(step0, step0_again)],
        "seed5_vs_seed6": [differ(a, b) for a, b in zip(step0, step0_seed6)],
        "dropout_vs_none": differ(step0[0], no_dropout.numpy()),
    }
    seed5.global_step.assign(0)
    report["dropout_training_loss"] = seed5.train()["loss"]
    print("REPORT " + json.dumps(report))
"""


@pytest.fixture(scope="module")
def replica_report(tmp_path_factory):
    """Runs REPLICA_CHECK once (one process with 2 logical CPUs) for the tests below."""
    out = tmp_path_factory.mktemp("replicas")
    stdout = _run_python(f"OUT = {str(out)!r}\n" + textwrap.dedent(REPLICA_CHECK), timeout=400)
    return json.loads(stdout.split("REPORT ", 1)[1])


@pytest.mark.slow
def test_one_replica_equals_two_mirrored_replicas(replica_report):
    for name in ("adam", "multistep_decay_clip"):
        case = replica_report[name]
        loss1, loss2 = case["loss"]
        assert loss1 == pytest.approx(loss2, rel=1e-5, abs=1e-6), name
        assert case["max_weight_diff"] < 1e-5, (name, case)


@pytest.mark.slow
def test_dropout_masks_differ_per_replica_and_step_and_repeat_per_seed(replica_report):
    report = replica_report["dropout"]
    # Identical inputs on both replicas: only the dropout masks can make the logits differ.
    assert report["replica0_vs_replica1"] > 1e-3
    assert min(report["step0_vs_step1"]) > 1e-3
    assert min(report["seed5_vs_seed6"]) > 1e-3
    assert report["dropout_vs_none"] > 1e-3
    # Same (random_seed, step, replica): the same masks, e.g. after a restart at that step.
    assert max(report["step0_vs_step0_again"]) == 0.0
    assert np.isfinite(replica_report["dropout_training_loss"])


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _start(args, env, log_path):
    with open(log_path, "w") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen([sys.executable, "-m", "tests.trainer_utils", *args], cwd=REPO,
                                env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _stop(process):
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def _log(path, tail=3000):
    with open(path) as f:
        return f.read()[-tail:]


def _run_two_workers(tmp_path) -> tuple[list, list]:
    """Starts the two workers of a 2-worker cluster on free ports; (return codes, log paths)."""
    ports = _free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    processes, logs = [], []
    try:
        for index in range(2):
            env = _env(TF_CONFIG=json.dumps({"cluster": cluster,
                                             "task": {"type": "worker", "index": index}}))
            logs.append(tmp_path / f"worker{index}.log")
            processes.append(_start(
                ["--output_dir", str(tmp_path / "run"), "--train_steps", "4",
                 "--save_checkpoints_steps", "2", "--batch_examples", "4", "--host_metrics",
                 "--dump_weights", str(tmp_path / f"weights{index}.npz")],
                env, logs[-1]))
        deadline = time.time() + 240
        while any(p.poll() is None for p in processes) and time.time() < deadline:
            time.sleep(0.5)
        return [p.poll() for p in processes], logs
    finally:
        for process in processes:
            _stop(process)


@pytest.mark.slow
def test_two_multi_worker_processes_agree_on_weights(tmp_path):
    for attempt in range(3):
        work = tmp_path / f"attempt{attempt}"
        work.mkdir()
        codes, logs = _run_two_workers(work)
        # A port found free can be taken by another process (another test's server) before
        # the workers bind it: that start is tried again on new ports, nothing else is.
        if not any("Address already in use" in _log(log) for log in logs):
            break
    for code, log in zip(codes, logs):
        assert code == 0, _log(log)
    results = []
    for log in logs:
        result = json.loads(_log(log).split("RESULT ", 1)[1].splitlines()[0])
        assert result["step"] == 4 and np.isfinite(result["loss"])
        results.append(result)
    # Host-side metrics (approx_bleu, ROUGE) cover the whole eval set on every worker: the
    # sums of both workers' own batches, not the chief's share alone.
    local = [np.array(r["local_host_sums"]) for r in results]
    assert local[0][:, 1].sum() > 0 and local[1][:, 1].sum() > 0
    total = local[0] + local[1]
    for index, name in enumerate(("approx_bleu_score", "rouge_2_fscore", "rouge_L_fscore")):
        expected = total[index, 0] / total[index, 1]
        for result in results:
            value = result["eval"][f"metrics-reverse_standin/targets/{name}"]
            assert value == pytest.approx(expected, rel=1e-9), name
    assert any(abs(local[0][i, 0] / local[0][i, 1] - total[i, 0] / total[i, 1]) > 1e-6
               for i in range(3)), "the workers' shares happen to agree: the test shows nothing"
    w0, w1 = np.load(work / "weights0.npz"), np.load(work / "weights1.npz")
    assert len(w0.files) > 0
    for key in w0.files:
        np.testing.assert_allclose(w0[key], w1[key], rtol=0, atol=1e-7)
    # The chief wrote the checkpoints; the other worker's temporary copies are gone.
    assert os.path.exists(work / "run" / "ckpt-4.index")
    assert not os.path.exists(work / "run" / "tmp_worker" / "worker_1")


@pytest.mark.slow
def test_sigkill_and_restart_resumes_to_the_same_weights(tmp_path):
    common = ["--train_steps", "12", "--save_checkpoints_steps", "4", "--deterministic"]
    reference_log = tmp_path / "reference.log"
    reference = _start(["--output_dir", str(tmp_path / "reference"), *common], _env(),
                       reference_log)
    killed_log = tmp_path / "killed.log"
    # Sleeps after each checkpoint, so that the kill lands between ckpt-4 and ckpt-8.
    killed = _start(["--output_dir", str(tmp_path / "run"), *common, "--step_delay", "30"],
                    _env(), killed_log)
    try:
        deadline = time.time() + 180
        while not os.path.exists(tmp_path / "run" / "ckpt-4.index"):
            assert killed.poll() is None, _log(killed_log)
            assert time.time() < deadline, "no checkpoint after 180 s"
            time.sleep(0.2)
        time.sleep(1.0)
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait(timeout=30)
        assert killed.returncode == -signal.SIGKILL
        assert not os.path.exists(tmp_path / "run" / "ckpt-8.index")

        resumed_log = tmp_path / "resumed.log"
        resumed = _start(["--output_dir", str(tmp_path / "run"), *common], _env(), resumed_log)
        assert resumed.wait(timeout=240) == 0, _log(resumed_log)
        resumed_text = _log(resumed_log, tail=100000)
        assert "Restored" in resumed_text
        assert ("Resuming training at global step 4: the input pipeline continues where the "
                "checkpoint left it" in resumed_text)
        assert reference.wait(timeout=240) == 0, _log(reference_log)
    finally:
        for process in (reference, killed):
            _stop(process)
    final, uninterrupted = model_weights(str(tmp_path / "run")), model_weights(
        str(tmp_path / "reference"))
    assert sorted(final) == sorted(uninterrupted) and final
    for name in final:
        np.testing.assert_array_equal(final[name], uninterrupted[name], err_msg=name)
