"""Cleaning filters for a parallel training corpus, each dropped pair counted.

Applied to the training pairs before the vocab is built and before encoding, when datagen is
asked for them (`--filter_*` flags; all off by default: t2t's behaviour). Each pair is tested
in this order and counted once, under the first filter that drops it:

| count | drops a pair when | flag |
| --- | --- | --- |
| `empty` | a side is empty or whitespace only (always, as t2t's compile_data) | - |
| `too_short` / `too_long` | a side has fewer / more whitespace tokens than the limit | `--filter_min_length` / `--filter_max_length` |
| `length_ratio` | longer side / shorter side (tokens) is above the limit (Moses clean-corpus-n's `-ratio`) | `--filter_length_ratio` |
| `copy` | source == target | `--filter_copies` |
| `wrong_script` | less than half the letters of a side are in the script of its language | `--filter_languages=en,de` |
| `duplicate` | the same (source, target) pair was kept before | `--filter_duplicates` |

The script test needs no model: a letter's script is the first word of its Unicode name
(LATIN, CYRILLIC, CJK, ...), compared with `LANGUAGE_SCRIPTS`. A side without letters
(numbers, punctuation) passes. Memory: constant, except `--filter_duplicates`, which keeps an
8-byte hash per kept pair in a Python set (about 70 bytes per pair: 140 MB for 2M pairs).
"""
from __future__ import annotations

import dataclasses
import hashlib
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator

from t2t_lite.errors import UserError

# The reasons a pair is dropped, in the order they are tested (report order).
DROP_REASONS = ("empty", "too_short", "too_long", "length_ratio", "copy", "wrong_script",
                "duplicate")

# ISO 639-1 code -> the scripts (first word of a letter's Unicode name) its text is written in.
_LATIN = ("LATIN",)
LANGUAGE_SCRIPTS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(
        ("en", "de", "fr", "es", "it", "pt", "nl", "cs", "pl", "ro", "tr", "fi", "et", "lv",
         "lt", "hu", "sv", "da", "no", "nb", "nn", "is", "ga", "cy", "eu", "ca", "gl", "sk",
         "sl", "hr", "bs", "sq", "mt", "af", "sw", "id", "ms", "vi", "tl", "ha", "yo", "zu",
         "xh", "so", "uz", "az", "eo", "la", "lb", "fy", "gd", "br", "oc", "ku"),
        _LATIN),
    **dict.fromkeys(("ru", "uk", "be", "bg", "mk", "sr", "kk", "ky", "tg", "mn", "ba", "tt"),
                    ("CYRILLIC",)),
    "el": ("GREEK",),
    "zh": ("CJK",),
    "ja": ("CJK", "HIRAGANA", "KATAKANA"),
    "ko": ("HANGUL", "CJK"),
    **dict.fromkeys(("ar", "fa", "ur", "ps", "sd", "ug"), ("ARABIC",)),
    **dict.fromkeys(("he", "yi"), ("HEBREW",)),
    **dict.fromkeys(("hi", "mr", "ne", "sa"), ("DEVANAGARI",)),
    "bn": ("BENGALI",), "gu": ("GUJARATI",), "pa": ("GURMUKHI",), "ta": ("TAMIL",),
    "te": ("TELUGU",), "kn": ("KANNADA",), "ml": ("MALAYALAM",), "si": ("SINHALA",),
    "th": ("THAI",), "lo": ("LAO",), "km": ("KHMER",), "my": ("MYANMAR",),
    "ka": ("GEORGIAN",), "hy": ("ARMENIAN",), "am": ("ETHIOPIC",),
}
# A side passes the script test when at least this fraction of its letters is in its scripts.
SCRIPT_MIN_FRACTION = 0.5


@dataclasses.dataclass(frozen=True)
class FilterSettings:
    """Which filters are on (the `--filter_*` flags); the defaults drop only empty pairs.

    Attributes:
      min_length, max_length: whitespace tokens per side (0: no limit).
      length_ratio: largest allowed longer/shorter token ratio (0: no limit).
      copies: drop pairs whose source equals their target.
      duplicates: drop repeated (source, target) pairs, keeping the first.
      languages: (source, target) ISO 639-1 codes for the script test, or None.
    """

    min_length: int = 0
    max_length: int = 0
    length_ratio: float = 0.0
    copies: bool = False
    duplicates: bool = False
    languages: tuple[str, str] | None = None

    @property
    def active(self) -> bool:
        """Whether any filter beyond t2t's empty-pair drop is on."""
        return self != FilterSettings()

    def as_flags(self) -> dict[str, object]:
        """{flag: value} of the settings (for datagen's markers and report)."""
        return {"--filter_min_length": self.min_length, "--filter_max_length": self.max_length,
                "--filter_length_ratio": self.length_ratio, "--filter_copies": self.copies,
                "--filter_duplicates": self.duplicates,
                "--filter_languages": ",".join(self.languages or ())}


def parse_settings(min_length: int = 0, max_length: int = 0, length_ratio: float = 0.0,
                   copies: bool = False, duplicates: bool = False,
                   languages: str = "") -> FilterSettings:
    """Checked `FilterSettings` from the flag values.

    Args:
      min_length, max_length, length_ratio, copies, duplicates: see `FilterSettings`.
      languages: "src,tgt" ISO 639-1 codes ("" or None: no script test).

    Returns:
      FilterSettings.

    Raises:
      UserError: a negative limit, a ratio below 1, min above max, or an unknown language
        (one line naming the flag).
    """
    for flag, value in (("--filter_min_length", min_length),
                        ("--filter_max_length", max_length)):
        if value is None or value < 0:
            raise UserError(f"{flag}={value}: must be 0 (off) or a positive number of tokens")
    if max_length and min_length > max_length:
        raise UserError(f"--filter_min_length={min_length} is above --filter_max_length="
                        f"{max_length}: every pair would be dropped")
    if length_ratio and length_ratio < 1:
        raise UserError(f"--filter_length_ratio={length_ratio}: must be 0 (off) or at least "
                        "1 (longer side / shorter side, in tokens; Moses uses 9)")
    codes = None
    if languages:
        parts = tuple(part.strip().lower() for part in languages.split(","))
        if len(parts) != 2 or not all(parts):
            raise UserError(f"--filter_languages={languages}: give two ISO 639-1 codes, "
                            "source then target, e.g. --filter_languages=en,de")
        unknown = [code for code in parts if code not in LANGUAGE_SCRIPTS]
        if unknown:
            raise UserError(f"--filter_languages={languages}: no script known for "
                            f"{', '.join(unknown)}; known: {', '.join(sorted(LANGUAGE_SCRIPTS))}")
        codes = parts
    return FilterSettings(int(min_length), int(max_length), float(length_ratio or 0.0),
                          bool(copies), bool(duplicates), codes)


_SCRIPT_CACHE: dict[str, str] = {}


def _script(char: str) -> str:
    script = _SCRIPT_CACHE.get(char)
    if script is None:
        script = unicodedata.name(char, "UNKNOWN").split(" ", 1)[0]
        _SCRIPT_CACHE[char] = script
    return script


def script_matches(text: str, scripts: tuple[str, ...]) -> bool:
    """Whether at least `SCRIPT_MIN_FRACTION` of the letters of `text` are in `scripts`
    (first words of Unicode character names); True for a text without letters."""
    letters = matching = 0
    for char in text:
        if char.isalpha():
            letters += 1
            matching += _script(char) in scripts
    return letters == 0 or matching >= SCRIPT_MIN_FRACTION * letters


def drop_reason(source: str, target: str, settings: FilterSettings) -> str | None:
    """The first filter (of `DROP_REASONS`, without `duplicate`) that drops the stripped pair,
    or None when it is kept."""
    if not source or not target:
        return "empty"
    if settings.min_length or settings.max_length or settings.length_ratio:
        lengths = (len(source.split()), len(target.split()))
        if settings.min_length and min(lengths) < settings.min_length:
            return "too_short"
        if settings.max_length and max(lengths) > settings.max_length:
            return "too_long"
        if settings.length_ratio and max(lengths) > settings.length_ratio * min(lengths):
            return "length_ratio"
    if settings.copies and source == target:
        return "copy"
    if settings.languages:
        source_scripts, target_scripts = (LANGUAGE_SCRIPTS[code] for code in settings.languages)
        if not (script_matches(source, source_scripts)
                and script_matches(target, target_scripts)):
            return "wrong_script"
    return None


def filter_pairs(pairs: Iterable[tuple[str, str]], settings: FilterSettings,
                 counts: Counter) -> Iterator[tuple[str, str]]:
    """The pairs that pass every filter, in order, counting the others.

    Args:
      pairs: (source, target) stripped strings.
      settings: the filters on.
      counts: updated as pairs go by: "read", "kept" and one count per `DROP_REASONS` entry.

    Yields:
      The kept (source, target) pairs.
    """
    seen: set[int] = set()
    for source, target in pairs:
        counts["read"] += 1
        reason = drop_reason(source, target, settings)
        if reason is None and settings.duplicates:
            key = int.from_bytes(hashlib.blake2b(
                f"{source}\t{target}".encode(), digest_size=8).digest(), "little")
            if key in seen:
                reason = "duplicate"
            else:
                seen.add(key)
        if reason is not None:
            counts[reason] += 1
            continue
        counts["kept"] += 1
        yield source, target


def summary_line(name: str, counts: Counter) -> str:
    """One line: pairs read, kept and dropped by reason (reasons that dropped nothing
    omitted)."""
    dropped = ", ".join(f"{reason} {counts[reason]}" for reason in DROP_REASONS
                        if counts.get(reason))
    return (f"[datagen] {name}: filters kept {counts['kept']} of {counts['read']} training "
            f"pairs; dropped: {dropped or 'none'}")
