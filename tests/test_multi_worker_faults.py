"""Faults of a two-worker MultiWorkerMirroredStrategy run on localhost, one row each of the
multi-worker issue (each worker a `python -m tests.trainer_utils` process, tiny model):

* SIGTERM to worker 1: both workers save the same step and exit 143 with one `stopped:` line;
  the restart resumes at exactly that step and finishes cleanly (exit 0, no error-level
  coordination lines, no tmp_worker/ folder);
* SIGKILL of worker 1: the chief stops within 60 s with one `error:` line naming worker 1 and
  the last checkpoint (at most the steps since that save are lost);
* the chief restarted alone: it logs whom it waits for and gives up after
  --startup_timeout with one line;
* SIGKILL of the chief: worker 1 stops with one line naming worker 0;
* SIGSTOP of the chief: worker 1's line names worker 0; thawed, the chief names worker 1;
  both exit within seconds;
* the shared output_dir on a small tmpfs filled up: the chief's line names the path and
  the kept checkpoint, worker 1's names the chief's error (not a lost worker), ckpt-5 and
  the state file unchanged;
* workers with separate output folders (the chief's has checkpoints, worker 1's is empty):
  both stop with one line asking for shared storage, and nothing is trained; the same for
  data_dirs whose train split markers differ;
* SIGTERM or SIGINT to the pid alone of the chief started without worker 1: it stops within
  seconds with exit 143 / 130 and one `stopped:` line;
* the wait for peers alone (no TensorFlow): it answers on the worker's own port meanwhile,
  gives up after its timeout and refuses a port in use;
* the startup watchdog alone (no TensorFlow): it names the missing peer and, on SIGTERM to
  the process group, ends the waiting worker with one line; it dies within seconds with a
  SIGKILLed worker and signals nothing; it signals only its parent with the start time
  recorded at launch;
* library level: a non-chief's throwaway checkpoint goes to local scratch, not output_dir; a
  worker's own full disk is not blamed on a peer; a frozen chief is named as worker 0; a
  broken cluster's worker exits right after its line, its exit handlers run; a stop signal
  after the line keeps the line's exit status.
"""
import json
import os
import re
import signal
import time

import pytest

from tests.conftest import fill_up, small_disk
from tests.test_distributed import _env, _free_ports, _log, _start, _stop

# Generous bounds: the CI machine runs other tests at the same time.
EXIT_WITHIN = 60


class Cluster:
    """Two workers on free loopback ports; `start` launches one worker's process."""

    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        ports = _free_ports(2)
        self.spec = {"worker": [f"127.0.0.1:{p}" for p in ports]}
        self.processes = []
        self.runs = 0

    def start(self, index, output_dir, *args):
        self.runs += 1
        env = _env(TF_CONFIG=json.dumps({"cluster": self.spec,
                                         "task": {"type": "worker", "index": index}}))
        log = self.tmp_path / f"run{self.runs}_worker{index}.log"
        process = _start(["--output_dir", str(output_dir), "--train_steps", "100000", *args],
                         env, log)
        process.log = log
        self.processes.append(process)
        return process

    def stop_all(self):
        for process in self.processes:
            _stop(process)


@pytest.fixture
def cluster(tmp_path):
    cluster = Cluster(tmp_path)
    yield cluster
    cluster.stop_all()


def _wait_for(process, pattern, timeout=240):
    """Waits until the process' log matches `pattern`; returns the match."""
    deadline = time.time() + timeout
    while True:
        match = re.search(pattern, _log(process.log, tail=10**6))
        if match:
            return match
        assert process.poll() is None, _log(process.log)
        assert time.time() < deadline, f"{pattern!r} not logged in {timeout} s"
        time.sleep(0.2)


def _exit_status(process, since):
    status = process.wait(timeout=EXIT_WITHIN + 60)
    assert time.time() - since < EXIT_WITHIN, _log(process.log)
    return status


def _last_line(process, label):
    """The process' last line, which must be its only `<label>: ` line, with no traceback."""
    log = _log(process.log, tail=10**6)
    assert "Traceback" not in log, log[-3000:]
    lines = [line for line in log.splitlines() if line.startswith(f"{label}: ")]
    assert len(lines) == 1 and log.rstrip().endswith(lines[0]), log[-3000:]
    return lines[0]


def _kill_and_expect_lost(victim, survivor):
    """SIGKILLs `victim`'s process group; `survivor` must exit 1 within EXIT_WITHIN with one
    `error:` line, which is returned."""
    os.killpg(victim.pid, signal.SIGKILL)
    killed = time.time()
    assert _exit_status(survivor, killed) == 1
    return _last_line(survivor, "error")


@pytest.mark.slow
def test_sigterm_saves_the_step_on_all_workers_and_the_restart_resumes_there(cluster, tmp_path):
    out = tmp_path / "run"
    workers = [cluster.start(i, out, "--save_checkpoints_steps", "1000") for i in range(2)]
    _wait_for(workers[1], r"step 3/100000")
    workers[1].send_signal(signal.SIGTERM)  # what a scheduler sends before preempting
    sent = time.time()
    assert [_exit_status(w, sent) for w in workers] == [143, 143]
    line = _last_line(workers[1], "stopped")
    step = int(re.search(r"at step (\d+);", line).group(1))
    assert line == (f"stopped: SIGTERM received: all workers saved {out}/ckpt-{step} at step "
                    f"{step}; start every worker again with the same command to resume at "
                    f"step {step}")
    assert _last_line(workers[0], "stopped") == line.replace(
        "SIGTERM received", "another worker received a stop signal (SIGTERM or SIGINT)")
    assert (out / f"ckpt-{step}.index").exists()

    restarted = [cluster.start(i, out, "--train_steps", str(step + 3)) for i in range(2)]
    for process in restarted:
        assert process.wait(timeout=300) == 0, _log(process.log)
        log = _log(process.log, tail=10**6)
        assert f"Resuming training at global step {step}:" in log
        assert json.loads(log.split("RESULT ", 1)[1].splitlines()[0])["step"] == step + 3
        # A clean finish: no coordination service errors, no stray folders.
        assert "Traceback" not in log and "StartAbort" not in log and "UNAVAILABLE" not in log
    assert (out / f"ckpt-{step + 3}.index").exists()
    assert not (out / "tmp_worker").exists()


@pytest.mark.slow
def test_lost_workers_partial_restart_and_separate_output_dirs(cluster, tmp_path):
    out = tmp_path / "run"
    every = ["--save_checkpoints_steps", "5"]
    workers = [cluster.start(i, out, *every) for i in range(2)]
    _wait_for(workers[0], r"Saved checkpoint .*ckpt-5\b")
    _wait_for(workers[0], r"step 7/100000")
    line = _kill_and_expect_lost(workers[1], workers[0])
    match = re.fullmatch(
        r"error: lost contact with worker 1 during step (\d+) \(\w+\); worker 0 stops: the last "
        rf"checkpoint is {out}/ckpt-(\d+) \(step (\d+)\); start every worker again with the "
        r"same command to resume there", line)
    assert match, line
    failed_step, saved = int(match.group(1)), int(match.group(2))
    # Only the steps since the last save are lost (all 5 when the kill cut the next save).
    assert saved >= 5 and failed_step - 1 - saved <= 5

    # The chief restarted alone waits for worker 1, says so, and gives up.
    alone = cluster.start(0, out, "--startup_timeout", "8")
    started = time.time()
    alone.wait(timeout=180)
    assert time.time() - started < 150
    log = _log(alone.log)
    assert f"worker 0 waits for worker 1 ({cluster.spec['worker'][1]})" in log
    assert _last_line(alone, "error") == (
        f"error: worker 0 gave up after 8 s waiting for worker 1 ({cluster.spec['worker'][1]}): "
        "start every worker of TF_CONFIG (the same command on each), or raise "
        "--worker_startup_timeout_secs")

    # Both again: they resume at the last checkpoint; then the chief dies.
    workers = [cluster.start(i, out, *every) for i in range(2)]
    _wait_for(workers[1], rf"Resuming training at global step {saved}:")
    _wait_for(workers[1], rf"step {saved + 2}/100000")
    assert _kill_and_expect_lost(workers[0], workers[1]).startswith(
        "error: lost contact with worker 0 during step ")

    # Hosts without shared storage: worker 1's output_dir is its own, empty folder.
    workers = [cluster.start(0, out, *every), cluster.start(1, tmp_path / "local1", *every)]
    for process in workers:
        assert process.wait(timeout=300) == 1, _log(process.log)
        line = _last_line(process, "error")
        assert re.fullmatch(
            r"error: the workers restored different checkpoints \(worker 0: step \d+, worker 1: "
            r"step 0\): --output_dir must be the same shared storage for all workers \(a "
            r"network file system or a bucket\), not a local folder per host", line), line
    assert not (tmp_path / "local1").exists() or not list((tmp_path / "local1").glob("ckpt-*"))

    # The same output_dir but data generated separately: the train split's markers differ.
    for index in range(2):
        (tmp_path / f"data{index}").mkdir()
        (tmp_path / f"data{index}" / "reverse_standin.train.complete.json").write_text(
            json.dumps({"split": "train", "shards": [{"name": "x", "bytes": index}]}))
    workers = [cluster.start(i, out, *every, "--data_dir", str(tmp_path / f"data{i}"))
               for i in range(2)]
    for process in workers:
        assert process.wait(timeout=300) == 1, _log(process.log)
        assert _last_line(process, "error") == (
            "error: the workers read different training data (the train split's datagen "
            "marker differs): --data_dir must be the same shared storage for all workers (a "
            "network file system or a bucket), not a local folder per host")


@pytest.mark.slow
def test_a_frozen_chief_is_named_and_both_workers_exit_within_seconds(cluster, tmp_path):
    out = tmp_path / "run"
    workers = [cluster.start(i, out, "--save_checkpoints_steps", "1000") for i in range(2)]
    _wait_for(workers[1], r"step 3/100000")
    os.kill(workers[0].pid, signal.SIGSTOP)  # a frozen chief: its ports still accept
    stopped = time.time()
    try:
        assert _exit_status(workers[1], stopped) == 1
    finally:
        os.kill(workers[0].pid, signal.SIGCONT)
    assert re.fullmatch(
        r"error: lost contact with worker 0 during step \d+ \(\w+\); worker 1 stops: no "
        r"checkpoint was saved yet; start every worker again with the same command to resume "
        r"there", _last_line(workers[1], "error"))
    # Thawed, the chief finds its peer gone: one line naming it, and out within seconds.
    continued = time.time()
    assert _exit_status(workers[0], continued) == 1
    assert re.fullmatch(
        r"error: lost contact with worker 1 during step \d+ \(\w+\); worker 0 stops: no "
        r"checkpoint was saved yet; start every worker again with the same command to resume "
        r"there", _last_line(workers[0], "error"))


def _checkpoint_files(out, step):
    """{name: bytes} of checkpoint `step`'s files and the state file in `out`."""
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())
            if p.name.startswith(f"ckpt-{step}.") or p.name == "checkpoint"}


@pytest.mark.slow
def test_a_full_shared_disk_stops_the_chief_naming_what_was_kept_and_its_peer_naming_why(
        cluster, tmp_path):
    with small_disk(tmp_path / "disk", "4m") as disk:
        out = disk / "run"
        workers = [cluster.start(i, out, "--save_checkpoints_steps", "5") for i in range(2)]
        _wait_for(workers[0], r"Saved checkpoint .*ckpt-5\b")
        fill_up(disk)
        filled = time.time()
        # Five tiny steps can end before the disk is full: ckpt-10 may then be saved too. The
        # newest complete checkpoint at the fill is the one that must be kept and named.
        on_disk = {p.name: p.read_bytes() for p in sorted(out.iterdir())
                   if p.name.startswith("ckpt-") or p.name == "checkpoint"}
        assert [_exit_status(w, filled) for w in workers] == [1, 1]
        step = int(re.search(r'model_checkpoint_path: "ckpt-(\d+)"',
                             (out / "checkpoint").read_text())[1])
        assert step % 5 == 0 and step >= 5, step
        # The save of the next checkpoint or an event file's write fails first, whichever
        # reaches the full disk first: either way the path and the kept checkpoint are named.
        chief = _last_line(workers[0], "error")
        path = re.escape(f"{out}/") + r"\S+"
        assert re.fullmatch(
            rf"error: no space left on device: {path}; checkpoint ckpt-{step} kept; "
            rf"ckpt-{step + 5} not written \(its partial files removed\); make room in "
            rf"--output_dir={re.escape(str(out))} and run the same command to resume at step "
            rf"{step}", chief) or re.fullmatch(
            rf"error: no space left on device: {path}; worker 0 stops: the last checkpoint is "
            rf"{re.escape(str(out))}/ckpt-{step} \(step {step}\); make room in \(or make "
            rf"writable\) --output_dir={re.escape(str(out))}, then start every worker again "
            "with the same command to resume there", chief), chief
        reason = chief.split("; ")[0][len("error: "):]
        assert _last_line(workers[1], "error") == (
            f"error: worker 0 stopped on its own error ({reason}); worker 1 stops with it: the "
            f"last checkpoint is {out}/ckpt-{step} (step {step}); fix that (worker 0's log says "
            "how), then start every worker again with the same command to resume there")
        assert "lost contact" not in _log(workers[1].log, tail=10**6)
        # Nothing lost, nothing half-written: the kept checkpoint and the state file as they
        # were when the disk filled, no trace of the next one, no non-chief copies.
        kept = _checkpoint_files(out, step)
        assert kept == {name: on_disk[name] for name in kept}
        assert not [p.name for p in out.iterdir()
                    if f"ckpt-{step + 5}" in p.name or "tmp" in p.name]


@pytest.mark.slow
@pytest.mark.parametrize("signum, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_stop_signal_to_the_pid_of_a_worker_waiting_for_its_peers_stops_it_in_one_line(
        cluster, tmp_path, signum, status):
    chief = cluster.start(0, tmp_path / "run")  # worker 1 is never started
    _wait_for(chief, rf"worker 0 waits for worker 1 \({cluster.spec['worker'][1]}\)")
    os.kill(chief.pid, signum)  # the pid alone, not its process group
    sent = time.time()
    assert chief.wait(timeout=60) == status, _log(chief.log)
    assert time.time() - sent < 20
    assert _last_line(chief, "stopped") == (
        f"stopped: {signum.name} while worker 0 waited for the other workers to start; "
        "nothing was trained or saved")
    assert not list((tmp_path / "run").glob("ckpt-*"))


def _probe_listener():
    """A listening loopback socket, standing in for a peer that has started."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    return listener


def test_wait_for_peers_answers_on_its_port_returns_once_peers_start_and_gives_up():
    import threading

    from t2t_lite.errors import RunStopped
    from t2t_lite.training import startup_watchdog

    own, missing = _free_ports(2)
    peer = _probe_listener()
    peer_address = f"127.0.0.1:{peer.getsockname()[1]}"
    seen = []
    # While it waits for the missing peer, this worker's own port answers its peers.
    prober = threading.Timer(0.3, lambda: seen.append(startup_watchdog.unreachable(
        {"worker 0": f"127.0.0.1:{own}"})))
    prober.start()
    with pytest.raises(RunStopped) as stopped:
        startup_watchdog.wait_for_peers(
            "worker 0", f"127.0.0.1:{own}",
            {"worker 1": peer_address, "worker 2": f"127.0.0.1:{missing}"}, 2, 1)
    prober.join()
    assert seen == [[]]
    assert stopped.value.exit_code == 137 and stopped.value.label == "error"
    assert str(stopped.value) == (
        f"worker 0 gave up after 2 s waiting for worker 2 (127.0.0.1:{missing}): start every "
        "worker of TF_CONFIG (the same command on each), or raise --worker_startup_timeout_secs")
    # The port is free again for TensorFlow's server, and a started peer ends the wait.
    assert startup_watchdog.unreachable({"worker 0": f"127.0.0.1:{own}"}) == [
        f"worker 0 (127.0.0.1:{own})"]
    assert startup_watchdog.wait_for_peers(
        "worker 0", f"127.0.0.1:{own}", {"worker 1": peer_address}, 60, 30) < 30
    peer.close()


def test_wait_for_peers_refuses_a_port_in_use_in_one_line():
    from t2t_lite.errors import UserError
    from t2t_lite.training import startup_watchdog

    taken = _probe_listener()
    address = f"127.0.0.1:{taken.getsockname()[1]}"
    with pytest.raises(UserError, match=rf"^worker 0's address {address} of TF_CONFIG cannot "
                                        r"be used: Address already in use \(is another "
                                        rf"process using port {taken.getsockname()[1]}\?\)$"):
        startup_watchdog.wait_for_peers("worker 0", address, {}, 60, 30)
    taken.close()


def _worker_with_watchdog(peers, timeout=60, interval=0.5):
    """A stand-in worker (no TensorFlow) that launches its startup watchdog, prints the
    watchdog's pid and sleeps; both write to the worker's stderr pipe."""
    import subprocess
    import sys

    from tests.test_distributed import REPO

    code = ("import json, sys, time; from t2t_lite.training import startup_watchdog as w; "
            f"p = w.launch('worker 0', json.loads(sys.argv[1]), {timeout}, {interval}); "
            "print(p.pid, flush=True); time.sleep(120)")
    worker = subprocess.Popen([sys.executable, "-c", code, json.dumps(peers)], cwd=REPO,
                              env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    return worker, int(worker.stdout.readline())


def _gone_within(pid, seconds):
    """Whether process `pid` (not a child of this one) has exited within `seconds`."""
    from t2t_lite.training import startup_watchdog

    deadline = time.time() + seconds
    while time.time() < deadline:
        if startup_watchdog.process_start_time(pid) is None:
            return True
        time.sleep(0.1)
    return False


def test_startup_watchdog_logs_the_missing_peer_and_ends_the_worker_on_sigterm():
    port = _free_ports(1)[0]
    worker, watchdog = _worker_with_watchdog({"worker 1": f"127.0.0.1:{port}"})
    try:
        first = worker.stderr.readline()
        assert first.startswith(f"worker 0 waits for worker 1 (127.0.0.1:{port}) (")
        os.kill(watchdog, signal.SIGTERM)  # a scheduler signals the worker's process group
        assert worker.wait(timeout=30) == -signal.SIGKILL
        assert _gone_within(watchdog, 10)
        assert worker.stderr.read().splitlines()[-1] == (
            "stopped: SIGTERM while worker 0 waited for the other workers to start; nothing "
            "was trained or saved")
    finally:
        worker.kill()
        worker.wait()


def test_startup_watchdog_dies_with_its_worker_and_signals_nothing():
    port = _free_ports(1)[0]
    worker, watchdog = _worker_with_watchdog({"worker 1": f"127.0.0.1:{port}"}, timeout=3)
    try:
        assert worker.stderr.readline().startswith("worker 0 waits for worker 1 ")
        worker.kill()  # SIGKILL while TensorFlow would be connecting
        killed = time.time()
        worker.wait()
        assert _gone_within(watchdog, 5), "the watchdog outlived its worker"
        assert time.time() - killed < 5
        # Nothing after the kill: no more waiting lines, no give-up line, no signal sent.
        assert worker.stderr.read() == ""
    finally:
        worker.kill()
        worker.wait()


def test_the_watchdog_signals_only_its_own_worker_verified_by_start_time():
    import subprocess

    from t2t_lite.training import startup_watchdog

    parent = os.getppid()
    assert startup_watchdog.is_worker(parent, startup_watchdog.process_start_time(parent))
    # The same pid with another start time: a later process that reuses the worker's pid.
    assert not startup_watchdog.is_worker(
        parent, startup_watchdog.process_start_time(parent) + 1)
    first = subprocess.Popen(["sleep", "30"])
    time.sleep(0.05)
    second = subprocess.Popen(["sleep", "30"])
    try:
        start = startup_watchdog.process_start_time(first.pid)
        assert start is not None and start != startup_watchdog.process_start_time(second.pid)
        # Alive, with its start time, but not the watchdog's parent: never signalled, even at
        # the timeout; watch returns at once.
        began = time.time()
        startup_watchdog.watch(first.pid, "worker 0", {}, 0.1, 0.05, start)
        assert time.time() - began < 1
        assert first.poll() is None
    finally:
        for process in (first, second):
            process.kill()
            process.wait()
    assert startup_watchdog.process_start_time(first.pid) is None


def test_a_non_chief_writes_its_throwaway_checkpoint_to_local_scratch_only(tmp_path):
    import tempfile

    from t2t_lite.training import distribution, trainer_lib
    from tests.trainer_utils import ReverseProblem, model_fn, tiny_hparams

    hparams = tiny_hparams()
    out = tmp_path / "run"
    trainer = trainer_lib.Trainer(model_fn(hparams), hparams, ReverseProblem(), "",
                                  trainer_lib.RunConfig(output_dir=str(out)))
    trainer.chief = False  # as worker 1 of a cluster
    manager = trainer._checkpoint_manager()
    assert manager.directory == distribution.worker_scratch_dir()
    assert os.path.dirname(manager.directory) == tempfile.gettempdir()
    trainer._save(manager)
    # Nothing in the shared output_dir (no tmp_worker/ copy), and the scratch copy is gone.
    assert not out.exists() or list(out.iterdir()) == []
    assert not os.path.exists(distribution.worker_scratch_dir())


def test_a_workers_own_full_disk_is_not_blamed_on_a_lost_worker():
    import tensorflow as tf

    from t2t_lite.training import distribution

    own = tf.errors.ResourceExhaustedError(None, None, "/mnt/run/ckpt-4.data; No space left "
                                                       "on device")
    assert distribution.own_disk_error(own) == "No space left on device"
    # TensorFlow's errors of this task's own ops name it.
    mine = tf.errors.ResourceExhaustedError(None, None, "{{function_node __wrapped__SaveV2_"
                                            "device_/job:worker/replica:0/task:0/device:CPU:0}"
                                            "} /mnt/run/ckpt-4.data; No space left on device")
    assert distribution.own_disk_error(mine, "worker:0") == "No space left on device"
    assert distribution.own_disk_error(mine, "worker:1") is None
    assert distribution.own_disk_error(OSError(30, "Read-only file system")) == (
        "Read-only file system")
    # Reported by another task: that worker's disk, not this one's.
    peer = tf.errors.UnavailableError(None, None, "Error reported from /job:worker/replica:0/"
                                                  "task:0: No space left on device")
    assert distribution.own_disk_error(peer) is None
    assert distribution.own_disk_error(tf.errors.UnavailableError(None, None, "gone")) is None
    # A peer's own error, as the coordination service's abort carries it (tell_peers_why).
    told = tf.errors.InternalError(None, None, "Collective ops is aborted by: t2t_lite: worker 0 "
                                               "stops on its own error: no space left on "
                                               "device: /r/ckpt-10_temp/x\nThe error could be "
                                               "from a previous operation.")
    assert distribution.peer_stopped(told) == ("worker 0",
                                               "no space left on device: /r/ckpt-10_temp/x")
    assert distribution.peer_stopped(peer) is None


@pytest.mark.parametrize("raise_it", [
    'raise RunStopped("lost contact with worker 0 during step 3", 1, exit_now=True)',
    # Any user error of a worker that joined a cluster (create_strategy says so).
    ('errors.exit_right_after_the_line(); raise errors.UserError("lost contact with worker 0 '
    'during step 3")')])
def test_a_lost_worker_exits_right_after_its_line_running_the_exit_handlers(tmp_path,
                                                                            raise_it):
    import subprocess
    import sys

    from tests.test_distributed import REPO

    # A thread that never ends stands in for TensorFlow's teardown waiting for a lost peer.
    code = f"""if True:
        import atexit, threading, time
        from t2t_lite import errors
        from t2t_lite.errors import RunStopped, report_user_errors
        atexit.register(lambda: open({str(tmp_path / "released")!r}, "w").close())
        threading.Thread(target=time.sleep, args=(600,)).start()
        with report_user_errors():
            {raise_it}
    """
    started = time.time()
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=_env(),
                            capture_output=True, text=True, timeout=60, check=False)
    assert time.time() - started < 30
    assert result.returncode == 1
    assert result.stderr == "error: lost contact with worker 0 during step 3\n"
    assert (tmp_path / "released").exists()  # e.g. the run lock's release


@pytest.mark.parametrize("in_cluster", [True, False])
def test_a_stop_signal_after_the_line_keeps_the_stated_exit_status(in_cluster):
    import subprocess
    import sys

    from tests.test_distributed import REPO

    # A slow exit handler stands in for the tail after the line (TensorFlow's teardown).
    code = f"""if True:
        import atexit, time
        from t2t_lite import errors
        atexit.register(time.sleep, 60)
        if {in_cluster}:
            errors.exit_right_after_the_line()
        with errors.report_user_errors():
            raise errors.UserError("lost contact with worker 0 during step 3")
    """
    process = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=_env(),
                               stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr.readline() == "error: lost contact with worker 0 during step 3\n"
        time.sleep(1)
        process.send_signal(signal.SIGTERM)  # in the tail
        sent = time.time()
        assert process.wait(timeout=30) == 1  # the line's status, not a silent 143
        assert time.time() - sent < 10
        assert process.stderr.read() == ""
    finally:
        process.kill()
        process.wait()


def test_a_frozen_peer_that_breaks_the_cluster_is_named_as_the_coordination_leader():
    import tensorflow as tf

    from t2t_lite.training import distribution

    chief = _probe_listener()  # a SIGSTOPped process's port still accepts connections
    spec = tf.train.ClusterSpec({"worker": [f"127.0.0.1:{chief.getsockname()[1]}",
                                            "127.0.0.1:1"]})

    class Resolver:
        task_type, task_id = "worker", 1

        def cluster_spec(self):
            return spec

    try:
        heartbeat = tf.errors.UnavailableError(None, None, "heartbeat timeout to the leader")
        assert distribution.lost_peers(Resolver(), heartbeat) == "worker 0"
        named = tf.errors.AbortedError(None, None, "from /job:worker/replica:0/task:0: gone")
        assert distribution.lost_peers(Resolver(), named) == "worker 0"
        Resolver.task_id = 0  # the leader itself: whoever's port no longer answers
        assert distribution.lost_peers(Resolver(), heartbeat) == "worker 1"
    finally:
        chief.close()
