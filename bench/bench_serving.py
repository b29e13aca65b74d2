"""The translation server (`run.py --mode=serve`) under load: dynamic batching against a
`--max_batch_size=1` server and offline `--mode=decode` of the same lines, in one run.

    python bench/bench_serving.py --output_dir=RUN --source=dev.en [--lines=500] \
        [--clients=1,4,16,64] [--decode_hparams="beam_size=4,alpha=0.6"] \
        [--engine=ctranslate2 --export_dir=RUN/ctranslate2] [--soak_secs=600] [--quick] \
        [--batching=continuous|batch] [--also_batch] [--compare_flags="--serve_..."] \
        [--compare_checkout=DIR] [--rounds=N] [--no_single]

Offline first: what `run.py --mode=decode` runs on the same lines with the same decode
hparams (`decoding.decode_lines`, or CTranslate2's `Translator.translate`), timed in a fresh
process after loading and after the decoder's one trace, as the servers are measured after
their warm-up (`--offline_only`: this alone). Then two servers are loaded, `--max_batch_size=32`
(`--batching`: its `--serve_batching`, continuous by default; `--also_batch` adds a third,
per-batch server of the same size) and `=1` (per batch: one sentence decoded to its end at a
time), and for each client count C the first `--lines` lines of `--source` are sent as
single-sentence requests by C threads to one server, then to the other (neighbouring
minutes of a shared machine); printed per load: sentences/s, p50 / p95 / p99 latency,
errors, the 1-minute load average, how many translations equal those of the first load
(the batching server at the first client count: a sentence's translation must not depend on
its batch), and where the time went (the servers' /metrics: mean sentences per batch, mean
queue wait per sentence, mean decode time per batch, the share of the decode workers' time
spent decoding, and the rest of a request's latency: HTTP, JSON, encoding) and the server
process's CPU ms a sentence ("CPU ms", all its threads, /proc/PID/stat; offline's too, so that
"CPU a sentence: offline's / the server's" compares the two where the wall times of a shared
machine move with the other jobs). Both servers run
their default decode workers (one per usable core; "xN" in the table). At 16 clients: the speed-up over the `=1` server, the fraction of offline
decoding and p99 / p50. `--soak_secs`: then 16 clients for that long on the batching server
(after a warm minute), errors and the server's RSS (VmRSS, sampled every 10 s) growth.
`--compare_flags`, `--compare_checkout`: one more batching server, the same with these run.py
flags and / or another checkout's run.py (the code before a change), loaded in the same
alternation (its own fraction of offline: a same-run comparison).
`--rounds=N`: every server loaded N times in turn, offline decoding timed again before each
round after the first (each round's fractions against its own offline figure).
`--offline_intra_op_threads=N`: offline decoding also timed with N TensorFlow intra-op threads
each round (the server's own setting, `--serve_intra_op_threads`), its fraction too.
`--no_single`: without the `=1` server. `--quick`: 24 lines, 1 and 4 clients, a 5 s soak (a smoke test of the script, not a
measurement). A base-sized model with random weights for speed: train one step of
`--hparams_set=transformer_base` on the same problem.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from t2t_lite.serving.client import ServerError, Translator


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) of `values` by linear interpolation (numpy's default)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    position = (len(ordered) - 1) * q / 100.0
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summarize(latencies: list[float], seconds: float, errors: int) -> dict:
    """sentences/s, p50/p95/p99 latency (ms) and errors of one load."""
    return {"sentences_per_sec": len(latencies) / seconds if seconds > 0 else float("nan"),
            "p50_ms": 1000 * percentile(latencies, 50), "p95_ms": 1000 * percentile(latencies, 95),
            "p99_ms": 1000 * percentile(latencies, 99), "errors": errors,
            "sentences": len(latencies)}


def load(url: str, lines: list[str], clients: int, until: float | None = None) -> dict:
    """Sends each line as one request from `clients` threads (again and again until `until`,
    a time.monotonic() deadline, when given); the summary of the answered ones."""
    translator = Translator(url, timeout=600)
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    position = [0]

    answers: dict[int, tuple[str, float]] = {}

    def next_line() -> int | None:
        with lock:
            if until is None and position[0] >= len(lines):
                return None
            if until is not None and time.monotonic() >= until:
                return None
            position[0] += 1
            return (position[0] - 1) % len(lines)

    def worker() -> None:
        while (index := next_line()) is not None:
            start = time.monotonic()
            try:
                answer = translator.translate_request([lines[index]])
            except ServerError:
                with lock:
                    errors[0] += 1
                continue
            with lock:
                latencies.append(time.monotonic() - start)
                answers[index] = (answer["outputs"][0], answer["scores"][0])

    start = time.monotonic()
    with ThreadPoolExecutor(clients) as pool:
        for future in [pool.submit(worker) for _ in range(clients)]:
            future.result()
    summary = summarize(latencies, time.monotonic() - start, errors[0])
    summary["answers"] = answers
    return summary


def agreement(answers: dict, reference: dict) -> dict:
    """How many translations equal the reference's, and the largest relative score gap."""
    common = [i for i in answers if i in reference]
    same = sum(answers[i][0] == reference[i][0] for i in common)
    gap = max((abs(answers[i][1] - reference[i][1]) / max(abs(reference[i][1]), 1e-9)
               for i in common), default=0.0)
    return {"identical": same, "compared": len(common), "max_score_rel_diff": gap}


# The server's /metrics sums and counts that say where the time of a load went.
PROFILE = ("batch_size", "queue_wait_seconds", "decode_seconds", "request_latency_seconds",
           "sentence_decode_seconds")


def server_counters(url: str) -> dict:
    """{name_sum / name_count: value} of the server's PROFILE histograms (GET /metrics)."""
    text = urllib.request.urlopen(url + "/metrics", timeout=60).read().decode("utf-8")
    values = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        short = name.removeprefix("t2t_lite_serving_")
        if short.rsplit("_", 1)[0] in PROFILE and short.endswith(("_sum", "_count", "_total")):
            values[short] = float(value)
    return values


def profile(before: dict, after: dict, seconds: float, workers: int) -> dict:
    """Where a load's time went, from the server's counters before and after it: mean
    sentences per batch, a sentence's mean queue wait and mean decode time of its batch (ms),
    the share of the decode workers' time spent decoding, and the mean request latency beyond
    those two (HTTP, JSON, encoding, answering; ms)."""
    delta = {name: after.get(name, 0.0) - before.get(name, 0.0) for name in after}
    sentences = max(delta.get("queue_wait_seconds_count", 0.0), 1.0)
    requests = max(delta.get("request_latency_seconds_count", 0.0), 1.0)
    # A sentence waits for its whole batch: the mean over sentences of their batch's time.
    decode_per_sentence = delta.get("sentence_decode_seconds_total", 0.0) / sentences
    return {
        "mean_batch": delta.get("batch_size_sum", 0.0) / max(
            delta.get("batch_size_count", 0.0), 1.0),
        "wait_ms": 1000 * delta.get("queue_wait_seconds_sum", 0.0) / sentences,
        "decode_ms": 1000 * decode_per_sentence,
        "workers_busy": delta.get("decode_seconds_sum", 0.0) / max(seconds * workers, 1e-9),
        "other_ms": 1000 * max(0.0, delta.get("request_latency_seconds_sum", 0.0) / requests
                               - delta.get("queue_wait_seconds_sum", 0.0) / sentences
                               - decode_per_sentence)}


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and its threads so far (Linux /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kb(pid: int) -> int:
    """VmRSS of a process in kB (Linux)."""
    with open(f"/proc/{pid}/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Server:
    """`run.py --mode=serve` with `flags` on a free port, ready when constructed (the run.py
    of `checkout`, this one by default: python puts its folder first on the path)."""

    def __init__(self, flags: list[str], checkout: pathlib.Path = REPO_ROOT):
        self.process = subprocess.Popen(
            [sys.executable, str(pathlib.Path(checkout) / "run.py"), "--mode=serve",
             "--port=0", *flags],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        match = re.search(r"http://[^/]+:(\d+)/", self.process.stdout.readline())
        if not match:
            raise SystemExit("the server did not start: " + " ".join(flags))
        self.url = f"http://127.0.0.1:{match.group(1)}"
        translator = Translator(self.url)
        while not translator.ready():
            if self.process.poll() is not None:
                raise SystemExit("the server stopped while loading: " + " ".join(flags))
            time.sleep(0.5)
        with urllib.request.urlopen(self.url + "/v1/models", timeout=60) as answer:
            self.workers = json.load(answer)["models"][0]["limits"]["decode_workers"]

    def load(self, lines: list[str], clients: int) -> dict:
        """`load` on this server, with the `profile` of its time and the server's CPU ms a
        sentence (all its threads: what a loaded machine disturbs less than wall time)."""
        before, start = server_counters(self.url), time.monotonic()
        cpu = cpu_seconds(self.process.pid)
        r = load(self.url, lines, clients)
        cpu = cpu_seconds(self.process.pid) - cpu
        r.update(profile(before, server_counters(self.url), time.monotonic() - start,
                         self.workers))
        r["cpu_ms"] = 1000 * cpu / max(r["sentences"], 1)
        return r

    def stop(self) -> None:
        """SIGTERM, then wait for it."""
        self.process.terminate()
        self.process.wait(120)


def offline_decode(model_flags: list[str], source: str, decode_hparams: str,
                   engine: str, intra_op_threads: int = 0) -> tuple[float, float | None]:
    """Seconds `--mode=decode` spends decoding `source`, loading and tracing excluded: the
    call `--mode=decode` makes (t2t_lite: `decoding.decode_lines` after one traced batch;
    CTranslate2: `ct2.Translator.translate`), timed in a fresh process, and the CPU seconds
    its process spent meanwhile (t2t_lite; None for CTranslate2). `intra_op_threads` > 0:
    TensorFlow's intra-op threads of that process (TF_NUM_INTRAOP_THREADS)."""
    env = dict(os.environ)
    if intra_op_threads:
        env["TF_NUM_INTRAOP_THREADS"] = str(intra_op_threads)
    if engine == "ctranslate2":
        export_dir = next(f.split("=", 1)[1] for f in model_flags
                          if f.startswith("--export_dir="))
        result = subprocess.run(
            [sys.executable, "-c", CT2_OFFLINE, str(REPO_ROOT), export_dir, source,
             decode_hparams], capture_output=True, text=True, check=False)
        match = re.search(r"Decoded (\d+) records in ([\d.]+) s", result.stdout)
    else:
        result = subprocess.run(
            [sys.executable, "-c", T2T_LITE_OFFLINE, str(REPO_ROOT), source, decode_hparams,
             *model_flags], capture_output=True, text=True, check=False, env=env)
        match = re.search(r"Decoded (\d+) records in ([\d.]+) s", result.stdout)
    if result.returncode or not match:
        raise SystemExit("offline decode failed: " + result.stderr[-2000:])
    cpu = re.search(r"CPU ([\d.]+) s", result.stdout)
    return float(match.group(2)), float(cpu.group(1)) if cpu else None


# `--mode=decode`'s decoding (decoding.decode_lines, its default parallel batches) timed after
# the decoder's one trace (a batch of the first line), as the servers trace during warm-up:
# `--mode=decode`'s own "Decoded" line counts the trace, tens of seconds on a loaded machine.
T2T_LITE_OFFLINE = """
import sys, time
sys.path.insert(0, sys.argv[1])
from t2t_lite import quiet_start
quiet_start.import_tensorflow()
from t2t_lite.decoding import decode_hparams, decoding, runs, threads
flags = dict(arg[2:].split("=", 1) for arg in sys.argv[4:])
parallel_batches = decoding.default_parallel_batches()
if parallel_batches > 1:  # as --mode=decode: each batch's ops on its share of the cores
    threads.configure(0, parallel_batches)
spec = runs.resolve("decode", flags.get("output_dir"), flags.get("problem"),
                    flags.get("hparams_set"), flags.get("data_dir"), flags.get("model"))
run = runs.open_run(spec, flags.get("hparams", ""))
_, model = runs.restore_model(run, flags.get("checkpoint_path"))
hp = decode_hparams.decode_hparams(sys.argv[3])
hp.set_hparam("log_results", False)
infer = decoding.make_infer_fn(model, hp, run.target_space_id)
lines = [line.strip() for line in open(sys.argv[2], encoding="utf-8")]
encoders = run.encoders
decoding.decode_lines(lines[:1], infer, encoders.get("inputs", encoders["targets"]),
                      encoders["targets"], hp)
start, cpu = time.time(), time.process_time()
decoding.decode_lines(lines, infer, encoders.get("inputs", encoders["targets"]),
                      encoders["targets"], hp,
                      parallel_batches=parallel_batches)
print(f"Decoded {len(lines)} records in {time.time() - start:.2f} s, "
      f"CPU {time.process_time() - cpu:.2f} s")
"""

# `--mode=decode --decode_engine=ctranslate2`'s decoding, timed (it logs no time itself).
CT2_OFFLINE = """
import sys, time
sys.path.insert(0, sys.argv[1])
from t2t_lite.decoding.decode_hparams import decode_hparams
from t2t_lite.export import ct2
hp = decode_hparams(sys.argv[4])
translator = ct2.Translator(sys.argv[2])
lines = [line.strip() for line in open(sys.argv[3], encoding="utf-8")]
start = time.time()
translator.translate(lines, beam_size=hp.beam_size, alpha=hp.alpha,
                     extra_length=hp.extra_length, batch_size=hp.batch_size or 32,
                     max_input_size=hp.max_input_size)
print(f"Decoded {len(lines)} records in {time.time() - start:.2f} s")
"""


def load_average() -> str:
    """`uptime`'s 1-minute load average now (the machine is shared)."""
    return f"{os.getloadavg()[0]:.1f}"


def table(rows: list[tuple[str, int, dict]]) -> str:
    """The markdown table of the results (the server's name says its decode workers: xN)."""
    out = [("| server | clients | sentences/s | p50 ms | p95 ms | p99 ms | p99/p50 | errors "
            "| identical | max score rel. diff | mean batch | wait ms | decode ms | busy "
            "| other ms | CPU ms | load |"),
           "| --- |" + " ---: |" * 16]
    for name, clients, r in rows:
        out.append(f"| {name} | {clients} | {r['sentences_per_sec']:.1f} | {r['p50_ms']:.0f} | "
                   f"{r['p95_ms']:.0f} | {r['p99_ms']:.0f} | "
                   f"{r['p99_ms'] / max(r['p50_ms'], 1e-9):.1f} | {r['errors']} | "
                   f"{r['identical']}/{r['compared']} | {r['max_score_rel_diff']:.1e} | "
                   f"{r['mean_batch']:.1f} | {r['wait_ms']:.0f} | {r['decode_ms']:.0f} | "
                   f"{r['workers_busy']:.0%} | {r['other_ms']:.0f} | {r.get('cpu_ms', 0):.0f} "
                   f"| {r['load']} |")
    return "\n".join(out)


def rss_trend(samples: list[int]) -> dict:
    """The medians of the first and the last tenth of VmRSS samples (at least 3 each) and the
    growth from one to the other."""
    tenth = max(3, len(samples) // 10)
    first, last = statistics.median(samples[:tenth]), statistics.median(samples[-tenth:])
    return {"rss_first_median_kb": first, "rss_last_median_kb": last,
            "rss_growth": (last - first) / max(first, 1)}


def soak(server: Server, lines: list[str], seconds: float, clients: int = 16) -> dict:
    """`clients` clients for `seconds` on a warm server: errors and VmRSS growth.

    VmRSS is sampled every 5 s; one sample moves with the batches in flight (+-5% on the
    CTranslate2 engine from one sample to the next), so the growth compares the median of the
    first tenth of the samples (at least 3, after a first minute, or a tenth of the time, of
    load) with the median of the last tenth; the first and last samples and the largest are
    reported too."""
    warm = min(60.0, seconds / 10)
    load(server.url, lines, clients, until=time.monotonic() + warm)
    samples = [rss_kb(server.process.pid)]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(5):
            samples.append(rss_kb(server.process.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    r = load(server.url, lines, clients, until=time.monotonic() + seconds)
    stop.set()
    sampler.join()
    samples.append(rss_kb(server.process.pid))
    r.pop("answers")
    r.update(rss_before_kb=samples[0], rss_after_kb=samples[-1], rss_max_kb=max(samples),
             **rss_trend(samples), seconds=seconds, clients=clients, load=load_average())
    return r


def main(argv=None) -> dict:
    """Runs the bench; prints the tables and returns the results."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output_dir", help="the run to serve (t2t_lite engine)")
    parser.add_argument("--model_flags", default="",
                        help="more run.py flags naming the model (e.g. --problem, --data_dir)")
    parser.add_argument("--engine", default="t2t_lite", choices=["t2t_lite", "ctranslate2"])
    parser.add_argument("--export_dir", help="the CTranslate2 directory (--engine=ctranslate2)")
    parser.add_argument("--source", required=True, help="sentences, one per line")
    parser.add_argument("--lines", type=int, default=500)
    parser.add_argument("--clients", default="1,4,16,64")
    parser.add_argument("--decode_hparams", default="beam_size=4,alpha=0.6")
    parser.add_argument("--max_batch_size", type=int, default=32)
    parser.add_argument("--server_flags", default="",
                        help="more run.py flags for both servers (e.g. --batch_timeout_ms=10)")
    parser.add_argument("--batching", default="continuous", choices=["continuous", "batch"],
                        help="the batching server's --serve_batching")
    parser.add_argument("--also_batch", action="store_true",
                        help="also load a --serve_batching=batch server of the same size")
    parser.add_argument("--compare_flags", default="",
                        help="also load the batching server with these more run.py flags, "
                             "in the same alternation (e.g. --serve_intra_op_threads=2)")
    parser.add_argument("--compare_checkout", default="",
                        help="also load the batching server of this checkout's run.py (e.g. "
                             "the code before a change), in the same alternation")
    parser.add_argument("--offline_intra_op_threads", type=int, default=0,
                        help="also time offline decoding with this many TensorFlow intra-op "
                             "threads (TF_NUM_INTRAOP_THREADS), each round")
    parser.add_argument("--no_single", action="store_true",
                        help="leave out the max_batch_size=1 server")
    parser.add_argument("--rounds", type=int, default=1,
                        help="load every server this many times, offline decoding measured "
                             "again before each round after the first")
    parser.add_argument("--soak_secs", type=float, default=0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--offline_only", action="store_true",
                        help="measure offline decoding only")
    parser.add_argument("--output_json", help="also write the results here")
    args = parser.parse_args(argv)
    if args.quick:
        args.lines, args.clients, args.soak_secs = 24, "1,4", 5
    if args.engine != "t2t_lite":
        args.batching = "batch"  # the other engines batch per batch whatever the flag says
    with open(args.source, encoding="utf-8") as f:
        lines = [line.strip() for line in f][: args.lines]
    model_flags = [f"--output_dir={args.output_dir}"] if args.output_dir else []
    model_flags += shlex.split(args.model_flags)
    if args.engine == "ctranslate2":
        model_flags += ["--decode_engine=ctranslate2", f"--export_dir={args.export_dir}"]
    common = [*model_flags, f"--decode_hparams={args.decode_hparams}",
              f"--serve_max_queue={max(1024, 4 * args.lines)}", *shlex.split(args.server_flags)]
    clients = [int(c) for c in args.clients.split(",")]
    rows, results = [], {"lines": len(lines), "engine": args.engine}
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(lines) + "\n")
    source_copy = f.name

    def offline_round(threads: int = 0) -> dict:
        """Offline decoding of the lines now (with `threads` intra-op threads when > 0)."""
        load_before = load_average()
        seconds, cpu = offline_decode(model_flags, source_copy, args.decode_hparams,
                                      args.engine, threads)
        figures = {"sentences_per_sec": len(lines) / seconds, "seconds": seconds,
                   "load": f"{load_before}-{load_average()}",
                   "cpu_ms": cpu and 1000 * cpu / len(lines)}
        print(f"offline{f' ({threads} intra-op threads)' if threads else ''}: "
              f"{len(lines) / seconds:.1f} sentences/s ({seconds:.2f} s, load "
              f"{figures['load']}" + (f", CPU {figures['cpu_ms']:.0f} ms a sentence"
                                      if cpu else "") + ")", flush=True)
        return figures

    offline_threads_rounds = []
    try:
        results["offline"] = offline_round()
        if args.offline_intra_op_threads:
            offline_threads_rounds.append(offline_round(args.offline_intra_op_threads))
        if args.offline_only:
            os.unlink(source_copy)
            return results
    except BaseException:
        os.unlink(source_copy)
        raise
    offline_rounds = [results["offline"]]
    # The servers stay loaded (an idle server takes no CPU) and each client count loads one
    # then the other, so that the ratio comes from neighbouring minutes of the shared machine.
    servers = {}
    try:
        batching_server = Server([*common, f"--max_batch_size={args.max_batch_size}",
                                  f"--serve_batching={args.batching}"])
        batching_name = f"{args.batching} ({args.max_batch_size}) x{batching_server.workers}"
        servers[batching_name] = batching_server
        batching_names = [batching_name]
        if args.compare_flags or args.compare_checkout:
            # The same server with more flags or another checkout's code, in the same
            # alternation (its goals too).
            compared = Server([*common, f"--max_batch_size={args.max_batch_size}",
                               f"--serve_batching={args.batching}",
                               *shlex.split(args.compare_flags)],
                              checkout=args.compare_checkout or REPO_ROOT)
            compared_name = (f"{args.batching} ({args.max_batch_size}) x{compared.workers} "
                             + " ".join(filter(None, [args.compare_flags, args.compare_checkout
                                                      and f"of {args.compare_checkout}"])))
            servers[compared_name] = compared
            batching_names.append(compared_name)
        if args.also_batch and args.batching != "batch":
            batch_server = Server([*common, f"--max_batch_size={args.max_batch_size}",
                                   "--serve_batching=batch"])
            servers[f"batch ({args.max_batch_size}) x{batch_server.workers}"] = batch_server
        # The reference: one sentence at a time, each decoded to its end.
        single_server = None
        if not args.no_single:
            single_server = Server([*common, "--max_batch_size=1", "--serve_batching=batch"])
            single_name = f"max_batch_size=1 x{single_server.workers}"
            servers[single_name] = single_server
        for round_ in range(args.rounds):
            if round_:  # offline again, in the minutes of this round's loads
                print(f"round {round_ + 1}:", flush=True)
                offline_rounds.append(offline_round())
                if args.offline_intra_op_threads:
                    offline_threads_rounds.append(offline_round(args.offline_intra_op_threads))
            for count in clients:
                for name, server in servers.items():
                    r = server.load(lines, count)
                    r["load"] = load_average()
                    r["round"] = round_ + 1
                    rows.append((f"{name} (round {round_ + 1})" if args.rounds > 1 else name,
                                 count, r))
                    key = f"{name}/{count}" + (f"/round{round_ + 1}" if round_ else "")
                    results[key] = r
                    print(f"{name}, {count} clients: {r['sentences_per_sec']:.1f} "
                          f"sentences/s, p50 {r['p50_ms']:.0f} ms, p99 {r['p99_ms']:.0f} ms, "
                          f"mean batch {r['mean_batch']:.1f}, wait {r['wait_ms']:.0f} ms, "
                          f"decode {r['decode_ms']:.0f} ms, workers busy "
                          f"{r['workers_busy']:.0%}, other {r['other_ms']:.0f} ms, CPU "
                          f"{r['cpu_ms']:.0f} ms a sentence, load {r['load']}", flush=True)
        for name in [name for name in servers if name != batching_name]:
            servers.pop(name).stop()
        if args.soak_secs:
            results["soak"] = soak(servers[batching_name], lines, args.soak_secs)
    finally:
        for server in servers.values():
            server.stop()
        os.unlink(source_copy)
    reference = rows[0][2]["answers"]  # the batching server, first client count
    for name, count, r in rows:
        r.update(agreement(r.pop("answers"), reference))
    print(table(rows))
    offline = results["offline"]
    print(f"offline --mode=decode: {offline['sentences_per_sec']:.1f} sentences/s "
          f"({len(lines)} lines in {offline['seconds']:.2f} s, load {offline['load']})")
    if args.rounds > 1:
        results["offline_rounds"] = offline_rounds
    if offline_threads_rounds:
        results["offline_with_threads_rounds"] = offline_threads_rounds
    if 16 in clients:
        goals = {}
        for round_, offline in enumerate(offline_rounds):
            suffix = f"/round{round_ + 1}" if round_ else ""
            for name in batching_names:
                batched = results[f"{name}/16{suffix}"]
                goal = {"fraction_of_offline": batched["sentences_per_sec"]
                        / offline["sentences_per_sec"],
                        "p99_over_p50": batched["p99_ms"] / batched["p50_ms"]}
                if offline_threads_rounds:
                    goal["fraction_of_offline_with_threads"] = (
                        batched["sentences_per_sec"]
                        / offline_threads_rounds[round_]["sentences_per_sec"])
                if offline.get("cpu_ms"):
                    # Offline's CPU a sentence over the server's (HTTP and JSON included).
                    goal["cpu_fraction_of_offline"] = (offline["cpu_ms"]
                                                       / batched["cpu_ms"])
                if single_server is not None:
                    goal["speedup_vs_max_batch_size_1"] = (
                        batched["sentences_per_sec"]
                        / results[f"{single_name}/16{suffix}"]["sentences_per_sec"])
                goals[f"{name}{suffix}"] = goal
                speedup = (f"{goal['speedup_vs_max_batch_size_1']:.2f}x the max_batch_size=1 "
                           "server, " if single_server is not None else "")
                print(f"at 16 clients, {name}, round {round_ + 1}: {speedup}"
                      f"{goal['fraction_of_offline']:.0%} of offline decoding "
                      f"({offline['sentences_per_sec']:.1f}/s), p99/p50 "
                      f"{goal['p99_over_p50']:.2f}" + (
                          f"; CPU a sentence: offline's / the server's "
                          f"{goal['cpu_fraction_of_offline']:.0%}"
                          if "cpu_fraction_of_offline" in goal else "") + (
                          f"; {goal['fraction_of_offline_with_threads']:.0%} of offline with "
                          f"{args.offline_intra_op_threads} intra-op threads"
                          if "fraction_of_offline_with_threads" in goal else ""))
        # The first server's first round, as before (the keys scripts read).
        results["goals"] = goals[batching_name]
        results["goals_by_server"] = goals
    if "soak" in results:
        s = results["soak"]
        print(f"soak: {s['seconds']:.0f} s at {s['clients']} clients, {s['sentences']} "
              f"sentences ({s['sentences_per_sec']:.1f}/s, p50 {s['p50_ms']:.0f} ms, p99 "
              f"{s['p99_ms']:.0f} ms), {s['errors']} errors, RSS median of the first / last "
              f"tenth {s['rss_first_median_kb']:.0f} -> {s['rss_last_median_kb']:.0f} kB "
              f"({100 * s['rss_growth']:+.1f}%; samples {s['rss_before_kb']} first, "
              f"{s['rss_after_kb']} last, {s['rss_max_kb']} max), load {s['load']}")
    if args.output_json:
        with open(args.output_json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
    return results


if __name__ == "__main__":
    main()
