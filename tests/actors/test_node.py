"""Nodes: registry, embedding, host cancellation, the standalone entry point."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from typing import Any

import pytest
import trio
import trio.testing

from loopactors.actors import ChildSpec, Node, open_node
from loopactors.errors import ActorNotRunning, NameTaken
from loopactors.testing import inject_crash
from tests.hang import HANG

from .helpers import Ping, Worker, all_tasks
from .test_supervisor import Stubborn, specs


async def test_two_nodes_in_one_process_have_separate_names() -> None:
    async with open_node(name="one") as one, open_node(name="two") as two:
        a = await one.spawn(lambda: Worker("a"), name="shared")
        b = await two.spawn(lambda: Worker("b"), name="shared")
        assert one.whereis("shared") == a
        assert two.whereis("shared") == b
        assert a != b
        await one.terminate_child("shared")
        assert one.whereis("shared") is None
        assert two.whereis("shared") == b


async def test_a_name_follows_the_live_incarnation(actor_node: Node) -> None:
    first = await actor_node.spawn(lambda: Worker("w"), name="w", restart="permanent")
    named = actor_node.ref("w")
    assert await named.call(Ping(1)) == Ping(1)
    inject_crash(actor_node, "w")
    await trio.testing.wait_all_tasks_blocked()
    second = actor_node.whereis("w")
    assert second is not None
    assert second != first
    assert not first.alive
    assert await named.call(Ping(2)) == Ping(2)
    named.cast_nowait(Ping(3))
    await named.cast(Ping(4))
    assert named.alive
    assert named.resolve() == second


async def test_a_name_without_a_live_actor_raises(actor_node: Node) -> None:
    named = actor_node.ref("ghost")
    assert not named.alive
    with pytest.raises(ActorNotRunning, match="no live actor is registered as 'ghost'"):
        await named.call(Ping())


async def test_a_taken_name_is_refused(actor_node: Node) -> None:
    await actor_node.spawn(lambda: Worker("a"), name="dup")
    with pytest.raises(NameTaken, match="'dup' is already registered"):
        await actor_node.start_child(ChildSpec("other-id", lambda: Worker("b"), name="dup"))
    assert actor_node.registry.names() == ["dup"]


async def test_host_cancellation_stops_the_tree_in_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[tuple[str, str]] = []
    starts: Counter[str] = Counter()
    with trio.move_on_after(1.0):
        async with open_node(specs(log, starts)):
            await trio.sleep_forever()
    assert log[3:] == [("c", "stop"), ("b", "stop"), ("a", "stop")]
    assert all_tasks(trio.lowlevel.current_task()) == []  # no orphan left behind


async def test_host_cancellation_is_bounded_by_the_shutdown_grace(
    autojump_clock: trio.testing.MockClock,
) -> None:
    record: list[str] = []
    with trio.move_on_after(1.0):
        async with open_node(
            [ChildSpec("s", lambda: Stubborn(60.0, record), shutdown=30.0)], shutdown_grace=5.0
        ):
            await trio.sleep_forever()
    # Cancelled at 1.0; the child would take 30 s of grace but the node allows 5 s.
    assert record == ["killed at 6.0"]
    assert trio.current_time() == pytest.approx(6.0)


async def test_an_exception_in_the_block_propagates_unwrapped() -> None:
    log: list[tuple[str, str]] = []
    with pytest.raises(KeyError, match="mine"):
        async with open_node(specs(log, Counter(), "a")):
            raise KeyError("mine")
    assert log == [("a", "start"), ("a", "stop")]


async def test_a_node_is_usable_from_plain_trio_code() -> None:
    # The embedding case: no fixture, no set-up call, just open_node in a trio program.
    results: list[Any] = []
    async with open_node() as node, trio.open_nursery() as nursery:
        ref = await node.spawn(lambda: Worker("w"))

        async def client(i: int) -> None:
            results.append(await ref.call(Ping(i)))

        for i in range(10):
            nursery.start_soon(client, i)
    assert sorted(r.value for r in results) == list(range(10))


def test_bad_node_options_are_rejected() -> None:
    async def main() -> None:
        async with open_node(shutdown_grace=-1):
            pass

    with pytest.raises(ValueError, match="shutdown_grace must be >= 0"):
        trio.run(main)


STANDALONE = textwrap.dedent(
    """
    import sys
    from typing import Any
    from loopactors.actors import Actor, ChildSpec, run_node

    class Loud(Actor[Any]):
        def __init__(self, label: str) -> None:
            self.label = label

        async def on_start(self) -> None:
            print("start", self.label, flush=True)

        async def handle(self, message: Any) -> Any:
            return None

        async def on_stop(self, reason: BaseException | None) -> None:
            print("stop", self.label, flush=True)

    run_node([ChildSpec(x, lambda x=x: Loud(x)) for x in "abc"], shutdown_grace=5.0)
    print("exited cleanly", flush=True)
    """
)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_standalone_node_stops_in_order_on_a_signal(signum: int) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", STANDALONE],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    lines = [proc.stdout.readline().strip() for _ in range(3)]
    assert lines == ["start a", "start b", "start c"]
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=HANG)
    assert proc.returncode == 0, err
    assert out.split("\n")[:4] == ["stop c", "stop b", "stop a", "exited cleanly"]


def test_run_node_with_a_main_function_returns_when_it_is_done() -> None:
    from loopactors.actors import run_node

    seen: list[Any] = []

    async def main(node: Node) -> None:
        ref = await node.spawn(lambda: Worker("w"))
        seen.append(await ref.call(Ping(9)))

    run_node(main=main)
    assert seen == [Ping(9)]
