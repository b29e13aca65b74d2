"""t2t's decode hparams (`--decode_hparams`, tensor2tensor's `decoding.decode_hparams()`) and
the checks of the sampling settings that decoding reads from the model's hparams.

Every t2t decode hparam exists under its name, with t2t's default; those that do not apply to
text decoding are refused by name when set (`UNSUPPORTED_DECODE_HPARAMS`), as are settings t2t
would silently ignore (force_decode_length or sampling_method=random with beam search).
Decode mode, export, the server and train_eval_and_decode all build them here.
"""
from __future__ import annotations

from t2t_lite import hparams_support
from t2t_lite.decoding import alignment
from t2t_lite.hparams import HParams

# t2t's decode hparams that do not apply to text decoding with t2t_lite: name -> why. Each is
# refused (one line naming it) when set to anything but t2t's default.
UNSUPPORTED_DECODE_HPARAMS = {
    "save_images": "image problems only",
    "min_length_ratio": "t2t declares it but never reads it",
    "eos_penalty": "t2t declares it but never reads it",
    "block_size": "blockwise parallel decoding models only",
    "guess_and_check_top_k": "blockwise parallel decoding models only",
    "guess_and_check_epsilon": "blockwise parallel decoding models only",
    "insertion_parallel": "insertion models only",
    "decode_timeout_mins": "continuous decoding of new checkpoints is not implemented",
    "display_decoded_images": "image problems only",
    "multiproblem_task_id": "multi-problem models only",
    "frames_per_second": "video problems only",
    "border_percent": "video problems only",
    "max_display_outputs": "video problems only",
    "max_display_decodes": "video problems only",
    "vgg_ckpt_path": "video problems only",
    "mlperf_decode_step": "MLPerf compliance logging only",
    "mlperf_threshold": "MLPerf compliance logging only",
    "mlperf_success": "MLPerf compliance logging only",
    "export_extra_infer_outputs": "t2t-exporter's extra infer() outputs are not exported",
}


def _t2t_decode_hparams() -> HParams:
    """t2t's `decoding.decode_hparams()` defaults, every one of them."""
    return HParams(
        save_images=False,
        log_results=True,
        extra_length=100,
        min_length_ratio=0.0,
        batch_size=0,
        beam_size=4,
        alpha=0.6,
        eos_penalty=0.0,
        block_size=0,
        guess_and_check_top_k=0,
        guess_and_check_epsilon=-1,
        insertion_parallel=False,
        return_beams=False,
        write_beam_scores=False,
        max_input_size=-1,
        identity_output=False,
        num_samples=-1,
        delimiter="\n",
        decode_to_file="",
        decode_reference="",
        decode_in_memory=False,
        decode_timeout_mins=240,
        summaries_log_dir="decode",
        shards=1,
        shard_id=0,
        shards_start_offset=0,
        shard_google_format=False,
        num_decodes=1,
        force_decode_length=False,
        display_decoded_images=False,
        multiproblem_task_id=-1,
        frames_per_second=10,
        skip_eos_postprocess=False,
        border_percent=2,
        max_display_outputs=10,
        max_display_decodes=5,
        vgg_ckpt_path="",
        mlperf_decode_step=0.0,
        mlperf_threshold=25.0,
        mlperf_success=False,
        export_extra_infer_outputs="",
    )


def decode_hparams(overrides: str = "") -> HParams:
    """t2t's decode hparams (T2T reference §7.1) with `--decode_hparams` applied.

    Every t2t decode hparam exists under its name. Those that apply to text decoding have
    t2t's meaning: beam_size, alpha, extra_length, batch_size, return_beams,
    write_beam_scores, max_input_size, num_samples, delimiter, decode_to_file,
    decode_reference, shards, shard_id, shards_start_offset, shard_google_format,
    log_results, num_decodes, force_decode_length, skip_eos_postprocess, identity_output,
    summaries_log_dir, and decode_in_memory (t2t_lite always decodes in memory, the only
    thing t2t's flag changes for text). The others (`UNSUPPORTED_DECODE_HPARAMS`) are refused
    when set to anything but their default. t2t_lite's own `return_alignment` and
    `alignment_layer` (`alignment.DECODE_HPARAMS`) join the set when `overrides` sets them.

    Args:
      overrides: "beam_size=4,alpha=0.6,..." (t2t's override syntax).

    Returns:
      HParams.

    Raises:
      ValueError: one line naming a bad, unknown or unsupported decode hparam.
    """
    hp = _t2t_decode_hparams()
    if overrides:
        alignment.parse_decode_hparams(hp, overrides)
    defaults = _t2t_decode_hparams()
    for name, reason in UNSUPPORTED_DECODE_HPARAMS.items():
        if hp.get(name) != defaults.get(name):
            raise ValueError(
                f"--decode_hparams: {name}={hp.get(name)!r} is not supported ({reason}); "
                f"leave it at {defaults.get(name)!r}")
    for name, low in (("beam_size", 1), ("extra_length", 0), ("num_decodes", 1),
                      ("batch_size", 0), ("shards", 1), ("shard_id", 0),
                      ("shards_start_offset", 0), ("num_samples", -1)):
        if hp.get(name) < low:
            raise ValueError(f"--decode_hparams: {name}={hp.get(name)} must be >= {low}")
    if hp.shard_id >= hp.shards:
        raise ValueError(f"--decode_hparams: shard_id={hp.shard_id} must be < shards="
                         f"{hp.shards}")
    if hp.num_samples == 0:
        raise ValueError("--decode_hparams: num_samples=0 decodes nothing; use -1 (all) or a "
                         "positive count")
    if hp.force_decode_length and hp.beam_size > 1:
        raise ValueError("--decode_hparams: force_decode_length=True applies to greedy decoding "
                         f"(beam_size=1), as in t2t; beam_size={hp.beam_size} ignores it")
    return hp


def check_sampling(model_hparams: HParams, decode_hp: HParams) -> None:
    """Refuses sampling settings that would have no effect (t2t's beam search ignores them),
    and a sampling_keep_top_p outside its declared interval (`hparams_support.check_range`).

    Args:
      model_hparams: with sampling_method, sampling_temp, sampling_keep_top_k,
        sampling_keep_top_p.
      decode_hp: decode hparams (beam_size).

    Raises:
      ValueError: one line naming the setting.
    """
    method = hparams_support.hparam(model_hparams, "sampling_method")
    if method not in ("argmax", "random"):
        raise ValueError(f"hparams.sampling_method={method!r} is not supported; use 'argmax' "
                         "or 'random' ('random_per_example' reads temperatures from the input "
                         "examples, which text decoding does not have)")
    top_k = hparams_support.hparam(model_hparams, "sampling_keep_top_k")
    if top_k != -1 and top_k <= 0:
        raise ValueError(f"hparams.sampling_keep_top_k={top_k} must be -1 (all) or positive")
    hparams_support.check_range("sampling_keep_top_p",
                                hparams_support.hparam(model_hparams, "sampling_keep_top_p"))
    if method == "random" and decode_hp.beam_size > 1:
        raise ValueError("hparams.sampling_method=random applies to greedy decoding: set "
                         f"beam_size=1 in --decode_hparams (beam_size={decode_hp.beam_size} "
                         "ignores sampling, as in t2t)")
