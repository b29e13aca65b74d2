"""Typed hyperparameters with tensor2tensor's override syntax.

`HParams` keeps, for every name, the type it had when it was first added (for lists, the
element type) and checks every later assignment against it, exactly as t2t's HParams did:
ints reject floats, floats accept ints, bools accept `true/True/false/False` or an integer,
strings take the raw text, and a hparam whose default is None cannot be set.

`HParamsError` (declared in `t2t_lite.errors`) names the hparam in one line. Building a
registered set with overrides is `t2t_lite.hparams_lib.create_hparams` (t2t's module name).
"""
from __future__ import annotations

import json
import re
from typing import Any

from t2t_lite.errors import HParamsError

_PARAM_RE = re.compile(
    r"""
    (?P<name>[a-zA-Z][\w\.]*)       # name
    (\[\s*(?P<index>\d+)\s*\])?     # optional [index]
    \s*=\s*
    ((?P<val>[^,\[]*)               # a scalar: everything up to the next comma
     |
     \[(?P<vals>[^\]]*)\])          # or a bracketed list
    ($|,\s*)""",
    re.VERBOSE,
)

_TYPE_NAMES = {int: "int", float: "float", bool: "bool", str: "str"}


def _type_name(param_type: type | None, is_list: bool) -> str:
    """Returns "an int", "a float", "a list of int", ... for error messages."""
    name = _TYPE_NAMES.get(param_type, getattr(param_type, "__name__", str(param_type)))
    if is_list:
        return f"a list of {name}"
    return f"an {name}" if name[0] in "aeiou" else f"a {name}"


def _parse_scalar(name: str, text: str, param_type: type, is_list: bool) -> Any:
    """Parses `text` as `param_type`, raising HParamsError that names `name`."""
    text = text.strip() if param_type is not str else text
    try:
        if param_type is bool:
            if text in ("true", "True"):
                return True
            if text in ("false", "False"):
                return False
            return int(text) != 0
        if param_type is int:
            return int(text)
        if param_type is float:
            return float(text)
        return param_type(text)
    except ValueError:
        raise HParamsError(
            f"Could not parse hparam '{name}': value {text!r} is not "
            f"{_type_name(param_type, is_list)}"
        ) from None


def _cast_if_compatible(name: str, param_type: type, value: Any) -> Any:
    """Casts `value` to `param_type` when t2t allows it (int -> float), else raises."""
    if value is None:
        return None
    if param_type is str and isinstance(value, str):
        return value
    if param_type is bool:
        if isinstance(value, bool):
            return value
        raise HParamsError(f"Hparam '{name}' expects a bool, got {value!r}")
    if isinstance(value, (bool, str)) or param_type is str:
        raise HParamsError(
            f"Hparam '{name}' expects {_type_name(param_type, False)}, got {value!r}"
        )
    if param_type is int and isinstance(value, float):
        raise HParamsError(f"Hparam '{name}' expects an int, got the float {value!r}")
    if isinstance(value, (int, float)):
        return param_type(value)
    raise HParamsError(
        f"Hparam '{name}' expects {_type_name(param_type, False)}, got {value!r}"
    )


class HParams:
    """A set of named, typed hyperparameters (t2t's `HParams`).

    Values are attributes (`hp.hidden_size`). `add_hparam` declares a new name and fixes its
    type; plain attribute assignment to a declared name type-checks the value; assignment to
    an undeclared name makes a dead attribute that is not part of `values()`, as in t2t.
    """

    def __init__(self, **kwargs: Any):
        object.__setattr__(self, "_types", {})
        for name, value in kwargs.items():
            self.add_hparam(name, value)

    # Declaring and setting ---------------------------------------------------------------
    def add_hparam(self, name: str, value: Any) -> None:
        """Declares hparam `name` with `value`; its type is fixed from the value."""
        if name in self._types:
            raise HParamsError(f"Hparam '{name}' already exists")
        if name.startswith("_") or hasattr(HParams, name):
            raise HParamsError(f"Hparam name '{name}' is reserved")
        if isinstance(value, (list, tuple)):
            if not value:
                raise HParamsError(f"Hparam '{name}': cannot infer the type of an empty list")
            self._types[name] = (type(value[0]), True)
            value = list(value)
        else:
            self._types[name] = (type(value) if value is not None else None, False)
        object.__setattr__(self, name, value)

    def set_hparam(self, name: str, value: Any) -> None:
        """Sets declared hparam `name` after checking `value` against its type."""
        if name not in self._types:
            raise HParamsError(self._unknown_message(name))
        param_type, is_list = self._types[name]
        if param_type is None:
            raise HParamsError(f"Hparam '{name}' has default None and cannot be set")
        if is_list:
            if not isinstance(value, (list, tuple)):
                raise HParamsError(f"Hparam '{name}' expects a list, got {value!r}")
            value = [_cast_if_compatible(name, param_type, v) for v in value]
        else:
            if isinstance(value, (list, tuple)):
                raise HParamsError(
                    f"Hparam '{name}' expects {_type_name(param_type, False)}, got a list"
                )
            value = _cast_if_compatible(name, param_type, value)
        object.__setattr__(self, name, value)

    def declare_type(self, name: str, param_type: type) -> None:
        """Gives hparam `name`, declared with default None, a type so that it can be set.

        t2t code assigned such hparams directly (`hparams.learning_rate_minimum = 1e-5`);
        a declared type lets sets, --hparams and hparams.json set them, with the usual checks
        (None stays allowed).
        """
        if name not in self._types:
            raise HParamsError(self._unknown_message(name))
        if self._types[name][0] is not None:
            raise HParamsError(f"Hparam '{name}' already has a type")
        self._types[name] = (param_type, False)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._types:
            self.set_hparam(name, value)
        else:
            object.__setattr__(self, name, value)

    def __contains__(self, name: str) -> bool:
        return name in self._types

    def get(self, name: str, default: Any = None) -> Any:
        """Returns hparam `name`, or `default` when it is not declared."""
        return getattr(self, name) if name in self._types else default

    def type_of(self, name: str) -> tuple[type | None, bool]:
        """Returns `(element_type, is_list)` recorded for hparam `name`."""
        return self._types[name]

    def _unknown_message(self, name: str) -> str:
        import difflib

        close = difflib.get_close_matches(name, list(self._types), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        return f"Unknown hparam '{name}'{hint}"

    # Parsing --------------------------------------------------------------------------------
    def parse(self, values: str) -> HParams:
        """Applies an override string `"a=1,b=x,c=[1,2]"` (t2t syntax); returns self.

        Raises HParamsError naming the clause, hparam and expected type on any problem;
        nothing is changed unless the whole string is valid.
        """
        parsed = self._parse_values(values)
        for name, value in parsed.items():
            self.set_hparam(name, value)
        return self

    def _parse_values(self, values: str) -> dict[str, Any]:
        results: dict[str, Any] = {}
        pos = 0
        values = values.strip()
        while pos < len(values):
            match = _PARAM_RE.match(values, pos)
            if not match:
                raise HParamsError(f"Malformed hparams override at {values[pos:]!r}")
            pos = match.end()
            name = match.group("name")
            if name not in self._types:
                raise HParamsError(self._unknown_message(name))
            if match.group("index") is not None:
                raise HParamsError(f"Hparam '{name}': indexed assignment is not supported")
            if name in results:
                raise HParamsError(f"Hparam '{name}' is set more than once in {values!r}")
            param_type, is_list = self._types[name]
            if param_type is None:
                raise HParamsError(f"Hparam '{name}' has default None and cannot be set")
            if match.group("vals") is not None:
                if not is_list:
                    raise HParamsError(
                        f"Hparam '{name}' expects {_type_name(param_type, False)}, got a list"
                    )
                items = [v for v in match.group("vals").split(",") if v.strip()]
                results[name] = [_parse_scalar(name, v, param_type, True) for v in items]
            else:
                text = match.group("val")
                if is_list:
                    raise HParamsError(
                        f"Hparam '{name}' expects {_type_name(param_type, True)} "
                        f"written [v1,v2], got {text!r}"
                    )
                if param_type is not str and not text.strip():
                    raise HParamsError(
                        f"Hparam '{name}' expects {_type_name(param_type, False)}, "
                        "got an empty value"
                    )
                results[name] = _parse_scalar(name, text, param_type, False)
        return results

    # Export ---------------------------------------------------------------------------------
    def values(self) -> dict[str, Any]:
        """Returns a plain dict name -> value of every declared hparam."""
        return {name: getattr(self, name) for name in self._types}

    def to_json(self, indent: int | None = None, sort_keys: bool = True) -> str:
        """Serializes `values()` to JSON."""
        return json.dumps(self.values(), indent=indent, sort_keys=sort_keys)

    def parse_json(self, text: str) -> HParams:
        """Overrides declared hparams from a JSON object (names must exist); returns self."""
        return self.override_from_dict(json.loads(text))

    def override_from_dict(self, data: dict[str, Any]) -> HParams:
        """Overrides declared hparams from {name: value} (names must exist); returns self."""
        for name, value in data.items():
            if name not in self._types:
                raise HParamsError(self._unknown_message(name))
            if self._types[name][0] is None:
                if value is not None:
                    raise HParamsError(f"Hparam '{name}' has default None and cannot be set")
                continue
            self.set_hparam(name, value)
        return self

    @classmethod
    def from_json(cls, text: str) -> HParams:
        """Builds an HParams whose names and types come from a JSON object."""
        return cls(**json.loads(text))

    def copy(self) -> HParams:
        """Returns an independent copy with the same names, types and values."""
        new = HParams()
        for name, value in self.values().items():
            new._types[name] = self._types[name]
            object.__setattr__(new, name, list(value) if isinstance(value, list) else value)
        return new

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HParams) and self.values() == other.values()

    def __repr__(self) -> str:
        items = ", ".join(f"{k}={v!r}" for k, v in sorted(self.values().items()))
        return f"HParams({items})"
