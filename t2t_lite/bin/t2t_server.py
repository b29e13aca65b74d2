"""`run.py --mode=serve` (t2t's Insights server) and `--mode=query` (t2t-query-server).

serve: loads a run (--output_dir, newest or --checkpoint_path, `A,B` ensembles), a
CTranslate2 export (--decode_engine=ctranslate2) or a SavedModel (--saved_model_dir) once
and serves it over HTTP (`t2t_lite.serving.server`) on --host:--port.
query: sends --decode_from_file (or standard input) to --server_url line by line and writes
each translation as it comes back (stdout, or --decode_to_file at the end).
"""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

from t2t_lite import file_io
from t2t_lite.bin import early_checks
from t2t_lite.decoding import runs
from t2t_lite.decoding.decode_hparams import decode_hparams
from t2t_lite.errors import UserError, one_line, user_error_types
from t2t_lite.utils import extras


def _config(flags, decode_hp):
    """The ServerConfig of the flags, each checked.

    Raises:
      UserError: naming the flag.
    """
    from t2t_lite.serving.config import FLAGS, ServerConfig

    for name, low in (("max_batch_size", 1), ("max_batch_tokens", 0), ("serve_max_queue", 1),
                      ("serve_max_sentences", 1), ("serve_max_input_tokens", 2),
                      ("serve_max_beam_size", 1), ("serve_max_n_best", 1),
                      ("serve_decode_workers", 0), ("serve_intra_op_threads", 0),
                      ("serve_steps_per_call", 1),
                      ("serve_max_body_bytes", 64),
                      ("serve_read_timeout_secs", 0.001), ("serve_max_attention_cells", 0),
                      ("serve_max_compiled_decoders", 1),
                      ("batch_timeout_ms", 0), ("request_timeout_secs", 0.001)):
        value = getattr(flags, name)
        if value is not None and value < low:  # None: the engine's choice
            raise UserError(f"--{name}={value}: must be >= {low}")
    if not 0 <= flags.port <= 65535:
        raise UserError(f"--port={flags.port}: must be between 0 and 65535")
    if decode_hp.beam_size > flags.serve_max_beam_size:
        raise UserError(f"--decode_hparams: beam_size={decode_hp.beam_size} is above "
                        f"--serve_max_beam_size={flags.serve_max_beam_size}")
    return ServerConfig(**{field: getattr(flags, flag) for field, flag in FLAGS.items()},
                        beam_size=int(decode_hp.beam_size), alpha=float(decode_hp.alpha))


def _t2t_lite_engine(flags, spec: runs.RunSpec, decode_hp) -> Any:
    """The model of the run (or ensemble) as a T2tLiteEngine."""
    from t2t_lite import quiet_start

    quiet_start.import_tensorflow()
    from t2t_lite.decoding.decode_hparams import check_sampling
    from t2t_lite.decoding import threads
    from t2t_lite.serving.engines import T2tLiteEngine

    # Before anything starts TensorFlow's runtime (it takes the setting only then).
    intra_op_threads = threads.configure(flags.serve_intra_op_threads,
                                         flags.serve_decode_workers)
    from t2t_lite.visualization import attention_viz

    run = runs.open_run(spec, flags.hparams)
    with runs.one_line_errors():
        check_sampling(run.hparams, decode_hp)
    checkpoint, model = runs.restore_model(run, flags.checkpoint_path)
    single = len(runs.ensemble_paths(flags.checkpoint_path)) <= 1
    vocab = run.problem_hparams.vocab_size
    step = checkpoint.rsplit("-", 1)[-1] if single else None
    description = {"problem": spec.problem_name, "hparams_set": spec.hparams_set,
                   "model": spec.model_name, "checkpoint": checkpoint,
                   "step": int(step) if step and step.isdigit() else None,
                   "decode_hparams": _decode_values(decode_hp)}
    return T2tLiteEngine(model, run.encoders, run.target_space_id, decode_hp,
                         int(vocab.get("inputs", vocab["targets"])), description,
                         attention_fn=attention_viz.attention_weights if single else None,
                         labels_fn=attention_viz.token_labels,
                         max_compiled_decoders=flags.serve_max_compiled_decoders,
                         intra_op_threads=intra_op_threads)


def _ctranslate2_engine(flags, decode_hp) -> Any:
    """The CTranslate2 export as a CTranslate2Engine."""
    from t2t_lite.export import ct2
    from t2t_lite.serving.engines import CTranslate2Engine

    model_dir = early_checks.ct2_model_dir(flags)
    translator = ct2.Translator(model_dir, device=flags.ct2_device,
                                compute_type=flags.ct2_compute_type,
                                inter_threads=flags.ct2_inter_threads,
                                intra_threads=flags.ct2_intra_threads)
    return CTranslate2Engine(translator, decode_hp, {
        "model_dir": model_dir, "decode_hparams": _decode_values(decode_hp)},
        workers=flags.serve_decode_workers)


def _saved_model_engine(flags, decode_hp) -> Any:
    """The SavedModel (its newest version folder when given the export dir)."""
    from t2t_lite import quiet_start

    tf = quiet_start.import_tensorflow()
    from t2t_lite.decoding import threads
    from t2t_lite.serving.engines import SavedModelEngine

    # A SavedModel's server has 1 decode worker by default: every core for its ops.
    intra_op_threads = threads.configure(flags.serve_intra_op_threads,
                                         flags.serve_decode_workers or 1)
    path = early_checks.saved_model_path(flags)
    loaded = load_saved_model(tf, path)
    for name in ("encode", "encode_decode_ids", "decode"):
        if name not in loaded.signatures:
            raise UserError(f"--saved_model_dir={path}: no '{name}' signature (an export of a "
                            "text problem by --mode=export has it)")
    engine = SavedModelEngine(loaded, decode_hp, {
        "saved_model": path, "decode_hparams": _decode_values(decode_hp)})
    engine.intra_op_threads = intra_op_threads
    return engine


def _unregistered_op(error: RuntimeError) -> str | None:
    """The op a graph uses that this process has not registered (None: another error)."""
    import re

    missing = re.search(r"Op type not registered '([^']+)'", str(error))
    return missing.group(1) if missing else None


def load_saved_model(tf: Any, path: str) -> Any:
    """`tf.saved_model.load(path)`, with tensorflow-text's ops registered first when the graph
    uses them (a SentencePiece vocabulary's `SentencepieceTokenizer`, or
    `--export_subword_segmenter=tensorflow_text`): only then is tensorflow_text imported.

    Raises:
      UserError: the graph needs ops that neither TensorFlow nor tensorflow-text has, or
        tensorflow-text is not installed.
    """
    for attempt in ("core", "tensorflow_text"):
        try:
            return tf.saved_model.load(path)
        except RuntimeError as e:
            op = _unregistered_op(e)
            if op is None:
                raise
        if attempt == "tensorflow_text":
            raise UserError(f"--saved_model_dir={path}: its graph uses the op {op}, which "
                            "neither TensorFlow nor tensorflow-text registers")
        with extras.needed("text", f"--saved_model_dir={path} (its graph uses the op {op}, "
                           "tensorflow-text's)"):
            import tensorflow_text  # noqa: F401  registers its ops with TensorFlow


def _decode_values(decode_hp) -> dict:
    """The decode hparams a client cares about."""
    return {name: decode_hp.get(name) for name in
            ("beam_size", "alpha", "extra_length", "max_input_size", "return_beams")}


def _listen(host: str, port: int) -> Any:
    """`server.bind(host, port)`, its failure one line naming the flag at fault.

    Raises:
      UserError: the port is taken or privileged (--port), or the host is not this
        machine's (--host).
    """
    import errno
    import socket

    from t2t_lite.serving import server

    try:
        return server.bind(host, port)
    except socket.gaierror as e:
        raise UserError(f"--host={host}: not an address or a known host name "
                        f"({one_line(e)})") from None
    except OSError as e:
        reason = e.strerror or one_line(e)
        if e.errno == errno.EADDRINUSE:
            raise UserError(f"--port={port}: already in use on --host={host} ({reason}); pick "
                            "another --port (0: any free one)") from None
        if e.errno in (errno.EACCES, errno.EPERM):
            raise UserError(f"--port={port}: not allowed to this user ({reason}; ports below "
                            "1024 need privileges); pick another --port (0: any free one)"
                            ) from None
        raise UserError(f"--host={host}: cannot listen there ({reason}); use 127.0.0.1, "
                        "0.0.0.0 or one of this machine's addresses") from None


def serve(flags) -> None:
    """`run.py --mode=serve`: prints the URL, serves until SIGTERM / SIGINT, exits 0.

    Args:
      flags: absl FLAGS (host, port, the batching and limit flags of flags.py's server
        block, decode_hparams, and output_dir / checkpoint_path / problem / hparams_set /
        hparams / data_dir / model, or decode_engine=ctranslate2 with export_dir, or
        saved_model_dir).
    """
    with extras.needed("serve", "--mode=serve"):
        from t2t_lite.serving import server

    with runs.one_line_errors():
        decode_hp = decode_hparams(flags.decode_hparams or "")
    if decode_hp.get("return_alignment"):
        raise UserError("--decode_hparams: return_alignment is for --mode=decode and the "
                        "exports; the server gives attention per request (return_attention)")
    config = _config(flags, decode_hp)
    if flags.decode_engine == "ctranslate2":
        def factory():
            return _ctranslate2_engine(flags, decode_hp)
    elif flags.saved_model_dir:
        def factory():
            return _saved_model_engine(flags, decode_hp)
    else:
        spec = runs.resolve("serve", flags.output_dir, flags.problem, flags.hparams_set,
                            flags.data_dir, flags.model)

        def factory():
            return _t2t_lite_engine(flags, spec, decode_hp)
    sock = _listen(flags.host, flags.port)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"Serving on http://{shown}:{port}/ (POST /v1/translate, the page at /, GET /readyz "
          "says when the model is loaded)", flush=True)
    state = server.serve(factory, config, sock)
    if state.load_error is not None:
        error = state.load_error
        if isinstance(error, user_error_types()):
            raise error
        raise UserError(f"the model could not be loaded: {one_line(error)}") from error
    print(f"stopped: {state.stop_signal or 'a stop'} received: requests in flight answered, "
          "queue drained", flush=True)


def query(flags) -> int:
    """`run.py --mode=query`: translates --decode_from_file (or stdin) through --server_url,
    one line in, one line out, each written as soon as it is back.

    Returns:
      The number of lines translated.
    """
    from t2t_lite.serving.client import ServerError, Translator

    try:
        translator = Translator(flags.server_url)
    except ServerError as e:
        raise UserError(f"--server_url={flags.server_url}: {e}") from None
    count = 0
    with contextlib.ExitStack() as stack:
        source = sys.stdin
        if flags.decode_from_file:
            path = os.path.expanduser(flags.decode_from_file)
            if not os.path.isfile(path):
                raise UserError(f"--decode_from_file={flags.decode_from_file}: no such file")
            source = stack.enter_context(open(path, encoding="utf-8"))
        out = sys.stdout
        if flags.decode_to_file:
            out = stack.enter_context(
                file_io.atomic_open(os.path.expanduser(flags.decode_to_file)))
        lines = (line.rstrip("\n").strip() for line in source)
        try:
            for count, text in enumerate(translator.translate_stream(lines), start=1):
                out.write(text + "\n")
                out.flush()
        except ServerError as e:
            raise UserError(f"--server_url={flags.server_url}: line {count + 1}: "
                            f"{e}") from None
        except UnicodeDecodeError as e:
            raise UserError(f"--decode_from_file={flags.decode_from_file}: invalid UTF-8 "
                            f"after line {count}: {e.reason}") from None
    return count
