"""A tiny Transformer trained in-process to copy digit strings (the algorithmic identity
task, `algorithmic_identity_decimal40`'s symbols) and, asked by target_space_id 1, to
reverse them: the session fixture `copy_model` of conftest.py, for the word-alignment tests.
Its vocabulary is a SubwordTextEncoder whose subtokens are the ten digits, so ids 2..11 are
digits 0..9 as in t2t's numeric TextEncoder, followed by the single characters that t2t's
escaping needs (unused by the task), so that the SavedModel's graph encoder accepts it.

Each step trains both tasks on one batch (even rows copy, odd rows reverse). The reverse
rows have exactly REVERSE_LENGTH digits: on strings of 3..8 digits a one-layer model's
attention put 95-96% of the reversed words on the anti-diagonal (too close to the 95% the
test asks), on a fixed length 100% (200 lines; the copy rows stay 3..8 digits)."""
from __future__ import annotations

import pathlib

import numpy as np

DIGITS = 10
SUBTOKENS = (["<pad>", "<EOS>"] + [f"{d}_" for d in range(DIGITS)]
             + sorted(set("<pad><EOS>\\_u;0123456789")))
VOCAB_SIZE = len(SUBTOKENS)
HPARAMS = ("hidden_size=64,filter_size=128,num_heads=4,num_hidden_layers=1,"
           "layer_prepostprocess_dropout=0.0,attention_dropout=0.0,relu_dropout=0.0,"
           "label_smoothing=0.0")
# 300 steps left 2 of the 24 test lines miscopied with oneDNN's kernels (AVX512 CPU; all
# right with Eigen's); 400 copy them all with both.
STEPS = 400
REVERSE_SPACE = 1  # the target_space_id that asks for the reverse
REVERSE_LENGTH = 8


def write_vocab(path: pathlib.Path) -> pathlib.Path:
    """The digit SubwordTextEncoder's vocab file (`<pad>`, `<EOS>`, `0_` .. `9_`, ...)."""
    path.write_text("".join(f"'{s}'\n" for s in SUBTOKENS), encoding="utf-8")
    return path


def batch(rng: np.random.Generator, rows: int = 64, longest: int = 8) -> np.ndarray:
    """int32 [rows, longest + 1]: random digit ids of 3..longest symbols, EOS, 0-padding."""
    ids = np.zeros([rows, longest + 1], np.int32)
    for row in range(rows):
        length = rng.integers(3, longest + 1)
        ids[row, :length] = rng.integers(2, DIGITS + 2, size=length)
        ids[row, length] = 1
    return ids


def lines(rng: np.random.Generator, count: int, length: int | None = None) -> list[str]:
    """`count` digit strings of 3..8 space-separated digits (or exactly `length`)."""
    return [" ".join(str(d) for d in rng.integers(
        0, DIGITS, size=length or rng.integers(3, 9))) for _ in range(count)]


def training_batch(rng: np.random.Generator, rows: int = 64) -> dict[str, np.ndarray]:
    """Features of one step: even rows copy `batch` rows, odd rows reverse strings of
    REVERSE_LENGTH digits (target_space_id REVERSE_SPACE)."""
    inputs = batch(rng, rows)
    targets = inputs.copy()
    space = np.zeros([rows], np.int32)
    for row in range(1, rows, 2):
        inputs[row, :REVERSE_LENGTH] = rng.integers(2, DIGITS + 2, size=REVERSE_LENGTH)
        inputs[row, REVERSE_LENGTH:] = 0
        inputs[row, REVERSE_LENGTH] = 1
        targets[row] = inputs[row]
        targets[row, :REVERSE_LENGTH] = inputs[row, :REVERSE_LENGTH][::-1]
        space[row] = REVERSE_SPACE
    return {"inputs": inputs, "targets": targets, "target_space_id": space}


def train():
    """The Transformer after STEPS Adam steps on the two tasks."""
    import keras
    import tensorflow as tf

    from t2t_lite.hparams_lib import create_hparams
    from t2t_lite.models.transformer import Transformer

    keras.utils.set_random_seed(1)
    model = Transformer(create_hparams("transformer_tiny", HPARAMS), VOCAB_SIZE, VOCAB_SIZE)
    optimizer = keras.optimizers.Adam(3e-3)
    rng = np.random.default_rng(0)

    @tf.function
    def step(features):
        with tf.GradientTape() as tape:
            num, den = model.training_loss(features, 0.0, training=True)
            loss = num / den
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))

    for _ in range(STEPS):
        step(training_batch(rng))
    return model
