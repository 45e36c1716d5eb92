"""The conversation an agent keeps: append-only, with flags instead of deletion.

A stored message never changes. Compaction sets flags on an entry: ``truncated`` (micro
compaction; the entry carries a projection, the reduced text the model sees instead) or
``excluded`` (full compaction; the model no longer sees it). An assistant message with tool
calls enters the transcript only together with one result per call, in call order
(:meth:`Transcript.commit_tool_round`), so the model never sees an orphan tool call.

Every change bumps :attr:`Transcript.revision`; a compaction planned on a snapshot commits
only if the revision is still the one it planned on (compare and swap, no lock held across an
await).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import msgspec

from ..errors import AgentError

__all__ = [
    "Entry",
    "Message",
    "Projection",
    "Role",
    "StaleTranscript",
    "ToolCall",
    "Transcript",
    "TranscriptError",
    "format_transcript",
]

Role = Literal["system", "user", "assistant", "tool"]


class TranscriptError(AgentError):
    """A change the transcript refuses: an orphan tool call or result, a bad flag change."""


class StaleTranscript(TranscriptError):
    """A compaction planned on an older revision tried to commit: plan again."""


class ToolCall(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    name: str
    #: The arguments as the model sent them: JSON text (normally an object).
    arguments: str = "{}"


class Message(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    #: For ``tool`` messages: the call this result answers, and the tool's name.
    tool_call_id: str | None = None
    name: str | None = None
    #: For ``tool`` messages: the tool failed (errors are never compacted).
    is_error: bool = False


class Projection(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What the model sees instead of a truncated message (the stored one is unchanged)."""

    content: str | None = None
    #: Per ``tool_call_id``: the compacted arguments JSON of that call.
    arguments: dict[str, str] = msgspec.field(default_factory=dict)


class Entry(msgspec.Struct, kw_only=True, omit_defaults=True):
    message: Message
    #: Inherited, read-only context (a sub-agent's parent view); compaction never touches it.
    ancestor: bool = False
    truncated: bool = False
    excluded: bool = False
    projection: Projection | None = None


def excluded_view(view: Sequence[Entry], injected: Sequence[Message]) -> tuple[Entry, ...]:
    """Full compaction applied to ``view``: every own, non-system entry excluded, then the
    ``injected`` user messages appended; ``view`` itself is unchanged. Pure.

    Raises:
        TranscriptError: an injected message is not a user message.
    """
    for message in injected:
        if message.role != "user":
            raise TranscriptError("full compaction injects user messages only")
    kept = tuple(
        entry
        if entry.ancestor or entry.excluded or entry.message.role == "system"
        else msgspec.structs.replace(entry, excluded=True)
        for entry in view
    )
    return kept + tuple(Entry(message=message) for message in injected)


def _render(entry: Entry) -> Message:
    message, projection = entry.message, entry.projection
    if projection is None:
        return message
    calls = tuple(
        msgspec.structs.replace(call, arguments=projection.arguments[call.id])
        if call.id in projection.arguments
        else call
        for call in message.tool_calls
    )
    content = message.content if projection.content is None else projection.content
    return msgspec.structs.replace(message, content=content, tool_calls=calls)


class Transcript:
    """An agent's conversation: ancestor region first, then the agent's own messages."""

    def __init__(self, ancestors: Iterable[Message] = ()) -> None:
        self._entries: list[Entry] = []
        self.revision = 0
        for message in ancestors:
            self._check_plain(message)
            self._entries.append(Entry(message=message, ancestor=True))

    @property
    def entries(self) -> Sequence[Entry]:
        """Every entry, excluded ones included (read only: use the methods to change it)."""
        return tuple(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def visible(self) -> list[Entry]:
        """The entries the model still sees (not excluded)."""
        return [entry for entry in self._entries if not entry.excluded]

    def model_view(self) -> list[Message]:
        """The messages to send to the model: visible ones, projections applied."""
        return [_render(entry) for entry in self._entries if not entry.excluded]

    def append(self, message: Message) -> None:
        """Append a message that is not part of a tool round (system, user, final answer)."""
        self._check_plain(message)
        self._entries.append(Entry(message=message))
        self.revision += 1

    def commit_tool_round(self, assistant: Message, results: Sequence[Message]) -> None:
        """Append an assistant message with tool calls and one result per call, atomically.

        Raises:
            TranscriptError: the message has no calls, or the results are not exactly one
                ``tool`` message per call in call order.
        """
        if assistant.role != "assistant" or not assistant.tool_calls:
            raise TranscriptError("a tool round starts with an assistant message with tool calls")
        expected = [call.id for call in assistant.tool_calls]
        got = [result.tool_call_id for result in results]
        if any(result.role != "tool" for result in results) or got != expected:
            raise TranscriptError(
                f"a tool round needs one tool result per call in call order: calls {expected}, "
                f"results {got}"
            )
        self._entries.append(Entry(message=assistant))
        self._entries.extend(Entry(message=result) for result in results)
        self.revision += 1

    def apply_projections(self, projections: Mapping[int, Projection], *, revision: int) -> None:
        """Micro compaction's commit: mark entries truncated with what the model sees instead.

        Raises:
            StaleTranscript: the transcript changed since ``revision``.
            TranscriptError: an index names an ancestor or excluded entry.
        """
        self._check_revision(revision)
        for index in projections:
            entry = self._entries[index]
            if entry.ancestor or entry.excluded:
                raise TranscriptError(f"entry {index} is ancestor or excluded: cannot truncate")
        for index, projection in projections.items():
            entry = self._entries[index]
            entry.truncated = True
            entry.projection = projection
        self.revision += 1

    def commit_full(self, injected: Sequence[Message], *, revision: int) -> int:
        """Full compaction's commit: exclude every own, non-system entry, then append
        ``injected`` (the summary and re-read files, all user messages). Returns how many
        entries were excluded.

        Raises:
            StaleTranscript: the transcript changed since ``revision``.
        """
        return self.commit_view(excluded_view(self._entries, injected), revision=revision)

    def commit_view(self, applied: Sequence[Entry], *, revision: int) -> int:
        """Commit a full compaction applied elsewhere (see :func:`excluded_view`): ``applied``
        is this transcript's entries, some now excluded, then the injected ones. Returns how
        many entries it excluded.

        Raises:
            StaleTranscript: the transcript changed since ``revision``.
            TranscriptError: ``applied`` is not this transcript's entries plus new ones.
        """
        self._check_revision(revision)
        known = len(self._entries)
        if len(applied) < known or any(
            new.message != old.message for new, old in zip(applied, self._entries, strict=False)
        ):
            raise TranscriptError("the applied view does not extend this transcript's entries")
        count = 0
        for entry, new in zip(self._entries, applied, strict=False):
            if new.excluded and not entry.excluded:
                entry.excluded = True
                count += 1
        self._entries.extend(Entry(message=new.message) for new in applied[known:])
        self.revision += 1
        return count

    def to_builtins(self) -> list[dict[str, Any]]:
        """Plain data (for the store and ``history``), flags included."""
        encoded: list[dict[str, Any]] = msgspec.to_builtins(self._entries)
        return encoded

    @classmethod
    def from_builtins(cls, data: Iterable[Mapping[str, Any]]) -> Transcript:
        transcript = cls()
        transcript._entries = [msgspec.convert(item, Entry) for item in data]
        return transcript

    def _check_revision(self, revision: int) -> None:
        if revision != self.revision:
            raise StaleTranscript(
                f"transcript is at revision {self.revision}, the plan was made at {revision}"
            )

    @staticmethod
    def _check_plain(message: Message) -> None:
        if message.role == "tool" or message.tool_calls:
            raise TranscriptError(
                "tool calls and tool results enter the transcript only through "
                "commit_tool_round (no orphan tool calls)"
            )


def format_transcript(data: Iterable[Mapping[str, Any]], *, width: int = 400) -> str:
    """A stored transcript (plain data, as in a round record) as readable text: one block per
    message, flags shown, long texts cut to ``width`` chars."""
    lines: list[str] = []
    for entry in Transcript.from_builtins(data).entries:
        message = entry.message
        flags = [f for f in ("ancestor", "truncated", "excluded") if getattr(entry, f)]
        head = message.role + (f" ({message.name}, {message.tool_call_id})" if message.name else "")
        head += " [error]" if message.is_error else ""
        head += f" [{', '.join(flags)}]" if flags else ""
        body = (
            message.content
            if len(message.content) <= width
            else (message.content[:width] + f" [... {len(message.content) - width} more chars]")
        )
        lines.append(f"--- {head}")
        if body:
            lines.append(body)
        lines.extend(
            f"  -> {call.name}({call.arguments[:width]}) [{call.id}]" for call in message.tool_calls
        )
    return "\n".join(lines)
