"""t2t learning-rate schedules: the verified table of T2T_REFERENCE.md §4.2, every registered
hparams set against plainly written float64 formulas, every factor and legacy decay scheme."""
import math

import numpy as np
import pytest

from t2t_lite import registry
from t2t_lite.hparams_lib import create_hparams
from t2t_lite.training.learning_rate import LearningRateError, learning_rate_schedule

# T2T_REFERENCE.md §4.2, verified by running t2t 1.15.7: steps 0, 1, 100, 4000, 8000, 16000,
# 100k, 300k.
TABLE_STEPS = (0, 1, 100, 4000, 8000, 16000, 100000, 300000)
TABLE = {
    "transformer_base_v1": (1.7469e-07, 3.4939e-07, 1.7644e-05, 6.9868e-04, 4.9408e-04,
                            3.4937e-04, 1.3975e-04, 8.0687e-05),
    "transformer_base": (0, 1.2353e-07, 1.2353e-05, 4.9411e-04, 9.8821e-04, 6.9877e-04,
                         2.7951e-04, 1.6137e-04),
    "transformer_big": (0, 8.7346e-08, 8.7346e-06, 3.4939e-04, 6.9877e-04, 4.9411e-04,
                        1.9764e-04, 1.1411e-04),
    "transformer_big_single_gpu": (0, 3.0882e-08, 3.0882e-06, 1.2353e-04, 2.4705e-04,
                                   4.9411e-04, 1.9764e-04, 1.1411e-04),
    "transformer_base_single_gpu": (0, 4.9411e-08, 4.9411e-06, 1.9764e-04, 3.9528e-04,
                                    7.9057e-04, 3.1623e-04, 1.8257e-04),
}
TABLE["transformer_parsing_base"] = TABLE["transformer_big_single_gpu"]


def _value(hparams, step):
    return float(learning_rate_schedule(hparams)(step))


def _printed(value):
    """The value as §4.2 prints it: 5 significant digits."""
    return float(f"{value:.4e}")


@pytest.mark.parametrize("name", sorted(TABLE))
def test_verified_table(name):
    hp = create_hparams(name)
    got = [_printed(_value(hp, s)) for s in TABLE_STEPS]
    assert got == list(TABLE[name])


def test_parsing_big_peaks_at_4000_then_equals_big():
    hp, big = create_hparams("transformer_parsing_big"), create_hparams("transformer_big")
    assert _printed(_value(hp, 4000)) == 9.8821e-04
    for step in (8000, 16000, 100000, 300000):
        assert _value(hp, step) == pytest.approx(_value(big, step), rel=1e-6)
    assert max(_value(hp, s) for s in (3000, 3999, 4000, 4001, 5000)) == _value(hp, 4000)


# --- Reference formulas, written independently in float64 ----------------------------------
def _ref_factor(name, step, hp):
    w = hp.learning_rate_warmup_steps
    if name == "constant":
        return hp.learning_rate_constant
    if name == "linear_warmup":
        return min(1.0, step / w)
    if name == "rsqrt_decay":
        return 1.0 / math.sqrt(max(step, w))
    if name == "rsqrt_hidden_size":
        return hp.hidden_size ** -0.5
    if name == "rsqrt_normalized_decay":
        return math.sqrt(w) / math.sqrt(max(step, w))
    if name == "linear_decay":
        return min(1.0, max(0.0, (hp.train_steps - step) / hp.learning_rate_decay_steps))
    if name == "cosdecay":
        if step <= w:
            return 1.0
        return 0.5 * (1 + math.cos(math.pi * step / hp.learning_rate_decay_steps))
    if name == "single_cycle_cos_decay":
        return math.cos((max(step, w) - w) * math.pi / (hp.train_steps - w)) / 2 + 0.5
    if name == "multi_cycle_cos_decay":
        return math.cos((max(step, w) - w) * math.pi / hp.learning_rate_decay_steps) / 2 + 0.5
    if name == "exp_decay":
        p = max((step - w) / hp.learning_rate_decay_steps, 0.0)
        if hp.learning_rate_decay_staircase:
            p = math.floor(p)
        return hp.learning_rate_decay_rate ** p
    if name == "legacy":
        return _ref_legacy(step, hp)
    raise AssertionError(name)


def _ref_legacy(step, hp):
    w = hp.learning_rate_warmup_steps
    scheme = hp.learning_rate_decay_scheme
    if scheme == "noam":
        ret = 5000.0 / math.sqrt(hp.hidden_size) * min((step + 1) * w**-1.5, (step + 1) ** -0.5)
    elif w and step < w:
        ret = 0.01 ** ((w - step) / w)
    elif scheme in ("none", ""):
        ret = 1.0
    elif scheme == "exp":
        p = (step - w) / hp.learning_rate_decay_steps
        if hp.learning_rate_decay_staircase:
            p = math.floor(p)
        ret = hp.learning_rate_decay_rate ** p
    elif scheme == "sqrt":
        ret = 500.0 / math.sqrt(max(step - w, 1.0))
    elif scheme == "cosine":
        c = hp.learning_rate_cosine_cycle_steps
        pos = step % (2 * c)
        pos = c - abs(c - pos)
        ret = 0.5 * (1 + math.cos(math.pi * pos / c))
    elif scheme == "cyclelinear10x":
        pos = (step % (2 * w) - w) / w
        ret = (1 - abs(pos) + 0.1) * 3.0
    elif scheme == "piecewise":
        values = [1.0] + list(hp.learning_rate_multiples)
        ret = values[sum(step > b for b in hp.learning_rate_boundaries)]
    else:
        raise AssertionError(scheme)
    c_opt = 0.002 if "adam" in hp.optimizer else 1.0
    return ret * c_opt * hp.learning_rate


def _reference(hp, global_step):
    n = hp.optimizer_multistep_accumulate_steps
    step = global_step / n if n else float(global_step)
    names = [n.strip() for n in hp.learning_rate_schedule.split("*") if n.strip()]
    return math.prod(_ref_factor(name, step, hp) for name in names)


@pytest.mark.parametrize("name", registry.list_hparams())
def test_every_registered_set_matches_reference_formula(name):
    hp = create_hparams(name)
    for step in (1, 100, 4000, 8000, 100000):
        assert _value(hp, step) == pytest.approx(_reference(hp, step), rel=2e-6, abs=1e-12), step


def _hp(schedule, **overrides):
    hp = create_hparams("transformer_base")
    hp.learning_rate_schedule = schedule
    hp.add_hparam("train_steps", 30000)
    for key, value in overrides.items():
        setattr(hp, key, value)
    return hp


STEPS = (0, 1, 7, 100, 4000, 7999, 8000, 8001, 12345, 29999, 30000, 45000, 100000)


@pytest.mark.parametrize("schedule,overrides", [
    ("constant*linear_warmup*rsqrt_normalized_decay", {}),
    ("constant*linear_warmup*linear_decay", {"learning_rate_decay_steps": 20000}),
    ("constant*cosdecay", {"learning_rate_decay_steps": 50000}),
    ("constant*linear_warmup*single_cycle_cos_decay", {}),
    ("constant*linear_warmup*multi_cycle_cos_decay", {"learning_rate_decay_steps": 7000}),
    ("constant*exp_decay", {"learning_rate_decay_rate": 0.5, "learning_rate_decay_steps": 3000}),
    ("constant*exp_decay", {"learning_rate_decay_rate": 0.5, "learning_rate_decay_steps": 3000,
                            "learning_rate_decay_staircase": True}),
    (" constant * rsqrt_hidden_size * legacy ", {"learning_rate_decay_scheme": "noam"}),
])
def test_every_factor(schedule, overrides):
    hp = _hp(schedule, **overrides)
    for step in STEPS:
        # abs: float32 rounding of large cosine arguments and cancellation in cos(x)/2 + 0.5
        # near x = pi, as in t2t's float32 graph.
        assert _value(hp, step) == pytest.approx(_reference(hp, step), rel=3e-6, abs=1e-6), step


@pytest.mark.parametrize("scheme,overrides", [
    ("none", {}),
    ("exp", {"learning_rate_decay_rate": 0.7, "learning_rate_decay_steps": 2000}),
    ("exp", {"learning_rate_decay_rate": 0.7, "learning_rate_decay_steps": 2000,
             "learning_rate_decay_staircase": True}),
    ("sqrt", {}),
    ("cosine", {"learning_rate_cosine_cycle_steps": 10000}),
    ("cyclelinear10x", {}),
    ("exp", {"learning_rate_warmup_steps": 0, "learning_rate_decay_rate": 0.9}),
])
@pytest.mark.parametrize("optimizer", ["adam", "momentum"])
def test_legacy_schemes(scheme, overrides, optimizer):
    hp = _hp("legacy", learning_rate_decay_scheme=scheme, optimizer=optimizer,
             learning_rate=0.3, **overrides)
    for step in STEPS:
        # rel: t2t computes the exponential warmup exp(log(0.01)/w) ** (w - step) in float32,
        # where the power amplifies the base's rounding up to ~(w - step) ulps; abs: float32
        # cancellation in 0.5 * (1 + cos(x)) near x = pi (cosine scheme).
        scale = (0.002 if optimizer == "adam" else 1.0) * 0.3
        assert _value(hp, step) == pytest.approx(
            _reference(hp, step), rel=1e-4, abs=1e-7 * scale), step


def test_legacy_piecewise():
    hp = _hp("legacy", learning_rate_decay_scheme="piecewise", learning_rate_warmup_steps=0)
    hp.add_hparam("learning_rate_boundaries", [1000, 5000])
    hp.add_hparam("learning_rate_multiples", [0.5, 0.1])
    expected = {0: 1.0, 1000: 1.0, 1001: 0.5, 5000: 0.5, 5001: 0.1}
    for step, mult in expected.items():
        assert _value(hp, step) == pytest.approx(mult * 0.002 * 0.2, rel=1e-6)


def test_noam_c_opt_is_0002_only_for_adam_optimizers():
    base = create_hparams("transformer_base_v1")
    assert _value(base, 4000) == pytest.approx(1.0 * 512**-0.5 * 4001**-0.5, rel=1e-6)
    other = create_hparams("transformer_base_v1")
    other.optimizer = "momentum"
    assert _value(other, 4000) / _value(base, 4000) == pytest.approx(500.0, rel=1e-6)
    multistep = create_hparams("transformer_base_v1")
    multistep.optimizer = "multistep_adam"
    assert _value(multistep, 4000) == pytest.approx(_value(base, 4000), rel=1e-6)


def test_multistep_schedule_sees_global_step_over_n():
    multi, base = create_hparams("transformer_base_multistep8"), create_hparams("transformer_base")
    for step in (1, 7, 8, 800, 64000, 100000):
        assert _value(multi, step) == pytest.approx(_value(base, step / 8), rel=1e-6)
    assert _value(multi, 7) > 0  # first applied update happens at global step n-1 = 7


def test_keras_optimizer_reads_schedule_at_its_iterations():
    import keras

    hp = create_hparams("transformer_tiny")
    opt = keras.optimizers.Adam(learning_rate_schedule(hp))
    opt.iterations.assign(100)
    assert float(opt.learning_rate) == pytest.approx(2.0 * 100 / 8000 / math.sqrt(8000) / math.sqrt(128))


@pytest.mark.parametrize("schedule,overrides,match", [
    ("constant*linear_warmpu", {}, "linear_warmpu"),
    ("legacy", {"learning_rate_decay_scheme": "cosnie"}, "cosnie"),
])
def test_bad_settings_name_the_value(schedule, overrides, match):
    hp = _hp(schedule, **overrides)
    with pytest.raises(LearningRateError, match=match):
        learning_rate_schedule(hp)


def test_missing_train_steps_and_bad_single_cycle():
    hp = create_hparams("transformer_base")
    hp.learning_rate_schedule = "constant*linear_decay"
    with pytest.raises(LearningRateError, match="train_steps"):
        learning_rate_schedule(hp)
    hp = _hp("constant*single_cycle_cos_decay", learning_rate_warmup_steps=40000)
    with pytest.raises(LearningRateError, match="single_cycle_cos_decay"):
        learning_rate_schedule(hp)


def test_schedule_is_serializable():
    hp = create_hparams("transformer_base")
    sched = learning_rate_schedule(hp)
    clone = type(sched).from_config(sched.get_config())
    assert float(clone(5000)) == float(sched(5000))
    assert np.float32(float(sched(5000))) == np.float32(float(sched(np.int64(5000))))


def test_learning_rate_minimum_floors_the_schedule():
    base = create_hparams("transformer_base")
    floor = 3e-4
    floored = create_hparams("transformer_base", f"learning_rate_minimum={floor}")
    for step in (0, 1, 100, 4000, 8000, 100000, 300000):
        expected = max(_value(base, step), floor)
        assert _value(floored, step) == pytest.approx(expected, rel=1e-6)
    # The floor is reached early (warmup) and late (decay), and left alone in between.
    assert _value(floored, 100) == pytest.approx(floor) and _value(base, 100) < floor
    assert _value(floored, 8000) == _value(base, 8000) > floor
    # 0 (like None) sets no floor, as in t2t (`if hparams.learning_rate_minimum:`).
    assert _value(create_hparams("transformer_base", "learning_rate_minimum=0"), 1) == \
        _value(base, 1)
    clone = learning_rate_schedule(floored)
    clone = type(clone).from_config(clone.get_config())
    assert float(clone(100)) == pytest.approx(floor)
