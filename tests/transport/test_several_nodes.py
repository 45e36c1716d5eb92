"""Several nodes on one Redis (docs/scale-out.md, "Several nodes on one Redis").

Each named node reads its own results stream; a round's report goes to the node that waits
for it now. A node that takes a loop over from another (a takeover on a shared store; here
the second node opens the first one's SQLite store under another name) adopts a round still
running on a worker, or moves a report already made to the other node's stream: the round
runs once either way. Real redis-server, real `loopactors worker` processes.
"""

from __future__ import annotations

import contextlib
import logging
import shlex
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from loopactors.runtime import BreakerSettings, RuntimeConfig, open_runtime
from loopactors.transport._node import RedisTransport
from loopactors.transport._redis import open_redis
from loopactors.transport._status import collect
from loopactors.transport._wire import NODE_GROUP, RESULTS_STREAM, results_stream, route_key
from loopactors.workers import RoundRequest, RoundResult
from tests.hang import HANG

from .conftest import RedisServer, Workers, wait_until
from .test_scale_out import NAMED, pending


def config(state: Path, url: str, name: str) -> RuntimeConfig:
    return RuntimeConfig(
        store="sqlite",
        state_dir=state,
        transport=url,
        node_name=name,
        breaker=BreakerSettings(stale_rounds_limit=100),
    )


async def stream_length(url: str, stream: str) -> int:
    async with open_redis(url, name="loopactors-test") as client:
        return int(await client.xlen(stream))


async def test_two_nodes_on_one_redis_each_get_their_own_rounds_reports(
    tmp_path: Path, redis_server: RedisServer, workers: Workers
) -> None:
    """Before node names, two nodes on one Redis took each other's reports (and held them):
    each one's rounds waited for ever."""
    url = redis_server.url()
    await workers.start(url, "w1", slots=2)
    finals = {}
    async with (
        open_runtime(config(tmp_path / "a", url, "a")) as a,
        open_runtime(config(tmp_path / "b", url, "b")) as b,
    ):
        loop_a = a.handle(await a.start("|loop:3,fresh| on a", worker=NAMED))
        loop_b = b.handle(await b.start("|loop:3,fresh| on b", worker=NAMED))
        with trio.fail_after(HANG):
            finals["a"] = await loop_a.wait()
            finals["b"] = await loop_b.wait()
        status = await collect_status(url)
        # Each report stays on its stream until its round is recorded, then goes.
        await wait_until(lambda: _no_reports(url))
    assert {name: final.phase for name, final in finals.items()} == {
        "a": "complete",
        "b": "complete",
    }
    assert {name: final.completed_rounds for name, final in finals.items()} == {"a": 3, "b": 3}
    assert {results_stream("a"), results_stream("b")} <= set(status)


async def collect_status(url: str) -> list[str]:
    async with open_redis(url, name="loopactors-test") as client:
        return [s.stream for s in (await collect(client)).streams]


async def test_a_round_reported_to_a_node_that_went_is_moved_to_the_node_that_took_over(
    tmp_path: Path, redis_server: RedisServer, workers: Workers
) -> None:
    url = redis_server.url()
    await workers.start(url, "w1")
    marks = tmp_path / "marks"
    slow = "command:" + shlex.join(
        ["sh", "-c", f'echo "start $LOOPACTORS_ROUND" >> {marks}; sleep 1; echo "ran"']
    )
    state = tmp_path / "state"
    async with open_runtime(config(state, url, "a")) as rt:
        loop = await rt.start("|loop:2,fresh| work", worker=slow)

        async def taken() -> bool:
            return await pending(url, "command") == 1

        await wait_until(taken)

    async def reported_to_a() -> bool:
        return await stream_length(url, results_stream("a")) == 1

    await wait_until(reported_to_a)
    async with open_runtime(config(state, url, "b")) as rt:  # b takes the store over
        with trio.fail_after(HANG):
            final = await rt.handle(loop.loop_id).wait()
        rounds = await rt.history(loop.loop_id)
    assert final.phase == "complete"
    assert [(r.round, r.status) for r in rounds] == [(1, "completed"), (2, "completed")]
    assert marks.read_text().splitlines() == ["start 1", "start 2"]  # round 1 ran once
    assert await stream_length(url, results_stream("a")) == 0  # moved, not copied
    assert await stream_length(url, RESULTS_STREAM) == 0


async def test_a_round_running_when_its_node_went_reports_to_the_node_that_took_over(
    tmp_path: Path, redis_server: RedisServer, workers: Workers
) -> None:
    url = redis_server.url()
    await workers.start(url, "w1")
    marks, gate = tmp_path / "marks", tmp_path / "gate"
    script = (
        f'echo "start $LOOPACTORS_ROUND" >> {marks}; '
        f"while [ ! -e {gate} ]; do sleep 0.05; done; echo ran"
    )
    gated = "command:" + shlex.join(["sh", "-c", script])
    state = tmp_path / "state"
    async with open_runtime(config(state, url, "a")) as rt:
        loop = await rt.start("|loop:2,fresh| work", worker=gated)

        async def taken() -> bool:
            return await pending(url, "command") == 1

        await wait_until(taken)
    async with open_runtime(config(state, url, "b")) as rt:  # while the worker still runs
        await wait_until(lambda: _adopted(url, loop.loop_id))
        gate.touch()
        with trio.fail_after(HANG):
            final = await rt.handle(loop.loop_id).wait()
    assert final.phase == "complete"
    assert final.completed_rounds == 2
    assert marks.read_text().splitlines() == ["start 1", "start 2"]  # round 1 ran once
    assert await stream_length(url, results_stream("a")) == 0  # nothing went to a


async def _adopted(url: str, loop_id: str) -> bool:
    """Round 1's route names b's results stream: b adopted the order."""
    async with open_redis(url, name="loopactors-test") as client:
        return bool(await client.get(f"loopactors:route:{loop_id}:1") == results_stream("b"))


@contextlib.asynccontextmanager
async def transport(url: str, name: str) -> AsyncIterator[RedisTransport]:
    """A node's side of the transport alone (no runtime: what the node does between taking
    a round's report and committing it is up to the test)."""
    node = RedisTransport(url, node_name=name)
    async with trio.open_nursery() as nursery:
        await nursery.start(node.serve)
        yield node
        nursery.cancel_scope.cancel()


def request(worker: str, round_number: int = 1) -> RoundRequest:
    return RoundRequest(
        loop_id="chaos-1", round=round_number, rounds=2, mode="fresh", prompt="p", task="p",
        worker=worker,
    )  # fmt: skip


def marked(marks: Path, gate: Path | None = None) -> str:
    """A command round that notes its start in ``marks`` (then waits for ``gate``)."""
    script = f'echo "start $LOOPACTORS_ROUND" >> {marks}; '
    if gate is not None:
        script += f"while [ ! -e {gate} ]; do sleep 0.05; done; "
    return "command:" + shlex.join(["sh", "-c", script + "echo ran"])


@pytest.mark.parametrize("successor", ["b", "a"])
async def test_a_report_taken_by_a_node_that_died_before_recording_it_is_not_lost(
    tmp_path: Path, redis_server: RedisServer, workers: Workers, successor: str
) -> None:
    """Node a takes round 1's report and dies before its store records the round (SIGKILL,
    or frozen past its lease, between the two). The node that dispatches the round next
    (another node that took the loop over, or a restarted a) gets that report: the round
    is not run again."""
    url = redis_server.url()
    await workers.start(url, "w1")
    marks = tmp_path / "marks"
    worker = marked(marks)
    async with transport(url, "a") as a:
        with trio.fail_after(HANG):
            first = await a.run_remote(request(worker), 60.0)
        await wait_until(lambda: _acknowledged(url, "a"))  # it took the report, and dies
    async with transport(url, successor) as then:
        with trio.fail_after(HANG):
            again = await then.run_remote(request(worker), 60.0)
        assert again == first
        then.recorded(("chaos-1:1",))  # its store recorded it: the report goes
        await wait_until(lambda: _no_reports(url))
    assert marks.read_text().splitlines() == ["start 1"]


async def _acknowledged(url: str, name: str) -> bool:
    async with open_redis(url, name="loopactors-test") as client:
        return int((await client.xpending(results_stream(name), NODE_GROUP)).pending) == 0


async def _no_reports(url: str) -> bool:
    """Nothing left on the nodes' results streams, and no round's route or note."""
    async with open_redis(url, name="loopactors-test") as client:
        lengths = [int(await client.xlen(results_stream(n))) for n in "ab"]
        left = await client.keys("loopactors:route:*") | await client.keys("loopactors:reported:*")
        return lengths == [0, 0] and not left


async def test_a_round_adopted_back_by_a_paused_node_still_reports_to_its_owner(
    tmp_path: Path, redis_server: RedisServer, workers: Workers
) -> None:
    """Node a publishes round 1 and is paused past its lease; b takes the loop over and
    adopts the order. Then a wakes and, before it finds it lost its lease, dispatches the
    round it had in hand: it adopts the order back, and goes. b looks at its rounds' routes
    now and then and adopts the order again, so the report still reaches b and the round
    runs once."""
    url = redis_server.url()
    await workers.start(url, "w1")
    marks, gate = tmp_path / "marks", tmp_path / "gate"
    worker = marked(marks, gate)
    result: list[RoundResult] = []
    async with (
        transport(url, "a") as a,
        transport(url, "b") as b,
        trio.open_nursery() as owner,
    ):

        async def wait_on_b() -> None:
            result.append(await b.run_remote(request(worker), 60.0))

        async with trio.open_nursery() as on_a:
            on_a.start_soon(a.run_remote, request(worker), 60.0)
            await wait_until(lambda: _routed(url, "a"))
            owner.start_soon(wait_on_b)
            await wait_until(lambda: _routed(url, "b"))
            on_a.cancel_scope.cancel()  # a is paused: its wait ends with it
        async with trio.open_nursery() as on_a:
            on_a.start_soon(a.run_remote, request(worker), 60.0)  # a wakes and dispatches
            await wait_until(lambda: _routed(url, "a"))
            on_a.cancel_scope.cancel()  # and goes
        await wait_until(lambda: _routed(url, "b"))  # b adopted it again
        gate.touch()
    assert result
    assert result[0].status == "completed"
    assert marks.read_text().splitlines() == ["start 1"]


async def _routed(url: str, name: str) -> bool:
    async with open_redis(url, name="loopactors-test") as client:
        return bool(await client.get(route_key("chaos-1:1")) == results_stream(name))


async def test_a_node_whose_lease_may_have_ended_hands_no_round_to_a_worker(
    tmp_path: Path,
    redis_server: RedisServer,
    workers: Workers,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A node woken from a pause past its lease, a round in hand, publishes nothing until
    its store says its lease holds again (or it stops): the node that took its loop over
    may have run that round already."""
    caplog.set_level(logging.INFO, logger="loopactors.transport")
    url = redis_server.url()
    await workers.start(url, "w1")
    marks = tmp_path / "marks"
    valid = [False]
    node = RedisTransport(url, node_name="a", may_publish=lambda: valid[0])
    result: list[RoundResult] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(node.serve)

        async def dispatch() -> None:
            result.append(await node.run_remote(request(marked(marks)), 60.0))

        nursery.start_soon(dispatch)
        with trio.fail_after(HANG):
            while "lease on its store may have ended" not in caplog.text:
                await trio.sleep(0.05)
        assert await stream_length(url, "loopactors:rounds:command") == 0
        valid[0] = True  # renewed after all: it goes on
        with trio.fail_after(HANG):
            while not result:
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    assert result[0].status == "completed"
    assert marks.read_text().splitlines() == ["start 1"]
