"""t2t_lite's optional extras (setup.py's `extras_require`): which modules each brings, and one
`error:` line, with the install command that fits this installation, when one is missing.

How t2t_lite was installed decides the command: from a wheel (`pip install t2t_lite`),
`pip install "t2t_lite[serve]"`; from a clone (run from the repository, or installed with
`pip install -e .`), `pip install -e ".[serve]"` (the repository's path instead of `.` when
the working directory is elsewhere).
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Iterator

from t2t_lite.errors import UserError

# extra -> the top-level modules it installs that t2t_lite imports.
EXTRAS = {
    "serve": ("fastapi", "uvicorn", "pydantic", "starlette", "prometheus_client"),
    "viz": ("matplotlib",),
    "ctranslate2": ("ctranslate2",),
    "text": ("tensorflow_text",),
    "sentencepiece": ("sentencepiece",),
}


def source_checkout(package_dir: str | None = None) -> str | None:
    """The repository t2t_lite runs from (a clone, or an editable install of one), or None
    when it runs from an installed wheel.

    Args:
      package_dir: the t2t_lite package folder (default: this installation's).
    """
    if package_dir is None:
        package_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    root = os.path.dirname(os.path.abspath(package_dir))
    if os.path.isfile(os.path.join(root, "setup.py")) and os.path.isfile(
            os.path.join(root, "run.py")):
        return root
    return None


def install_command(extra: str, package_dir: str | None = None, cwd: str | None = None) -> str:
    """The pip command that installs `extra` for this installation (see the module docstring).

    Args:
      extra: a key of EXTRAS.
      package_dir: the t2t_lite package folder (default: this installation's).
      cwd: the working directory (default: the process').
    """
    root = source_checkout(package_dir)
    if root is None:
        return f'pip install "t2t_lite[{extra}]"'
    here = os.path.abspath(cwd or os.getcwd())
    where = "." if os.path.abspath(root) == here else root
    return f'pip install -e "{where}[{extra}]"'


def missing_extra(extra: str, needed_for: str, module: str) -> UserError:
    """The one-line error of a missing extra, e.g. `--mode=serve needs the [serve] extra
    (fastapi is not installed): pip install "t2t_lite[serve]"`."""
    return UserError(f"{needed_for} needs the [{extra}] extra ({module} is not installed): "
                     f"{install_command(extra)}")


def _top_level(name: str | None) -> str:
    return (name or "").split(".", 1)[0]


@contextlib.contextmanager
def needed(extra: str, needed_for: str) -> Iterator[None]:
    """Turns the import of a missing module of `extra` inside the block into `missing_extra`'s
    one line (other errors pass unchanged).

    Raises:
      UserError: a module of the extra is not installed.
    """
    try:
        yield
    except ModuleNotFoundError as e:
        if _top_level(e.name) in EXTRAS[extra]:
            raise missing_extra(extra, needed_for, _top_level(e.name)) from None
        raise


def require(extra: str, needed_for: str) -> None:
    """Checks that every module of `extra` is installed, without importing it (the [text]
    extra's module imports TensorFlow): run before the work that needs them starts.

    Args:
      extra: a key of EXTRAS.
      needed_for: what needs it, as the line names it ("--mode=serve").

    Raises:
      UserError: one line naming the extra, the missing module and the install command.
    """
    with needed(extra, needed_for):
        for module in EXTRAS[extra]:
            if importlib.util.find_spec(module) is None:
                raise missing_extra(extra, needed_for, module)
