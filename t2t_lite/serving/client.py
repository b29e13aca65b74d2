"""A client of the translation server (`run.py --mode=serve`), on the standard library only.

    from t2t_lite.serving.client import Translator
    print(Translator("http://127.0.0.1:8080").translate(["The debate is closed."]))

`--mode=query` (t2t's t2t-query-server role) reads lines and writes translations with it.
"""
from __future__ import annotations

import json
import queue
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from t2t_lite.errors import UserError


class ServerError(UserError):
    """The server answered with an error (`status`, and its one-sentence `message`), or could
    not be reached (`status` 0). A UserError: run.py's `--mode=query` prints it as one line."""

    def __init__(self, message: str, status: int = 0):
        super().__init__(f"{status}: {message}" if status else message)
        self.status = status
        self.message = message


def check_url(url: str) -> str:
    """Returns `url` if it names an HTTP server ("http://host:port", "https://...").

    Raises:
      ServerError: one line saying what is wrong with it.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ServerError(f"{url!r} is not the URL of a server; give one like "
                          "http://127.0.0.1:8080")
    try:
        _ = parts.port  # raises on a port that is not a number
    except ValueError as e:
        raise ServerError(f"{url!r} is not the URL of a server ({e})") from None
    return url


def _content_type(response: Any) -> str:
    """The answer's Content-Type, without its parameters ("no Content-Type" if none)."""
    value = response.headers.get("Content-Type") if response.headers else None
    return value.split(";")[0].strip() if value else "no Content-Type"


class Translator:
    """Sends sentences to a translation server.

    Args:
      url: the server, e.g. "http://127.0.0.1:8080".
      timeout: seconds to wait for an answer.
      batch_size: sentences per request (the server's --serve_max_sentences or fewer).
      **options: beam_size, alpha, n_best sent with every request (default: the server's).
    """

    def __init__(self, url: str, timeout: float = 120.0, batch_size: int = 32, **options: Any):
        self.url = check_url(url).rstrip("/")
        self.timeout = timeout
        self.batch_size = batch_size
        self.options = {k: v for k, v in options.items() if v is not None}

    def _call(self, method: str, path: str, payload: dict | None = None) -> dict:
        data = None if payload is None else json.dumps(payload).encode("utf-8")
        request = urllib.request.Request(
            self.url + path, data=data, method=method,
            headers={"Content-Type": "application/json"} if data is not None else {})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body = response.read()
                try:
                    answer = json.loads(body.decode("utf-8"))
                except ValueError:  # a proxy's or another server's page
                    answer = None
                if not isinstance(answer, dict):
                    raise ServerError(f"the answer is not a JSON object of a translation "
                                      f"server ({_content_type(response)}, {len(body)} "
                                      "bytes)", response.status)
                return answer
        except urllib.error.HTTPError as e:
            body = e.read().decode("utf-8", "replace")
            try:
                message = json.loads(body)["error"]
            except (ValueError, KeyError, TypeError):
                # Not this server's JSON error (an HTML page of a proxy, ...): its status
                # and reason, not the page.
                message = f"{e.reason or 'error'} ({_content_type(e)}, not this server's " \
                          "JSON error)"
            raise ServerError(" ".join(str(message).split()), e.code) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise ServerError(f"cannot reach {self.url}: {reason}") from None

    def translate_request(self, lines: Sequence[str], **options: Any) -> dict:
        """One POST /v1/translate of `lines` (the server's whole JSON answer)."""
        payload = dict(self.options, **{k: v for k, v in options.items() if v is not None})
        payload["inputs"] = list(lines)
        answer = self._call("POST", "/v1/translate", payload)
        outputs = answer.get("outputs")
        if not isinstance(outputs, list) or len(outputs) != len(payload["inputs"]):
            raise ServerError("the answer has no translation of each line (no \"outputs\" "
                              "list of that length): not a t2t_lite translation server?")
        return answer

    def translate(self, lines: Sequence[str], **options: Any) -> list[str]:
        """The translations of `lines`, in order (sent `batch_size` at a time).

        Raises:
          ServerError: the server refused a request or could not be reached.
        """
        outputs: list[str] = []
        for start in range(0, len(lines), self.batch_size):
            outputs += self.translate_request(lines[start: start + self.batch_size],
                                              **options)["outputs"]
        return outputs

    def translate_stream(self, lines: Iterable[str], parallel: int = 4) -> Iterator[str]:
        """Yields the translation of each line as soon as it and those before it are back
        (line in, line out: a line read is not held back waiting for the next one), with up
        to `parallel` single-line requests in flight.

        Raises:
          ServerError: a request failed; and whatever reading `lines` raised.
        """
        in_order: queue.Queue = queue.Queue(maxsize=parallel)
        with ThreadPoolExecutor(max_workers=parallel) as pool:

            def feed() -> None:
                # Reads on its own thread, so that a slow source never delays an answer.
                try:
                    for line in lines:
                        in_order.put(pool.submit(self.translate_request, [line]))
                except BaseException as error:  # noqa: BLE001 - re-raised by the consumer
                    in_order.put(error)
                in_order.put(None)

            threading.Thread(target=feed, name="query-reader", daemon=True).start()
            while (item := in_order.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item.result()["outputs"][0]

    def models(self) -> dict:
        """GET /v1/models."""
        return self._call("GET", "/v1/models")

    def ready(self) -> bool:
        """Whether GET /readyz answers 200."""
        try:
            self._call("GET", "/readyz")
            return True
        except ServerError:
            return False
