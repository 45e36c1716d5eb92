"""Context compaction, the pure part: when to compact, and what micro compaction changes.

Decision (:func:`decide`), on a :class:`ContextReading` of the context window:

1. ``full_failures >= max_full_failures``: at or above the full threshold that is terminal
   (:class:`CompactRetriesExhausted`); below it, skip.
2. ``force`` (a manual compaction): full.
3. below ``micro_threshold`` (0.75): skip.
4. plan micro. Nothing to micro-compact: full at or above ``full_threshold`` (0.95), else skip.
5. the micro plan's *estimated* saving reaches the reclaim target: micro.
6. otherwise micro cannot reclaim enough: micro, then full.

The reclaim target is ``max(used - target, 2% of the window)`` with
``target = min(micro_threshold * window, window - output_reserve)``: micro is "enough" when it
brings the context back under the micro threshold and below the reserve for the reply. At or
above the full threshold the target cannot be met by micro alone unless it saves that much.

Micro compaction (:func:`plan_micro`, no model call) works on the agent's own visible entries
grouped into turn groups (a group starts at each user message); the newest ``stale_groups`` (3)
groups are untouched. In older groups, per ``tool_call_id``: calls of protected tools
(AskUserQuestion, goal, TodoWrite by default; compared case-insensitively) are untouched, input
and result both; otherwise top-level string fields of a call's JSON-object arguments longer
than ``field_threshold`` (500) chars are cut to head 350 + tail 100 with a note (the JSON stays
an object with the same keys), and successful results longer than that are cut the same way.
Error results are kept whole (they carry the diagnostics). Already truncated entries are skipped.

Applying a micro plan (:func:`apply_micro`) is pure too: plan and entries in, projected entries
out. Inside the runtime the ContextBuilder actor runs it; the agent commits the result against the
revision it planned on.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Literal

import msgspec

from ..errors import AgentError
from ._transcript import (
    Entry,
    Message,
    Projection,
    Transcript,
    TranscriptError,
    excluded_view,
)
from ._usage import CHARS_PER_TOKEN, ContextReading

__all__ = [
    "CompactBudgetUnrecovered",
    "CompactRetriesExhausted",
    "CompactionAction",
    "CompactionConfig",
    "Decision",
    "MicroPlan",
    "apply_micro",
    "cut_middle",
    "decide",
    "plan_micro",
    "turn_groups",
]

CompactionAction = Literal["skip", "micro", "full", "micro_then_full"]


class CompactBudgetUnrecovered(AgentError):
    """Full compactions without new work in between did not bring the provider-reported usage
    under the full threshold: the context cannot be made to fit."""


class CompactRetriesExhausted(AgentError):
    """Full compaction failed ``max_full_failures`` times in a row and the context is still
    at or above the full threshold: the run cannot go on without losing context."""


class CompactionConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Thresholds and sizes; every number is configurable."""

    context_window: int = 128_000
    micro_threshold: float = 0.75
    full_threshold: float = 0.95
    #: Tokens kept free for the model's reply.
    output_reserve: int = 8192
    #: Newest turn groups micro compaction never touches.
    stale_groups: int = 3
    protected_tools: tuple[str, ...] = ("AskUserQuestion", "goal", "TodoWrite")
    field_threshold: int = 500
    keep_head: int = 350
    keep_tail: int = 100
    max_full_failures: int = 3
    #: Full compaction: recently read files put back after the summary.
    reinject_files: int = 5
    reinject_tokens_per_file: int = 5000
    reinject_budget_tokens: int = 25_000
    summary_max_tokens: int = 16_000

    def __post_init__(self) -> None:
        if not 0 < self.micro_threshold <= self.full_threshold:
            raise AgentError(
                "compaction thresholds need 0 < micro_threshold <= full_threshold, got "
                f"{self.micro_threshold} and {self.full_threshold}"
            )
        if self.context_window <= 0 or self.keep_head + self.keep_tail >= self.field_threshold:
            raise AgentError(
                "compaction needs context_window > 0 and keep_head + keep_tail < field_threshold"
            )


class MicroPlan(msgspec.Struct, frozen=True, kw_only=True):
    """Projections by entry index, planned at ``revision``."""

    revision: int
    projections: dict[int, Projection]
    #: An estimate (chars / 4 of what the projections remove), never a provider number.
    estimated_tokens_saved: int


class FullPlan(msgspec.Struct, frozen=True, kw_only=True):
    """A full compaction, planned at ``revision``: the summary and re-read files to inject
    (user messages) after every own, non-system message is excluded."""

    revision: int
    injected: tuple[Message, ...]


class Decision(msgspec.Struct, frozen=True, kw_only=True):
    action: CompactionAction
    reason: str
    reclaim_target: int = 0
    micro: MicroPlan | None = None


def cut_middle(text: str, head: int, tail: int) -> str:
    """Head and tail of ``text`` with a note saying how much was left out (char-safe)."""
    omitted = len(text) - head - tail
    return f"{text[:head]}\n[... {omitted} chars omitted by context compaction ...]\n" + (
        text[-tail:] if tail else ""
    )


def turn_groups(entries: Sequence[Entry]) -> list[list[int]]:
    """Indices of own, visible entries grouped by turn (each group starts at a user message);
    entries before the first user message belong to no group."""
    groups: list[list[int]] = []
    for index, entry in enumerate(entries):
        if entry.ancestor or entry.excluded:
            continue
        if entry.message.role == "user":
            groups.append([index])
        elif groups and entry.message.role != "system":
            groups[-1].append(index)
    return groups


def _compact_arguments(arguments: str, config: CompactionConfig) -> str | None:
    """Shorter arguments JSON, or None when there is nothing to shorten (or it is not an
    object): only top-level string fields, so the shape the model sees stays the same."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    changed = False
    for key in sorted(value):
        field = value[key]
        if isinstance(field, str) and len(field) > config.field_threshold:
            value[key] = cut_middle(field, config.keep_head, config.keep_tail)
            changed = True
    return json.dumps(value, ensure_ascii=False) if changed else None


def plan_micro(transcript: Transcript, config: CompactionConfig) -> MicroPlan:
    entries = transcript.entries
    groups = turn_groups(entries)
    old = groups[: max(0, len(groups) - config.stale_groups)]
    protected = {name.casefold() for name in config.protected_tools}
    names: dict[str, str] = {}
    projections: dict[int, Projection] = {}
    saved_chars = 0
    for index in (i for group in old for i in group):
        entry = entries[index]
        message = entry.message
        for call in message.tool_calls:
            names[call.id] = call.name
        if entry.truncated:
            continue
        if message.role == "assistant" and message.tool_calls:
            arguments: dict[str, str] = {}
            for call in message.tool_calls:
                if call.name.casefold() in protected:
                    continue
                shorter = _compact_arguments(call.arguments, config)
                if shorter is not None and len(shorter) < len(call.arguments):
                    arguments[call.id] = shorter
                    saved_chars += len(call.arguments) - len(shorter)
            if arguments:
                projections[index] = Projection(arguments=arguments)
        elif message.role == "tool" and not message.is_error:
            name = names.get(message.tool_call_id or "", message.name or "")
            if name.casefold() in protected or len(message.content) <= config.field_threshold:
                continue
            content = cut_middle(message.content, config.keep_head, config.keep_tail)
            projections[index] = Projection(content=content)
            saved_chars += len(message.content) - len(content)
    return MicroPlan(
        revision=transcript.revision,
        projections=projections,
        estimated_tokens_saved=saved_chars // CHARS_PER_TOKEN,
    )


def apply_micro(view: Sequence[Entry], plan: MicroPlan) -> tuple[Entry, ...]:
    """``view`` (the entries the plan was made on) with the plan applied: the planned entries
    come back as new entries, truncated and carrying their projection; ``view`` is unchanged.

    Raises:
        TranscriptError: an index is outside ``view`` or names an ancestor or excluded entry.
    """
    applied = list(view)
    for index, projection in plan.projections.items():
        if not 0 <= index < len(view):
            raise TranscriptError(f"entry {index} is not in a view of {len(view)} entries")
        entry = view[index]
        if entry.ancestor or entry.excluded:
            raise TranscriptError(f"entry {index} is ancestor or excluded: cannot truncate")
        applied[index] = msgspec.structs.replace(entry, truncated=True, projection=projection)
    return tuple(applied)


def apply_full(view: Sequence[Entry], plan: FullPlan) -> tuple[Entry, ...]:
    """``view`` with the full compaction ``plan`` applied (see :func:`excluded_view`)."""
    return excluded_view(view, plan.injected)


def apply_plan(view: Sequence[Entry], plan: MicroPlan | FullPlan) -> tuple[Entry, ...]:
    """Either kind of plan applied to ``view``; pure."""
    return apply_micro(view, plan) if isinstance(plan, MicroPlan) else apply_full(view, plan)


def decide(
    transcript: Transcript,
    reading: ContextReading,
    config: CompactionConfig,
    *,
    full_failures: int = 0,
    force: bool = False,
) -> Decision:
    """What compaction to run now; see the module docstring for the rules, in order."""
    window = config.context_window
    pct = reading.used / window
    if full_failures >= config.max_full_failures:
        if pct >= config.full_threshold:
            raise CompactRetriesExhausted(
                f"full compaction failed {full_failures} times in a row and the context is at "
                f"{pct:.0%} of {window} tokens (full threshold {config.full_threshold:.0%})"
            )
        return Decision(action="skip", reason=f"{full_failures} full compactions failed")
    if force:
        return Decision(action="full", reason="forced")
    if pct < config.micro_threshold:
        return Decision(action="skip", reason=f"context at {pct:.0%}, below micro threshold")
    target = min(int(config.micro_threshold * window), window - config.output_reserve)
    reclaim = max(reading.used - target, -(-window * 2 // 100))
    micro = plan_micro(transcript, config)
    if not micro.projections:
        if pct >= config.full_threshold:
            return Decision(
                action="full", reason="nothing to micro-compact", reclaim_target=reclaim
            )
        return Decision(action="skip", reason="nothing to micro-compact", reclaim_target=reclaim)
    if micro.estimated_tokens_saved >= reclaim:
        return Decision(
            action="micro", reason="micro reclaims enough", reclaim_target=reclaim, micro=micro
        )
    return Decision(
        action="micro_then_full",
        reason=f"micro reclaims ~{micro.estimated_tokens_saved} of {reclaim} tokens needed",
        reclaim_target=reclaim,
        micro=micro,
    )
