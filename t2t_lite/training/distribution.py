"""Training on several devices and machines: the strategy, the cluster's startup and exit,
and stop signals.

`create_strategy` picks tf.distribute's strategy from the host and TF_CONFIG
(MultiWorkerMirroredStrategy for several workers, with the coordination service's heartbeat
and shutdown waits shortened and a watchdog on startup, `startup_watchdog`). `StopSignals`
turns SIGINT / SIGTERM into a request that the training loop answers by saving a checkpoint
and stopping (`errors.RunStopped`, exit status 130 / 143). `leave_cluster` lets all workers
exit together.
"""
from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf
from absl import logging

from t2t_lite import errors
from t2t_lite.errors import RunStopped, UserError
from t2t_lite.training import cluster_agreement, cluster_config, startup_watchdog
from t2t_lite.utils import checkpoint_guard

# Exit statuses of a run stopped by a signal after saving (the shell's 128 + signal number).
SIGNAL_EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}
# How often a worker waiting for its peers at startup says whom it waits for.
STARTUP_LOG_SECONDS = 30
# A lost peer is reported by the coordination service's heartbeat within this time; a clean
# exit waits at most this long for the other workers (TensorFlow's default is a minute).
HEARTBEAT_TIMEOUT_SECONDS = 10
SHUTDOWN_BARRIER_TIMEOUT_SECONDS = 10


class StopSignals:
    """Records SIGINT and SIGTERM instead of dying on them, so that training can save a
    checkpoint at the current step and exit with `SIGNAL_EXIT_CODES`. A second signal exits at
    once (for a process stuck in a collective). Installs only in the main thread.
    """

    def __init__(self):
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNAL_EXIT_CODES:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame) -> None:
        del frame
        if self.received is not None:
            print(f"stopped: second {signal.Signals(signum).name}: exiting without saving",
                  file=sys.stderr, flush=True)
            os._exit(SIGNAL_EXIT_CODES[signum])
        self.received = signum
        logging.warning("%s received: stopping after the current step (again: exit now)",
                        self.name)

    @property
    def name(self) -> str:
        return signal.Signals(self.received).name if self.received else ""

    @property
    def exit_code(self) -> int:
        return SIGNAL_EXIT_CODES.get(self.received, SIGNAL_EXIT_CODES[signal.SIGTERM])


def tf_config() -> dict:
    """The TF_CONFIG environment variable's JSON ({} when unset), checked
    (`cluster_config.parse`: its mistakes are one line)."""
    return cluster_config.parse(os.environ.get("TF_CONFIG"))


def _cluster_workers(config: dict) -> int:
    cluster = config.get("cluster", {})
    return len(cluster.get("chief", [])) + len(cluster.get("worker", []))


def create_strategy(worker_gpu: int = 1, worker_replicas: int = 1,
                    startup_timeout_secs: float = 300) -> tf.distribute.Strategy:
    """The strategy for this machine (create it before any other TensorFlow work).

    Args:
      worker_gpu: replicas on this host (t2t's --worker_gpu); > 1 needs as many GPUs.
      worker_replicas: t2t's number of workers. TF_CONFIG is what starts the workers here,
        so this only checks it: a value > 1 must equal TF_CONFIG's chief + workers.
      startup_timeout_secs: how long a worker waits for all workers of TF_CONFIG to start.

    Returns:
      MultiWorkerMirroredStrategy if TF_CONFIG names several workers, MirroredStrategy over
      `worker_gpu` GPUs if worker_gpu > 1, else the default strategy (one device).

    Raises:
      UserError: --worker_replicas or --worker_gpu do not match the cluster or the host.
      RunStopped: SIGTERM / SIGINT while this worker waited for the others to start
        (exit 143 / 130), `startup_timeout_secs` passed before they all started (exit 137),
        or TensorFlow gave up registering this worker with the cluster's leader. (A worker
        whose peers all started but which is still connecting after the timeout, or when its
        process group gets SIGTERM / SIGINT, is killed by `startup_watchdog` after one line.)
    """
    workers = _cluster_workers(tf_config())
    if worker_replicas > 1 and worker_replicas != workers:
        raise UserError(
            f"--worker_replicas={worker_replicas} but TF_CONFIG lists {workers} worker(s) "
            "(chief + worker); workers are started from TF_CONFIG: set it on every worker, or "
            "leave --worker_replicas at 1"
        )
    if workers > 1:
        return _start_multi_worker(startup_timeout_secs)
    if worker_gpu > 1:
        gpus = tf.config.list_logical_devices("GPU")
        if len(gpus) < worker_gpu:
            raise UserError(
                f"--worker_gpu={worker_gpu} but only {len(gpus)} GPU(s) are visible; lower "
                "--worker_gpu or check CUDA_VISIBLE_DEVICES"
            )
        return tf.distribute.MirroredStrategy([g.name for g in gpus[:worker_gpu]])
    return tf.distribute.get_strategy()


def task_name(task_type: str, task_id: int, address: str = "") -> str:
    """How log lines name a task: "worker 1", "chief 0 (host:port)"."""
    return f"{task_type} {task_id}" + (f" ({address})" if address else "")


def _start_multi_worker(timeout_secs: float) -> tf.distribute.Strategy:
    """MultiWorkerMirroredStrategy of TF_CONFIG's cluster.

    TensorFlow alone would wait silently and forever for missing workers, holding the
    interpreter (no Python thread or signal handler runs) after installing its own SIGTERM
    handler, which swallows the signal. So `startup_watchdog.wait_for_peers` first waits in
    Python until every peer has started (logging whom it waits for; a SIGTERM / SIGINT to this
    pid stops it with one line); while TensorFlow then connects, the `startup_watchdog`
    process ends it on a SIGTERM / SIGINT to the process group and after the rest of
    `timeout_secs`."""
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    spec = resolver.cluster_spec()
    jobs = [job for job in ("chief", "worker") if job in spec.jobs]
    from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
    from tensorflow.python.distribute import multi_worker_util
    from tensorflow.python.eager import context

    # MultiWorkerMirroredStrategy's own coordination service settings, with shorter
    # heartbeat and shutdown waits; registration gives up a little after the watchdog.
    context.context().configure_coordination_service(
        service_type="standalone",
        service_leader=multi_worker_util.coordination_leader(spec),
        coordinated_jobs=[coordination_config_pb2.CoordinatedJob(
            name=job, num_tasks=spec.num_tasks(job)) for job in jobs],
        cluster_register_timeout_in_ms=int(timeout_secs * 1000) + 30000,
        heartbeat_timeout_in_ms=HEARTBEAT_TIMEOUT_SECONDS * 1000,
        shutdown_barrier_timeout_in_ms=SHUTDOWN_BARRIER_TIMEOUT_SECONDS * 1000,
    )
    me = task_name(resolver.task_type, resolver.task_id)
    peers = _peers(resolver)
    interval = min(STARTUP_LOG_SECONDS, timeout_secs / 2)
    # Missing peers are waited for here, in Python, where a stop signal to this pid works.
    waited = startup_watchdog.wait_for_peers(
        me, spec.task_address(resolver.task_type, resolver.task_id), peers, timeout_secs,
        interval)
    watchdog = startup_watchdog.launch(me, peers, max(timeout_secs - waited, interval),
                                       interval)
    try:
        strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
    except tf.errors.DeadlineExceededError as e:
        raise RunStopped(f"{me} could not join the cluster of TF_CONFIG ({e.message.strip()}"
                         "): start every worker of TF_CONFIG (the same command on each)",
                         1) from None
    finally:
        watchdog.kill()
        watchdog.wait()
    logging.info("%s joined the cluster of %d workers", me, sum(spec.num_tasks(j) for j in jobs))
    errors.exit_right_after_the_line()
    return strategy


def _quiet_watcher_errors(args) -> None:
    """threading.excepthook: the error that ends a PreemptionCheckpointHandler's watcher
    thread when a peer dies is logged in one line, not as a traceback (the training loop
    reports the lost worker)."""
    if (args.thread is not None and args.thread.name.startswith("PeerTerminationWatcher")
            and issubclass(args.exc_type, tf.errors.OpError)):
        logging.debug("Preemption watcher stopped: %s", str(args.exc_value).splitlines()[0])
        return
    _previous_excepthook(args)


_previous_excepthook = threading.excepthook


def create_preemption_handler(strategy: tf.distribute.Strategy, signals: StopSignals,
                              save_fn: Callable[[], Any], exit_fn: Callable[[], None],
                              scratch_dir: str):
    """tf.distribute's PreemptionCheckpointHandler: a SIGINT/SIGTERM on any worker (seen by
    `signals`) makes all workers call `save_fn` at the same step, then `exit_fn`.

    Args:
      strategy: a MultiWorkerMirroredStrategy.
      signals: the installed StopSignals.
      save_fn: saves the checkpoint (every worker calls it: a collective).
      exit_fn: called after the save; raises RunStopped.
      scratch_dir: a folder for the handler's own bookkeeping checkpoint, which is never
        written (save_fn saves), so that it restores nothing.

    Returns:
      The handler; call its `save_checkpoint_if_preempted()` after every step.
    """
    threading.excepthook = _quiet_watcher_errors
    config = tf.distribute.experimental.TerminationConfig(
        termination_watcher_fn=lambda: signals.received is not None,
        exit_fn=exit_fn, save_fn=save_fn)
    bookkeeping = tf.train.CheckpointManager(tf.train.Checkpoint(), scratch_dir, max_to_keep=1)
    return tf.distribute.experimental.PreemptionCheckpointHandler(
        strategy.cluster_resolver, bookkeeping, termination_config=config)


def stop_preemption_watchers(handler) -> None:
    """Stops a PreemptionCheckpointHandler's watcher threads (TensorFlow does it only in
    `__del__`, which those threads' own references keep from running) before the workers
    leave, so that no thread is left waiting on a coordination service that is gone."""
    handler._stop_poll_termination_signal_thread()
    handler._stop_cluster_wise_termination_watcher_thread()


def leave_cluster(strategy: tf.distribute.Strategy, timeout_secs: float = 600) -> None:
    """The last step of a multi-worker process: all workers wait for each other (a
    coordination service barrier), then the chief, which hosts the coordination service,
    waits (at most SHUTDOWN_BARRIER_TIMEOUT_SECONDS) until the others have exited: a worker
    that outlives the chief logs errors about the vanished service. Does nothing with one
    worker.

    Args:
      strategy: the run's strategy.
      timeout_secs: how long to wait for the slowest worker (the chief may still be writing
        plots or decoding).
    """
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return
    from tensorflow.python.eager import context

    try:
        context.context().wait_at_barrier("t2t_lite_leave", int(timeout_secs * 1000))
    except tf.errors.OpError as e:
        logging.warning("Leaving without the other workers: %s", e.message.splitlines()[0])
        return
    if is_chief():
        _wait_for_peers_to_exit(strategy.cluster_resolver)


def _wait_for_peers_to_exit(resolver) -> None:
    """The chief hosts the coordination service: it waits (at most
    SHUTDOWN_BARRIER_TIMEOUT_SECONDS) until no peer's server answers any more."""
    peers = _peers(resolver)
    deadline = time.time() + SHUTDOWN_BARRIER_TIMEOUT_SECONDS
    while len(startup_watchdog.unreachable(peers)) < len(peers) and time.time() < deadline:
        time.sleep(0.2)


# The collective errors of a cluster that lost a worker.
LOST_WORKER_ERRORS = (tf.errors.UnavailableError, tf.errors.AbortedError,
                      tf.errors.CancelledError, tf.errors.DeadlineExceededError,
                      tf.errors.InternalError)


# How TensorFlow's file errors name the disk problems of the process that raises them.
OWN_DISK_ERRORS = tuple(os.strerror(code) for code in (errno.ENOSPC, errno.EDQUOT, errno.EROFS))


def own_disk_error(error: Exception, me: str = "") -> str | None:
    """The disk problem ("No space left on device") an error reports about this process's
    own writes, which no lost worker explains; None for other errors, and for errors another
    task reported (they name it: "/job:worker/replica:0/task:1").

    Args:
      error: the error.
      me: this task as "job:index" ("worker:0"): TensorFlow's errors of its own ops name it.
    """
    tasks = {f"{job}:{task}" for job, task in _TASK_NAMES.findall(str(error))}
    if tasks - {me}:
        return None
    return next((text for text in OWN_DISK_ERRORS if text in str(error)), None)


# How TensorFlow's errors name a task.
_TASK_NAMES = re.compile(r"/job:(\w+)/replica:\d+/task:(\d+)")
# What a worker that stops on its own error sends the others (`tell_peers_why`): the
# coordination service aborts their collectives with this text in the error.
_PEER_STOPPED = "t2t_lite: {me} stops on its own error: {reason}"
_PEER_STOPPED_PATTERN = re.compile(r"t2t_lite: (\w+ \d+) stops on its own error: ([^\n]*)")


def tell_peers_why(resolver, me: str, reason: str) -> None:
    """Tells the other workers that this one stops on its own error (a full disk, a diverged
    loss) and why, so that their line names it instead of a lost worker: the coordination
    service aborts their collectives with `reason` (`peer_stopped`). The chief, which hosts
    the service, then waits (at most SHUTDOWN_BARRIER_TIMEOUT_SECONDS) for them to exit.

    Args:
      resolver: the strategy's cluster resolver.
      me: this worker's name ("worker 0").
      reason: one line, e.g. "no space left on device: /run/ckpt-10_temp/...".
    """
    from tensorflow.python.eager import context

    try:
        context.context().report_error_to_cluster(
            tf.errors.INTERNAL, _PEER_STOPPED.format(me=me, reason=errors.one_line(reason)))
    except (tf.errors.OpError, ValueError) as e:  # the service is gone: nobody to tell
        logging.debug("Could not tell the other workers: %s", e)
        return
    if is_chief():
        _wait_for_peers_to_exit(resolver)


def peer_stopped(error: Exception) -> tuple[str, str] | None:
    """(peer, reason) when `error` is the abort a peer's `tell_peers_why` caused, else None."""
    match = _PEER_STOPPED_PATTERN.search(str(error))
    return (match.group(1), match.group(2)) if match else None


def is_multi_worker(strategy: tf.distribute.Strategy) -> bool:
    """Whether `strategy` is a MultiWorkerMirroredStrategy over a cluster of TF_CONFIG."""
    return (isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
            and bool(strategy.cluster_resolver.cluster_spec().jobs))


def lost_peers(resolver, error: Exception) -> str:
    """The peers a collective error names ("worker 1 and worker 2"), else those whose server
    no longer answers, else "another worker"."""
    me = f"{resolver.task_type}:{resolver.task_id}"
    named = sorted({f"{job} {task}" for job, task in re.findall(
        r"/job:(\w+)/replica:\d+/task:(\d+)", str(error)) if f"{job}:{task}" != me})
    if not named:
        named = [missing.split(" (")[0]
                 for missing in startup_watchdog.unreachable(_peers(resolver))]
    if not named:
        # Every peer's port answers (a frozen process's kernel still accepts connections):
        # an error naming no task is the coordination service's, whose leader stopped
        # answering.
        from tensorflow.python.distribute import multi_worker_util

        job, task = re.findall(r"/job:(\w+)/replica:\d+/task:(\d+)",
                               multi_worker_util.coordination_leader(resolver.cluster_spec()))[0]
        if f"{job}:{task}" != me:
            named = [f"{job} {task}"]
    return " and ".join(named) or "another worker"


def last_checkpoint_text(output_dir: str) -> str:
    """What a stopping worker leaves: "the last checkpoint is <path> (step n)"."""
    latest = checkpoint_guard.newest_good_checkpoint(output_dir)
    return (f"the last checkpoint is {latest} (step {latest.rsplit('-', 1)[1]})"
            if latest else "no checkpoint was saved yet")


def agree_across_workers(strategy: tf.distribute.Strategy, stage: str,
                         fingerprint: dict[str, str], what_to_do: str) -> None:
    """`cluster_agreement.agree` over the cluster of `strategy` (nothing with one worker);
    on a difference every worker leaves together, then raises.

    Raises:
      RunStopped: the first difference, on every worker (exit status 1, right after the
        line).
      cluster_agreement.PeerLost: a peer stopped first (`peers_lost_before_training` says
        so in one line).
    """
    if not is_multi_worker(strategy):
        return
    resolver = strategy.cluster_resolver
    order = [task_name(job, index)
             for job, addresses in resolver.cluster_spec().as_dict().items()
             for index in range(len(addresses))]
    try:
        cluster_agreement.agree(stage, task_name(resolver.task_type, resolver.task_id),
                                fingerprint, _peers(resolver), order, what_to_do)
    except UserError as e:
        leave_cluster(strategy)
        raise RunStopped(str(e), 1, exit_now=True) from None


@contextlib.contextmanager
def lost_workers_are_one_line(strategy: tf.distribute.Strategy, output_dir: str,
                              step: Callable[[], int], before_exit: Callable[[], None]):
    """Turns the collective errors of a worker that died into one line naming it, the last
    checkpoint and how to restart; this worker's own disk full (or read-only) is one line
    saying so, blaming no worker. A worker that stops on its own error (that, or any user
    error: a failed save, a diverged loss) tells the others why (`tell_peers_why`), and their
    line names it instead of a lost worker. Errors pass unchanged with one worker.

    Args:
      strategy: the run's strategy.
      output_dir: where the last checkpoint is looked for.
      step: the current global step.
      before_exit: called first (flushes the summaries: the process exits right after its
        line).
    """
    try:
        yield
    except UserError as e:  # this worker's own error (a failed save, a diverged loss)
        if is_multi_worker(strategy):
            tell_peers_why(strategy.cluster_resolver, _me(strategy), str(e).split(";")[0])
        raise
    except tf.errors.OpError as e:
        if not is_multi_worker(strategy):
            raise
        before_exit()
        resolver = strategy.cluster_resolver
        me = _me(strategy)
        stopped = peer_stopped(e)
        if stopped:
            raise RunStopped(
                f"{stopped[0]} stopped on its own error ({stopped[1]}); {me} stops with it: "
                f"{last_checkpoint_text(output_dir)}; fix that ({stopped[0]}'s log says how), "
                "then start every worker again with the same command to resume there", 1,
                exit_now=True) from None
        disk = own_disk_error(e, f"{resolver.task_type}:{resolver.task_id}")
        if disk:  # this worker's own write failed: no peer is to blame
            problem = errors.storage_problem(e) or (disk.lower(), None)
            tell_peers_why(resolver, me, ": ".join(part for part in problem if part))
            raise RunStopped(errors.describe_storage_problem(
                problem, f"{me} stops: {last_checkpoint_text(output_dir)}; make room in (or "
                         f"make writable) --output_dir={output_dir}, then start every worker "
                         "again with the same command to resume there"), 1,
                exit_now=True) from None
        if not isinstance(e, LOST_WORKER_ERRORS):
            raise
        raise RunStopped(
            f"lost contact with {lost_peers(resolver, e)} during step {step() + 1} "
            f"({type(e).__name__}); {me} stops: {last_checkpoint_text(output_dir)}; start "
            "every worker again with the same command to resume there", 1,
            exit_now=True) from None


def worker_scratch_dir() -> str:
    """A non-chief worker's local folder for the throwaway checkpoint copies that saving (a
    collective) makes it write, never the shared output_dir (whose space, or a full disk, is
    the chief's): in the system's temporary directory, one per process; the caller empties
    it after every save."""
    task = tf_config().get("task", {})
    return os.path.join(tempfile.gettempdir(),
                        f"t2t_lite_{task.get('type')}_{task.get('index')}_{os.getpid()}")


@contextlib.contextmanager
def peers_lost_before_training(strategy: tf.distribute.Strategy, output_dir: str):
    """A peer that stops before training (its own error, a kill) gives this worker the
    lost-worker line, instead of the traceback of the collective or key-value exchange that
    noticed it (a worker's own errors pass unchanged)."""
    try:
        yield
    except cluster_agreement.PeerLost as e:
        resolver = strategy.cluster_resolver
        raise cluster_agreement.lost_before_training(
            task_name(resolver.task_type, resolver.task_id), e.peer, e.cause,
            last_checkpoint_text(output_dir)) from None
    except LOST_WORKER_ERRORS as e:
        if not is_multi_worker(strategy):
            raise
        resolver = strategy.cluster_resolver
        raise cluster_agreement.lost_before_training(
            task_name(resolver.task_type, resolver.task_id), lost_peers(resolver, e),
            type(e).__name__, last_checkpoint_text(output_dir)) from None


def _me(strategy: tf.distribute.Strategy) -> str:
    """This worker's name ("worker 0")."""
    resolver = strategy.cluster_resolver
    return task_name(resolver.task_type, resolver.task_id)


def _peers(resolver) -> dict[str, str]:
    """The other tasks of the cluster: name ("worker 1") -> "host:port"."""
    return {task_name(job, index): address
            for job, addresses in resolver.cluster_spec().as_dict().items()
            for index, address in enumerate(addresses)
            if (job, index) != (resolver.task_type, resolver.task_id)}


def is_chief() -> bool:
    """Whether this process writes summaries, hparams.json and the real checkpoints."""
    config = tf_config()
    if _cluster_workers(config) <= 1:
        return True
    task = config.get("task", {})
    if "chief" in config.get("cluster", {}):
        return task.get("type") == "chief"
    return task.get("type", "worker") == "worker" and int(task.get("index", 0)) == 0


def setup_determinism(random_seed: int | None, deterministic: bool) -> None:
    """Seeds everything (--random_seed) and enables op determinism (--deterministic)."""
    if deterministic and random_seed is None:
        raise UserError("--deterministic needs --random_seed (e.g. --random_seed=1)")
    if random_seed is not None:
        keras.utils.set_random_seed(random_seed)
    if deterministic:
        tf.config.experimental.enable_op_determinism()
