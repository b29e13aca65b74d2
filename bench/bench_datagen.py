"""Datagen on a big parallel corpus: t2t_lite (1 and 2 workers) against the ORIGINAL t2t.

    python bench/bench_datagen.py [--work /work/datagen-bench] [--corpus_lines 2000000]
        [--sizes 1000000,2000000] [--t2t_sizes 1000000,2000000] [--workers 1,2]
        [--multi_worker_sizes ...] [--t2t_python /work/t2t-venv/bin/python]

1. Makes the corpus once (cached in --work): the 9,000 pairs of
   ../shared/data/wmt_toy_ende/train.* repeated with varied noise up to the largest size
   (per copy, each pair gets, by a seeded draw: a number inserted on both sides, a typo
   (two letters swapped) in a word of each side, a capitalised word, or a word dropped from
   the source), so that lines differ and the token caches meet new tokens as in real data.
   A size below --corpus_lines is the corpus's first lines.
2. For each size, alternating: t2t_lite `run.py --mode=datagen --problem=translate_files
   --approx_vocab_size=8192 --num_datagen_workers=W` for each W of --workers, and t2t 1.15's
   own t2t-datagen (shared/t2t_speed/t2t_run.py) on the same files with
   bench/t2t_usr_dir_datagen's `translate_bench_files`: t2t's TranslateProblem, same vocab
   size, 100 train shards (t2t compiles the pairs into tmp_dir first: "prepare").
3. Prints per run: wall time of the process, prepare (compile/filter), vocab, encoding
   (writing the shards) and shuffle seconds, training pairs/s (pairs / process wall time, and
   pairs / encoding seconds), peak RSS of the main process and peak PSS of the process tree
   (workers share the parent's pages: PSS counts them once), sampled every 0.2 s; and
   whether both built the same vocab file. Results also go to <work>/results.json.

The machine is shared: the `uptime` load is printed before and after each run. The N-worker
scaling can only be judged when N cores are free.
"""
import argparse
import json
import os
import random
import re
import resource
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(REPO), "shared")
TOY = os.path.join(SHARED, "data", "wmt_toy_ende")
T2T_RUN = os.path.join(SHARED, "t2t_speed", "t2t_run.py")
USR_DIR = os.path.join(REPO, "bench", "t2t_usr_dir_datagen")


def load() -> str:
    """The 1/5/15-minute load averages."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _noisy(words: list[str], kind: int, rng: random.Random, number: str) -> list[str]:
    words = list(words)
    if not words:
        return words
    i = rng.randrange(len(words))
    if kind == 0:
        words.insert(i, number)
    elif kind == 1 and len(words[i]) > 3:
        w = words[i]
        j = rng.randrange(len(w) - 1)
        words[i] = w[:j] + w[j + 1] + w[j] + w[j + 2:]
    elif kind == 2:
        words[i] = words[i].upper()
    return words


def make_corpus(work: str, lines: int, seed: int = 1) -> tuple[str, str]:
    """The noisy corpus of `lines` pairs in work/corpus (made once); (source, target)."""
    folder = os.path.join(work, "corpus")
    os.makedirs(folder, exist_ok=True)
    src, tgt = (os.path.join(folder, f"train{lines}.{lang}") for lang in ("en", "de"))
    if os.path.exists(src) and os.path.exists(tgt):
        return src, tgt
    with open(os.path.join(TOY, "train.en"), encoding="utf-8") as f:
        en = f.read().split("\n")[:-1]
    with open(os.path.join(TOY, "train.de"), encoding="utf-8") as f:
        de = f.read().split("\n")[:-1]
    rng = random.Random(seed)
    start = time.time()
    with open(src + ".tmp", "w", encoding="utf-8") as fs, \
            open(tgt + ".tmp", "w", encoding="utf-8") as ft:
        written = 0
        while written < lines:
            for s, t in zip(en, de):
                if written == lines:
                    break
                if written >= len(en):  # the first copy is the sample itself
                    kind = rng.randrange(5)
                    number = str(rng.randrange(100000))
                    s_words = _noisy(s.split(" "), kind, rng, number)
                    t_words = _noisy(t.split(" "), kind, rng, number)
                    if kind == 3 and len(s_words) > 2:
                        del s_words[rng.randrange(len(s_words))]
                    s, t = " ".join(s_words), " ".join(t_words)
                fs.write(s + "\n")
                ft.write(t + "\n")
                written += 1
    os.replace(src + ".tmp", src)
    os.replace(tgt + ".tmp", tgt)
    print(f"corpus: {lines} pairs in {time.time() - start:.0f}s -> {src}", flush=True)
    return src, tgt


def prefix_corpus(work: str, full: tuple[str, str], lines: int) -> tuple[str, str]:
    """The first `lines` pairs of the full corpus as their own files (made once)."""
    out = []
    for path in full:
        target = path.replace(os.path.basename(path).split(".")[0], f"train{lines}")
        if not os.path.exists(target):
            with open(path, "rb") as f, open(target + ".tmp", "wb") as g:
                for i, line in enumerate(f):
                    if i == lines:
                        break
                    g.write(line)
            os.replace(target + ".tmp", target)
        out.append(target)
    return out[0], out[1]


def _tree(pid: int) -> list[int]:
    """pid and its descendants (from /proc/*/stat)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def _kb(pid: int, path: str, field: str) -> int:
    try:
        with open(f"/proc/{pid}/{path}") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def run_monitored(cmd: list[str], log_path: str) -> dict:
    """Runs cmd; wall time, peak RSS of the main process, peak PSS of its tree (KB), and the
    CPU time (user + sys) of the whole tree: worker processes are waited for by their parent,
    so RUSAGE_CHILDREN counts them. CPU time is what another job on the machine disturbs
    least: on a shared machine it, not wall time, compares the tools."""
    peak = {"main_rss_kb": 0, "tree_pss_kb": 0}
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        done = threading.Event()

        def sample():
            while not done.is_set():
                pids = _tree(proc.pid)
                peak["main_rss_kb"] = max(peak["main_rss_kb"], _kb(proc.pid, "status", "VmRSS"))
                peak["tree_pss_kb"] = max(peak["tree_pss_kb"],
                                          sum(_kb(p, "smaps_rollup", "Pss:") for p in pids))
                done.wait(0.2)

        thread = threading.Thread(target=sample, daemon=True)
        thread.start()
        code = proc.wait()
        done.set()
        thread.join()
    peak["wall_s"] = round(time.time() - start, 2)
    now = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak["cpu_s"] = round(now.ru_utime + now.ru_stime - used.ru_utime - used.ru_stime, 2)
    peak["exit"] = code
    return peak


def run_lite(work: str, files: tuple[str, str], lines: int, workers: int) -> dict:
    data_dir = os.path.join(work, f"lite_{lines}_w{workers}")
    subprocess.run(["rm", "-rf", data_dir], check=True)
    cmd = [sys.executable, "run.py", "--mode=datagen", "--problem=translate_files",
           f"--data_dir={data_dir}", f"--tmp_dir={os.path.join(work, 'lite_tmp')}",
           f"--train_src={files[0]}", f"--train_tgt={files[1]}",
           f"--dev_src={os.path.join(TOY, 'dev.en')}", f"--dev_tgt={os.path.join(TOY, 'dev.de')}",
           "--approx_vocab_size=8192", f"--num_datagen_workers={workers}"]
    result = run_monitored(cmd, data_dir + ".log")
    with open(os.path.join(data_dir, "datagen_report.json")) as f:
        entry = json.load(f)["translate_files"]
    train, dev = entry["splits"]["train"], entry["splits"].get("eval", {})
    phases = {"prepare_s": train["prepare_s"] + dev.get("prepare_s", 0),
              "vocab_s": train["vocab_s"], "encode_s": train["encode_s"],
              "dev_s": sum(dev.get(k, 0) for k in ("vocab_s", "encode_s"))}
    phases["shuffle_and_markers_s"] = round(entry["total_s"] - sum(phases.values()), 2)
    return {**result, **phases, "datagen_s": entry["total_s"],
            "vocab_file": os.path.join(data_dir, "vocab.translate_files.8192.subwords"),
            "command": " ".join(cmd)}


def run_t2t(work: str, files: tuple[str, str], lines: int, t2t_python: str) -> dict:
    tmp_dir = os.path.join(work, f"t2t_tmp_{lines}")
    data_dir = os.path.join(work, f"t2t_{lines}")
    subprocess.run(["rm", "-rf", tmp_dir, data_dir], check=True)
    os.makedirs(tmp_dir)
    for name, path in (("train.en", files[0]), ("train.de", files[1]),
                       ("dev.en", os.path.join(TOY, "dev.en")),
                       ("dev.de", os.path.join(TOY, "dev.de"))):
        os.symlink(path, os.path.join(tmp_dir, name))
    open(os.path.join(tmp_dir, "bench_corpus"), "w").close()  # the "downloaded archive"
    cmd = [t2t_python, T2T_RUN, "datagen", f"--t2t_usr_dir={USR_DIR}",
           "--problem=translate_bench_files", f"--data_dir={data_dir}", f"--tmp_dir={tmp_dir}"]
    result = run_monitored(cmd, data_dir + ".log")
    events = []
    with open(data_dir + ".log") as f:
        for line in f:
            m = re.match(r"PHASE (\S+) (\S+) (\S+)", line)
            if m:
                events.append((m.group(1), float(m.group(2)), float(m.group(3))))
    by_name = {}
    for name, start, end in events:
        by_name.setdefault(name, []).append((start, end))
    # Order in t2t's generate_data: compile train, vocab (built), write train shards, compile
    # dev, vocab (loaded), write dev shards, shuffle.
    train_vocab_end = by_name["vocab"][0][1]
    dev_compile = by_name["compile_eval"][0]
    phases = {"prepare_s": round(sum(e - s for s, e in by_name["compile_train"] + [dev_compile]), 2),
              "vocab_s": round(by_name["vocab"][0][1] - by_name["vocab"][0][0], 2),
              "encode_s": round(dev_compile[0] - train_vocab_end, 2),
              "dev_s": round(by_name["shuffle"][0][0] - dev_compile[1], 2),
              "shuffle_and_markers_s": round(by_name["shuffle"][0][1] - by_name["shuffle"][0][0], 2)}
    phases["datagen_s"] = round(by_name["shuffle"][0][1] - by_name["compile_train"][0][0], 2)
    return {**result, **phases,
            "vocab_file": os.path.join(data_dir, "vocab.translate_bench_files.8192.subwords"),
            "command": " ".join(cmd)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", default="/work/datagen-bench")
    parser.add_argument("--sizes", default="1000000,2000000")
    parser.add_argument("--t2t_sizes", default="1000000,2000000")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--multi_worker_sizes", default="",
                        help="sizes run with every --workers value (default: all); the "
                             "others with the first only")
    parser.add_argument("--corpus_lines", type=int, default=2000000,
                        help="lines of the corpus made (the sizes are its first lines)")
    parser.add_argument("--t2t_python", default="/work/t2t-venv/bin/python")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    t2t_sizes = {int(s) for s in args.t2t_sizes.split(",") if s}
    workers = [int(w) for w in args.workers.split(",")]
    os.makedirs(args.work, exist_ok=True)
    multi = {int(s) for s in args.multi_worker_sizes.split(",") if s} or set(sizes)
    full = make_corpus(args.work, max(max(sizes), args.corpus_lines))
    results = []
    results_path = os.path.join(args.work, "results.json")
    for lines in sizes:
        files = prefix_corpus(args.work, full, lines) if lines < args.corpus_lines else full
        runs = [("t2t_lite", w) for w in (workers if lines in multi else workers[:1])]
        if lines in t2t_sizes:
            runs.insert(1, ("t2t", 1))  # alternate: lite 1 worker, t2t, lite 2 workers
        for tool, w in runs:
            before = load()
            print(f"== {tool} {lines} lines, {w} worker(s): load {before}", flush=True)
            if tool == "t2t":
                result = run_t2t(args.work, files, lines, args.t2t_python)
            else:
                result = run_lite(args.work, files, lines, w)
            result.update(tool=tool, lines=lines, workers=w, load_before=before,
                          load_after=load())
            result["pairs_per_s"] = round(lines / result["wall_s"])
            result["encode_pairs_per_s"] = round(lines / result["encode_s"])
            result["pairs_per_cpu_s"] = round(lines / result["cpu_s"])
            results.append(result)
            print(json.dumps({k: v for k, v in result.items() if k != "command"}), flush=True)
            with open(results_path, "w") as f:
                json.dump(results, f, indent=1)
    print("\n| tool | lines | workers | wall s | CPU s | prepare s | vocab s | encode s "
          "| shuffle s | pairs/s (wall) | pairs/s (encode) | pairs per CPU s | main RSS MB "
          "| tree PSS MB | load before/after |")
    print("|" + " --- |" * 15)
    for r in results:
        print(f"| {r['tool']} | {r['lines']:,} | {r['workers']} | {r['wall_s']:.0f} | "
              f"{r['cpu_s']:.0f} | {r['prepare_s']:.1f} | {r['vocab_s']:.1f} | "
              f"{r['encode_s']:.0f} | {r['shuffle_and_markers_s']:.0f} | {r['pairs_per_s']:,} | "
              f"{r['encode_pairs_per_s']:,} | {r['pairs_per_cpu_s']:,} | "
              f"{r['main_rss_kb'] / 1024:.0f} | "
              f"{r['tree_pss_kb'] / 1024:.0f} | {r['load_before']} / {r['load_after']} |")
    for lines in sizes:
        vocabs = [r["vocab_file"] for r in results if r["lines"] == lines]
        contents = set()
        for v in vocabs:
            if os.path.exists(v):
                with open(v, "rb") as f:
                    contents.add(f.read())
        print(f"{lines:,} lines: {len(vocabs)} vocab files, identical: {len(contents) == 1}")


if __name__ == "__main__":
    main()
