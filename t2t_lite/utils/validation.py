"""Range checks of run values and hparams, done before a run writes anything.

Each check raises `UserError` naming the flag or hparam and its value, so that a bad value
fails in one line up front instead of as a Keras traceback, an empty run (`--train_steps=-5`)
or a saved hparams.json that breaks the next run too.
"""
from __future__ import annotations

import contextlib
import fnmatch
import math
import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from typing import Any

from t2t_lite import hparams_support
from t2t_lite.errors import UserError


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def check_hparams(hparams: Any) -> None:
    """Refuses hparams out of range (sizes <= 0, dropouts outside [0, 1), ...): the `check`
    of each one's declaration (`hparams_support.HPARAMS`), finite numbers, and attention
    depths the heads can share (`check_attention_depths`).

    Args:
      hparams: an HParams or a dict (name -> value).

    Raises:
      UserError: "hparams hidden_size=-32: must be > 0 (--hparams or the hparams set)".
    """
    values = dict(hparams) if isinstance(hparams, Mapping) else hparams.values()

    def refuse(name: str, rule: str) -> None:
        raise UserError(f"hparams {name}={values[name]!r}: {rule} (set by --hparams, the "
                        "hparams set, or the output_dir's hparams.json)")

    for name, value in values.items():  # the ranges of their declarations
        declared = hparams_support.HPARAMS.get(name)
        rule = declared.range_error(value) if declared is not None else None
        if rule:
            refuse(name, rule)
    for name, value in values.items():
        number = _number(value)
        if number is not None and not math.isfinite(number):
            refuse(name, "must be finite")
    if _number(values.get("hidden_size")) and _number(values.get("num_heads")):
        check_attention_depths(int(values["hidden_size"]), int(values["num_heads"]),
                               int(values.get("attention_key_channels") or 0),
                               int(values.get("attention_value_channels") or 0))


def check_attention_depths(hidden_size: int, num_heads: int, key_channels: int = 0,
                           value_channels: int = 0) -> None:
    """Refuses attention depths that the heads cannot share equally: the one check of
    `check_hparams` and of the attention layers (`common_attention.MultiheadAttention`).

    Args:
      hidden_size: D, the depth of the keys and values when their channels are 0.
      num_heads: H (> 0).
      key_channels: hparams.attention_key_channels (0: D).
      value_channels: hparams.attention_value_channels (0: D).

    Raises:
      UserError: "hparams.attention_key_channels=63 is not divisible by hparams.num_heads=3;
        ..." (a ValueError, as the layers raised before).
    """
    for what, channels in (("key", key_channels), ("value", value_channels)):
        name, depth = (f"attention_{what}_channels", channels) if channels \
            else ("hidden_size", hidden_size)
        if num_heads > 0 and depth % num_heads:
            raise UserError(
                f"hparams.{name}={depth} is not divisible by hparams.num_heads={num_heads}: "
                f"each head takes an equal share of the attention {what} depth; change "
                f"hidden_size, num_heads or attention_{what}_channels")


def check_positive(flags: Mapping[str, Any]) -> None:
    """Refuses flags that must be >= 1 (e.g. {"train_steps": -5}); None values are skipped.

    Raises:
      UserError: "--train_steps=-5: must be >= 1".
    """
    for name, value in flags.items():
        if value is not None and value < 1:
            raise UserError(f"--{name}={value}: must be >= 1")


def check_non_negative(flags: Mapping[str, Any]) -> None:
    """Refuses flags that must be >= 0 (e.g. {"eval_steps": -1}); None values are skipped."""
    for name, value in flags.items():
        if value is not None and value < 0:
            raise UserError(f"--{name}={value}: must be >= 0")


def check_output_dir(flag: str, path: str | None) -> None:
    """Refuses an output directory that exists as a file, or below a file.

    Raises:
      UserError: "--output_dir=/x is a file, not a directory", "--output_dir=/f/run: /f is
        a file, not a directory".
    """
    if not path:
        return
    if "://" not in path:
        if os.path.exists(path) and not os.path.isdir(path):
            raise UserError(f"--{flag}={path} is a file, not a directory")
        existing = os.path.dirname(os.path.abspath(path))
        while not os.path.exists(existing):
            existing = os.path.dirname(existing)
        if not os.path.isdir(existing):
            raise UserError(f"--{flag}={path}: {existing} is a file, not a directory")
        return
    import tensorflow as tf

    if tf.io.gfile.exists(path) and not tf.io.gfile.isdir(path):
        raise UserError(f"--{flag}={path} is a file, not a directory")


def check_writable_file(flag: str, path: str) -> None:
    """Refuses an output file that cannot be written, before any work: its directory must
    be creatable and writable (local paths), and the path must not be a directory.

    Raises:
      UserError: "--decode_to_file=/proc/x: cannot write in /proc ([Errno ...])".
    """
    if "://" in path:
        return
    if os.path.isdir(path):
        raise UserError(f"--{flag}={path} is a directory, not a file")
    directory = os.path.dirname(os.path.abspath(path))
    check_writable_dir(flag, directory, shown=path)


def check_writable_dir(flag: str, directory: str, shown: str | None = None) -> None:
    """Refuses a directory that cannot be created or written in (local paths), leaving
    nothing behind (a directory created for the check is removed again).

    Raises:
      UserError: naming the flag and the directory.
    """
    if "://" in directory:
        return
    shown = shown or directory
    existing = os.path.abspath(directory)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise UserError(f"--{flag}={shown}: {existing} is a file, not a directory")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as e:
        raise UserError(f"--{flag}={shown}: cannot write in {existing} ({e.strerror})") from e


def same_file(a: str, b: str) -> bool:
    """Whether two local paths name one file: the same inode when both exist (hard links,
    symlinks, `./x` vs `x`), else the same resolved path. Paths with a scheme (gs://...)
    compare as strings."""
    if "://" in a or "://" in b:
        return a.rstrip("/") == b.rstrip("/")
    a, b = os.path.expanduser(a), os.path.expanduser(b)
    if os.path.exists(a) and os.path.exists(b):
        return os.path.samefile(a, b)
    return os.path.realpath(a) == os.path.realpath(b)


def check_output_not_input(flag: str, output: str | None,
                           inputs: Mapping[str, str | None]) -> None:
    """Refuses an output path that is also one of the run's inputs, before any work (the
    output would replace the input: `--decode_to_file` equal to `--decode_from_file`, an
    export or averaging directory equal to the run's directory, ...).

    Args:
      flag: the output's flag, e.g. "decode_to_file".
      output: the output path (None: nothing to check).
      inputs: {flag: path} of the inputs (None values are skipped).

    Raises:
      UserError: "--decode_to_file=x is the same file as --decode_from_file=x: ...".
    """
    if not output:
        return
    for name, path in inputs.items():
        if path and same_file(output, path):
            raise UserError(f"--{flag}={output} is the same file as --{name}={path}: the "
                            f"output would replace the input; choose another --{flag}")


# The files a training run writes in its output_dir (and a checkpoint's folder holds): no
# output of another mode may replace them. Other names there (decodes, avg/, export/) may be
# written again.
RUN_FILE_PATTERNS = ("hparams.json", "flags.json", "checkpoint", "*ckpt-*", "run_card.*",
                     "run.lock", "events.out.tfevents.*", "*.complete.json", "datagen.lock",
                     "t2t_import.json")


def _real(path: str) -> str:
    """`path` with `~` expanded and symlinks resolved (URLs as they are, no trailing /)."""
    if "://" in path:
        return path.rstrip("/")
    return os.path.realpath(os.path.expanduser(path))


def _is_within(folder: str, path: str) -> bool:
    """Whether `path` is `folder` or lies below it (both `_real`)."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _protected_files(folder: str, patterns: tuple[str, ...] | None) -> Iterator[str]:
    """The existing files of a local `folder` (those matching `patterns`; None: all)."""
    if "://" in folder or not os.path.isdir(folder):
        return
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if os.path.isfile(path) and (
                patterns is None or any(fnmatch.fnmatch(name, p) for p in patterns)):
            yield path


def run_folders(output_dir: str | None, checkpoint_path: str | None) -> dict[str, str]:
    """The folders of the runs a mode reads, for `check_output_not_protected`: --output_dir
    and each --checkpoint_path's (a folder, or a checkpoint prefix's folder; "A,B" an
    ensemble). Returns {"--flag=value": folder}."""
    folders = {f"--output_dir={output_dir}": output_dir} if output_dir else {}
    for path in (checkpoint_path or "").split(","):
        path = path.strip()
        if path:
            local = os.path.expanduser(path)
            is_dir = os.path.isdir(local) if "://" not in path else not re.search(
                r"-\d+$", path)
            folders[f"--checkpoint_path={path}"] = local if is_dir else os.path.dirname(local)
    return folders


def check_output_not_protected(flag: str, output: str | None,
                               runs: Mapping[str, str | None],
                               data_dir: str | None = None,
                               models: Mapping[str, str] | None = None) -> None:
    """Refuses an output path that would replace or hold what a run is made of, before
    anything is written: a file of a run (`RUN_FILE_PATTERNS`: hparams.json, flags.json,
    checkpoints, the run card, the lock, ...), any file of the data_dir (shards, vocabulary,
    markers) or of an exported model read (a CTranslate2 folder), or a folder that is, or
    contains, one of them (an export or average replaces its output folder whole).

    Args:
      flag: the output's flag, e.g. "decode_to_file".
      output: the output path, file or folder (None: nothing to check).
      runs: {flag=value text: folder} of the runs read, e.g. {"--output_dir=r": "r",
        "--checkpoint_path=r2/ckpt-4": "r2"}; None folders are skipped.
      data_dir: the data_dir read (None: none).
      models: {label: folder} of the exported models read, e.g. {"--export_dir=e": "e"}.

    Raises:
      UserError: "--decode_to_file=r/hparams.json is r/hparams.json, a file of the run
        --output_dir=r: ...".
    """
    if not output:
        return
    target = _real(output)
    places = [(name, _real(folder), RUN_FILE_PATTERNS, "a file of the run")
              for name, folder in runs.items() if folder]
    if data_dir:
        places.append((f"--data_dir={data_dir}", _real(data_dir), None,
                       "a file of the data (a shard, the vocabulary, a marker)"))
    places += [(name, _real(folder), None, "a file of the exported model")
               for name, folder in (models or {}).items()]
    for name, folder, patterns, what in places:
        if _is_within(target, folder):
            raise UserError(f"--{flag}={output} is or contains {name}: writing it would "
                            f"replace that; choose another --{flag}")
        same_place = os.path.dirname(target) == folder
        for path in _protected_files(folder, patterns):
            if (same_place and os.path.basename(target) == os.path.basename(path)) or (
                    os.path.exists(target) and os.path.samefile(target, path)):
                raise UserError(f"--{flag}={output} is {path}, {what} {name}: writing "
                                f"it would break it; choose another --{flag}")
        if same_place and patterns and any(
                fnmatch.fnmatch(os.path.basename(target), p) for p in patterns):
            raise UserError(f"--{flag}={output} is named like {what} {name}: choose another "
                            f"--{flag}")


def available_memory() -> int | None:
    """Bytes of memory this process can still take: /proc/meminfo's MemAvailable, lowered
    to the cgroup's limit minus its usage when there is one (a container); the free physical
    pages where /proc is absent; None when unknown."""
    available = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
    except OSError:
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current") as f:
            used = int(f.read().strip())
        if limit != "max":
            room = int(limit) - used
            available = room if available is None else min(available, room)
    except (OSError, ValueError):
        pass
    return available


def decode_memory_estimate(beam_size: int, batch_rows: int, vocab_size: int,
                           decode_length: int, hidden_size: int, num_heads: int,
                           num_layers: int, slot_storage: bool = True,
                           input_length: int = 0) -> int:
    """A lower estimate of the bytes one decoded batch holds at its last step (float32).

    Terms, for B = batch_rows, K = beam_size, V = vocab_size, T = decode_length, D =
    hidden_size, H = num_heads, N = num_layers:
      * the scores of every extension: B x K x V, about 4 copies (logits, log-probs, the
        flattened scores, top-k);
      * the hypotheses: B x K x T ids, about 8 copies (alive, finished, 2K candidates, 3K
        merged);
      * the keys and values of the decoder caches: 2 x N x B x K x T x D, twice (a step
        writes a new copy);
      * beam search's slot storage (`slot_storage`, the decoder without XLA, K > 1): each
        of the K hypotheses of a sentence attends over the K x T stored positions, and its
        slot mask is as large: B x K x K x T x (3 H + 1);
      * for the input, L = input_length (padded, with EOS): the encoder's self-attention
        logits and weights, B x H x L x L twice; its activations, B x L x D about 4 times;
        the encoder-decoder keys and values, 2 x N x B x L x D; and a step's
        encoder-decoder attention, B x K x H x L twice.

    Args:
      beam_size, batch_rows, vocab_size, decode_length, hidden_size, num_heads, num_layers:
        as above (decode_length: input length + extra_length).
      slot_storage: whether the K x K attention term applies.
      input_length: L above (0: the input terms are left out).

    Returns:
      Bytes.
    """
    rows = batch_rows * beam_size
    total = rows * vocab_size * 4 + rows * decode_length * 8
    total += 2 * 2 * num_layers * rows * decode_length * hidden_size
    if slot_storage and beam_size > 1:
        total += rows * beam_size * decode_length * (3 * num_heads + 1)
    total += batch_rows * input_length * (2 * num_heads * input_length + 4 * hidden_size
                                          + 2 * num_layers * hidden_size)
    total += rows * num_heads * input_length * 2
    return total * 4


def check_decode_memory(estimate: int, what: str, available: int | None = None) -> None:
    """Refuses a decode whose `decode_memory_estimate` exceeds the available memory, before
    the model is loaded (instead of minutes of swapping and an out-of-memory traceback).

    Args:
      estimate: bytes (`decode_memory_estimate`).
      what: the settings behind it, for the message, e.g. "beam_size=10000 x 2 lines x ...".
      available: bytes available (default: `available_memory()`; None: unknown, no check).

    Raises:
      UserError: naming the estimate, the memory available and what to lower.
    """
    available = available_memory() if available is None else available
    if available is None or estimate <= available:
        return
    raise UserError(
        f"--decode_hparams: decoding {what} needs about {estimate / 2**30:.1f} GiB, more than "
        f"the {available / 2**30:.1f} GiB of memory available; lower beam_size (or "
        "batch_size, extra_length)")


_ID_OUT_OF_RANGE = re.compile(r"indices\[[^\]]*\] = (-?\d+) is not in \[0, (\d+)\)")


@contextlib.contextmanager
def explain_ids_out_of_vocab(source: str, advice: str) -> Iterator[None]:
    """Turns an embedding lookup's `indices[0,0] = 134 is not in [0, 3)` (a token id that
    the model's vocabulary does not have) into one UserError line.

    Args:
      source: what held the id, e.g. "the training data in --data_dir=d".
      advice: what to do, e.g. "regenerate it with --mode=datagen".
    """
    import tensorflow as tf

    try:
        yield
    except tf.errors.InvalidArgumentError as e:
        match = _ID_OUT_OF_RANGE.search(e.message or "")
        if not match:
            raise
        raise UserError(
            f"{source} holds token id {match[1]} but the model's vocabulary has only "
            f"{match[2]} entries (ids 0..{int(match[2]) - 1}): the vocabulary does not fit "
            f"the data or the model; {advice}") from e
