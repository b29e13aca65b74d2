"""The translation server (`run.py --mode=serve`): the API contract, outputs equal to
`--mode=decode`, every fault of issue 41's list with its status and message, SIGTERM
draining and the Prometheus metrics.

One real server per module (the session's tiny trained run, greedy, as a subprocess on a free
port); the faults that need a slow or failing decoder (full queue, timeout, a client that
leaves, a batch with a failing sentence) run an in-process server on a scripted engine,
without TensorFlow.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tests.conftest import REPO_ROOT, error_line, require_extra
from tests.run_py import PROBLEM, env, run
from tests.server_helpers import DECODE_HPARAMS, ServerProcess, request

require_extra("fastapi", "serve")
from prometheus_client.parser import text_string_to_metric_families

from t2t_lite.serving import batching, client, server

# Binary sequences of several lengths (the algorithmic problem's inputs are ids).
LINES = ["0 1 1 0", "1", "0 0 0 1 1 1 0 1", "1 1", "0 1 0 1 0 1 0 1 0 1 0 1", "1 0 0", "0",
         "1 1 1 1 1"]


@pytest.fixture(scope="module")
def served(tiny_run_trained, tmp_path_factory):
    """(the server, the `--mode=decode` outputs of LINES, each line decoded alone)."""
    work = tmp_path_factory.mktemp("served")
    process = ServerProcess(tiny_run_trained, "--max_batch_size=8", "--batch_timeout_ms=50",
                            "--serve_max_sentences=10", "--serve_max_input_tokens=20",
                            "--serve_max_beam_size=4", cwd=work)
    try:
        source = work / "lines.txt"
        source.write_text("\n".join(LINES) + "\n")
        result = run("--mode=decode", f"--output_dir={tiny_run_trained}",
                     f"--decode_hparams={DECODE_HPARAMS},batch_size=1",
                     f"--decode_from_file={source}", f"--decode_to_file={work / 'out.txt'}",
                     cwd=work)
        assert result.returncode == 0, result.stderr[-3000:]
        expected = (work / "out.txt").read_text().split("\n")[:len(LINES)]
        process.wait_ready()
        yield process, expected
    finally:
        process.stop()


def metric_values(url: str) -> dict:
    """{(name, labels as a sorted tuple): value} of GET /metrics, parsed by prometheus_client."""
    status, text, headers = request(url + "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return values


@pytest.mark.slow
def test_api_contract(served):
    process, _ = served
    url = process.url
    assert request(url + "/healthz")[:2] == (200, {"status": "ok"})
    assert request(url + "/readyz")[:2] == (200, {"status": "ready"})
    status, models, _ = request(url + "/v1/models")
    model = models["models"][0]
    assert status == 200
    assert (model["engine"], model["problem"], model["hparams_set"], model["step"]) == (
        "t2t_lite", PROBLEM, "transformer_tiny", 4)
    assert model["decode_hparams"]["beam_size"] == 1 and model["attention"] is True
    # The default: a t2t_lite model batches continuously, 32 steps between admissions.
    assert model["limits"]["batching"] == "continuous"
    assert model["limits"]["steps_per_call"] == 32
    # Chosen at start-up: each decode worker its share of the usable cores, at least 1.
    limits = model["limits"]
    assert limits["intra_op_threads"] == max(
        1, len(os.sched_getaffinity(0)) // limits["decode_workers"])
    status, answer, _ = request(url + "/v1/translate", {"inputs": ["0 1 1 0", "1"]})
    assert status == 200 and set(answer) == {"outputs", "scores"}
    assert len(answer["outputs"]) == len(answer["scores"]) == 2
    # Greedy: at most input length (ids + EOS) + extra_length 3 tokens.
    assert [len(o.split()) <= n + 3 for o, n in zip(answer["outputs"], (5, 2))] == [True] * 2
    status, answer, _ = request(url + "/v1/translate", {
        "inputs": ["0 1 1 0"], "beam_size": 2, "n_best": 2, "return_attention": True})
    assert status == 200, answer
    hypotheses = answer["n_best"][0]
    assert len(hypotheses) == 2 and hypotheses[0]["score"] >= hypotheses[1]["score"]
    assert (answer["outputs"][0], answer["scores"][0]) == (
        hypotheses[0]["output"], hypotheses[0]["score"])
    attention = answer["attention"][0]
    assert attention["source_pieces"] == ["0", "1", "1", "0", "<EOS>"]
    targets = len(attention["target_pieces"])
    assert attention["target_pieces"][-1] == "<EOS>"
    weights = attention["weights"]  # [layers 1][heads 2][targets][sources 5], rows sum to 1
    assert (len(weights), len(weights[0]), len(weights[0][0]), len(weights[0][0][0])) == (
        1, 2, targets, 5)
    assert all(abs(sum(row) - 1) < 1e-3 for head in weights[0] for row in head)
    status, schema, _ = request(url + "/openapi.json")
    assert status == 200 and "inputs" in json.dumps(schema["paths"]["/v1/translate"])
    status, page, _ = request(url + "/")
    assert status == 200 and "/static/app.js" in page
    assert "drawHeatmap" in request(url + "/static/app.js")[1]


@pytest.mark.slow
def test_outputs_equal_decode_mode_one_by_one_and_by_8_concurrent_clients(served):
    process, expected = served
    translator = client.Translator(process.url)
    before = metric_values(process.url)
    one_by_one = [translator.translate_request([line]) for line in LINES]
    assert [a["outputs"][0] for a in one_by_one] == expected
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda line: translator.translate_request([line]), LINES))
    assert [a["outputs"][0] for a in together] == expected
    # Scores: the same up to float rounding (padding beside longer rows changes the order of
    # some sums; measured ~1e-6 relative here).
    np.testing.assert_allclose([a["scores"] for a in together],
                               [a["scores"] for a in one_by_one], rtol=1e-5)
    after = metric_values(process.url)
    batches = ("t2t_lite_serving_batch_size_count", ())
    sentences = ("t2t_lite_serving_batch_size_sum", ())
    # 16 sentences in fewer batches than sentences: the concurrent ones were batched.
    assert after[sentences] - before[sentences] >= 16
    assert after[batches] - before[batches] < after[sentences] - before[sentences]
    # Continuous batching: every call ran steps (at least one per call).
    steps = ("t2t_lite_serving_decode_steps_total", ())
    assert after[steps] - before[steps] >= after[batches] - before[batches] > 0
    assert translator.translate(LINES) == expected


# (body, status, words of the message)
FAULTS = [
    (b'{"inputs": ["0 1"', 400, "malformed JSON"),
    (b'{"inputs": ["\xff\xfe"]}', 400, "not UTF-8"),
    (b'{"inputs": "0 1"}', 422, "inputs: Input should be a valid list"),
    (b'{"inputs": [1]}', 422, "inputs[0]: Input should be a valid string"),
    (b'{"inputs": []}', 422, "the list is empty"),
    (b'["0 1"]', 422, "JSON object"),
    (b'{"inputs": ["0"], "beam": 2}', 422, "beam: unknown field"),
    (b'{"inputs": ["0"], "beam_size": "2"}', 422, "beam_size: Input should be a valid integer"),
    (b'{"inputs": ["0 x"]}', 422, "inputs[0]: 'x' is not a token id"),
    (b'{"inputs": ["0"], "beam_size": 5}', 422, "--serve_max_beam_size"),
    (b'{"inputs": ["0"], "n_best": 2}', 422, "n_best=2: must be between 1 and beam_size=1"),
    (json.dumps({"inputs": ["0"] * 11}).encode(), 413,
     "11 sentences in one request; the limit is 10 (--serve_max_sentences)"),
    (json.dumps({"inputs": ["1 " * 20]}).encode(), 413,
     "inputs[0]: 21 subwords (EOS included); the limit is 20 (--serve_max_input_tokens)"),
]


@pytest.mark.slow
def test_each_fault_is_one_json_message_and_the_server_keeps_serving(served):
    process, expected = served
    before = metric_values(process.url)
    for body, status, words in FAULTS:
        got, answer, headers = request(process.url + "/v1/translate", data=body)
        assert (got, list(answer)) == (status, ["error"]), (body, answer)
        assert words in answer["error"], (body, answer)
        assert headers["content-type"] == "application/json"
    status, answer, _ = request(process.url + "/v1/translate", {"inputs": LINES[:2]})
    assert (status, answer["outputs"]) == (200, expected[:2])
    after = metric_values(process.url)
    for code in ("400", "413", "422"):
        key = ("t2t_lite_serving_errors_total", (("status", code),))
        count = sum(1 for _, status, _ in FAULTS if str(status) == code)
        assert after[key] - before.get(key, 0) == count
    ok = ("t2t_lite_serving_requests_total", (("status", "200"),))
    assert after[ok] - before.get(ok, 0) == 1  # no series before the first answered request
    assert after[("t2t_lite_serving_queue_depth", ())] == 0


@pytest.mark.slow
def test_query_mode_writes_each_translation_as_its_line_comes(served, tmp_path):
    process, expected = served
    query = subprocess.Popen(
        [sys.executable, str(REPO_ROOT / "run.py"), "--mode=query",
         f"--server_url={process.url}"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=env(), cwd=tmp_path)
    try:
        query.stdin.write(LINES[0] + "\n")
        query.stdin.flush()
        # Answered before standard input ends: line in, line out.
        assert query.stdout.readline() == expected[0] + "\n"
        query.stdin.write("\n".join(LINES[1:]) + "\n")
        query.stdin.close()
        assert query.stdout.read().split("\n")[:-1] == expected[1:]
        assert query.wait(60) == 0
    finally:
        query.kill()
    result = run("--mode=query", f"--server_url={process.url}",
                 f"--decode_from_file={tmp_path / 'missing.txt'}", cwd=tmp_path)
    assert error_line(result) == (f"error: --decode_from_file={tmp_path / 'missing.txt'}: "
                                  "no such file")
    (tmp_path / "bad.txt").write_text("0 1\n0 7\n")
    result = run("--mode=query", f"--server_url={process.url}",
                 f"--decode_from_file={tmp_path / 'bad.txt'}", cwd=tmp_path)
    assert error_line(result) == (f"error: --server_url={process.url}: line 2: 422: inputs[0]: "
                                  "id 9 is outside the input vocabulary (0 to 3)")


@pytest.mark.slow
def test_sigterm_answers_the_request_in_flight_and_exits_0(served):
    process, _ = served
    answers = []
    # A new decode configuration (beam 3) is traced first: the request lasts seconds.
    sender = threading.Thread(target=lambda: answers.append(request(
        process.url + "/v1/translate", {"inputs": LINES[:3], "beam_size": 3})))
    sender.start()
    time.sleep(1.0)
    process.process.send_signal(signal.SIGTERM)
    assert process.process.wait(120) == 0, process.stderr()[-3000:]
    sender.join(60)
    status, answer, _ = answers[0]
    assert status == 200 and len(answer["outputs"]) == 3, answer
    assert any(line.startswith("stopped:") for line in process.stdout)
    assert "Traceback" not in process.stderr()


# ------------------------------------------------------------ a scripted engine, in process
class ScriptedEngine(batching.Engine):
    """Reverses the input ids; blocks while `gate` is clear; fails on a batch holding id 9
    (and on row 9 alone)."""

    def __init__(self):
        self.description = {"engine": "scripted"}
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()  # set when a batch reaches the decoder
        self.decoded: list[list[int]] = []

    def encode(self, text: str) -> list[int]:
        return [int(t) for t in text.split()] + [1]

    def decode(self, id_lists, options):
        self.entered.set()
        self.gate.wait(30)
        if any(9 in ids for ids in id_lists):
            raise RuntimeError("id 9 breaks this engine")
        self.decoded += [list(ids) for ids in id_lists]
        return [batching.Row([batching.Hypothesis(" ".join(map(str, ids[-2::-1])), -1.0,
                                                  list(ids))]) for ids in id_lists]


@pytest.fixture(scope="module")
def scripted():
    """(url, engine) of an in-process server on a ScriptedEngine: queue of 4 sentences,
    2 s request timeout."""
    import uvicorn

    engine = ScriptedEngine()
    config = server.ServerConfig(max_batch_size=4, batch_timeout_ms=20, max_queue_sentences=4,
                                 request_timeout_secs=2.0, beam_size=1, max_sentences=4)
    app = server.create_app(lambda: engine, config)
    sock = server.bind("127.0.0.1", 0)
    instance = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=instance.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    deadline = time.monotonic() + 30
    while request(url + "/readyz")[0] != 200:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    yield url, engine, app.state.serving
    engine.gate.set()
    instance.should_exit = True
    thread.join(30)


def _depth_becomes(state, value: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if state.depth() == value:
            return True
        time.sleep(0.02)
    return False


def test_full_queue_503_with_retry_after_and_timeout_504(scripted):
    url, engine, state = scripted
    engine.gate.clear()
    with ThreadPoolExecutor(2) as pool:
        engine.entered.clear()
        decoding = pool.submit(request, url + "/v1/translate", {"inputs": ["2 3"] * 4})
        assert engine.entered.wait(10) and _depth_becomes(state, 4)  # in the blocked decoder
        waiting = pool.submit(request, url + "/v1/translate", {"inputs": ["2"] * 4})
        assert _depth_becomes(state, 8)  # and 4 sentences waiting: the queue is full
        status, answer, headers = request(url + "/v1/translate", {"inputs": ["2"]})
        assert (status, headers.get("retry-after")) == (503, "1")
        assert answer["error"] == ("the queue is full (4 of 4 sentences waiting); retry later")
        for future in (decoding, waiting):
            status, answer, _ = future.result()
            assert status == 504 and "--request_timeout_secs" in answer["error"]
    engine.gate.set()
    assert _depth_becomes(state, 0)
    assert request(url + "/v1/translate", {"inputs": ["2 3"]})[1]["outputs"] == ["3 2"]


def test_a_client_that_leaves_leaks_nothing(scripted):
    url, engine, state = scripted
    engine.gate.clear()
    engine.entered.clear()
    blocker = threading.Thread(target=request, args=(url + "/v1/translate", {"inputs": ["5"]}))
    blocker.start()
    assert engine.entered.wait(10)  # the worker is busy with [5]
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps({"inputs": ["7 7 7"]}).encode()
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        assert _depth_becomes(state, 2)
    time.sleep(4 * server.DISCONNECT_POLL_SECS)  # the handler sees the client gone
    engine.gate.set()
    blocker.join(30)
    assert _depth_becomes(state, 0)
    assert [7, 7, 7, 1] not in engine.decoded  # cancelled before its batch was decoded


def test_a_failing_sentence_fails_only_its_own_request(scripted):
    url, engine, _ = scripted
    engine.gate.clear()
    with ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(request, url + "/v1/translate", {"inputs": [text]})
                   for text in ("2 3", "9", "4 5 6")]
        time.sleep(0.3)  # all three queued: one batch
        engine.gate.set()
        answers = [f.result() for f in futures]
    assert answers[0][:2] == (200, {"outputs": ["3 2"], "scores": [-1.0]})
    assert answers[1][0] == 500 and "id 9 breaks this engine" in answers[1][1]["error"]
    assert answers[2][1]["outputs"] == ["6 5 4"]


def test_batcher_decodes_again_rows_whose_batch_limit_was_longer():
    class Engine:
        def __init__(self):
            self.batches = []

        def decode(self, id_lists, options):
            self.batches.append([len(ids) for ids in id_lists])
            longest = max(len(ids) for ids in id_lists)
            # Rows shorter than the batch "ran to its limit": they depend on the batch.
            return [batching.Row([batching.Hypothesis(str(len(ids)), 0.0, [])],
                                 depends_on_batch=len(ids) < longest) for ids in id_lists]

    engine = Engine()
    batcher = batching.Batcher(engine, max_batch_size=8, batch_timeout_secs=0.05)
    jobs = batching.jobs_for([[2, 1], [2, 2, 2, 1], [3, 1], [2, 2, 1]],
                             batching.Options(1, 0.6, 1))
    batcher.submit(jobs)
    batcher.start()
    batcher.close()
    assert [job.future.result().row.hypotheses[0].text for job in jobs] == ["2", "4", "2", "3"]
    # One batch of 4, then the rows shorter than 4 again, grouped by their own length.
    assert engine.batches[0] == [2, 4, 2, 3] or sorted(engine.batches[0]) == [2, 2, 3, 4]
    assert sorted(map(sorted, engine.batches[1:])) == [[2, 2], [3]]
    with pytest.raises(batching.Closed):
        batcher.submit(jobs)


def test_two_workers_decode_two_batches_at_once_and_time_them():
    class Engine:
        def __init__(self):
            self.running = self.most = 0
            self.lock = threading.Lock()

        def decode(self, id_lists, options):
            with self.lock:
                self.running += 1
                self.most = max(self.most, self.running)
            time.sleep(0.3)
            with self.lock:
                self.running -= 1
            return [batching.Row([batching.Hypothesis(str(options.beam_size), 0.0, [])])
                    for _ in id_lists]

    engine, waits, decodes = Engine(), [], []
    batcher = batching.Batcher(engine, max_batch_size=8, batch_timeout_secs=0.01, workers=2,
                               on_wait=waits.append,
                               on_decode=lambda seconds, size: decodes.append((seconds, size)))
    # Other options cannot share a batch: two batches, decoded side by side.
    jobs = [*batching.jobs_for([[2, 1], [3, 1]], batching.Options(1, 0.6, 1)),
            *batching.jobs_for([[4, 1]], batching.Options(2, 0.6, 1))]
    batcher.submit(jobs)
    start = time.monotonic()
    batcher.start()
    batcher.close(10)
    assert [job.future.result(0).row.hypotheses[0].text for job in jobs] == ["1", "1", "2"]
    assert engine.most == 2 and time.monotonic() - start < 0.55
    assert len(waits) == 3 and all(0 <= w < 0.25 for w in waits)
    assert sorted(size for _, size in decodes) == [1, 2] and all(d >= 0.3 for d, _ in decodes)
    with pytest.raises(ValueError, match="workers=0"):
        batching.Batcher(engine, workers=0)


def test_bench_percentiles_are_numpys():
    from tests.conftest import load_script

    bench = load_script(REPO_ROOT / "bench" / "bench_serving.py", "bench_serving")
    values = [0.3, 0.1, 0.2, 0.9, 0.5]
    for q in (50, 95, 99):
        assert bench.percentile(values, q) == pytest.approx(np.percentile(values, q))
    summary = bench.summarize([0.1, 0.2], 0.5, 1)
    assert (summary["sentences_per_sec"], summary["errors"]) == (4.0, 1)
    assert bench.agreement({0: ("a", -1.0), 1: ("b", -2.0)}, {0: ("a", -1.0), 1: ("c", -2.2)}) \
        == {"identical": 1, "compared": 2, "max_score_rel_diff": pytest.approx(0.2 / 2.2)}
    # 10 sentences in 4 batches, 2 s of decoding over 2 s on 2 workers; each sentence waited
    # 0.6 s for its batch's decode on average, 50 ms in the queue, 1.2 s in all.
    after = {"batch_size_sum": 10, "batch_size_count": 4, "queue_wait_seconds_sum": 0.5,
             "queue_wait_seconds_count": 10, "decode_seconds_sum": 2.0,
             "sentence_decode_seconds_total": 6.0, "request_latency_seconds_sum": 12.0,
             "request_latency_seconds_count": 10}
    # RSS growth between the medians of the first and last tenth (3 samples at least): a
    # last sample that jumps (a batch in flight) does not count alone.
    assert bench.rss_trend([100, 104, 98, 101, 99, 103, 102, 105, 103, 125]) == pytest.approx(
        {"rss_first_median_kb": 100, "rss_last_median_kb": 105, "rss_growth": 0.05})
    assert bench.profile({}, after, 2.0, 2) == pytest.approx(
        {"mean_batch": 2.5, "wait_ms": 50, "decode_ms": 600, "workers_busy": 0.5,
         "other_ms": 550})


def test_a_batch_waits_after_the_previous_decode_for_the_clients_it_answered():
    # Clients that send their next sentence once answered: B came during A's decode and
    # waited past batch_timeout, but C, sent as soon as A is answered, still joins B's batch
    # (the wait also counts from the end of the previous decode), so the batches do not
    # split into halves decoded in turn.
    class Engine:
        def __init__(self):
            self.batches, self.entered = [], threading.Event()

        def decode(self, id_lists, options):
            self.batches.append(len(id_lists))
            self.entered.set()
            time.sleep(0.8 if len(self.batches) == 1 else 0)
            return [batching.Row([batching.Hypothesis("", 0.0, [])]) for _ in id_lists]

    engine = Engine()
    batcher = batching.Batcher(engine, max_batch_size=8, batch_timeout_secs=0.3)
    batcher.start()
    options = batching.Options(1, 0.6, 1)
    first, second, third = (batching.jobs_for([[n, 1]], options) for n in (2, 3, 4))
    batcher.submit(first)
    assert engine.entered.wait(10)
    batcher.submit(second)  # waits for the decoder: 0.8 s, more than batch_timeout
    first[0].future.result(10)
    batcher.submit(third)
    batcher.close(10)
    assert engine.batches == [1, 2]
    assert all(job.future.done() for job in second + third)


def test_ctranslate2_engine_cuts_a_batch_into_one_part_per_replica_a_worker_has():
    from t2t_lite.decoding.decode_hparams import decode_hparams
    from t2t_lite.export import ct2
    from t2t_lite.serving import engines

    class Translator:
        inter_threads = 2

        def __init__(self):
            self.parts = []

        def translate_id_batches(self, batches, beam_size, alpha, extra_length, num_hypotheses):
            self.parts.append([[len(ids) for ids in batch] for batch in batches])
            # Every hypothesis runs to its part's limit: longest input + EOS + extra_length.
            return [[[ct2.Hypothesis(str(ids), [7] * (max(map(len, batch)) + extra_length),
                                     -1.0)] for ids in batch] for batch in batches]

    translator = Translator()
    engine = engines.CTranslate2Engine(translator, decode_hparams("extra_length=3"), {},
                                       workers=1)
    rows = engine.decode([[5, 1], [5, 6, 7, 8, 1], [5, 6, 1], [5, 6, 7, 1]],
                         batching.Options(1, 0.6, 1))
    # Sorted by length and cut in two parts, each decoded with its own limit (inputs without
    # EOS); a row shorter than its part's longest ran past its own limit: decoded again.
    assert translator.parts == [[[1, 2], [3, 4]]]
    assert [row.hypotheses[0].text for row in rows] == ["[5]", "[5, 6, 7, 8]", "[5, 6]",
                                                       "[5, 6, 7]"]
    assert [row.depends_on_batch for row in rows] == [True, False, False, True]
    assert [len(engine.decode([[5, 1]], batching.Options(1, 0.6, 1)))] == [1]
    assert translator.parts[-1] == [[1]]
    # By default one worker per replica, each batch on one replica; the engine's batch
    # timeout (1 ms) is the server's unless --batch_timeout_ms is given.
    engine = engines.CTranslate2Engine(translator, decode_hparams("extra_length=3"), {})
    assert engine.default_workers == engine.workers == 2
    engine.decode([[5, 1], [5, 6, 7, 8, 1], [5, 6, 1]], batching.Options(1, 0.6, 1))
    assert translator.parts[-1] == [[1, 2, 4]]
    assert server.batch_timeout_ms(engine, server.ServerConfig()) == 1.0
    assert server.batch_timeout_ms(engine, server.ServerConfig(batch_timeout_ms=0)) == 0

    class Plain(batching.Engine):  # an engine that states no batch timeout of its own
        def __init__(self):
            self.description = {}

    assert server.batch_timeout_ms(Plain(), server.ServerConfig()) == 5.0


def test_the_serve_flags_defaults_are_the_server_configs():
    import dataclasses
    import types

    from absl import flags as absl_flags

    import t2t_lite.flags  # noqa: F401 - defines the flags
    from t2t_lite.bin import t2t_server
    from t2t_lite.decoding.decode_hparams import decode_hparams
    from t2t_lite.serving.config import FLAGS

    assert set(FLAGS) | {"beam_size", "alpha"} == {
        field.name for field in dataclasses.fields(server.ServerConfig)}
    defaults = types.SimpleNamespace(**{name: absl_flags.FLAGS[name].default
                                        for name in (*FLAGS.values(), "port")})
    assert t2t_server._config(defaults, decode_hparams("")) == server.ServerConfig()
    changed = types.SimpleNamespace(**{**vars(defaults), "serve_max_queue": 7})
    assert t2t_server._config(changed, decode_hparams("")).max_queue_sentences == 7
