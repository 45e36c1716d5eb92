"""Chaos on a PostgreSQL store with real `loopactors node` processes (docs/multinode.md,
"Guarantees"): three active nodes on one database, each started again whenever it exits
(as a supervisor such as systemd does). Loops of a ``command:`` worker that appends ``LOOP
ROUND NODE TIME`` to a side file are started spread over the three; one node is SIGKILLed
mid-round (its restart declares it dead at once, and the live nodes claim its loops), and
another is SIGSTOPped past its lease (the others declare it dead and claim its loops), then
SIGCONTed: it stops with ``LeaseLost`` and registers again in the same process, as a new
incarnation. Counted from the store and the side file: every loop complete, every round
recorded once with one ``RoundFinished``, no gap in any loop's event numbering, re-runs
only of rounds in flight at a failure, and nothing done by a node incarnation after it was
declared dead (before its process registered again).

The same scenario with fencing switched off (``LOOPACTORS_TEST_UNFENCED=1``, a switch for
this test only, storage/_postgres.py) must be caught by the same counters: the frozen node
wakes up, keeps running its loops next to the nodes that took them over, and its rounds are
finished twice.

The same scenario on the Redis transport (docs/scale-out.md, "Several nodes on one Redis"):
the nodes named, the rounds on `loopactors worker` processes (whose name the side file
gives), and there a takeover runs nothing again: each loop and round in the side file once.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

import attrs
import pytest
import trio

from loopactors.loops import TERMINAL_PHASES, RoundFinished
from loopactors.storage import open_store
from tests.hang import HANG
from tests.processes import start_time
from tests.transport import conftest as transport
from tests.transport.conftest import RedisServer, Workers

LOOPS = 100
ROUNDS = 5
LEASE_TTL = 2.0
ROOT = Path(__file__).resolve().parents[2]

# The Redis variant's fixtures: a redis-server, and `loopactors worker` processes.
redis_server = transport.redis_server
workers = transport.workers

# Waits at the gate (a FIFO, until the test opens it and removes it: every loop started),
# writes its line, then works a little. The line's time is when the node started the round:
# this process's start (field 22 of /proc/PID/stat, in clock ticks since boot), not when a
# loaded machine got round to running it. ``sh``, not Python: a hundred rounds at once. The
# line names the node that ran it, or on the Redis transport the worker.
WORKER = """\
cat >/dev/null
if [ -p "$CHAOS_GATE" ]; then cat "$CHAOS_GATE" >/dev/null 2>&1; fi
set -- $(cat /proc/$$/stat)
echo "$LOOPACTORS_LOOP_ID $LOOPACTORS_ROUND ${CHAOS_NODE:-$LOOPACTORS_WORKER_NAME} ${22}" \\
    >> "$CHAOS_SIDE_FILE"
sleep 0.$(( $LOOPACTORS_ROUND % 2 + 1 ))
echo "round $LOOPACTORS_ROUND done"
"""


@attrs.define
class Incarnation:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    exit_code: int | None = None


@attrs.define
class Slot:
    """One node's place (a state directory), started again each time its process exits."""

    index: int
    state: Path
    argv: list[str]
    env: dict[str, str]
    incarnations: list[Incarnation] = attrs.Factory(list)
    started: threading.Event = attrs.Factory(threading.Event)
    stopping: bool = False

    def keep_running(self) -> None:
        while not self.stopping:
            name = f"n{self.index}.{len(self.incarnations)}"
            log = self.state.parent / f"{name}.log"
            with log.open("wb") as out:
                proc = subprocess.Popen(
                    self.argv,
                    stdout=subprocess.DEVNULL,
                    stderr=out,
                    env={**self.env, "CHAOS_NODE": name},
                )
            incarnation = Incarnation(name, proc, log)
            self.incarnations.append(incarnation)
            self.started.set()
            incarnation.exit_code = proc.wait()
            time.sleep(0.3)  # a supervisor's restart delay

    def by_pid(self, pid: int) -> Incarnation | None:
        return next((i for i in self.incarnations if i.proc.pid == pid), None)


@attrs.define
class Cluster:
    url: str
    slots: list[Slot]
    threads: list[threading.Thread] = attrs.Factory(list)

    def start(self, slot: Slot) -> None:
        thread = threading.Thread(target=slot.keep_running, daemon=True)
        thread.start()
        self.threads.append(thread)
        assert slot.started.wait(HANG)

    def live(self, slot: Slot) -> tuple[str, Incarnation] | None:
        """The live node of ``slot`` (as the store sees it) and its process, if any."""
        for node_id, pid, state, _ in nodes(self.url):
            found = slot.by_pid(pid)
            if state == "live" and found is not None and found.proc.poll() is None:
                return node_id, found
        return None

    def stop(self) -> None:
        for slot in self.slots:
            slot.stopping = True
        deadline = time.monotonic() + HANG
        # Until every keeper is gone: one may be starting a process right now.
        while any(thread.is_alive() for thread in self.threads):
            assert time.monotonic() < deadline, "the nodes never stopped"
            for slot in self.slots:
                for incarnation in slot.incarnations:
                    if incarnation.proc.poll() is None:
                        incarnation.proc.send_signal(signal.SIGCONT)
                        incarnation.proc.kill()
            for thread in self.threads:
                thread.join(0.1)


def nodes(url: str) -> list[tuple[str, int, str, float | None]]:
    """Every node incarnation of the store: id, pid, state, when it was declared dead."""
    return [(node_id, pid, state, dead_at) for node_id, pid, state, dead_at, _ in registered(url)]


def registered(url: str) -> list[tuple[str, int, str, float | None, float]]:
    """Every node incarnation of the store, oldest first: id, pid, state, when it was
    declared dead and when it registered (on the wall clock: one machine)."""
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT node_id, pid, state, extract(epoch FROM dead_at)::float8, "
            "extract(epoch FROM started_at)::float8 FROM nodes "
            "WHERE name <> 'command' ORDER BY started_at"
        ).fetchall()


def zombie_windows(url: str) -> list[tuple[int, float, float]]:
    """For each incarnation declared dead: its process, and from when to when that process
    ran no live incarnation (declared dead, until it registered again if it did)."""
    known = registered(url)
    windows = []
    for index, (_, pid, state, dead_at, _) in enumerate(known):
        if state != "dead" or dead_at is None:
            continue
        later = [started for _, p, _, _, started in known[index + 1 :] if p == pid]
        windows.append((pid, dead_at, later[0] if later else float("inf")))
    return windows


def wait_for(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + HANG
    while not check():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.05)


TICKS = os.sysconf("SC_CLK_TCK")


def _boot_time() -> float:
    """The wall-clock time that process start times count from: a probe's start, read back
    (``btime`` in /proc/stat is whole seconds). A little early if anything: the probe
    starts after ``before``."""
    before = time.time()
    probe = subprocess.Popen(["true"])
    ticks = start_time(probe.pid)
    probe.wait()
    return before - ticks / TICKS


BOOT = _boot_time()


def side_lines(path: Path) -> list[tuple[str, int, str, float]]:
    """The side file's lines: loop, round, node, and when the node started the round (its
    worker process), on the wall clock as the database's ``dead_at`` is."""
    if not path.exists():
        return []
    found = []
    for line in path.read_text().splitlines():
        loop_id, round_number, node, ticks = line.split()
        found.append((loop_id, int(round_number), node, BOOT + int(ticks) / TICKS))
    return found


def chaos_env(tmp_path: Path) -> dict[str, str]:
    """What a round's command needs: where the side file and the gate are."""
    return {
        "CHAOS_SIDE_FILE": str(tmp_path / "side.txt"),
        "CHAOS_GATE": str(tmp_path / "gate"),
    }


class MakeCluster(Protocol):
    def __call__(self, extra_env: dict[str, str], *, transport: str | None = None) -> Cluster:
        """Three nodes (not started yet); with ``transport``, on that Redis, named n0..n2."""


@pytest.fixture
def cluster_factory(tmp_path: Path, postgres_url: str) -> Iterator[MakeCluster]:
    made: list[Cluster] = []

    def make(extra_env: dict[str, str], *, transport: str | None = None) -> Cluster:
        worker = tmp_path / "worker.sh"
        worker.write_text(WORKER)
        config = tmp_path / "loopactors.toml"
        config.write_text(
            f'worker = "command:/bin/sh {worker}"\n'
            "kill_grace = 1.0\ninter_round_delay = 0\n"
            # The worker says the same each round: that is no reason to stop here.
            "[breaker]\nstale_rounds_limit = 1000\n"
        )
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            **chaos_env(tmp_path),
            **extra_env,
        }
        slots = []
        for index in range(3):
            state = tmp_path / f"node{index}" / "state"
            state.mkdir(parents=True)
            argv = [
                sys.executable, "-m", "loopactors", "node", "--store", postgres_url,
                "--state", str(state), "--config", str(config), "--listen", "127.0.0.1:0",
                "--lease-ttl", str(LEASE_TTL),
            ]  # fmt: skip
            if transport is not None:
                # Each place keeps its name across restarts, as a supervised node does.
                argv += ["--transport", transport, "--node-name", f"n{index}"]
            slots.append(Slot(index, state, argv, env))
        cluster = Cluster(postgres_url, slots)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.stop()


def start_loops(state: Path, numbers: range) -> list[str]:
    """Start loops ``numbers`` on the node serving ``state``."""
    url = (state / "node.url").read_text().strip()
    script = f"""
import trio
from loopactors.client import connect
async def main():
    token = open({str(state / "node.token")!r}).read().strip()
    async with connect({url!r}, token=token) as node:
        for i in {numbers!r}:
            print((await node.start("|loop:{ROUNDS},fresh| chaos " + str(i))).loop_id)
trio.run(main)
"""
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=HANG,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.split()


def finished_twice(url: str, loop_ids: list[str]) -> int:
    """``RoundFinished`` events past the first of their round, over every loop's log: what a
    node writing after it lost the store adds."""
    store = open_store(url, None, read_only=True)
    assert store is not None
    try:
        extra = 0
        for loop_id in loop_ids:
            finished = collections.Counter(
                e.round for e in store.events(loop_id) if isinstance(e, RoundFinished)
            )
            extra += sum(n - 1 for n in finished.values())
        return extra
    finally:
        store.close()


@attrs.define
class Counts:
    loops: int = 0
    complete: int = 0
    rounds_recorded: int = 0
    rounds_missing: int = 0
    #: Rounds with more than one RoundFinished in their loop's log (a zombie's write).
    rounds_finished_twice: int = 0
    #: Loops whose events are not numbered 1..n, or whose counter is not n.
    seq_gaps: int = 0
    side_lines: int = 0
    #: Rounds with no line: never run.
    rounds_never_run: int = 0
    #: Side-file runs of a round past its first.
    side_reruns: int = 0
    #: ... on a node other than the ones that ran it before (a takeover), and the most
    #: nodes that ran one round.
    reruns_on_another_node: int = 0
    most_nodes_on_a_round: int = 0
    #: ... on the node that ran it before (its actors restarted after a failed commit and
    #: recovered its loops, as after a crash).
    reruns_on_the_same_node: int = 0
    #: Rounds a node process started after the database's ``dead_at`` for its incarnation,
    #: before it registered again (one machine, one clock).
    started_after_dead: int = 0
    frozen_started_after_dead: int = 0
    #: Nodes that died or left, their loops taken over (each one a change of owner for
    #: its loops: rounds in flight may run again).
    handovers: int = 0
    #: Loops started on each node.
    started_on: list[int] = attrs.Factory(list)
    #: On the Redis transport, rounds a node took over from another: their orders adopted
    #: from a worker, their reports moved from the other node's results stream (its logs).
    orders_adopted: int = 0
    reports_moved: int = 0
    #: ... and rounds a node adopted back from another's route (a node woken from a pause
    #: adopts its rounds back as it dispatches; their owner takes them back).
    routes_taken_back: int = 0


def count(url: str, side_file: Path, loop_ids: list[str], run: Run) -> Counts:
    """What the store and the side file hold."""
    import psycopg

    counts = Counts(loops=len(loop_ids))
    store = open_store(url, None, read_only=True)
    assert store is not None
    try:
        for loop_id in loop_ids:
            loop = store.get_loop(loop_id)
            assert loop is not None
            counts.complete += loop.phase == "complete"
            recorded = [r.round for r in store.rounds(loop_id)]
            counts.rounds_recorded += len(recorded)
            counts.rounds_missing += len(set(range(1, ROUNDS + 1)) - set(recorded))
    finally:
        store.close()
    counts.rounds_finished_twice = finished_twice(url, loop_ids)
    with psycopg.connect(url) as conn:
        for seqs, event_seq in conn.execute(
            "SELECT array_agg(e.seq ORDER BY e.seq), l.event_seq FROM loops l "
            "JOIN events e USING (loop_id) GROUP BY l.loop_id, l.event_seq"
        ):
            counts.seq_gaps += seqs != list(range(1, len(seqs) + 1)) or event_seq != len(seqs)
    lines = side_lines(side_file)
    counts.side_lines = len(lines)
    runs: dict[tuple[str, int], list[str]] = collections.defaultdict(list)
    for loop_id, round_number, node, _ in lines:
        runs[loop_id, round_number].append(node)
    counts.rounds_never_run = sum(
        (loop_id, n) not in runs for loop_id in loop_ids for n in range(1, ROUNDS + 1)
    )
    for ran in runs.values():
        counts.side_reruns += len(ran) - 1
        counts.reruns_on_another_node += len(set(ran)) - 1
        counts.reruns_on_the_same_node += len(ran) - len(set(ran))
        counts.most_nodes_on_a_round = max(counts.most_nodes_on_a_round, len(set(ran)))
    known = nodes(url)
    counts.handovers = sum(state in ("dead", "left") for _, _, state, _ in known)
    counts.started_on = run.started_on
    for log in run.logs:
        text = log.read_text(errors="replace")
        counts.orders_adopted += text.count("is still on its worker's stream: waiting for it")
        counts.reports_moved += text.count("its report moved here")
        counts.routes_taken_back += text.count(": taking it back")
    windows = [(run.names[pid], dead, alive) for pid, dead, alive in zombie_windows(url)]
    for _, _, node, at in lines:
        if any(node == name and dead < at < alive for name, dead, alive in windows):
            counts.started_after_dead += 1
            counts.frozen_started_after_dead += node == run.frozen
    return counts


@attrs.define
class Run:
    #: Each node process's name in the side file, by pid.
    names: dict[int, str]
    #: The node SIGSTOPped past its lease.
    frozen: str
    started_on: list[int]
    #: Every node process's log.
    logs: list[Path]


def start_cluster(cluster: Cluster, gate: Path) -> list[list[str]]:
    """The three nodes, then the loops, spread over them; their rounds held at the gate
    until all are started (one node at a time: the machine may be slow). Their ids, by
    node."""
    os.mkfifo(gate)
    for slot in cluster.slots:
        cluster.start(slot)
        # It serves once it holds its lease (the tables exist from then on).
        wait_for(f"node {slot.index} serves", (slot.state / "node.url").exists)
    per_node = -(-LOOPS // len(cluster.slots))
    started = [
        start_loops(slot.state, range(i * per_node, min(LOOPS, (i + 1) * per_node)))
        for i, slot in enumerate(cluster.slots)
    ]
    open_gate(gate)
    return started


def open_gate(gate: Path) -> None:
    """The rounds waiting read to the end once it closes; later ones find no gate."""
    opened = os.open(gate, os.O_RDWR)
    gate.unlink()
    os.close(opened)


def in_flight(url: str, node_id: str) -> int:
    """How many of ``node_id``'s loops have a round in flight (its intent committed)."""
    import psycopg

    with psycopg.connect(url) as conn:
        found = conn.execute(
            "SELECT count(*) FROM loops WHERE owner = %s AND phase = 'awaiting_worker'",
            (node_id,),
        ).fetchone()
    return int(found[0]) if found else 0


def live_node(cluster: Cluster, slot: Slot) -> tuple[str, Incarnation]:
    """``slot``'s live node once it has rounds in flight: its node id and process."""

    def running() -> bool:
        live = cluster.live(slot)
        return live is not None and in_flight(cluster.url, live[0]) > 0

    wait_for(f"node {slot.index} runs rounds", running)
    live = cluster.live(slot)
    assert live is not None
    return live


def declared_dead(cluster: Cluster, node_id: str) -> Callable[[], bool]:
    return lambda: any(n[0] == node_id and n[2] == "dead" for n in nodes(cluster.url))


def unclaimed(url: str) -> int:
    """Live loops that no live node owns."""
    import psycopg

    with psycopg.connect(url) as conn:
        found = conn.execute(
            "SELECT count(*) FROM loops WHERE phase <> ALL(%s) AND (owner IS NULL OR "
            "owner NOT IN (SELECT node_id FROM nodes WHERE state = 'live'))",
            (list(TERMINAL_PHASES),),
        ).fetchone()
    return int(found[0]) if found else 0


def kill_and_freeze(
    cluster: Cluster, side_file: Path, *, hold: bool = False
) -> tuple[str, Incarnation]:
    """Once a fifth of the rounds ran, each node with rounds in flight: SIGSTOP the second
    node and SIGKILL the first, both mid-round; SIGCONT the second once another node
    declared it dead (2.5 times the lease at least). The frozen node's id and process.

    With ``hold``, rounds that start from just before the signals wait at the gate until
    the two nodes' loops are claimed: rounds of theirs still run (or wait for a worker)
    when another node takes them over."""
    wait_for("a fifth of the rounds run", lambda: len(side_lines(side_file)) >= LOOPS * ROUNDS // 5)
    frozen_id, frozen = live_node(cluster, cluster.slots[1])
    killed_id, killed = live_node(cluster, cluster.slots[0])
    gate = side_file.with_name("gate")
    if hold:
        os.mkfifo(gate)
    frozen.proc.send_signal(signal.SIGSTOP)
    killed.proc.kill()
    time.sleep(LEASE_TTL * 2.5)
    for what, node_id in (("killed", killed_id), ("frozen", frozen_id)):
        wait_for(f"another node declares the {what} node dead", declared_dead(cluster, node_id))
    frozen.proc.send_signal(signal.SIGCONT)
    if hold:
        wait_for("every live loop is claimed", lambda: unclaimed(cluster.url) == 0)
        open_gate(gate)
    return frozen_id, frozen


def run_scenario(cluster: Cluster, side_file: Path, *, fenced: bool, hold: bool = False) -> Counts:
    started = start_cluster(cluster, side_file.with_name("gate"))
    loop_ids = [loop_id for ids in started for loop_id in ids]
    frozen_id, frozen = kill_and_freeze(cluster, side_file, hold=hold)
    if fenced:
        # It writes nothing more and stops, saying why, then registers again in the same
        # process as a new incarnation (never reviving the dead one).
        def registered_again() -> bool:
            mine = [(n[0], n[2]) for n in nodes(cluster.url) if n[1] == frozen.proc.pid]
            ids = [node_id for node_id, _ in mine]
            return (frozen_id, "dead") in mine and ids.index(frozen_id) < len(ids) - 1

        wait_for("the woken node registers again", registered_again)
        assert frozen.proc.poll() is None
        log = frozen.log.read_text()
        assert "stopping (nothing more is committed)" in log, log[-3000:]
        assert "registering again as a new incarnation" in log, log[-3000:]
        store = open_store(cluster.url, None, read_only=True)
        assert store is not None
        try:

            def all_terminal() -> bool:
                phases = [store.get_loop(loop_id) for loop_id in loop_ids]
                return all(s is not None and s.phase in TERMINAL_PHASES for s in phases)

            wait_for("every loop ends", all_terminal)
        finally:
            store.close()
    else:
        # The zombie's rounds land as it runs them (a hang here: the counters miss it). Not
        # every loop need end: the zombie may leave a stale state over a finished loop.
        [dead_at] = [n[3] for n in nodes(cluster.url) if n[0] == frozen_id]
        assert dead_at is not None

        def zombie_seen() -> bool:
            lines = side_lines(side_file)
            started = any(node == frozen.name and at > dead_at for _, _, node, at in lines)
            return started and finished_twice(cluster.url, loop_ids) > 0

        wait_for("the zombie starts rounds and its rounds land", zombie_seen)
    incarnations = [i for slot in cluster.slots for i in slot.incarnations]
    cluster.stop()
    names = {i.proc.pid: i.name for i in incarnations}
    run = Run(names, frozen.name, [len(ids) for ids in started], [i.log for i in incarnations])
    counts = count(cluster.url, side_file, loop_ids, run)
    print(json.dumps(attrs.asdict(counts)))
    return counts


def assert_nothing_lost(counts: Counts) -> None:
    assert counts.complete == LOOPS
    assert counts.rounds_recorded == LOOPS * ROUNDS
    assert counts.rounds_missing == 0
    # Nothing written by a node after it lost the store: every round finished once.
    assert counts.rounds_finished_twice == 0
    assert counts.seq_gaps == 0
    assert counts.rounds_never_run == 0
    # The loops were started spread over the three nodes.
    assert len(counts.started_on) == 3
    assert all(n > 0 for n in counts.started_on)
    # The kill and the freeze are two changes of owner; a loaded machine may add some (a
    # node busy past its lease stops).
    assert counts.handovers >= 2


@pytest.mark.chaos
def test_kill_and_freeze_lose_nothing_and_run_again_only_what_was_in_flight(
    cluster_factory: MakeCluster, tmp_path: Path
) -> None:
    counts = run_scenario(cluster_factory({}), tmp_path / "side.txt", fenced=True)
    assert_nothing_lost(counts)
    # Runs again on another node only of rounds in flight at a change of owner (at most
    # one per loop each), or started by a node declared dead.
    assert counts.most_nodes_on_a_round <= 1 + counts.handovers
    assert counts.reruns_on_another_node <= LOOPS * counts.handovers + counts.started_after_dead


@pytest.mark.chaos
def test_with_fencing_off_the_same_counters_find_the_zombie(
    cluster_factory: MakeCluster, tmp_path: Path
) -> None:
    cluster = cluster_factory({"LOOPACTORS_TEST_UNFENCED": "1"})
    counts = run_scenario(cluster, tmp_path / "side.txt", fenced=False)
    assert counts.rounds_finished_twice > 0


#: Worker processes on the Redis transport, and rounds each runs at once: room for every
#: round held at the gate, so the gate holds them all.
WORKERS = 3
SLOTS = 12


@pytest.mark.chaos
@pytest.mark.parametrize("hold", [True, False], ids=["rounds-held", "rounds-free"])
async def test_on_redis_a_takeover_runs_no_round_again(
    cluster_factory: MakeCluster,
    tmp_path: Path,
    redis_server: RedisServer,
    workers: Workers,
    hold: bool,
) -> None:
    """The same kill and freeze with the rounds on `loopactors worker` processes behind one
    Redis (docs/scale-out.md, "Several nodes on one Redis"): a round in flight when its
    node died keeps running on its worker, and the node that claims its loop adopts its
    order or moves its report to its own results stream, so no round runs twice.

    The same 100 loops of 5 rounds as in process (500 rounds: about 30 s on a loaded
    2-core machine, the most of it the lease waits and the nodes' starts, not the rounds).
    With ``hold``, rounds that start from just before the signals wait at the gate until
    every loop is claimed, so their orders are still on the workers at the takeover and
    adopted. Without it, the 0.1 to 0.2 s rounds all end before a takeover: their reports
    wait on the dead nodes' streams (some taken by a node that had not recorded them) and
    are moved."""
    url = redis_server.url()
    for n in range(WORKERS):
        # A long idle timeout: a worker slow to beat on a loaded machine is not taken for
        # dead (that would run its rounds again, a worker's failure, not a node's).
        options = ("--idle-timeout", str(HANG))
        await workers.start(
            url, f"w{n}", kinds="command", slots=SLOTS, options=options, env=chaos_env(tmp_path)
        )
    cluster = cluster_factory({}, transport=url)
    side_file = tmp_path / "side.txt"
    counts = await trio.to_thread.run_sync(
        lambda: run_scenario(cluster, side_file, fenced=True, hold=hold)
    )
    assert_nothing_lost(counts)
    assert counts.side_lines == LOOPS * ROUNDS  # each round ran once
    assert counts.side_reruns == 0
    # Rounds were in flight at the changes of owner: taken over, not run again.
    assert (counts.orders_adopted if hold else counts.reports_moved) > 0
