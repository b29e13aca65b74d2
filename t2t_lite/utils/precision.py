"""Keras' mixed-precision policy for t2t's `activation_dtype` (float32 weights always).

Training, decoding and export build the model under the same policy, so a bfloat16 run
decodes and exports in bfloat16 (`activation_policy`); a decoding loop reads and casts the
weights once, not at every step (`weights_read_once`).
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
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


def weights_read_once(layer: Any) -> Callable[[], AbstractContextManager]:
    """Reads every weight of `layer` now, in the dtype its calls compute with, and returns a
    context manager under which the layer's calls use these tensors instead of the variables.

    A decoding loop calls the decoder once per position; without this, every step reads
    each weight again and, under a mixed policy, casts it to bfloat16 / float16 again
    (Keras autocasts a float32 variable at every read inside a layer's call): ~4M elements
    cast per step for transformer_small, the largest non-matmul cost of bf16 decoding
    (bench/README.md, "Decoding in bfloat16"). Called outside the loop, the reads and casts
    run once; the values the layer sees are the same as its own reads (float32 weights cast
    where Keras would autocast them, the rest as read).

    Uses Keras' `StatelessScope`, filled directly: its constructor would convert each value
    back to the variable's float32. With a Keras whose scope has no such mapping the layer
    reads its variables as before (same values, slower).

    Args:
      layer: a built Keras layer (e.g. the Transformer's decoder stack).

    Returns:
      A function returning a fresh context manager (enter it around each call of `layer`).
    """
    import tensorflow as tf

    dtype = layer.compute_dtype
    values = {}
    for variable in layer.weights:
        value = tf.convert_to_tensor(variable.value)  # no autocast scope here: as stored
        # Keras' rule (Variable._maybe_autocast): float variables created with autocast on.
        if getattr(variable, "_autocast", True) and value.dtype.is_floating:
            value = tf.cast(value, dtype)
        values[id(variable)] = value

    def use() -> AbstractContextManager:
        scope = keras.StatelessScope()
        mapping = getattr(scope, "state_mapping", None)
        if not isinstance(mapping, dict):
            return contextlib.nullcontext()
        mapping.update(values)
        return scope

    return use
