"""Actors that hold no task while idle (``task_while_idle = False``): the same lifecycle as
any actor (calls, casts, stops, crashes, kills, restarts), with a task only while they work."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import trio
import trio.testing

from loopactors.actors import Actor, ChildSpec, Supervisor, SupervisorRef, open_node
from loopactors.errors import CallFailed
from loopactors.testing import inject_crash

from .helpers import Boom, Crash, Ping, Quit, Sleep, Worker


class Sleeper(Worker):
    task_while_idle = False
    mailbox_size = 8


def cell_of(ref: Any) -> Any:
    return ref._cell


async def settle() -> None:
    await trio.testing.wait_all_tasks_blocked()


async def test_an_idle_sleeper_holds_no_task_and_wakes_for_each_message() -> None:
    log: list[tuple[str, str]] = []
    async with open_node() as node:
        ref = await node.start_child(ChildSpec("s", lambda: Sleeper("s", log), name="s"))
        await settle()
        cell = cell_of(ref)
        assert cell.dormant
        assert cell.task is None
        assert ref.alive
        assert await ref.call(Ping(1)) == Ping(1)
        await ref.cast(Ping(2))
        await ref.cast(Ping(3))
        assert await ref.call(Ping(4)) == Ping(4)
        await settle()
        assert cell.dormant
        assert cell.task is None
        assert node.whereis("s") == ref
        # A handler that waits holds its task while it waits, and a stop waits for it.
        await ref.cast(Sleep(1.0))
        await settle()
        assert not cell.dormant
        assert cell.task is not None
    assert log == [("s", "start"), ("s", "stop")]


async def test_a_sleeper_stops_gracefully_and_its_pending_calls_fail_on_a_crash(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[tuple[str, str]] = []
    async with open_node() as node:
        ref = await node.start_child(
            ChildSpec("s", lambda: Sleeper("s", log), restart="transient", name="s")
        )
        assert await ref.call(Quit()) == "bye"
        await settle()
        assert not ref.alive
        assert node.whereis("s") is None
        assert log == [("s", "start"), ("s", "stop")]


@pytest.mark.parametrize("how", ["crash message", "injected crash"])
async def test_a_crashed_sleeper_is_restarted_by_its_supervisor(how: str) -> None:
    log: list[tuple[str, str]] = []
    starts: Counter[str] = Counter()

    def make() -> Sleeper:
        starts["s"] += 1
        return Sleeper("s", log)

    async with open_node() as node:
        ref = await node.start_child(ChildSpec("s", make, name="s"))
        await settle()
        if how == "crash message":
            with pytest.raises(CallFailed) as info:
                await ref.call(Crash("bad"))
            assert isinstance(info.value.__cause__, Boom)
        else:
            inject_crash(node, "s")
        await settle()
        assert not ref.alive
        again = node.whereis("s")
        assert again is not None
        assert again != ref
        assert again.alive
        assert starts["s"] == 2
        assert await again.call(Ping(7)) == Ping(7)
    assert log == [("s", "start"), ("s", "crash"), ("s", "start"), ("s", "stop")]


async def test_killing_a_sleeper_ends_it_without_its_stop_hook() -> None:
    log: list[tuple[str, str]] = []
    async with open_node() as node:
        ref = await node.start_child(ChildSpec("s", lambda: Sleeper("s", log), shutdown=0))
        await settle()
        assert cell_of(ref).dormant
        await node.terminate_child("s")  # a grace of 0: a hard kill at once
        assert not ref.alive
        assert not cell_of(ref).dormant
    assert log == [("s", "start")]


@pytest.mark.parametrize("kind", [Worker, Sleeper])
async def test_a_cancelled_tree_ends_its_sleepers(kind: type[Worker]) -> None:
    """Their supervisor killed, sleepers end as actors with a task do (the same log), and
    release their names."""
    log: list[tuple[str, str]] = []
    async with open_node() as node:
        sup = await node.start_child(
            ChildSpec(
                "sup",
                lambda: Supervisor([ChildSpec("s", lambda: kind("s", log), name="s")]),
                shutdown=0,
            )
        )
        assert len(await SupervisorRef(sup).which_children()) == 1
        await settle()
        ref = node.whereis("s")
        assert ref is not None
        assert cell_of(ref).dormant == (kind is Sleeper)
        await node.terminate_child("sup")
        assert not sup.alive
        assert not ref.alive
        assert node.whereis("s") is None
    assert log == [("s", "start")]


def test_a_sleeper_needs_a_mailbox_and_no_nursery() -> None:
    class WithNursery(Actor[Any]):
        task_while_idle = False
        uses_nursery = True

        async def handle(self, message: Any) -> Any:
            return None

    class NoRoom(Actor[Any]):
        task_while_idle = False
        mailbox_size = 0

        async def handle(self, message: Any) -> Any:
            return None

    async def main() -> None:
        async with open_node() as node:
            with pytest.raises(Exception, match="uses_nursery = True"):
                await node.start_child(ChildSpec("a", WithNursery))
            with pytest.raises(Exception, match="give it room for one"):
                await node.start_child(ChildSpec("b", NoRoom))

    trio.run(main)


async def test_sleepers_started_in_a_batch_all_start_and_sleep() -> None:
    log: list[tuple[str, str]] = []

    def spec(i: int) -> ChildSpec:
        return ChildSpec(f"s{i}", lambda: Sleeper(f"s{i}", log), name=f"s{i}")

    async with open_node() as node:
        results = await node.supervisor.start_children([spec(i) for i in range(5)])
        await settle()
        refs = [r for r in results if not isinstance(r, BaseException)]
        assert len(refs) == 5
        assert all(cell_of(ref).dormant for ref in refs)
        assert [await ref.call(Ping(i)) for i, ref in enumerate(refs)] == [
            Ping(i) for i in range(5)
        ]
    assert sorted(log) == sorted([(f"s{i}", e) for i in range(5) for e in ("start", "stop")])


async def test_a_sleeper_killed_mid_message_is_restarted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A kill while a spell runs ends that spell's task: the handler is cancelled, the
    supervisor restarts the child, and other sleepers' spells go on."""
    log: list[tuple[str, str]] = []
    async with open_node() as node:
        ref = await node.start_child(ChildSpec("s", lambda: Sleeper("s", log), name="s"))
        other = await node.start_child(ChildSpec("o", lambda: Sleeper("o", log), name="o"))
        await ref.cast(Sleep(100.0))
        await settle()
        cell_of(ref).kill()
        await settle()
        assert not ref.alive
        again = node.whereis("s")
        assert again is not None
        assert again != ref
        assert await again.call(Ping(1)) == Ping(1)
        assert await other.call(Ping(2)) == Ping(2)
    assert ("s", "crash") not in log
    assert log.count(("s", "start")) == 2
