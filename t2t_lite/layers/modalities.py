"""tensor2tensor's symbol modality: sharded embedding matrices, bottom (ids -> vectors) and top
(vectors -> logits).

A `[V, D]` matrix is stored as `num_shards` variables `weights_0 .. weights_{S-1}` split by rows
as t2t splits it (shard i has `V // S + (1 if i < V % S else 0)` rows) and concatenated once per
use. Scopes follow t2t: `symbol_modality_{V}_{D}/shared` when inputs, targets and softmax share
one matrix, otherwise `input_emb`, `target_emb` and `softmax`.
"""
from __future__ import annotations

import keras
import tensorflow as tf


def shard_sizes(vocab_size: int, num_shards: int) -> list[int]:
    """Rows of each shard in t2t's split of a `[vocab_size, D]` matrix.

    Args:
      vocab_size: V.
      num_shards: S (hparams.symbol_modality_num_shards).

    Returns:
      S row counts summing to V; the first `V % S` shards have one extra row. When S > V the
      last shards have 0 rows, as t2t creates them (a 12-symbol algorithmic problem with the
      16 shards of every transformer_* set).
    """
    if num_shards < 1:
        raise ValueError(f"symbol_modality_num_shards={num_shards} must be at least 1")
    return [vocab_size // num_shards + (1 if i < vocab_size % num_shards else 0)
            for i in range(num_shards)]


def padded_vocab_size(vocab_size: int, vocab_divisor: int = 1) -> int:
    """Vocab size rounded up to a multiple of hparams.vocab_divisor, as t2t's modality does.

    Args:
      vocab_size: V from the problem.
      vocab_divisor: hparams.vocab_divisor (1 = unchanged).

    Returns:
      The padded V used for the matrix shapes and the variable scope name.
    """
    return vocab_size + (-vocab_size) % max(int(vocab_divisor), 1)


class ShardedWeights(keras.layers.Layer):
    """A `[V, D]` matrix held as t2t's row shards `weights_0 .. weights_{S-1}`.

    Args:
      vocab_size: V.
      hidden_size: D.
      num_shards: S.
      name: t2t scope: "shared", "input_emb", "target_emb" or "softmax".
    """

    def __init__(self, vocab_size: int, hidden_size: int, num_shards: int, name: str, **kwargs):
        super().__init__(name=name, **kwargs)
        self.vocab_size = int(vocab_size)
        self.hidden_size = int(hidden_size)
        self.num_shards = int(num_shards)
        self.sizes = shard_sizes(self.vocab_size, self.num_shards)

    def build(self, input_shape=None) -> None:
        for i, rows in enumerate(self.sizes):
            # A new initializer per shard: an unseeded Keras 3 initializer repeats its values.
            init = keras.initializers.RandomNormal(0.0, self.hidden_size**-0.5)
            # One attribute per shard (not a list): tf.train.Checkpoint only follows
            # attributes of Keras 3 layers, so variables held in lists would not be saved.
            setattr(self, f"weights_{i}", self.add_weight(
                name=f"weights_{i}", shape=(rows, self.hidden_size), initializer=init))

    @property
    def shards(self) -> list[keras.Variable]:
        """The shard variables `weights_0 .. weights_{S-1}`."""
        return [getattr(self, f"weights_{i}") for i in range(self.num_shards)]

    def matrix(self) -> tf.Tensor:
        """Returns the concatenated [V, D] matrix (float32)."""
        if len(self.shards) == 1:
            return tf.convert_to_tensor(self.shards[0])
        return tf.concat([tf.convert_to_tensor(s) for s in self.shards], axis=0)

    def call(self, inputs=None) -> tf.Tensor:
        """Returns the concatenated [V, D] matrix; `inputs` is ignored."""
        return self.matrix()

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size, hidden_size=self.hidden_size, num_shards=self.num_shards
        )
        return config


def embed(ids: tf.Tensor, matrix: tf.Tensor, multiply_by_sqrt_depth: bool = True) -> tf.Tensor:
    """t2t's symbol bottom: gather rows, scale by sqrt(D), zero the vectors of id 0.

    Args:
      ids: int [B, L].
      matrix: [V, D].
      multiply_by_sqrt_depth: hparams.multiply_embedding_mode == "sqrt_depth".

    Returns:
      [B, L, D]; all-zero where ids == 0.
    """
    x = tf.gather(matrix, ids)
    if multiply_by_sqrt_depth:
        x *= tf.cast(matrix.shape[-1] ** 0.5, x.dtype)
    return x * tf.cast(tf.not_equal(ids, 0), x.dtype)[..., tf.newaxis]


def logits_from_matrix(x: tf.Tensor, matrix: tf.Tensor) -> tf.Tensor:
    """t2t's symbol top: `x · Eᵀ`, no bias, no rescaling.

    Args:
      x: [B, T, D] (or [N, D]).
      matrix: [V, D].

    Returns:
      [B, T, V] (or [N, V]).
    """
    # One 2-D GEMM over all positions (faster than a broadcast batched matmul).
    shape = tf.shape(x)
    logits = tf.matmul(tf.reshape(x, [-1, matrix.shape[1]]), tf.cast(matrix, x.dtype),
                       transpose_b=True)
    return tf.reshape(logits, tf.concat([shape[:-1], [matrix.shape[0]]], axis=0))


class SymbolModality(keras.layers.Layer):
    """The embedding / softmax weights of t2t's symbol modalities for one model.

    With `shared_embedding_and_softmax_weights` (and equal vocab sizes) one "shared" matrix
    serves inputs, targets and the softmax; t2t silently turns that sharing off when the input
    and target vocab sizes differ. Otherwise "input_emb", "target_emb" and "softmax"; with
    `shared_embedding=True` (and no softmax sharing) inputs and targets use "shared" and the
    softmax its own matrix.

    The layer's own name is "symbol_modality_{V_target}_{D}"; an input matrix of a different
    size lives under a second `symbol_modality_{V_in}_{D}` scope (`input_scope`), as in t2t.

    Args:
      input_vocab_size: V_in (before vocab_divisor padding).
      target_vocab_size: V_out (before vocab_divisor padding).
      hidden_size: D.
      num_shards: hparams.symbol_modality_num_shards.
      share_softmax: hparams.shared_embedding_and_softmax_weights.
      shared_embedding: hparams.shared_embedding.
      multiply_embedding_mode: hparams.multiply_embedding_mode ("sqrt_depth" or "none").
      vocab_divisor: hparams.vocab_divisor.
    """

    def __init__(
        self,
        input_vocab_size: int | None,
        target_vocab_size: int,
        hidden_size: int,
        num_shards: int = 16,
        share_softmax: bool = True,
        shared_embedding: bool = False,
        multiply_embedding_mode: str = "sqrt_depth",
        vocab_divisor: int = 1,
        **kwargs,
    ):
        self.input_vocab_size = (
            None if input_vocab_size is None else padded_vocab_size(input_vocab_size, vocab_divisor)
        )
        self.target_vocab_size = padded_vocab_size(target_vocab_size, vocab_divisor)
        self.hidden_size = int(hidden_size)
        kwargs.setdefault("name", f"symbol_modality_{self.target_vocab_size}_{self.hidden_size}")
        super().__init__(**kwargs)
        if multiply_embedding_mode not in ("sqrt_depth", "none"):
            raise ValueError(
                f"hparams.multiply_embedding_mode={multiply_embedding_mode!r} is not supported; "
                "use 'sqrt_depth' (t2t's default) or 'none'"
            )
        self.multiply_by_sqrt_depth = multiply_embedding_mode == "sqrt_depth"
        self.num_shards = int(num_shards)
        self.vocab_divisor = int(vocab_divisor)
        same_vocab = self.input_vocab_size in (None, self.target_vocab_size)
        # t2t turns softmax sharing off (sets the hparam to 0) when the vocab sizes differ.
        self.share_softmax = bool(share_softmax) and same_vocab
        self.shared_embedding = bool(shared_embedding)
        embeddings_shared = self.share_softmax or self.shared_embedding
        self.input_scope = f"symbol_modality_{self.input_vocab_size}_{self.hidden_size}"

        def weights(vocab: int, scope: str) -> ShardedWeights:
            return ShardedWeights(vocab, self.hidden_size, self.num_shards, name=scope)

        self.target_emb = weights(
            self.target_vocab_size, "shared" if embeddings_shared else "target_emb"
        )
        self.softmax = (
            self.target_emb if self.share_softmax else weights(self.target_vocab_size, "softmax")
        )
        if self.input_vocab_size is None:
            self.input_emb = None
        elif embeddings_shared and same_vocab:
            self.input_emb = self.target_emb
        else:
            # With shared_embedding but different sizes t2t creates two "shared" matrices, one
            # per modality scope.
            self.input_emb = weights(
                self.input_vocab_size, "shared" if embeddings_shared else "input_emb"
            )

    def build(self, input_shape=None) -> None:
        if self.input_emb is not None and self.input_emb is not self.target_emb:
            if self.input_vocab_size == self.target_vocab_size:
                self.input_emb.build()
            else:
                # A different vocab size is a different t2t modality scope, a sibling of this
                # layer's own scope: "<parent>/symbol_modality_{V_in}_{D}/...".
                parent = self.path.rpartition("/")[0]
                with keras.name_scope(self.input_scope, override_parent=parent):
                    self.input_emb.build()
        self.target_emb.build()
        if self.softmax is not self.target_emb:
            self.softmax.build()

    def variable_names(self, prefix: str = "") -> dict[str, keras.Variable]:
        """t2t name -> variable for every shard, e.g. "transformer/symbol_modality_1018_128/
        shared/weights_0".

        Args:
          prefix: scope above the modality (t2t: "transformer/").

        Returns:
          Dict of t2t variable names to this layer's variables.
        """
        names = {}
        tables = [(self.target_emb, self.name), (self.softmax, self.name)]
        if self.input_emb is not None:
            scope = self.input_scope if self.input_vocab_size != self.target_vocab_size else (
                self.name
            )
            tables.append((self.input_emb, scope))
        for table, scope in tables:
            for i, var in enumerate(table.shards):
                names[f"{prefix}{scope}/{table.name}/weights_{i}"] = var
        return names

    def matrices(self) -> dict[str, tf.Tensor]:
        """The concatenated matrices, each computed once (shared scopes give one tensor).

        Compute them once per forward pass and pass them to `bottom`/`top`: the gradients of
        all uses then add up into one dense [V, D] gradient per matrix before the concat's
        gradient splits it into shards (t2t makes embedding gradients dense too).

        Returns:
          {"inputs": [V_in, D] (absent without inputs), "targets": [V_out, D],
          "softmax": [V_out, D]}.
        """
        tables = {"targets": self.target_emb, "softmax": self.softmax}
        if self.input_emb is not None:
            tables["inputs"] = self.input_emb
        computed: dict[int, tf.Tensor] = {}
        out = {}
        for key, table in tables.items():
            if id(table) not in computed:
                computed[id(table)] = table.matrix()
            out[key] = computed[id(table)]
        return out

    def bottom(self, ids: tf.Tensor, which: str = "targets",
               matrices: dict[str, tf.Tensor] | None = None) -> tf.Tensor:
        """Embeds ids with t2t's bottom (gather, sqrt(D), id 0 -> zero vector).

        Args:
          ids: int [B, L].
          which: "inputs" or "targets".
          matrices: optional result of `matrices()` to reuse.

        Returns:
          float32 [B, L, D].
        """
        if which == "inputs" and self.input_emb is None:
            raise ValueError("this model has no input modality (input_vocab_size=None)")
        if matrices is None:
            table = self.input_emb if which == "inputs" else self.target_emb
            matrix = table.matrix()
        else:
            matrix = matrices[which]
        return embed(ids, matrix, self.multiply_by_sqrt_depth)

    def top(self, x: tf.Tensor, matrices: dict[str, tf.Tensor] | None = None) -> tf.Tensor:
        """Logits `x · Eᵀ` of the softmax matrix.

        Args:
          x: [B, T, D] decoder output.
          matrices: optional result of `matrices()` to reuse.

        Returns:
          [B, T, V_out].
        """
        matrix = self.softmax.matrix() if matrices is None else matrices["softmax"]
        return logits_from_matrix(x, matrix)

    def call(self, ids: tf.Tensor) -> tf.Tensor:
        """Same as `bottom(ids, "targets")`: [B, L] -> [B, L, D]."""
        return self.bottom(ids, "targets")

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            input_vocab_size=self.input_vocab_size,
            target_vocab_size=self.target_vocab_size,
            hidden_size=self.hidden_size,
            num_shards=self.num_shards,
            share_softmax=self.share_softmax,
            shared_embedding=self.shared_embedding,
            multiply_embedding_mode="sqrt_depth" if self.multiply_by_sqrt_depth else "none",
            vocab_divisor=self.vocab_divisor,
        )
        return config
