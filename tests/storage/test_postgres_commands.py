"""Commands sent to any node of a PostgreSQL store reach the node that owns the loop, and its
events reach the nodes that follow it: two runtimes on one database."""

from __future__ import annotations

from pathlib import Path

import msgspec
import psycopg
import pytest
import trio

from loopactors.errors import AdmissionRefused, CommandNotAnswered, LoopNotFound
from loopactors.loops import (
    AgentStep,
    AnyEvent,
    LoopFinished,
    LoopSpec,
    LoopState,
    RoundStarted,
    RoundWaiting,
)
from loopactors.runtime import Gap, RuntimeConfig, open_runtime
from loopactors.storage import Write
from loopactors.storage._pg_commands import Routes
from loopactors.storage._postgres import Lease, PostgresBackend


def sql(url: str, query: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def owner(url: str, loop_id: str) -> object:
    [(node_id,)] = sql(url, "SELECT owner FROM loops WHERE loop_id = %s", (loop_id,))
    return node_id


def config(url: str, state_dir: Path) -> RuntimeConfig:
    return RuntimeConfig(
        store=url,
        state_dir=state_dir,
        lease_ttl=2.0,
        kill_grace=0.0,
        inter_round_delay=0.2,
        shutdown_grace=5.0,
    )


async def until(check: object) -> None:
    with trio.fail_after(30):  # a failure's bound only: it passes in well under a second
        while not await check():  # type: ignore[operator]
            await trio.sleep(0.05)


async def test_stop_pause_and_resume_sent_to_one_node_reach_the_owner(
    postgres_url: str, tmp_path: Path
) -> None:
    async with (
        open_runtime(config(postgres_url, tmp_path / "a")) as a,
        open_runtime(config(postgres_url, tmp_path / "b")) as b,
    ):
        on_b = (await b.start("|loop:50| long work on b")).loop_id
        b_node = owner(postgres_url, on_b)

        paused = await a.pause(on_b)  # sent to a, applied by b: b's answer
        assert paused.loop_id == on_b
        assert paused.pause_requested or paused.phase == "paused"

        async def is_paused() -> bool:
            return (await a.get(on_b)).phase == "paused"

        await until(is_paused)
        resumed = await a.resume(on_b)
        assert not resumed.pause_requested
        assert resumed.phase != "paused"

        stopped = await a.stop(on_b)
        assert stopped.phase == "cancelled"
        assert (await b.get(on_b)).phase == "cancelled"
        # Applied by the owner, which still owns it; nothing waits in the table.
        assert owner(postgres_url, on_b) == b_node
        assert sql(postgres_url, "SELECT count(*) FROM commands") == [(0,)]
        # A command for a finished loop is answered where it is sent, as on one node.
        assert (await a.pause(on_b)).phase == "cancelled"
        with pytest.raises(LoopNotFound, match="no loop 'no-such-loop'"):
            await a.stop("no-such-loop")


async def test_a_command_for_a_loop_no_node_owns_waits_for_its_claimer(
    postgres_url: str, tmp_path: Path
) -> None:
    async with open_runtime(config(postgres_url, tmp_path / "b")) as b:
        loop_id = (await b.start("|loop:50| orphaned soon")).loop_id
    # b left: its loop is owned by nobody until a claims it at its first renewal.
    assert owner(postgres_url, loop_id) is None
    async with open_runtime(config(postgres_url, tmp_path / "a").replace(lease_ttl=10.0)) as a:
        stopped = await a.stop(loop_id)
        assert stopped.phase == "cancelled"
        assert owner(postgres_url, loop_id) is not None


def orphan(url: str) -> str:
    """A live loop whose node left: owned by nobody."""
    PostgresBackend(url, node_id="").close()
    held = Lease(url, shown="the test store", name="node")
    store = PostgresBackend(url, holding=held.holding)
    spec = LoopSpec(task="t", rounds=50)
    store.commit([Write(state=LoopState(loop_id="o", spec=spec, created_at=1.0, updated_at=1.0))])
    store.close()
    held.release()
    return "o"


async def test_a_child_started_on_another_node_runs_in_its_parents_tree(
    postgres_url: str, tmp_path: Path
) -> None:
    async with (
        open_runtime(config(postgres_url, tmp_path / "a")) as a,
        open_runtime(config(postgres_url, tmp_path / "b")) as b,
    ):
        parent = (await b.start("|loop:50| long parent on b")).loop_id
        # Sent to a, which does not run the parent: b admits the child and answers.
        child = await a.start("|loop:50| a child of it", parent_id=parent)
        assert child.spec.parent_id == parent
        [(b_node, root)] = sql(
            postgres_url, "SELECT owner, root_id FROM loops WHERE loop_id = %s", (parent,)
        )
        assert sql(
            postgres_url, "SELECT owner, root_id FROM loops WHERE loop_id = %s", (child.loop_id,)
        ) == [(b_node, root)]

        async def runs_on_b() -> bool:
            return (await b.get(child.loop_id)).round >= 1

        await until(runs_on_b)
        # A start asked again (its answer lost) gets the same loop, admitted once.
        again = await a.start("|loop:50| a child of it", parent_id=parent, loop_id=child.loop_id)
        assert again.loop_id == child.loop_id
        # The owner's refusal comes back as its own error (only b knows the ancestors).
        with pytest.raises(AdmissionRefused, match="identical task already looping"):
            await a.start("|loop:50| long parent on b", parent_id=parent)
        # A stop of the parent, sent to a, ends its child on b first.
        assert (await a.stop(parent)).phase == "cancelled"
        assert (await b.get(child.loop_id)).phase == "cancelled"
        with pytest.raises(AdmissionRefused, match="is not live"):
            await a.start("|loop:50| too late", parent_id=parent)
        assert sql(postgres_url, "SELECT count(*) FROM commands") == [(0,)]


async def test_a_child_of_a_loop_no_node_owns_waits_for_its_claimer(
    postgres_url: str, tmp_path: Path
) -> None:
    async with open_runtime(config(postgres_url, tmp_path / "a")) as a:
        parent = await trio.to_thread.run_sync(orphan, postgres_url)
        # Only a node labelled gpu may run it: a never claims it.
        sql(postgres_url, "UPDATE loops SET affinity = 'gpu' WHERE loop_id = %s", (parent,))
        started: list[LoopState] = []

        async def start_child() -> None:
            started.append(await a.start("|loop:50| child of an orphan", parent_id=parent))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(start_child)

            async def waiting() -> bool:
                return sql(postgres_url, "SELECT count(*) FROM commands") == [(1,)]

            await until(waiting)
            assert owner(postgres_url, parent) is None
            b_config = config(postgres_url, tmp_path / "b").replace(labels=("gpu",))
            async with open_runtime(b_config) as b:

                async def answered() -> bool:
                    return bool(started)

                await until(answered)
                [child] = started
                b_node = owner(postgres_url, parent)
                assert b_node is not None
                assert owner(postgres_url, child.loop_id) == b_node
                assert (await b.get(child.loop_id)).spec.parent_id == parent


async def test_a_command_nobody_answers_in_time_is_withdrawn_with_a_clear_error(
    postgres_url: str, autojump_clock: trio.testing.MockClock
) -> None:
    loop_id = await trio.to_thread.run_sync(orphan, postgres_url)
    routes = Routes(postgres_url, shown="the test store", node_id="sender", timeout=30.0)
    try:
        with pytest.raises(CommandNotAnswered, match=r"no live node owns loop 'o'.*in 30 s"):
            await routes.send(loop_id, "stop", "now")
        assert sql(postgres_url, "SELECT count(*) FROM commands") == [(0,)]
        # Owned by a live node that does not answer: the error names it.
        held = await trio.to_thread.run_sync(
            lambda: Lease(postgres_url, shown="the test store", name="stuck")
        )
        sql(postgres_url, "UPDATE loops SET owner = %s", (held.node_id,))
        with pytest.raises(CommandNotAnswered, match=rf"the node {held.node_id} .*did not answer"):
            await routes.send(loop_id, "pause", "now")
        held.release()
    finally:
        routes.close()


async def test_a_command_with_no_notification_is_applied_at_the_next_poll(
    postgres_url: str, tmp_path: Path
) -> None:
    """Notifications are hints: a command inserted without one (as if it were lost) is
    still applied by the owner, at its next read of the table."""
    async with open_runtime(config(postgres_url, tmp_path / "b")) as b:
        loop_id = (await b.start("|loop:50| long work")).loop_id
        [(command_id,)] = sql(
            postgres_url,
            "INSERT INTO commands (loop_id, command, stop_mode, sent_by) "
            "VALUES (%s, 'stop', 'now', 'nobody') RETURNING id",
            (loop_id,),
        )

        async def answered() -> bool:
            rows = sql(
                postgres_url, "SELECT answered_at FROM commands WHERE id = %s", (command_id,)
            )
            return rows[0][0] is not None

        await until(answered)
        assert (await b.get(loop_id)).phase == "cancelled"


async def test_events_written_with_no_notification_are_relayed_at_the_next_poll(
    postgres_url: str, tmp_path: Path
) -> None:
    """A loop another process writes (it never notifies): a runtime following it reads its
    new events from the table, in order, each once."""
    held = await trio.to_thread.run_sync(
        lambda: Lease(postgres_url, shown="the test store", name="writer")
    )
    store = PostgresBackend(postgres_url, holding=held.holding)
    spec = LoopSpec(task="t", rounds=50)
    first = LoopState(loop_id="w", spec=spec, created_at=1.0, updated_at=1.0)
    store.commit([Write(state=first)])
    try:
        async with open_runtime(config(postgres_url, tmp_path / "a")) as a:
            with a.subscribe("w") as events:
                routes = a._routes
                assert isinstance(routes, Routes)

                async def relayed() -> bool:  # the relay knows where the loop's log stands
                    return "w" in routes._relayed

                await until(relayed)
                written = [
                    RoundStarted(loop_id="w", at=float(n), round=n, rounds=50, seed_source="task")
                    for n in (1, 2, 3)
                ]
                state = msgspec.structs.replace(first, phase="dispatching", round=3)
                store.commit([Write(state=state, events=tuple(written))])
                got: list[object] = []
                with trio.fail_after(30):  # a failure's bound only: the poll is 2 s
                    async for event in events:
                        got.append(event)
                        if len(got) == len(written):
                            break
                assert got == written
    finally:
        store.close()
        held.release()


async def test_commands_and_events_go_on_after_the_server_ends_their_connections(
    postgres_url: str, tmp_path: Path
) -> None:
    async with (
        open_runtime(config(postgres_url, tmp_path / "a")) as a,
        open_runtime(config(postgres_url, tmp_path / "b")) as b,
    ):
        loop_id = (await b.start("|loop:50| long work on b")).loop_id
        ended = sql(
            postgres_url,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name IN ('loopactors commands', 'loopactors listen')",
        )
        # Two connections on each node (and any of another test's runtime not closed yet:
        # the server is shared by the session's tests).
        assert len(ended) >= 4
        with a.subscribe(loop_id) as events:
            stopped = await a.stop(loop_id)
            assert stopped.phase == "cancelled"
            with trio.fail_after(30):  # a failure's bound only
                async for event in events:
                    if isinstance(event, LoopFinished):
                        break


def _stored(events: list[AnyEvent], loop_id: str) -> list[AnyEvent]:
    """One loop's events among ``events``, those the store keeps (not the live-only ones)."""
    return [
        e for e in events if e.loop_id == loop_id and not isinstance(e, AgentStep | RoundWaiting)
    ]


async def test_a_subscriber_of_every_loop_gets_every_nodes_loops_each_event_once(
    postgres_url: str, tmp_path: Path
) -> None:
    async with (
        open_runtime(config(postgres_url, tmp_path / "a")) as a,
        open_runtime(config(postgres_url, tmp_path / "b")) as b,
        open_runtime(config(postgres_url, tmp_path / "c")) as c,
    ):
        routes = a._routes
        assert isinstance(routes, Routes)
        everything: list[AnyEvent] = []
        local: list[AnyEvent] = []
        with (
            a.subscribe(None, cluster=True) as cluster,
            a.subscribe(None) as own,  # without cluster: a's loops only, as on one node
            a.changes(None, cluster=True) as changes,
        ):

            async def started() -> bool:  # the relay knows where the events table stands
                return routes._horizon is not None

            await until(started)
            work = "|loop:4,fresh| {} work"
            on = {
                name: (await rt.start(work.format(name), worker="scripted:latency=0.1")).loop_id
                for name, rt in (("a", a), ("b", b), ("c", c))
            }
            # A view of one loop another node runs (a coalesced subscription of it).
            one = a.changes(on["b"])
            with trio.fail_after(30):  # a failure's bound only
                ended: set[str] = set()
                async for event in cluster:
                    assert not isinstance(event, Gap)
                    everything.append(event)
                    if isinstance(event, LoopFinished):
                        ended.add(event.loop_id)
                        if ended == set(on.values()):
                            break
            while True:
                try:
                    item = own.receive_nowait()
                except trio.WouldBlock:
                    break
                assert not isinstance(item, Gap)
                local.append(item)
            assert set(on.values()) <= set(changes.take())
            with trio.fail_after(30):  # a failure's bound only: relayed with b's LoopFinished
                await one.wait()
            assert one.take() == [on["b"]]
            one.close()
        for name, rt in (("a", a), ("b", b), ("c", c)):
            stored = await rt.stored_events(on[name])
            # Every event of each loop, once, in order: a's first-hand, b's and c's relayed.
            assert _stored(everything, on[name]) == stored
        assert {e.loop_id for e in local} == {on["a"]}
