"""The translation server (`run.py --mode=serve`) as a subprocess on 127.0.0.1 and a free
port, for tests/test_server.py and tests/test_server_page.py."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

from tests.conftest import REPO_ROOT
from tests.run_py import env

# Greedy decoding of 3 extra steps: the 4-step tiny model never emits EOS, so each output's
# length is its own input length + 3 (a batch-dependent length would show).
DECODE_HPARAMS = "beam_size=1,extra_length=3"


class ServerProcess:
    """A started server: `url`, `process`, and the lines it printed so far (`stdout`).

    Args:
      output_dir: the run to serve (None: `extra` names the model, e.g. --saved_model_dir).
      extra: more run.py flags.
      cwd: the server's working directory.
      decode_hparams: the server's --decode_hparams.
    """

    def __init__(self, output_dir, *extra: str, cwd, decode_hparams: str = DECODE_HPARAMS):
        self.stdout: list[str] = []
        model = [f"--output_dir={output_dir}"] if output_dir is not None else []
        self.process = subprocess.Popen(
            [sys.executable, str(REPO_ROOT / "run.py"), "--mode=serve", "--port=0", *model,
             f"--decode_hparams={decode_hparams}", *extra],
            cwd=cwd, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self._stderr: list[str] = []
        threading.Thread(target=self._drain, args=(self.process.stderr, self._stderr),
                         daemon=True).start()
        first = self.process.stdout.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)/", first)
        assert match, first + "".join(self._stderr)[-3000:]
        self.stdout.append(first)
        threading.Thread(target=self._drain, args=(self.process.stdout, self.stdout),
                         daemon=True).start()
        self.url = f"http://127.0.0.1:{match.group(1)}"

    @staticmethod
    def _drain(stream, lines: list[str]) -> None:
        lines.extend(stream)

    def stderr(self) -> str:
        """What the server wrote on stderr so far."""
        return "".join(self._stderr)

    def wait_ready(self, timeout: float = 600) -> None:
        """Polls /readyz until 200 (the model loaded and warmed up)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.stderr()[-3000:]
            if request(self.url + "/readyz")[0] == 200:
                return
            time.sleep(0.5)
        raise AssertionError("the server was not ready in time: " + self.stderr()[-3000:])

    def stop(self) -> None:
        """Kills the server if it still runs."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)


def request(url: str, payload=None, data: bytes | None = None,
            timeout: float = 300) -> tuple[int, dict | str, dict]:
    """(status, JSON body (text when not JSON), headers) of a GET, or a POST of `payload`
    (JSON) or raw `data`."""
    if payload is not None:
        data = json.dumps(payload).encode("utf-8")
    req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            status, body, headers = response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as e:
        status, body, headers = e.code, e.read(), dict(e.headers)
    except (urllib.error.URLError, ConnectionError):
        return 0, "", {}
    text = body.decode("utf-8")
    try:
        return status, json.loads(text), headers
    except ValueError:
        return status, text, headers
