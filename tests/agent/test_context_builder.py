"""Micro compaction inside the runtime: the agent plans, the ContextBuilder actor applies, the agent
commits. Real runtime, real loopback chat server; the result must equal the local application.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loopactors.actors import ChildSpec, open_node
from loopactors.agent import (
    AgentConfig,
    ChatClient,
    CompactionConfig,
    Message,
    ModelSettings,
    ToolCall,
    ToolSet,
    Transcript,
    core_tools,
    run_agent,
)
from loopactors.runtime import RuntimeConfig, _context_builder, open_runtime
from loopactors.runtime._api import RuntimeRoundContext
from loopactors.runtime._context_builder import ContextBuilder
from loopactors.runtime._events import EventBus
from loopactors.runtime._messages import ApplyCompaction, GetContextBuilderStatistics
from loopactors.workers import AgentWorker, RoundContext, RoundRequest, RoundResult

from ..workers.sample_fns import make_request
from .chat_server import ChatServer, completion

OMITTED = "chars omitted by context compaction"
#: Every group is stale, so one round's own tool result is compactable.
CONFIG = AgentConfig(
    compaction=CompactionConfig(context_window=10_000, output_reserve=500, stale_groups=0)
)
#: Where the round function finds its model and workspace (set by each test).
SETUP: dict[str, Any] = {}


def worker() -> AgentWorker:
    settings = ModelSettings(base_url=SETUP["base_url"], model="m", backoff=0.01)
    return AgentWorker(settings=settings, config=CONFIG, workspace=SETUP["workspace"])


async def agent_round(request: RoundRequest, context: RoundContext | None) -> RoundResult:
    """An agent round with CONFIG (a spec cannot set stale_groups)."""
    return await worker().run(request, context)


def replies() -> list[Any]:
    # The read result (8,000 chars) pushes the context over the micro threshold.
    return [
        completion(calls=[("r", "read", {"path": "big.txt"})], prompt_tokens=6000),
        completion("read it"),
    ]


async def runtime_round(tmp_path: Path) -> tuple[Transcript, dict[str, int]]:
    (tmp_path / "big.txt").write_text("b" * 8000)
    with ChatServer(replies()) as server:
        SETUP.update(base_url=server.base_url, workspace=tmp_path)
        config = RuntimeConfig(store="memory", shutdown_grace=5.0)
        async with open_runtime(config) as runtime:
            handle = runtime.handle(
                await runtime.start(
                    "|loop:1| read big.txt",
                    worker="python:tests.agent.test_context_builder:agent_round",
                )
            )
            final = await handle.wait()
            history = await handle.history()
            statistics = await runtime.node.ref("context_builder").call(
                GetContextBuilderStatistics()
            )
    assert final.phase == "complete", history
    second = server.requests[1]["messages"]
    assert OMITTED in next(m["content"] for m in second if m["role"] == "tool")
    return Transcript.from_builtins(history[0].transcript), statistics


async def local_round(tmp_path: Path, prompt: str) -> Transcript:
    with ChatServer(replies()) as server:
        SETUP.update(base_url=server.base_url, workspace=tmp_path)
        result = await worker().run(make_request(prompt=prompt), None)
    assert result.status == "completed", result.error
    return Transcript.from_builtins(result.transcript)


async def test_the_context_builder_applies_an_agent_rounds_micro_compaction(tmp_path: Path) -> None:
    transcript, statistics = await runtime_round(tmp_path)
    # A plain prompt is built by the Breaker: the ContextBuilder only applied the plan.
    assert statistics == {"prompts_built": 0, "compactions_applied": 1}
    tool_result = transcript.entries[3]
    assert tool_result.truncated
    assert tool_result.message.content.endswith("b" * 8000)  # the stored message is whole
    local = await local_round(tmp_path, transcript.entries[1].message.content)
    assert local.to_builtins() == transcript.to_builtins()


async def test_an_apply_that_fails_in_the_context_builder_is_refused_and_done_by_the_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object) -> object:
        raise RuntimeError("apply bug")

    monkeypatch.setattr(_context_builder, "apply_plan", broken)
    transcript, statistics = await runtime_round(tmp_path)
    # Not crashed (a crash would restart the dispatcher and its rounds): same incarnation.
    assert statistics == {"prompts_built": 0, "compactions_applied": 0}
    assert transcript.entries[3].truncated
    local = await local_round(tmp_path, transcript.entries[1].message.content)
    assert local.to_builtins() == transcript.to_builtins()


class CrashingContextBuilder(ContextBuilder):
    """Crashes on every ApplyCompaction (its supervisor restarts it)."""

    async def handle(self, message: Any) -> Any:
        if type(message) is ApplyCompaction:
            raise RuntimeError("context builder crashed mid-apply")
        return await super().handle(message)


def earlier_work(workspace: Path) -> Transcript:
    transcript = Transcript()
    transcript.append(Message(role="system", content="you are a test agent"))
    for n in range(4):
        transcript.append(Message(role="user", content=f"turn {n}"))
        call = ToolCall(id=f"r{n}", name="read", arguments=json.dumps({"path": f"f{n}.txt"}))
        result = Message(role="tool", tool_call_id=f"r{n}", name="read", content=f"{n}" * 2000)
        transcript.commit_tool_round(Message(role="assistant", tool_calls=(call,)), [result])
        transcript.append(Message(role="assistant", content=f"done {n}"))
    return transcript


async def test_a_context_builder_crash_during_an_apply_is_survived(tmp_path: Path) -> None:
    """The call fails (CallFailed): the agent applies the plan itself, with the same result."""
    scripted = [
        completion(calls=[("g", "glob", {"pattern": "*.md"})], prompt_tokens=7600),
        completion("finished"),
    ]
    config = AgentConfig(compaction=CompactionConfig(context_window=10_000, output_reserve=500))
    transcripts = []
    async with open_node(
        [ChildSpec("context_builder", CrashingContextBuilder, name="context_builder")]
    ) as node:
        round_context = RuntimeRoundContext(RuntimeConfig(), EventBus(16), node, "l", 1)
        for applier in (round_context.apply_compaction, None):
            transcript = earlier_work(tmp_path)
            with ChatServer(list(scripted)) as server:
                settings = ModelSettings(base_url=server.base_url, model="m", backoff=0.01)
                async with ChatClient(settings) as model:
                    result = await run_agent(
                        "new task",
                        model=model,
                        tools=ToolSet(core_tools()),
                        config=config,
                        transcript=transcript,
                        workspace=tmp_path,
                        applier=applier,
                    )
            assert result.status == "completed", result.error
            transcripts.append(transcript)
            failed = [e.detail for e in result.events if e.kind == "compaction_failed"]
            if applier is not None:
                assert len(failed) == 1
                assert failed[0].startswith("micro: the applier failed (CallFailed: ")
                assert failed[0].endswith("; applied locally")
            else:
                assert failed == []
        # Restarted by its supervisor: it answers again.
        statistics = await node.ref("context_builder").call(GetContextBuilderStatistics())
    assert statistics == {"prompts_built": 0, "compactions_applied": 0}
    assert transcripts[0].entries[3].truncated
    assert transcripts[0].to_builtins() == transcripts[1].to_builtins()
