from __future__ import annotations

from loopactors.client import connect

from .conftest import LiveNode


async def test_start_and_wait_over_the_wire(live_node: LiveNode) -> None:
    async with connect(live_node.url, token=live_node.token) as node:
        assert node.info.protocol == 1
        state = await node.start("|loop:3,fresh| say hi", worker="scripted")
        final = await node.wait(state.loop_id)
        assert final.phase == "complete"
        assert final.completed_rounds == 3
        rounds = await node.history(state.loop_id)
        assert [r.round for r in rounds] == [1, 2, 3]
