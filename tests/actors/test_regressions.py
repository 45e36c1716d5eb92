"""Bugs found in review of the kernel, each pinned by the test that showed it."""

from __future__ import annotations

import functools
from typing import Any

import pytest
import trio
import trio.testing

from loopactors.actors import Actor, Backoff, ChildSpec, ErrorReply, Node, Supervisor, open_node
from loopactors.errors import CallTimeout, ChildStartError
from tests.hang import HANG

from .helpers import Boom, Crash, Worker


class SlowStart(Actor[Any]):
    async def on_start(self) -> None:
        await trio.sleep(2)

    async def handle(self, message: Any) -> Any:
        return message


async def test_host_cancelling_a_starting_node_does_not_hang(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.move_on_after(1) as scope:  # the host gives up while a child is starting
        async with open_node([ChildSpec("slow", SlowStart)]):
            pytest.fail("the block must not run")
    assert scope.cancelled_caught
    assert trio.current_time() == pytest.approx(1.0)


class WindsDown(Actor[Any]):
    def __init__(self, label: str, log: list[str]) -> None:
        self.label = label
        self.log = log

    async def handle(self, message: Any) -> Any:
        raise Boom("crash on request")

    async def on_stop(self, reason: BaseException | None) -> None:
        if reason is None:
            await trio.sleep(3)
            self.log.append(f"{self.label} stopped cleanly")


async def test_a_backoff_timer_firing_during_shutdown_is_harmless(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[str] = []
    async with open_node() as node:
        sup = await node.start_child(
            ChildSpec(
                "sup",
                lambda: Supervisor(
                    [
                        ChildSpec("a", lambda: WindsDown("a", log), shutdown=10),
                        ChildSpec("b", lambda: WindsDown("b", log), name="b"),
                    ],
                    backoff=Backoff(initial=1.0),
                ),
                restart="temporary",
            )
        )
        b = node.whereis("b")
        assert b is not None
        b.cast_nowait("crash")  # restart of b due in 1 s
        await trio.sleep(0.01)
        await node.terminate_child("sup")  # a's graceful stop takes 3 s, past the backoff
        assert sup._cell.exit_reason is None
    assert log == ["a stopped cleanly"]


def bad_factory() -> Worker:
    raise RuntimeError("factory failed")


@pytest.mark.parametrize("second", ["duplicate name", "factory raises"])
async def test_any_failure_to_create_a_static_child_stops_the_others_gracefully(
    second: str,
) -> None:
    log: list[tuple[str, str]] = []
    specs = [ChildSpec("a", functools.partial(Worker, "a", log), name="x")]
    if second == "duplicate name":
        specs.append(ChildSpec("b", functools.partial(Worker, "b", log), name="x"))
    else:
        specs.append(ChildSpec("b", bad_factory))
    with pytest.raises(ChildStartError, match="could not start child 'b'"):
        async with open_node(specs):
            pytest.fail("the block must not run")
    assert log == [("a", "start"), ("a", "stop")]


async def test_a_factory_failing_on_restart_counts_towards_intensity(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls = 0

    def flaky() -> Worker:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError("factory failed once")
        return Worker("w")

    async with open_node() as node:
        sup = await node.start_child(
            ChildSpec("sup", lambda: Supervisor([ChildSpec("w", flaky, name="w")], max_restarts=5))
        )
        w = node.whereis("w")
        assert w is not None
        await w.cast(Crash())
        await trio.testing.wait_all_tasks_blocked()
        assert sup.alive
        assert calls == 3  # the failed restart was retried by the strategy
        assert node.whereis("w") is not None


class BackgroundCrashWhileStarting(Actor[Any]):
    uses_nursery = True

    def __init__(self, stops: list[BaseException | None]) -> None:
        self.stops = stops

    async def on_start(self) -> None:
        async def fail() -> None:
            raise Boom("background task failed during on_start")

        self.nursery.start_soon(fail)
        await trio.sleep(1)

    async def handle(self, message: Any) -> Any:
        return message

    async def on_stop(self, reason: BaseException | None) -> None:
        self.stops.append(reason)


async def test_a_background_crash_during_start_is_a_failed_start(actor_node: Node) -> None:
    stops: list[BaseException | None] = []
    with pytest.raises(ChildStartError) as info:
        await actor_node.start_child(
            ChildSpec("c", functools.partial(BackgroundCrashWhileStarting, stops))
        )
    assert isinstance(info.value.__cause__, Boom)
    assert stops == []  # never started, so never stopped


async def test_a_supervisor_child_refuses_a_bounded_mailbox(actor_node: Node) -> None:
    with pytest.raises(ChildStartError, match="leave its mailbox_size unset"):
        await actor_node.start_child(ChildSpec("sup", Supervisor, mailbox_size=10))


async def test_an_error_reply_of_too_slow_is_not_a_call_timeout(actor_node: Node) -> None:
    class Refuser(Actor[Any]):
        async def handle(self, message: Any) -> Any:
            return ErrorReply(trio.TooSlowError("upstream too slow"))

    ref = await actor_node.spawn(Refuser)
    with pytest.raises(trio.TooSlowError, match="upstream too slow"):
        await ref.call("x", timeout=5)
    with pytest.raises(CallTimeout):
        await ref.call("x", timeout=0)


async def test_abandoned_deferred_replies_are_forgotten(
    actor_node: Node, autojump_clock: trio.testing.MockClock
) -> None:
    class Deferrer(Actor[Any]):
        async def handle(self, message: Any) -> Any:
            self.defer_reply()

    ref = await actor_node.spawn(Deferrer)
    for _ in range(100):
        with trio.move_on_after(0.1):
            await ref.call("x", timeout=None)
    assert ref.statistics().deferred_replies == 0


async def test_on_stop_runs_once_when_a_background_task_fails_meanwhile(
    actor_node: Node, autojump_clock: trio.testing.MockClock
) -> None:
    stops: list[BaseException | None] = []

    class StopTwice(Actor[Any]):
        uses_nursery = True

        async def on_start(self) -> None:
            self.stopping = trio.Event()

            async def fail_while_stopping() -> None:
                await self.stopping.wait()
                raise RuntimeError("background task fails while winding down")

            self.nursery.start_soon(fail_while_stopping)

        async def handle(self, message: Any) -> Any:
            self.stop()

        async def on_stop(self, reason: BaseException | None) -> None:
            stops.append(reason)
            self.stopping.set()
            await trio.sleep(1)

    ref = await actor_node.spawn(StopTwice)
    await ref.cast("quit")
    await trio.sleep(10)
    assert stops == [None]
    assert isinstance(ref._cell.exit_reason, type(None))


def test_run_node_raises_an_error_from_main_unwrapped() -> None:
    from loopactors.actors import run_node

    async def main(node: Node) -> None:
        raise KeyError("from main")

    with pytest.raises(KeyError, match="from main"):
        run_node(main=main)


async def test_a_child_that_is_done_at_once_still_starts_cleanly(actor_node: Node) -> None:
    class Quick(Actor[Any]):
        async def on_start(self) -> None:
            self.ref.cast_nowait("go")

        async def handle(self, message: Any) -> Any:
            self.stop()  # finished before its supervisor even resumed

    ref = await actor_node.start_child(ChildSpec("quick", Quick, restart="transient"))
    await trio.testing.wait_all_tasks_blocked()
    assert not ref.alive
    assert await actor_node.supervisor.which_children() == []  # dynamic + normal exit: gone


class StartsOnlyWhenOpen(Actor[Any]):
    """Fails to start while ``gate["open"]`` is false (a sibling it needs is down)."""

    def __init__(self, gate: dict[str, bool]) -> None:
        self.gate = gate

    async def on_start(self) -> None:
        if not self.gate["open"]:
            raise Boom("a sibling this child needs is down")

    async def handle(self, message: Any) -> Any:
        return message


async def test_a_child_whose_restarts_keep_failing_does_not_starve_the_supervisor() -> None:
    """Found by `loopactors stress --crash-rate`: each failed restart was retried from the
    supervisor's self-queue, which is handled before its mailbox, so a supervisor with a
    generous restart intensity spun on the retries and never read the message (a sibling's
    exit, a StartChild) that would have let the child start again. Real time on purpose:
    the bug is a busy loop, which virtual time would never leave."""
    from loopactors.actors import SupervisorRef
    from loopactors.testing import inject_crash

    gate = {"open": True}
    inner = ChildSpec(
        "flaky", functools.partial(StartsOnlyWhenOpen, gate), name="flaky", restart="permanent"
    )
    spec = ChildSpec(
        "sup",
        functools.partial(Supervisor, [inner], max_restarts=1_000_000_000, max_seconds=1.0),
        name="sup",
    )
    async with open_node([spec]) as node:
        sup = node.whereis("sup")
        assert sup is not None
        gate["open"] = False
        inject_crash(node, "flaky")
        await trio.sleep(0.01)  # the restarts are failing now
        with trio.fail_after(HANG):
            stats = await SupervisorRef(sup).statistics()  # answered between two retries
        assert stats.restarts >= 1
        gate["open"] = True
        with trio.fail_after(HANG):
            while node.whereis("flaky") is None:
                await trio.sleep(0.01)
