"""The translation server's borders: nothing a client (or a careless day) does wears it down
or leaves a traceback. Compile caches bounded by design (alpha is no trace key, compiled
decoders capped), bodies and answers bounded (body bytes, read time, attention weights),
only JSON read, a client that leaves counted as 499, every stop signal drained, and
/v1/models true after training rotated the served checkpoint away.

One real server per module: the session's tiny trained run (copied), greedy by default,
as a subprocess on 127.0.0.1 and a free port, with small limits.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import threading
import time

import pytest

from tests.conftest import REPO_ROOT, require_extra
from tests.server_helpers import ServerProcess, request

require_extra("fastapi", "serve")

pytestmark = pytest.mark.slow

LIMITS = ("--serve_max_body_bytes=300000", "--serve_read_timeout_secs=2",
          "--serve_max_attention_cells=200", "--serve_max_compiled_decoders=2",
          "--serve_intra_op_threads=3")


@pytest.fixture(scope="module")
def limited(tiny_run_trained, tmp_path_factory):
    """(the server, its run folder: a copy of the tiny run)."""
    work = tmp_path_factory.mktemp("limited")
    run_dir = work / "run"
    shutil.copytree(tiny_run_trained, run_dir)
    process = ServerProcess(run_dir, *LIMITS, cwd=work)
    try:
        process.wait_ready()
        yield process, run_dir
    finally:
        process.stop()


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def raw_exchange(url: str, head: bytes, body_parts=(), pause: float = 0.0,
                 timeout: float = 60) -> tuple[int, dict | str, float]:
    """Sends `head` then each of `body_parts` (`pause` seconds apart) on one connection and
    reads the answer until the server closes it.

    Returns:
      (status, JSON body (text when not JSON), seconds from the head to the answer's end).
    """
    start = time.monotonic()
    with socket.create_connection(_address(url), timeout=timeout) as sock:
        sock.sendall(head)
        for part in body_parts:
            if pause:
                time.sleep(pause)
            try:
                sock.sendall(part)
            except OSError:  # refused while sending: the answer is there to read
                break
        received = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += chunk
            if b"\r\n\r\n" in received:
                header, _, rest = received.partition(b"\r\n\r\n")
                length = [int(line.split(b":")[1]) for line in header.split(b"\r\n")
                          if line.lower().startswith(b"content-length:")]
                if length and len(rest) >= length[0]:
                    break
    seconds = time.monotonic() - start
    header, _, body = received.partition(b"\r\n\r\n")
    status = int(header.split(b" ", 2)[1]) if header else 0
    try:
        return status, json.loads(body), seconds
    except ValueError:
        return status, body.decode("utf-8", "replace"), seconds


def _post_head(content_type: str | None, length: int | None = None,
               chunked: bool = False) -> bytes:
    lines = [b"POST /v1/translate HTTP/1.1", b"Host: t"]
    if content_type is not None:
        lines.append(b"Content-Type: " + content_type.encode())
    if length is not None:
        lines.append(b"Content-Length: %d" % length)
    if chunked:
        lines.append(b"Transfer-Encoding: chunked")
    return b"\r\n".join(lines) + b"\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def metric_values(url: str) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    status, text, _ = request(url + "/metrics")
    assert status == 200
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def _errors(values: dict, status: int) -> float:
    return values.get(("t2t_lite_serving_errors_total", (("status", str(status)),)), 0.0)


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def test_each_border_is_its_status_counted_and_no_traceback(limited):
    process, _ = limited
    url = process.url
    before = metric_values(url)
    sentence = json.dumps({"inputs": ["0 1 1 0"]}).encode()
    expected = {}  # status -> how many requests answered with it

    def check(status: int, answer, words: str) -> None:
        assert isinstance(answer, dict) and list(answer) == ["error"], answer
        assert words in answer["error"], answer
        expected[status] = expected.get(status, 0) + 1

    # Only JSON: a form or text/plain POST (which any web page can send) is refused.
    for content_type in ("text/plain", None, "application/x-www-form-urlencoded"):
        status, answer, _ = raw_exchange(url, _post_head(content_type, len(sentence)) + sentence)
        assert status == 415
        check(415, answer, "the body must be JSON, sent with Content-Type: application/json")
    # The body limit, from Content-Length before anything is read (10 bytes sent of 100 MB)...
    status, answer, seconds = raw_exchange(
        url, _post_head("application/json", 100_000_000) + b'{"inputs":')
    assert status == 413 and seconds < 2
    check(413, answer, "the body is 100000000 bytes (Content-Length); the limit is 300000 "
                       "(--serve_max_body_bytes)")
    # ... and while reading a chunked body, which is never read past the limit.
    parts = [_chunk(b" " * 50_000) for _ in range(20)] + [b"0\r\n\r\n"]
    status, answer, _ = raw_exchange(url, _post_head("application/json", chunked=True), parts)
    assert status == 413
    check(413, answer, "the body is over 300000 bytes; the limit is 300000")
    # A body that never arrives whole: 408 after --serve_read_timeout_secs, not held.
    status, answer, seconds = raw_exchange(url, _post_head("application/json", 100)
                                           + b'{"inputs":')
    assert status == 408 and 1.5 < seconds < 10
    check(408, answer, "the request body was not received whole within 2 s "
                       "(--serve_read_timeout_secs)")
    # JSON nested 100,000 deep and a number of 5,000 digits: 400 like any malformed JSON.
    for body, words in ((b"[" * 100_000 + b"]" * 100_000, "malformed JSON: nested too deeply"),
                        (b'{"inputs": ["1"], "beam_size": ' + b"9" * 5000 + b"}",
                         "malformed JSON: ")):
        status, answer, _ = request(url + "/v1/translate", data=body)
        assert status == 400
        check(400, answer, words)
    # The attention budget: 1 layer x 2 heads x (5 + 3 + 1) x 5 = 90 weights a sentence.
    status, answer, _ = request(url + "/v1/translate",
                                {"inputs": ["0 1 1 0"], "return_attention": True})
    assert status == 200 and len(answer["attention"]) == 1
    expected[200] = 1
    status, answer, _ = request(url + "/v1/translate",
                                {"inputs": ["0 1 1 0"] * 3, "return_attention": True})
    assert status == 413
    check(413, answer, "return_attention: the attention of these 3 sentences may hold 270 "
                       "weights (layers x heads x output x input positions); the limit is 200 "
                       "(--serve_max_attention_cells)")
    # A request that is not HTTP (a 1 MB URL): a JSON 400 from the HTTP layer (never
    # reaching the application, so not in /metrics).
    status, answer, _ = raw_exchange(url, b"GET /" + b"a" * 1_000_000 + b" HTTP/1.1\r\n\r\n")
    assert status == 400 and "invalid HTTP request" in answer["error"]
    # A client that leaves while sending its body, and one that leaves before its answer
    # (a new beam size: traced for a while): 499 each, nothing sent.
    with socket.create_connection(_address(url)) as sock:
        sock.sendall(_post_head("application/json", 100) + b'{"inputs":')
        time.sleep(0.5)
    body = json.dumps({"inputs": ["0 1 1 0"], "beam_size": 3}).encode()
    with socket.create_connection(_address(url)) as sock:
        sock.sendall(_post_head("application/json", len(body)) + body)
    expected[499] = 2
    left = ("t2t_lite_serving_requests_total", (("status", "499"),))
    deadline = time.monotonic() + 120
    while metric_values(url).get(left, 0) < before.get(left, 0) + 2:
        assert time.monotonic() < deadline, process.stderr()[-3000:]
        time.sleep(0.5)
    # Each counted under its status; the server still serves; no traceback anywhere.
    status, answer, _ = request(url + "/v1/translate", {"inputs": ["0 1 1 0"]})
    assert status == 200 and len(answer["outputs"]) == 1
    after = metric_values(url)
    for code, count in expected.items():
        key = ("t2t_lite_serving_requests_total", (("status", str(code)),))
        assert after.get(key, 0) - before.get(key, 0) == count + (code == 200), code
        if code >= 400:
            assert _errors(after, code) - _errors(before, code) == count, code
    assert "Traceback" not in process.stderr(), process.stderr()[-3000:]


def test_alpha_is_no_trace_key_and_compiled_decoders_stay_at_their_cap(limited):
    process, _ = limited
    url = process.url

    def translate(**options) -> dict:
        status, answer, _ = request(url + "/v1/translate", {"inputs": ["0 1 1 0", "1 1"],
                                                            **options})
        assert status == 200, answer
        return answer

    def compiled() -> int:
        model = request(url + "/v1/models")[1]["models"][0]
        assert model["limits"]["max_compiled_decoders"] == 2
        assert model["limits"]["intra_op_threads"] == 3  # as asked, whatever the cores
        return model["compiled_decoders"]

    # Beam sizes and n-best are keys: three of them leave two compiled (the cap).
    for options in ({"beam_size": 2}, {"beam_size": 2, "n_best": 2}, {"beam_size": 4}):
        translate(**options)
    assert compiled() == 2
    values = metric_values(url)
    assert values[("t2t_lite_serving_compiled_decoders", ())] == 2
    # Alpha is an input of the compiled decoder, not a key (its effect on the scores:
    # test_compiled_searches_take_alpha_as_an_input_and_decode_as_infer): 50 alphas trace
    # nothing, memory stays put, the count at its cap.
    for warm in range(5):
        translate(beam_size=4, alpha=0.5 + warm / 100)
    rss = _rss_kb(process.process.pid)
    for n in range(50):
        translate(beam_size=4, alpha=0.50001 + n / 100000)
    assert compiled() == 2
    grown = _rss_kb(process.process.pid) / rss - 1
    assert grown < 0.05, f"RSS grew {grown:.1%} over 50 alphas"
    assert "Traceback" not in process.stderr()


def test_compiled_searches_take_alpha_as_an_input_and_decode_as_infer(copy_model):
    import numpy as np

    from t2t_lite.serving.compiled_decoders import CompiledSearches

    model = copy_model[0]
    # Digit strings (ids 2..11) of 4 and 3 digits, EOS, padding: the copy model ends them.
    batch = np.array([[3, 4, 5, 6, 1], [7, 8, 9, 1, 0]], np.int32)
    lengths = np.array([5, 4], np.int32)
    searches = CompiledSearches(model, 0, extra_length=4, eos_id=1,
                                force_decode_length=False, cap=2)
    scores = {}
    for alpha in (0.0, 0.6, 2.0):
        outputs, scores[alpha] = searches(batch, lengths, 3, alpha, 3)
        expected = model.infer({"inputs": batch, "input_lengths": lengths}, decode_length=4,
                               beam_size=3, alpha=alpha, top_beams=3)
        np.testing.assert_array_equal(outputs, expected["outputs"])
        np.testing.assert_allclose(scores[alpha], expected["scores"], rtol=1e-6)
    assert not np.allclose(scores[0.0], scores[2.0])  # finished beams: alpha counts
    assert len(searches) == 1  # one compiled decoder for every alpha
    for beam_size in (2, 1):
        outputs, _ = searches(batch, lengths, beam_size, 0.6, 1)
        np.testing.assert_array_equal(outputs, model.infer(
            {"inputs": batch, "input_lengths": lengths}, decode_length=4,
            beam_size=beam_size, alpha=0.6)["outputs"])
    assert searches.cache.keys() == [(2, 1), (1, 1)]  # the cap: the least recent dropped
    # The continuous searches' functions are kept per configuration under the same cap.
    from t2t_lite.decoding.decode_hparams import decode_hparams
    from t2t_lite.serving import batching, engines
    from tests import copy_task

    engine = engines.T2tLiteEngine(model, {"targets": copy_model[1]}, 0,
                                   decode_hparams("extra_length=4"),
                                   copy_task.VOCAB_SIZE, {}, max_compiled_decoders=2)
    # Alpha is an input of the continuous search too: every alpha runs the same traced
    # functions, and each sentence gets the scores of its batch search with that alpha.
    for alpha in (0.0, 0.6, 2.0):
        search = engine.slot_search(batching.Options(3, alpha, 3), 16, 2).search
        search.admit([list(batch[0]), list(batch[1][:4])], ["a", "b"])
        finished = {}
        while len(search):
            finished.update((row.token, row) for row in search.run())
        expected = model.infer({"inputs": batch, "input_lengths": lengths}, decode_length=4,
                               beam_size=3, alpha=alpha, top_beams=3)
        for b, token in enumerate("ab"):
            width = min(finished[token].outputs.shape[1], expected["outputs"].shape[2])
            np.testing.assert_array_equal(finished[token].outputs[:, :width],
                                          expected["outputs"][b, :, :width])
            np.testing.assert_allclose(finished[token].scores, expected["scores"][b],
                                       rtol=1e-5)
    assert engine.compiled_decoders() == 1
    for beam_size in (2, 4):
        engine.slot_search(batching.Options(beam_size, 0.6, 1), 16, 4)
    assert engine.compiled_decoders() == 2 == engine.max_compiled_decoders


def test_models_says_whether_the_served_checkpoint_is_still_on_disk(limited):
    process, run_dir = limited
    model = request(process.url + "/v1/models")[1]["models"][0]
    assert model["checkpoint"] == str(run_dir / "ckpt-4") and model["step"] == 4
    assert model["checkpoint_on_disk"] is True
    # Training beside the server rotates ckpt-4 away: the weights served stay, and
    # /v1/models says the checkpoint is gone.
    moved = run_dir.parent / "rotated"
    moved.mkdir()
    for path in run_dir.glob("ckpt-4.*"):
        shutil.move(str(path), moved / path.name)
    try:
        model = request(process.url + "/v1/models")[1]["models"][0]
        assert model["checkpoint"] == str(run_dir / "ckpt-4")
        assert model["checkpoint_on_disk"] is False
        assert request(process.url + "/v1/translate", {"inputs": ["1"]})[0] == 200
    finally:
        for path in moved.iterdir():
            shutil.move(str(path), run_dir / path.name)


def test_sighup_drains_like_sigterm(tiny_run_trained, tmp_path):
    process = ServerProcess(tiny_run_trained, cwd=tmp_path)
    try:
        process.wait_ready()
        answers: list = []
        # A new decode configuration (beam 3) is traced first: the requests last seconds.
        senders = [threading.Thread(target=lambda: answers.append(request(
            process.url + "/v1/translate", {"inputs": ["0 1 1 0", "1 1"], "beam_size": 3})))
            for _ in range(8)]
        for sender in senders:
            sender.start()
        time.sleep(1.0)
        os.kill(process.process.pid, signal.SIGHUP)
        assert process.process.wait(120) == 0, process.stderr()[-3000:]
        for sender in senders:
            sender.join(60)
        assert [status for status, _, _ in answers] == [200] * 8, answers
        deadline = time.monotonic() + 30  # the last lines are read by a thread
        while not any(line.startswith("stopped:") for line in process.stdout):
            assert time.monotonic() < deadline, process.stdout
            time.sleep(0.1)
        stopped = [line for line in process.stdout if line.startswith("stopped:")]
        assert stopped == [("stopped: SIGHUP received: requests in flight answered, queue "
                            "drained\n")], process.stdout
        assert "Traceback" not in process.stderr()
    finally:
        process.stop()


@pytest.fixture
def without_tensorflow(tmp_path):
    """The environment of a run.py whose `import tensorflow` fails: what it checks before
    TensorFlow loads answers; anything later says "tensorflow imported"."""
    from tests.run_py import env

    fake = tmp_path / "no_tensorflow" / "tensorflow"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise ImportError("tensorflow imported")\n')
    values = env()
    values["PYTHONPATH"] = os.pathsep.join(
        [str(fake.parent), str(REPO_ROOT), values.get("PYTHONPATH", "")])
    values["TF_ENABLE_ONEDNN_OPTS"] = "0"  # no oneDNN measurement in child processes
    return values


def test_start_up_checks_are_one_line_each_before_serving_and_tensorflow(
        tiny_run_trained, tmp_path, without_tensorflow):
    import subprocess
    import sys

    from tests.conftest import error_line

    def serve(*flags: str) -> str:
        result = subprocess.run(
            [sys.executable, str(REPO_ROOT / "run.py"), "--mode=serve", *flags], cwd=tmp_path,
            env=without_tensorflow, capture_output=True, text=True, timeout=120, check=False)
        assert "Serving on" not in result.stdout
        return error_line(result)

    empty = tmp_path / "empty_run"
    empty.mkdir()
    (empty / "flags.json").write_text((tiny_run_trained / "flags.json").read_text())
    assert serve(f"--output_dir={tmp_path / 'missing'}") == (
        f"error: --output_dir={tmp_path / 'missing'}: no such folder (the training run to "
        "serve)")
    assert serve(f"--output_dir={empty}") == (
        f"error: No checkpoint in --output_dir={empty}; train first or give --checkpoint_path")
    assert serve(f"--checkpoint_path={tmp_path / 'ckpt-9'}") == (
        f"error: --checkpoint_path={tmp_path / 'ckpt-9'}: {tmp_path / 'ckpt-9'} is neither a "
        f"run folder nor a checkpoint ({tmp_path / 'ckpt-9'}.index)")
    assert serve(f"--saved_model_dir={tmp_path}") == (
        f"error: --saved_model_dir={tmp_path}: no saved_model.pb there nor in a numbered "
        "version folder; write one with --mode=export")
    assert serve(f"--output_dir={tiny_run_trained}", "--port=70000") == (
        "error: --port=70000: must be between 0 and 65535")
    assert serve(f"--output_dir={tiny_run_trained}", "--serve_intra_op_threads=-1") == (
        "error: --serve_intra_op_threads=-1: must be >= 0")
    assert serve(f"--output_dir={tiny_run_trained}", "--serve_steps_per_call=0") == (
        "error: --serve_steps_per_call=0: must be >= 1")
    line = serve(f"--output_dir={tiny_run_trained}", "--host=no-such-host.invalid")
    assert line.startswith("error: --host=no-such-host.invalid: not an address or a known "
                           "host name ("), line
    # Those checked when listening (still before TensorFlow): a port in use, an address
    # that is not this machine's.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        line = serve(f"--output_dir={tiny_run_trained}", f"--port={port}")
    assert line.startswith(f"error: --port={port}: already in use on --host=127.0.0.1 ("), line
    assert line.endswith("); pick another --port (0: any free one)")
    line = serve(f"--output_dir={tiny_run_trained}", "--host=192.0.2.1", "--port=0")
    assert line.startswith("error: --host=192.0.2.1: cannot listen there ("), line
    # A good command gets past every check: this one then needs TensorFlow.
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "run.py"), "--mode=serve", "--port=0",
         f"--output_dir={tiny_run_trained}"], cwd=tmp_path, env=without_tensorflow,
        capture_output=True, text=True, timeout=120, check=False)
    assert "tensorflow imported" in result.stderr


def test_query_mode_is_one_line_for_a_malformed_url_or_another_servers_page(tmp_path):
    import http.server
    import subprocess
    import sys

    from tests.conftest import error_line
    from tests.run_py import env

    page = b"<html><body>" + b"<p>a long page</p>\n" * 500 + b"</body></html>"

    class Proxy(http.server.BaseHTTPRequestHandler):
        """A proxy's HTML error page for /bad, an HTML page with 200 for /html."""

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            status = 502 if self.path.startswith("/bad") else 200
            self.send_response(status)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args):
            pass

    lines = tmp_path / "in.txt"
    lines.write_text("0 1\n")
    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        def query(url: str) -> str:
            result = subprocess.run(
                [sys.executable, str(REPO_ROOT / "run.py"), "--mode=query",
                 f"--server_url={url}", f"--decode_from_file={lines}"], cwd=tmp_path,
                env=env(), capture_output=True, text=True, timeout=120, check=False)
            return error_line(result)

        base = f"http://127.0.0.1:{proxy.server_address[1]}"
        assert query("notaurl") == ("error: --server_url=notaurl: 'notaurl' is not the URL of "
                                    "a server; give one like http://127.0.0.1:8080")
        assert query("http://127.0.0.1:port") == (
            "error: --server_url=http://127.0.0.1:port: 'http://127.0.0.1:port' is not the URL "
            "of a server (Port could not be cast to integer value as 'port')")
        assert query(base + "/bad") == (
            f"error: --server_url={base}/bad: line 1: 502: Bad Gateway (text/html, not this "
            "server's JSON error)")
        assert query(base + "/html") == (
            f"error: --server_url={base}/html: line 1: 200: the answer is not a JSON object of "
            f"a translation server (text/html, {len(page)} bytes)")
    finally:
        proxy.shutdown()


def test_a_sentence_gets_the_same_translation_from_the_server_and_decode_from_file(
        copy_model, tmp_path):
    import uvicorn

    from t2t_lite.decoding import decoding
    from t2t_lite.decoding.decode_hparams import decode_hparams
    from t2t_lite.serving import engines, server
    from tests import copy_task

    model, encoder, _ = copy_model
    decode_hp = decode_hparams("beam_size=1,extra_length=4")
    # Lines as a careless day writes them: CRLF endings, stray spaces and tabs. t2t's
    # subword encoder keeps "\r" and leading spaces as pieces of their own.
    raw = ["3 1 4 1 5\r", "  9 2 6\r", "5 3 5 8 9\t \r", "\t7 9\u3000\r"]
    assert encoder.encode(raw[1]) != encoder.encode(raw[1].strip())
    source = tmp_path / "lines.txt"
    source.write_bytes("\n".join(raw).encode("utf-8") + b"\n")
    decoding.decode_from_file(decoding.make_infer_fn(model, decode_hp), str(source),
                              {"inputs": encoder, "targets": encoder}, decode_hp,
                              str(tmp_path / "out.txt"), ("transformer", "tiny", "copy"))
    decoded = (tmp_path / "out.txt").read_text(encoding="utf-8").split("\n")[:len(raw)]
    assert decoded[1] == "9 2 6"  # the copy model copies

    engine = engines.T2tLiteEngine(model, {"inputs": encoder, "targets": encoder}, 0,
                                   decode_hp, copy_task.VOCAB_SIZE, {"checkpoint": None})
    app = server.create_app(lambda: engine, server.ServerConfig(beam_size=1, alpha=0.6))
    sock = server.bind("127.0.0.1", 0)
    instance = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=instance.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        deadline = time.monotonic() + 120
        while request(url + "/readyz")[0] != 200:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        # Each line as the client read it, nothing stripped.
        status, answer, _ = request(url + "/v1/translate", {"inputs": raw})
        assert status == 200, answer
        assert answer["outputs"] == decoded
    finally:
        instance.should_exit = True
        thread.join(30)
