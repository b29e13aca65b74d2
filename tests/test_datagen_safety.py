"""Datagen survives being killed at any moment, and training refuses incomplete or damaged data.
Datagen owns its data_dir (one at a time) and never keeps data made from other inputs.

Crashes are real SIGKILLs of `run.py --mode=datagen`, placed with the test hook
`T2T_LITE_DATAGEN_KILL_AT` (generator_utils.kill_point): while the vocab is stored, while
examples are written, between shard renames, during the shuffle, and between the splits'
completion markers.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys

import pytest

from t2t_lite import registry
from t2t_lite.data_generators import data_marker, generator_utils
from t2t_lite.errors import DataError
from tests.conftest import REPO_ROOT, error_line

PROBLEM = "translate_files"
KILL_POINTS = ("vocab", "generate", "rename", "shuffle", "marker")


def _run(cwd, *args, kill_at=None, timeout=300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    env.pop(data_marker.KILL_AT_ENV, None)
    if kill_at:
        env[data_marker.KILL_AT_ENV] = kill_at
    return subprocess.run([sys.executable, str(REPO_ROOT / "run.py"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, wmt_toy_dir):
    """A working directory with small parallel files, and a decoy of the same names in the
    tmp_dir (relative source flags must be read from the current directory, not tmp_dir)."""
    root = tmp_path_factory.mktemp("corpus")
    for name, source, lines in (("tr.en", "train.en", 240), ("tr.de", "train.de", 240),
                                ("dv.en", "dev.en", 30), ("dv.de", "dev.de", 30)):
        text = (wmt_toy_dir / source).read_text(encoding="utf-8").split("\n")[:lines]
        (root / name).write_text("\n".join(text) + "\n", encoding="utf-8")
    (root / "raw").mkdir()
    for name in ("tr.en", "tr.de"):
        (root / "raw" / name).write_text("decoyword " * 50 + "\n", encoding="utf-8")
    return root


def _datagen(corpus, data_dir, *extra, kill_at=None, train=("tr.en", "tr.de"), vocab=300):
    return _run(corpus, "--mode=datagen", f"--problem={PROBLEM}", f"--data_dir={data_dir}",
                "--tmp_dir=raw", f"--train_src={train[0]}", f"--train_tgt={train[1]}",
                "--dev_src=dv.en", "--dev_tgt=dv.de", f"--approx_vocab_size={vocab}", *extra,
                kill_at=kill_at)


def _example(record: bytes) -> tuple:
    import tensorflow as tf

    feature = tf.train.Example.FromString(record).features.feature
    return tuple(sorted((name, tuple(feature[name].int64_list.value)) for name in feature))


def _contents(data_dir) -> dict:
    """Vocab text and, per split, the sorted records of all its shards."""
    base = registry.problem(PROBLEM).dataset_filename()
    result = {"vocab": (data_dir / "vocab.translate_files.300.subwords").read_text()}
    for tag in ("train", "dev"):
        files = data_marker.final_shards(str(data_dir), base, tag)
        # Parsed: a proto map's serialized order can differ from process to process.
        result[tag] = sorted(_example(r) for f in files for r in generator_utils.read_records(f))
        result[tag + " shards"] = len(files)
    leftovers = [f for f in os.listdir(data_dir) if "unshuffled" in f or "incomplete" in f]
    result["leftovers"] = leftovers
    return result


@pytest.fixture(scope="module")
def reference(corpus):
    data_dir = corpus / "reference"
    result = _datagen(corpus, data_dir.name)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "done in" in result.stdout and "train 240 examples in 3 shard(s)" in result.stdout
    return _contents(data_dir)


def test_relative_source_files_are_read_from_the_current_directory(reference):
    # The vocab was built from ./tr.en, not from the decoy raw/tr.en.
    assert "decoyword" not in reference["vocab"]
    assert len(reference["train"]) == 240 and len(reference["dev"]) == 30
    assert reference["train shards"] == 3 and reference["leftovers"] == []


@pytest.mark.slow
@pytest.mark.parametrize("point", KILL_POINTS)
def test_sigkill_at_any_moment_then_rerun_gives_the_complete_data(corpus, reference, point):
    data_dir = corpus / f"killed_at_{point}"
    killed = _datagen(corpus, data_dir.name, kill_at=point)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert "done in" not in killed.stdout
    again = _datagen(corpus, data_dir.name)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "done in" in again.stdout
    assert _contents(data_dir) == reference
    base = registry.problem(PROBLEM).dataset_filename()
    for tag in ("train", "dev"):
        assert data_marker.split_is_complete(str(data_dir), base, tag)
    # A third run finds everything complete and touches nothing.
    third = _datagen(corpus, data_dir.name)
    assert third.returncode == 0 and "already complete" in third.stdout


@pytest.mark.slow
def test_a_killed_datagen_worker_is_one_line_and_a_rerun_completes(corpus, reference):
    data_dir = corpus / "worker_killed"
    killed = _datagen(corpus, data_dir.name, "--num_datagen_workers=2", kill_at="worker")
    line = error_line(killed)
    assert re.fullmatch(
        r"error: a datagen worker process \(one of --num_datagen_workers=2\) died before its "
        r"shards were written \(pid \d+, killed by SIGKILL\); this split's shards were "
        r"removed, the data made before it is kept: run the same command again \(fewer "
        r"--num_datagen_workers need less memory\)", line), line
    left = os.listdir(data_dir) if data_dir.exists() else []  # a new data_dir is removed
    assert not [f for f in left if "-train-" in f or "incomplete" in f], left
    again = _datagen(corpus, data_dir.name, "--num_datagen_workers=2")
    assert again.returncode == 0, again.stderr[-3000:]
    assert _contents(data_dir) == reference


@pytest.mark.slow
def test_training_refuses_the_data_of_a_datagen_killed_in_the_shuffle(corpus):
    data_dir = corpus / "killed_in_shuffle"
    assert _datagen(corpus, data_dir.name, kill_at="shuffle").returncode == -signal.SIGKILL
    result = _run(corpus, "--mode=train", f"--problem={PROBLEM}", f"--data_dir={data_dir.name}",
                  "--output_dir=never_written", "--hparams_set=transformer_tiny",
                  "--train_steps=1")
    assert result.returncode == 1
    lines = result.stderr.strip().split("\n")
    assert lines[-1] == (
        f"error: The train split of translate_files in {data_dir.name} is incomplete: 1 of 3 "
        "shards and no completion marker (an interrupted datagen?); datagen completes it: "
        f"python run.py --mode=datagen --problem=translate_files --data_dir={data_dir.name}")
    assert "Traceback" not in result.stderr
    assert not (corpus / "never_written").exists()


def _copy_data(source, target):
    target.mkdir()
    for name in os.listdir(source):
        (target / name).write_bytes((source / name).read_bytes())


def test_a_truncated_shard_is_named_before_training(corpus, reference):
    data_dir = corpus / "truncated"
    _copy_data(corpus / "reference", data_dir)
    shard = data_dir / "translate_files-train-00002-of-00003"
    shard.write_bytes(shard.read_bytes()[:100])
    problem = registry.problem(PROBLEM)
    with pytest.raises(DataError, match=rf"{shard} has 100 bytes where datagen wrote \d+"):
        problem.data_filenames(str(data_dir), "train")
    assert len(problem.data_filenames(str(data_dir), "eval")) == 1  # dev is intact


@pytest.mark.slow
def test_a_truncated_shard_without_marker_is_named_when_read(corpus, reference):
    # t2t-datagen's output has no marker: the size check cannot run, the read error names
    # the file.
    data_dir = corpus / "t2t_style"
    _copy_data(corpus / "reference", data_dir)
    for marker in data_dir.glob("*.complete.json"):
        marker.unlink()
    shard = data_dir / "translate_files-train-00001-of-00003"
    shard.write_bytes(shard.read_bytes()[:-5])
    result = _run(corpus, "--mode=train", f"--problem={PROBLEM}", f"--data_dir={data_dir.name}",
                  "--output_dir=t2t_style_run", "--hparams_set=transformer_tiny",
                  "--train_steps=40", "--hparams=batch_size=128")
    assert result.returncode == 1, result.stderr[-3000:]
    assert result.stderr.strip().split("\n")[-1].startswith(
        f"error: Damaged data: {data_dir.name}/translate_files-train-00001-of-00003: "
        "truncated TFRecord")
    assert "no datagen completion marker for the train split" in result.stderr


def test_marker_lists_every_shard_with_size_and_records(corpus, reference):
    marker = json.loads((corpus / "reference" / "translate_files.train.complete.json").read_text())
    assert marker["split"] == "train" and len(marker["shards"]) == 3
    assert sum(shard["records"] for shard in marker["shards"]) == 240
    first = marker["shards"][0]
    assert first["name"] == "translate_files-train-00000-of-00003"
    assert first["bytes"] == (corpus / "reference" / first["name"]).stat().st_size


def test_missing_shards_and_record_counts(tmp_path):
    assert data_marker.missing_shards([f"p-train-{i:05d}-of-00004" for i in (0, 2)]) == (4, [1, 3])
    assert data_marker.missing_shards(["p-train-00000-of-00001"]) == (1, [])
    assert data_marker.missing_shards(["p-train.custom"]) is None
    path = tmp_path / "records"
    generator_utils.write_records([b"a", b"bc", b""], str(path))
    assert data_marker.count_records(str(path)) == 3
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(ValueError, match="truncated TFRecord of 0 bytes at byte"):
        data_marker.count_records(str(path))


def _files(data_dir) -> dict:
    return {name: (data_dir / name).read_bytes() for name in sorted(os.listdir(data_dir))}


@pytest.mark.slow
@pytest.mark.parametrize("change, expected", [
    ({"train": ("tr.de", "tr.en")},
     r"--train_src \S*tr\.en -> \S*tr\.de \(sha256 \w{12} -> \w{12}\); --train_tgt "),
    ({"vocab": 400}, r"--approx_vocab_size 300 -> 400"),
])
def test_rerun_on_other_inputs_is_refused_and_keeps_the_data(corpus, reference, tmp_path,
                                                             change, expected):
    data_dir = tmp_path / "data"
    _copy_data(corpus / "reference", data_dir)
    before = _files(data_dir)
    line = error_line(_datagen(corpus, data_dir, **change))
    assert re.match(rf"error: --data_dir={data_dir} holds translate_files data made from "
                    rf"other inputs: {expected}.*; regenerate it with --overwrite_data", line)
    assert _files(data_dir) == before


@pytest.mark.slow
def test_overwrite_data_regenerates_from_the_new_inputs(corpus, reference, tmp_path):
    data_dir = tmp_path / "data"
    _copy_data(corpus / "reference", data_dir)
    result = _datagen(corpus, data_dir, "--overwrite_data", vocab=400)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "done in" in result.stdout
    # The old vocab is gone with the old data (training would find two candidates).
    vocabs = sorted(f for f in os.listdir(data_dir) if f.startswith("vocab."))
    assert vocabs == ["vocab.translate_files.400.subwords"]
    marker = json.loads((data_dir / "translate_files.train.complete.json").read_text())
    assert marker["made_from"]["settings"]["--approx_vocab_size"] == 400
    assert marker["vocab_file"] == "vocab.translate_files.400.subwords"
    source = marker["made_from"]["inputs"]["--train_src"]
    assert source["path"] == str(corpus / "tr.en") and source["lines"] == 240
    again = _datagen(corpus, data_dir, vocab=400)
    assert again.returncode == 0 and "already complete" in again.stdout


@pytest.mark.slow
def test_old_marker_without_inputs_is_accepted_with_a_warning(corpus, reference, tmp_path):
    data_dir = tmp_path / "data"
    _copy_data(corpus / "reference", data_dir)
    for path in data_dir.glob("*.complete.json"):
        marker = json.loads(path.read_text())
        del marker["made_from"], marker["vocab_file"]
        path.write_text(json.dumps(marker))
    before = _files(data_dir)
    result = _datagen(corpus, data_dir, vocab=400)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "already complete" in result.stdout
    assert "do not record what the data was made from" in result.stderr
    assert _files(data_dir) == before


@pytest.mark.slow
def test_parallel_files_of_different_lengths_are_one_line_before_any_work(corpus, tmp_path):
    short = tmp_path / "short.de"
    short.write_text("".join((corpus / "tr.de").read_text().splitlines(True)[:239]))
    data_dir = tmp_path / "data"
    line = error_line(_datagen(corpus, data_dir, train=("tr.en", str(short))))
    assert line == (f"error: Parallel files differ in length: --train_src={corpus / 'tr.en'} "
                    f"has 240 lines but --train_tgt={short} has 239. Line i of one must "
                    "translate line i of the other.")
    assert not data_dir.exists() or not os.listdir(data_dir)


@pytest.mark.slow
def test_a_second_datagen_refuses_while_one_holds_the_data_dir(corpus, reference, tmp_path):
    from t2t_lite.utils import run_lock

    data_dir = tmp_path / "data"
    # This test process is the live datagen holding the lock.
    holder = run_lock.RunLock(str(data_dir), run_lock.DATAGEN_LOCK_NAME, "datagen",
                              "--data_dir").acquire()
    try:
        line = error_line(_datagen(corpus, data_dir))
    finally:
        holder.release()
    assert line.startswith(f"error: {data_dir} is in use by another datagen (pid {os.getpid()} "
                           "on host ")
    assert "choose another --data_dir" in line
    assert os.listdir(data_dir) == []
    # A lock left by a killed datagen (a pid that no longer runs) is taken over.
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    lock_file = data_dir / run_lock.DATAGEN_LOCK_NAME
    lock_file.write_text(json.dumps({"host": socket.gethostname(), "pid": int(dead.stdout),
                                     "start_time": 0}))
    result = _datagen(corpus, data_dir)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Taking over the stale lock" in result.stderr and "done in" in result.stdout
    assert not lock_file.exists()
    assert _contents(data_dir) == _contents(corpus / "reference")


def test_an_input_named_like_the_shards_in_data_dir_is_refused(corpus, tmp_path):
    from t2t_lite.data_generators import datagen
    from t2t_lite.errors import UserError

    data_dir = tmp_path / "data"
    data_dir.mkdir()
    source = data_dir / "translate_files-train.en"  # matches the shards' glob: removed
    source.write_bytes((corpus / "tr.en").read_bytes())
    problem = datagen.configure_problem(
        PROBLEM, 300, {"train_src": str(source), "train_tgt": str(corpus / "tr.de")})
    inputs = datagen.made_from(problem, str(tmp_path), {})
    with pytest.raises(UserError, match=rf"^--train_src={source} is also one of datagen's "
                                        r"outputs in --data_dir="):
        datagen.generate_problem_data(problem, str(data_dir), str(tmp_path), made_from=inputs)
    assert os.listdir(data_dir) == [source.name]


def test_made_from_changes_names_each_change_and_ignores_a_moved_file():
    def record(vocab, **inputs):
        return {"problem": PROBLEM, "settings": {"--approx_vocab_size": vocab},
                "inputs": {label: {"path": path, "sha256": sha}
                           for label, (path, sha) in inputs.items()}}

    old = record(300, train_src=("/a/tr.en", "1" * 64), dev_src=("/a/dv.en", "2" * 64))
    moved = record(300, train_src=("/b/tr.en", "1" * 64), dev_src=("/a/dv.en", "2" * 64))
    assert data_marker.made_from_changes(old, moved) == []
    new = record(400, train_src=("/a/tr.en", "3" * 64), dev_tgt=("/a/dv.de", "4" * 64))
    assert data_marker.made_from_changes(old, new) == [
        "--approx_vocab_size 300 -> 400", "dev_src /a/dv.en no longer read",
        "dev_tgt /a/dv.de added", f"train_src /a/tr.en changed (sha256 {'1' * 12} -> {'3' * 12})"]
