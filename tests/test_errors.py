"""errors.report_user_errors: one `error:` line and exit status 1, traceback only with debug."""
import pytest

from t2t_lite.errors import UserError, report_user_errors
from t2t_lite.hparams import HParamsError


@pytest.mark.parametrize("error", [UserError("--train_steps=-5: must be >= 1"),
                                   HParamsError("--train_steps=-5: must be >= 1")])
def test_user_error_is_one_line_and_exit_1(capsys, error):
    with pytest.raises(SystemExit) as exit_info, report_user_errors():
        raise error
    assert exit_info.value.code == 1
    assert capsys.readouterr().err == "error: --train_steps=-5: must be >= 1\n"


def test_debug_prints_the_traceback_first(capsys):
    with pytest.raises(SystemExit), report_user_errors(debug=True):
        raise UserError("bad\nvalue")
    err = capsys.readouterr().err
    assert err.startswith("Traceback")
    assert err.endswith("error: bad value\n")


def test_other_errors_pass_through():
    with pytest.raises(ZeroDivisionError), report_user_errors():
        raise ZeroDivisionError
