"""The compaction planner, one test per rule (no event loop, no model)."""

from __future__ import annotations

import json

import msgspec
import pytest

from loopactors.agent import (
    CompactionConfig,
    CompactRetriesExhausted,
    ContextReading,
    Entry,
    Message,
    MicroPlan,
    ModelUsage,
    Projection,
    ToolCall,
    Transcript,
    TranscriptError,
    UsageTracker,
    apply_micro,
    decide,
    plan_micro,
)
from loopactors.agent._compaction import cut_middle, turn_groups
from loopactors.agent._summary import (
    CONTINUATION_HINT,
    SummaryFailed,
    injected_messages,
    parse_summary,
    recently_read_paths,
    summary_request,
)
from loopactors.errors import AgentError

CONFIG = CompactionConfig(context_window=10_000, output_reserve=500)
LONG = "x" * 1000


def add_turn(
    transcript: Transcript,
    n: int,
    *,
    tool: str = "read",
    result: str = LONG,
    arguments: dict[str, object] | None = None,
    error: bool = False,
) -> None:
    transcript.append(Message(role="user", content=f"turn {n}"))
    call = ToolCall(id=f"c{n}", name=tool, arguments=json.dumps(arguments or {"path": f"f{n}"}))
    transcript.commit_tool_round(
        Message(role="assistant", tool_calls=(call,)),
        [Message(role="tool", tool_call_id=f"c{n}", name=tool, content=result, is_error=error)],
    )
    transcript.append(Message(role="assistant", content=f"done {n}"))


def reading(used: int, window: int = 10_000) -> ContextReading:
    return ContextReading(
        reported=used, estimated=0, window=window, basis="reported", generation=(1, 1)
    )


def test_turn_groups_start_at_user_messages_and_skip_ancestors() -> None:
    transcript = Transcript([Message(role="user", content="inherited")])
    transcript.append(Message(role="system", content="sys"))
    add_turn(transcript, 1)
    add_turn(transcript, 2)
    assert turn_groups(transcript.entries) == [[2, 3, 4, 5], [6, 7, 8, 9]]


def test_newest_three_groups_are_untouched() -> None:
    transcript = Transcript()
    for n in range(5):
        add_turn(transcript, n)
    plan = plan_micro(transcript, CONFIG)
    touched = {transcript.entries[i].message.tool_call_id for i in plan.projections}
    assert touched == {"c0", "c1"}  # turns 2, 3, 4 are the newest three


def test_results_are_cut_to_head_and_tail_with_a_note() -> None:
    transcript = Transcript()
    text = "H" * 350 + "M" * 600 + "T" * 100
    add_turn(transcript, 0, result=text)
    for n in range(1, 4):
        add_turn(transcript, n)
    plan = plan_micro(transcript, CONFIG)
    content = plan.projections[2].content
    assert content == cut_middle(text, 350, 100)
    assert content is not None
    assert content.startswith("H" * 350 + "\n[... 600 chars omitted")
    assert content.endswith("]\n" + "T" * 100)
    assert plan.estimated_tokens_saved > 0


def test_error_results_and_short_results_are_kept_whole() -> None:
    transcript = Transcript()
    add_turn(transcript, 0, error=True)
    add_turn(transcript, 1, result="short")
    for n in range(2, 5):
        add_turn(transcript, n)
    assert plan_micro(transcript, CONFIG).projections == {}


def test_protected_tools_are_untouched_case_insensitively() -> None:
    transcript = Transcript()
    add_turn(transcript, 0, tool="todowrite", arguments={"todos": LONG})
    add_turn(transcript, 1, tool="Goal", arguments={"text": LONG})
    for n in range(2, 5):
        add_turn(transcript, n, result="short")
    assert plan_micro(transcript, CONFIG).projections == {}


def test_inputs_are_cut_per_call_keeping_the_json_object_shape() -> None:
    transcript = Transcript()
    transcript.append(Message(role="user", content="go"))
    calls = (
        ToolCall(id="w", name="write", arguments=json.dumps({"path": "a", "content": LONG})),
        ToolCall(id="g", name="AskUserQuestion", arguments=json.dumps({"question": LONG})),
        ToolCall(id="n", name="bash", arguments=json.dumps({"nested": {"deep": LONG}})),
    )
    transcript.commit_tool_round(
        Message(role="assistant", tool_calls=calls),
        [Message(role="tool", tool_call_id=c.id, name=c.name, content="ok") for c in calls],
    )
    for n in range(3):
        add_turn(transcript, n, result="short")
    plan = plan_micro(transcript, CONFIG)
    assert list(plan.projections) == [1]
    arguments = plan.projections[1].arguments
    assert list(arguments) == ["w"]  # sibling protected call and nested field untouched
    shortened = json.loads(arguments["w"])
    assert shortened["path"] == "a"
    assert shortened["content"] == cut_middle(LONG, 350, 100)
    assert set(shortened) == {"path", "content"}


def test_already_truncated_entries_are_not_planned_again() -> None:
    transcript = Transcript()
    for n in range(4):
        add_turn(transcript, n)
    plan = plan_micro(transcript, CONFIG)
    transcript.apply_projections(plan.projections, revision=plan.revision)
    assert plan_micro(transcript, CONFIG).projections == {}


def test_below_micro_threshold_skips() -> None:
    transcript = Transcript()
    for n in range(4):
        add_turn(transcript, n)
    assert decide(transcript, reading(7499), CONFIG).action == "skip"


def test_micro_when_it_reclaims_enough() -> None:
    transcript = Transcript()
    for n in range(6):
        add_turn(transcript, n)  # three old results of ~1000 chars: ~340 tokens saved
    decision = decide(transcript, reading(7600), CONFIG)
    assert decision.action == "micro"
    assert decision.reclaim_target == 200  # 2% floor of the window
    assert decision.micro is not None


def test_micro_then_full_when_micro_cannot_reclaim_enough() -> None:
    transcript = Transcript()
    for n in range(4):
        add_turn(transcript, n)  # one old result: ~110 tokens
    decision = decide(transcript, reading(8500), CONFIG)
    assert decision.action == "micro_then_full"
    assert decision.reclaim_target == 1000  # back under 75%


def test_nothing_to_micro_compact_full_only_at_the_full_threshold() -> None:
    transcript = Transcript()
    for n in range(3):
        add_turn(transcript, n)
    assert decide(transcript, reading(9000), CONFIG).action == "skip"
    assert decide(transcript, reading(9500), CONFIG).action == "full"
    assert decide(transcript, reading(10_900), CONFIG).action == "full"


def test_force_is_full_and_failures_are_terminal_only_at_high_pressure() -> None:
    transcript = Transcript()
    assert decide(transcript, reading(10), CONFIG, force=True).action == "full"
    assert decide(transcript, reading(9000), CONFIG, full_failures=3).action == "skip"
    with pytest.raises(CompactRetriesExhausted, match="failed 3 times"):
        decide(transcript, reading(9600), CONFIG, full_failures=3)


def test_config_is_checked() -> None:
    with pytest.raises(AgentError, match="micro_threshold <= full_threshold"):
        CompactionConfig(micro_threshold=0.9, full_threshold=0.8)
    with pytest.raises(AgentError, match="keep_head"):
        CompactionConfig(field_threshold=100)


def test_usage_reported_and_estimated_are_kept_apart() -> None:
    transcript = Transcript()
    tracker = UsageTracker()
    transcript.append(Message(role="user", content="a" * 400))
    cold = tracker.reading(transcript, 1000)
    assert (cold.basis, cold.reported, cold.estimated) == ("estimate", 0, 104)
    transcript.append(Message(role="assistant", content="ok"))
    tracker.report(ModelUsage(prompt_tokens=150, completion_tokens=10), covered=2)
    warm = tracker.reading(transcript, 1000)
    assert (warm.basis, warm.reported, warm.estimated) == ("reported", 160, 0)
    transcript.append(Message(role="user", content="b" * 40))
    later = tracker.reading(transcript, 1000)
    assert (later.reported, later.estimated, later.used) == (160, 14, 174)
    assert later.generation != warm.generation
    tracker.report(ModelUsage(prompt_tokens=0), covered=3)  # zero usage is not evidence
    assert tracker.reading(transcript, 1000).reported == 160
    tracker.reset()
    assert tracker.reading(transcript, 1000).basis == "estimate"


def test_summary_parsing() -> None:
    assert parse_summary("<analysis>think</analysis><summary>\nA\n\n\n\nB\n</summary>") == "A\n\nB"
    assert parse_summary("plain text summary") == "plain text summary"
    with pytest.raises(SummaryFailed, match="never closed"):
        parse_summary("<summary>cut")
    with pytest.raises(SummaryFailed, match="empty"):
        parse_summary("<analysis>only thinking</analysis>")


def test_summary_request_and_injection() -> None:
    transcript = Transcript([Message(role="system", content="sys")])
    add_turn(transcript, 1)
    add_turn(transcript, 2, tool="read", arguments={"path": "f1"})
    add_turn(transcript, 3, tool="bash", arguments={"command": "ls"})
    request = summary_request(transcript.model_view(), CONFIG)
    assert [m.role for m in request] == ["system", "user"]
    assert "[ToolCall:bash" in request[1].content
    assert "sys" not in request[1].content
    paths = recently_read_paths(transcript.entries)
    assert paths == ["f1"]  # newest first, no repeats
    files = {"a": "A" * 30, "b": None, "c": "C" * 30, "d": "D" * 30}
    config = CompactionConfig(reinject_tokens_per_file=5, reinject_budget_tokens=12)
    injected = injected_messages("the summary", ["a", "b", "c", "d"], files.get, config)
    assert len(injected) == 3  # b unreadable, d overflows the budget (each file capped at 20)
    first = injected[0].content
    assert first.index("the summary") < first.index(CONTINUATION_HINT)
    assert "A" * 20 + "\n" in injected[1].content
    assert "A" * 21 not in injected[1].content


def test_apply_micro_equals_the_transcripts_own_commit_and_leaves_its_input_alone() -> None:
    transcript = Transcript()
    for n in range(5):
        add_turn(transcript, n)
    plan = plan_micro(transcript, CompactionConfig())
    assert plan.projections
    view = tuple(transcript.entries)
    before = msgspec.to_builtins(view)
    applied = apply_micro(view, plan)
    assert msgspec.to_builtins(view) == before  # the input is data, never changed
    # Round-tripped as plain data, as across a wire: the same result.
    wire = msgspec.convert(msgspec.to_builtins(view), tuple[Entry, ...])
    assert apply_micro(wire, plan) == applied
    transcript.apply_projections(plan.projections, revision=plan.revision)
    assert list(applied) == list(transcript.entries)
    assert [i for i, e in enumerate(applied) if e.truncated] == sorted(plan.projections)


def test_apply_micro_refuses_a_plan_that_does_not_fit_its_view() -> None:
    transcript = Transcript([Message(role="user", content="inherited")])
    add_turn(transcript, 0)
    view = tuple(transcript.entries)
    outside = MicroPlan(
        revision=0, projections={9: Projection(content="x")}, estimated_tokens_saved=0
    )
    with pytest.raises(TranscriptError, match="entry 9 is not in a view of 5 entries"):
        apply_micro(view, outside)
    ancestor = MicroPlan(
        revision=0, projections={0: Projection(content="x")}, estimated_tokens_saved=0
    )
    with pytest.raises(TranscriptError, match="ancestor or excluded"):
        apply_micro(view, ancestor)
