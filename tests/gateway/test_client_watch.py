"""``NodeClient.watch``: a coalescing subscription from Python (docs/node.md, "The Python
client"), on a real node over loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import attrs
import pytest
import trio

from loopactors.client import ConnectionLost, NodeClient, RemoteError, RemoteStates, connect
from loopactors.gateway import GatewayHandle, GatewaySettings, open_gateway
from loopactors.loops import LoopState
from loopactors.runtime import LoopHandle, Runtime, open_runtime
from tests.hang import HANG

from .conftest import LiveNode, node_config

LOOPS = 12
ROUNDS = 4


def take(latest: dict[str, LoopState], batch: list[LoopState]) -> None:
    """Keep each loop's newest state, checking a batch never holds a loop twice nor goes
    back in time."""
    ids = [state.loop_id for state in batch]
    assert len(ids) == len(set(ids)), "a loop twice in one batch"
    for state in batch:
        old = latest.get(state.loop_id)
        assert old is None or old.updated_at <= state.updated_at
        latest[state.loop_id] = state


async def test_a_slow_reader_of_every_loop_gets_each_final_state(live_node: LiveNode) -> None:
    async with (
        connect(live_node.url, token=live_node.token) as node,
        await node.watch(every=0.05) as watch,
    ):
        started = [
            await node.start(f"|loop:{ROUNDS},fresh| job {n}", worker="scripted:latency=0.01")
            for n in range(LOOPS)
        ]
        latest: dict[str, LoopState] = {}
        batches = 0
        with trio.fail_after(HANG):
            while len(latest) < LOOPS or not all(s.terminal for s in latest.values()):
                take(latest, await watch.__anext__())
                batches += 1
                await trio.sleep(0.2)  # slower than the node: states wait, none is lost
        assert set(latest) == {state.loop_id for state in started}
        assert all(s.phase == "complete" and s.completed_rounds == ROUNDS for s in latest.values())
        # Each loop had 2 + 2 x ROUNDS state events; a slow reader got far fewer batches.
        assert batches < LOOPS * (2 + 2 * ROUNDS)
    assert watch.closed
    async for _ in watch:
        pytest.fail("a closed watch yields nothing")


async def test_one_loops_watch_sees_only_that_loop(live_node: LiveNode) -> None:
    async with connect(live_node.url, token=live_node.token) as node:
        other = await node.start("|loop:3| other", worker="scripted:latency=0.01")
        mine = await node.start("|loop:2| mine", worker="scripted:latency=0.05")
        async with await node.watch(mine.loop_id, every=0.05) as watch:
            latest: dict[str, LoopState] = {}
            with trio.fail_after(HANG):
                async for batch in watch:
                    take(latest, batch)
                    if latest[mine.loop_id].terminal:
                        break
            assert set(latest) == {mine.loop_id}
            assert latest[mine.loop_id].completed_rounds == 2
        assert (await node.wait(other.loop_id)).phase == "complete"


@pytest.mark.parametrize("every", [0.0, 0.01, 61.0])
async def test_an_interval_out_of_range_is_refused_by_name(
    live_node: LiveNode, every: float
) -> None:
    async with connect(live_node.url, token=live_node.token) as node:
        with pytest.raises(RemoteError) as refused:
            await node.watch(every=every)
        assert refused.value.code == "invalid_request"
        assert "coalesce must be from 0.05 to 60 seconds" in str(refused.value)
        assert not node._subscriptions  # nothing left registered
        assert await node.ping() > 0  # the connection is whole


async def test_an_unknown_loop_is_refused(live_node: LiveNode) -> None:
    async with connect(live_node.url, token=live_node.token) as node:
        with pytest.raises(RemoteError) as refused:
            await node.watch("no-such-loop")
        assert refused.value.code == "not_found"


async def test_a_watch_ends_with_connection_lost_when_the_node_goes(tmp_path: Path) -> None:
    async with (
        open_runtime(node_config(tmp_path)) as runtime,
        open_gateway(runtime, GatewaySettings(port=0)) as gateway,
    ):
        token = gateway.token_path.read_text().strip()
        async with connect(gateway.url, token=token) as node:
            watch = await node.watch(every=0.05)
            await gateway.shutdown("maintenance")
            with trio.fail_after(HANG), pytest.raises(ConnectionLost):
                await watch.__anext__()


async def nothing() -> None:
    pass


@attrs.define
class Restartable:
    """A gateway that can be closed and opened again on the same port."""

    runtime: Runtime
    stack: AsyncExitStack
    gateway: GatewayHandle

    @property
    def url(self) -> str:
        return self.gateway.url

    @property
    def token(self) -> str:
        return self.gateway.token_path.read_text().strip()

    @asynccontextmanager
    async def restart(
        self, meanwhile: Callable[[], Awaitable[None]] = nothing
    ) -> AsyncIterator[None]:
        """Close the gateway, run ``meanwhile``, and open the next one until exited."""
        await self.gateway.shutdown("restart")
        await self.stack.aclose()
        await meanwhile()
        async with open_gateway(self.runtime, GatewaySettings(port=self.gateway.port)):
            yield


@asynccontextmanager
async def reconnecting_client(tmp_path: Path) -> AsyncIterator[tuple[Restartable, NodeClient]]:
    """A node whose gateway can be restarted, and a client that reconnects to it."""
    async with open_runtime(node_config(tmp_path)) as runtime, AsyncExitStack() as stack:
        first = await stack.enter_async_context(open_gateway(runtime, GatewaySettings(port=0)))
        gateway = Restartable(runtime, stack, first)
        async with connect(
            gateway.url, token=gateway.token, reconnect=True, max_backoff=0.05
        ) as node:
            yield gateway, node


def catch_up_raises(monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    async def failing(self: RemoteStates) -> None:
        raise error

    monkeypatch.setattr(RemoteStates, "_catch_up", failing)


async def test_after_a_reconnect_what_changed_meanwhile_is_read_again(tmp_path: Path) -> None:
    async with reconnecting_client(tmp_path) as (gateway, node):
        runtime = gateway.runtime
        old = runtime.handle(
            await runtime.start("|loop:1| ended before the watch", worker="scripted")
        )
        await old.wait()
        shown = await node.start("|loop:1| shown before", worker="scripted:latency=0.01")
        async with await node.watch(every=0.05) as watch:
            latest: dict[str, LoopState] = {}
            with trio.fail_after(HANG):
                while shown.loop_id not in latest or not latest[shown.loop_id].terminal:
                    take(latest, await watch.__anext__())
            # The gateway goes; meanwhile one loop ends and another starts and ends.
            slow = runtime.handle(
                await runtime.start("|loop:1| ends while away", worker="scripted:latency=1")
            )
            unseen: list[LoopHandle] = []

            async def meanwhile() -> None:
                unseen.append(
                    runtime.handle(
                        await runtime.start("|loop:1| all while away", worker="scripted")
                    )
                )
                for handle in (slow, *unseen):
                    await handle.wait()

            async with gateway.restart(meanwhile):
                ids = (slow.loop_id, unseen[0].loop_id)
                with trio.fail_after(HANG):
                    while not all(i in latest and latest[i].terminal for i in ids):
                        batch = await watch.__anext__()
                        # Neither a final state already shown nor a loop that did not
                        # change since the watch opened comes again.
                        assert {s.loop_id for s in batch}.isdisjoint({shown.loop_id, old.loop_id})
                        take(latest, batch)
                assert node.reconnects == 1
                assert latest[slow.loop_id].phase == "complete"
                assert latest[unseen[0].loop_id].phase == "complete"


async def test_a_catch_up_cut_short_by_a_drop_leaves_the_watch_renewed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    catch_up_raises(monkeypatch, ConnectionLost("dropped again"))
    async with reconnecting_client(tmp_path) as (gateway, node):
        watch = await node.watch(every=0.05)
        async with gateway.restart():
            with trio.fail_after(HANG):
                while node.reconnects == 0 or watch.subscription not in node._subscriptions:
                    await trio.sleep(0.01)
            # Still live: a loop started now is seen to its end.
            handle = gateway.runtime.handle(
                await gateway.runtime.start("|loop:1| after", worker="scripted")
            )
            with trio.fail_after(HANG):
                async for batch in watch:
                    if any(s.loop_id == handle.loop_id and s.terminal for s in batch):
                        break


async def test_a_catch_up_the_node_refuses_ends_the_watch_with_its_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    catch_up_raises(monkeypatch, RemoteError("internal", "cannot read the store"))
    async with reconnecting_client(tmp_path) as (gateway, node):
        watch = await node.watch(every=0.05)
        async with gateway.restart():
            with trio.fail_after(HANG), pytest.raises(RemoteError, match="cannot read the store"):
                await watch.__anext__()
            assert watch.closed
            assert not node._subscriptions
