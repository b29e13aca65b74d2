"""tensor2tensor Transformers on CTranslate2: export, and a text-in text-out `Translator`.

`export` writes a CTranslate2 model directory for a t2t_lite `Transformer` (a t2t_lite run, or
an original tensor2tensor checkpoint loaded by `t2t_checkpoint`), built with CTranslate2's own
spec API (`ctranslate2.specs.TransformerSpec`); `Translator` runs it on raw text with t2t's
SubwordTextEncoder around `ctranslate2.Translator.translate_batch`.

How each t2t feature maps onto CTranslate2's Transformer (everything else is refused with a
`UserError` that names the hparam):

* Layer layout: pre-norm (`layer_preprocess_sequence="n"`, postprocess "da" or "ad") is
  CTranslate2's `pre_norm=True` with the final encoder and decoder layer norms of t2t's
  `layer_prepostprocess` scopes; post-norm (preprocess "none", postprocess "dan" or "an") is
  `pre_norm=False` (no final norms, as in t2t). Dropout is off at inference. Layer norm
  epsilon: `hparams.norm_epsilon` (t2t: 1e-6) in the model config.
* Attention: t2t's q/k/v/output kernels (no biases) become CTranslate2's fused QKV (self
  attention) or Q + fused KV (encoder-decoder attention) and output linears, transposed to
  [out, in]; both scale queries by (D/H)^-0.5. `attention_key_channels` /
  `attention_value_channels` other than hidden_size are refused.
* FFN: `ffn/conv1` (ReLU) and `ffn/conv2` with biases.
* Embeddings: the `weights_0..S-1` shards are concatenated; CTranslate2's `scale_embeddings`
  multiplies by sqrt(D) as t2t's `multiply_embedding_mode="sqrt_depth"` does (off for "none").
  t2t embeds id 0 as the zero vector: row 0 of both embedding tables is zeroed (the softmax
  keeps its row 0), and the decoder starts from id 0 (`<pad>`, t2t's shifted-right "GO").
* Positions: t2t's timing signal is concatenated [sin, cos] (not interleaved) with
  timescales spaced by log(1e4)/(D/2 - 1); it is given to CTranslate2 as an explicit table of
  `max_position` rows (`get_timing_signal_1d`); `pos="none"` gives an all-zero table.
* Target-space embedding: t2t adds row `target_space_id` of `target_space_embedding` to every
  encoder position; that row is folded into the encoder's position table (one problem per
  export: the id is fixed at export time).
* Softmax: the (tied or separate) `softmax` matrix without bias is the decoder projection.
* Vocabularies: the encoders' subtoken strings (SentencePiece: pieces) in id order, with
  placeholders for `vocab_divisor`'s rows (shared_vocabulary.json when equal); EOS is id 1,
  appended by CTranslate2 (`add_source_eos`) as t2t does; the vocab files are copied in.

Decoding (`Translator.translate`) follows t2t-decoder: inputs sorted by word count and batched
(32 per batch), decode length = padded input length (EOS included) + `extra_length`, greedy
for beam size 1. Beam search: CTranslate2 normalizes a hypothesis' log-probability by
`length ** length_penalty`, t2t by GNMT's `((5 + length) / 6) ** alpha`; `gnmt_rescore` (the
default) asks CTranslate2 for `beam_size` hypotheses and re-ranks them with t2t's penalty,
and the returned scores are t2t's. The remaining differences are in the search itself (see
DESIGN.md, "Serving on CTranslate2").
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from t2t_lite.data_generators import sentencepiece_encoder
from t2t_lite.data_generators.text_encoder import EOS_ID, PAD_ID
from t2t_lite.errors import UserError
from t2t_lite.export.ct2_options import (  # noqa: F401 (ct2's API)
    SEARCH_OPTIONS,
    default_model_dir,
    gnmt_score,
    sampling_options,
    thread_counts,
)

METADATA_FILE = "t2t_lite_serving.json"
INPUTS_VOCAB_FILE = "t2t_inputs.subwords"
TARGETS_VOCAB_FILE = "t2t_targets.subwords"
QUANTIZATIONS = ("none", "int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16",
                 "float16", "bfloat16", "float32")
DEFAULT_MAX_POSITION = 2048
PRE_NORM_POSTPROCESS = ("da", "ad", "a")
POST_NORM_POSTPROCESS = ("dan", "an")


def import_ctranslate2():
    """`import ctranslate2`, or a UserError saying how to install it."""
    try:
        import ctranslate2
    except ImportError as e:
        raise UserError(
            f"CTranslate2 is not installed ({e}); install it with "
            "`pip install -e \".[ctranslate2]\"` (or `pip install ctranslate2>=4`)") from None
    return ctranslate2


# ------------------------------------------------------------------------------ the mapping
def check_exportable(hparams) -> bool:
    """Refuses t2t settings that CTranslate2's Transformer cannot compute exactly.

    Args:
      hparams: the model's HParams.

    Returns:
      True for a pre-norm layout, False for post-norm.

    Raises:
      UserError: naming the hparam and its value.
    """
    pre, post = hparams.layer_preprocess_sequence, hparams.layer_postprocess_sequence
    if pre == "n" and post in PRE_NORM_POSTPROCESS:
        pre_norm = True
    elif pre == "none" and post in POST_NORM_POSTPROCESS:
        pre_norm = False
    else:
        raise UserError(
            f"hparams layer_preprocess_sequence={pre!r} / layer_postprocess_sequence={post!r} "
            "cannot be exported to CTranslate2: it supports pre-norm ('n' / 'da') and "
            "post-norm ('none' / 'dan') layers")
    if hparams.norm_type != "layer":
        raise UserError(f"hparams.norm_type={hparams.norm_type!r} cannot be exported to "
                        "CTranslate2 (its Transformer always has layer norms); use 'layer'")
    for name in ("attention_key_channels", "attention_value_channels"):
        value = hparams.get(name, 0)
        if value and value != hparams.hidden_size:
            raise UserError(f"hparams.{name}={value} cannot be exported to CTranslate2 (its "
                            f"attention projections are hidden_size={hparams.hidden_size} wide)")
    if hparams.ffn_layer != "dense_relu_dense":
        raise UserError(f"hparams.ffn_layer={hparams.ffn_layer!r} cannot be exported to "
                        "CTranslate2; use 'dense_relu_dense'")
    attention_type = hparams.get("self_attention_type", "dot_product")
    if attention_type != "dot_product":
        # CTranslate2's relative_position specs (Shaw keys/values, OpenNMT-py's) drop the
        # position table, which is where the target-space row is added to every encoder
        # position; folding it into the embeddings instead rounds differently from t2t.
        raise UserError(f"hparams self_attention_type={attention_type} cannot be exported to "
                        "CTranslate2 (relative position attention is not mapped); use "
                        "--export_format=saved_model")
    if hparams.pos not in ("timing", "none"):
        raise UserError(f"hparams.pos={hparams.pos!r} cannot be exported to CTranslate2; use "
                        "'timing' or 'none'")
    return pre_norm


def timing_table(max_position: int, hidden_size: int) -> np.ndarray:
    """t2t's timing signal as a table: float32 [max_position, hidden_size] (rows = positions,
    [sin, cos] concatenated), the values t2t_lite adds."""
    from t2t_lite.layers import common_attention

    return np.asarray(common_attention.get_timing_signal_1d(max_position, hidden_size))[0]


def _kernel(dense) -> np.ndarray:
    """A Keras Dense kernel [in, out] as CTranslate2's weight [out, in]."""
    return np.array(np.asarray(dense.kernel).T, dtype=np.float32, order="C")


def _array(variable) -> np.ndarray:
    """A writable float32 copy (CTranslate2's quantization scales the arrays in place)."""
    return np.array(variable, dtype=np.float32)


def _set_norm(spec, prepostprocess) -> None:
    (norm,) = prepostprocess.norms
    spec.gamma = _array(norm.scale)
    spec.beta = _array(norm.bias)


def _set_attention(spec, attention, norm_owner, self_attention: bool) -> None:
    q, k, v = (_kernel(attention.q), _kernel(attention.k), _kernel(attention.v))
    if self_attention:
        spec.linear[0].weight = np.concatenate([q, k, v])
    else:
        spec.linear[0].weight = q
        spec.linear[1].weight = np.concatenate([k, v])
    spec.linear[-1].weight = _kernel(attention.output_transform)
    _set_norm(spec.layer_norm, norm_owner)


def _set_ffn(spec, ffn, norm_owner) -> None:
    spec.linear_0.weight = _kernel(ffn.conv1)
    spec.linear_0.bias = _array(ffn.conv1.bias)
    spec.linear_1.weight = _kernel(ffn.conv2)
    spec.linear_1.bias = _array(ffn.conv2.bias)
    _set_norm(spec.layer_norm, norm_owner)


def _embedding(matrix) -> np.ndarray:
    """A t2t embedding matrix with row 0 zeroed (t2t embeds id 0 as the zero vector)."""
    table = np.array(matrix, dtype=np.float32)
    table[PAD_ID] = 0.0
    return table


def _vocabulary(subtokens: Sequence[str], rows: int) -> list[str]:
    """CTranslate2 tokens for a matrix of `rows` rows: the subtokens, then placeholders for
    the rows that `vocab_divisor` added."""
    tokens = list(subtokens)
    if len(tokens) > rows:
        raise UserError(f"the vocabulary has {len(tokens)} subtokens but the model's embedding "
                        f"only {rows} rows: --problem/--data_dir do not match the checkpoint")
    return tokens + [f"<t2t_lite_unused_{i}>" for i in range(len(tokens), rows)]


def build_spec(model, inputs_subtokens: Sequence[str], targets_subtokens: Sequence[str],
               target_space_id: int = 0, max_position: int = DEFAULT_MAX_POSITION,
               alignment_layer: int = -1):
    """The CTranslate2 `TransformerSpec` of a t2t_lite Transformer (see the module docstring).

    Args:
      model: a built `t2t_lite.models.transformer.Transformer` with its weights loaded.
      inputs_subtokens: the input SubwordTextEncoder's subtoken strings, in id order.
      targets_subtokens: the target encoder's.
      target_space_id: the problem's target space id (folded into the encoder positions).
      max_position: rows of the position tables: the longest input (EOS included) and the
        longest decode the model directory can serve.
      alignment_layer: the decoder layer whose encoder-decoder attention, mean over all
        its heads, CTranslate2 returns (`return_attention`; word alignments), -1 = last.

    Returns:
      A validated `ctranslate2.specs.TransformerSpec` with its vocabularies registered.
    """
    ctranslate2 = import_ctranslate2()
    from ctranslate2.specs import common_spec, transformer_spec

    hparams = model.hparams
    pre_norm = check_exportable(hparams)
    body = model.body
    encoder = transformer_spec.TransformerEncoderSpec(
        body.encoder.num_layers, hparams.num_heads, pre_norm=pre_norm,
        activation=common_spec.Activation.RELU)
    layers = body.decoder.num_layers
    if not -layers <= alignment_layer < layers:
        raise UserError(f"--decode_hparams: alignment_layer={alignment_layer} is outside the "
                        f"decoder's {layers} layers (0 to {layers - 1}, or -1 for the last)")
    # CTranslate2 averages the first `alignment_heads` heads: all of them, as t2t_lite.
    decoder = transformer_spec.TransformerDecoderSpec(
        layers, hparams.num_heads, pre_norm=pre_norm,
        activation=common_spec.Activation.RELU, alignment_layer=alignment_layer % layers,
        alignment_heads=hparams.num_heads)
    spec = transformer_spec.TransformerSpec(encoder, decoder)

    matrices = {name: _array(m) for name, m in model.modality.matrices().items()}
    encoder.embeddings[0].weight = _embedding(matrices["inputs"])
    decoder.embeddings.weight = _embedding(matrices["targets"])
    decoder.projection.weight = matrices["softmax"]
    scale = model.modality.multiply_by_sqrt_depth
    encoder.scale_embeddings = scale
    decoder.scale_embeddings = scale

    if max_position < 2:
        raise UserError(f"max_position={max_position} must be at least 2")
    positions = (timing_table(max_position, hparams.hidden_size) if hparams.pos == "timing"
                 else np.zeros([max_position, hparams.hidden_size], np.float32))
    encoder_positions = positions
    if body.use_target_space_embedding:
        space = _array(body.target_space_embedding.kernel)[int(target_space_id)]
        encoder_positions = positions + space[np.newaxis, :]
    encoder.position_encodings.encodings = np.ascontiguousarray(encoder_positions,
                                                                dtype=np.float32)
    decoder.position_encodings.encodings = np.ascontiguousarray(positions, dtype=np.float32)

    for layer_spec, layer in zip(encoder.layer, body.encoder.layers_):
        norm = layer.self_attention_pre if pre_norm else layer.self_attention_post
        _set_attention(layer_spec.self_attention, layer.self_attention, norm, True)
        _set_ffn(layer_spec.ffn, layer.ffn, layer.ffn_pre if pre_norm else layer.ffn_post)
    for layer_spec, layer in zip(decoder.layer, body.decoder.layers_):
        norm = layer.self_attention_pre if pre_norm else layer.self_attention_post
        _set_attention(layer_spec.self_attention, layer.self_attention, norm, True)
        norm = layer.encdec_attention_pre if pre_norm else layer.encdec_attention_post
        _set_attention(layer_spec.attention, layer.encdec_attention, norm, False)
        _set_ffn(layer_spec.ffn, layer.ffn, layer.ffn_pre if pre_norm else layer.ffn_post)
    if pre_norm:
        _set_norm(encoder.layer_norm, body.encoder.output_norm)
        _set_norm(decoder.layer_norm, body.decoder.output_norm)

    source_tokens = _vocabulary(inputs_subtokens, encoder.embeddings[0].weight.shape[0])
    target_tokens = _vocabulary(targets_subtokens, decoder.embeddings.weight.shape[0])
    spec.register_source_vocabulary(source_tokens)
    spec.register_target_vocabulary(target_tokens)
    spec.config.layer_norm_epsilon = float(hparams.norm_epsilon)
    # t2t has no unknown token (SubwordTextEncoder escapes every character); CTranslate2
    # needs one in the vocabulary, so <pad> stands for it (it never appears in an input).
    spec.config.unk_token = target_tokens[PAD_ID]
    spec.config.bos_token = target_tokens[PAD_ID]
    spec.config.eos_token = target_tokens[EOS_ID]
    spec.config.decoder_start_token = target_tokens[PAD_ID]
    spec.config.add_source_eos = True
    spec.validate()
    del ctranslate2
    return spec


def export(model, output_dir: str, inputs_encoder, targets_encoder, target_space_id: int = 0,
           quantization: str = "none", max_position: int = DEFAULT_MAX_POSITION,
           alignment_layer: int = -1) -> str:
    """Writes a CTranslate2 model directory for `model` (see the module docstring).

    The directory is written under a temporary name and renamed; an existing `output_dir` is
    replaced only when it holds a previous export (its `t2t_lite_serving.json`).

    Args:
      model: a t2t_lite Transformer with its weights.
      output_dir: the directory to write.
      inputs_encoder: the problem's input SubwordTextEncoder (its vocab file is copied in).
      targets_encoder: the target SubwordTextEncoder.
      target_space_id: the problem's target space id.
      quantization: one of QUANTIZATIONS ("none" = float32 weights).
      max_position: rows of the position tables (longest input / decode served).
      alignment_layer: the decoder layer of the word alignments (`build_spec`).

    Returns:
      output_dir.
    """
    if quantization not in QUANTIZATIONS:
        raise UserError(f"--quantization={quantization!r} is not one of {', '.join(QUANTIZATIONS)}")
    for what, encoder in (("inputs", inputs_encoder), ("targets", targets_encoder)):
        if not hasattr(encoder, "all_subtoken_strings"):
            raise UserError(f"the problem's {what} encoder is {type(encoder).__name__}: the "
                            "CTranslate2 export needs SubwordTextEncoders (text problems)")
    spec = build_spec(model, inputs_encoder.all_subtoken_strings,
                      targets_encoder.all_subtoken_strings, target_space_id, max_position,
                      alignment_layer)
    output_dir = os.path.abspath(output_dir)
    if os.path.exists(output_dir) and os.listdir(output_dir) and not os.path.exists(
            os.path.join(output_dir, METADATA_FILE)):
        raise UserError(f"--export_dir={output_dir} exists and is not a CTranslate2 export of "
                        "t2t_lite: choose an empty or new directory")
    parent = os.path.dirname(output_dir)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(output_dir)}.tmp", dir=parent)
    try:
        spec.optimize(quantization=None if quantization == "none" else quantization)
        spec.save(tmp)
        shared = list(inputs_encoder.all_subtoken_strings) == list(
            targets_encoder.all_subtoken_strings)
        inputs_file = sentencepiece_encoder.file_name(INPUTS_VOCAB_FILE, inputs_encoder)
        targets_file = inputs_file if shared else sentencepiece_encoder.file_name(
            TARGETS_VOCAB_FILE, targets_encoder)
        inputs_encoder.store_to_file(os.path.join(tmp, inputs_file))
        if not shared:
            targets_encoder.store_to_file(os.path.join(tmp, targets_file))
        metadata = {
            "inputs_vocab": inputs_file,
            "targets_vocab": targets_file,
            "target_space_id": int(target_space_id),
            "max_position": int(max_position),
            "quantization": quantization,
            "pre_norm": model.hparams.layer_preprocess_sequence == "n",
            "alignment_layer": int(alignment_layer),
        }
        with open(os.path.join(tmp, METADATA_FILE), "w", encoding="utf-8") as f:
            json.dump(metadata, f, indent=1)
        if os.path.exists(output_dir):
            shutil.rmtree(output_dir)
        os.replace(tmp, output_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return output_dir


# ------------------------------------------------------------------------------ decoding
@dataclass
class Hypothesis:
    """One translation: `text`, its subtoken `ids` (no EOS) and t2t's `score` (greedy: the
    summed log-probability up to and including EOS; beam: that sum divided by GNMT's
    ((5 + length) / 6) ** alpha, length counting EOS); with `return_alignment`, the
    `attention` [T][L] of the export's alignment layer (mean over its heads; a row per
    output subword, a column per input subword, EOS last)."""

    text: str
    ids: list[int]
    score: float
    attention: list | None = None


class Translator:
    """Raw text in, detokenized text out, on a directory written by `export`.

    Args:
      model_dir: the exported directory.
      device: "cpu", "cuda" or "auto".
      compute_type: CTranslate2's compute type ("default" = the saved weights' type, or
        "int8", "int8_float32", "float16", "bfloat16", "float32"...).
      inter_threads: batches translated in parallel (0: on CPU, the usable cores divided by
        intra_threads; on GPU 1).
      intra_threads: threads per batch (0: on CPU 1, else CTranslate2's default). On CPU
        one thread per batch and a batch per core was fastest: 500 dev lines, beam 4, 2
        cores, transformer_tiny int8: 1.7 s with 2 x 1 threads, 7.8 s with 1 x 2 (the
        small per-step kernels do not split well over threads).
    """

    def __init__(self, model_dir: str, device: str = "cpu", compute_type: str = "default",
                 inter_threads: int = 0, intra_threads: int = 0):
        ctranslate2 = import_ctranslate2()
        metadata_path = os.path.join(model_dir, METADATA_FILE)
        if not os.path.isfile(metadata_path):
            raise UserError(f"{model_dir} is not a CTranslate2 export of t2t_lite (no "
                            f"{METADATA_FILE}); write one with --mode=export "
                            "--export_format=ctranslate2")
        with open(metadata_path, encoding="utf-8") as f:
            self.metadata = json.load(f)
        self.inputs_encoder = sentencepiece_encoder.encoder_from_file(
            os.path.join(model_dir, self.metadata["inputs_vocab"]))
        self.targets_encoder = (
            self.inputs_encoder if self.metadata["targets_vocab"] == self.metadata["inputs_vocab"]
            else sentencepiece_encoder.encoder_from_file(
                os.path.join(model_dir, self.metadata["targets_vocab"])))
        self._source_tokens = self.inputs_encoder.all_subtoken_strings
        self._target_tokens = self.targets_encoder.all_subtoken_strings
        self._target_ids = {token: i for i, token in enumerate(self._target_tokens)}
        self.max_position = int(self.metadata["max_position"])
        runs_on = device
        if device == "auto":  # CTranslate2's choice: CUDA when a GPU is visible
            runs_on = "cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu"
        inter_threads, intra_threads = thread_counts(runs_on, inter_threads, intra_threads)
        self.inter_threads = inter_threads
        self.translator = ctranslate2.Translator(
            model_dir, device=device, compute_type=compute_type, inter_threads=inter_threads,
            intra_threads=intra_threads)

    def translate_ids(self, id_lists: Sequence[Sequence[int]], beam_size: int = 4,
                      alpha: float = 0.6, extra_length: int = 100, num_hypotheses: int = 1,
                      gnmt_rescore: bool = True, patience: float = 1.0,
                      length_penalty: float | None = None,
                      prefixes: Sequence[Sequence[int]] | None = None,
                      **sampling) -> list[list[Hypothesis]]:
        """Translates ONE batch of encoded inputs (t2t's decode length is per batch).

        Args:
          id_lists: B lists of input subtoken ids, without EOS.
          beam_size: 1 = greedy.
          alpha: t2t's length-penalty exponent.
          extra_length: decode length = longest input + EOS + extra_length (t2t's rule).
          num_hypotheses: hypotheses returned per input, best first (<= beam_size).
          gnmt_rescore: beam search only: ask CTranslate2 for beam_size hypotheses and rank
            them by t2t's GNMT score (else CTranslate2's own ranking and scores).
          patience: CTranslate2's beam patience (finish after beam_size * patience
            hypotheses).
          length_penalty: CTranslate2's length penalty exponent during the search (default:
            alpha; with gnmt_rescore it only steers which hypotheses finish).
          prefixes: B lists of target ids each output starts with ([]: none; CTranslate2's
            `target_prefix`, t2t_lite's `--decode_prefix_file`).
          **sampling: CTranslate2's sampling_topk, sampling_topp, sampling_temperature
            (greedy decoding, `sampling_options`), and return_alignment (CTranslate2's
            `return_attention`: each Hypothesis gets its `attention`).

        Returns:
          B lists of up to `num_hypotheses` Hypothesis, best first (text decoded with the
          target encoder). With gnmt_rescore, only finished hypotheses are returned when one
          exists, as t2t returns its finished beams, so a list can be shorter.
        """
        return self.translate_id_batches(
            [id_lists], beam_size, alpha, extra_length, num_hypotheses, gnmt_rescore, patience,
            length_penalty, None if prefixes is None else [prefixes], **sampling)[0]

    def translate_id_batches(self, batches: Sequence[Sequence[Sequence[int]]],
                             beam_size: int = 4, alpha: float = 0.6, extra_length: int = 100,
                             num_hypotheses: int = 1, gnmt_rescore: bool = True,
                             patience: float = 1.0, length_penalty: float | None = None,
                             prefixes: Sequence | None = None,
                             **sampling) -> list[list[list[Hypothesis]]]:
        """Translates several batches at once, each as `translate_ids` (its own decode
        length; `prefixes`: one list per batch; `**sampling` as there), queued together so
        that the translator's `inter_threads` replicas decode them in parallel.

        Returns:
          For each batch, its `translate_ids` result.
        """
        submitted = [self._submit(id_lists, beam_size, alpha, extra_length, num_hypotheses,
                                  gnmt_rescore, patience, length_penalty, asynchronous=True,
                                  prefixes=None if prefixes is None else prefixes[number],
                                  **sampling)
                     for number, id_lists in enumerate(batches)]
        return [self._collect(batch) for batch in submitted]

    def _submit(self, id_lists, beam_size, alpha, extra_length, num_hypotheses, gnmt_rescore,
                patience, length_penalty, asynchronous: bool, prefixes=None,
                sampling_topk: int = 1, sampling_topp: float = 1.0,
                sampling_temperature: float = 1.0, return_alignment: bool = False) -> tuple:
        """Starts CTranslate2 on one batch (arguments of `translate_ids`); returns what
        `_collect` needs: the results (or futures when `asynchronous`) and the options."""
        if not 1 <= num_hypotheses <= beam_size:
            raise UserError(f"num_hypotheses={num_hypotheses} must be between 1 and "
                            f"beam_size={beam_size}")
        if not id_lists:
            return [], None
        longest = max(len(ids) for ids in id_lists) + 1
        if longest > self.max_position:
            raise UserError(f"an input of {longest} subtokens (EOS included) is longer than the "
                            f"{self.max_position} positions this export serves; re-export with a "
                            "larger --ct2_max_position or set max_input_size in --decode_hparams")
        max_decoding_length = min(longest + extra_length, self.max_position)
        rescore = gnmt_rescore and beam_size > 1
        if beam_size == 1:
            search_penalty = 0.0  # greedy: the raw log-probability is t2t's score
        elif length_penalty is None:
            search_penalty = alpha
        else:
            search_penalty = float(length_penalty)
        results = self.translator.translate_batch(
            [[self._source_tokens[i] for i in ids] for ids in id_lists],
            beam_size=beam_size,
            patience=patience,
            # Re-scoring needs every hypothesis the search registered.
            num_hypotheses=(max(beam_size, round(beam_size * patience)) if rescore
                            else num_hypotheses),
            length_penalty=search_penalty,
            max_input_length=0,
            max_decoding_length=max_decoding_length,
            return_scores=True,
            return_end_token=True,
            asynchronous=asynchronous,
            target_prefix=None if prefixes is None else [
                [self._target_tokens[i] for i in ids] or None for ids in prefixes],
            sampling_topk=sampling_topk, sampling_topp=sampling_topp,
            sampling_temperature=sampling_temperature, return_attention=return_alignment,
        )
        return results, (num_hypotheses, rescore, search_penalty, alpha)

    def _collect(self, submitted: tuple) -> list[list[Hypothesis]]:
        """The Hypothesis lists of a `_submit`ted batch (waits for its futures)."""
        results, options = submitted
        if options is None:
            return []
        num_hypotheses, rescore, search_penalty, alpha = options
        out = []
        for result in results:
            if hasattr(result, "result"):  # an asynchronous result
                result = result.result()
            ranked, ended = [], []
            attention = result.attention or [None] * len(result.hypotheses)
            for tokens, score, weights in zip(result.hypotheses, result.scores, attention):
                ids = [self._target_ids[t] for t in tokens]
                # return_end_token: a finished hypothesis ends with EOS, and CTranslate2's
                # length normalization counted it.
                length = len(ids)
                ended.append(bool(ids) and ids[-1] == EOS_ID)
                if ended[-1]:
                    ids = ids[:-1]
                raw_score = score
                if rescore:
                    if search_penalty:
                        raw_score = score * float(length) ** search_penalty
                    score = gnmt_score(raw_score, length, alpha)
                ranked.append((ids, float(score), float(raw_score), weights))
            if rescore:
                # t2t returns an unfinished beam (scored by its raw log-probability) only
                # when no hypothesis reached EOS; CTranslate2 registers the beams alive at
                # the last step as hypotheses too.
                finished = [h for h, done in zip(ranked, ended) if done]
                if finished:
                    ranked = finished
                else:
                    ranked = [(ids, raw, raw, weights) for ids, _, raw, weights in ranked]
                ranked.sort(key=lambda h: -h[1])
            # Detokenized only when returned (beam search returns 1 of 4 by default).
            out.append([Hypothesis(self.targets_encoder.decode(ids), ids, score, weights)
                        for ids, score, _, weights in ranked[:num_hypotheses]])
        return out

    def translate(self, lines: Sequence[str], beam_size: int = 4, alpha: float = 0.6,
                  extra_length: int = 100, num_hypotheses: int = 1, batch_size: int = 32,
                  max_input_size: int = -1, prefixes: Sequence[str] | None = None,
                  **search_options) -> list[list[Hypothesis]]:
        """Translates raw text lines as t2t-decoder's decode_from_file batches them.

        Lines are sorted by word count (longest first), encoded, cut to max_input_size - 1
        subtokens when max_input_size > 0, and translated `batch_size` at a time; the results
        come back in the order of `lines`.

        Args:
          lines: input sentences.
          beam_size, alpha, extra_length, num_hypotheses: as in `translate_ids`.
          batch_size: inputs per batch (t2t's decode batch_size, default 32).
          max_input_size: t2t's decode hparam (<= 0: no cut).
          prefixes: target prefixes parallel to `lines` ("": none; `--decode_prefix_file`).
          **search_options: `SEARCH_OPTIONS` (those of `translate_ids`).

        Returns:
          One list of `num_hypotheses` Hypothesis per line, in input order.
        """
        from t2t_lite.decoding import text_batches

        options = dict(SEARCH_OPTIONS)
        unknown = set(search_options) - set(options)
        if unknown:
            raise TypeError(f"translate: unknown search options {sorted(unknown)}")
        options.update(search_options)
        sorted_lines, sorted_keys = text_batches.sort_inputs(lines)
        encoded = None if prefixes is None else [
            self.targets_encoder.encode(text)
            for text in text_batches.follow_sort(prefixes, sorted_keys)]
        starts = range(0, len(sorted_lines), batch_size)
        batches = [[ids[:max_input_size - 1] if max_input_size > 0 else ids
                    for ids in map(self.inputs_encoder.encode,
                                   sorted_lines[start:start + batch_size])]
                   for start in starts]
        results = [row for batch in self.translate_id_batches(
            batches, beam_size, alpha, extra_length, num_hypotheses,
            prefixes=encoded and [encoded[start:start + batch_size] for start in starts],
            **options) for row in batch]
        return [results[sorted_keys[i]] for i in range(len(lines))]
