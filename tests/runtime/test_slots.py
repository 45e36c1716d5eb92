"""The Dispatcher's concurrency slots: counted, handed over in FIFO order, never leaked."""

from __future__ import annotations

import trio
import trio.testing

from loopactors.runtime._inprocess import Slots


async def test_free_slots_are_taken_at_once_and_then_refused() -> None:
    slots = Slots(2)
    with trio.testing.assert_no_checkpoints():
        assert slots.take_nowait()
        assert slots.take_nowait()
        assert not slots.take_nowait()
    slots.release()
    assert slots.take_nowait()
    assert slots.used == 2


async def test_a_released_slot_goes_to_the_oldest_waiter() -> None:
    slots = Slots(1)
    assert slots.take_nowait()
    order: list[int] = []

    async def wait_for_slot(i: int) -> None:
        await slots.take()
        order.append(i)

    async with trio.open_nursery() as nursery:
        for i in range(3):
            nursery.start_soon(wait_for_slot, i)
            await trio.testing.wait_all_tasks_blocked()
        assert not slots.take_nowait()  # waiters come first, even for a newcomer
        for _ in range(3):
            slots.release()
            await trio.testing.wait_all_tasks_blocked()
    assert order == [0, 1, 2]
    assert slots.used == 1  # the last waiter still holds it
    slots.release()
    assert slots.used == 0


async def test_a_cancelled_waiter_takes_no_slot() -> None:
    slots = Slots(1)
    assert slots.take_nowait()
    with trio.move_on_after(0.01):
        await slots.take()
    slots.release()
    assert slots.used == 0
    assert slots.take_nowait()
