"""The start-up choice of oneDNN (t2t_lite.utils.onednn): the user's TF_ENABLE_ONEDNN_OPTS wins,
then --onednn=on|off, then TensorFlow's default where it turns oneDNN on itself, then a measured
choice cached per CPU, TensorFlow version and model width. No TensorFlow is imported here."""
import json
import logging
import os
import subprocess
import sys
import types

import pytest

from t2t_lite.utils import onednn
from tests.conftest import REPO_ROOT

AVX2 = ("processor\t: 0\nmodel name\t: AMD EPYC 7B12\nflags\t\t: fpu sse sse2 avx avx2 fma\n"
        "processor\t: 1\nmodel name\t: AMD EPYC 7B12\nflags\t\t: fpu sse sse2 avx avx2 fma\n")
VNNI = "model name\t: Intel Xeon\nflags\t\t: sse2 avx2 avx512f avx512_vnni\n"
ARM = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd\n"


class Measure:
    """A stand-in for the two child processes: returns fixed timings, counts its calls."""

    def __init__(self, timings):
        self.timings, self.calls = timings, []

    def __call__(self, hidden_size, filter_size):
        self.calls.append((hidden_size, filter_size))
        return self.timings


def _decide(tmp_path, setting="auto", environ=None, cpuinfo=AVX2, measure=None, width=(128, 512)):
    return onednn.decide(setting, environ or {}, cpuinfo, "2.21.0", *width,
                         str(tmp_path / "cache" / "onednn.json"), measure or Measure((1.0, 0.5)))


def test_the_environment_wins_over_the_flag_and_nothing_is_measured(tmp_path):
    measure = Measure((1.0, 0.5))
    choice = _decide(tmp_path, "on", {onednn.ENV: "0"}, measure=measure)
    assert (choice.enabled, choice.log) == (False, True)
    assert choice.reason == "TF_ENABLE_ONEDNN_OPTS=0 set in the environment; --onednn=on not applied"
    # With --onednn=auto the user's setting is applied without a line (TensorFlow's own reading).
    assert _decide(tmp_path, "auto", {onednn.ENV: "True"}, measure=measure).enabled is True
    assert not _decide(tmp_path, "auto", {onednn.ENV: "1"}, measure=measure).log
    assert _decide(tmp_path, "auto", {onednn.ENV: "yes"}, measure=measure).enabled is None
    assert measure.calls == []
    environ = {onednn.ENV: "0"}
    onednn.apply(onednn.Choice(True, "x"), environ)
    assert environ == {onednn.ENV: "0"}


def test_flag_on_and_off_set_the_variable_without_measuring(tmp_path):
    measure = Measure((1.0, 0.5))
    for setting, value in (("on", "1"), ("off", "0")):
        choice = _decide(tmp_path, setting, measure=measure)
        environ = {}
        onednn.apply(choice, environ)
        assert environ == {onednn.ENV: value}
        assert choice.line() == f"oneDNN: {setting} (--onednn={setting})"
    assert measure.calls == []
    assert not (tmp_path / "cache").exists()


def test_auto_keeps_tensorflows_default_where_it_is_on_or_unknown(tmp_path):
    measure = Measure((1.0, 0.5))
    choice = _decide(tmp_path, cpuinfo=VNNI, measure=measure)
    assert choice.line() == "oneDNN: TensorFlow's default (on: the CPU has avx512_vnni)"
    assert not _decide(tmp_path, cpuinfo=ARM, measure=measure).log
    environ = {}
    onednn.apply(choice, environ)
    assert environ == {} and measure.calls == []
    assert [onednn.tensorflow_default(onednn.cpu_info(text)[1]) for text in (AVX2, VNNI, ARM)] \
        == [False, True, None]


def test_auto_measures_once_then_reads_the_cache(tmp_path):
    measure = Measure((0.265, 0.152))
    first = _decide(tmp_path, measure=measure)
    assert first.enabled is True and "measured now" in first.reason
    assert "152 ms with oneDNN, 265 ms with Eigen" in first.reason
    assert measure.calls == [(128, 512)]
    entries = json.loads((tmp_path / "cache" / "onednn.json").read_text())
    key = "AMD EPYC 7B12 | tensorflow 2.21.0 | hidden 128 filter 512"
    assert list(entries) == [key] and entries[key]["onednn"] is True
    second = _decide(tmp_path, measure=measure)
    assert second.enabled is True and "measured before" in second.reason
    assert measure.calls == [(128, 512)]  # the cache answered
    # Another model width is another entry; a gain under 10% keeps Eigen (TensorFlow's default).
    third = _decide(tmp_path, measure=Measure((1.0, 0.95)), width=(512, 2048))
    assert third.enabled is False
    assert len(json.loads((tmp_path / "cache" / "onednn.json").read_text())) == 2


def test_a_failed_measurement_is_not_cached_and_keeps_tensorflows_default(tmp_path):
    measure = Measure(None)
    choice = _decide(tmp_path, measure=measure)
    assert choice.enabled is None and "failed" in choice.line()
    _decide(tmp_path, measure=measure)
    assert len(measure.calls) == 2
    # An unreadable cache file is a miss, not an error.
    (tmp_path / "cache" / "onednn.json").parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "cache" / "onednn.json").write_text("{not json")
    assert _decide(tmp_path, measure=Measure((1.0, 0.5))).enabled is True


def test_cache_path_and_tensorflow_version_need_no_tensorflow(tmp_path):
    assert onednn.cache_path({"XDG_CACHE_HOME": str(tmp_path)}) == str(
        tmp_path / "t2t_lite" / "onednn.json")
    (tmp_path / "cpuinfo").write_text(AVX2)
    assert onednn.cpu_info(onednn.read_cpuinfo(str(tmp_path / "cpuinfo")))[0] == "AMD EPYC 7B12"
    assert onednn.read_cpuinfo(str(tmp_path / "absent")) == ""
    code = ("import sys; from t2t_lite.utils import onednn; v = onednn.tensorflow_version(); "
            "assert 'tensorflow' not in sys.modules; print(v)")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                            text=True, check=False, timeout=60)
    assert result.returncode == 0 and result.stdout.strip()[:1].isdigit(), result.stderr


def test_run_py_sets_the_variable_and_logs_one_line(monkeypatch, caplog):
    from t2t_lite.bin import main as run  # run.py's body

    monkeypatch.delenv(onednn.ENV, raising=False)
    flags = types.SimpleNamespace(onednn="off", hparams_set="transformer_tiny", hparams="")
    with caplog.at_level(logging.INFO):
        run.choose_onednn(flags)
    assert os.environ[onednn.ENV] == "0"
    assert [r.getMessage() for r in caplog.records] == ["oneDNN: off (--onednn=off)"]


def test_decide_on_this_machine_reads_this_cpu_and_the_environment_cache(tmp_path):
    environ = {"XDG_CACHE_HOME": str(tmp_path)}
    here = onednn.decide_on_this_machine("auto", environ, 128, 512, measure=Measure((1.0, 0.5)))
    expected = onednn.decide("auto", environ, onednn.read_cpuinfo(), onednn.tensorflow_version(),
                             128, 512, str(tmp_path / "t2t_lite" / "onednn.json"),
                             Measure((1.0, 0.5)))
    assert here.enabled == expected.enabled
    if "measured" in here.reason:  # an x86 CPU where TensorFlow leaves oneDNN off: cached
        cache = str(tmp_path / "t2t_lite" / "onednn.json")
        assert here.reason.startswith(f"measured now, cached in {cache}")
        assert expected.reason.startswith(f"measured before, {cache}")
    else:
        assert here == expected
    assert onednn.decide_on_this_machine("off", environ, 128, 512).enabled is False
    assert onednn.decide_on_this_machine(
        "off", dict(environ, **{onednn.ENV: "1"}), 128, 512).enabled is True


@pytest.mark.parametrize("content", [
    "{not json", "[1, 2]", "null", "\x00\xff junk",
    '{"AMD EPYC 7B12 | tensorflow 2.21.0 | hidden 128 filter 512": '
    '{"eigen_s": "fast", "onednn_s": 0.5}}',
    '{"AMD EPYC 7B12 | tensorflow 2.21.0 | hidden 128 filter 512": '
    '{"eigen_s": null, "onednn_s": null}}',
    '{"AMD EPYC 7B12 | tensorflow 2.21.0 | hidden 128 filter 512": [0.2, 0.1]}'])
def test_a_damaged_cache_is_one_warning_then_measured_and_rewritten(tmp_path, caplog, content):
    cache = tmp_path / "cache" / "onednn.json"
    cache.parent.mkdir(parents=True)
    cache.write_text(content, encoding="utf-8", errors="surrogateescape")
    measure = Measure((0.265, 0.152))
    with caplog.at_level("WARNING"):
        choice = _decide(tmp_path, measure=measure)
    assert choice.enabled is True and "measured now" in choice.reason
    assert measure.calls == [(128, 512)]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and str(cache) in warnings[0] and "\n" not in warnings[0]
    entries = json.loads(cache.read_text())  # rewritten whole, with the new measurement
    assert entries["AMD EPYC 7B12 | tensorflow 2.21.0 | hidden 128 filter 512"]["eigen_s"] \
        == 0.265
    caplog.clear()
    assert _decide(tmp_path, measure=measure).enabled is True and len(measure.calls) == 1
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
