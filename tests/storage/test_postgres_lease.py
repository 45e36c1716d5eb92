"""The leases nodes hold on a PostgreSQL store, the loops each owns and the fences every
commit passes through: deterministic, two or more incarnations on one database, expiry on
the database's clock only."""

from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import psycopg
import pytest
import trio

from loopactors.cli._loop_control import StoredLoops
from loopactors.client import connect
from loopactors.errors import AdmissionRefused, LeaseLost, LoopsFenced, StoreError
from loopactors.gateway import GatewaySettings, open_gateway
from loopactors.loops import LoopSpec, LoopState, RoundFinished, RoundStarted
from loopactors.runtime import RuntimeConfig, open_runtime
from loopactors.runtime._messages import StartLoop
from loopactors.storage import Placement, Write, open_store, parse_store
from loopactors.storage._postgres import _HELD, KIND, Lease, PostgresBackend, _boot_id, _hold
from tests.hang import HANG


def started(loop_id: str, rnd: int) -> RoundStarted:
    return RoundStarted(loop_id=loop_id, at=float(rnd), round=rnd, rounds=50, seed_source="task")


def state(loop_id: str, rnd: int) -> LoopState:
    return LoopState(
        loop_id=loop_id,
        spec=LoopSpec(task="t", rounds=50),
        phase="dispatching",
        round=rnd,
        created_at=1.0,
        updated_at=2.0,
    )


def sql(url: str, query: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def expire(url: str, node_id: str) -> None:
    """The lease ran out, as seen by the database (no waiting)."""
    sql(
        url,
        "UPDATE nodes SET expires_at = clock_timestamp() - interval '1 s' WHERE node_id = %s",
        (node_id,),
    )


def lease(url: str) -> Lease:
    return Lease(url, shown="the test store", name="node")


def backend(url: str, held: Lease) -> PostgresBackend:
    """The store as the node holding ``held`` commits to it (with its loops' fences)."""
    return PostgresBackend(url, holding=held.holding)


def owners(url: str) -> dict[str, tuple[str | None, int]]:
    rows = sql(url, "SELECT loop_id, owner, fence FROM loops")
    return {
        str(loop_id): (None if owner is None else str(owner), int(str(fence)))
        for loop_id, owner, fence in rows
    }


def affinities(url: str) -> dict[str, str | None]:
    rows = sql(url, "SELECT loop_id, affinity FROM loops")
    return {str(loop_id): None if label is None else str(label) for loop_id, label in rows}


def test_several_nodes_hold_leases_on_one_store_at_once(postgres_url: str) -> None:
    PostgresBackend(postgres_url, node_id="").close()  # the tables
    first, second = lease(postgres_url), lease(postgres_url)
    live = sql(postgres_url, "SELECT node_id FROM nodes WHERE state = 'live' ORDER BY node_id")
    assert live == sorted([(first.node_id,), (second.node_id,)])
    assert first.renew()
    assert second.renew()
    first.release()
    assert second.renew()
    second.release()
    assert sql(postgres_url, "SELECT DISTINCT state FROM nodes") == [("left",)]


def test_a_zombie_commit_after_a_takeover_changes_nothing(postgres_url: str) -> None:
    PostgresBackend(postgres_url, node_id="").close()
    a = lease(postgres_url)
    store_a = backend(postgres_url, a)
    store_a.commit([Write(state=state("x", 1))])
    assert owners(postgres_url) == {"x": (a.node_id, 1)}
    expire(postgres_url, a.node_id)  # a stalls past its lease (SIGSTOP, a VM pause)
    b = lease(postgres_url)  # declares a dead, which frees its loops under a new fence
    assert owners(postgres_url) == {"x": (None, 2)}
    assert b.claim(100) == ["x"]
    assert owners(postgres_url) == {"x": (b.node_id, 3)}
    store_b = backend(postgres_url, b)
    store_b.commit([Write(state=state("x", 2))])
    # a wakes up: its commit is fenced, and its renewal never revives it.
    with pytest.raises(LeaseLost, match="has ended"):
        store_a.commit([Write(state=state("x", 99)), Write(state=state("y", 1))])
    assert not a.renew()
    assert a.claim(100) == []
    assert store_b.get_loop("x") == state("x", 2)
    assert store_b.get_loop("y") is None
    assert sql(
        postgres_url, "SELECT state, dead_by FROM nodes WHERE node_id = %s", (a.node_id,)
    ) == [("dead", b.node_id)]
    assert b.renew()
    for closing in (store_a, store_b):
        closing.close()
    a.release()
    b.release()


def test_a_live_node_writes_only_the_loops_it_holds_under_their_fence(postgres_url: str) -> None:
    PostgresBackend(postgres_url, node_id="").close()
    a, b = lease(postgres_url), lease(postgres_url)
    store_a, store_b = backend(postgres_url, a), backend(postgres_url, b)
    store_a.commit([Write(state=state("x", 1))])
    # Another live node cannot write a's loop: fenced, nothing of it written, and the rest
    # of its batch is.
    with pytest.raises(LoopsFenced) as fenced:
        store_b.commit(
            [
                Write(state=state("x", 7), events=(started("x", 7),)),
                Write(state=state("y", 1), events=(started("y", 1),)),
            ]
        )
    assert fenced.value.loop_ids == {"x"}
    assert store_a.get_loop("x") == state("x", 1)
    assert store_a.events("x") == []
    assert store_a.get_loop("y") == state("y", 1)
    assert owners(postgres_url) == {"x": (a.node_id, 1), "y": (b.node_id, 1)}
    # x changes owner and comes back to a (released, claimed again): the writes a made
    # under its old fence are refused though a owns x again.
    stale = dict(a.holding.fences)
    sql(postgres_url, "UPDATE loops SET owner = NULL, fence = fence + 1 WHERE loop_id = 'x'")
    assert a.claim(100) == ["x"]
    assert owners(postgres_url)["x"] == (a.node_id, 3)
    a.holding.fences.update(stale)
    with pytest.raises(LoopsFenced):
        store_a.commit([Write(state=state("x", 8))])
    assert store_a.get_loop("x") == state("x", 1)
    for closing in (store_a, store_b):
        closing.close()
    a.release()
    b.release()


def test_an_expired_lease_not_yet_taken_over_may_still_be_renewed(postgres_url: str) -> None:
    PostgresBackend(postgres_url, node_id="").close()
    a = lease(postgres_url)
    expire(postgres_url, a.node_id)
    store_a = backend(postgres_url, a)
    with pytest.raises(LeaseLost):  # expired: no commit, renewed or not yet
        store_a.commit([Write(state=state("x", 1))])
    assert a.renew()  # whoever acts first wins: here the holder
    store_a.commit([Write(state=state("x", 1))])
    b = lease(postgres_url)  # renewed in time: a is live, its loop stays its own
    assert b.claim(100) == []
    assert owners(postgres_url) == {"x": (a.node_id, 1)}
    store_a.close()
    a.release()
    b.release()


def test_lease_decisions_never_read_the_wall_clock(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    PostgresBackend(postgres_url, node_id="").close()
    real = time.time
    for jump in (3600.0, -3600.0):
        monkeypatch.setattr(time, "time", lambda jump=jump: real() + jump)
        a = lease(postgres_url)
        store_a = backend(postgres_url, a)
        assert a.renew()
        store_a.commit([Write(state=state(f"x{jump}", 1))])
        b = lease(postgres_url)
        assert f"x{jump}" not in b.claim(100)  # a is not declared dead: its loop stays
        assert owners(postgres_url)[f"x{jump}"] == (a.node_id, 1)
        assert sql(postgres_url, "SELECT count(*) FROM nodes WHERE state = 'dead'") == [(0,)]
        store_a.close()
        a.release()
        b.release()


def test_a_restart_on_the_same_machine_takes_over_from_its_dead_predecessor_at_once(
    postgres_url: str,
) -> None:
    """A node restarted with the same name on the same machine (host, boot and pid
    namespace) declares its predecessor dead at once when that one's process is gone; every
    other live-looking lease is waited out: another name, another machine, another pid
    namespace (a container with the same host name), a process still there, a row written
    before the pid namespace was recorded."""
    PostgresBackend(postgres_url, node_id="").close()
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid no process has any more
    here = _boot_id()
    boot = here.split()[0]
    host = socket.gethostname()
    predecessors = {
        "killed": ("node", host, gone.pid, here),
        "other-name": ("worker-a", host, gone.pid, here),
        "elsewhere": ("node", "another-host", gone.pid, here),
        "other-container": ("node", host, gone.pid, f"{boot} pid:[1]"),
        "older-row": ("node", host, gone.pid, boot),
        "still-running": ("node", host, os.getpid(), here),
    }
    for node_id, (name, on, pid, machine) in predecessors.items():
        sql(
            postgres_url,
            "INSERT INTO nodes (node_id, name, host, pid, boot_id, expires_at) "
            "VALUES (%s, %s, %s, %s, %s, clock_timestamp() + interval '1 hour')",
            (node_id, name, on, pid, machine),
        )
    successor = lease(postgres_url)  # named "node": no waiting out the hour for its own
    states = {str(n): str(s) for n, s in sql(postgres_url, "SELECT node_id, state FROM nodes")}
    assert states.pop(successor.node_id) == "live"
    assert states == {n: "dead" if n == "killed" else "live" for n in predecessors}
    [(dead_by,)] = sql(postgres_url, "SELECT dead_by FROM nodes WHERE node_id = 'killed'")
    assert dead_by == successor.node_id
    successor.release()


def test_claims_take_whole_trees_in_fair_shares_within_capacity(postgres_url: str) -> None:
    PostgresBackend(postgres_url, node_id="").close()
    origin = lease(postgres_url)
    store = backend(postgres_url, origin)
    trees = [f"r{i}" for i in range(6)]
    writes = []
    for root in trees:
        writes.append(Write(state=state(root, 1)))
        child = msgspec.structs.replace(
            state(f"{root}.c", 1), spec=LoopSpec(task="c", rounds=50, parent_id=root)
        )
        grandchild = msgspec.structs.replace(
            state(f"{root}.g", 1), spec=LoopSpec(task="g", rounds=50, parent_id=f"{root}.c")
        )
        writes += [Write(state=child), Write(state=grandchild)]
    store.commit(writes[:3])  # one tree, then the children of the others with their parents
    store.commit(writes[3:])
    roots = {str(i): str(r) for i, r in sql(postgres_url, "SELECT loop_id, root_id FROM loops")}
    assert roots == {f"{r}{tail}": r for r in trees for tail in ("", ".c", ".g")}
    store.close()
    origin.release()  # leaves: its 18 loops are free at once
    a, b = lease(postgres_url), lease(postgres_url)
    # Two live nodes, 6 free trees of 3: half each, whole trees, none past a node's room.
    assert len(a.claim(4)) == 3  # room for one tree
    assert len(b.claim(100)) == 9  # 5 left: 3 trees
    assert len(a.claim(100)) == 3  # 2 left: 1 tree
    assert len(a.claim(100)) == 3  # 1 left
    held: dict[str, set[str]] = {}
    for loop_id, (owner, fence) in owners(postgres_url).items():
        assert fence == 3  # freed, then claimed
        held.setdefault(str(owner), set()).add(roots[loop_id])
    assert held[a.node_id].isdisjoint(held[b.node_id])
    assert len(held[a.node_id]) == 3
    assert len(held[b.node_id]) == 3
    assert a.claim(100) == []
    assert b.claim(100) == []
    a.release()
    b.release()


def test_a_tree_whose_root_was_pruned_is_still_claimed(postgres_url: str) -> None:
    """A root that ended and was pruned while its child still runs: the child's tree has no
    root row, and is claimed all the same (the claim locks trees, not root rows)."""
    PostgresBackend(postgres_url, node_id="").close()
    origin = lease(postgres_url)
    store = backend(postgres_url, origin)
    child = msgspec.structs.replace(
        state("r.c", 1), spec=LoopSpec(task="c", rounds=50, parent_id="r")
    )
    store.commit([Write(state=state("r", 1)), Write(state=child), Write(state=state("s", 1))])
    ended = msgspec.structs.replace(state("r", 1), phase="complete", updated_at=3.0)
    store.commit([Write(state=ended)])
    report = store.prune(before=10.0)
    assert report.loops == 1  # the root, ended long ago; its live child stays
    store.close()
    origin.release()
    a, b = lease(postgres_url), lease(postgres_url)
    taken = sorted(a.claim(100) + b.claim(100))
    assert taken == ["r.c", "s"]
    assert {owner for owner, _ in owners(postgres_url).values()} <= {a.node_id, b.node_id}
    a.release()
    b.release()


def test_loops_tied_to_a_machine_go_only_to_a_node_with_its_label(postgres_url: str) -> None:
    """docs/multinode.md, "What does not move": a loop admitted with an affinity (here
    ``host:m1`` for loops named ``bound*``) is claimed, with its whole tree, only by a node
    carrying that label; the others by any node."""
    PostgresBackend(postgres_url, node_id="").close()

    def affinity(loop: LoopState) -> str | None:
        return "host:m1" if loop.loop_id.startswith("bound") else None

    origin = Lease(
        postgres_url,
        shown="the test store",
        name="m1",
        placement=Placement(labels=frozenset({"host:m1"}), affinity=affinity),
    )
    store = backend(postgres_url, origin)
    child = msgspec.structs.replace(
        state("bound-child", 1), spec=LoopSpec(task="c", rounds=50, parent_id="free-parent")
    )
    store.commit(
        [Write(state=state("bound", 1)), Write(state=state("free", 1)),
         Write(state=state("free-parent", 1)), Write(state=child)]
    )  # fmt: skip
    tied = affinities(postgres_url)
    assert tied == {
        "bound": "host:m1",
        "free": None,
        "free-parent": None,
        "bound-child": "host:m1",
    }
    store.close()
    origin.release()
    other = Lease(
        postgres_url, shown="the test store", name="m2",
        placement=Placement(labels=frozenset({"host:m2", "zone:a"})),
    )  # fmt: skip
    assert sorted(other.claim(100)) == ["free"]  # the tree holding a bound child stays
    assert other.claim(100) == []
    same = Lease(
        postgres_url, shown="the test store", name="m1",
        placement=Placement(labels=frozenset({"host:m1"})),
    )  # fmt: skip
    # Two live nodes, two trees left: one each pass (a fair share), both here in the end.
    assert sorted(same.claim(100) + same.claim(100)) == ["bound", "bound-child", "free-parent"]
    assert same.node_id.startswith("m1-")  # the node's name leads its incarnations' ids
    other.release()
    same.release()


def test_a_node_ties_the_loops_that_need_its_machine_to_it() -> None:
    from loopactors.runtime._api import placement

    host = f"host:{socket.gethostname()}"
    here = placement(RuntimeConfig(node_name="n1", labels=("zone:a",)))
    assert here.name == "n1"
    assert here.labels == {host, "zone:a"}

    def loop(worker: str) -> LoopState:
        return msgspec.structs.replace(state("x", 1), spec=LoopSpec(task="t", worker=worker))

    assert here.affinity(loop("command:./agent.sh")) == host
    assert here.affinity(loop("python:pkg.mod:fn")) == host
    assert here.affinity(loop("agent:model=m")) == host  # its workspace is here
    assert here.affinity(loop("scripted")) is None
    shared = placement(RuntimeConfig(labels=("shared-fs",)))
    assert shared.name == "node"
    assert shared.affinity(loop("command:./agent.sh")) is None
    remote = placement(RuntimeConfig(transport="redis://127.0.0.1:6379/0"))
    assert remote.affinity(loop("command:./agent.sh")) is None  # rounds run on workers


async def test_a_node_admits_a_command_loop_tied_to_its_machine(
    postgres_url: str, tmp_path: Path
) -> None:
    config = RuntimeConfig(store=postgres_url, state_dir=tmp_path, node_name="n1")
    async with open_runtime(config) as rt:
        bound = await rt.start("|loop:50| here", worker="command:sleep 60")
        free = await rt.start("|loop:50| anywhere", worker="scripted:latency=60")
        tied = await trio.to_thread.run_sync(affinities, postgres_url)
        owners_now = await trio.to_thread.run_sync(owners, postgres_url)
        await rt.stop(bound.loop_id)
        await rt.stop(free.loop_id)
    assert tied == {bound.loop_id: f"host:{socket.gethostname()}", free.loop_id: None}
    assert str(owners_now[bound.loop_id][0]).startswith(f"n1-{socket.gethostname()}-")


def test_incarnations_that_ended_over_a_day_ago_are_forgotten(postgres_url: str) -> None:
    PostgresBackend(postgres_url, node_id="").close()
    sql(
        postgres_url,
        "INSERT INTO nodes (node_id, name, host, pid, expires_at, state) VALUES "
        "('old', 'node', 'h', 1, clock_timestamp() - interval '2 days', 'left'), "
        "('recent', 'node', 'h', 1, clock_timestamp() - interval '1 hour', 'dead')",
    )
    taker = lease(postgres_url)
    names = sql(postgres_url, "SELECT node_id FROM nodes ORDER BY node_id")
    assert names == sorted([("recent",), (taker.node_id,)])
    taker.release()


async def test_a_runtime_taken_over_stops_with_lease_lost_and_writes_nothing_more(
    postgres_url: str, tmp_path: Path
) -> None:
    config = RuntimeConfig(
        store=postgres_url,
        state_dir=tmp_path,
        lease_ttl=1.0,
        kill_grace=0.0,
        inter_round_delay=0.05,
        shutdown_grace=5.0,
    )
    with pytest.raises(LeaseLost, match="taken over by another node"):
        async with open_runtime(config) as rt:
            handle = rt.handle(await rt.start("|loop:50| long work"))
            with rt.subscribe(handle.loop_id) as events:
                async for _ in events:
                    break  # it runs
            # Another node declares this one dead (its lease expired, as the taker saw it),
            # which frees its loops.
            await trio.to_thread.run_sync(
                sql, postgres_url, "UPDATE nodes SET state = 'dead' WHERE state = 'live'"
            )
            await trio.to_thread.run_sync(
                sql, postgres_url, "UPDATE loops SET owner = NULL, fence = fence + 1"
            )
            [(seq_at_death,)] = await trio.to_thread.run_sync(
                sql, postgres_url, "SELECT event_seq FROM loops"
            )
            await trio.sleep_forever()  # cancelled by the lease keeper's next renewal
    # Nothing it committed after being declared dead reached the store; a successor resumes
    # the loop from there.
    [(seq_after,)] = sql(postgres_url, "SELECT event_seq FROM loops")
    assert seq_after == seq_at_death
    reader = open_store(postgres_url, None, read_only=True)
    assert reader is not None
    assert not reader.get_loop(handle.loop_id).terminal  # type: ignore[union-attr]
    reader.close()
    async with open_runtime(config.replace(lease_ttl=10.0)) as rt:
        assert (await rt.get(handle.loop_id)).round >= 1


async def test_a_runtime_failing_as_it_stops_for_its_lost_lease_says_lease_lost(
    postgres_url: str,
) -> None:
    """A node paused past its lease wakes up to connections the server ended: what fails
    on them while its runtime stops is not the reason it stops."""
    with pytest.raises(LeaseLost, match="taken over by another node") as caught:
        async with _hold(parse_store(postgres_url), 1.0, 0.0, 100, Placement()):
            await trio.to_thread.run_sync(
                sql, postgres_url, "UPDATE nodes SET state = 'dead' WHERE state = 'live'"
            )
            try:
                await trio.sleep_forever()  # cancelled by the lease keeper's next renewal
            finally:
                raise StoreError("server closed the connection unexpectedly")
    assert "server closed the connection" in repr(caught.value.__cause__)


async def test_a_lease_is_valid_by_the_nodes_own_clock_until_the_keepers_deadline(
    postgres_url: str,
) -> None:
    """What a node asks before it hands a round to a worker on the Redis transport
    (``StoreKind.lease_valid``): true while its lease cannot have ended by its own clock,
    false once the keeper's deadline passed (a node woken from a pause past its lease) and
    once no lease is held."""
    url = parse_store(postgres_url)
    assert KIND.lease_valid is not None
    async with _hold(url, 2.0, 0.0, 100, Placement()):
        holding = _HELD[url.text]
        with trio.fail_after(HANG):
            while holding.valid_until == math.inf:  # until the keeper starts
                await trio.sleep(0.01)
            first = holding.valid_until
            assert trio.current_time() < first
            assert KIND.lease_valid(url)
            while holding.valid_until == first:  # renewed: the deadline moves on
                await trio.sleep(0.05)
        holding.valid_until = trio.current_time()  # as if paused until the deadline
        assert not KIND.lease_valid(url)
        holding.valid_until = math.inf
    assert not KIND.lease_valid(url)


async def test_runtimes_on_one_store_run_their_own_loops_and_take_over_as_one_leaves(
    postgres_url: str, tmp_path: Path
) -> None:
    config = RuntimeConfig(
        store=postgres_url,
        state_dir=tmp_path / "a",
        lease_ttl=1.0,
        kill_grace=0.0,
        inter_round_delay=0.2,
        shutdown_grace=5.0,
    )
    async with open_runtime(config.replace(state_dir=tmp_path / "b")) as b:
        async with open_runtime(config) as a:
            on_a = await a.start(
                "|loop:50 stale_rounds=50| long work on a", worker="scripted:latency=0.3"
            )
            a_id = a_node_id(postgres_url)
            on_b = await b.start("|loop:3| short work on b")
            assert (await b.wait(on_b.loop_id)).phase == "complete"
            # Each runs its own: a's loop is not b's, and b does not run it.
            assert owners(postgres_url)[on_a.loop_id] == (a_id, 1)
            assert not (await b.get(on_a.loop_id)).terminal
            # The same id on two nodes: the same spec gets the loop, another is refused.
            same = await b.start(on_a.spec, loop_id=on_a.loop_id)
            assert same.loop_id == on_a.loop_id
            with pytest.raises(AdmissionRefused, match="already used"):
                await b.start("|loop:2| another task", loop_id=on_a.loop_id)
            # An offline stop while a is live (another process, as it is run) is refused,
            # naming a's node.
            waits = await a.start("|loop:3| one long round", worker="scripted:latency=3600")
            argv = [sys.executable, "-m", "loopactors", "stop", waits.loop_id]
            argv += ["--store", postgres_url, "--state", str(tmp_path / "offline")]
            offline = await trio.to_thread.run_sync(
                lambda: subprocess.run(argv, capture_output=True, text=True, check=False)
            )
            assert offline.returncode != 0
            assert f"run by the live node {a_id} (host" in offline.stderr
            # A stop of a's loop sent to b is routed to a, which stops it and answers.
            assert (await b.stop(waits.loop_id)).phase == "cancelled"
            assert owners(postgres_url)[waits.loop_id][0] == a_id
        # a left: its loop is free at once, and b claims it and runs it on.
        with trio.fail_after(30):
            while owners(postgres_url)[on_a.loop_id][0] in (None, a_id):
                assert not (await b.get(on_a.loop_id)).terminal
                await trio.sleep(0.05)
            at = (await b.get(on_a.loop_id)).round
            while (await b.get(on_a.loop_id)).round == at:
                await trio.sleep(0.05)
        stopped = await b.stop(on_a.loop_id)
        assert stopped.phase == "cancelled"


async def test_a_commit_whose_answer_is_lost_is_not_written_twice(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ambiguous commit: it lands, but the answer never reaches the node (the connection
    drops after COMMIT). The Store fails, the runtime's actors restart and recover from what
    the database holds: every round recorded once, the loop's events numbered without a gap
    or a repeat, and the loop goes on to its end."""
    real = PostgresBackend._commit
    lost: list[int] = []

    def commit_then_lose_the_answer(self: PostgresBackend, writes: list[Write]) -> None:
        real(self, writes)
        if not lost and any(w.round is not None and w.round.round == 3 for w in writes):
            lost.append(3)
            raise StoreError("server closed the connection unexpectedly")

    monkeypatch.setattr(PostgresBackend, "_commit", commit_then_lose_the_answer)
    config = RuntimeConfig(store=postgres_url, state_dir=tmp_path / "a", shutdown_grace=5.0)
    async with open_runtime(config) as rt:
        handle = rt.handle(await rt.start("|loop:6,fresh| ambiguous", stale_rounds_limit=10))
        with trio.fail_after(60):
            final = await handle.wait()
        assert lost == [3]
        assert (final.phase, final.completed_rounds) == ("complete", 6)
        assert [r.round for r in await rt.history(handle.loop_id)] == [1, 2, 3, 4, 5, 6]
    seqs = [
        int(str(seq))
        for (seq,) in sql(
            postgres_url,
            "SELECT seq FROM events WHERE loop_id = %s ORDER BY seq",
            (handle.loop_id,),
        )
    ]
    assert seqs == list(range(1, len(seqs) + 1))
    types = [
        str(t)
        for (t,) in sql(
            postgres_url,
            "SELECT type FROM events WHERE loop_id = %s ORDER BY seq",
            (handle.loop_id,),
        )
    ]
    assert types.count("round_finished") == 6
    assert types.count("loop_recovered") == 1  # recovered from the store, once


def a_node_id(url: str) -> str:
    """The id of the node that registered last."""
    [(node_id,)] = sql(url, "SELECT node_id FROM nodes ORDER BY started_at DESC LIMIT 1")
    return str(node_id)


async def test_the_same_id_admitted_on_two_nodes_at_once_goes_to_one(
    postgres_url: str, tmp_path: Path
) -> None:
    config = RuntimeConfig(store=postgres_url, state_dir=tmp_path / "a", shutdown_grace=5.0)
    other_dir = config.replace(state_dir=tmp_path / "b")
    async with open_runtime(config) as a, open_runtime(other_dir) as b:
        first = await a.start("|loop:50| raced", loop_id="raced")
        # b admits the same id not knowing it is taken (the two looked it up at the same
        # moment): its commit is fenced, and it answers with a's loop, or refuses.
        start = StartLoop(spec=first.spec, loop_id="raced")
        got = await b._coordinator.call(start, timeout=30)
        assert got.loop_id == "raced"
        assert got.spec == first.spec
        other = StartLoop(spec=b.build_spec("|loop:2| not the same"), loop_id="raced")
        with pytest.raises(AdmissionRefused, match="taken by another node at the same moment"):
            await b._coordinator.call(other, timeout=30)
        assert owners(postgres_url)["raced"][1] == 1
        assert (await b.get("raced")).spec == first.spec
        await a.stop("raced")


def test_a_zombie_prunes_nothing_and_touches_no_notification(postgres_url: str) -> None:
    PostgresBackend(postgres_url, node_id="").close()
    a = lease(postgres_url)
    store_a = PostgresBackend(postgres_url, node_id=a.node_id)
    finished = msgspec.structs.replace(state("old", 1), phase="complete", updated_at=1.0)
    store_a.commit([Write(state=finished)])
    sql(
        postgres_url,
        "INSERT INTO notifications (loop_id, next_at, notification) VALUES ('old', 0, '{}')",
    )
    expire(postgres_url, a.node_id)
    b = lease(postgres_url)
    with pytest.raises(LeaseLost):
        store_a.prune_batch(time.time())
    with pytest.raises(LeaseLost):
        store_a.notification_done(1)
    assert sql(postgres_url, "SELECT count(*) FROM loops") == [(1,)]
    assert sql(postgres_url, "SELECT count(*) FROM notifications") == [(1,)]
    store_b = PostgresBackend(postgres_url, node_id=b.node_id)
    report, _ = store_b.prune_batch(time.time())  # the holder may
    assert report.loops == 1
    for closing in (store_a, store_b):
        closing.close()
    a.release()
    b.release()


def test_a_transaction_stalled_on_the_lease_row_loses_to_the_server_timeout(
    postgres_url: str,
) -> None:
    """A node frozen inside a transaction (SIGSTOP mid-prune) holds its lease row locked
    FOR SHARE; the server ends that session (``idle_in_transaction_session_timeout``, 2 s),
    so a takeover waits for that, not for as long as the node stays frozen."""
    PostgresBackend(postgres_url, node_id="").close()
    a = lease(postgres_url)
    store_a = PostgresBackend(postgres_url, node_id=a.node_id)
    store_a.commit([Write(state=state("x", 1))])
    expire(postgres_url, a.node_id)
    connection = store_a._conn  # the stall is in the store's own connection
    connection.execute("BEGIN")
    connection.execute("SELECT 1 FROM nodes WHERE node_id = %s FOR SHARE", (a.node_id,))
    # ... and a stops here, in its transaction, holding the row.
    b = lease(postgres_url)  # waits on the row lock until the server ends a's session
    assert sql(
        postgres_url, "SELECT state, dead_by FROM nodes WHERE node_id = %s", (a.node_id,)
    ) == [("dead", b.node_id)]
    with pytest.raises(StoreError):  # a wakes: its session is gone, it writes nothing
        store_a.commit([Write(state=state("x", 99))])
    store_b = PostgresBackend(postgres_url, node_id=b.node_id)
    assert store_b.get_loop("x") == state("x", 1)
    for closing in (store_a, store_b):
        closing.close()
    a.release()
    b.release()


async def test_a_running_loop_moved_away_stops_here_and_is_claimed_again(
    postgres_url: str, tmp_path: Path
) -> None:
    """A loop whose owner or fence changes under its node (an operator freed it) is fenced
    at its runner's next commit: the runner stops, nothing of that commit is written; the
    loop, free, is claimed at the next pass (here by the same node, the only one) and runs on
    under its new fence, each round recorded once."""
    config = RuntimeConfig(
        store=postgres_url,
        state_dir=tmp_path,
        lease_ttl=1.0,
        kill_grace=0.0,
        inter_round_delay=0.1,
        shutdown_grace=5.0,
    )
    async with open_runtime(config) as rt:
        loop = await rt.start("|loop:20 stale_rounds=20| moved")
        while (await rt.get(loop.loop_id)).round < 2:
            await trio.sleep(0.05)
        await trio.to_thread.run_sync(
            sql, postgres_url, "UPDATE loops SET owner = NULL, fence = fence + 1"
        )
        with trio.fail_after(30):
            while owners(postgres_url)[loop.loop_id][1] < 3:
                await trio.sleep(0.05)
            final = await rt.wait(loop.loop_id)
    assert final.phase == "complete"
    store = open_store(postgres_url, None, read_only=True)
    assert store is not None
    finished = [e.round for e in store.events(loop.loop_id) if isinstance(e, RoundFinished)]
    store.close()
    assert sorted(finished) == list(range(1, 21))


async def test_an_offline_stop_ends_a_loop_whose_node_died(postgres_url: str) -> None:
    PostgresBackend(postgres_url, node_id="").close()
    gone = lease(postgres_url)
    store = backend(postgres_url, gone)
    store.commit([Write(state=state("orphan", 3))])
    store.close()
    expire(postgres_url, gone.node_id)  # it died: its lease ran out, nobody declared it yet
    config = RuntimeConfig(store=postgres_url, state_dir=Path("/nonexistent-state"))
    stopped = await StoredLoops(lambda: config).stop("orphan")
    assert stopped.phase == "cancelled"
    assert sql(postgres_url, "SELECT state FROM nodes WHERE node_id = %s", (gone.node_id,)) == [
        ("dead",)
    ]
    gone.release()  # its connection (it writes nothing: declared dead)


async def test_each_node_lists_where_its_gateway_listens(postgres_url: str, tmp_path: Path) -> None:
    """The nodes table says where each incarnation's gateway listens (ws://HOST:PORT, set once
    it is bound; nothing for a runtime that serves none), in the store's ``nodes()`` and in
    a node's statistics; never its token."""
    base = RuntimeConfig(store=postgres_url, state_dir=tmp_path / "a", shutdown_grace=5.0)
    async with (
        open_runtime(base) as served,
        open_gateway(served, GatewaySettings(port=0)) as gateway,
        open_runtime(base.replace(state_dir=tmp_path / "b")) as embedded,
    ):
        assert await embedded.store_statistics()  # it has registered
        token = gateway.token_path.read_text().strip()
        async with connect(gateway.url, token=token) as client:
            stats = await client.statistics()
        reader = open_store(postgres_url, None, read_only=True)
        assert reader is not None
        listed = {n.node_id: n.gateway for n in reader.nodes()}
        reader.close()
    # Both runtimes run in this process: each is live, one with the gateway.
    assert {n.node_id: n.gateway for n in stats.cluster} == listed
    assert gateway.url.startswith("ws://127.0.0.1:")
    assert sorted(listed.values(), key=str) == sorted([None, gateway.url], key=str)
    assert token not in repr(listed)


def test_a_store_of_schema_6_gets_the_gateway_column(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loopactors.storage import _postgres

    monkeypatch.setattr(_postgres, "_MIGRATIONS", _postgres._MIGRATIONS[:6])
    monkeypatch.setattr(PostgresBackend, "schema", 6)
    before = lease(postgres_url)  # a node of the older code: no gateway column
    monkeypatch.undo()
    reader = PostgresBackend(postgres_url, node_id="")  # migrates
    [node] = [n for n in reader.nodes() if n.node_id == before.node_id]
    assert node.gateway is None
    assert node.state == "live"
    reader.close()
    before.release()


async def test_owners_name_each_loops_node_or_none(postgres_url: str, tmp_path: Path) -> None:
    """Which node incarnation owns each loop, as ``status --json`` shows it: read from the
    store (no node) or asked of a runtime; none for a free loop or an unknown id, and no
    owners at all on a store of one node."""
    PostgresBackend(postgres_url, node_id="").close()
    a = lease(postgres_url)
    store_a = backend(postgres_url, a)
    store_a.commit([Write(state=state("held", 1)), Write(state=state("free", 1))])
    sql(postgres_url, "UPDATE loops SET owner = NULL, fence = fence + 1 WHERE loop_id = 'free'")
    asked = ["held", "free", "unknown"]
    wanted = {"held": a.node_id, "free": None, "unknown": None}
    offline = StoredLoops(lambda: RuntimeConfig(store=postgres_url, state_dir=tmp_path / "x"))
    assert await offline.owners(asked) == wanted
    async with open_runtime(RuntimeConfig(store=postgres_url, state_dir=tmp_path / "n")) as rt:
        found = await rt.owners(asked)
        assert found is not None
        assert found["held"] == a.node_id  # a holds its lease: its loop stays its own
        assert found["unknown"] is None
        assert set(found) == set(asked)
    store_a.close()
    a.release()
    sqlite = RuntimeConfig(state_dir=tmp_path / "own")
    assert await StoredLoops(lambda: sqlite).owners(asked) is None
    async with open_runtime(sqlite) as rt:
        assert await rt.owners(asked) is None
