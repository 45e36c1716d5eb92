"""A round transport added with no edit under ``loopactors/``: registered for its URL
scheme, it carries a loop's rounds, on a worker kind added the same way, to child processes,
and passes on the stops and timeouts the runtime decides."""

from __future__ import annotations

import os

import pytest
import trio

from loopactors.errors import ConfigError
from loopactors.loops import RoundStarted
from loopactors.runtime import RuntimeConfig, open_runtime
from tests.hang import HANG

from . import subproc_transport as plugin


async def test_a_loop_runs_on_the_new_kind_over_the_new_transport(
    reverse_kind: str, subproc_transport: str
) -> None:
    async with open_runtime(RuntimeConfig(store="memory", transport=subproc_transport)) as rt:
        handle = rt.handle(await rt.start("|loop:2,fresh| stressed", worker="reverse:shout=yes"))
        final = await handle.wait()
        history = await handle.history()
    assert final.phase == "complete"
    assert [record.output for record in history] == ["DESSERTS", "DESSERTS"]
    pids = {plugin.RAN[f"{handle.loop_id}:{n}"] for n in (1, 2)}
    assert os.getpid() not in pids  # each ran in a child process


async def test_a_stop_reaches_the_round_on_the_new_transport(
    reverse_kind: str, subproc_transport: str
) -> None:
    async with open_runtime(RuntimeConfig(store="memory", transport=subproc_transport)) as rt:
        # Subscribed before the start: the round may start before start() returns.
        with rt.subscribe() as events, trio.fail_after(HANG):
            handle = rt.handle(await rt.start("|loop:3| x", worker="reverse:sleep=600"))
            async for event in events:
                if isinstance(event, RoundStarted) and event.loop_id == handle.loop_id:
                    break
        final = await handle.stop()
        history = await handle.history()
    assert final.phase == "cancelled"
    assert [record.status for record in history] == ["cancelled"]
    assert f"{handle.loop_id}:1" in plugin.CANCELLED


async def test_the_round_timeout_holds_on_the_new_transport(
    reverse_kind: str, subproc_transport: str
) -> None:
    """Real time (the round is a real process): the timeout is what is tested, the child
    sleeps far longer whatever the machine's load."""
    config = RuntimeConfig(store="memory", transport=subproc_transport)
    async with open_runtime(config) as rt:
        handle = rt.handle(
            await rt.start(
                "|loop:1| x",
                worker="reverse:sleep=600",
                round_timeout=1,
                max_consecutive_failures=1,
            )
        )
        await handle.wait()
        history = await handle.history()
    assert [record.status for record in history] == ["timed_out"]
    assert "timeout of 1" in (history[0].error or "")


def test_a_bad_url_of_the_transport_is_refused_by_the_transport(subproc_transport: str) -> None:
    with pytest.raises(ConfigError, match="subproc:// takes nothing after it"):
        RuntimeConfig(transport="subproc://somewhere")
    with pytest.raises(ConfigError, match=r"unknown transport 'nope'; accepted: .*subproc://"):
        RuntimeConfig(transport="nope://x")
