"""The hparams walk: every hparam of every registered set is used with t2t's meaning, has no
effect on the numbers in t2t either, or is refused by name when not at its accepted value.
What the USED and NO_EFFECT ones do is observed in `test_hparams_meaning.py`."""
import re
import types

import pytest

from t2t_lite import hparams_support, registry
from t2t_lite.hparams import HParams
from t2t_lite.hparams_lib import create_hparams
from t2t_lite.models.transformer import Transformer

SETS = registry.list_hparams()
TABLES = (hparams_support.USED, hparams_support.NO_EFFECT, hparams_support.NOT_SUPPORTED,
          hparams_support.OWN)


def other_value(value):
    """A value of the same type that differs from `value`."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    return value + "_other"


def test_every_hparam_of_every_set_is_in_exactly_one_table():
    assert len(SETS) >= 13
    for name in SETS:
        for hparam in create_hparams(name).values():
            assert sum(hparam in table for table in TABLES) == 1, (name, hparam)


def test_every_table_entry_says_in_one_line_what_the_hparam_does():
    meanings = [*hparams_support.USED.values(), *hparams_support.NO_EFFECT.values(),
                *(use for _, use in hparams_support.NOT_SUPPORTED.values())]
    assert all(isinstance(m, str) and m.strip() and "\n" not in m for m in meanings)


@pytest.mark.parametrize("set_name", SETS)
def test_every_registered_set_is_accepted(set_name):
    hparams = create_hparams(set_name)
    hparams_support.check_supported(hparams)
    for hparam, (accepted, _) in hparams_support.NOT_SUPPORTED.items():
        assert hparams.get(hparam) == accepted, (set_name, hparam)


@pytest.mark.parametrize("set_name", SETS)
def test_every_unsupported_hparam_is_refused_by_name(set_name):
    for hparam, (accepted, _) in hparams_support.NOT_SUPPORTED.items():
        hparams = create_hparams(set_name)
        setattr(hparams, hparam, other_value(accepted))
        with pytest.raises(ValueError) as info:
            hparams_support.check_supported(hparams)
        message = str(info.value)
        assert message.startswith(f"hparams.{hparam}=") and "not supported" in message
        assert "\n" not in message


def test_own_hparams_are_in_every_set_and_settable(tmp_path):
    for hparam, (default, meaning) in hparams_support.OWN.items():
        assert meaning and hparam not in hparams_support.USED
        for set_name in SETS:
            assert create_hparams(set_name).get(hparam) == default, (set_name, hparam)
        changed = other_value(default)
        hparams = create_hparams("transformer_tiny", f"{hparam}={changed}")
        assert hparams.get(hparam) == changed
        # A restarted run keeps it from its hparams.json.
        (tmp_path / "hparams.json").write_text(hparams.to_json())
        restarted = create_hparams("transformer_tiny",
                                   hparams_json_path=str(tmp_path / "hparams.json"))
        assert restarted.get(hparam) == changed
        # Hparams without it (a t2t run's) read the default.
        assert hparams_support.hparam(HParams(hidden_size=8), hparam) == default


def test_the_model_refuses_an_unsupported_hparam_in_one_line():
    hparams = create_hparams("transformer_tiny", "weight_noise=0.1")
    with pytest.raises(ValueError, match=r"^hparams.weight_noise=0.1 is not supported .*"
                                         r"weight noise.*leave it at 0.0$"):
        Transformer(hparams, 10, 10)


def test_hparam_falls_back_to_the_one_declared_default():
    hp = HParams(batch_size=100, max_length=7)
    # Declared values win; a missing name gets the value t2t's sets declare it with.
    assert hparams_support.hparam(hp, "max_length") == 7
    assert hparams_support.hparam(hp, "min_length_bucket") == 8  # basic_params1
    assert hparams_support.hparam(hp, "length_bucket_step") == 1.1
    assert hparams_support.hparam(hp, "relu_dropout_broadcast_dims") == ""  # transformer_base_v1
    # transformer_base overrides max_length (256); the declared default stays basic_params1's.
    assert hparams_support.hparam(HParams(batch_size=1), "max_length") == 0
    assert hparams_support.hparam(types.SimpleNamespace(max_length=3), "max_length") == 3
    with pytest.raises(KeyError):
        hparams_support.hparam(hp, "no_such_hparam")


def test_an_interval_is_written_as_its_notation_with_open_and_closed_ends():
    interval = hparams_support.interval
    top_p = interval("(0, 1]")
    assert (top_p.low, top_p.high, top_p.low_closed, top_p.high_closed) == (0, 1, False, True)
    assert [v in top_p for v in (0, 1e-9, 0.5, 1, 1.0000001)] == [False, True, True, True, False]
    assert str(top_p) == "(0, 1]" and top_p.rule == "must be in (0, 1]"
    assert str(interval(" [0 , inf) ")) == "[0, inf)"
    assert interval("[0, inf)").rule == "must be >= 0"
    assert interval("(0, inf)").rule == "must be > 0"
    assert interval("(-inf, 1]").rule == "must be <= 1"
    assert interval("(-inf, 1)").rule == "must be < 1"
    assert interval("[0.5, 2)").rule == "must be in [0.5, 2)"
    assert hparams_support.UNIT_INTERVAL == interval("[0, 1)")
    for bad in ("0, 1", "[1, 0]", "[0, inf]", "[-inf, 0)", "(a, 1]"):
        with pytest.raises(ValueError, match="is not an interval"):
            interval(bad)


@pytest.mark.parametrize("override, line", [
    # each kind of end: open low, closed low, open high, closed high
    ("hidden_size=0", "hparams hidden_size=0: must be > 0"),
    ("clip_grad_norm=-0.5", "hparams clip_grad_norm=-0.5: must be >= 0"),
    ("relu_dropout=1.0", "hparams relu_dropout=1.0: must be in [0, 1)"),
    ("sampling_keep_top_p=0.0", "hparams sampling_keep_top_p=0.0: must be in (0, 1]"),
    ("sampling_keep_top_p=1.5", "hparams sampling_keep_top_p=1.5: must be in (0, 1]"),
])
def test_an_override_out_of_its_interval_is_one_line_naming_the_hparam_and_interval(
        override, line):
    from t2t_lite.errors import UserError
    from t2t_lite.utils import validation

    hparams = create_hparams("transformer_tiny", override)
    with pytest.raises(UserError) as raised:
        validation.check_hparams(hparams)
    message = str(raised.value)
    assert "\n" not in message
    assert message == f"{line} (set by --hparams, the hparams set, or the output_dir's " \
                      "hparams.json)"
    name = override.split("=")[0]
    with pytest.raises(ValueError, match=rf"^{re.escape(line)}$"):
        hparams_support.check_range(name, hparams.get(name))
    hparams_support.check_range(name, hparams_support.default(name))
