"""Intra-op threads (`t2t_lite.decoding.threads`): each decode worker's or parallel batch's share
of the cores, set in TensorFlow before its runtime starts, the decodes unchanged (the
server process's own check of the wiring and of /v1/models is in test_server.py and
test_server_limits.py)."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from t2t_lite.decoding import threads
from tests.conftest import REPO_ROOT
from tests.run_py import env


@pytest.mark.parametrize("workers, cores, expected", [
    (2, 2, 1),  # a worker per core: each op on its worker's thread
    (1, 2, 2),  # one worker: every core (TensorFlow's default)
    (4, 2, 1),  # more workers than cores: at least 1
    (2, 8, 4),
    (3, 8, 2),
    (0, 4, 4),  # no workers given: as one
])
def test_each_worker_gets_its_share_of_the_cores(workers, cores, expected):
    assert threads.choose(workers, cores) == expected


def test_default_workers_are_decode_modes_parallel_batches():
    assert [threads.default_workers(False, cores) for cores in (1, 2, 3, 4, 8, 64)] == [
        1, 2, 3, 4, 4, 4]
    assert threads.default_workers(True, 8) == 1


CONFIGURE = """
import sys
sys.path.insert(0, sys.argv[1])
import tensorflow as tf
from t2t_lite.decoding import decoding
from t2t_lite.decoding import threads
chosen = threads.configure(int(sys.argv[2]), int(sys.argv[3]))
(tf.constant([1.0]) + 1.0).numpy()  # the runtime starts with the setting
print(chosen, tf.config.threading.get_intra_op_parallelism_threads(), decoding.usable_cores())
try:
    threads.configure(chosen + 1, 0)
except RuntimeError:
    print("refused after start")
"""


def _configure(requested: int, workers: int, environment: dict | None = None) -> list[str]:
    result = subprocess.run([sys.executable, "-c", CONFIGURE, str(REPO_ROOT), str(requested),
                             str(workers)], env={**env(), **(environment or {})},
                            capture_output=True, text=True,
                            timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.split("\n")


@pytest.mark.slow
def test_configure_sets_tensorflow_before_its_runtime_starts():
    # Asked for: TensorFlow's runtime runs with it; changing it afterwards is refused.
    first, second = _configure(3, 0)[:2]
    assert first.split()[:2] == ["3", "3"]
    assert second == "refused after start"
    # Chosen: the usable cores over one worker, all of them.
    chosen, in_use, cores = (int(n) for n in _configure(0, 1)[0].split())
    assert chosen == in_use == cores
    # TensorFlow's environment variable wins over the choice, not over a request.
    assert _configure(0, 1, {"TF_NUM_INTRAOP_THREADS": "3"})[0].split()[:2] == ["3", "3"]
    assert _configure(2, 1, {"TF_NUM_INTRAOP_THREADS": "3"})[0].split()[:2] == ["2", "2"]


@pytest.mark.slow
def test_decode_mode_gives_each_parallel_batch_its_share(tiny_run_trained, tmp_path):
    # run.py --mode=decode sets the threads before its runtime starts (else TensorFlow would
    # refuse the setting and the decode would fail).
    from tests.run_py import run

    inputs = tmp_path / "in.txt"
    inputs.write_text("0 1 1\n1 0\n1\n0 0 1 1\n")  # the tiny problem's symbols
    result = run("--mode=decode", f"--output_dir={tiny_run_trained}",
                 f"--decode_from_file={inputs}", f"--decode_to_file={tmp_path / 'out.txt'}",
                 "--decode_parallel_batches=2", "--decode_hparams=batch_size=2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    expected = threads.choose(2, threads.decoding.usable_cores())
    assert (f"Decoding 2 batches at a time, each op on {expected} intra-op thread(s)"
            in result.stderr)
    assert len((tmp_path / "out.txt").read_text().splitlines()) == 4


DECODE_FIXTURE = """
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np
from t2t_lite.decoding import threads
threads.configure(int(sys.argv[4]), 0)
from tests.test_threads import decode_fixture_lines
np.savez(sys.argv[2], *decode_fixture_lines(sys.argv[3], sys.argv[5]))
"""


def decode_fixture_lines(fixtures: str, source: str) -> list:
    """Ids and scores of the first 40 lines of `source`, beam 4 and greedy, 2 batches at a
    time, through the t2t fixture checkpoint: ids, scores of each batch in the order they
    finish."""
    import os

    from t2t_lite.data_generators import text_encoder
    from t2t_lite.decoding import decoding, input_files
    from t2t_lite.decoding.decode_hparams import decode_hparams
    from t2t_lite.hparams_lib import create_hparams
    from t2t_lite.models import t2t_checkpoint

    vocab = text_encoder.SubwordTextEncoder(
        os.path.join(fixtures, "vocab.translate_toy_ende1k.1024.subwords"))
    model = t2t_checkpoint.load_model(os.path.join(fixtures, "ckpt_A_trained"),
                                      create_hparams("transformer_tiny"))
    lines = input_files.read_inputs(source)[:40]
    arrays = []
    for settings in ("beam_size=4,alpha=0.6", "beam_size=1"):
        decode_hp = decode_hparams(f"batch_size=8,extra_length=10,{settings}")
        infer_fn = decoding.make_infer_fn(model, decode_hp)

        def recording(batch, infer_fn=infer_fn):
            outputs, scores = infer_fn(batch)
            arrays.extend([outputs, scores])
            return outputs, scores

        decoding.decode_lines(lines, recording, vocab, vocab, decode_hp, parallel_batches=2)
    return arrays


@pytest.mark.slow
def test_one_thread_an_op_decodes_the_same_ids_and_scores(t2t_fixtures, wmt_toy_dir,
                                                          tmp_path):
    """The t2t fixture's beam-4 and greedy decodes of 40 lines, 2 batches at a time, with 1
    intra-op thread and with 2: bit-equal ids and scores (the threads split an op's work,
    not its arithmetic)."""
    results = {}
    for count in (1, 2):
        out = tmp_path / f"threads{count}.npz"
        result = subprocess.run(
            [sys.executable, "-c", DECODE_FIXTURE, str(REPO_ROOT), str(out), str(t2t_fixtures),
             str(count), str(wmt_toy_dir / "dev.en")],
            env=env(), capture_output=True, text=True, timeout=600, check=False)
        assert result.returncode == 0, result.stderr[-3000:]
        with np.load(out) as saved:
            results[count] = [saved[f"arr_{i}"] for i in range(len(saved.files))]
    assert len(results[1]) == len(results[2]) == 20  # 2 settings x 5 batches x (ids, scores)
    # Batches finish in any order on threads: match each batch by its ids and scores.
    one = sorted((a.tobytes(), b.tobytes()) for a, b in zip(results[1][::2], results[1][1::2]))
    two = sorted((a.tobytes(), b.tobytes()) for a, b in zip(results[2][::2], results[2][1::2]))
    assert one == two
    assert len({scores.tobytes() for scores in results[1][1::2]}) == 10
