"""The translation server (`run.py --mode=serve`) under load: dynamic batching against a
`--max_batch_size=1` server and offline `--mode=decode` of the same lines, in one run.

    python bench/bench_serving.py --output_dir=RUN --source=dev.en [--lines=500] \
        [--clients=1,4,16,64] [--decode_hparams="beam_size=4,alpha=0.6"] \
        [--engine=ctranslate2 --export_dir=RUN/ctranslate2] [--soak_secs=600] [--quick]

For each server (`--max_batch_size=32`, then `=1`, one at a time so that they do not share the
CPU) and each client count C, the first `--lines` lines of `--source` are sent as
single-sentence requests by C threads; printed: sentences/s, p50 / p95 / p99 latency and
errors, and how many translations equal those of the first load (the batching server at the
first client count: a sentence's translation must not depend on its batch). Offline: `run.py --mode=decode` of the same file with the same decode hparams (its
own "Decoded N records in T s" line: decoding only, not loading). `--soak_secs`: C=16
clients for that long on the batching server, errors and the server's RSS growth (VmRSS
after warm-up vs at the end). `--quick`: 24 lines, 1 and 4 clients, a 5 s soak (a smoke
test of the script, not a measurement). A base-sized model with random weights for speed:
train one step of `--hparams_set=transformer_base` on the same problem.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import threading
import time
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


def rss_kb(pid: int) -> int:
    """VmRSS of a process in kB (Linux)."""
    with open(f"/proc/{pid}/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Server:
    """`run.py --mode=serve` with `flags` on a free port, ready when constructed."""

    def __init__(self, flags: list[str]):
        self.process = subprocess.Popen(
            [sys.executable, str(REPO_ROOT / "run.py"), "--mode=serve", "--port=0", *flags],
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

    def stop(self) -> None:
        """SIGTERM, then wait for it."""
        self.process.terminate()
        self.process.wait(120)


def offline_decode(model_flags: list[str], source: str, decode_hparams: str) -> float:
    """Seconds `--mode=decode` reports for decoding `source` (loading excluded)."""
    with tempfile.TemporaryDirectory() as tmp:
        result = subprocess.run(
            [sys.executable, str(REPO_ROOT / "run.py"), "--mode=decode", *model_flags,
             f"--decode_hparams={decode_hparams}", f"--decode_from_file={source}",
             f"--decode_to_file={tmp}/out.txt"], capture_output=True, text=True, check=False)
    match = re.search(r"Decoded (\d+) records in ([\d.]+) s", result.stderr)
    if result.returncode or not match:
        raise SystemExit("offline decode failed: " + result.stderr[-2000:])
    return float(match.group(2))


def table(rows: list[tuple[str, int, dict]]) -> str:
    """The markdown table of the results."""
    out = [("| server | clients | sentences/s | p50 ms | p95 ms | p99 ms | errors | identical "
           "| max score rel. diff |"),
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, clients, r in rows:
        out.append(f"| {name} | {clients} | {r['sentences_per_sec']:.1f} | {r['p50_ms']:.0f} | "
                   f"{r['p95_ms']:.0f} | {r['p99_ms']:.0f} | {r['errors']} | "
                   f"{r['identical']}/{r['compared']} | {r['max_score_rel_diff']:.1e} |")
    return "\n".join(out)


def main(argv=None) -> dict:
    """Runs the bench; prints the tables and returns the results."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output_dir", help="the run to serve (t2t_lite engine)")
    parser.add_argument("--engine", default="t2t_lite", choices=["t2t_lite", "ctranslate2"])
    parser.add_argument("--export_dir", help="the CTranslate2 directory (--engine=ctranslate2)")
    parser.add_argument("--source", required=True, help="sentences, one per line")
    parser.add_argument("--lines", type=int, default=500)
    parser.add_argument("--clients", default="1,4,16,64")
    parser.add_argument("--decode_hparams", default="beam_size=4,alpha=0.6")
    parser.add_argument("--max_batch_size", type=int, default=32)
    parser.add_argument("--soak_secs", type=float, default=0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output_json", help="also write the results here")
    args = parser.parse_args(argv)
    if args.quick:
        args.lines, args.clients, args.soak_secs = 24, "1,4", 5
    with open(args.source, encoding="utf-8") as f:
        lines = [line.strip() for line in f][: args.lines]
    model_flags = [f"--output_dir={args.output_dir}"] if args.output_dir else []
    if args.engine == "ctranslate2":
        model_flags += ["--decode_engine=ctranslate2", f"--export_dir={args.export_dir}"]
    common = [*model_flags, f"--decode_hparams={args.decode_hparams}",
              f"--serve_max_queue={max(1024, 4 * args.lines)}"]
    clients = [int(c) for c in args.clients.split(",")]
    rows, results = [], {"lines": len(lines), "engine": args.engine}
    for name, batch in ((f"batching ({args.max_batch_size})", args.max_batch_size),
                        ("max_batch_size=1", 1)):
        server = Server([*common, f"--max_batch_size={batch}"])
        try:
            for count in clients:
                r = load(server.url, lines, count)
                rows.append((name, count, r))
                results[f"{name}/{count}"] = r
            if args.soak_secs and batch == args.max_batch_size:
                before = rss_kb(server.process.pid)
                r = load(server.url, lines, 16, until=time.monotonic() + args.soak_secs)
                after = rss_kb(server.process.pid)
                r.update(rss_before_kb=before, rss_after_kb=after,
                         rss_growth=(after - before) / max(before, 1), seconds=args.soak_secs)
                results["soak"] = r
        finally:
            server.stop()
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(lines) + "\n")
    try:
        seconds = offline_decode(model_flags, f.name, args.decode_hparams) \
            if args.engine == "t2t_lite" else None
    finally:
        os.unlink(f.name)
    reference = rows[0][2]["answers"]  # the batching server, first client count
    for name, count, r in rows:
        r.update(agreement(r.pop("answers"), reference))
    results.get("soak", {}).pop("answers", None)
    print(table(rows))
    if seconds is not None:
        results["offline_sentences_per_sec"] = len(lines) / seconds
        print(f"offline --mode=decode: {len(lines) / seconds:.1f} sentences/s "
              f"({len(lines)} lines in {seconds:.2f} s)")
    if "soak" in results:
        soak = results["soak"]
        print(f"soak: {soak['seconds']:.0f} s at 16 clients, {soak['sentences']} sentences, "
              f"{soak['errors']} errors, RSS {soak['rss_before_kb']} -> {soak['rss_after_kb']} kB "
              f"({100 * soak['rss_growth']:+.1f}%)")
    if args.output_json:
        with open(args.output_json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
    return results


if __name__ == "__main__":
    main()
