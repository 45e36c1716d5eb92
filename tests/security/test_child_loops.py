"""A model cannot start a child loop wider than its own (docs/security.md, agent tools 5).

The parent is an ``agent`` loop whose model (a real chat-completions server on loopback) calls
``loop_start`` through ``execute_tool`` with worker specs of its choosing: a ``command:`` that
would write a file outside the workspace, an agent with ``bash=on`` or another workspace. Each
is refused with a tool error and nothing is started; a child without a worker runs the
parent's own spec; one from the operator's ``child_workers`` list runs, unless it would widen
the parent's kind, ``bash`` or workspace.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loopactors.agent import Transcript
from loopactors.errors import WorkerSpecError
from loopactors.runtime import RuntimeConfig, open_runtime
from loopactors.workers import confined_child_worker

from ..agent.chat_server import ChatServer, Reply, Script, completion


def execute(call_id: str, name: str, **arguments: Any) -> tuple[str, str, dict[str, Any]]:
    return (call_id, "execute_tool", {"name": name, "arguments": arguments})


def tool_results(transcript: tuple[dict[str, Any], ...]) -> dict[str | None, Any]:
    return {
        e.message.tool_call_id: e.message
        for e in Transcript.from_builtins(transcript).entries
        if e.message.role == "tool"
    }


async def test_a_model_cannot_start_a_child_loop_that_widens_its_confinement(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    planted = tmp_path / "planted.txt"
    replies: list[Script] = [
        completion(
            calls=[
                execute("cmd", "loop_start", task="x", rounds=1, worker=f"command:touch {planted}"),
                execute("py", "loop_start", task="x", rounds=1, worker="python:os:system"),
            ]
        ),
    ]
    config = RuntimeConfig(store="memory", shutdown_grace=5.0)
    with ChatServer(replies) as server:
        spec = f"agent:model=m,base_url={server.base_url},workspace={workspace},bash=off"
        widened = spec.replace(",bash=off", ",bash=on")
        elsewhere = spec.replace(str(workspace), str(tmp_path))
        server.add(
            completion(
                calls=[
                    execute("on", "loop_start", task="y", rounds=1, worker=widened),
                    execute("ws", "loop_start", task="y", rounds=1, worker=elsewhere),
                ]
            ),
            completion("done"),
        )
        async with open_runtime(config) as runtime:
            parent = runtime.handle(await runtime.start("|loop:1| escape", worker=spec))
            await parent.wait()
            history = await parent.history()
            loops = await runtime.list()
    assert [state.loop_id for state in loops] == [parent.loop_id]  # nothing was started
    assert not planted.exists()
    results = tool_results(history[0].transcript)
    for call_id in ("cmd", "py", "on", "ws"):
        assert results[call_id].is_error, results[call_id].content
        assert results[call_id].content.startswith("loop not started: worker "), call_id
        assert "child_workers" in results[call_id].content


async def test_a_child_loop_runs_the_parents_spec_unless_the_operator_allows_another(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    (workspace / "sub").mkdir(parents=True)

    def respond(body: dict[str, Any]) -> Reply:
        # The child (an agent with the parent's spec) and the parent share the server.
        if "own spec" in body["messages"][1]["content"]:
            return completion("child done")
        done = sum(m["role"] == "tool" for m in body["messages"])
        if done == 0:
            return completion(calls=[execute("own", "loop_start", task="own spec", rounds=1)])
        if done == 1:
            return completion(
                calls=[execute("listed", "loop_start", task="listed", rounds=1, worker="scripted")]
            )
        return completion("parent done")

    with ChatServer([respond] * 8) as server:
        spec = f"agent:model=m,base_url={server.base_url},workspace={workspace},bash=off"
        wider = spec.replace(",bash=off", ",bash=on")
        config = RuntimeConfig(
            store="memory", shutdown_grace=5.0, child_workers=("scripted", wider)
        )
        async with open_runtime(config) as runtime:
            parent = runtime.handle(await runtime.start("|loop:1| delegate", worker=spec))
            await parent.wait()
            children = [s for s in await runtime.list() if s.spec.parent_id == parent.loop_id]
            for child in children:
                await runtime.handle(child.loop_id).wait()
            history = await parent.history()
    assert sorted(c.spec.worker for c in children) == sorted([spec, "scripted"])
    results = tool_results(history[0].transcript)
    assert not results["own"].is_error, results["own"].content
    assert not results["listed"].is_error, results["listed"].content


def test_an_allowed_spec_still_cannot_widen_the_parent() -> None:
    parent = "agent:model=m,workspace=/srv/ws,bash=sandbox"
    allowed = (
        "agent:model=m,workspace=/srv/ws,bash=on",
        "agent:model=m,workspace=/srv,bash=off",
        "agent:model=m,workspace=/srv/ws/sub,bash=off",
        "agent:model=m,workspace=/srv/ws,bash=off,mcp=/srv/mcp.json",
        "command:/bin/true",
        "scripted:latency=1",
    )
    assert confined_child_worker(parent, None, allowed) == parent
    assert confined_child_worker(parent, parent, ()) == parent
    assert confined_child_worker(parent, allowed[2], allowed) == allowed[2]
    assert confined_child_worker(parent, allowed[5], allowed) == allowed[5]
    for spec, why in (
        (allowed[0], "bash=on is wider than the parent's bash=sandbox"),
        (allowed[1], "workspace /srv is not inside the parent's workspace /srv/ws"),
        (allowed[3], "mcp= servers the parent does not have"),
        (allowed[4], "kind command is not the parent's kind agent"),
    ):
        with pytest.raises(WorkerSpecError, match=why):
            confined_child_worker(parent, spec, allowed)
    with pytest.raises(
        WorkerSpecError,
        match="not allowed for a child loop: a model's child loop runs its parent's own",
    ):
        confined_child_worker(parent, "agent:model=m,workspace=/srv/ws,bash=off", allowed)
