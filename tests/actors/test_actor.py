"""Actors, mailboxes, cast and call."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing

from loopactors.actors import Actor, ErrorReply, Node, PendingReply
from loopactors.errors import (
    ActorNotRunning,
    CallFailed,
    CallTimeout,
    CallToSelf,
    ChildStartError,
    MailboxFull,
)
from loopactors.testing import InjectedCrash, inject_crash
from tests.hang import HANG

from .helpers import Boom, Crash, Ping, Quit, Sleep, Worker


class Batches(Actor[Any]):
    """Records the size of each batch it drains."""

    def __init__(self) -> None:
        self.current = 0
        self.batches: list[int] = []
        self.handled: list[int] = []

    async def handle(self, message: Any) -> Any:
        self.current += 1
        self.handled.append(message.value)
        return len(self.handled)

    async def on_drained(self) -> None:
        self.batches.append(self.current)
        self.current = 0


async def test_messages_are_handled_one_at_a_time_in_order(actor_node: Node) -> None:
    class Overlap(Actor[Any]):
        def __init__(self) -> None:
            self.inside = 0
            self.max_inside = 0
            self.order: list[int] = []

        async def handle(self, message: Any) -> Any:
            self.inside += 1
            self.max_inside = max(self.max_inside, self.inside)
            await trio.lowlevel.checkpoint()
            self.order.append(message.value)
            self.inside -= 1

    actor = Overlap()
    ref = await actor_node.spawn(lambda: actor)
    for i in range(50):
        await ref.cast(Ping(i))
    await ref.call(Ping(-1))
    assert actor.order == [*range(50), -1]
    assert actor.max_inside == 1


async def test_queued_messages_are_drained_as_one_batch(actor_node: Node) -> None:
    actor = Batches()
    ref = await actor_node.spawn(lambda: actor)
    for i in range(100):
        ref.cast_nowait(Ping(i))
    await ref.call(Ping(100))
    # One wake-up handled all 100 casts and the call: a single batch of 101.
    assert actor.batches == [101]
    assert actor.handled == list(range(101))


async def test_cast_with_room_has_no_schedule_point(actor_node: Node) -> None:
    ref = await actor_node.spawn(Batches)
    with trio.testing.assert_no_checkpoints():
        for i in range(10):
            await ref.cast(Ping(i))


async def test_cast_waits_when_the_mailbox_is_full(
    actor_node: Node, autojump_clock: trio.testing.MockClock
) -> None:
    worker = Worker("w")
    ref = await actor_node.spawn(lambda: worker, mailbox_size=2)
    await ref.cast(Sleep(1.0))  # occupies the actor
    await trio.testing.wait_all_tasks_blocked()
    await ref.cast(Ping(1))
    await ref.cast(Ping(2))
    assert ref.statistics().mailbox_used == 2
    with pytest.raises(MailboxFull, match=r"mailbox of actor .* is full \(2 messages\)"):
        ref.cast_nowait(Ping(3))
    done = trio.Event()

    async def producer() -> None:
        await ref.cast(Ping(3))  # backpressure: waits until the actor takes one
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(producer)
        await trio.testing.wait_all_tasks_blocked()
        assert not done.is_set()
        assert ref.statistics().senders_waiting == 1
        await done.wait()
    assert await ref.call(Ping(4)) == Ping(4)
    assert [m for m in worker.seen if isinstance(m, Ping)] == [Ping(i) for i in range(1, 5)]


async def test_call_returns_the_handler_value(actor_node: Node) -> None:
    ref = await actor_node.spawn(lambda: Worker("w"))
    assert await ref.call(Ping(7)) == Ping(7)


async def test_call_timeout_and_late_reply_is_dropped(
    actor_node: Node, autojump_clock: trio.testing.MockClock
) -> None:
    worker = Worker("w")
    ref = await actor_node.spawn(lambda: worker)
    with pytest.raises(CallTimeout, match=r"did not reply within 1\.0 s"):
        await ref.call(Sleep(5.0), timeout=1.0)
    # The handler finishes later; its reply goes nowhere and the actor keeps serving.
    assert await ref.call(Ping(1), timeout=10.0) == Ping(1)
    assert ref.alive
    assert worker.seen == [Sleep(5.0), Ping(1)]


async def test_call_cancelled_by_caller_leaves_actor_healthy(actor_node: Node) -> None:
    ref = await actor_node.spawn(lambda: Worker("w"))
    with trio.move_on_after(0.01):
        await ref.call(Sleep(0.05), timeout=None)
    assert await ref.call(Ping(2)) == Ping(2)


async def test_call_to_an_actor_that_crashes_fails_with_the_cause(actor_node: Node) -> None:
    ref = await actor_node.spawn(lambda: Worker("w"))
    with pytest.raises(CallFailed, match="crashed before it replied") as info:
        await ref.call(Crash("kaput"), timeout=None)
    assert isinstance(info.value.reason, Boom)
    assert isinstance(info.value.__cause__, Boom)
    assert str(info.value.__cause__) == "kaput"
    assert not ref.alive


async def test_calls_queued_behind_a_crash_fail_promptly(actor_node: Node) -> None:
    ref = await actor_node.spawn(lambda: Worker("w"))
    results: list[BaseException] = []

    async def caller() -> None:
        try:
            await ref.call(Ping(1), timeout=None)  # no timeout: only the crash can end it
        except CallFailed as exc:
            results.append(exc)

    await ref.cast(Sleep(0.01))
    await ref.cast(Crash())
    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(caller)
    assert len(results) == 3
    assert all(isinstance(r.__cause__, Boom) for r in results)


async def test_call_pending_when_the_actor_stops_fails(actor_node: Node) -> None:
    class Stopper(Actor[Any]):
        async def handle(self, message: Any) -> Any:
            self.defer_reply()  # never answered
            self.stop()

    ref = await actor_node.spawn(Stopper)
    with pytest.raises(CallFailed, match="stopped before it replied") as info:
        await ref.call(Ping(), timeout=None)
    assert info.value.reason is None


async def test_call_pending_when_the_actor_is_terminated_fails(
    actor_node: Node, autojump_clock: trio.testing.MockClock
) -> None:
    ref = await actor_node.spawn(lambda: Worker("w"), name="w", restart="permanent")
    async with trio.open_nursery() as nursery:
        failures: list[CallFailed] = []

        async def caller() -> None:
            with pytest.raises(CallFailed) as info:
                await ref.call(Sleep(10), timeout=None)
            failures.append(info.value)

        nursery.start_soon(caller)
        await trio.testing.wait_all_tasks_blocked()
        inject_crash(actor_node, "w")  # queued behind the sleep...
        await actor_node.supervisor.terminate_child("w")  # ...but a stop comes first
    assert len(failures) == 1


async def test_call_pending_across_a_crash_restart_fails(actor_node: Node) -> None:
    class Holder(Actor[Any]):
        async def handle(self, message: Any) -> Any:
            if isinstance(message, Crash):
                raise Boom("x")
            self.defer_reply()
            return None

    old = await actor_node.spawn(Holder, name="h", restart="permanent")
    async with trio.open_nursery() as nursery:

        async def caller() -> None:
            with pytest.raises(CallFailed):
                await old.call(Ping(), timeout=None)

        nursery.start_soon(caller)
        await trio.testing.wait_all_tasks_blocked()
        await old.cast(Crash())
    new = actor_node.whereis("h")
    assert new is not None
    assert new != old
    assert new.alive
    with pytest.raises(ActorNotRunning, match="'h' is not running \\(it crashed: Boom"):
        await old.cast(Ping())


async def test_sending_to_an_exited_actor_raises(actor_node: Node) -> None:
    ref = await actor_node.spawn(lambda: Worker("w"))
    assert await ref.call(Quit()) == "bye"
    await trio.testing.wait_all_tasks_blocked()
    assert not ref.alive
    with pytest.raises(ActorNotRunning):
        ref.cast_nowait(Ping())
    with pytest.raises(ActorNotRunning):
        await ref.cast(Ping())
    with pytest.raises(ActorNotRunning):
        await ref.call(Ping())


async def test_actor_calling_itself_gets_a_clear_error(actor_node: Node) -> None:
    class SelfCaller(Actor[Any]):
        async def handle(self, message: Any) -> Any:
            try:
                await self.ref.call(Ping(), timeout=None)
            except CallToSelf as exc:
                return str(exc)
            return "no error"

    ref = await actor_node.spawn(SelfCaller)
    answer = await ref.call(Ping(), timeout=HANG)
    assert "called itself" in answer


async def test_actor_casting_itself_never_deadlocks(actor_node: Node) -> None:
    class Echoer(Actor[Any]):
        mailbox_size = 2

        def __init__(self) -> None:
            self.got: list[int] = []
            self.refused: list[str] = []

        async def handle(self, message: Any) -> Any:
            self.got.append(message.value)
            if message.value == 0:
                # Far more self-casts than the mailbox holds: they wait in the self-queue
                # (never blocking); past its bound they are refused with a clear error.
                for i in range(1, 1100):
                    try:
                        await self.ref.cast(Ping(i))
                    except MailboxFull as exc:
                        self.refused.append(str(exc))
            return None

    actor = Echoer()
    ref = await actor_node.spawn(lambda: actor)
    await ref.call(Ping(0), timeout=HANG)
    await ref.call(Ping(-1), timeout=HANG)
    # Self-casts keep their order and are handled before the later external message.
    assert actor.got == [0, *range(1, 1025), -1]
    assert len(actor.refused) == 1099 - 1024
    assert "self-queue is full" in actor.refused[0]


async def test_self_casts_are_not_starved_by_a_busy_producer(actor_node: Node) -> None:
    class Busy(Actor[Any]):
        mailbox_size = 2

        def __init__(self) -> None:
            self.seen: list[int] = []

        async def handle(self, message: Any) -> Any:
            await trio.lowlevel.checkpoint()  # lets the producer refill the mailbox
            if message.value == 0:
                await self.ref.cast(Ping(-1))
            self.seen.append(message.value)

    actor = Busy()
    ref = await actor_node.spawn(lambda: actor)
    await ref.cast(Ping(0))
    for i in range(1, 200):
        await ref.cast(Ping(i))
    await ref.call(Ping(1000))
    assert actor.seen.index(-1) == 1  # right after the message that sent it


async def test_a_crash_takes_down_only_that_actor(actor_node: Node) -> None:
    a = await actor_node.spawn(lambda: Worker("a"))
    b = await actor_node.spawn(lambda: Worker("b"))
    with pytest.raises(CallFailed):
        await a.call(Crash())
    assert not a.alive
    assert b.alive
    assert await b.call(Ping(3)) == Ping(3)


async def test_error_reply_refuses_one_request_and_keeps_serving(actor_node: Node) -> None:
    class Picky(Actor[Any]):
        async def handle(self, message: Any) -> Any:
            if message.value < 0:
                return ErrorReply(ValueError(f"value must be >= 0, got {message.value}"))
            return message.value * 2

    ref = await actor_node.spawn(Picky)
    with pytest.raises(ValueError, match="value must be >= 0, got -1"):
        await ref.call(Ping(-1))
    assert await ref.call(Ping(4)) == 8


async def test_deferred_replies(actor_node: Node) -> None:
    class Batcher(Actor[Any]):
        def __init__(self) -> None:
            self.waiting: list[PendingReply] = []

        async def handle(self, message: Any) -> Any:
            self.waiting.append(self.defer_reply())

        async def on_drained(self) -> None:
            for i, pending in enumerate(self.waiting):
                pending.reply(i)
            self.waiting.clear()

    ref = await actor_node.spawn(Batcher)
    results: list[int] = []

    async def caller() -> None:
        results.append(await ref.call(Ping()))

    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(caller)
    assert sorted(results) == [0, 1, 2, 3, 4]
    assert ref.statistics().deferred_replies == 0


async def test_defer_reply_outside_a_call_is_an_error(actor_node: Node) -> None:
    class Wrong(Actor[Any]):
        async def handle(self, message: Any) -> Any:
            self.defer_reply()

    ref = await actor_node.spawn(Wrong)
    await ref.cast(Ping())
    await trio.testing.wait_all_tasks_blocked()
    assert not ref.alive
    assert isinstance(ref._cell.exit_reason, RuntimeError)


async def test_hooks_run_in_order(actor_node: Node) -> None:
    log: list[tuple[str, str]] = []
    ref = await actor_node.spawn(lambda: Worker("w", log))
    assert log == [("w", "start")]
    await ref.call(Quit())
    await trio.testing.wait_all_tasks_blocked()
    assert log == [("w", "start"), ("w", "stop")]
    ref2 = await actor_node.spawn(lambda: Worker("v", log))
    with pytest.raises(CallFailed):
        await ref2.call(Crash())
    await trio.testing.wait_all_tasks_blocked()
    assert log[-1] == ("v", "crash")


async def test_background_task_crash_crashes_the_actor(actor_node: Node) -> None:
    stopped: list[BaseException | None] = []

    class WithTasks(Actor[Any]):
        uses_nursery = True

        async def handle(self, message: Any) -> Any:
            async def fail() -> None:
                raise Boom("background")

            self.nursery.start_soon(fail)
            self.defer_reply()

        async def on_stop(self, reason: BaseException | None) -> None:
            stopped.append(reason)

    ref = await actor_node.spawn(WithTasks)
    with pytest.raises(CallFailed) as info:
        await ref.call(Ping(), timeout=None)
    assert isinstance(info.value.__cause__, Boom)
    assert len(stopped) == 1
    assert isinstance(stopped[0], Boom)


async def test_nursery_needs_the_class_flag(actor_node: Node) -> None:
    class NoTasks(Actor[Any]):
        async def handle(self, message: Any) -> Any:
            try:
                self.nursery  # noqa: B018
            except RuntimeError as exc:
                return str(exc)
            return "had one"

    ref = await actor_node.spawn(NoTasks)
    assert "uses_nursery = True" in await ref.call(Ping())


async def test_inject_crash(actor_node: Node) -> None:
    log: list[tuple[str, str]] = []
    ref = await actor_node.spawn(lambda: Worker("w", log), name="w")
    inject_crash(actor_node, "w")
    await trio.testing.wait_all_tasks_blocked()
    assert not ref.alive
    assert isinstance(ref._cell.exit_reason, InjectedCrash)
    assert log[-1] == ("w", "crash")
    with pytest.raises(ActorNotRunning, match="no live actor is registered as 'nobody'"):
        inject_crash(actor_node, "nobody")


async def test_bad_arguments_are_rejected(actor_node: Node) -> None:
    ref = await actor_node.spawn(lambda: Worker("w"))
    with pytest.raises(ValueError, match="call timeout must be >= 0"):
        await ref.call(Ping(), timeout=-1)
    with pytest.raises(ChildStartError, match="mailbox size must be"):
        await actor_node.spawn(lambda: Worker("x"), mailbox_size=-3)
    stats = ref.statistics()
    assert stats.alive
    assert stats.mailbox_capacity == 1024
    assert stats.mailbox_used == 0


async def test_abstract_handle_is_required() -> None:
    class Incomplete(Actor[Any]):
        pass

    with pytest.raises(TypeError, match="abstract"):
        Incomplete()  # type: ignore[abstract]


async def test_senders_waiting_for_room_go_in_the_order_they_came(
    actor_node: Node, autojump_clock: trio.testing.MockClock
) -> None:
    worker = Worker("w")
    ref = await actor_node.spawn(lambda: worker, mailbox_size=0)  # hand over, or wait
    await ref.cast(Sleep(1.0))  # the actor was idle: it takes this one at once
    await trio.testing.wait_all_tasks_blocked()
    with pytest.raises(MailboxFull):
        ref.cast_nowait(Ping(0))
    async with trio.open_nursery() as nursery:
        for i in range(1, 4):
            nursery.start_soon(ref.cast, Ping(i))
            await trio.testing.wait_all_tasks_blocked()
        assert ref.statistics().senders_waiting == 3
    assert await ref.call(Ping(4)) == Ping(4)
    assert [m for m in worker.seen if isinstance(m, Ping)] == [Ping(i) for i in range(1, 5)]
