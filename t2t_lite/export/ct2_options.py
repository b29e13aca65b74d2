"""How t2t_lite's settings map onto CTranslate2's (`ct2.Translator`): the model directory's
default place, threads, t2t's beam score, the search and sampling options."""
from __future__ import annotations

import os

from t2t_lite.decoding.decoding import usable_cores
from t2t_lite.errors import UserError


def default_model_dir(export_dir: str | None, output_dir: str | None,
                      checkpoint: str | None = None) -> str:
    """Where the CTranslate2 directory of a run goes: `export_dir`, else
    `<output_dir>/ctranslate2`, else `ctranslate2/` beside the checkpoint.

    Raises:
      UserError: none of the three is given.
    """
    if export_dir:
        return os.path.expanduser(export_dir)
    if output_dir:
        return os.path.join(output_dir, "ctranslate2")
    if checkpoint:
        return os.path.join(os.path.dirname(checkpoint), "ctranslate2")
    raise UserError("the CTranslate2 engine needs --export_dir (the directory written by "
                    "--mode=export --export_format=ctranslate2) or --output_dir")


def thread_counts(device: str, inter_threads: int, intra_threads: int) -> tuple[int, int]:
    """CTranslate2's (inter_threads, intra_threads), 0 meaning chosen here.

    On CPU: one thread per batch and as many parallel batches as usable cores (see
    `Translator`); on GPU one batch at a time with CTranslate2's default threads.
    """
    if inter_threads < 0 or intra_threads < 0:
        raise UserError(f"CTranslate2 threads must be >= 0, got inter_threads={inter_threads}, "
                        f"intra_threads={intra_threads}")
    if device != "cpu":
        return inter_threads or 1, intra_threads
    intra_threads = intra_threads or 1
    return inter_threads or max(1, usable_cores() // intra_threads), intra_threads


def gnmt_score(log_prob: float, length: int, alpha: float) -> float:
    """t2t's beam score: log_prob / ((5 + length) / 6) ** alpha (length includes EOS)."""
    return log_prob / ((5.0 + length) / 6.0) ** alpha


# `translate`'s search options beside the beams: CTranslate2's names and defaults (greedy).
SEARCH_OPTIONS = {"gnmt_rescore": True, "patience": 1.0, "length_penalty": None,
                  "sampling_topk": 1, "sampling_topp": 1.0, "sampling_temperature": 1.0,
                  "return_alignment": False}


def sampling_options(hparams) -> dict:
    """CTranslate2's sampling options for t2t_lite's sampling hparams (sampling_method,
    sampling_temp, sampling_keep_top_k, sampling_keep_top_p): greedy for argmax or
    temperature 0, else a draw among the top-k (all: 0) within the nucleus p."""
    from t2t_lite import hparams_support

    method = hparams_support.hparam(hparams, "sampling_method")
    temp = hparams_support.hparam(hparams, "sampling_temp")
    if method != "random" or temp == 0.0:
        return {"sampling_topk": 1}
    top_k = hparams_support.hparam(hparams, "sampling_keep_top_k")
    return {"sampling_topk": max(top_k, 0), "sampling_temperature": float(temp),
            "sampling_topp": float(hparams_support.hparam(hparams, "sampling_keep_top_p"))}
