"""What the translation server reads from a client, bounded: nothing a client sends makes it
hold more than its limits or answer with anything but `{"error": ...}`.

* the HTTP layer (`http_protocol`): uvicorn's h11 protocol, whose own 400 for a request that
  is not HTTP/1.1 (or whose request line and headers pass h11's 16 KB) is JSON too;
* the Content-Type (`check_content_type`): only application/json (415);
* the body (`read_body`): at most --serve_max_body_bytes (413, by Content-Length before
  anything is read, else while reading), received whole within --serve_read_timeout_secs
  (408); a client that leaves meanwhile is `ClientLeft` (499);
* the JSON (`parse`): every way it can fail to read is 400, wrong fields 422.
"""
from __future__ import annotations

import asyncio
import json

from fastapi import Request
from pydantic import ValidationError
from starlette.requests import ClientDisconnect

from t2t_lite.serving import api
from t2t_lite.serving.config import ServerConfig

# How long the rest of a request that is not HTTP is read and dropped after the 400.
LINGER_SECS = 2.0
# The answer to a request refused before its body was read whole: the connection is closed
# after it (the rest of the body is never read).
CLOSE = {"Connection": "close"}
# nginx's "client closed request": counted in /metrics, never sent.
CLIENT_LEFT = 499


class RequestRefused(Exception):
    """A request answered with an error status and one sentence (an HTTP answer, caught by
    the handlers: never a run.py error line)."""

    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status = status
        self.headers = headers


class ClientLeft(Exception):
    """The client disconnected before its answer (counted as 499, nothing sent)."""


def check_content_type(request: Request) -> None:
    """Only JSON is read: a browser sends a form or text/plain POST to any site without
    asking (no CORS preflight), so a page the user visits could make this server translate.

    Raises:
      RequestRefused: 415 naming the Content-Type sent.
    """
    sent = request.headers.get("content-type", "")
    if sent.split(";", 1)[0].strip().lower() != "application/json":
        shown = " ".join(sent.split())[:80] or "none"
        raise RequestRefused(415, f"the body must be JSON, sent with Content-Type: "
                                  f"application/json (got {shown})", CLOSE)


async def read_body(request: Request, config: ServerConfig) -> bytes:
    """The request body, read within the body limit and the read timeout: a body longer
    than --serve_max_body_bytes is refused by its Content-Length before any of it is read,
    or as soon as the bytes read pass the limit (a chunked one), so that no more than the
    limit is ever held.

    Raises:
      RequestRefused: 413 over the limit, 408 not received whole in time (the connection is
        closed after either).
      ClientLeft: the client disconnected while sending it.
    """
    limit = config.max_body_bytes
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise RequestRefused(413, f"the body is {int(declared)} bytes (Content-Length); the "
                                  f"limit is {limit} (--serve_max_body_bytes)", CLOSE)

    async def read() -> bytes:
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise RequestRefused(413, f"the body is over {limit} bytes; the limit is "
                                          f"{limit} (--serve_max_body_bytes)", CLOSE)
            chunks.append(chunk)
        return b"".join(chunks)

    try:
        return await asyncio.wait_for(read(), config.read_timeout_secs)
    except asyncio.TimeoutError:
        raise RequestRefused(408, f"the request body was not received whole within "
                                  f"{config.read_timeout_secs:g} s (--serve_read_timeout_secs)",
                             CLOSE) from None
    except ClientDisconnect:
        raise ClientLeft from None


def parse(raw: bytes) -> api.TranslateRequest:
    """The request body as a TranslateRequest.

    Raises:
      RequestRefused: 400 (not UTF-8, not JSON, nested too deep, a number too long) or 422
        (fields, types, empty list).
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RequestRefused(400, f"the request body is not UTF-8 (byte 0x{raw[e.start]:02x} at "
                                f"offset {e.start})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise RequestRefused(400, f"malformed JSON: {e.msg} at line {e.lineno} column "
                                f"{e.colno}") from None
    except RecursionError:
        raise RequestRefused(400, "malformed JSON: nested too deeply") from None
    except ValueError as e:  # e.g. an integer of more digits than Python converts
        raise RequestRefused(400, f"malformed JSON: {' '.join(str(e).split())[:200]}") from None
    if not isinstance(data, dict):
        raise RequestRefused(422, 'the body must be a JSON object like {"inputs": ["..."]}')
    try:
        body = api.TranslateRequest.model_validate(data)
    except ValidationError as e:
        raise RequestRefused(422, api.validation_message(e.errors())) from None
    if not body.inputs:
        raise RequestRefused(422, "inputs: the list is empty; give at least one sentence")
    return body


def http_protocol() -> type:
    """uvicorn's h11 protocol, whose own 400 (a request that is not valid HTTP/1.1, or whose
    request line and headers pass h11's 16 KB) is `{"error": ...}` like every other error,
    not plain text."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class JsonErrorsH11Protocol(H11Protocol):
        rejected = False

        def send_400_response(self, msg: str) -> None:
            body = json.dumps({"error": "invalid HTTP request: malformed, or its request "
                                        "line and headers are over 16 KB"}).encode("utf-8")
            headers = [(b"content-type", b"application/json"), (b"connection", b"close"),
                       (b"content-length", str(len(body)).encode("ascii"))]
            for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
                          h11.Data(data=body), h11.EndOfMessage()):
                self.transport.write(self.conn.send(event))
            # A lingering close: closed with the rest of the request unread, the socket
            # would reset the connection, and the client could lose the answer. The rest
            # is read and dropped for a moment, after the answer and its end of stream.
            self.rejected = True
            if self.transport.can_write_eof():
                self.transport.write_eof()
            self.loop.call_later(LINGER_SECS, self.transport.close)

        def data_received(self, data: bytes) -> None:
            if not self.rejected:
                super().data_received(data)

    return JsonErrorsH11Protocol
