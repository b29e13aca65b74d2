"""What every worker of a multi-worker run must share, agreed before training.

Workers of one run each read their own command line: a worker started with another
--train_steps, --hparams or hparams.json would train alongside the others (the run card
recording the chief's values) or wait at a barrier for a peer that already left. Before
training, every worker publishes a fingerprint (name -> value) in the coordination service's
key-value store and reads all the others' (`agree`): the first difference is one line, the
same on every worker; a peer that stopped before publishing (its own error, a kill) gives
the survivors the lost-worker line instead of a collective's traceback.

The fingerprints are plain dicts (`flag_fingerprint`, `hparams_fingerprint`), compared by
`first_difference` without TensorFlow.
"""
from __future__ import annotations

import time
from typing import Any

from t2t_lite.errors import RunStopped, UserError

# The training flags that shape what every worker does: the model, the data read, the ending
# conditions (steps, evaluations, seeds), the checkpoints. Paths (--output_dir, --data_dir,
# --tmp_dir, --warm_start_from) may differ per host (mount points) and are checked through
# what they hold (checkpoints, datagen markers, hparams.json); the startup timeout and
# --worker_gpu are per host.
TRAINING_FLAGS = (
    "mode", "schedule", "problem", "model", "hparams_set", "hparams", "train_steps",
    "eval_steps", "local_eval_frequency", "save_checkpoints_steps", "keep_checkpoint_max",
    "random_seed", "eval_use_test_set", "log_step_count_steps", "worker_replicas",
    "warm_start_partial", "deterministic", "xla_compile",
)
# How long a worker waits for a live peer's fingerprint (it is still starting up).
AGREE_TIMEOUT_SECONDS = 600
# How often the wait checks that the peer still lives.
POLL_MILLISECONDS = 1000


def flag_fingerprint(flag_values: dict[str, Any]) -> dict[str, str]:
    """The run-shaping flags of `flag_values` (name -> value) as "--name" -> text."""
    return {f"--{name}": _text(flag_values[name]) for name in TRAINING_FLAGS
            if name in flag_values}


def hparams_fingerprint(hparams_values: dict[str, Any]) -> dict[str, str]:
    """The resolved hparams (name -> value) as "hparams name" -> text."""
    return {f"hparams {name}": _text(value) for name, value in sorted(hparams_values.items())}


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def first_difference(fingerprints: dict[str, dict[str, str]]) -> str | None:
    """The first worker (in cluster order) whose fingerprint differs from the first worker's,
    and its first differing name (in the first worker's order, then the extra names).

    Args:
      fingerprints: task name ("worker 0") -> fingerprint, in cluster order.

    Returns:
      "worker 1's --train_steps=60 differs from worker 0's 40", or None if all agree.
    """
    (first, reference), *others = fingerprints.items()
    for name, fingerprint in others:
        for key in [*reference, *(k for k in fingerprint if k not in reference)]:
            mine, theirs = fingerprint.get(key), reference.get(key)
            if mine != theirs:
                return (f"{name}'s {_setting(key, mine)} differs from {first}'s "
                        f"{'nothing (unset)' if theirs is None else theirs or '(empty)'}")
    return None


def _setting(key: str, value: str | None) -> str:
    if value is None:
        return f"{key} (unset)"
    return f"{key}={value}"


class PeerLost(Exception):
    """A peer stopped (or became unreachable) before it published its fingerprint."""

    def __init__(self, peer: str, cause: str):
        super().__init__(f"{peer} ({cause})")
        self.peer = peer
        self.cause = cause


def exchange(stage: str, me: str, value: str, peers: dict[str, str],
             timeout_secs: float = AGREE_TIMEOUT_SECONDS) -> dict[str, str]:
    """Publishes `value` under `stage` and reads every peer's, through the coordination
    service of the current MultiWorkerMirroredStrategy (create it first).

    Args:
      stage: a name for this exchange, once per process ("flags").
      me: this worker's name ("worker 0").
      value: what this worker publishes.
      peers: the other workers, "name" -> "host:port" (their TensorFlow servers).
      timeout_secs: how long to wait for a peer that lives but has not published.

    Returns:
      name -> value for this worker and every peer.

    Raises:
      PeerLost: a peer's server stopped answering, or the coordination service reports an
        error, before the peer published.
    """
    import tensorflow as tf
    from tensorflow.python.eager import context

    from t2t_lite.training import startup_watchdog

    ctx = context.context()
    ctx.set_config_key_value(f"t2t_lite/{stage}/{me}", value)
    values = {me: value}
    deadline = time.time() + timeout_secs
    for name, address in peers.items():
        while name not in values:
            try:
                values[name] = ctx.get_config_key_value(f"t2t_lite/{stage}/{name}",
                                                        timeout_in_ms=POLL_MILLISECONDS)
            except tf.errors.DeadlineExceededError:  # not published yet
                if startup_watchdog.unreachable({name: address}):
                    raise PeerLost(name, "its process ended") from None
                if time.time() > deadline:
                    raise PeerLost(name, f"silent for {timeout_secs:.0f} s") from None
            except tf.errors.OpError as e:
                raise PeerLost(name, type(e).__name__) from None
    return values


def agree(stage: str, me: str, fingerprint: dict[str, str], peers: dict[str, str],
          cluster_order: list[str], what_to_do: str,
          timeout_secs: float = AGREE_TIMEOUT_SECONDS) -> None:
    """Checks that every worker has the same fingerprint (a collective: every worker calls
    it with the same `stage`); all workers read all fingerprints before any of them leaves.

    Args:
      stage: the exchange's name ("flags", "hparams").
      me: this worker's name.
      fingerprint: name -> text (`flag_fingerprint`, `hparams_fingerprint`).
      peers: the other workers, "name" -> "host:port".
      cluster_order: every worker's name, the first being the reference.
      what_to_do: the end of the error line.
      timeout_secs: the longest wait for a live peer.

    Raises:
      UserError: (on every worker) "<first difference>: <what_to_do>".
      PeerLost: a peer stopped before it published its fingerprint.
    """
    import json

    from tensorflow.python.eager import context

    published = exchange(stage, me, json.dumps(fingerprint), peers, timeout_secs)
    # Nobody leaves (taking the coordination service with it, for the chief) before every
    # worker has read every fingerprint.
    context.context().wait_at_barrier(f"t2t_lite_{stage}_read", int(timeout_secs * 1000))
    difference = first_difference({name: json.loads(published[name])
                                   for name in cluster_order})
    if difference:
        raise UserError(f"{difference}: {what_to_do}")


def lost_before_training(me: str, peer: str, cause: str, saved: str) -> RunStopped:
    """The lost-worker line of a peer that stopped before training started.

    Args:
      me: this worker's name.
      peer: the lost peer's name.
      cause: why it is considered lost ("its process ended").
      saved: what was saved ("the last checkpoint is ... (step n)").
    """
    return RunStopped(f"lost contact with {peer} before training started ({cause}; its own log "
                      f"says why); {me} stops: {saved}; start every worker again with the same "
                      "command to resume there", 1, exit_now=True)
