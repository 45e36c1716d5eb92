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
from tests.hang import HANG

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


class SlowStarter(Sleeper):
    """A sleeper whose on_start waits ``start_wait`` seconds, and which first handles the
    ``first`` message it casts itself (before it sleeps)."""

    def __init__(
        self,
        label: str,
        log: list[tuple[str, str]],
        start_wait: float | None = None,
        first: Any = None,
    ) -> None:
        super().__init__(label, log)
        self.start_wait = start_wait
        self.first = first

    async def on_start(self) -> None:
        await super().on_start()
        if self.start_wait is not None:
            await trio.sleep(self.start_wait)
        if self.first is not None:
            self.ref.cast_nowait(self.first)


async def test_a_kill_in_a_batch_start_ends_that_sleeper_only(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Sleepers of a batch start one after another in one task, under one cancel scope: a
    kill of one while it starts (or handles its first message) ends that one as a kill of
    an actor with a scope of its own would; those after it start in a new scope."""
    log: list[tuple[str, str]] = []
    options: dict[str, dict[str, Any]] = {
        "s1": {"start_wait": 100.0},  # killed while it starts
        "s2": {"start_wait": 0.0},  # a checkpoint: a cancelled scope would end it
        "s3": {"first": Sleep(100.0)},  # killed while it handles its first message
    }

    def spec(i: int) -> ChildSpec:
        label = f"s{i}"
        # Only the first incarnation is slow: a restart starts at once.
        return ChildSpec(
            label, lambda: SlowStarter(label, log, **options.pop(label, {})), name=label
        )

    results: list[Any] = []
    with trio.fail_after(HANG):  # virtual time: a start that never ends fails at once
        await _start_and_kill(results, spec)
    assert log.count(("s3", "start")) == 2
    assert ("s1", "stop") not in log  # a kill skips the stop hook
    assert [e for e in log if e[0] == "s3"] == [("s3", "start"), ("s3", "start"), ("s3", "stop")]


async def _start_and_kill(results: list[Any], spec: Any) -> None:
    async with open_node() as node:
        async with trio.open_nursery() as nursery:

            async def start() -> None:
                results.extend(await node.supervisor.start_children([spec(i) for i in range(5)]))

            nursery.start_soon(start)
            await settle()
            first = node.whereis("s1")
            assert first is not None
            cell_of(first).kill()
            await trio.sleep(1)
            third = node.whereis("s3")
            assert third is not None
            assert not cell_of(third).dormant  # handling its first message
            cell_of(third).kill()
        assert isinstance(results[1], BaseException)
        assert "killed while starting" in str(results[1])
        for i in (0, 2, 4):
            assert cell_of(results[i]).dormant
            assert await results[i].call(Ping(i)) == Ping(i)
        assert not results[3].alive
        again = node.whereis("s3")  # restarted by the supervisor, as after any kill
        assert again is not None
        assert again != results[3]
        await settle()
        assert await again.call(Ping(3)) == Ping(3)
        assert node.whereis("s1") is None
