"""Keras' mixed-precision policy for t2t's `activation_dtype` (float32 weights always).

Training, decoding and export build the model under the same policy, so a bfloat16 run
decodes and exports in bfloat16 (`activation_policy`).
"""
from __future__ import annotations

from typing import Any

import keras

from t2t_lite import hparams_support
from t2t_lite.errors import UserError

POLICIES = {"float32": "float32", "float16": "mixed_float16", "bfloat16": "mixed_bfloat16"}


class activation_policy:
    """Context manager: Keras' global dtype policy for `hparams.activation_dtype` inside the
    block (layers built there compute in that dtype; the previous policy is restored after).

    Args:
      hparams: with `activation_dtype` ("float32", "float16" or "bfloat16"). (Weights are
        float32: another `weight_dtype` is refused with the other unsupported hparams, by
        `hparams_support.check_supported`.)

    Raises:
      UserError: another activation_dtype.
    """

    def __init__(self, hparams: Any):
        activation = hparams_support.hparam(hparams, "activation_dtype")
        if activation not in POLICIES:
            raise UserError(
                f"hparams activation_dtype={activation!r} is not supported; use float32, "
                "float16 or bfloat16"
            )
        self.policy = POLICIES[activation]

    def __enter__(self):
        self.previous = keras.config.dtype_policy()
        keras.config.set_dtype_policy(self.policy)

    def __exit__(self, *exc):
        keras.config.set_dtype_policy(self.previous)
