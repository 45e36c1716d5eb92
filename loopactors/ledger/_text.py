"""Text primitives: error signatures, trigram similarity and stack-trace pruning (docs/ledger.md).

Regexes use ``re.ASCII`` so ``\\d`` and ``\\b`` are JavaScript's (J2), and spell the
JavaScript whitespace set out (J1). Trigrams are taken over UTF-16 code units (J3).
"""

from __future__ import annotations

import re
from array import array

from ._js import WS_CLASS, trim, trim_end

__all__ = [
    "calculate_similarity",
    "error_signature",
    "jaccard",
    "prune_stack_trace",
    "trigrams",
    "utf16_units",
]

_ISO_TS = re.compile(r"\b\d{4}-\d{2}-\d{2}[T ][\d:.]+Z?\b", re.ASCII)
_HEX_ADDR = re.compile(r"0x[0-9a-fA-F]+")
# Drive form first: the alternation order decides which one wins at a position.
_PATH = re.compile(rf"[A-Za-z]:[\\/][^{WS_CLASS}:]+|(?:[\\/][^{WS_CLASS}:\\/]+)+")
_SEPARATOR = re.compile(r"[\\/]")
_LINE_COL = re.compile(r":\d+(?::\d+)?", re.ASCII)
_NUMBER = re.compile(r"\b\d+\b", re.ASCII)
_WS_RUN = re.compile(rf"[{WS_CLASS}]+")
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def _basename(match: re.Match[str]) -> str:
    # An empty basename (a path ending in a separator) keeps the whole match.
    return _SEPARATOR.split(match.group(0))[-1] or match.group(0)


def error_signature(error: str) -> str:
    """Reduce an error or stack trace to a stable key (spec §3.1)."""
    line = next((ln for ln in error.split("\n") if trim(ln)), "")
    sig = trim(line)
    sig = _ISO_TS.sub("<ts>", sig)
    sig = _HEX_ADDR.sub("<addr>", sig)
    sig = _PATH.sub(_basename, sig)
    sig = _LINE_COL.sub("", sig)
    sig = _NUMBER.sub("#", sig)
    return trim(_WS_RUN.sub(" ", sig))


def utf16_units(text: str) -> str:
    """``text`` with each astral character split into its two surrogates (J3).

    The result has one Python character per UTF-16 code unit, so slicing it slices the way
    JavaScript does. Text without astral characters is returned as is (the common case).
    """
    if text.isascii() or not _ASTRAL.search(text):
        return text
    # "utf-16" puts a BOM first and uses native byte order, which is what array("H") reads.
    units = array("H", text.encode("utf-16", "surrogatepass")[2:])
    return "".join(map(chr, units))


def trigrams(text: str) -> frozenset[str]:
    """The set of 3-unit substrings of the lower-cased text padded with two spaces a side."""
    padded = "  " + utf16_units(text.lower()) + "  "
    return frozenset([padded[i : i + 3] for i in range(len(padded) - 2)])


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    # Integer counts and one division: the same double as the reference.
    common = len(a & b)
    return common / (len(a) + len(b) - common)


def calculate_similarity(a: str, b: str) -> float:
    """Jaccard similarity of the trigram sets, 1.0 for identical strings (spec §3.2)."""
    if a == b:
        return 1.0
    return jaccard(trigrams(a), trigrams(b))


def prune_stack_trace(trace: str, max_lines: int) -> str:
    """Keep the first ``max_lines`` lines and say how many were cut (spec §3.3)."""
    lines = trace.split("\n")
    limit = int(max_lines)  # a validated limit may be an integral float such as 2.0
    if len(lines) <= limit:
        return trim(trace)
    kept = trim_end("\n".join(lines[:limit]))
    omitted = len(lines) - limit
    return f"{kept}\n  \u2026 ({omitted} more line{'' if omitted == 1 else 's'} pruned)"
