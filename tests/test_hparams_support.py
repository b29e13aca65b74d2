"""The hparams walk: every hparam of every registered set is used with t2t's meaning, has no
effect on the numbers in t2t either, or is refused by name when not at its accepted value.
What the USED and NO_EFFECT ones do is observed in `test_hparams_meaning.py`."""
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
