"""`datagen_report.json` in data_dir: what datagen kept, dropped and how long it took.

Written by `--mode=datagen` when cleaning filters or `--num_datagen_workers` are asked for
(t2t's datagen writes no such file, so the default leaves data_dir as t2t does). One entry
per problem:

    {"translate_files": {
       "workers": 2,
       "filters": {"--filter_max_length": 80, ...},            # null: no filters
       "training_pairs": {"read": 2000000, "kept": 1890000,
                          "dropped": {"empty": 12, "too_long": 301, ...}},
       "splits": {"train": {"prepare_s": ..., "vocab_s": ..., "encode_s": ...,
                            "examples": ..., "workers": 2}, "dev": {...}},
       "total_s": 95.2, "peak_rss_mb": {"main": 610.0, "workers": 180.0}}}
"""
from __future__ import annotations

import json
import os
import resource
from typing import Any

from t2t_lite import file_io
from t2t_lite.data_generators import corpus_filters

REPORT_FILENAME = "datagen_report.json"


def build(problem: Any, total_seconds: float) -> dict[str, Any]:
    """The report entry of a problem just generated (see the module docstring).

    Args:
      problem: the configured Text2TextProblem after `generate_data`.
      total_seconds: wall time of its datagen.

    Returns:
      A JSON-ready dict.
    """
    filters = getattr(problem, "corpus_filters", None)
    counts = getattr(problem, "filter_counts", {})
    entry: dict[str, Any] = {
        "workers": getattr(problem, "datagen_workers", 1),
        "filters": filters.as_flags() if filters is not None else None,
        "training_pairs": None,
        "splits": dict(getattr(problem, "datagen_stats", {})),
        "total_s": round(total_seconds, 3),
        "peak_rss_mb": {
            "main": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "workers": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1),
        },
    }
    if filters is not None and counts:
        entry["training_pairs"] = {
            "read": counts["read"], "kept": counts["kept"],
            "dropped": {reason: counts.get(reason, 0) for reason in corpus_filters.DROP_REASONS}}
    return entry


def write(data_dir: str, name: str, entry: dict[str, Any]) -> str:
    """Adds `entry` under `name` to data_dir's report (written whole, atomically) and
    returns the one summary line to print.

    Args:
      data_dir: the data directory.
      name: problem name.
      entry: `build`'s dict.

    Returns:
      "[datagen] <name>: <report path>: kept ... ; train: vocab ...s, encoding ...s ...".
    """
    path = os.path.join(data_dir, REPORT_FILENAME)
    report = {}
    text = file_io.read_text(path)
    if text:
        try:
            report = json.loads(text)
        except ValueError:
            report = {}  # a damaged report of an earlier run: replaced
    report[name] = entry
    file_io.atomic_write(path, json.dumps(report, indent=2, sort_keys=True) + "\n")
    return summary_line(name, path, entry)


def summary_line(name: str, path: str, entry: dict[str, Any]) -> str:
    """The report's one line: pairs kept and dropped by reason, the train split's vocab
    and encoding times and rate."""
    parts = []
    pairs = entry.get("training_pairs")
    if pairs:
        dropped = ", ".join(f"{reason} {count}" for reason, count in pairs["dropped"].items()
                            if count)
        parts.append(f"kept {pairs['kept']} of {pairs['read']} training pairs (dropped: "
                     f"{dropped or 'none'})")
    train = entry["splits"].get("train")
    if train:
        rate = train["examples"] / train["encode_s"] if train["encode_s"] else 0.0
        parts.append(f"train: vocab {train['vocab_s']:.1f}s, encoding {train['encode_s']:.1f}s "
                     f"with {train['workers']} worker(s) ({rate:,.0f} examples/s)")
    return f"[datagen] {name}: {path}: {'; '.join(parts) or 'written'}"
