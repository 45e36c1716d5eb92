"""``--inject`` read a block at a time, with ``--summary``'s reader (``_summary_read``).

The context block of a parsed ledger (``_summary.build_context_injection``) holds the text,
every attempt, the summary's and the breaker's signatures, the pruned copy of the last error
and the output joined as one string: 7-10x the file on one huge error. Here the file is read
three times, each read keeping only what one part of the block needs: the breaker's facts
(``_facts_stream``), then the summary (written out, then freed), then the attempts of the
pruning window, a long error as the first ``maxTraceLines`` lines of its text (UTF-8) and
how many lines it has. The output is ``build_context_injection``'s, byte for byte.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Iterator

from ._breaker import decide
from ._facts import ABSENT
from ._facts_stream import read_streamed_facts
from ._js import WHITESPACE, LongText, format_number, js_string, truthy_number
from ._model import (
    BreakerConfig,
    PruneConfig,
    assert_similarity_threshold,
    validate_breaker_config,
    validate_prune_config,
)
from ._summary_read import (
    _BLOCK,
    _MEMO_CHARS,
    StreamedSummary,
    _GiveUp,
    _Held,
    _read_ledger,
    _Text,
)
from ._summary_read import read_summary as _read_summary
from ._text import (
    calculate_similarity,
    error_signature,
    jaccard,
    line_signature_pieces,
    prune_stack_trace,
    trigrams,
    trigrams_of_pieces,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["LedgerChanged", "streams_injection", "write_streamed_injection"]

Write = Callable[[str], object]


class LedgerChanged(RuntimeError):
    """The file read differently the third time, after part of the block was written."""


def streams_injection(breaker: BreakerConfig) -> bool:
    """Whether :func:`write_streamed_injection` can build the block: for any threshold the
    checks take (the summary's grouper reads one error at a time whatever it is); one they
    refuse is left to the whole read, whose message it gets."""
    threshold = breaker.similarity_threshold
    return isinstance(threshold, int | float) and 0 < threshold <= 1


def write_streamed_injection(
    read: Callable[[int], bytes],
    rewind: Callable[[], object],
    breaker: BreakerConfig,
    prune: PruneConfig,
    write: Write,
) -> bool:
    """``write(build_context_injection(ledger, breaker, prune) + "\\n")`` a piece at a time,
    for the ledger JSON ``read(n)`` returns from its start (``rewind()`` starts it again).

    False, with nothing written, where ``parse_ledger`` must read the ledger (as
    ``_summary_read.read_summary``); the configs are checked in the parsed ledger's order,
    after the ledger. Raises :class:`LedgerChanged` if the last read disagrees with the first.
    """
    facts = read_streamed_facts(read, breaker.similarity_threshold)
    if facts is None:
        return False
    # build_context_injection's order: the summary's check, the breaker's, the pruner's.
    assert_similarity_threshold(breaker.similarity_threshold)
    validate_breaker_config(breaker)
    decision = decide(facts, breaker)
    validate_prune_config(prune)
    attempts = facts.iterations
    del facts
    rewind()
    summary = _read_summary(read, breaker.similarity_threshold)
    if summary is None:  # the file changed between the reads: nothing written yet
        return False
    _write_head(summary, write)
    del summary  # a huge error's line, not held beside the window's copy of the error
    rewind()
    window = _Window(
        max(0, attempts - int(prune.window)),
        int(prune.max_trace_lines),
        prune.similarity_threshold,
    )
    text = _Text(read)
    text.error_sink = window.sink
    try:
        _read_ledger(text, window.add)
    except _GiveUp:
        raise LedgerChanged("the ledger changed while it was read") from None
    if window.count != attempts:
        raise LedgerChanged("the ledger changed while it was read")
    last = window.last
    del window, text
    if isinstance(last, _PrunedTrace) or (type(last) is str and last):
        write("**Most recent error (pruned):**\n```\n")
        if isinstance(last, _PrunedTrace):
            for piece in last.pieces():
                write(piece)
        else:
            write(last)
        write("\n```\n\n")
    if decision.escalate:
        write(f"> STOP \u2014 circuit breaker tripped ({decision.trigger}). {decision.reason}\n")
    else:
        write(
            f"> Circuit breaker: OK ({decision.iterations}/"
            f"{js_string(breaker.max_iterations)} iterations used).\n"
        )
    return True


def _write_head(summary: StreamedSummary, write: Write) -> None:
    """The block down to the failure patterns, each line with its newline."""
    write(f"## Loop Context (managed)\n\n**Goal:** {summary.goal}\n")
    progress = (
        f"**Progress:** iteration {summary.total_attempts} \u00b7 {summary.successes} ok "
        f"\u00b7 {summary.failures} failed"
    )
    tokens = summary.tokens_used()
    if truthy_number(tokens):
        progress += f" \u00b7 {format_number(tokens)} tokens"
    write(progress + "\n\n")
    if len(summary.actions):
        write("**Already tried (do NOT repeat):**\n")
        for action in summary.actions:
            # A missing action prints as JavaScript's template does.
            write(f"- {'undefined' if action is None else action}\n")
        write("\n")
    order = summary.order()
    if order:
        write("**Failure patterns:**\n")
        for group in order:
            write(f"- ({summary.counts[group]}\u00d7) ")
            summary.write_sample(group, write)  # a long sample a block at a time
            write("\n")
        write("\n")


class _Window:
    """The attempts from ``start`` on (the pruning window), pruned as they come: consecutive
    failures whose signatures are similar to the first of them collapse into it
    (``prune_ledger``). Kept: the newest failure kept (its pruned error, :attr:`last`) and
    the entry the next attempt is compared with, so at most two errors and two sets of
    grams are held, whatever the window."""

    __slots__ = (
        "count",
        "head",
        "head_failed",
        "head_grams",
        "last",
        "limit",
        "start",
        "threshold",
    )

    def __init__(self, start: int, limit: int, threshold: float) -> None:
        self.start = start
        self.limit = limit
        self.threshold = threshold
        self.count = 0
        self.last: object = None
        self.head: object = None
        self.head_failed = False
        self.head_grams: frozenset[str] | None = None

    def sink(self) -> _PrunedTrace | _Dropped:
        """The error string of a long attempt: pruned in the window, dropped before it
        (its attempt is counted only)."""
        return _PrunedTrace(self.limit) if self.count >= self.start else _Dropped()

    def add(self, attempt: dict[str, Any]) -> None:
        self.count += 1
        if self.count <= self.start:
            return
        error = attempt.get("error", ABSENT)
        if type(error) is str:
            error = prune_stack_trace(error, self.limit)
        elif type(error) is _PrunedTrace:
            error = error.small()
        failed = attempt.get("outcome") == "failure"
        if self.head_failed and failed and self._similar(error):
            self.collapsed()
            return  # collapsed into the head: the head's error stays
        self.head, self.head_failed, self.head_grams = error, failed, None
        self.began(error)
        if failed:
            self.last = error

    def began(self, error: object) -> None:
        """The attempt just added heads a group of its own; ``error``: its pruned error
        (``--prune`` keeps every group: ``_prune_read``)."""

    def collapsed(self) -> None:
        """The attempt just added collapsed into the group before it."""

    def _similar(self, error: object) -> bool:
        head = self.head
        if type(head) is _PrunedTrace or type(error) is _PrunedTrace:
            if self.head_grams is None:
                self.head_grams = _grams(head)
            return jaccard(self.head_grams, _grams(error)) >= self.threshold
        return calculate_similarity(_signature(head), _signature(error)) >= self.threshold


class _Dropped:
    """A long attempt's error string counted, not kept (it is checked as JSON as it goes)."""

    __slots__ = ()

    def add(self, piece: str) -> None:
        pass

    def result(self) -> str:
        return ""


def _signature(error: object) -> str:
    return error_signature(error if type(error) is str else "")


def _grams(error: object) -> frozenset[str]:
    """The trigrams of the error's signature (``calculate_similarity`` is their Jaccard
    index, 1.0 for equal signatures too)."""
    if type(error) is _PrunedTrace:
        return trigrams_of_pieces(error.signature_pieces())
    return trigrams(_signature(error))


class _PrunedTrace(_Held, LongText):
    """``prune_stack_trace`` of an error string read a piece at a time: the text itself while
    short, else its first ``limit`` lines as UTF-8 (the rest only counted), where its
    characters other than whitespace start and end, and where its first line that is not
    blank ends (the signature is made from that line alone)."""

    __slots__ = ("first", "kept", "last", "limit", "line", "sig_end", "sig_line")

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.kept = bytearray()
        #: The line being read (0 first): the newlines met so far.
        self.line = 0
        #: In ``kept``: the first byte of the first character other than whitespace (-1:
        #: none yet), the end of the last one, and of the last one on that first line.
        self.first = -1
        self.last = 0
        self.sig_end = 0
        self.sig_line = -1

    def result(self) -> str | _PrunedTrace:
        """The error itself while short (pruned by the caller), else this."""
        return self if self.held is None else "".join(self.held)

    def _take(self, text: str) -> None:
        if self.line >= self.limit:
            self.line += text.count("\n")
            return
        parts = text.split("\n")
        for i, part in enumerate(parts):
            if i:
                self.line += 1
                if self.line >= self.limit:
                    self.line += len(parts) - 1 - i  # the rest is only counted
                    return
                self.kept += b"\n"
            if part:
                self._segment(part)

    def _segment(self, part: str) -> None:
        base = len(self.kept)
        data = part.encode("utf-8", "surrogatepass")
        self.kept += data
        body = part.strip(WHITESPACE)
        if not body:
            return
        lead = len(part) - len(part.lstrip(WHITESPACE))
        tail = len(part) - len(part.rstrip(WHITESPACE))
        end = base + len(data)
        if tail:
            end -= len(part[-tail:].encode("utf-8", "surrogatepass"))
        if self.first < 0:
            self.first = base + len(part[:lead].encode("utf-8", "surrogatepass"))
            self.sig_line = self.line
        if self.line == self.sig_line:
            self.sig_end = end
        self.last = end

    def _bounds(self) -> tuple[int, int, str]:
        """The pruned text: ``kept[start:end] + suffix``."""
        lines = self.line + 1
        if lines <= self.limit:  # the whole text, trimmed
            return (self.first, self.last, "") if self.first >= 0 else (0, 0, "")
        omitted = lines - self.limit
        suffix = f"\n  \u2026 ({omitted} more line{'' if omitted == 1 else 's'} pruned)"
        return 0, self.last if self.first >= 0 else 0, suffix  # only the end trimmed

    def small(self) -> str | _PrunedTrace:
        """The pruned text as a string if it is short, else this."""
        start, end, suffix = self._bounds()
        if end - start > _MEMO_CHARS:
            return self
        with memoryview(self.kept) as view:
            return str(view[start:end], "utf-8", "surrogatepass") + suffix

    def pieces(self) -> Iterator[str]:
        """The pruned text, a block at a time."""
        start, end, suffix = self._bounds()
        yield from self._decoded(start, end)
        yield suffix

    def signature_pieces(self) -> Iterator[str]:
        """``error_signature`` of the pruned text (a long one has a line that is not blank
        among its kept lines: its signature is that line's)."""
        return line_signature_pieces(self._decoded(self.first, self.sig_end))

    def _decoded(self, start: int, end: int) -> Iterator[str]:
        decoder = codecs.getincrementaldecoder("utf-8")("surrogatepass")
        with memoryview(self.kept) as view:
            for at in range(start, end, _BLOCK):
                piece = view[at : min(end, at + _BLOCK)]
                yield decoder.decode(piece, final=at + _BLOCK >= end)
                piece.release()
