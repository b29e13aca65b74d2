"""The translation server's JSON API: request and response models (pydantic), and the one
error format every failure answers with: `{"error": "<one sentence>"}`.

    POST /v1/translate {"inputs": ["sentence", ...], "beam_size": 4, "alpha": 0.6,
                        "n_best": 2, "return_attention": false}
    -> {"outputs": ["translation", ...], "scores": [float, ...],
        "n_best": [[{"output": str, "score": float}, ...], ...],    (when n_best > 1)
        "attention": [{"source_pieces": [...], "target_pieces": [...],
                       "weights": [N][H][T][L]}, ...]}               (with return_attention)

`inputs` is the SavedModel's input name. Options left out take the server's
--decode_hparams (beam_size, alpha; n_best 1).
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr


class TranslateRequest(BaseModel):
    """A translation request (unknown fields are refused, types are not coerced)."""

    model_config = ConfigDict(extra="forbid")

    inputs: list[StrictStr] = Field(
        ..., description="Sentences to translate, one per item (raw text).",
        examples=[["The debate is closed."]])
    beam_size: StrictInt | None = Field(
        None, description="Beam size (1 = greedy); default: the server's --decode_hparams.")
    alpha: StrictFloat | StrictInt | None = Field(
        None, description="t2t's length-penalty exponent; default: the server's.")
    n_best: StrictInt | None = Field(
        None, description="Hypotheses per sentence, best first (<= beam_size); default 1.")
    return_attention: StrictBool = Field(
        False, description="Return the encoder-decoder attention of each best translation "
                           "and the source/target subword pieces.")


class Hypothesis(BaseModel):
    """One of the n-best translations of a sentence."""

    output: str
    score: float


class Attention(BaseModel):
    """Encoder-decoder attention of one translation: weights[layer][head][target][source]."""

    source_pieces: list[str]
    target_pieces: list[str]
    weights: list[list[list[list[float]]]]


class TranslateResponse(BaseModel):
    """Translations in input order, with t2t's scores."""

    outputs: list[str]
    scores: list[float]
    n_best: list[list[Hypothesis]] | None = None
    attention: list[Attention] | None = None


class ErrorResponse(BaseModel):
    """Every error: one sentence."""

    error: str


def validation_message(errors: list[dict]) -> str:
    """One sentence from pydantic's / FastAPI's validation errors (the first one, and how
    many more there are).

    Args:
      errors: `RequestValidationError.errors()`: dicts with "loc", "msg", "type".
    """
    if not errors:
        return "invalid request"
    first = errors[0]
    loc = [str(part) for part in first.get("loc", ()) if part != "body"]
    where = ""
    for part in loc:
        where += f"[{part}]" if part.isdigit() else (f".{part}" if where else part)
    message = first.get("msg", "invalid")
    if first.get("type") == "extra_forbidden":
        message = "unknown field (fields: inputs, beam_size, alpha, n_best, return_attention)"
    text = f"{where}: {message}" if where else message
    if len(errors) > 1:
        text += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return text
