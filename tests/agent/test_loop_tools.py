"""The loop tools (child loops through the runtime) and the sub-agent tool, end to end."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import trio

from loopactors.agent import (
    AgentConfig,
    ChatClient,
    ModelSettings,
    ToolSet,
    Transcript,
    core_tools,
    run_agent,
    subagent_tool,
)
from loopactors.loops import LoopFinished
from loopactors.runtime import RuntimeConfig, open_runtime
from tests.hang import HANG

from .chat_server import ChatServer, Reply, Script, completion

STARTED = re.compile(r"started (\S+):")


def execute(call_id: str, name: str, **arguments: Any) -> tuple[str, str, dict[str, Any]]:
    return (call_id, "execute_tool", {"name": name, "arguments": arguments})


def last_tool_result(body: dict[str, Any]) -> str:
    return str([m for m in body["messages"] if m["role"] == "tool"][-1]["content"])


async def test_an_agent_starts_watches_and_cancels_child_loops(tmp_path: Path) -> None:
    finished: set[str] = set()
    ids: list[str] = []
    parents: list[str] = []

    def after_first_child(body: dict[str, Any]) -> Reply:
        found = STARTED.search(last_tool_result(body))
        assert found is not None
        ids.append(found.group(1))
        child = ids[0]
        deadline = time.monotonic() + HANG
        while child not in finished:  # the server thread waits; the runtime runs on
            assert time.monotonic() < deadline
            time.sleep(0.01)
        return completion(
            calls=[
                execute("h", "loop_history", loop_id=child),
                execute("o", "loop_output", loop_id=child, round=1),
                execute("s", "loop_status", loop_id=child),
                execute("l", "loop_list"),
            ]
        )

    def after_slow_child(body: dict[str, Any]) -> Reply:
        found = STARTED.search(last_tool_result(body))
        assert found is not None
        ids.append(found.group(1))
        return completion(
            calls=[
                execute("c", "loop_cancel", loop_id=ids[1]),
                execute("x", "loop_status", loop_id="nope"),
                execute("p", "loop_status", loop_id=parents[0]),
            ]
        )

    replies: list[Script] = [
        completion(
            calls=[
                execute("a", "loop_start", task="count", rounds=2, mode="fresh", worker="scripted")
            ]
        ),
        after_first_child,
        completion(
            calls=[execute("b", "loop_start", task="slow", rounds=1, worker="scripted:latency=30")]
        ),
        after_slow_child,
        completion("children handled"),
    ]
    # The children's workers are the operator's to allow (docs/security.md, agent tools).
    config = RuntimeConfig(
        store="memory", shutdown_grace=5.0, child_workers=("scripted", "scripted:latency=30")
    )
    with ChatServer(replies) as server:
        spec = f"agent:model=m,base_url={server.base_url},workspace={tmp_path}"
        async with open_runtime(config) as runtime:
            with runtime.subscribe() as events:
                parent = runtime.handle(await runtime.start("|loop:1| orchestrate", worker=spec))
                parents.append(parent.loop_id)  # not a child of itself
                async for event in events:
                    if isinstance(event, LoopFinished):
                        finished.add(event.loop_id)
                        if event.loop_id == parent.loop_id:
                            break
            history = await parent.history()
            first, slow = await runtime.get(ids[0]), await runtime.get(ids[1])
    assert history[0].status == "completed", history[0].error
    assert history[0].output == "children handled"
    assert (first.phase, first.spec.parent_id, first.completed_rounds) == (
        "complete",
        parent.loop_id,
        2,
    )
    assert (slow.phase, slow.spec.parent_id) == ("cancelled", parent.loop_id)
    offered = {t["function"]["name"] for t in server.requests[0]["tools"]}
    assert {"search_tools", "execute_tool", "agent"} <= offered
    assert not any(name.startswith("loop_") for name in offered)  # deferred
    results = {
        e.message.tool_call_id: e.message
        for e in Transcript.from_builtins(history[0].transcript).entries
        if e.message.role == "tool"
    }
    assert results["a"].content.startswith(f"started {ids[0]}: ")
    assert results["h"].content.splitlines() == [
        "round 1: completed, 0 tokens: round 1 of 2: birch",
        "round 2: completed, 0 tokens: round 2 of 2: cedar",
    ]
    assert results["o"].content == "round 1 of 2: birch"
    assert results["s"].content.startswith(f"{ids[0]}: complete, round 2/2 completed")
    assert results["l"].content.count("\n") == 0  # only the first child existed then
    assert results["c"].content.startswith(f"stopped {ids[1]}: cancelled")
    assert results["x"].is_error
    assert results["x"].content == "no loop 'nope' in this runtime's store"
    assert results["p"].is_error
    assert results["p"].content == f"{parent.loop_id!r} is not a child loop of {parent.loop_id}"


async def test_loop_tools_refuse_bad_arguments_and_the_tree_cap(tmp_path: Path) -> None:
    replies = [
        completion(
            calls=[
                execute("r", "loop_start", task="x", rounds=0),
                execute("m", "loop_start", task="x", mode="sideways"),
                execute("t", "loop_start", task=""),
            ]
        ),
        completion(calls=[execute("w", "loop_start", task="x", worker="nosuchkind")]),
        completion("ok"),
    ]
    config = RuntimeConfig(store="memory", shutdown_grace=5.0)
    with ChatServer(replies) as server:
        spec = f"agent:model=m,base_url={server.base_url},workspace={tmp_path}"
        async with open_runtime(config) as runtime:
            parent = runtime.handle(await runtime.start("|loop:1| try", worker=spec))
            await parent.wait()
            history = await parent.history()
            assert len(await runtime.list()) == 1  # nothing was started
    results = [
        e.message
        for e in Transcript.from_builtins(history[0].transcript).entries
        if e.message.role == "tool"
    ]
    assert [m.is_error for m in results] == [True] * 4
    assert results[0].content == "rounds must be an integer >= 1, got 0"
    assert results[1].content == "mode must be inherit or fresh, got 'sideways'"
    assert results[2].content == "loop_start needs a task"
    assert results[3].content.startswith(
        "loop not started: worker 'nosuchkind' is not allowed for a child loop"
    )


async def test_a_sub_agent_runs_inside_the_tool_call_and_its_tokens_count(tmp_path: Path) -> None:
    replies = [
        completion(calls=[("s", "agent", {"task": "write 7 to seven.txt"})], prompt_tokens=100),
        completion(calls=[("w", "write", {"path": "seven.txt", "content": "7"})], prompt_tokens=10),
        completion("child wrote seven.txt", prompt_tokens=20),
        completion("parent done", prompt_tokens=200),
    ]
    with ChatServer(replies) as server:
        settings = ModelSettings(base_url=server.base_url, model="m")
        async with ChatClient(settings) as model:
            tools = ToolSet([*core_tools(), subagent_tool(model)])
            result = await run_agent("delegate", model=model, tools=tools, workspace=tmp_path)
    assert (result.status, result.output) == ("completed", "parent done")
    assert (tmp_path / "seven.txt").read_text() == "7"
    assert result.tokens.calls == 4
    assert result.tokens.prompt_tokens == 330
    assert result.iterations == 2  # the parent's own budget counts its own calls
    delegated = [e.message for e in result.transcript.entries if e.message.role == "tool"]
    assert delegated[0].content == "child wrote seven.txt"
    child_first = server.requests[1]["messages"]
    assert [m["role"] for m in child_first] == ["system", "user"]  # a fresh context
    assert child_first[1]["content"] == "write 7 to seven.txt"


async def test_cancelling_the_parent_cancels_the_sub_agent(tmp_path: Path) -> None:
    replies = [
        completion(calls=[("s", "agent", {"task": "sleep"})]),
        completion(calls=[("b", "bash", {"command": "echo $$ > child.pid; exec sleep 30"})]),
    ]
    with ChatServer(replies) as server:
        settings = ModelSettings(base_url=server.base_url, model="m")
        async with ChatClient(settings) as model:
            transcript = Transcript()
            tools = ToolSet([*core_tools(), subagent_tool(model, AgentConfig(max_iterations=5))])
            pid_file = trio.Path(tmp_path / "child.pid")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(
                    lambda: run_agent(
                        "go", model=model, tools=tools, workspace=tmp_path, transcript=transcript
                    )
                )
                while not await pid_file.exists() or not (await pid_file.read_text()).strip():
                    await trio.sleep(0.01)
                nursery.cancel_scope.cancel()
    from .test_tools import wait_dead

    await wait_dead(int((await pid_file.read_text()).strip()))
    results = [e.message for e in transcript.entries if e.message.role == "tool"]
    assert len(results) == 1
    assert results[0].is_error
    assert results[0].content.startswith("not run to the end")


async def test_a_round_waits_for_its_child_loop_and_is_told_when_it_ends(tmp_path: Path) -> None:
    def told(body: dict[str, Any]) -> Reply:
        reminder = body["messages"][-1]["content"]
        assert "finished: complete, 2/2 rounds completed" in reminder
        child = reminder.split("Child loop ")[1].split(" ")[0]
        return completion(calls=[execute("o", "loop_output", loop_id=child)])

    replies: list[Script] = [
        completion(
            calls=[
                execute("a", "loop_start", task="count", rounds=2, worker="scripted:latency=0.1")
            ]
        ),
        completion("Started a child loop; waiting for it."),
        told,
        completion("The child said: round 2 of 2: cedar"),
    ]
    config = RuntimeConfig(
        store="memory", shutdown_grace=5.0, child_workers=("scripted:latency=0.1",)
    )
    with ChatServer(replies) as server:
        spec = f"agent:model=m,base_url={server.base_url},workspace={tmp_path}"
        async with open_runtime(config) as runtime:
            parent = runtime.handle(await runtime.start("|loop:1| delegate", worker=spec))
            final = await parent.wait()
            history = await parent.history()
    assert final.phase == "complete"
    assert history[0].output == "The child said: round 2 of 2: cedar"
    results = [
        e.message
        for e in Transcript.from_builtins(history[0].transcript).entries
        if e.message.role == "tool"
    ]
    assert results[-1].content == "round 2 of 2: cedar"
    assert server.unexpected == 0
