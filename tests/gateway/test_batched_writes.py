"""Frames queued at once go out in one write (``frames_sender``): each arrives whole, and the
node's writer counts every frame it sent."""

from __future__ import annotations

import json
from typing import Any

import trio
import trio.testing

from loopactors.gateway._connection import frames_sender

from .conftest import LiveNode, open_raw


async def test_frames_written_together_arrive_whole_and_in_order(live_node: LiveNode) -> None:
    # The client side's own websocket: a batch of masked client frames in one write, which
    # the node must take apart into the same requests (each answered by a task of its own,
    # so the replies may come in any order).
    state = await live_node.runtime.start("|loop:1| ask me")
    async with open_raw(live_node) as raw:
        send = frames_sender(raw.ws)
        requests = [
            json.dumps({"type": "status", "id": n, "loop_id": state.loop_id}) for n in range(40)
        ]
        await send(requests)
        replies = [await raw.receive() for _ in requests]
    assert sorted(r["id"] for r in replies) == list(range(40))
    assert all(r["type"] == "ok" for r in replies)
    assert {r["data"]["loops"][0]["loop_id"] for r in replies} == {state.loop_id}


async def test_pipelined_requests_are_all_answered_and_counted(live_node: LiveNode) -> None:
    state = await live_node.runtime.start("|loop:1| ask me")
    before = (await live_node.gateway.statistics()).frames_out
    async with open_raw(live_node) as raw:
        for n in range(1, 201):
            await raw.send({"type": "status", "id": n, "loop_id": state.loop_id})
        ids = [(await raw.receive())["id"] for _ in range(200)]
        await trio.testing.wait_all_tasks_blocked()  # the writer has counted its last write
        after = (await live_node.gateway.statistics()).frames_out
    assert sorted(ids) == list(range(1, 201))
    # The 200 answers (hello's reply goes out before the writer starts), each counted once
    # whatever the sizes of the writes that carried them.
    assert after - before == 200


class _PlainSocket:
    """A websocket with nothing but ``send_message``: frames go one by one."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def send_message(self, text: str) -> None:
        self.sent.append(text)


async def test_a_websocket_without_the_parts_sends_one_frame_at_a_time() -> None:
    plain = _PlainSocket()
    ws: Any = plain
    await frames_sender(ws)(["a", "b", "c"])
    assert plain.sent == ["a", "b", "c"]
