"""What the breaker's rules read from a ledger, gathered in one walk from the newest attempt.

The rules (docs/ledger.md) need a count, a sum and the trailing failure run's tail: how many of the
newest failures have an error (and an action) similar to the newest one. A walk from the newest
attempt stops comparing at the first mismatch, so a run of distinct errors costs two signatures,
not one per attempt. :func:`read_breaker_facts` gets the same facts straight from ledger JSON:
the attempts array is split without decoding and each attempt is decoded (and so validated) on
its own, kept only as long as the walk needs it, so a huge ledger is never held as objects.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from ._js import as_double, js_number
from ._model import Attempt, parse_ledger
from ._text import calculate_similarity, error_signature

__all__ = ["BreakerFacts", "breaker_facts", "read_breaker_facts"]

_Missing = None | UnsetType


class BreakerFacts(msgspec.Struct, frozen=True, kw_only=True):
    """The ledger as the breaker sees it, for one similarity threshold."""

    iterations: int
    #: Sum of ``tokensUsed`` as doubles, oldest first (missing and null count as 0).
    tokens_used: int | float
    #: Newest attempts whose outcome is exactly ``failure``.
    failure_run: int
    #: Of that run, newest first, how many have an error signature similar to the newest one.
    same_error: int
    #: The newest failure's error signature (empty without a run).
    last_signature: str
    #: Of that run, newest first, how many have an action similar to the newest one.
    same_action: int
    last_action: str | UnsetType | None
    #: The newest attempt's ``tokensUsed``, 0 when absent: the daily budget's delta.
    newest_tokens: int | float


class _Tail:
    """Counts values, newest first, while each is similar enough to the newest one.

    Every value is compared with the newest, not with its neighbour (the reference's rule).
    Results are memoised per distinct text (``memo``, read directly by the hot loop): a long
    run usually repeats one text. ``key`` turns a text into what is compared (a signature).
    """

    __slots__ = ("count", "key", "last", "memo", "open", "threshold")

    def __init__(self, threshold: float, key: Callable[[str], str] | None = None) -> None:
        self.count = 0
        self.open = True
        self.last: str | UnsetType | None = UNSET
        self.memo: dict[str, bool] = {}
        self.threshold = threshold
        self.key = key

    def judge(self, value: str | UnsetType | None) -> bool:
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


def _walk(newest_first: Iterator[Attempt], threshold: float) -> tuple[int, _Tail, _Tail]:
    """Reads attempts up to the first that is not a failure: the run and its two tails."""
    run = 0
    errors = _Tail(threshold, error_signature)
    actions = _Tail(threshold)
    error_memo = errors.memo
    action_memo = actions.memo
    for attempt in newest_first:
        if attempt.outcome != "failure":
            return run, errors, actions
        run += 1
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
            break  # the rest of the run only adds to its length
    for attempt in newest_first:
        if attempt.outcome != "failure":
            break
        run += 1
    return run, errors, actions


def _facts(
    iterations: int, tokens: float, newest: Attempt | None, walk: tuple[int, _Tail, _Tail]
) -> BreakerFacts:
    run, errors, actions = walk
    newest_tokens = newest.tokens_used if newest is not None else None
    return BreakerFacts(
        iterations=iterations,
        tokens_used=js_number(tokens),
        failure_run=run,
        same_error=errors.count,
        last_signature=errors.last if isinstance(errors.last, str) else "",
        same_action=actions.count,
        last_action=actions.last,
        newest_tokens=0 if newest_tokens is None or newest_tokens is UNSET else newest_tokens,
    )


def breaker_facts(attempts: Sequence[Attempt], threshold: float) -> BreakerFacts:
    """The facts of parsed attempts, oldest first."""
    total = 0.0
    for attempt in attempts:
        tokens = attempt.tokens_used
        if tokens is not None and tokens is not UNSET:
            total += as_double(tokens)
    walk = _walk(reversed(attempts), threshold)
    return _facts(len(attempts), total, attempts[-1] if attempts else None, walk)


class _SplitLedger(msgspec.Struct, kw_only=True, rename="camel"):
    """A ledger whose attempts are left undecoded (each a view into the JSON text)."""

    goal: str
    started_at: Any = UNSET
    attempts: list[msgspec.Raw]


_SPLIT = msgspec.json.Decoder(_SplitLedger)
_ATTEMPTS = msgspec.json.Decoder(list[Attempt])
#: Attempts decoded at a time: one decoder call per chunk instead of one per attempt, and
#: never more than a chunk of them held as objects.
_CHUNK = 512


def read_breaker_facts(data: bytes, threshold: float) -> BreakerFacts:
    """The facts of ledger JSON; bad input raises :class:`LedgerError` as parse_ledger does.

    Equal to ``breaker_facts(parse_ledger(text).attempts, threshold)`` for the same bytes
    (read as UTF-8 with bad bytes replaced). Whenever the quick path meets anything it does
    not accept, that slower path is taken, so errors carry the very same message.
    """
    # Each chunk's tokens (0.0 when absent), newest chunk first.
    tokens: list[array[float]] = []
    walking = [True]
    try:
        raws = _SPLIT.decode(data).attempts
        newest_first = _decode_newest_first(raws, tokens, walking)
        walk = _walk(newest_first, threshold)
        walking[0] = False
        for _ in newest_first:
            pass  # older attempts are still decoded: validated, and their tokens summed
    except msgspec.MsgspecError:
        # Raises the reference's message; also serves text that is only valid once bad
        # UTF-8 bytes are replaced.
        ledger = parse_ledger(data.decode("utf-8", errors="replace"))
        return breaker_facts(ledger.attempts, threshold)
    total = 0.0
    for chunk in reversed(tokens):  # oldest first: double addition is not associative
        for value in chunk:
            total += value
    newest = _ATTEMPTS.decode(b"[" + raws[-1] + b"]")[0] if raws else None
    return _facts(len(raws), total, newest, walk)


def _decode_newest_first(
    raws: list[msgspec.Raw], tokens: list[array[float]], walking: list[bool]
) -> Iterator[Attempt]:
    """Decodes the attempts a chunk at a time from the newest, recording each chunk's tokens;
    yields them one by one, newest first, while ``walking[0]`` holds.

    Adding 0.0 to a sum that starts at +0.0 changes nothing, as skipping an attempt does.
    """
    for end in range(len(raws), 0, -_CHUNK):
        attempts = _ATTEMPTS.decode(b"[" + b",".join(raws[max(0, end - _CHUNK) : end]) + b"]")
        tokens.append(array("d", [_tokens(attempt.tokens_used) for attempt in attempts]))
        if walking[0]:
            yield from reversed(attempts)
        else:
            yield attempts[0]  # one step per chunk, just to go on


def _tokens(value: int | float | UnsetType | None) -> float:
    return 0.0 if value is None or value is UNSET else as_double(value)
