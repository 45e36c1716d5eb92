"""Compaction inside run_agent, at both thresholds, against a real loopback chat server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from loopactors.agent import (
    AgentConfig,
    AgentResult,
    ChatClient,
    CompactionConfig,
    FullPlan,
    Message,
    ModelSettings,
    ToolCall,
    ToolSet,
    Transcript,
    apply_plan,
    core_tools,
    run_agent,
)
from loopactors.agent._summary import CONTINUATION_HINT

from .chat_server import ChatServer, completion

CONFIG = AgentConfig(compaction=CompactionConfig(context_window=10_000, output_reserve=500))
OMITTED = "chars omitted by context compaction"


def earlier_work(workspace: Path) -> Transcript:
    """Four finished turns, each reading a file (2000-char results (an error result in turn 1)."""
    transcript = Transcript()
    transcript.append(Message(role="system", content="you are a test agent"))
    for n in range(4):
        (workspace / f"f{n}.txt").write_text(f"file {n}\n" + "z" * 990)
        transcript.append(Message(role="user", content=f"turn {n}"))
        call = ToolCall(id=f"r{n}", name="read", arguments=json.dumps({"path": f"f{n}.txt"}))
        result = Message(
            role="tool", tool_call_id=f"r{n}", name="read", content=f"{n}" * 2000, is_error=n == 1
        )
        transcript.commit_tool_round(Message(role="assistant", tool_calls=(call,)), [result])
        transcript.append(Message(role="assistant", content=f"done {n}"))
    return transcript


async def run(
    server: ChatServer, workspace: Path, transcript: Transcript, **options: Any
) -> AgentResult:
    settings = ModelSettings(base_url=server.base_url, model="m", backoff=0.01)
    async with ChatClient(settings) as model:
        return await run_agent(
            "new task",
            model=model,
            tools=ToolSet(core_tools()),
            config=CONFIG,
            transcript=transcript,
            workspace=workspace,
            **options,
        )


async def test_micro_compaction_at_the_micro_threshold(tmp_path: Path) -> None:
    transcript = earlier_work(tmp_path)
    with ChatServer(
        [
            completion(calls=[("g", "glob", {"pattern": "*.md"})], prompt_tokens=7600),
            completion("finished"),
        ]
    ) as server:
        result = await run(server, tmp_path, transcript)
    assert result.status == "completed", result.error
    first, second = server.requests[0]["messages"], server.requests[1]["messages"]
    assert not any(OMITTED in str(m["content"]) for m in first)
    tool_results = [m["content"] for m in second if m["role"] == "tool"]
    # Turn 0 is older than the newest three groups: cut. Turn 1's result is an error: kept.
    assert OMITTED in tool_results[0]
    assert tool_results[0].startswith("0" * 350)
    assert tool_results[1] == "1" * 2000
    assert tool_results[2:4] == ["2" * 2000, "3" * 2000]
    stored = transcript.entries[3]
    assert stored.truncated
    assert stored.message.content == "0" * 2000  # the stored message never changes
    assert not any(e.excluded for e in transcript.entries)
    assert [e.detail.split(":")[0] for e in result.events if e.kind == "compacted"] == ["micro"]


async def test_full_compaction_at_the_full_threshold(tmp_path: Path) -> None:
    transcript = earlier_work(tmp_path)
    with ChatServer(
        [
            completion(calls=[("g", "glob", {"pattern": "*.md"})], prompt_tokens=9600),
            completion("<analysis>thinking</analysis><summary>Read f0-f3; now globbing.</summary>"),
            completion("finished after compaction"),
        ]
    ) as server:
        result = await run(server, tmp_path, transcript)
    assert result.status == "completed", result.error
    summary_call = server.requests[1]
    assert "tools" not in summary_call
    assert "<summary>" in summary_call["messages"][0]["content"]
    assert "[Assistant] done 3" in summary_call["messages"][1]["content"]
    after = server.requests[2]["messages"]
    assert [m["role"] for m in after] == ["system"] + ["user"] * 5 + ["assistant"] * 0
    assert "Read f0-f3; now globbing." in after[1]["content"]
    assert after[1]["content"].index("Read f0-f3") < after[1]["content"].index(CONTINUATION_HINT)
    # Recently read files, newest first, re-read from disk.
    assert [m["content"].split("\n")[1] for m in after[2:]] == [
        f"[Recently read file: f{n}.txt]" for n in (3, 2, 1, 0)
    ]
    assert "file 3\n" in after[2]["content"]
    visible = [e for e in transcript.entries if not e.excluded]
    assert [e.message.role for e in visible] == [
        "system",
        "user",
        "user",
        "user",
        "user",
        "user",
        "assistant",
    ]
    excluded = [e for e in transcript.entries if e.excluded]
    assert len(excluded) == 4 * 4 + 3  # the old turns, the new prompt and its tool round
    assert excluded[0].message.content == "turn 0"


async def test_a_full_compaction_is_applied_by_the_applier(tmp_path: Path) -> None:
    """The plan (summary and files to inject) goes to the applier (the Compactor actor in a
    runtime); the agent commits what it returns. The same result as applied in the agent."""
    replies = [
        completion(calls=[("g", "glob", {"pattern": "*.md"})], prompt_tokens=9600),
        completion("<analysis>thinking</analysis><summary>Read f0-f3; now globbing.</summary>"),
        completion("finished after compaction"),
    ]
    plans: list[Any] = []

    async def counting(plan: Any, view: tuple[Any, ...]) -> tuple[Any, ...]:
        plans.append(plan)
        return apply_plan(view, plan)

    applied = earlier_work(tmp_path)
    with ChatServer(replies) as server:
        assert (await run(server, tmp_path, applied, applier=counting)).status == "completed"
    local = earlier_work(tmp_path)
    with ChatServer(replies) as server:
        assert (await run(server, tmp_path, local)).status == "completed"
    assert isinstance(plans[-1], FullPlan)  # after a micro plan, when micro could not do it
    assert len(plans[-1].injected) == 5  # the summary and four re-read files
    assert applied.to_builtins() == local.to_builtins()


async def test_full_compaction_failing_at_high_pressure_is_terminal(tmp_path: Path) -> None:
    transcript = earlier_work(tmp_path)
    empty = completion("<summary></summary>")
    with ChatServer(
        [
            completion(calls=[("g", "glob", {"pattern": "*"})], prompt_tokens=9700),
            empty,
            empty,
            empty,
        ]
    ) as server:
        result = await run(server, tmp_path, transcript)
    assert result.status == "failed"
    assert "full compaction failed 3 times in a row" in (result.error or "")
    assert len(server.requests) == 4  # never called the model with the overfull context
    assert not any(e.excluded for e in transcript.entries)  # history untouched
    assert transcript.entries[3].truncated  # the micro part stays


async def test_full_compaction_failing_below_the_full_threshold_goes_on(tmp_path: Path) -> None:
    transcript = earlier_work(tmp_path)
    empty = completion("<summary>cut")
    with ChatServer(
        [
            completion(calls=[("g", "glob", {"pattern": "*"})], prompt_tokens=8500),
            empty,
            empty,
            empty,
            completion("carried on"),
        ]
    ) as server:
        result = await run(server, tmp_path, transcript)
    assert (result.status, result.output) == ("completed", "carried on")
    failures = [e.detail for e in result.events if e.kind == "compaction_failed"]
    assert len(failures) == 3
    assert "never closed" in failures[0]


async def test_full_compactions_that_cannot_restore_the_budget_end_the_run(tmp_path: Path) -> None:
    transcript = earlier_work(tmp_path)
    summary = completion("<summary>all of it</summary>")
    still_full = completion("a very long answer", finish="length", prompt_tokens=9700)
    with ChatServer(
        [
            completion(calls=[("g", "glob", {"pattern": "*"})], prompt_tokens=9600),
            summary,
            still_full,
            summary,
            still_full,
        ]
    ) as server:
        result = await run(server, tmp_path, transcript)
    assert result.status == "failed"
    assert result.error == (
        "after 2 full compactions without new work the provider still reports 9750 of 10000 tokens"
    )
    assert len(server.requests) == 5
    assert [e.detail.split(":")[0] for e in result.events if e.kind == "compacted"] == [
        "micro",
        "full",
        "full",
    ]
