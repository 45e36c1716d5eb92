"""``--summary`` read straight from ledger JSON, a block at a time (docs/benchmarks.md).

The summary of a parsed ledger (``_summary.summarize_attempts``) holds every attempt as a
Struct, every signature and first line, and the whole text: ~8x the file on 50,000 distinct
errors. Here the text is read 64 KiB at a time and its attempts decoded 16 KiB at a time with
the standard library's decoder (so msgspec is not even loaded); each attempt is validated as
``_facts`` validates a small ledger and then only counted: the grouping keeps the group
heads' signatures, the summary their first lines and the distinct actions, all in flat
buffers (``_compact``). The result and the output are those of the parsed ledger's summary,
byte for byte.

Anything this reader does not accept exactly as ``parse_ledger`` would (bad UTF-8, escaped
surrogates, duplicate keys, non-finite numbers, a wrong type, bad JSON) makes it give up
(:func:`read_summary` returns None): the caller then reads the ledger the usual way, which
raises the reference's message or, for text only valid once bad bytes are replaced, gives
the summary.
"""

from __future__ import annotations

import abc
import codecs
import re
from array import array
from collections.abc import Callable, Iterator
from json.decoder import JSONDecoder, scanstring  # type: ignore[attr-defined]
from json.encoder import encode_basestring

from ._compact import TextList, TextSet
from ._facts import _finite, _refuse, _Refused, _unique
from ._grouping import COMMON_SAMPLE, PartsGrouper, common_grams
from ._js import WHITESPACE, _encode, as_double, format_number, js_number, trim, truthy_number
from ._rules import SIMILARITY_THRESHOLD
from ._text import error_signature, line_signature_pieces, trigrams_of_pieces

TYPE_CHECKING = False  # typing itself is not needed to run
if TYPE_CHECKING:
    from typing import Any, Protocol

    class _Sink(Protocol):
        """What :meth:`_Text.string` hands a string's pieces to, and asks for its value."""

        def add(self, piece: str) -> None: ...

        def result(self) -> object: ...


__all__ = ["StreamedSummary", "format_streamed_summary", "read_summary", "write_summary_json"]

#: The summary's threshold: the command always groups at the default (see ``_cli``).
_THRESHOLD = SIMILARITY_THRESHOLD
#: Bytes read at a time.
_BLOCK = 1 << 16
#: Characters of error texts whose group is remembered (a ledger often repeats one error);
#: forgotten all at once past this, so the memo never grows with the ledger.
_MEMO_CHARS = 1 << 16
#: Characters of distinct errors held before the grouping starts: the common grams are
#: sampled from them, and a sample of a few dozen long errors has none (then errors sharing
#: a long text make every head a candidate, docs/ledger.md).
_SAMPLE_CHARS = 1 << 20

_DECODER = JSONDecoder(parse_float=_finite, parse_constant=_refuse, object_pairs_hook=_unique)
_SCAN = _DECODER.raw_decode
_DECODE = _DECODER.decode
#: Characters of attempts decoded at once (a few hundred attempts as objects at a time).
_BATCH = 1 << 14
_SPACE = re.compile(r"[ \t\n\r]+")  # JSON's whitespace, as the decoder skips it
#: A value this close to the end of the text read so far may go on (a number's digits).
_MARGIN = 4
#: An attempt still cut off by the end of this much text is read a key at a time, its
#: strings a block at a time (:meth:`_Text.string`): a huge error is never decoded whole.
_LONG = 1 << 18
#: What a JSON string holds before its closing quote: anything but a quote, a backslash or a
#: bad escape (control characters are left to the decoder).
_CONTENT = re.compile(r'[^"\\]*(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})[^"\\]*)*')


def _skip_space(text: str, pos: int) -> int:
    match = _SPACE.match(text, pos)
    return pos if match is None else match.end()


#: The types ``_model.Attempt`` takes for its text and its number fields (None: null or
#: absent), as ``_facts`` checks a small ledger's.
_TEXT = (str, type(None))
_NUMBER = (int, float, type(None))


class _GiveUp(Exception):
    """Input left to ``parse_ledger``."""


class _Text:
    """The ledger text, decoded a block at a time; ``buf[pos:]`` is what is left to read."""

    __slots__ = ("_decoder", "_read", "buf", "eof", "error_sink", "pos")

    def __init__(self, read: Callable[[int], bytes]) -> None:
        self._read = read
        #: What keeps a long attempt's ``error`` string as it is read (:meth:`string`).
        self.error_sink: Callable[[], _Sink] = _ErrorLines
        self._decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self.buf = ""
        self.pos = 0
        self.eof = False

    def more(self) -> bool:
        """Read on (at least as much as is left, so a long value is rescanned a few times
        only); False at the end of the input."""
        if self.eof:
            return False
        left = len(self.buf) - self.pos
        block = self._read(max(_BLOCK, left))
        if not block:
            self.eof = True
        try:
            text = self._decoder.decode(block, final=self.eof)
        except UnicodeDecodeError:
            raise _GiveUp from None  # Node replaces bad bytes: parse_ledger does too
        buf = self.buf = self.buf[self.pos :] + text
        self.pos = 0
        # Escaped surrogates: msgspec refuses unpaired ones, the standard library does not
        # (as in _facts; a split escape is found once the next block is appended).
        if "\\ud" in buf or "\\uD" in buf:
            raise _GiveUp
        return True

    def char(self) -> str:
        """The next character after whitespace, consumed ("" at the end of the input)."""
        while True:
            pos = _skip_space(self.buf, self.pos)
            if pos < len(self.buf):
                self.pos = pos + 1
                return self.buf[pos]
            self.pos = pos
            if not self.more():
                return ""

    def peek(self) -> str:
        char = self.char()
        if char:
            self.pos -= 1
        return char

    def value(self, long_object: bool = False) -> object:
        """The JSON value after whitespace, consumed; with ``long_object``, an object still
        cut off past :data:`_LONG` is read by :meth:`_object`."""
        while True:
            buf = self.buf
            pos = _skip_space(buf, self.pos)
            try:
                value, end = _SCAN(buf, pos)
            except (StopIteration, ValueError, RecursionError):
                end = -1  # bad JSON, or cut off by the end of the block
            except _Refused:
                raise _GiveUp from None
            if end >= 0 and (self.eof or end + _MARGIN <= len(buf)):
                if end > _BLOCK:
                    # A long value: keep only what follows it, not a second copy of it.
                    self.buf, self.pos = buf[end:], 0
                else:
                    self.pos = end
                return value
            self.pos = pos
            if long_object and len(buf) - pos > _LONG and buf[pos] == "{":
                return self._object()
            if not self.more():
                raise _GiveUp

    def items(self) -> list[object]:
        """The next values of an array (at least one): as many as end in the next 16 KiB,
        decoded at once.

        The text up to a ``}`` is tried as the array's next values: JSON is read left to
        right, so if that text is complete values, they are the very values (the attempts)
        the whole text has there; if it is not (the ``}`` was inside a string or a nested
        object), one value is read on its own.
        """
        buf = self.buf
        pos = _skip_space(buf, self.pos)
        cut = buf.rfind("}", pos, pos + _BATCH)
        if cut > pos:
            try:
                values = _DECODE("[" + buf[pos : cut + 1] + "]")
            except (ValueError, RecursionError):
                values = None
            except _Refused:
                raise _GiveUp from None
            if type(values) is list and values:
                self.pos = cut + 1
                return values
        return [self.value(long_object=True)]

    def _object(self) -> dict[str, object]:
        """A long object, a key at a time; its string values through :meth:`string`."""
        self.char()  # its "{"
        value: dict[str, object] = {}
        if self.peek() == "}":
            self.char()
            return value
        while True:
            key = self.value()
            if type(key) is not str or key in value or self.char() != ":":
                raise _GiveUp
            value[key] = self.string(key == "error") if self.peek() == '"' else self.value()
            char = self.char()
            if char == "}":
                return value
            if char != ",":
                raise _GiveUp

    def string(self, error: bool) -> object:
        """The JSON string next, a block at a time: a text, or for a long ``error`` what
        the summary needs of it (:class:`_LongError`)."""
        self.char()  # its opening quote
        sink = self.error_sink() if error else _Pieces()
        while True:
            buf, pos = self.buf, self.pos
            end = _CONTENT.match(buf, pos, min(len(buf), pos + _BLOCK)).end()  # type: ignore[union-attr]
            if end > pos:
                try:
                    piece = scanstring(buf[pos:end] + '"', 0, True)[0]
                except ValueError:
                    raise _GiveUp from None  # a control character
                sink.add(piece)
                self.pos = end
                continue
            if pos < len(buf):
                if buf[pos] == '"':
                    self.pos = pos + 1
                    return sink.result()
                if pos + 6 <= len(buf):
                    raise _GiveUp  # a bad escape
            if not self.more():
                raise _GiveUp


class _Pieces:
    """A string's pieces, joined at its end."""

    __slots__ = ("pieces",)

    def __init__(self) -> None:
        self.pieces: list[str] = []

    def add(self, piece: str) -> None:
        self.pieces.append(piece)

    def result(self) -> str:
        return "".join(self.pieces)


class _LongError:
    """What the summary needs of an error too long to hold: its first line that is not
    blank, trimmed, as UTF-8 (the signature is made from it alone), and whether that is the
    error's first line (the sample; otherwise the sample is empty)."""

    __slots__ = ("line", "sample_is_line")

    def __init__(self, line: bytearray, sample_is_line: bool) -> None:
        self.line = line
        self.sample_is_line = sample_is_line

    def line_pieces(self) -> Iterator[str]:
        decoder = codecs.getincrementaldecoder("utf-8")("surrogatepass")
        line = self.line
        with memoryview(line) as view:
            for at in range(0, len(line), _BLOCK):
                piece = view[at : at + _BLOCK]
                yield decoder.decode(piece, final=at + _BLOCK >= len(line))
                piece.release()

    def signature_pieces(self) -> Iterator[str]:
        return line_signature_pieces(self.line_pieces())


class _Held(abc.ABC):
    """A string read a piece at a time: held whole while it is short (``_MEMO_CHARS``), else
    each piece goes to ``_take`` as it comes (the ones held first)."""

    __slots__ = ("chars", "held")

    def __init__(self) -> None:
        self.held: list[str] | None = []
        self.chars = 0

    def add(self, piece: str) -> None:
        held = self.held
        if held is None:
            self._take(piece)
            return
        held.append(piece)
        self.chars += len(piece)
        if self.chars <= _MEMO_CHARS:
            return
        self.held = None
        for text in held:
            self._take(text)
        held.clear()

    @abc.abstractmethod
    def _take(self, text: str) -> None:
        """What a long string does with each piece (the subclass's own)."""


class _ErrorLines(_Held):
    """An error string's pieces: the text itself while short, else a :class:`_LongError`
    (the first line that is not blank, trimmed, kept as it comes; the rest dropped)."""

    __slots__ = ("done", "line", "line_number", "started", "ws_from")

    def __init__(self) -> None:
        super().__init__()
        self.line = bytearray()
        self.line_number = 0
        self.started = False  # a character other than whitespace met on this line
        self.ws_from = -1  # where the line's trailing whitespace begins in ``line``
        self.done = False

    def _take(self, text: str) -> None:
        if self.done:
            return
        for i, part in enumerate(text.split("\n")):
            if i:
                self._end_line()
                if self.done:
                    return
            self._part(part)

    def _part(self, part: str) -> None:
        if not self.started:
            part = part.lstrip(WHITESPACE)
            if not part:
                return
            self.started = True
        body = part.rstrip(WHITESPACE)
        if body:
            self.line += body.encode("utf-8", "surrogatepass")
            self.ws_from = -1
            part = part[len(body) :]
            if not part:
                return
        if self.ws_from < 0:
            self.ws_from = len(self.line)
        self.line += part.encode("utf-8", "surrogatepass")

    def _end_line(self) -> None:
        if self.started:
            if self.ws_from >= 0:
                del self.line[self.ws_from :]
            self.done = True
        else:
            self.line_number += 1

    def result(self) -> str | _LongError:
        if self.held is not None:
            return "".join(self.held)
        sample_is_line = self.started and self.line_number == 0
        if not self.done:
            self._end_line()
        return _LongError(self.line, sample_is_line)


class StreamedSummary:
    """What ``--summary`` prints: the fields of an ``AttemptSummary``, groups in flat
    buffers (in creation order; :meth:`order` sorts them)."""

    __slots__ = (
        "_memo_chars",
        "_pending",
        "_sample_same",
        "actions",
        "counts",
        "failures",
        "goal",
        "grouper",
        "long",
        "memo",
        "noops",
        "samples",
        "successes",
        "threshold",
        "tokens",
        "total_attempts",
    )

    def __init__(self, threshold: float = _THRESHOLD) -> None:
        #: ``--summary`` groups at the default; ``--inject`` at the breaker's threshold.
        self.threshold = threshold
        self.goal = ""
        self.total_attempts = self.successes = self.failures = self.noops = 0
        self.tokens = 0.0
        self.actions = TextSet()
        self.grouper: PartsGrouper | None = None
        #: Distinct errors seen before the grouping starts, first seen first (the common
        #: grams are taken from them): their signature and how many times each came.
        self._pending: dict[str, list[Any]] | None = {}
        self.memo: dict[str, int] = {}
        self._memo_chars = 0
        #: Attempts in each group: 4 bytes each, 8 past 4,294,967,295 (:meth:`_count`).
        self.counts = array("I")
        #: Each group head's first line, empty where it equals the head's signature (then
        #: ``_sample_same`` says so): in most ledgers the two are one text.
        self.samples = TextList()
        self._sample_same = bytearray()
        #: Groups whose head is an error too long to hold (its line only).
        self.long: dict[int, _LongError] = {}

    def add(self, attempt: dict[str, Any]) -> None:
        """One attempt, validated as ``_model.Attempt`` is (else :class:`_GiveUp`)."""
        get = attempt.get
        action, outcome, error = get("action"), get("outcome"), get("error")
        tokens = get("tokensUsed")
        if (
            type(action) not in _TEXT
            or type(outcome) not in _TEXT
            or (type(error) not in _TEXT and type(error) is not _LongError)
            or type(tokens) not in _NUMBER
            or type(get("repeated")) not in _NUMBER
        ):
            raise _GiveUp
        self.total_attempts += 1
        self.actions.add(action)
        if tokens is not None:
            self.tokens += as_double(tokens)
        if outcome == "success":
            self.successes += 1
        elif outcome == "noop":
            self.noops += 1
        else:
            self.failures += 1  # any other outcome, missing included, counts as a failure
            if error:
                self._error(error)

    def _error(self, error: str | _LongError) -> None:
        if type(error) is _LongError:
            self._long_error(error)
            return
        assert type(error) is str
        pending = self._pending
        if len(error) > _MEMO_CHARS:
            # A long error is grouped at once and not remembered: holding it (and its
            # signature) until the grouping starts would keep copies of a huge text.
            self.start_grouping()
            self._count(self._group(error_signature(error), _first_line(error)), 1)
            return
        if pending is not None:
            held = pending.get(error)
            if held is not None:
                held[1] += 1
                return
            pending[error] = [error_signature(error), 1]
            self._memo_chars += len(error)
            if len(pending) >= COMMON_SAMPLE or self._memo_chars > _SAMPLE_CHARS:
                self.start_grouping()
            return
        memo = self.memo
        group = memo.get(error)
        if group is None:
            group = self._group(error_signature(error), _first_line(error))
            self._remember(error, group)
        self._count(group, 1)

    def _remember(self, error: str, group: int) -> None:
        self._memo_chars += len(error)
        if self._memo_chars > _MEMO_CHARS:
            self.memo.clear()
            self._memo_chars = len(error)
        self.memo[error] = group

    def start_grouping(self) -> None:
        """Group the errors held so far, then every later one as it comes."""
        pending = self._pending
        if pending is None:
            return
        self._pending = None
        self._memo_chars = 0
        distinct = list(dict.fromkeys(sig for sig, _ in pending.values()))
        self.grouper = PartsGrouper(self.threshold, common_grams(distinct))
        group_of: dict[str, int] = {}
        for error, (sig, count) in pending.items():
            group = group_of.get(sig)
            if group is None:
                group = group_of[sig] = self._group(sig, _first_line(error))
            self._count(group, count)
            self._remember(error, group)

    def _long_error(self, error: _LongError) -> None:
        """Grouped at once (as any error over the memo's size), from its line a block at a
        time: no copy of the error, of its line or of its signature is held."""
        self.start_grouping()
        if len(error.line) <= _MEMO_CHARS:
            line = error.line.decode("utf-8", "surrogatepass")
            sample = line if error.sample_is_line else ""
            self._count(self._group(error_signature(line), sample), 1)
            return
        grouper = self.grouper
        assert grouper is not None
        pieces = error.signature_pieces
        group = grouper.add("", trigrams_of_pieces(pieces()), pieces)
        if group == len(self.counts):
            self.counts.append(0)
            self.samples.append("")
            self._sample_same.append(False)
            self.long[group] = error
        self._count(group, 1)

    def _count(self, group: int, attempts: int) -> None:
        try:
            self.counts[group] += attempts
        except OverflowError:
            self.counts = array("q", self.counts)
            self.counts[group] += attempts

    def _group(self, sig: str, sample: str) -> int:
        """The group of ``sig``; a new one gets ``sample`` (its error's first line)."""
        grouper = self.grouper
        assert grouper is not None
        group = grouper.add(sig)
        if group == len(self.counts):
            self.counts.append(0)
            same = sample == sig
            self.samples.append("" if same else sample)
            self._sample_same.append(same)
        return group

    def finish(self) -> None:
        self.start_grouping()
        if self.grouper is not None:
            self.grouper.release_index()
        self.memo.clear()

    def signature(self, group: int) -> str:
        assert self.grouper is not None
        return self.grouper.heads[group]

    def sample(self, group: int) -> str:
        return self.signature(group) if self._sample_same[group] else self.samples[group]

    def write_sample(self, group: int, write: Callable[[str], object]) -> None:
        """``write(self.sample(group))``, a block at a time for a long one."""
        long = self.long.get(group)
        if long is not None:
            if long.sample_is_line:
                for piece in long.line_pieces():
                    write(piece)
        elif self._sample_same[group]:
            assert self.grouper is not None
            self.grouper.heads.write(group, write)
        else:
            self.samples.write(group, write)

    def order(self) -> list[int]:
        """Group numbers, most frequent first; ties keep creation order."""
        return sorted(range(len(self.counts)), key=self.counts.__getitem__, reverse=True)

    def tokens_used(self) -> int | float:
        return js_number(self.tokens)


def _first_line(error: str) -> str:
    """The literal first line, trimmed, even if blank (the signature skips blank lines)."""
    end = error.find("\n")
    return trim(error if end < 0 else error[:end])


def read_summary(
    read: Callable[[int], bytes], threshold: float = _THRESHOLD
) -> StreamedSummary | None:
    """The summary of the ledger JSON ``read(n)`` returns a piece at a time, or None where
    ``parse_ledger`` must read it (bad or unusual input; see the module's note).
    ``threshold``: in (0, 1] (:class:`PartsGrouper` takes any)."""
    text = _Text(read)
    summary = StreamedSummary(threshold)
    try:
        summary.goal = _read_ledger(text, summary.add)
    except _GiveUp:
        return None
    summary.finish()
    return summary


def _read_ledger(
    text: _Text, add: Callable[[dict[str, Any]], None], others: dict[str, object] | None = None
) -> str:
    """``{"goal": "...", "attempts": [...]}`` with any other keys, each key once; ``add``
    takes each attempt (and raises :class:`_GiveUp` for one it refuses). Returns the goal;
    ``others`` gets the values of the other keys."""
    if text.char() != "{":
        raise _GiveUp
    seen: set[str] = set()
    goal: object = None
    while True:
        key = text.value()
        if type(key) is not str or key in seen or text.char() != ":":
            raise _GiveUp
        seen.add(key)
        if key == "attempts":
            _read_attempts(text, add)
        elif key == "goal":
            goal = text.value()
        elif others is not None:
            others[key] = text.value()
        else:
            text.value()  # any JSON value (validated, then dropped)
        char = text.char()
        if char == "}":
            break
        if char != ",":
            raise _GiveUp
    if text.char() != "" or type(goal) is not str or "attempts" not in seen:
        raise _GiveUp
    return goal


def _read_attempts(text: _Text, add: Callable[[dict[str, Any]], None]) -> None:
    if text.char() != "[":
        raise _GiveUp
    if text.peek() == "]":
        text.char()
        return
    while True:
        for attempt in text.items():
            if type(attempt) is not dict:
                raise _GiveUp
            add(attempt)
        char = text.char()
        if char == "]":
            return
        if char != ",":
            raise _GiveUp


def write_summary_json(summary: StreamedSummary, write: Callable[[str], object]) -> None:
    """``encode_json(summarize_attempts(ledger))`` (``_js.write_json``'s layout, indent 2),
    written a group at a time."""
    fields = (
        ("totalAttempts", summary.total_attempts),
        ("successes", summary.successes),
        ("failures", summary.failures),
        ("noops", summary.noops),
        ("tokensUsed", summary.tokens_used()),
    )
    for i, (key, value) in enumerate(fields):
        write(f"{'{' if i == 0 else ','}\n  {encode_basestring(key)}: {_encode(value, 2, 1)}")
    write(',\n  "distinctErrors": ')
    order = summary.order()
    for i, group in enumerate(order):
        long = summary.long.get(group)
        if long is not None:
            write(f'{"[" if i == 0 else ","}\n    {{\n      "signature": ')
            _write_string(long.signature_pieces(), write)
            write(f',\n      "count": {summary.counts[group]},\n      "sample": ')
            _write_string(long.line_pieces() if long.sample_is_line else iter(()), write)
            write("\n    }")
            continue
        item = {
            "signature": summary.signature(group),
            "count": summary.counts[group],
            "sample": summary.sample(group),
        }
        write(f"{'[' if i == 0 else ','}\n    {_encode(item, 2, 2)}")
    write("\n  ]" if order else "[]")
    write(',\n  "actionsTried": ')
    first = True
    for action in summary.actions:
        write(f"{'[' if first else ','}\n    {_encode(action, 2, 2)}")
        first = False
    write("[]" if first else "\n  ]")
    write("\n}")


def _write_string(pieces: Iterator[str], write: Callable[[str], object]) -> None:
    """A JSON string (as ``encode_basestring``) written a piece at a time."""
    write('"')
    for piece in pieces:
        write(encode_basestring(piece)[1:-1])
    write('"')


def format_streamed_summary(summary: StreamedSummary, write: Callable[[str], object]) -> None:
    """``_summary.format_summary`` of the same ledger, written a line at a time (with no
    trailing newline)."""
    write(
        f"Attempts: {summary.total_attempts}  ({summary.successes} ok \u00b7 "
        f"{summary.failures} failed \u00b7 {summary.noops} no-op)"
    )
    tokens = summary.tokens_used()
    if truthy_number(tokens):  # J7: 0 and NaN hide the line
        write(f"\nTokens used: {format_number(tokens)}")
    order = summary.order()
    if order:
        write("\nDistinct errors (most frequent first):")
        for group in order:
            # The sample apart: one copy less of a long error.
            write(f"\n  ({summary.counts[group]}\u00d7) ")
            summary.write_sample(group, write)
    if len(summary.actions):
        write("\nActions tried:")
        for action in summary.actions:
            # A missing action prints as JavaScript's template does.
            write(f"\n  - {'undefined' if action is None else action}")
