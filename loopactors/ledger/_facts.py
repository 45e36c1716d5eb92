"""What the breaker's rules read from a ledger, gathered in one walk from the newest attempt.

The rules (docs/ledger.md) need a count, a sum and the trailing failure run's tail: how many of
the newest failures have an error (and an action) similar to the newest one. A walk from the
newest attempt stops comparing at the first mismatch, so a run of distinct errors costs two
signatures, not one per attempt, and a run of one repeated error is judged a chunk at a time
from the set of its distinct texts. :func:`read_breaker_facts` gets the same facts straight
from ledger JSON: a small ledger with the standard library's decoder (so the everyday call
loads no msgspec), a large one with ``_facts_read``'s chunked msgspec reader.

Nothing here imports msgspec: a quick path only ever accepts input that the msgspec path
(:func:`parse_ledger`) accepts with the same values, and hands anything else to it, so every
error carries the very same message.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter

from ._js import as_double, js_number
from ._text import calculate_similarity, error_signature

TYPE_CHECKING = False  # typing itself is not loaded by ``context --check``
if TYPE_CHECKING:
    from typing import Any, Protocol

    class AttemptFields(Protocol):
        """What the walk reads of an attempt (an ``Attempt`` Struct is one)."""

        @property
        def action(self) -> object: ...
        @property
        def outcome(self) -> object: ...
        @property
        def error(self) -> object: ...
        @property
        def tokens_used(self) -> object: ...


__all__ = ["ABSENT", "BreakerFacts", "breaker_facts", "read_breaker_facts"]


class _Absent:
    """A key the attempt does not have (``msgspec.UNSET`` in a decoded Struct)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ABSENT"

    def __str__(self) -> str:
        return "undefined"  # String(undefined), as a reason quotes it


ABSENT = _Absent()


class BreakerFacts:
    """The ledger as the breaker sees it, for one similarity threshold."""

    __slots__ = (
        "failure_run",
        "iterations",
        "last_action",
        "last_signature",
        "newest_tokens",
        "same_action",
        "same_error",
        "tokens_used",
    )

    def __init__(
        self,
        *,
        iterations: int,
        tokens_used: int | float,
        failure_run: int,
        same_error: int,
        last_signature: str,
        same_action: int,
        last_action: str | _Absent | None,
        newest_tokens: int | float,
    ) -> None:
        self.iterations = iterations
        #: Sum of ``tokensUsed`` as doubles, oldest first (missing and null count as 0).
        self.tokens_used = tokens_used
        #: Newest attempts whose outcome is exactly ``failure``.
        self.failure_run = failure_run
        #: Of that run, newest first, how many have an error signature similar to the newest.
        self.same_error = same_error
        #: The newest failure's error signature (empty without a run).
        self.last_signature = last_signature
        #: Of that run, newest first, how many have an action similar to the newest one.
        self.same_action = same_action
        #: The newest failure's action (:data:`ABSENT` when it has none).
        self.last_action = last_action
        #: The newest attempt's ``tokensUsed``, 0 when absent: the daily budget's delta.
        self.newest_tokens = newest_tokens

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BreakerFacts):
            return NotImplemented
        return self._values() == other._values()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"BreakerFacts({fields})"


class _Tail:
    """Counts values, newest first, while each is similar enough to the newest one.

    Every value is compared with the newest, not with its neighbour (the reference's rule).
    Results are memoised per distinct text (``memo``, read directly by the walk): a long run
    usually repeats one text. ``key`` turns a text into what is compared (a signature).
    """

    __slots__ = ("count", "key", "last", "memo", "open", "threshold")

    def __init__(self, threshold: float, key: Callable[[str], str] | None = None) -> None:
        self.count = 0
        self.open = True
        self.last: object = ABSENT
        self.memo: dict[str, bool] = {}
        self.threshold = threshold
        self.key = key

    def judge(self, value: object) -> bool:
        """Whether ``value`` continues the tail (the first value always does)."""
        if isinstance(value, str):
            text = value
            if self.key is not None:
                value = self.key(value)
        first = self.count == 0 and self.open
        if first:
            self.last = value
        last = self.last
        if isinstance(value, str) and isinstance(last, str):
            similar = first or calculate_similarity(value, last) >= self.threshold
            self.memo[text] = similar
            return similar
        # Two missing values are identical; the reference crashes comparing a missing value
        # with a string (a plain bug), here that simply ends the walk.
        return value is last


_OUTCOME = attrgetter("outcome")
_ERROR = attrgetter("error")


class _Walk:
    """The trailing failure run and its two tails, fed newest first a chunk at a time."""

    __slots__ = ("actions", "done", "errors", "run")

    def __init__(self, threshold: float) -> None:
        self.run = 0
        self.done = False  # the run has ended: later (older) chunks change nothing
        self.errors = _Tail(threshold, error_signature)
        self.actions = _Tail(threshold)

    def feed(self, newest_first: Sequence[AttemptFields]) -> None:
        if self.done:
            return
        chunk = newest_first
        outcomes = list(map(_OUTCOME, chunk))
        if outcomes.count("failure") != len(outcomes):
            end = next(i for i, outcome in enumerate(outcomes) if outcome != "failure")
            chunk = chunk[:end]
            self.done = True
            if not chunk:
                return
        errors, actions = self.errors, self.actions
        if not actions.open and (not errors.open or self._all_errors_similar(chunk)):
            # The common long run: only its length (and the error count) grow.
            self.run += len(chunk)
            if errors.open:
                errors.count += len(chunk)
            return
        error_memo, action_memo = errors.memo, actions.memo
        for attempt in chunk:
            if errors.open:
                error = attempt.error if isinstance(attempt.error, str) else ""
                similar = error_memo.get(error)
                if similar is None:
                    similar = errors.judge(error)
                if similar:
                    errors.count += 1
                else:
                    errors.open = False
            if actions.open:
                action = attempt.action
                similar = action_memo.get(action) if isinstance(action, str) else None
                if similar is None:
                    similar = actions.judge(action)
                if similar:
                    actions.count += 1
                else:
                    actions.open = False
            elif not errors.open:
                break  # the rest of the chunk only adds to the run's length
        self.run += len(chunk)

    def _all_errors_similar(self, chunk: Sequence[AttemptFields]) -> bool:
        """Whether every error of the chunk continues the error tail (judged per distinct text,
        each against the newest, so the order does not matter); only once the tail has begun.
        """
        errors = self.errors
        if not errors.count:
            return False
        memo = errors.memo
        texts = list(map(_ERROR, chunk))
        if memo.get(texts[0]) and texts.count(texts[0]) == len(texts):
            return True  # one repeated text, already judged similar
        for error in set(texts):
            text = error if isinstance(error, str) else ""
            similar = memo.get(text)
            if similar is None:
                similar = errors.judge(text)
            if not similar:
                return False
        return True


def _token(value: object) -> float:
    """An attempt's tokens as the double JavaScript adds (0.0 when absent or null)."""
    return as_double(value) if isinstance(value, int | float) else 0.0


def _facts(iterations: int, tokens: float, newest_tokens: object, walk: _Walk) -> BreakerFacts:
    last_action = walk.actions.last
    return BreakerFacts(
        iterations=iterations,
        tokens_used=js_number(tokens),
        failure_run=walk.run,
        same_error=walk.errors.count,
        last_signature=walk.errors.last if isinstance(walk.errors.last, str) else "",
        same_action=walk.actions.count,
        last_action=last_action if last_action is None or isinstance(last_action, str) else ABSENT,
        newest_tokens=newest_tokens if isinstance(newest_tokens, int | float) else 0,
    )


def breaker_facts(attempts: Sequence[AttemptFields], threshold: float) -> BreakerFacts:
    """The facts of parsed attempts, oldest first."""
    total = 0.0
    for attempt in attempts:
        total += _token(attempt.tokens_used)  # adding 0.0 to a sum from +0.0 changes nothing
    walk = _Walk(threshold)
    walk.feed(attempts[::-1])
    newest = attempts[-1].tokens_used if attempts else None
    return _facts(len(attempts), total, newest, walk)


#: Up to this size a ledger is read with the standard library's decoder: loading msgspec
#: costs more than decoding a few hundred attempts (docs/benchmarks.md, start-up).
SMALL_LEDGER_BYTES = 64 * 1024


def read_breaker_facts(data: bytes, threshold: float) -> BreakerFacts:
    """The facts of ledger JSON; bad input raises :class:`LedgerError` as parse_ledger does.

    Equal to ``breaker_facts(parse_ledger(text).attempts, threshold)`` for the same bytes
    (read as UTF-8 with bad bytes replaced).
    """
    attempts = _small_attempts(data) if len(data) <= SMALL_LEDGER_BYTES else None
    if attempts is not None:
        return breaker_facts(attempts, threshold)
    from ._facts_read import read_large_facts  # noqa: PLC0415 - loads msgspec

    return read_large_facts(data, threshold)


class _Fields:
    """One attempt of the standard library's decoding: what the walk reads."""

    __slots__ = ("action", "error", "outcome", "tokens_used")

    def __init__(self, action: object, outcome: object, error: object, tokens: object) -> None:
        self.action = action
        self.outcome = outcome
        self.error = error
        self.tokens_used = tokens


class _Refused(Exception):
    """Input the quick path leaves to msgspec."""


def _refuse(_: str) -> Any:
    raise _Refused  # NaN, Infinity, -Infinity: not JSON


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _Refused  # msgspec: "Number out of range"
    return value


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        raise _Refused  # msgspec validates every duplicate; let it
    return value


_TEXT_KEYS = ("action", "outcome", "error")
_NUMBER_KEYS = ("tokensUsed", "repeated")


def _small_attempts(data: bytes) -> list[_Fields] | None:
    """The attempts of a ledger that msgspec would accept, or None to leave it to msgspec.

    Accepts exactly the shape of ``_model.Ledger``: an object with a string ``goal`` and an
    ``attempts`` array of objects whose ``action``/``outcome``/``error`` are strings or null
    and whose ``tokensUsed``/``repeated`` are numbers (not booleans) or null. Escaped
    surrogates (which msgspec refuses unpaired), duplicate keys, non-finite numbers and bad
    UTF-8 are all left to msgspec.
    """
    if b"\\ud" in data or b"\\uD" in data:
        return None
    try:
        ledger = json.loads(
            data.decode("utf-8"),
            parse_constant=_refuse,
            parse_float=_finite,
            object_pairs_hook=_unique,
        )
    except (ValueError, RecursionError, _Refused):  # UnicodeDecodeError is a ValueError
        return None
    if type(ledger) is not dict or type(ledger.get("goal")) is not str:
        return None
    items = ledger.get("attempts")
    if type(items) is not list:
        return None
    return _checked(items)


def _checked(items: Iterable[object]) -> list[_Fields] | None:
    attempts = []
    for item in items:
        if type(item) is not dict:
            return None
        for key in _TEXT_KEYS:
            value = item.get(key)
            if value is not None and type(value) is not str:
                return None
        for key in _NUMBER_KEYS:
            value = item.get(key)
            if value is not None and type(value) is not int and type(value) is not float:
                return None
        get = item.get
        attempts.append(
            _Fields(
                get("action", ABSENT),
                get("outcome", ABSENT),
                get("error", ABSENT),
                get("tokensUsed", ABSENT),
            )
        )
    return attempts
