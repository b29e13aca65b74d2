"""TF_CONFIG, the environment variable that makes a process one worker of a cluster, read
and checked before TensorFlow sees it (TensorFlow answers its mistakes with tracebacks, or
with a port "in use" when two tasks share one).

    TF_CONFIG='{"cluster": {"worker": ["host1:2222", "host2:2222"]},
                "task": {"type": "worker", "index": 0}}'
"""
from __future__ import annotations

import json
from typing import Any

from t2t_lite.errors import UserError

EXAMPLE = ('{"cluster": {"worker": ["host1:2222", "host2:2222"]}, '
           '"task": {"type": "worker", "index": 0}}')


def parse(text: str | None) -> dict[str, Any]:
    """TF_CONFIG's value as a dict ({} when unset or empty), checked.

    Args:
      text: the variable's value.

    Returns:
      {"cluster": {job: ["host:port", ...]}, "task": {"type": job, "index": i}, ...}.

    Raises:
      UserError: one line naming what is wrong: not JSON, a cluster that is not lists of
        "host:port", a task type the cluster lacks, a task index out of range, an address
        listed twice.
    """
    if not (text or "").strip():
        return {}
    try:
        config = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"TF_CONFIG is not valid JSON ({e.msg} at line {e.lineno} column "
                        f"{e.colno}): set it as e.g. {EXAMPLE}") from None
    if not isinstance(config, dict):
        raise UserError(f"TF_CONFIG must be a JSON object, not {type(config).__name__}: set "
                        f"it as e.g. {EXAMPLE}")
    cluster = config.get("cluster", {})
    if not isinstance(cluster, dict):
        raise UserError(f"TF_CONFIG's \"cluster\" must map job names to address lists, e.g. "
                        f"{EXAMPLE}")
    seen: dict[str, str] = {}
    for job, addresses in cluster.items():
        if not isinstance(addresses, list):
            raise UserError(f"TF_CONFIG's cluster job {job!r} must be a list of \"host:port\" "
                            f"addresses, not {json.dumps(addresses)}")
        for index, address in enumerate(addresses):
            _check_address(job, index, address)
            if address in seen:
                raise UserError(f"TF_CONFIG lists the address {address} twice ({seen[address]} "
                                f"and {job} {index}): give every task its own port")
            seen[address] = f"{job} {index}"
    _check_task(config.get("task", {}), cluster)
    return config


def _check_address(job: str, index: int, address: Any) -> None:
    host, _, port = str(address).rpartition(":")
    if not (isinstance(address, str) and host and port.isdigit() and 0 < int(port) < 65536):
        raise UserError(f"TF_CONFIG's {job} {index} address {json.dumps(address)} is not "
                        "\"host:port\" (a port from 1 to 65535)")


def _check_task(task: Any, cluster: dict[str, list]) -> None:
    if not isinstance(task, dict):
        raise UserError("TF_CONFIG's \"task\" must be an object, e.g. "
                        "{\"type\": \"worker\", \"index\": 0}")
    if not cluster:
        return
    job = task.get("type", "worker")
    if job not in cluster:
        raise UserError(f"TF_CONFIG's task type {json.dumps(job)} is not a job of its cluster "
                        f"({', '.join(cluster)})")
    index = task.get("index", 0)
    count = len(cluster[job])
    number = int(index) if isinstance(index, str) and index.isdigit() else index
    if isinstance(number, bool) or not isinstance(number, int) or not 0 <= number < count:
        raise UserError(f"TF_CONFIG's task index {json.dumps(index)} is out of range: its "
                        f"cluster lists {count} {job} task(s), index 0 to {count - 1}")
