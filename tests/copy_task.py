"""A tiny Transformer trained in-process to copy digit strings (the algorithmic identity
task, `algorithmic_identity_decimal40`'s symbols): the session fixture `copy_model` of
conftest.py, for the word-alignment tests. Its vocabulary is a SubwordTextEncoder whose
subtokens are the ten digits, so ids 2..11 are digits 0..9 as in t2t's numeric TextEncoder,
followed by the single characters that t2t's escaping needs (unused by the task), so that the
SavedModel's graph encoder accepts it."""
from __future__ import annotations

import pathlib

import numpy as np

DIGITS = 10
SUBTOKENS = (["<pad>", "<EOS>"] + [f"{d}_" for d in range(DIGITS)]
             + sorted(set("<pad><EOS>\\_u;0123456789")))
VOCAB_SIZE = len(SUBTOKENS)
HPARAMS = ("hidden_size=32,filter_size=64,num_heads=2,num_hidden_layers=1,"
           "layer_prepostprocess_dropout=0.0,attention_dropout=0.0,relu_dropout=0.0,"
           "label_smoothing=0.0")
STEPS = 300


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


def lines(rng: np.random.Generator, count: int) -> list[str]:
    """`count` digit strings of 3..8 space-separated digits."""
    return [" ".join(str(d) for d in rng.integers(0, DIGITS, size=rng.integers(3, 9)))
            for _ in range(count)]


def train():
    """The Transformer after STEPS Adam steps on the identity task (about 10 s)."""
    import keras
    import tensorflow as tf

    from t2t_lite.hparams import create_hparams
    from t2t_lite.models.transformer import Transformer

    keras.utils.set_random_seed(1)
    model = Transformer(create_hparams("transformer_tiny", HPARAMS), VOCAB_SIZE, VOCAB_SIZE)
    optimizer = keras.optimizers.Adam(3e-3)
    rng = np.random.default_rng(0)

    @tf.function
    def step(ids):
        with tf.GradientTape() as tape:
            num, den = model.training_loss({"inputs": ids, "targets": ids}, 0.0, training=True)
            loss = num / den
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))

    for _ in range(STEPS):
        step(batch(rng))
    return model
