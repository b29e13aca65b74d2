"""A newcomer's commands: each missing optional extra is one `error:` line naming the extra and
the install command that fits the installation (exit 1), `--help` names the command typed,
and no stretch of a run is silent for long (the heartbeat; the log-gap tests of the default
run and of export)."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time

import pytest

from t2t_lite.errors import UserError
from t2t_lite.utils import command, extras, heartbeat
from tests.conftest import REPO_ROOT
from tests.run_py import env

# A sitecustomize that makes the modules named in T2T_TEST_BLOCKED unimportable, as if their
# distributions were not installed (import and importlib.util.find_spec both fail).
BLOCKER = '''
import os
import sys

BLOCKED = set(filter(None, os.environ.get("T2T_TEST_BLOCKED", "").split(",")))


class _NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NotInstalled())
'''


@pytest.fixture(scope="module")
def blocker(tmp_path_factory) -> pathlib.Path:
    folder = tmp_path_factory.mktemp("blocker")
    (folder / "sitecustomize.py").write_text(BLOCKER, encoding="utf-8")
    return folder


def _run(blocker: pathlib.Path, blocked: str, cwd, *args: str) -> subprocess.CompletedProcess:
    """`python run.py args` with the modules `blocked` (comma-separated) not installed."""
    values = env()
    values["PYTHONPATH"] = os.pathsep.join([str(blocker), values.get("PYTHONPATH", "")])
    values["T2T_TEST_BLOCKED"] = blocked
    return subprocess.run([sys.executable, str(REPO_ROOT / "run.py"), *args], cwd=cwd,
                          env=values, capture_output=True, text=True, timeout=300, check=False)


# (the modules made missing, run.py's flags, the extra, what the line says needs it)
MISSING = [
    ("fastapi", ["--mode=serve", "--output_dir=run"], "serve", "--mode=serve", "fastapi"),
    ("uvicorn,prometheus_client", ["--mode=serve", "--output_dir=run"], "serve",
     "--mode=serve", "uvicorn"),
    ("matplotlib", ["--mode=plot", "--output_dir=run"], "viz", "--mode=plot", "matplotlib"),
    ("matplotlib", ["--mode=attention", "--output_dir=run", "--decode_from_file=in.txt"],
     "viz", "--mode=attention", "matplotlib"),
    ("ctranslate2", ["--mode=decode", "--decode_engine=ctranslate2", "--output_dir=run"],
     "ctranslate2", "--mode=decode --decode_engine=ctranslate2", "ctranslate2"),
    ("ctranslate2", ["--mode=export", "--export_format=ctranslate2", "--output_dir=run"],
     "ctranslate2", "--mode=export --export_format=ctranslate2", "ctranslate2"),
    ("ctranslate2", ["--mode=serve", "--decode_engine=ctranslate2", "--output_dir=run"],
     "ctranslate2", "--mode=serve --decode_engine=ctranslate2", "ctranslate2"),
    ("tensorflow_text", ["--mode=export", "--export_subword_segmenter=tensorflow_text",
                         "--output_dir=run"],
     "text", "--export_subword_segmenter=tensorflow_text", "tensorflow_text"),
    ("sentencepiece", ["--mode=datagen", "--problem=translate_files", "--data_dir=data",
                       "--tmp_dir=tmp", "--vocab_type=sentencepiece"],
     "sentencepiece", "--vocab_type=sentencepiece", "sentencepiece"),
]


@pytest.mark.parametrize("blocked,args,extra,needed_for,module", MISSING,
                         ids=[f"{m[2]}:{m[1][0]}" for m in MISSING])
def test_a_missing_extra_is_one_line_and_exit_1(blocker, tmp_path, blocked, args, extra,
                                                needed_for, module):
    result = _run(blocker, blocked, tmp_path, *args)
    assert result.returncode == 1, result.stderr[-3000:]
    assert result.stderr.splitlines() == [
        f'error: {needed_for} needs the [{extra}] extra ({module} is not installed): '
        f'pip install -e "{REPO_ROOT}[{extra}]"'], result.stderr[-3000:]
    assert result.stdout == ""


def test_in_the_clone_the_command_is_the_editable_install_of_dot(blocker):
    result = _run(blocker, "fastapi", REPO_ROOT, "--mode=serve", "--output_dir=no_such_run")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        'error: --mode=serve needs the [serve] extra (fastapi is not installed): '
        'pip install -e ".[serve]"']


def test_the_install_command_fits_the_installation(tmp_path):
    clone = tmp_path / "clone"
    (clone / "t2t_lite").mkdir(parents=True)
    (clone / "setup.py").write_text("")
    (clone / "run.py").write_text("")
    package = str(clone / "t2t_lite")
    assert extras.source_checkout(package) == str(clone)
    assert extras.install_command("viz", package, cwd=str(clone)) == 'pip install -e ".[viz]"'
    assert extras.install_command("viz", package, cwd=str(tmp_path)) == (
        f'pip install -e "{clone}[viz]"')
    site = tmp_path / "lib" / "site-packages" / "t2t_lite"
    site.mkdir(parents=True)
    assert extras.source_checkout(str(site)) is None
    assert extras.install_command("serve", str(site), cwd=str(tmp_path)) == (
        'pip install "t2t_lite[serve]"')
    # This test runs from the repository.
    assert extras.source_checkout() == str(REPO_ROOT)


def test_library_imports_of_a_missing_extra_are_one_line(monkeypatch):
    """Where the need shows only in the data (a SentencePiece vocabulary, a SavedModel of
    tensorflow-text ops), the import itself gives the line."""
    from t2t_lite.data_generators import sentencepiece_encoder
    from t2t_lite.export import ct2
    from t2t_lite.visualization import plots

    for module, call, extra, needed_for in (
            ("sentencepiece", sentencepiece_encoder.import_sentencepiece, "sentencepiece",
             "a SentencePiece vocabulary"),
            ("ctranslate2", ct2.import_ctranslate2, "ctranslate2",
             "CTranslate2 export and decoding"),
            ("matplotlib", plots._pyplot, "viz",
             "drawing pictures (--mode=plot, --mode=attention)")):
        monkeypatch.setitem(sys.modules, module, None)  # `import module` fails
        with pytest.raises(UserError) as raised:
            call()
        assert str(raised.value) == (f"{needed_for} needs the [{extra}] extra ({module} is not "
                                     f"installed): {extras.install_command(extra)}")
    # Another module missing inside the block is not the extra's: it passes unchanged.
    with pytest.raises(ModuleNotFoundError):
        with extras.needed("viz", "x"):
            import t2t_lite_no_such_module  # noqa: F401


@pytest.mark.parametrize("argv0,expected", [
    ("/usr/local/bin/t2t-lite", "t2t-lite"),
    ("/venv/lib/python3.11/site-packages/t2t_lite/__main__.py", "python -m t2t_lite"),
    ("run.py", "python run.py"),
    ("./run.py", "python run.py"),
    ("/src/t2t_lite/run.py", "python run.py"),
    ("/usr/bin/pytest", "python run.py"),
])
def test_the_command_is_named_as_typed(argv0, expected):
    assert command.name(argv0) == expected


@pytest.mark.parametrize("program,name", [
    (["-m", "t2t_lite"], "python -m t2t_lite"),
    (["run.py"], "python run.py"),
])
def test_help_names_the_command_typed(program, name):
    result = subprocess.run([sys.executable, *program, "--help"], cwd=REPO_ROOT, env=env(),
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"\n    {name} --help " in result.stdout
    assert f"\n    {name} --mode=train " in result.stdout
    if name != "python run.py":
        assert "python run.py --" not in result.stdout
    # A bad flag's hint names it too.
    result = subprocess.run([sys.executable, *program, "--no_such_flag=1"], cwd=REPO_ROOT,
                            env=env(), capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1].endswith(f"({name} --help lists the flags)")


def test_help_of_the_console_script_names_t2t_lite(tmp_path):
    """The console script's wrapper (pip writes one like it): argv[0] is its path."""
    script = tmp_path / "t2t-lite"
    script.write_text("import sys\nfrom t2t_lite.bin.main import main\nsys.exit(main())\n")
    result = subprocess.run([sys.executable, str(script), "--help"], cwd=tmp_path, env=env(),
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "\n    t2t-lite --help " in result.stdout
    assert "python run.py --" not in result.stdout and "python -m t2t_lite --" not in result.stdout


# ------------------------------------------------------------------------------ heartbeat
def test_the_heartbeat_speaks_only_after_a_silence_and_names_the_phase(capsys, monkeypatch):
    lines = []
    monkeypatch.setattr(heartbeat.logging, "info", lambda fmt, *args: lines.append(fmt % args))
    with heartbeat.started("--mode=test", silence=1.0):
        for _ in range(20):  # output every 0.1 s: never silent for 1 s
            print("working", flush=True)
            time.sleep(0.1)
        assert lines == []
        with heartbeat.phase("Tracing"):
            time.sleep(2.5)  # two silences of 1 s
        assert len(lines) >= 2 and all(
            line.startswith("Tracing: still working (1 s since the last line)")
            for line in lines)
        count = len(lines)
        time.sleep(1.3)
        assert lines[count].startswith("--mode=test: still working")
    stopped = len(lines)
    time.sleep(1.2)
    assert len(lines) == stopped  # nothing after the block
    assert sys.stdout is not None and not isinstance(sys.stdout, heartbeat._Stream)
    assert "working" in capsys.readouterr().out


def _gaps(args: list[str], cwd) -> tuple[int, list[tuple[float, str]], float]:
    """Runs `python run.py args` with stdout and stderr merged as a terminal shows them;
    returns (exit status, [(seconds since the line before, line)], seconds after the last)."""
    process = subprocess.Popen([sys.executable, str(REPO_ROOT / "run.py"), *args], cwd=cwd,
                               env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, bufsize=1)
    lines, last = [], time.monotonic()
    for line in process.stdout:
        now = time.monotonic()
        lines.append((now - last, line.rstrip("\n")))
        last = now
    status = process.wait(timeout=900)
    return status, lines, time.monotonic() - last


def _assert_no_long_silence(status, lines, tail, most=15.0):
    assert status == 0, "\n".join(line for _, line in lines[-30:])
    longest = max(lines, key=lambda gap_line: gap_line[0])
    assert longest[0] <= most, f"{longest[0]:.1f} s before: {longest[1]}"
    assert tail <= most  # the process' exit after its last line


@pytest.mark.slow
def test_no_silent_stretch_in_the_default_run(tmp_path):
    """The embedded default run on a short budget: every line within 15 s of the one before,
    from the start to the decodes after training."""
    status, lines, tail = _gaps(["--train_steps=30", "--local_eval_frequency=15",
                                 f"--output_dir={tmp_path / 'run'}",
                                 f"--data_dir={tmp_path / 'data'}"], tmp_path)
    _assert_no_long_silence(status, lines, tail)
    text = [line for _, line in lines]
    stop = next(k for k, line in enumerate(text)
                if "Saved checkpoint" in line and "ckpt-30" in line)
    assert any("Greedy decodes of 5 dev examples with the model of step 30" in line
               for line in text[stop:])


@pytest.mark.slow
def test_no_silent_stretch_in_export(tiny_run_trained, tmp_path):
    """Export of the tiny trained run: its steps, a line per traced signature, the checkpoint
    it read, each within 15 s of the line before."""
    status, lines, tail = _gaps(["--mode=export", f"--output_dir={tiny_run_trained}",
                                 f"--export_dir={tmp_path / 'export'}"], tmp_path)
    _assert_no_long_silence(status, lines, tail)
    text = "\n".join(line for _, line in lines)
    assert f"Exporting {tiny_run_trained}/ckpt-4" in text
    assert "Export step 2 of 2: signature 1/" in text
