"""The sub-agent tool inside the runtime: the sub-agent is a child loop, dispatched like a round."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
import trio

from loopactors.agent import SUBAGENT_MAX_ITERATIONS, ModelSettings, Transcript
from loopactors.loops import LoopState
from loopactors.runtime import Runtime, RuntimeConfig, open_runtime
from loopactors.workers import AgentWorker
from tests.hang import HANG

from .chat_server import ChatServer, Reply, Script, completion
from .test_tools import wait_dead

CONFIG = RuntimeConfig(store="memory", shutdown_grace=5.0)


def tool_results(transcript: tuple[dict[str, object], ...]) -> list[tuple[str, bool]]:
    return [
        (e.message.content, e.message.is_error)
        for e in Transcript.from_builtins(transcript).entries
        if e.message.role == "tool"
    ]


async def children_of(runtime: Runtime, parent_id: str) -> list[LoopState]:
    return [s for s in await runtime.list() if s.spec.parent_id == parent_id]


async def test_a_sub_agent_is_a_child_loop_and_its_tokens_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOPACTORS_LLM_API_KEY", "sk-not-in-any-spec")
    replies: list[Script] = [
        completion(calls=[("s", "agent", {"task": "write 7 to seven.txt"})], prompt_tokens=100),
        completion(calls=[("w", "write", {"path": "seven.txt", "content": "7"})], prompt_tokens=10),
        completion("child wrote seven.txt", prompt_tokens=20),
        completion("parent done", prompt_tokens=200),
    ]
    with ChatServer(replies) as server:
        spec = f"agent:model=m,base_url={server.base_url},workspace={tmp_path},context_window=64000"
        async with open_runtime(CONFIG) as runtime:
            parent = runtime.handle(await runtime.start("|loop:1| delegate", worker=spec))
            final = await parent.wait()
            history = await parent.history()
            (child,) = await children_of(runtime, parent.loop_id)
            child_rounds = await runtime.history(child.loop_id)
    assert final.phase == "complete"
    assert history[0].output == "parent done"
    assert (tmp_path / "seven.txt").read_text() == "7"
    assert tool_results(history[0].transcript) == [("child wrote seven.txt", False)]
    # The child: one fresh round of an agent worker like the parent's, with the sub-agent budget.
    assert child.phase == "complete"
    assert (child.spec.rounds, child.spec.mode) == (1, "fresh")
    assert child.spec.task == "[sub-agent] write 7 to seven.txt"
    worker = AgentWorker.from_spec(child.spec.worker.partition(":")[2])
    assert worker.settings.model == "m"
    assert worker.settings.base_url == server.base_url
    assert str(worker.workspace) == str(await trio.Path(tmp_path).resolve())
    assert worker.config.max_iterations == SUBAGENT_MAX_ITERATIONS
    assert worker.config.compaction.context_window == 64000
    assert "sk-not-in-any-spec" not in child.spec.worker
    child_headers = {k.lower(): v for k, v in server.headers[1].items()}
    assert child_headers["authorization"] == "Bearer sk-not-in-any-spec"  # from the environment
    assert [r.status for r in child_rounds] == ["completed"]
    assert child_rounds[0].output == "child wrote seven.txt"
    # Tokens: the child's 15 + 25, and the parent's 105 + 205 with the child's added.
    assert child.tokens_used == child_rounds[0].tokens == 40
    assert history[0].tokens == final.tokens_used == 105 + 205 + 40
    child_first = server.requests[1]["messages"]
    assert [m["role"] for m in child_first] == ["system", "user"]  # a fresh context
    assert child_first[1]["content"] == "[sub-agent] write 7 to seven.txt"
    assert server.unexpected == 0


async def test_a_failed_sub_agent_is_a_tool_error_and_its_loop_ends(tmp_path: Path) -> None:
    replies: list[Script] = [
        completion(calls=[("s", "agent", {"task": "ask a broken model"})], prompt_tokens=100),
        Reply(status=400, body={"error": {"message": "bad request, really"}}),
        completion("the sub-agent could not do it", prompt_tokens=100),
    ]
    with ChatServer(replies) as server:
        spec = f"agent:model=m,base_url={server.base_url},workspace={tmp_path}"
        async with open_runtime(CONFIG) as runtime:
            parent = runtime.handle(await runtime.start("|loop:1| delegate", worker=spec))
            final = await parent.wait()
            history = await parent.history()
            (child,) = await children_of(runtime, parent.loop_id)
            child_rounds = await runtime.history(child.loop_id)
    assert final.phase == "complete"
    assert history[0].output == "the sub-agent could not do it"
    ((content, is_error),) = tool_results(history[0].transcript)
    assert is_error
    assert content.startswith(
        f"the sub-agent failed: its round in child loop {child.loop_id} failed: HTTP 400 from "
    )
    assert content.endswith(": bad request, really; its last answer: ")
    # Its one round was run and failed: no completed round, so not `complete`.
    assert (child.phase, child.trigger) == ("escalated", "no_completed_round")
    assert [r.status for r in child_rounds] == ["failed"]
    assert server.unexpected == 0


async def test_stopping_the_parent_loop_cancels_the_sub_agent_loop(tmp_path: Path) -> None:
    replies: list[Script] = [
        completion(calls=[("s", "agent", {"task": "sleep"})]),
        completion(calls=[("b", "bash", {"command": "echo $$ > child.pid; exec sleep 30"})]),
    ]
    pid_file = trio.Path(tmp_path / "child.pid")
    with ChatServer(replies) as server:
        spec = f"agent:model=m,base_url={server.base_url},workspace={tmp_path}"
        async with open_runtime(CONFIG) as runtime:
            parent = runtime.handle(await runtime.start("|loop:1| delegate", worker=spec))
            with trio.fail_after(HANG):
                while not await pid_file.exists() or not (await pid_file.read_text()).strip():
                    await trio.sleep(0.01)
            (running,) = await children_of(runtime, parent.loop_id)
            assert running.phase == "awaiting_worker"
            stopped = await parent.stop()
            with trio.fail_after(HANG):
                child = await runtime.handle(running.loop_id).wait()
            await wait_dead(int((await pid_file.read_text()).strip()))
    assert stopped.phase == "cancelled"
    assert child.phase == "cancelled"
    assert child.spec.parent_id == parent.loop_id


def test_the_sub_agent_spec_copies_the_parent_and_gives_up_on_a_comma(tmp_path: Path) -> None:
    settings = ModelSettings(base_url="http://127.0.0.1:9/v1", model="m", api_key="sk-secret")
    worker = AgentWorker(settings=settings, workspace=tmp_path)
    spec = worker.subagent_spec()
    assert spec == (
        f"agent:model=m,base_url=http://127.0.0.1:9/v1,workspace={tmp_path.resolve()},"
        f"max_iterations={SUBAGENT_MAX_ITERATIONS},stream=true,timeout=300.0"
    )
    odd = tmp_path / "a,b"
    odd.mkdir()
    # A comma cannot be written in a spec: the sub-agent then runs inline, in the tool call.
    assert AgentWorker(settings=settings, workspace=odd).subagent_spec() is None
    tiny = attrs.evolve(settings, timeout=1e-05)  # repr has an exponent the spec refuses
    assert AgentWorker(settings=tiny, workspace=tmp_path).subagent_spec() is None
