"""Token accounting: what the provider reported and what we estimated, never mixed up.

Two different questions:

- *How much did this run cost?* Only provider-reported numbers (:class:`TokenTotals`); a call
  without a usage block adds nothing and is counted as such.
- *How full is the context now?* The last reported prompt + completion tokens (they cover the
  whole view up to the model's reply) plus an *estimate* (chars / 4) of what was appended since
  (:class:`ContextReading`, with both parts labelled). With no report yet, or after a full
  compaction replaced the view, it is an estimate of the whole view.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import msgspec

from ._transcript import Entry, Message, Transcript

__all__ = [
    "ContextReading",
    "ModelUsage",
    "TokenTotals",
    "UsageTracker",
    "estimate_tokens",
    "estimate_view",
]

CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    """A rough token count (chars / 4, rounded up): used only where nothing was reported."""
    return -(-len(text) // CHARS_PER_TOKEN)


def _message_chars(message: Message) -> int:
    return len(message.content) + sum(
        len(call.name) + len(call.arguments) for call in message.tool_calls
    )


def estimate_view(messages: Sequence[Message]) -> int:
    """Estimated tokens of a list of messages (a few per message for the framing)."""
    return sum(-(-_message_chars(m) // CHARS_PER_TOKEN) + 4 for m in messages)


class ModelUsage(msgspec.Struct, frozen=True, kw_only=True):
    """One model call's usage as the provider reported it."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class TokenTotals(msgspec.Struct, kw_only=True):
    """Provider-reported totals of a run; calls without usage are counted, not guessed."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0
    calls_without_usage: int = 0
    #: Tokens of sub-agents run as child loops: their rounds report one total, not the split.
    delegated_tokens: int = 0

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.completion_tokens + self.delegated_tokens

    def add(self, usage: ModelUsage | None) -> None:
        self.calls += 1
        if usage is None:
            self.calls_without_usage += 1
            return
        self.prompt_tokens += usage.prompt_tokens
        self.completion_tokens += usage.completion_tokens


class ContextReading(msgspec.Struct, frozen=True, kw_only=True):
    """How full the context is: ``reported + estimated``, each part labelled."""

    reported: int
    estimated: int
    window: int
    #: ``reported`` when a provider number is the base, ``estimate`` when it is all guessed.
    basis: Literal["reported", "estimate"]
    #: Changes whenever either part changes: one reading triggers at most one compaction.
    generation: tuple[int, int]

    @property
    def used(self) -> int:
        return self.reported + self.estimated

    @property
    def fraction(self) -> float:
        return self.used / self.window if self.window > 0 else 0.0


class UsageTracker:
    """Where the last report sits in the transcript, and the reading derived from it."""

    def __init__(self) -> None:
        self._reported: int | None = None
        #: Number of transcript entries the last report covers.
        self._covered = 0
        self._generation = 0

    def report(self, usage: ModelUsage | None, *, covered: int) -> None:
        """A model reply's usage, which covers the first ``covered`` transcript entries (the
        view sent plus the reply itself)."""
        if usage is None or usage.prompt_tokens <= 0:
            return  # zero or missing usage is not evidence
        self._reported = usage.total
        self._covered = covered
        self._generation += 1

    def reset(self) -> None:
        """The view was replaced (full compaction): the old report no longer describes it."""
        self._reported = None
        self._generation += 1

    def reading(self, transcript: Transcript, window: int) -> ContextReading:
        entries: Sequence[Entry] = transcript.entries
        if self._reported is None:
            estimated = estimate_view(transcript.model_view())
            return ContextReading(
                reported=0,
                estimated=estimated,
                window=window,
                basis="estimate",
                generation=(self._generation, transcript.revision),
            )
        added = [e.message for e in entries[self._covered :] if not e.excluded]
        return ContextReading(
            reported=self._reported,
            estimated=estimate_view(added) if added else 0,
            window=window,
            basis="reported",
            generation=(self._generation, transcript.revision),
        )
