"""Text primitives: error signatures, trigram similarity and stack-trace pruning (docs/ledger.md).

Regexes use ``re.ASCII`` so ``\\d`` and ``\\b`` are JavaScript's (J2), and spell the
JavaScript whitespace set out (J1). Trigrams are taken over UTF-16 code units (J3).
"""

from __future__ import annotations

import itertools
import re
from array import array
from collections.abc import Callable, Iterable, Iterator

from ._js import WS_CLASS, trim, trim_end, trim_start

__all__ = [
    "calculate_similarity",
    "error_signature",
    "jaccard",
    "line_signature_pieces",
    "prune_stack_trace",
    "trigrams",
    "trigrams_of_pieces",
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
# A run to collapse other than a lone space: without one the collapse changes nothing, and
# skipping it spares a copy of the text in pieces (a 20 MB error of words: ~4x the text).
_WS_CHANGE = re.compile(rf"[{WS_CLASS}]{{2,}}|[{WS_CLASS.replace(' ', '')}]")
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def _basename(match: re.Match[str]) -> str:
    # An empty basename (a path ending in a separator) keeps the whole match.
    return _SEPARATOR.split(match.group(0))[-1] or match.group(0)


def error_signature(error: str) -> str:
    """Reduce an error or stack trace to a stable key (docs/ledger.md, "Error signatures")."""
    sig = _masked(trim(_first_line(error)))
    if _WS_CHANGE.search(sig):
        sig = _sub(_WS_RUN, " ", sig)
    return trim(sig)


def _masked(sig: str) -> str:
    sig = _sub(_ISO_TS, "<ts>", sig)
    sig = _sub(_HEX_ADDR, "<addr>", sig)
    sig = _sub(_PATH, _basename, sig)
    sig = _sub(_LINE_COL, "", sig)
    return _sub(_NUMBER, "#", sig)


#: Where a line can be cut so that its signature is the signatures of the pieces joined: after
#: whitespace, before a character that is neither whitespace nor one that can go on a
#: timestamp (whose date and time a space may part). No mask spans whitespace otherwise, a
#: whitespace run ends there, nothing it replaces with "" (a ``:12``) begins there, and ``\b``
#: sees whitespace before the cut on both sides of it.
_CUT = re.compile(rf"[{WS_CLASS}](?=[^{WS_CLASS}0-9:.])")
#: Characters of a line masked at a time by :func:`line_signature_pieces`.
_PIECE = 1 << 16


def line_signature_pieces(line: Iterable[str]) -> Iterator[str]:
    """``error_signature`` of one line, already trimmed, given and returned a piece at a
    time: a huge error's signature without a copy of the error or of its signature.

    The line is masked a stretch at a time, cut only where :data:`_CUT` allows (a stretch
    without such a place, a long text without spaces, is masked whole). Every whitespace run
    collapses to a space, which is what the signature does whenever a run other than a lone
    space exists (otherwise collapsing changes nothing).
    """
    pending = ""
    scanned = 0  # pending[:scanned] holds no place to cut
    started = False  # the signature's leading whitespace is trimmed
    held = ""  # trailing whitespace, kept until more text follows it
    for piece in itertools.chain(line, [None]):
        if piece is not None:
            pending += piece
            if len(pending) < _PIECE:
                continue
            cut = _last_cut(pending, max(0, scanned - 1))
            if not cut:
                scanned = len(pending)
                continue
            stretch, pending = pending[:cut], pending[cut:]
            scanned = len(pending)
        else:
            stretch, pending = pending, ""
        out = _sub(_WS_RUN, " ", _masked(stretch))
        if not started:
            out = trim_start(out)
            started = bool(out)
        body = trim_end(out)
        if body:
            yield held + body
            held = ""
        held += out[len(body) :]


def _last_cut(text: str, start: int) -> int:
    """The end of the last :data:`_CUT` in ``text[start:]`` (0: none), looked for in the
    last few thousand characters first."""
    for begin in (max(start, len(text) - 4096), start):
        cut = 0
        for match in _CUT.finditer(text, begin):
            cut = match.end()
        if cut or begin == start:
            return cut
    return 0


def trigrams_of_pieces(pieces: Iterable[str]) -> frozenset[str]:
    """``trigrams("".join(pieces))`` without the joined text. The pieces must be cut where
    lower-casing a piece alone changes nothing (between whitespace and the rest, as the
    pieces of :func:`line_signature_pieces` are)."""
    grams: set[str] = set()
    tail = "  "
    for piece in pieces:
        units = utf16_units(piece.lower())
        for start in range(0, len(units), _GRAM_BLOCK):
            block = tail + units[start : start + _GRAM_BLOCK]
            grams.update(_block_grams(block))
            tail = block[-2:]
    grams.update(_block_grams(tail + "  "))
    return frozenset(grams)


#: Texts longer than this are substituted a block of pieces at a time.
_SUB_LONG = 1 << 17
_SUB_PIECES = 1 << 12


def _sub(pattern: re.Pattern[str], repl: str | Callable[[re.Match[str]], str], text: str) -> str:
    """``pattern.sub(repl, text)`` (``repl`` has no backslashes). On a long text the pieces
    are joined a few thousand at a time: ``re.sub`` holds one string per piece until the
    end, several times the text for a long error with many matches."""
    if len(text) <= _SUB_LONG:
        return pattern.sub(repl, text)
    blocks: list[str] = []
    pieces: list[str] = []
    last = 0
    for match in pattern.finditer(text):
        pieces.append(text[last : match.start()])
        pieces.append(repl if isinstance(repl, str) else repl(match))
        last = match.end()
        if len(pieces) >= _SUB_PIECES:
            blocks.append("".join(pieces))
            pieces.clear()
    if last == 0:
        return text
    pieces.append(text[last:])
    blocks.append("".join(pieces))
    pieces.clear()
    return "".join(blocks)


def _first_line(text: str) -> str:
    """The first line that is not blank, found without splitting the whole text (an error of
    50 MB would be copied line by line)."""
    start = 0
    while start <= len(text):
        end = text.find("\n", start)
        if end < 0:
            end = len(text)
        if trim(text[start:end]):
            return text[start:end]
        start = end + 1
    return ""


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
    if len(text) <= _GRAM_BLOCK:
        padded = "  " + utf16_units(text.lower()) + "  "
        return frozenset([padded[i : i + 3] for i in range(len(padded) - 2)])
    # A long text: a block of grams at a time, so only the distinct ones are held, never a
    # list of one gram per character (a 50 MB error made 50 million strings, gigabytes),
    # and no padded copy. ASCII is lowered a block at a time (no copy of the text at all);
    # other text is lowered whole first (lowering may change its length, J3 splits it).
    lower: Callable[[str], str]
    if text.isascii():
        units = text
        lower = str.lower
    else:
        units = utf16_units(text.lower())
        lower = _same  # already lowered
    end = len(units) - 2
    head, tail = "  " + lower(units[:2]), lower(units[-2:]) + "  "
    blocks = (
        _block_grams(lower(units[start : min(start + _GRAM_BLOCK, end) + 2]))
        for start in range(0, end, _GRAM_BLOCK)
    )
    edges = [head[0:3], head[1:4], tail[0:3], tail[1:4]]
    return frozenset(itertools.chain(edges, itertools.chain.from_iterable(blocks)))


def _same(text: str) -> str:
    return text


def _block_grams(block: str) -> list[str]:
    return [block[i : i + 3] for i in range(len(block) - 2)]


_GRAM_BLOCK = 1 << 13


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    # Integer counts and one division: the same double as the reference.
    common = len(a & b)
    return common / (len(a) + len(b) - common)


def calculate_similarity(a: str, b: str) -> float:
    """Jaccard similarity of the trigram sets, 1.0 for identical strings (docs/ledger.md,
    "Similarity")."""
    if a == b:
        return 1.0
    return jaccard(trigrams(a), trigrams(b))


def prune_stack_trace(trace: str, max_lines: int) -> str:
    """Keep the first ``max_lines`` lines and say how many were cut (docs/ledger.md, "Stack
    traces")."""
    # Counted and cut without splitting: a list of the lines is a copy of a huge error.
    lines = trace.count("\n") + 1
    limit = int(max_lines)  # a validated limit may be an integral float such as 2.0
    if lines <= limit:
        return trim(trace)
    end = -1
    for _ in range(limit):
        end = trace.find("\n", end + 1)
    kept = trim_end(trace[:end])
    omitted = lines - limit
    return f"{kept}\n  \u2026 ({omitted} more line{'' if omitted == 1 else 's'} pruned)"
