"""Continuous batching's view of a Transformer (`search/continuous.py`): its encoder
and a decoding step whose rows are at different steps of their own sentences."""
from __future__ import annotations

import tensorflow as tf

from t2t_lite import hparams_support
from t2t_lite.search.interface import SlotDecoding
from t2t_lite.layers import common_attention
from t2t_lite.utils import precision


def refusal(hparams) -> str | None:
    """Why a Transformer with these hparams cannot decode in slots, or None when it can."""
    relative = hparams_support.hparam(hparams, "self_attention_type") != "dot_product"
    if relative or hparams.pos not in ("timing", "none", None):
        return "relative self-attention or positions other than timing"
    return None


def slot_decoding(model, max_positions=None) -> SlotDecoding | None:
    """The encoder and decoding step of continuous batching
    (`search/continuous.py`), or None when this model cannot decode in slots
    (relative self-attention, positions other than t2t's timing signal). Call inside the
    traced function that runs them (the weights are read once there).

    Slots share one fixed-size self-attention cache [N, H, M, d] written at one global
    index g; row r started at cache position first[r], so its own step is
    g - first[r] (its timing signal and GO) and it attends to positions first[r]..g
    only (the others get t2t's LARGE_NEGATIVE bias, an exact zero in the softmax).
    `max_positions` (int32 scalar), when given, bounds the rows' own steps: the timing
    signal's table is then made once, not at every step.
    """
    if refusal(model.hparams):
        return None
    table = None
    if max_positions is not None and model.hparams.pos == "timing":
        # Row p is the same whatever the table's length (get_timing_signal_1d).
        table = common_attention.get_timing_signal_1d(max_positions, model.hidden_size)
    matrices = model.modality.matrices()
    decoder_weights = precision.weights_read_once(model.body.decoder)
    step_matrices = dict(matrices, softmax=tf.cast(matrices["softmax"],
                                                   model.body.decoder.compute_dtype))

    def encode(inputs, target_space_id):
        encoder_output, encdec_bias = model.encode(inputs, target_space_id, training=False,
                                                  matrices=matrices)
        return model.body.decoder.encdec_memory_kv(encoder_output), encdec_bias

    def step(ids, g, first, cache, memory_kv, encdec_bias, float32_logits=True):
        positions = g - first  # [N]: each row's own step
        x = model.modality.bottom(ids, "targets", step_matrices)
        x *= tf.cast(positions > 0, x.dtype)[:, None, None]  # GO at a row's step 0
        if model.hparams.pos == "timing":
            timing = table if table is not None else common_attention.get_timing_signal_1d(
                tf.reduce_max(positions) + 1, model.hidden_size)
            x += tf.cast(tf.gather(timing[0], positions)[:, None, :], x.dtype)
        slots = tf.range(tf.shape(next(iter(cache.values()))["k"])[2])
        valid = tf.logical_and(slots[None, :] >= first[:, None], slots[None, :] <= g)
        bias = tf.where(valid, 0.0, common_attention.LARGE_NEGATIVE)[:, None, None, :]
        with decoder_weights():
            x, cache = model.body.decoder(x, None, bias, encdec_bias, memory_kv=memory_kv,
                                         cache=cache, decode_step=g, training=False)
        logits = model.modality.top(x, step_matrices)[:, 0, :]
        return (tf.cast(logits, tf.float32) if float32_logits else logits), cache

    return SlotDecoding(encode, step, model.init_decode_cache)
