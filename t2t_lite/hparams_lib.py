"""Building the hparams of a run: a registered set, hparams.json of an earlier run, then
`--hparams` (t2t's `utils/hparams_lib.create_hparams`).

It sits above `hparams` (the HParams class), `registry`, `hparams_support` and
`utils/run_metadata`, which each import none of it.
"""
from __future__ import annotations

from t2t_lite import hparams_support, registry
from t2t_lite.errors import HParamsError, UserError
from t2t_lite.hparams import HParams
from t2t_lite.utils.run_metadata import read_hparams_json


def create_hparams(name: str, overrides: str = "", hparams_json_path: str | None = None) -> HParams:
    """Builds the registered hparams set `name` (with t2t_lite's own hparams,
    `hparams_support.OWN`), then applies overrides (t2t order).

    Args:
      name: a registered set, e.g. "transformer_base".
      overrides: "a=1,b=2" override string (`--hparams`).
      hparams_json_path: optional `hparams.json` of an earlier run, applied before
        `overrides` (t2t-trainer's restart behaviour); ignored when the file is absent.

    Returns:
      HParams.

    Raises:
      UserError: hparams.json is damaged, edited by hand (`run_metadata.read_hparams_json`)
        or names an hparam the set lacks (one line naming the file).
    """
    hparams = registry.hparams(name)
    hparams_support.add_own_hparams(hparams)
    stored = read_hparams_json(hparams_json_path) if hparams_json_path else None
    if stored is not None:
        try:
            hparams.override_from_dict(stored)
        except HParamsError as e:
            raise UserError(f"{hparams_json_path}: {e} (the run's hparams do not fit "
                            f"--hparams_set={name}; use the set the run was trained with)"
                            ) from None
    if overrides:
        hparams.parse(overrides)
    return hparams
