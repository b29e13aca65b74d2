"""Name -> hparams set, problem class and model class, with t2t's registered names.

Registration happens in the modules that define the objects (decorators below). The built-in
modules are imported lazily on the first lookup, so importing t2t_lite stays cheap and nothing
is mutated from elsewhere at import time.
"""
from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from typing import TypeVar

from t2t_lite.errors import RegistryError

_HPARAMS: dict[str, Callable] = {}
_PROBLEMS: dict[str, type] = {}
_MODELS: dict[str, type] = {}

_BUILTIN_MODULES = {
    "hparams": ("t2t_lite.hparams_sets.transformer",),
    "problems": (
        "t2t_lite.problems.algorithmic",
        "t2t_lite.problems.translate_ende",
        "t2t_lite.problems.translate_enfr",
        "t2t_lite.problems.translate_files",
        "t2t_lite.problems.wsj_parsing",
    ),
    "models": ("t2t_lite.models.transformer",),
}
_loaded: set[str] = set()

T = TypeVar("T")


def _load_builtins(kind: str) -> None:
    if kind in _loaded:
        return
    _loaded.add(kind)
    for module in _BUILTIN_MODULES[kind]:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as e:
            # A built-in module that does not exist yet is simply not registered; any other
            # missing import is a real error.
            if e.name != module:
                raise


def _register(table: dict, kind: str, name: str, obj):
    if name in table and table[name] is not obj:
        raise RegistryError(f"{kind} '{name}' is already registered")
    table[name] = obj
    return obj


_DISPLAY = {"hparams": "hparams set", "problems": "problem", "models": "model"}


def _lookup(table: dict, kind: str, name: str):
    _load_builtins(kind)
    if name in table:
        return table[name]
    close = difflib.get_close_matches(name, list(table), n=5, cutoff=0.5)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise RegistryError(
        f"Unknown {_DISPLAY[kind]} '{name}'.{hint} Known: {', '.join(sorted(table)) or '(none)'}"
    )


def register_hparams(fn_or_name=None):
    """Decorator registering an hparams-set function under its own name (or a given one)."""

    def decorator(fn, name=None):
        return _register(_HPARAMS, "hparams set", name or fn.__name__, fn)

    if callable(fn_or_name):
        return decorator(fn_or_name)
    return lambda fn: decorator(fn, fn_or_name)


def register_problem(name: str):
    """Class decorator registering a problem under its t2t name."""

    def decorator(cls: type[T]) -> type[T]:
        _register(_PROBLEMS, "problem", name, cls)
        cls.registered_name = name
        return cls

    return decorator


def register_model(name: str):
    """Class decorator registering a model class under its t2t name."""

    def decorator(cls: type[T]) -> type[T]:
        return _register(_MODELS, "model", name, cls)

    return decorator


def hparams(name: str):
    """Returns a fresh HParams of the registered set `name`."""
    return _lookup(_HPARAMS, "hparams", name)()


def list_hparams() -> list[str]:
    """Names of all registered hparams sets, sorted."""
    _load_builtins("hparams")
    return sorted(_HPARAMS)


def problem(name: str):
    """Returns an instance of the registered problem `name`.

    A `_rev` suffix returns the reversed problem (inputs and targets swapped), as in t2t.
    """
    was_reversed = name.endswith("_rev") and name not in _PROBLEMS
    base = name[: -len("_rev")] if was_reversed else name
    cls = _lookup(_PROBLEMS, "problems", base)
    return cls(was_reversed=was_reversed)


def list_problems() -> list[str]:
    """Names of all registered problems, sorted."""
    _load_builtins("problems")
    return sorted(_PROBLEMS)


def model(name: str) -> type:
    """Returns the registered model class `name`."""
    return _lookup(_MODELS, "models", name)
