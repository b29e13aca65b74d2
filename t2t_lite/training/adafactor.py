"""tensor2tensor's Adafactor (`utils/adafactor.py`, Shazeer & Stern 2018) as a Keras optimizer.

The update for a variable `w` with gradient `g` at global step `s` (read before its increment,
as t2t's `step_num()`), learning rate `lr` (t2t's schedule value) and t2t's hparams:

    decay      = 1 - (s + 1) ** -memory_exponent                      (decay_type "pow")
               = beta2 * (1 - beta2 ** s) / (1 - beta2 ** (s + 1))    (decay_type "adam")
    g2         = g ** 2 + 1e-30
    factored (rank >= 2, optimizer_adafactor_factored):
      vr      <- decay * vr + (1 - decay) * mean(g2, axis=-1)          shape[:-1]
      vc      <- decay * vc + (1 - decay) * mean(g2, axis=-2)          shape[:-2] + shape[-1:]
      x        = g * rsqrt(vr / mean(vr, -1))[..., None] * rsqrt(vc)[..., None, :]
    otherwise:
      v       <- decay * v + (1 - decay) * g2;   x = g * rsqrt(v)
    x          = x / max(1, rms(x) / clipping_threshold)
    scale      = lr * max(rms(w), 1e-3)   (multiply_by_parameter_scale; else lr)
    update     = scale * x;  with beta1 > 0: m <- beta1 * m + (1 - beta1) * update; update = m
    w         <- w - update

t2t adds `mean(g2) * 1e-30` to `decay` and `scale` (an XLA fusion guard; no effect on float32
values) and that term is kept here so the arithmetic is the same op for op.

Slots are float32 and created in t2t's order (`m`, then `vr`, `vc` or `v`); TF1 named them
`<variable>/Adafactor`, `<variable>/Adafactor_1`, ... in that order (`t2t_slot_names`).
"""
from __future__ import annotations

import keras
import tensorflow as tf

DECAY_TYPES = ("pow", "adam")


def reduce_rms(x: tf.Tensor) -> tf.Tensor:
    """Root mean square of all entries of `x` (t2t's `adafactor.reduce_rms`)."""
    return tf.sqrt(tf.reduce_mean(tf.square(x)))


def decay_rate(step: tf.Tensor, decay_type: str, beta2: float,
               memory_exponent: float) -> tf.Tensor:
    """t2t's second-moment decay at global step `step` (before its increment).

    Args:
      step: float32 scalar, the global step.
      decay_type: "pow" (`adafactor_decay_rate_pow`) or "adam" (`adafactor_decay_rate_adam`).
      beta2: hparams.optimizer_adafactor_beta2 (decay_type "adam").
      memory_exponent: hparams.optimizer_adafactor_memory_exponent (decay_type "pow").

    Returns:
      A float32 scalar in [0, 1).
    """
    if decay_type == "adam":
        t = step + 1.0
        return beta2 * (1.0 - tf.pow(beta2, t - 1.0)) / (1.0 - tf.pow(beta2, t))
    return 1.0 - tf.pow(step + 1.0, -memory_exponent)


class Adafactor(keras.optimizers.Optimizer):
    """t2t's AdafactorOptimizer for gradients already summed over replicas.

    Args:
      learning_rate: t2t's learning-rate schedule (a LearningRateSchedule read at the number
        of applied updates, which is the global step without multistep accumulation).
      decay_type: "pow" or "adam" (hparams.optimizer_adafactor_decay_type).
      beta1: momentum; 0 keeps no `m` slot.
      beta2: second-moment decay of decay_type "adam".
      memory_exponent: exponent of decay_type "pow".
      clipping_threshold: update clipping; None disables it.
      factored: factored second moments for variables of rank >= 2.
      multiply_by_parameter_scale: scale the update by max(rms(w), 1e-3).
    """

    def __init__(self, learning_rate, decay_type: str = "pow", beta1: float = 0.0,
                 beta2: float = 0.999, memory_exponent: float = 0.8,
                 clipping_threshold: float | None = 1.0, factored: bool = True,
                 multiply_by_parameter_scale: bool = True, name: str = "adafactor",
                 **kwargs):
        if decay_type not in DECAY_TYPES:
            raise ValueError(f"optimizer_adafactor_decay_type={decay_type!r}: use 'pow' or "
                             "'adam'")
        if not 0.0 <= beta1 < 1.0:
            raise ValueError(f"optimizer_adafactor_beta1={beta1} must be in [0, 1)")
        if clipping_threshold is not None and clipping_threshold <= 0:
            raise ValueError(f"optimizer_adafactor_clipping_threshold={clipping_threshold} "
                             "must be > 0")
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.decay_type = decay_type
        self.beta1 = float(beta1)
        self.beta2 = float(beta2)
        self.memory_exponent = float(memory_exponent)
        self.clipping_threshold = clipping_threshold
        self.factored = bool(factored)
        self.multiply_by_parameter_scale = bool(multiply_by_parameter_scale)

    def is_factored(self, shape) -> bool:
        """Whether a variable of `shape` keeps factored second moments (vr, vc)."""
        return self.factored and len(shape) >= 2

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        # Per variable index: {slot name: variable}, created in t2t's order.
        self._slots: list[dict[str, keras.Variable]] = []
        for var in var_list:
            shape = tuple(var.shape)
            slots = {}
            if self.beta1:
                slots["m"] = self.add_variable(shape, dtype="float32", name="m")
            if self.is_factored(shape):
                slots["vr"] = self.add_variable(shape[:-1], dtype="float32", name="vr")
                slots["vc"] = self.add_variable(shape[:-2] + shape[-1:], dtype="float32",
                                                name="vc")
            else:
                slots["v"] = self.add_variable(shape, dtype="float32", name="v")
            self._slots.append(slots)

    def slots(self, variable) -> dict[str, keras.Variable]:
        """The slots of `variable` by t2t's slot name ("m", "vr", "vc", "v")."""
        return self._slots[self._get_variable_index(variable)]

    def update_step(self, gradient, variable, learning_rate):
        slots = self.slots(variable)
        grad = tf.cast(gradient, tf.float32)
        old = tf.cast(variable, tf.float32)
        step = tf.cast(self.iterations, tf.float32)
        grad_squared = tf.square(grad) + 1e-30
        grad_squared_mean = tf.reduce_mean(grad_squared)
        decay = decay_rate(step, self.decay_type, self.beta2, self.memory_exponent)
        update_scale = tf.cast(learning_rate, tf.float32)
        if self.multiply_by_parameter_scale:
            update_scale *= tf.maximum(reduce_rms(old), 1e-3)
        decay += grad_squared_mean * 1e-30
        update_scale += grad_squared_mean * 1e-30
        mixing = 1.0 - decay
        if "vr" in slots:
            new_vr = decay * slots["vr"] + mixing * tf.reduce_mean(grad_squared, -1)
            new_vc = decay * slots["vc"] + mixing * tf.reduce_mean(grad_squared, -2)
            slots["vr"].assign(new_vr)
            slots["vc"].assign(new_vc)
            long_term_mean = tf.reduce_mean(new_vr, -1, keepdims=True)
            r_factor = tf.math.rsqrt(new_vr / long_term_mean)
            c_factor = tf.math.rsqrt(new_vc)
            x = grad * tf.expand_dims(r_factor, -1) * tf.expand_dims(c_factor, -2)
        else:
            new_v = decay * slots["v"] + mixing * grad_squared
            slots["v"].assign(new_v)
            x = grad * tf.math.rsqrt(new_v)
        if self.clipping_threshold is not None:
            x /= tf.maximum(1.0, reduce_rms(x) / self.clipping_threshold)
        subtrahend = update_scale * x
        if self.beta1:
            new_m = self.beta1 * slots["m"] + (1.0 - self.beta1) * subtrahend
            slots["m"].assign(new_m)
            subtrahend = new_m
        variable.assign(tf.cast(old - subtrahend, variable.dtype))

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(decay_type=self.decay_type, beta1=self.beta1, beta2=self.beta2,
                      memory_exponent=self.memory_exponent,
                      clipping_threshold=self.clipping_threshold, factored=self.factored,
                      multiply_by_parameter_scale=self.multiply_by_parameter_scale)
        return config


def t2t_slot_names(variable_name: str, shape, beta1: float, factored: bool) -> dict[str, str]:
    """The TF1 names t2t's Adafactor gave the slots of `variable_name`, by slot name.

    TF1's slot creator names each slot `<variable>/<optimizer name>` made unique in creation
    order, and t2t creates `m` (beta1 > 0), then `vr` and `vc` (factored) or `v`.

    Args:
      variable_name: the t2t variable name (no ":0").
      shape: the variable's shape.
      beta1: hparams.optimizer_adafactor_beta1.
      factored: hparams.optimizer_adafactor_factored.

    Returns:
      e.g. {"vr": "w/Adafactor", "vc": "w/Adafactor_1"}.
    """
    order = (["m"] if beta1 else []) + (["vr", "vc"] if factored and len(shape) >= 2 else ["v"])
    return {slot: f"{variable_name}/Adafactor" + (f"_{i}" if i else "")
            for i, slot in enumerate(order)}
