"""Full compaction, the pure part: the summary request, reading the reply, what is injected.

The model is asked for a summary of the visible conversation (micro projections applied, no
tools). Its reply's ``<analysis>`` blocks are dropped and the ``<summary>`` body kept; an empty
or unclosed summary is a failure that leaves history alone. On success the agent's own older
messages are excluded and one user message is appended: the summary *then* the continuation
hint, wrapped as a system reminder, followed by up to 5 recently read files (re-read from disk,
each within a token cap, the list cut at the first file that overflows the total budget).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence

from ..errors import AgentError
from ._compaction import CompactionConfig
from ._transcript import Entry, Message
from ._usage import CHARS_PER_TOKEN

__all__ = [
    "CONTINUATION_HINT",
    "SummaryFailed",
    "injected_messages",
    "parse_summary",
    "recently_read_paths",
    "summary_request",
]

CONTINUATION_HINT = "[Context has been compacted. Continue working based on the summary above.]"
SUMMARY_PREFIX = (
    "This session continues from a previous conversation that ran out of context. "
    "The summary below covers the earlier portion of the conversation."
)
_SYSTEM = (
    "You summarise a coding agent's conversation so that the agent can continue the work "
    "without it. Keep: the user's requests and constraints, decisions taken, files read or "
    "changed and why, commands run and their outcome, errors and how they were fixed, and "
    "what remains to do. Think in <analysis>...</analysis> if you need to, then write the "
    "summary inside <summary>...</summary>."
)
_LINE_CAP = 2000
_ANALYSIS = re.compile(r"<analysis>.*?</analysis>", re.DOTALL)
_SUMMARY = re.compile(r"<summary>(.*?)</summary>", re.DOTALL)


class SummaryFailed(AgentError):
    """The summary reply was empty, unclosed or unusable; history was not touched."""


def _line(message: Message) -> str:
    if message.role == "tool":
        state = "error" if message.is_error else "ok"
        body = f"[ToolResult:{message.tool_call_id}][{state}] {message.content}"
    elif message.role == "assistant":
        calls = " ".join(f"[ToolCall:{c.name} {c.arguments}]" for c in message.tool_calls)
        body = f"[Assistant] {message.content} {calls}".rstrip()
    else:
        body = f"[{message.role.capitalize()}] {message.content}"
    return body if len(body) <= _LINE_CAP else body[:_LINE_CAP] + " [...]"


def summary_request(view: Sequence[Message], config: CompactionConfig) -> list[Message]:
    """The messages of the summary call (sent without tools)."""
    conversation = "\n".join(_line(m) for m in view if m.role != "system")
    target = config.summary_max_tokens // 2
    return [
        Message(role="system", content=_SYSTEM),
        Message(
            role="user",
            content=(
                f"Conversation so far:\n\n{conversation}\n\nSummarise it in at most about "
                f"{target} tokens, inside <summary>...</summary>."
            ),
        ),
    ]


def parse_summary(reply: str) -> str:
    """The summary body of a reply.

    Raises:
        SummaryFailed: empty reply, an opened but unclosed ``<summary>``, or an empty body.
    """
    text = _ANALYSIS.sub("", reply)
    found = _SUMMARY.search(text)
    if found is not None:
        text = found.group(1)
    elif "<summary>" in text:
        raise SummaryFailed("the summary reply opened <summary> but never closed it")
    text = re.sub(r"\n{3,}", "\n\n", text).strip()
    if not text:
        raise SummaryFailed("the summary reply was empty")
    return text


def recently_read_paths(entries: Sequence[Entry], read_tool: str = "read") -> list[str]:
    """Paths of ``read`` calls still visible, newest first, without repeats."""
    paths: list[str] = []
    for entry in reversed(entries):
        if entry.excluded:
            continue
        for call in reversed(entry.message.tool_calls):
            if call.name != read_tool:
                continue
            try:
                arguments = json.loads(call.arguments)
            except ValueError:
                continue
            path = arguments.get("path") if isinstance(arguments, dict) else None
            if isinstance(path, str) and path not in paths:
                paths.append(path)
    return paths


def injected_messages(
    summary: str,
    paths: Sequence[str],
    read: Callable[[str], str | None],
    config: CompactionConfig,
) -> list[Message]:
    """The summary message and the re-read files (``read`` returns None when unreadable)."""
    messages = [
        Message(
            role="user",
            content=(
                f"<system-reminder>\n{SUMMARY_PREFIX}\n\n{summary}\n\n{CONTINUATION_HINT}\n"
                "</system-reminder>"
            ),
        )
    ]
    budget = config.reinject_budget_tokens * CHARS_PER_TOKEN
    cap = config.reinject_tokens_per_file * CHARS_PER_TOKEN
    for path in paths[: config.reinject_files]:
        text = read(path)
        if text is None:
            continue
        text = text[:cap]
        if len(text) > budget:
            break
        budget -= len(text)
        messages.append(
            Message(
                role="user",
                content=f"<system-reminder>\n[Recently read file: {path}]\n{text}\n"
                "</system-reminder>",
            )
        )
    return messages
