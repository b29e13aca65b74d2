"""tensor2tensor's optimizer side: Adam and Adafactor from hparams, multistep gradient accumulation, gradient
clipping, weight decay and the variable initializers by name (T2T_REFERENCE.md §4.1, §4.3, §2.10).

Division of labour with the trainer (`t2t_lite.training.trainer_lib`): the trainer computes each replica's
gradient of the *global* loss, sums the gradients over replicas itself (one all-reduce, so that
the clipping norm and the gradient-norm summary see the real global gradient), and then calls
`OptimizerState.apply` or, for multistep micro-batches that do not update, `.accumulate`.
The Keras optimizers built here therefore take gradients that are already summed over replicas.
"""
from __future__ import annotations

import keras
import tensorflow as tf

from t2t_lite import hparams_support
from t2t_lite.errors import UserError
from t2t_lite.hparams import HParams
from t2t_lite.training import adafactor
from t2t_lite.training import learning_rate as learning_rate_lib

ADAM_OPTIMIZERS = ("adam", "true_adam", "multistep_adam")
OPTIMIZERS = ADAM_OPTIMIZERS + ("adafactor", "momentum", "sgd")


class OptimizerError(UserError):
    """An optimizer setting t2t_lite does not support (one line naming the hparam)."""


class _PreReducedGradients:
    """Mixin: gradients reach `apply` already summed over replicas (see module docstring).

    Keras' TF optimizers sum gradients over replicas inside `apply`; summing twice would
    multiply the update by the number of replicas, so that step is skipped here.
    """

    def _all_reduce_sum_gradients(self, grads_and_vars):
        return list(grads_and_vars)


class _ModelOwnsItsWeights:
    """Mixin: the optimizer's references to the model's weights stay out of checkpoints.

    tf.train.Checkpoint names each variable by its shortest path from the root; through
    `optimizer/_trainable_variables/<i>` that path is shorter than the model's own
    (`model/body/encoder/...`), so the weights would be saved under the optimizer's name.
    Restoring goes through the model either way; the names matter to name-based readers
    (tf.train.list_variables, checkpoint averaging, t2t name maps).
    """

    def _trackable_children(self, save_type="checkpoint", **kwargs):
        children = dict(super()._trackable_children(save_type, **kwargs))
        children.pop("_trainable_variables", None)
        return children


class Adam(_ModelOwnsItsWeights, _PreReducedGradients, keras.optimizers.Adam):
    """Keras Adam (TF1's epsilon-hat form, bias correction by applied updates) for summed grads.

    With `fused` (hparams.use_fused_kernels, the default) each weight's update is one
    `ResourceApplyAdam`, the kernel t2t's TF1 `AdamOptimizer` runs: the same formula as Keras'
    `update_step` (m += (g - m)(1 - b1), v += (g^2 - v)(1 - b2), w -= alpha m / (sqrt(v) + eps),
    alpha = lr sqrt(1 - b2^t) / (1 - b1^t)) in one pass over the weight instead of ~12
    TensorFlow ops (bench/README.md, "Adam's one kernel"); results differ from Keras' by
    float rounding (Eigen's fused multiply-adds). `fused=False` runs Keras' own ops.
    """

    def __init__(self, *args, fused: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.fused = fused

    def update_step(self, gradient, variable, learning_rate):
        if not self.fused or self.amsgrad:
            return super().update_step(gradient, variable, learning_rate)
        dtype = variable.dtype
        # The bias corrections as Keras computes them (powers of the applied-update count),
        # not TF1's running products beta1_power / beta2_power: one float rounding apart.
        step = tf.cast(self.iterations + 1, dtype)
        beta_1 = tf.cast(self.beta_1, dtype)
        beta_2 = tf.cast(self.beta_2, dtype)
        index = self._get_variable_index(variable)
        # Under a tf.distribute update() each replica's component handle is taken.
        tf.raw_ops.ResourceApplyAdam(
            var=_resource(variable).handle,
            m=_resource(self._momentums[index]).handle,
            v=_resource(self._velocities[index]).handle,
            beta1_power=tf.pow(beta_1, step), beta2_power=tf.pow(beta_2, step),
            lr=tf.cast(learning_rate, dtype), beta1=beta_1, beta2=beta_2,
            epsilon=tf.cast(self.epsilon, dtype), grad=tf.cast(gradient, dtype),
            use_locking=False)

    def get_config(self) -> dict:
        return {**super().get_config(), "fused": self.fused}


def _resource(variable):
    """The TensorFlow resource variable behind a Keras variable (or the variable itself)."""
    return variable.value if isinstance(variable, keras.Variable) else variable


class SGD(_ModelOwnsItsWeights, _PreReducedGradients, keras.optimizers.SGD):
    """Keras SGD / momentum for gradients already summed over replicas."""


class Adafactor(_ModelOwnsItsWeights, _PreReducedGradients, adafactor.Adafactor):
    """t2t's Adafactor (`t2t_lite.training.adafactor`) for gradients already summed over replicas."""


class LossScaleOptimizer(_ModelOwnsItsWeights, keras.optimizers.LossScaleOptimizer):
    """Keras' dynamic loss scaling (float16 training) with clean checkpoint names."""


def accumulate_steps(hparams: HParams) -> int:
    """Number of micro-batches per update: `optimizer_multistep_accumulate_steps` for
    `optimizer=multistep_adam` (t2t's MultistepAdamOptimizer), else 1."""
    if hparams.optimizer != "multistep_adam":
        return 1
    n = int(hparams.optimizer_multistep_accumulate_steps or 0)
    if n < 1:
        raise OptimizerError(
            "optimizer=multistep_adam needs optimizer_multistep_accumulate_steps >= 1, got "
            f"{hparams.optimizer_multistep_accumulate_steps}"
        )
    return n


class _AppliedUpdateSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Maps the inner optimizer's count of applied updates `u` to t2t's global step.

    With n micro-batches per update the u-th update (0-based) happens at global step
    `(u + 1) * n - 1`, where t2t evaluates its schedule (which divides by n itself).
    """

    def __init__(self, schedule: keras.optimizers.schedules.LearningRateSchedule, n: int):
        self.schedule = schedule
        self.n = n

    def __call__(self, step):
        step = tf.cast(step, tf.int64)
        return self.schedule((step + 1) * self.n - 1)

    def get_config(self) -> dict:
        return {"schedule": keras.optimizers.schedules.serialize(self.schedule), "n": self.n}


def optimizer_from_hparams(hparams: HParams) -> keras.optimizers.Optimizer:
    """The Keras optimizer t2t's `ConditionalOptimizer` builds for `hparams`.

    adam / true_adam / multistep_adam -> Adam(beta1, beta2, epsilon) (t2t's LazyAdam equals
    Adam for dense gradients); adafactor -> t2t's Adafactor with the `optimizer_adafactor_*`
    hparams (`adafactor_optimizer_from_hparams`); momentum -> SGD with momentum (and Nesterov); sgd -> SGD. The
    learning rate is `learning_rate_schedule(hparams)` read at the global step. With
    `activation_dtype=float16` the optimizer is wrapped in Keras' LossScaleOptimizer with
    t2t's initial scale `mixed_precision_optimizer_init_loss_scale` and growth every 2000
    finite steps (t2t halves after 2 consecutive overflows, Keras after each one).

    Args:
      hparams: model hparams.

    Returns:
      A Keras optimizer taking gradients already summed over replicas.
    """
    schedule = learning_rate_lib.learning_rate_schedule(hparams)
    n = accumulate_steps(hparams)
    lr = _AppliedUpdateSchedule(schedule, n) if n > 1 else schedule
    name = hparams.optimizer
    if name in ADAM_OPTIMIZERS:
        opt = Adam(
            learning_rate=lr,
            beta_1=hparams.optimizer_adam_beta1,
            beta_2=hparams.optimizer_adam_beta2,
            epsilon=hparams.optimizer_adam_epsilon,
            fused=bool(hparams_support.hparam(hparams, "use_fused_kernels")),
        )
    elif name == "adafactor":
        opt = _adafactor_from_hparams(hparams, lr)
    elif name == "momentum":
        opt = SGD(
            learning_rate=lr,
            momentum=hparams.optimizer_momentum_momentum,
            nesterov=hparams.optimizer_momentum_nesterov,
        )
    elif name == "sgd":
        opt = SGD(learning_rate=lr)
    else:
        raise OptimizerError(
            f"hparams.optimizer={name!r} is not supported; use one of {', '.join(OPTIMIZERS)}"
        )
    if hparams_support.hparam(hparams, "activation_dtype") == "float16":
        # mixed_precision_optimizer_loss_scaler is refused at other values than t2t's
        # "exponential" (hparams_support.NOT_SUPPORTED).
        opt = LossScaleOptimizer(
            opt,
            initial_scale=float(hparams.mixed_precision_optimizer_init_loss_scale),
            dynamic_growth_steps=2000,
        )
    return opt


def _adafactor_from_hparams(hparams: HParams, lr) -> Adafactor:
    """t2t's `adafactor_optimizer_from_hparams` (float32 weights, so no parameter encoding:
    weight_dtype is refused at other values by `hparams_support`)."""
    try:
        return Adafactor(
            learning_rate=lr,
            decay_type=hparams_support.hparam(hparams, "optimizer_adafactor_decay_type"),
            beta1=hparams_support.hparam(hparams, "optimizer_adafactor_beta1"),
            beta2=hparams_support.hparam(hparams, "optimizer_adafactor_beta2"),
            memory_exponent=hparams_support.hparam(hparams,
                                                   "optimizer_adafactor_memory_exponent"),
            clipping_threshold=hparams_support.hparam(
                hparams, "optimizer_adafactor_clipping_threshold"),
            factored=hparams_support.hparam(hparams, "optimizer_adafactor_factored"),
            multiply_by_parameter_scale=hparams_support.hparam(
                hparams, "optimizer_adafactor_multiply_by_parameter_scale"),
        )
    except ValueError as e:
        raise OptimizerError(f"hparams.{e}") from e


def weight_decay(decay_rate: float, variables) -> tf.Tensor | float:
    """t2t's weight-decay loss term `decay_rate * sum(||v||^2 / 2)`.

    Skips 1-D variables whose name ends in "bias" (t2t's heuristic for biases); layer-norm
    scales are decayed.

    Args:
      decay_rate: hparams.weight_decay; 0 disables.
      variables: trainable variables.

    Returns:
      A float32 scalar tensor, or 0.0 when decay_rate is 0.
    """
    if not decay_rate:
        return 0.0
    losses = [
        tf.nn.l2_loss(tf.cast(v, tf.float32))
        for v in variables
        if not (len(v.shape) == 1 and _variable_path(v).endswith("bias"))
    ]
    return tf.add_n(losses) * decay_rate if losses else 0.0


def _variable_path(v) -> str:
    path = getattr(v, "path", None) or v.name
    return path.removesuffix(":0")


def densify(grads: list) -> list:
    """Converts IndexedSlices gradients (from embedding gathers) to dense tensors.

    t2t's symbol modality makes its embedding gradient dense, so its Adam updates every row's
    moments at every step; Keras' Adam would update only the gathered rows of an IndexedSlices
    gradient (LazyAdam), which is a different optimizer.

    Args:
      grads: list of gradients (tensors, IndexedSlices or None).

    Returns:
      The list with every IndexedSlices converted to a dense tensor.
    """
    return [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]


def clip_by_global_norm(grads: list, clip_norm: float) -> tuple[list, tf.Tensor]:
    """Global-norm clipping (t2t's `clip_gradients=clip_grad_norm`) and the global norm.

    Args:
      grads: list of gradient tensors (None entries are kept).
      clip_norm: hparams.clip_grad_norm; 0 disables clipping.

    Returns:
      (clipped grads, global norm of the unclipped grads as a float32 scalar).
    """
    present = [g for g in grads if g is not None]
    norm = tf.linalg.global_norm([tf.cast(g, tf.float32) for g in present])
    if not clip_norm:
        return list(grads), norm
    clipped, _ = tf.clip_by_global_norm(present, clip_norm, use_norm=norm)
    it = iter(clipped)
    return [None if g is None else next(it) for g in grads], norm


class GradientAccumulator(tf.Module):
    """multistep_adam's per-variable `grad_acc` slots.

    Values are identical on every replica (they hold gradients already summed over replicas),
    so each replica keeps its own copy without synchronisation (ON_READ) and checkpoints store
    the first replica's copy.
    """

    def __init__(self, variables, n: int):
        super().__init__(name="grad_acc")
        self.n = n
        self.slots = [
            tf.Variable(
                tf.zeros(v.shape, tf.float32),
                trainable=False,
                synchronization=tf.VariableSynchronization.ON_READ,
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
                name="grad_acc",
            )
            for v in variables
        ]

    def accumulate(self, grads: list) -> None:
        """Adds one micro-batch's gradients to the slots."""
        for slot, g in zip(self.slots, grads):
            if g is not None:
                slot.assign_add(tf.cast(g, tf.float32))

    def average_with(self, grads: list) -> list:
        """Returns `(grad_acc + g) / n` per variable (the gradient of an applied update)."""
        return [
            None if g is None else (slot + tf.cast(g, tf.float32)) / float(self.n)
            for slot, g in zip(self.slots, grads)
        ]

    def reset(self) -> None:
        """Sets every slot back to zero after an applied update."""
        for slot in self.slots:
            slot.assign(tf.zeros_like(slot))


class OptimizerState:
    """The optimizer of one training run: Keras optimizer + multistep accumulation.

    Build it (and call `build`) under the distribution strategy's scope. Per micro-batch the
    trainer calls `apply(grads)` when `is_update_step(global_step)`, else `accumulate(grads)`;
    both take gradients of the global loss already summed over replicas (loss-scaled when
    `loss_scale` is not None).
    """

    def __init__(self, hparams: HParams):
        self.hparams = hparams
        self.n = accumulate_steps(hparams)
        self.schedule = learning_rate_lib.learning_rate_schedule(hparams)
        self.optimizer = optimizer_from_hparams(hparams)
        self.accumulator: GradientAccumulator | None = None

    @property
    def inner_optimizer(self) -> keras.optimizers.Optimizer:
        """The optimizer doing the update (unwrapped from the loss-scale optimizer)."""
        return getattr(self.optimizer, "inner_optimizer", self.optimizer)

    @property
    def loss_scale(self):
        """The dynamic loss scale variable (float16 training) or None."""
        return getattr(self.optimizer, "dynamic_scale", None)

    def build(self, variables) -> None:
        """Creates the optimizer's slots (and the accumulators) for `variables`."""
        self.optimizer.build(variables)
        if self.n > 1:
            self.accumulator = GradientAccumulator(variables, self.n)

    def is_update_step(self, global_step: int) -> bool:
        """Whether the micro-batch at `global_step` (before its increment) updates the weights:
        t2t's multistep applies on calls n, 2n, ... (global steps n-1, 2n-1, ...)."""
        return (int(global_step) + 1) % self.n == 0

    def apply(self, grads: list, variables) -> None:
        """Applies one update with `grads` (averaged with the accumulated ones if multistep)."""
        grads = densify(grads)
        if self.accumulator is not None:
            grads = self.accumulator.average_with(grads)
        self.optimizer.apply(grads, variables)
        if self.accumulator is not None:
            self.accumulator.reset()

    def accumulate(self, grads: list) -> None:
        """Adds a micro-batch's gradients without updating (multistep calls 1..n-1)."""
        self.accumulator.accumulate(densify(grads))

    def checkpoint_objects(self) -> dict:
        """Objects to put into the training checkpoint besides the model."""
        objects = {"optimizer": self.optimizer}
        if self.accumulator is not None:
            objects["grad_acc"] = self.accumulator
        return objects

    def learning_rate(self, global_step) -> tf.Tensor:
        """t2t's learning rate at `global_step` (what its `learning_rate` summary shows)."""
        return self.schedule(global_step)
