"""The translation server (`run.py --mode=serve`): FastAPI on uvicorn, decode workers (`batching`).

    POST /v1/translate   translations (see `api`), dynamically batched (`batching`)
    GET  /healthz        200 while the process serves HTTP
    GET  /readyz         200 once the model is loaded and warmed up, else 503
    GET  /metrics        Prometheus metrics (`metrics`)
    GET  /v1/models      what is loaded: engine, hparams set, problem, checkpoint, decode hparams
    GET  /               the Insights page (static/index.html); /docs: the OpenAPI page

The HTTP server starts first; the engine is built (`engine_factory`, the slow part: TensorFlow,
the checkpoint) and warmed up with one decode on a background thread, so /healthz answers
at once and /readyz says when translations will. Every error is `{"error": "<sentence>"}`
with its status: 400 body not UTF-8 JSON (or nested too deep; or not HTTP at all), 415 not
sent as application/json, 408 a body not received whole within --serve_read_timeout_secs,
413 a limit passed (naming the flag: body bytes, sentences, subwords, attention weights),
422 wrong fields or types, an empty list, a bad sentence or option, 503 loading, draining
or a full queue (with Retry-After), 504 past --request_timeout_secs, 500 anything else (the
server keeps serving). A client that leaves before its answer is counted as 499. SIGTERM,
SIGINT or SIGHUP: uvicorn stops accepting, requests in flight finish, the workers drain the
queue, the process exits 0.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from absl import logging
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException

from t2t_lite.decoding import input_files
from t2t_lite.serving import api, batching, http_input
from t2t_lite.serving.batching import Unsupported
from t2t_lite.serving.config import ServerConfig
from t2t_lite.serving.continuous_batching import ContinuousBatcher
from t2t_lite.serving.engines import SentenceError
from t2t_lite.serving.http_input import CLIENT_LEFT, ClientLeft, RequestRefused
from t2t_lite.serving.metrics import Metrics

STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
# How often a waiting request checks that its client is still connected.
DISCONNECT_POLL_SECS = 0.25


def error_response(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    """`{"error": message}` with `status`."""
    return JSONResponse({"error": message}, status_code=status, headers=headers)


class State:
    """What the endpoints share: the engine once loaded, the batcher, readiness."""

    def __init__(self, config: ServerConfig, metrics: Metrics):
        self.config = config
        self.metrics = metrics
        self.engine: batching.Engine | None = None
        self.batcher: batching.Batcher | None = None
        self.ready = False
        self.draining = False
        self.load_error: BaseException | None = None
        self.stop_signal: str | None = None  # "SIGTERM", ... once one asked the server to stop

    def depth(self) -> int:
        """Sentences waiting or being decoded (0 before the engine is loaded)."""
        return self.batcher.depth() if self.batcher else 0


def _load(state: State, engine_factory: Callable[[], batching.Engine],
          on_failure: Callable[[], None]):
    """Builds the engine, starts the workers and warms it up (one decode of an empty line with
    the default options); then the server is ready. On failure, asks the server to stop."""
    try:
        engine = engine_factory()
        config = state.config
        settings = {
            "max_batch_size": config.max_batch_size,
            "max_batch_tokens": config.max_batch_tokens,
            "batch_timeout_secs": batch_timeout_ms(engine, config) / 1000.0,
            "max_queue": config.max_queue_sentences,
            "on_batch": state.metrics.batch_size.observe,
            "on_redecode": state.metrics.redecoded.inc,
            "workers": config.decode_workers or engine.default_workers,
            "on_wait": state.metrics.queue_wait.observe, "on_decode": state.metrics.decoded}
        if continuous(engine, config):
            batcher = ContinuousBatcher(engine, config.max_input_tokens,
                                        steps_per_call=config.steps_per_call,
                                        on_steps=state.metrics.decode_steps.inc, **settings)
        else:
            batcher = batching.Batcher(engine, **settings)
        batcher.start()
        state.engine, state.batcher = engine, batcher
        options = batching.Options(config.beam_size, float(config.alpha), 1)
        warm_up = batching.jobs_for([engine.encode("")], options)
        batcher.submit(warm_up)
        warm_up[0].future.result()
        state.ready = True
        print(f"ready: {engine.description.get('engine')} engine loaded and warmed up",
              flush=True)
    except BaseException as error:  # noqa: BLE001 - reported by the caller after shutdown
        state.load_error = error
        on_failure()


def batch_timeout_ms(engine: batching.Engine, config: ServerConfig) -> float:
    """The batch timeout in use: the flag's, else the engine's choice."""
    if config.batch_timeout_ms is not None:
        return config.batch_timeout_ms
    return engine.default_batch_timeout_ms


def continuous(engine: batching.Engine, config: ServerConfig) -> bool:
    """Whether the server batches continuously: `--serve_batching=continuous` and an
    engine that can (the t2t_lite engine's `continuous_refusal` is None; otherwise the
    per-batch path, with a log line saying why)."""
    if config.batching != "continuous":
        return False
    refusal = engine.continuous_refusal()
    if refusal:
        logging.info("batching: per batch, not continuous: %s", refusal)
    return refusal is None


def _options(body: api.TranslateRequest, config: ServerConfig) -> batching.Options:
    """The decode options of a request within the server's limits.

    Raises:
      RequestRefused: 422 naming the option and the limit.
    """
    beam_size = config.beam_size if body.beam_size is None else body.beam_size
    alpha = config.alpha if body.alpha is None else float(body.alpha)
    n_best = 1 if body.n_best is None else body.n_best
    if not 1 <= beam_size <= config.max_beam_size:
        raise RequestRefused(422, f"beam_size={beam_size}: must be between 1 and "
                                f"{config.max_beam_size} (--serve_max_beam_size)")
    if not math.isfinite(alpha) or alpha < 0:
        raise RequestRefused(422, f"alpha={alpha}: must be a finite number >= 0")
    if not 1 <= n_best <= min(beam_size, config.max_n_best):
        raise RequestRefused(422, f"n_best={n_best}: must be between 1 and beam_size="
                                f"{beam_size} (and at most {config.max_n_best}, "
                                "--serve_max_n_best)")
    return batching.Options(beam_size, alpha, n_best)


def _encode(state: State, body: api.TranslateRequest) -> list[list[int]]:
    """The input ids of every sentence of a request.

    Raises:
      RequestRefused: 413 too many sentences or too long a sentence, 422 a sentence the engine
        cannot read.
    """
    config = state.config
    if len(body.inputs) > config.max_sentences:
        raise RequestRefused(413, f"{len(body.inputs)} sentences in one request; the limit is "
                                f"{config.max_sentences} (--serve_max_sentences)")
    id_lists = []
    for index, sent in enumerate(body.inputs):
        # As --decode_from_file reads its lines: the same sentence, the same translation.
        text = input_files.normalize_record(sent)
        # A sentence far longer in characters than any limit in subwords is not encoded.
        if len(text) > 64 * config.max_input_tokens:
            raise RequestRefused(413, f"inputs[{index}]: {len(text)} characters; the limit is "
                                    f"{config.max_input_tokens} subwords "
                                    "(--serve_max_input_tokens)")
        try:
            ids = state.engine.encode(text)
        except SentenceError as e:
            raise RequestRefused(422, f"inputs[{index}]: {e}") from None
        if len(ids) > config.max_input_tokens:
            raise RequestRefused(413, f"inputs[{index}]: {len(ids)} subwords (EOS included); the "
                                    f"limit is {config.max_input_tokens} "
                                    "(--serve_max_input_tokens)")
        id_lists.append(ids)
    return id_lists


def _check_attention_budget(state: State, id_lists: list[list[int]]) -> None:
    """Refuses a return_attention request whose answer could hold more attention weights
    than --serve_max_attention_cells (each sentence's output counted at its longest): its
    JSON would be tens of megabytes, and its weights held in memory while it is written.

    Raises:
      RequestRefused: 413 naming the count and the limit.
    """
    limit = state.config.max_attention_cells
    cells = sum(state.engine.attention_cells(len(ids)) for ids in id_lists)
    if cells > limit:
        raise RequestRefused(413, f"return_attention: the attention of these {len(id_lists)} "
                                  f"sentences may hold {cells} weights (layers x heads x "
                                  "output x input positions); the limit is "
                                  f"{limit} (--serve_max_attention_cells): send fewer or "
                                  "shorter sentences, or leave return_attention out")


async def _wait(request: Request, jobs: list[batching.Job], deadline: float) -> bool:
    """Waits for the jobs' results until `deadline`; cancels the rest when the client leaves.

    Returns:
      False when the client disconnected (nothing to answer).

    Raises:
      RequestRefused: 504 past the deadline.
    """
    pending = {asyncio.wrap_future(job.future) for job in jobs}
    while pending:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            batching.cancel(jobs)
            raise RequestRefused(504, "the translation took longer than the server's "
                                    "--request_timeout_secs; send fewer or shorter sentences "
                                    "or retry later")
        _, pending = await asyncio.wait(pending, timeout=min(remaining, DISCONNECT_POLL_SECS))
        if pending and await request.is_disconnected():
            batching.cancel(jobs)
            return False
    return True


def _response(body: api.TranslateRequest, jobs: list[batching.Job]) -> dict:
    """The JSON answer from the jobs' results, in input order.

    Raises:
      RequestRefused: 422 for an option the engine refused, 500 for a failed decode.
    """
    results = []
    for index, job in enumerate(jobs):
        error = job.future.exception()
        if isinstance(error, (Unsupported, SentenceError)):
            raise RequestRefused(422, str(error))
        if error is not None:
            logging.error("Decoding inputs[%d] failed: %r", index, error)
            raise RequestRefused(500, f"decoding inputs[{index}] failed: "
                                    f"{' '.join(str(error).split())[:300]}")
        results.append(job.future.result())
    answer: dict[str, Any] = {
        "outputs": [r.row.hypotheses[0].text for r in results],
        "scores": [r.row.hypotheses[0].score for r in results]}
    if (body.n_best or 1) > 1:
        answer["n_best"] = [[{"output": h.text, "score": h.score} for h in r.row.hypotheses]
                            for r in results]
    if body.return_attention:
        answer["attention"] = [r.attention for r in results]
    return answer


def create_app(engine_factory: Callable[[], batching.Engine], config: ServerConfig,
               on_load_failure: Callable[[], None] = lambda: None) -> FastAPI:
    """The FastAPI application.

    Args:
      engine_factory: builds the engine (`engines`), called once on a background thread.
      config: limits and batching.
      on_load_failure: called when the engine cannot be built or warmed up (the caller stops
        the server and reports `app.state.serving.load_error`).
    """
    metrics = Metrics(lambda: state.depth(),
                      lambda: state.engine.compiled_decoders() if state.engine else 0)
    state = State(config, metrics)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        threading.Thread(target=_load, args=(state, engine_factory, on_load_failure),
                         name="load-model", daemon=True).start()
        yield
        state.draining = True
        if state.batcher is not None:
            await asyncio.to_thread(state.batcher.close)

    app = FastAPI(title="t2t_lite translation server", lifespan=lifespan,
                  description="tensor2tensor Transformer translations; the Insights page is /.")
    app.state.serving = state

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        return error_response(exc.status_code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError):
        return error_response(422, api.validation_message(exc.errors()))

    @app.post("/v1/translate", response_model=api.TranslateResponse,
              responses={code: {"model": api.ErrorResponse} for code in
                         (400, 408, 413, 415, 422, 500, 503, 504)},
              openapi_extra={"requestBody": {"required": True, "content": {
                  "application/json": {"schema": api.TranslateRequest.model_json_schema()}}}})
    async def translate(request: Request):
        """Translates `inputs` (sentences batched with other requests' sentences)."""
        start = time.monotonic()
        status = 200
        try:
            http_input.check_content_type(request)
            body = http_input.parse(await http_input.read_body(request, config))
            if state.draining:
                raise RequestRefused(503, "the server is shutting down", {"Retry-After": "1"})
            if not state.ready:
                raise RequestRefused(503, "the model is still loading; GET /readyz says when it "
                                        "is ready", {"Retry-After": "5"})
            options = _options(body, config)
            try:
                state.engine.check_options(options)
            except Unsupported as e:
                raise RequestRefused(422, str(e)) from None
            if body.return_attention and not state.engine.has_attention:
                raise RequestRefused(422, "return_attention needs a single t2t_lite model (this "
                                        f"server runs {state.engine.description.get('engine')})")
            id_lists = _encode(state, body)
            if body.return_attention:
                _check_attention_budget(state, id_lists)
            jobs = batching.jobs_for(id_lists, options, body.return_attention)
            try:
                state.batcher.submit(jobs)
            except batching.QueueFull as e:
                raise RequestRefused(503, f"{e}; retry later", {"Retry-After": "1"}) from None
            except batching.Closed as e:
                raise RequestRefused(503, str(e), {"Retry-After": "1"}) from None
            if not await _wait(request, jobs, start + config.request_timeout_secs):
                raise ClientLeft
            answer = _response(body, jobs)
            if await request.is_disconnected():
                raise ClientLeft  # gone while its last sentence was decoded
            metrics.sentences.inc(len(jobs))
            return JSONResponse(answer)
        except ClientLeft:
            status = CLIENT_LEFT
            return Response(status_code=status)
        except RequestRefused as e:
            status = e.status
            return error_response(e.status, str(e), e.headers)
        except Exception as e:  # noqa: BLE001 - the server never dies of a request
            logging.exception("translate failed")
            status = 500
            return error_response(500, f"internal error: {type(e).__name__}: {e}")
        finally:
            metrics.answered(status, time.monotonic() - start)

    @app.get("/healthz")
    async def healthz():
        """200 while the process serves HTTP."""
        return {"status": "ok"}

    @app.get("/readyz", responses={503: {"model": api.ErrorResponse}})
    async def readyz():
        """200 once the model is loaded and warmed up; 503 before and while draining."""
        if state.draining:
            return error_response(503, "the server is shutting down")
        if not state.ready:
            return error_response(503, "the model is still loading")
        return {"status": "ready"}

    @app.get("/metrics")
    async def prometheus_metrics():
        """Prometheus' text format."""
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models", responses={503: {"model": api.ErrorResponse}})
    async def models():
        """What is loaded, its decode defaults and the request limits."""
        if state.engine is None:
            return error_response(503, "the model is still loading")
        # The decode workers, intra-op threads, batching and batch timeout in use (the flags'
        # 0 and None are the engine's or the start-up's choice; an engine that cannot batch
        # continuously batches per batch).
        batching_in_use = ("continuous" if isinstance(state.batcher, ContinuousBatcher)
                           else "batch")
        engine = state.engine
        limits = dict(dataclasses.asdict(config), decode_workers=state.batcher.workers,
                      intra_op_threads=engine.intra_op_threads, batching=batching_in_use,
                      batch_timeout_ms=batch_timeout_ms(engine, config),
                      max_compiled_decoders=engine.max_compiled_decoders)
        return {"models": [dict(engine.describe(), attention=bool(engine.has_attention),
                                compiled_decoders=engine.compiled_decoders(),
                                limits=limits)]}

    @app.get("/", include_in_schema=False)
    async def index():
        return FileResponse(os.path.join(STATIC_DIR, "index.html"))

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (port 0: a free port the system picks).

    Raises:
      OSError: the address is taken or not local.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def serve(engine_factory: Callable[[], batching.Engine], config: ServerConfig,
          sock: socket.socket,
          log_level: str = "warning") -> State:
    """Serves on `sock` until SIGTERM, SIGINT or SIGHUP, then drains and returns (the signal
    is not re-raised: the process exits 0; `State.stop_signal` names it).

    Returns:
      The server's State (`load_error` set when the engine could not be loaded).
    """
    import signal

    import uvicorn

    server: uvicorn.Server | None = None

    def stop() -> None:
        if server is not None:
            server.should_exit = True

    app = create_app(engine_factory, config, on_load_failure=stop)
    state: State = app.state.serving

    class DrainingServer(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:
            state.draining = True  # /readyz says 503 at once, before the listener closes
            if state.stop_signal is None:
                state.stop_signal = signal.Signals(sig).name
            super().handle_exit(sig, frame)

        @contextlib.contextmanager
        def capture_signals(self):
            # SIGHUP (a closed terminal, a supervisor's reload) drains as SIGTERM does;
            # uvicorn takes only SIGINT and SIGTERM.
            previous = signal.signal(signal.SIGHUP, self.handle_exit)
            try:
                with super().capture_signals():
                    yield
            finally:
                signal.signal(signal.SIGHUP, previous)

    uvicorn_config = uvicorn.Config(
        app, log_level=log_level, access_log=False, lifespan="on", http=http_input.http_protocol(),
        timeout_graceful_shutdown=int(config.request_timeout_secs) + 5)
    server = DrainingServer(uvicorn_config)
    # uvicorn re-raises the stop signal after its graceful shutdown; these handlers take it,
    # so that a drained server exits 0.
    previous = {sig: signal.signal(sig, lambda signum, frame: None)
                for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        server.run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return state
