"""A node's subscribers see a claude round's tool calls live (``agent_step`` over the
websocket), with the real Claude Code against the fake endpoint (a few seconds)."""

from __future__ import annotations

import threading
from pathlib import Path

import trio

from loopactors.client import connect
from loopactors.gateway import GatewaySettings, open_gateway
from loopactors.loops import AgentStep, LoopFinished, RoundFinished
from loopactors.runtime import RuntimeConfig, open_runtime
from tests.hang import HANG

from ._fakes import AnthropicFake, Request, Response, Turn, git_workspace


async def test_node_subscribers_get_agent_steps_and_cost(
    tmp_path: Path, anthropic: AnthropicFake, claude_env: dict[str, str]
) -> None:
    ws = git_workspace(tmp_path / "ws")
    anthropic.turns = [
        Turn(tools=[("Write", {"file_path": str(ws / "n.txt"), "content": "n\n"})]),
        Turn(text="written"),
    ]
    subscribed = threading.Event()
    answer = anthropic.handle

    def after_subscribe(request: Request) -> Response:
        subscribed.wait(HANG)  # no event can be missed before the subscription exists
        return answer(request)

    anthropic.server.handler = after_subscribe
    config = RuntimeConfig(store="memory", state_dir=tmp_path / "state", shutdown_grace=5.0)
    async with (
        open_runtime(config) as runtime,
        open_gateway(runtime, GatewaySettings(port=0)) as gateway,
    ):
        token = gateway.token_path.read_text().strip()
        async with connect(gateway.url, token=token) as node:
            state = await node.start("|loop:1| write n", worker=f"claude:workspace={ws}")
            seen = []
            async with await node.subscribe(state.loop_id) as events:
                subscribed.set()
                with trio.fail_after(HANG):
                    async for event in events:
                        seen.append(event)
                        if isinstance(event, LoopFinished):
                            break
    steps = [e for e in seen if isinstance(e, AgentStep)]
    assert [(s.tool, s.detail) for s in steps] == [("Write", str(ws / "n.txt"))]
    (finished,) = [e for e in seen if isinstance(e, RoundFinished)]
    assert finished.cost_usd > 0
    assert finished.files_changed == 1
