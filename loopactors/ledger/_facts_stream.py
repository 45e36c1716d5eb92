"""The breaker's facts read a block at a time, with ``--summary``'s reader (``_summary_read``).

For a ledger holding a huge attempt: ``_facts_read`` holds the file, the attempt's bytes and
its decoded error at once (~4x the file on one 20 MB error). Here the text is read 64 KiB at
a time, and of an error longer than 64K characters only its first line that is not blank is
kept (all its signature comes from); the trailing failure run is kept as runs of identical
(error, action) pairs, and the newest failure's signature is compared through its trigrams,
taken a stretch at a time. The facts are those of the parsed ledger (``_facts.breaker_facts``).
"""

from __future__ import annotations

from ._facts import ABSENT, BreakerFacts, _Tail, _token
from ._js import js_number
from ._summary_read import _NUMBER, _TEXT, _GiveUp, _LongError, _read_ledger, _Text
from ._text import calculate_similarity, error_signature, jaccard, trigrams, trigrams_of_pieces

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["LongSignature", "read_streamed_facts"]


class LongSignature:
    """The signature of an error too long to hold twice: made from its line when printed
    (the stagnation reason quotes it), never held beside the line otherwise."""

    __slots__ = ("error",)

    def __init__(self, error: _LongError) -> None:
        self.error = error

    def __str__(self) -> str:
        return "".join(self.error.signature_pieces())

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LongSignature):
            other = str(other)
        return isinstance(other, str) and str(self) == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"LongSignature({len(self.error.line)} bytes)"


class _StreamedFacts:
    """Attempts as they come: counts, tokens oldest first, and the trailing failure run."""

    __slots__ = ("iterations", "newest", "run", "tokens")

    def __init__(self) -> None:
        self.iterations = 0
        self.tokens = 0.0
        self.newest: object = ABSENT
        #: The trailing failure run, oldest first: ``[error, action, count]`` for each stretch
        #: of identical attempts (a long run usually repeats one error).
        self.run: list[list[Any]] = []

    def add(self, attempt: dict[str, Any]) -> None:
        """One attempt, validated as ``_summary_read.StreamedSummary.add`` does."""
        get = attempt.get
        action, outcome, error = get("action", ABSENT), get("outcome"), get("error")
        tokens = get("tokensUsed", ABSENT)
        if (
            (action is not ABSENT and type(action) not in _TEXT)
            or type(outcome) not in _TEXT
            or (type(error) not in _TEXT and type(error) is not _LongError)
            or (tokens is not ABSENT and type(tokens) not in _NUMBER)
            or type(get("repeated")) not in _NUMBER
        ):
            raise _GiveUp
        self.iterations += 1
        self.tokens += _token(tokens)  # adding 0.0 to a sum from +0.0 changes nothing
        self.newest = tokens
        run = self.run
        if outcome != "failure":
            run.clear()
            return
        if type(error) is not _LongError and type(error) is not str:
            error = ""  # the walk reads a missing or null error as ""
        if run:
            last = run[-1]
            if (
                type(error) is str
                and type(last[0]) is str
                and last[0] == error
                and _same_action(last[1], action)
            ):
                last[2] += 1
                return
        run.append([error, action, 1])

    def facts(self, threshold: float) -> BreakerFacts:
        failure_run = same_error = same_action = 0
        last_signature: str | LongSignature = ""
        actions = _Tail(threshold)
        errors = _ErrorTail(threshold)
        errors_open = True
        for error, action, count in reversed(self.run):
            failure_run += count
            if errors_open:
                if errors.judge(error):
                    same_error += count
                else:
                    errors_open = False
            if actions.open:
                # Identical attempts: the rest of the stretch is judged as its first.
                if actions.judge(action):
                    same_action += count
                else:
                    actions.open = False
                actions.count = same_action
        if errors.signature is not None:
            last_signature = errors.signature
        last_action = actions.last
        newest = self.newest
        return BreakerFacts(
            iterations=self.iterations,
            tokens_used=js_number(self.tokens),
            failure_run=failure_run,
            same_error=same_error,
            last_signature=last_signature,  # type: ignore[arg-type]
            same_action=same_action,
            last_action=last_action
            if last_action is None or isinstance(last_action, str)
            else ABSENT,
            newest_tokens=newest if isinstance(newest, int | float) else 0,
        )


def _same_action(a: object, b: object) -> bool:
    return a is b or (type(a) is str and type(b) is str and a == b)


class _ErrorTail:
    """``_facts._Tail`` of error signatures, where an error may be a :class:`_LongError`
    (compared through its trigrams: ``calculate_similarity`` is their Jaccard index)."""

    __slots__ = ("grams", "memo", "signature", "threshold")

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self.signature: str | LongSignature | None = None
        self.grams: frozenset[str] | None = None
        self.memo: dict[str, bool] = {}

    def judge(self, error: str | _LongError) -> bool:
        if self.signature is None:  # the newest failure: the first always continues
            if type(error) is _LongError:
                self.signature = LongSignature(error)
                self.grams = trigrams_of_pieces(error.signature_pieces())
            else:
                assert type(error) is str
                self.signature = error_signature(error)
            return True
        if type(error) is _LongError:
            return jaccard(trigrams_of_pieces(error.signature_pieces()), self._grams()) >= (
                self.threshold
            )
        assert type(error) is str
        similar = self.memo.get(error)
        if similar is None:
            sig = error_signature(error)
            last = self.signature
            if type(last) is str:
                similar = calculate_similarity(sig, last) >= self.threshold
            else:
                similar = jaccard(trigrams(sig), self._grams()) >= self.threshold
            self.memo[error] = similar
        return similar

    def _grams(self) -> frozenset[str]:
        if self.grams is None:
            assert type(self.signature) is str
            self.grams = trigrams(self.signature)
        return self.grams


def read_streamed_facts(read: Callable[[int], bytes], threshold: float) -> BreakerFacts | None:
    """The breaker's facts of the ledger JSON ``read(n)`` returns a piece at a time, or None
    where ``parse_ledger`` must read it (as :func:`_summary_read.read_summary`)."""
    streamed = _StreamedFacts()
    try:
        _read_ledger(_Text(read), streamed.add)
    except _GiveUp:
        return None
    return streamed.facts(threshold)
