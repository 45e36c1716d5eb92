"""Fault injection (`loopactors.testing.inject_faults`): random crashes that supervision
absorbs, counted; nothing armed outside the block."""

from __future__ import annotations

import functools

import pytest
import trio
import trio.testing

from loopactors.actors import ChildSpec, Supervisor, open_node
from loopactors.testing import FaultInjection, InjectedCrash, inject_faults
from tests.hang import HANG

from .helpers import Ping, Worker


async def test_armed_actors_crash_at_random_and_are_restarted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with inject_faults(0.5, seed=1, exclude={"spared"}) as faults:
        children = [
            ChildSpec("w", functools.partial(Worker, "w"), name="w", restart="permanent"),
            ChildSpec("spared", functools.partial(Worker, "s"), name="spared", restart="permanent"),
        ]
        async with open_node(children, max_restarts=1_000, max_seconds=1.0) as node:
            answered = crashed = 0
            causes: list[BaseException | None] = []
            for i in range(40):
                try:
                    await node.ref("w").call(Ping(i), timeout=1.0)
                    answered += 1
                except Exception as exc:
                    causes.append(exc.__cause__)
                    crashed += 1
                while node.whereis("w") is None:
                    await trio.sleep(0.01)
            for i in range(20):  # never crashes
                await node.ref("spared").call(Ping(i), timeout=1.0)
    assert answered > 0
    assert all(isinstance(cause, InjectedCrash) for cause in causes)
    assert crashed == faults.injected > 0
    assert faults.restarts == crashed == faults.starts["w"] - 1
    assert faults.starts["spared"] == 1


async def test_supervisors_are_never_armed() -> None:
    with inject_faults(1.0, seed=2) as faults:
        inner = functools.partial(Supervisor, [])
        async with open_node([ChildSpec("sup", inner, name="sup")]) as node:
            from loopactors.actors import SupervisorRef

            sup = node.whereis("sup")
            assert sup is not None
            assert (await SupervisorRef(sup).statistics()).restarts == 0
    assert faults.injected == 0


async def test_nothing_is_armed_outside_the_block_or_when_disabled() -> None:
    with inject_faults(1.0) as faults:
        faults.enabled = False
        async with open_node([ChildSpec("w", functools.partial(Worker, "w"), name="w")]) as node:
            assert await node.ref("w").call(Ping(1), timeout=HANG) == Ping(1)
    async with open_node([ChildSpec("w", functools.partial(Worker, "w"), name="w")]) as node:
        await node.ref("w").call(Ping(1), timeout=HANG)
    assert faults.injected == 0
    assert faults.starts["w"] == 1  # the second node's actor was not seen


def test_a_rate_outside_0_to_1_is_refused() -> None:
    with pytest.raises(ValueError, match="between 0 and 1"):
        FaultInjection(1.5)
