"""Nodes on one PostgreSQL store: how long a takeover takes, and what a round costs there
against SQLite (docs/multinode.md, docs/benchmarks.md).

    python bench/multinode.py                       # a throwaway server, 1,000 live loops
    python bench/multinode.py --loops 5000 --ttl 5
    python bench/multinode.py --store postgresql://...   # an existing database (fresh schema!)

Takeover: a holder process runs ``--loops`` live loops (each in a round on a worker that
takes an hour) under a lease of ``--ttl`` seconds; a second node on another state directory
runs alongside it, owning none of them. Three ways the holder goes, each timed from the
signal to the moment the second node has every loop running again (its ``LoopRecovered``
events, published after their commit), on the system's monotonic clock, which both
processes share:

- ``SIGSTOP``: the holder freezes, as a dead machine looks to a survivor: the other node
  waits out the lease, declares it dead at a claim pass, claims and recovers its loops.
  Goal: at most the lease + 2 s.
- ``SIGKILL``: the holder's process is gone: as SIGSTOP for a node already running (only a
  node starting on this machine sees the pid gone and declares it dead at once).
- ``SIGTERM``: a graceful stop frees the loops at once; the other node claims them at its
  next renewal. Goal: at most 2 s.

Idle claim pass: ``--claim-loops`` live loops (50,000) owned by a live node, and a second
node's claim pass timed ``--passes`` times: what every node pays every fifth of its lease
when nothing is to be claimed. Goal: at most 5 ms.

Throughput: ``--loops`` loops x 5 rounds of a trivial worker in one process, each round
committed before the next, on SQLite and on PostgreSQL (the same machine, a Unix socket):
rounds/s, the node's CPU per round (its threads included) and the server's; ``--repeat N``
runs each store N times, alternating (compare CPU per round, steadier than rounds/s on a
shared machine).

    python bench/multinode.py --only throughput --repeat 5

The server this script starts runs with ``fsync=off`` (as the tests' does), so commits cost
no disk flush: compare CPU per round, not durability. Scaling across machines cannot be
measured on one machine; what is measured is one node's loops taken over by another, and
the cost of the claim pass.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from loopactors.errors import StoreError
from loopactors.loops import AnyEvent, LoopRecovered, RoundStarted
from loopactors.runtime import RuntimeConfig, open_runtime

ROOT = Path(__file__).resolve().parent.parent
WORKER = "scripted:latency=3600"
RETRY_EVERY = 0.05
#: The parts of the benchmark, in the order they run (``--only``).
PARTS = ("takeover", "claims", "throughput")
ROUNDS = 5


def config_for(store: str, state_dir: Path, loops: int, ttl: float) -> RuntimeConfig:
    return RuntimeConfig(
        store=store,
        state_dir=state_dir,
        lease_ttl=ttl,
        max_live_loops=loops,
        max_concurrent_rounds=loops,
        event_queue_size=loops * 4,
        shutdown_grace=0.5,
    )


async def hold(store: str, state_dir: Path, loops: int, ttl: float) -> None:
    """Run ``loops`` live loops, say ``ready`` once every round runs; stop on SIGTERM."""
    running = 0
    all_running = trio.Event()

    def observe(event: AnyEvent) -> None:
        nonlocal running
        if isinstance(event, RoundStarted):
            running += 1
            if running == loops:
                all_running.set()

    with trio.open_signal_receiver(signal.SIGTERM) as signals:
        async with open_runtime(config_for(store, state_dir, loops, ttl), observer=observe) as rt:
            limiter = trio.CapacityLimiter(200)

            async def start(i: int) -> None:
                async with limiter:
                    await rt.start(f"|loop:3,fresh| task {i}", worker=WORKER)

            async with trio.open_nursery() as nursery:
                for i in range(loops):
                    nursery.start_soon(start, i)
            await all_running.wait()
            print("ready", flush=True)
            async for _ in signals:
                break  # leaving the block stops the rounds and leaves the lease


async def stand_by(store: str, state_dir: Path, loops: int, ttl: float) -> None:
    """Run alongside the holder, then print when every loop of its runs here."""
    recovered = 0
    everyone = trio.Event()

    def observe(event: AnyEvent) -> None:
        nonlocal recovered
        if isinstance(event, LoopRecovered):
            recovered += 1
            if recovered == loops:
                everyone.set()

    print("waiting", flush=True)
    attempts = 0
    while True:
        attempts += 1
        try:
            async with open_runtime(config_for(store, state_dir, loops, ttl), observer=observe):
                opened = time.monotonic()
                with trio.move_on_after(600):
                    await everyone.wait()
                result = {
                    "opened": opened,
                    "recovered_at": time.monotonic(),
                    "recovered": recovered,
                    "attempts": attempts,
                }
                print(json.dumps(result), flush=True)
                os._exit(0)  # stopping the loops is not what is measured
        except StoreError as exc:
            if "in use" not in str(exc):
                raise
        await trio.sleep(RETRY_EVERY)


def _child(role: str, store: str, state_dir: Path, loops: int, ttl: float) -> subprocess.Popen[str]:
    argv = [sys.executable, __file__, "--role", role, "--store", store]
    argv += ["--state", str(state_dir), "--loops", str(loops), "--ttl", str(ttl)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)


def _line(child: subprocess.Popen[str], expected: str | None = None) -> str:
    assert child.stdout is not None
    line = child.stdout.readline().strip()
    if expected is not None and line != expected:
        raise SystemExit(f"a bench process said {line!r}, not {expected!r}")
    return line


def takeover(store: str, root: Path, loops: int, ttl: float, how: signal.Signals) -> dict[str, Any]:
    holder = _child("hold", store, root / f"holder-{how.name}", loops, ttl)
    _line(holder, "ready")
    standby = _child("standby", store, root / f"standby-{how.name}", loops, ttl)
    _line(standby, "waiting")
    time.sleep(0.3)  # the standby is retrying
    signalled = time.monotonic()
    holder.send_signal(how)
    if how == signal.SIGKILL:
        holder.wait()  # reaped at once, as a supervisor reaps it: its pid is gone
    result = json.loads(_line(standby))
    standby.wait()
    holder.kill()
    holder.wait()
    took = result["recovered_at"] - signalled
    return {
        "signal": how.name,
        "loops": loops,
        "ttl_s": ttl,
        "takeover_s": round(took, 3),
        # The lease ran from the holder's last renewal (every ttl/5), up to ttl/5 before the
        # signal: a frozen holder's takeover is between ttl*0.8 and ttl, plus the recovery.
        "beyond_lease_s": round(took - ttl, 3) if how == signal.SIGSTOP else None,
        "recovered": result["recovered"],
    }


def idle_claim_pass(store: str, live: int, passes: int) -> dict[str, Any]:
    """The claim pass of a node when ``live`` loops are all owned by another live node."""
    import msgspec  # noqa: PLC0415
    import psycopg  # noqa: PLC0415

    from loopactors.loops import LoopSpec, LoopState  # noqa: PLC0415
    from loopactors.storage._postgres import Lease, PostgresBackend  # noqa: PLC0415

    PostgresBackend(store, node_id="").close()  # the tables
    owner = Lease(store, shown="bench", name="owner", ttl=3600.0)
    spec = LoopSpec(task="t", rounds=3)
    state = LoopState(loop_id="x", spec=spec, created_at=1.0, updated_at=1.0)
    with psycopg.connect(store, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO loops (loop_id, phase, created_at, updated_at, state, owner, fence, "
            "root_id) SELECT 'l' || i, 'dispatching', i, i, %s, %s, 1, 'l' || i "
            "FROM generate_series(1, %s) AS i",
            (msgspec.json.encode(state), owner.node_id, live),
        )
        conn.execute("ANALYZE loops")
    claimer = Lease(store, shown="bench", name="claimer", ttl=3600.0)
    times = []
    for _ in range(passes):
        started = time.perf_counter()
        if claimer.claim(live):
            raise SystemExit("the idle claim pass claimed loops of a live node")
        times.append(time.perf_counter() - started)
    claimer.release()
    owner.release()
    times.sort()
    return {
        "live_loops": live,
        "passes": passes,
        "median_ms": round(times[len(times) // 2] * 1e3, 3),
        "p95_ms": round(times[int(len(times) * 0.95)] * 1e3, 3),
        "max_ms": round(times[-1] * 1e3, 3),
    }


def _print_claims(row: dict[str, Any]) -> None:
    print(f"\n{'idle claim pass':<16}{'live loops':>11}{'median ms':>11}{'p95 ms':>9}")
    print(f"{'':<16}{row['live_loops']:>11}{row['median_ms']:>11.2f}{row['p95_ms']:>9.2f}")
    print(json.dumps(row))


def _server_cpu(postmaster: int | None) -> float:
    """CPU seconds of the server ``postmaster`` and its backends (utime + stime); 0 when
    the server is not this script's own."""
    if postmaster is None:
        return 0.0
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(entry.name) == postmaster or int(fields[1]) == postmaster:
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


async def rounds_on(
    store: str, state_dir: Path, loops: int, postmaster: int | None
) -> dict[str, Any]:
    config = config_for(store, state_dir, loops, 10.0)
    async with open_runtime(config) as rt:
        wall, cpu, server = time.perf_counter(), time.process_time(), _server_cpu(postmaster)
        handles = [rt.handle(await rt.start(f"|loop:{ROUNDS},fresh| t{i}")) for i in range(loops)]
        for handle in handles:
            await handle.wait()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        server = _server_cpu(postmaster) - server
    rounds = loops * ROUNDS
    return {
        "store": store.split(":", maxsplit=1)[0],
        "loops": loops,
        "rounds_per_s": round(rounds / wall),
        "node_cpu_us_per_round": round(cpu / rounds * 1e6),
        "server_cpu_us_per_round": round(server / rounds * 1e6) if postmaster else None,
    }


def takeovers(fresh: Callable[[], str], tmp: Path, loops: int, ttl: float) -> None:
    """The takeover table: the holder goes each way in turn (each on a ``fresh`` store)."""
    head = f"{'holder goes by':<16}{'loops':>8}{'lease s':>9}{'takeover s':>12}"
    print(f"{head}{'minus lease':>13}")
    for how in (signal.SIGSTOP, signal.SIGKILL, signal.SIGTERM):
        row = takeover(fresh(), tmp, loops, ttl, how)
        beyond = "" if row["beyond_lease_s"] is None else f"{row['beyond_lease_s']:.2f}"
        print(
            f"{how.name:<16}{row['loops']:>8}{row['ttl_s']:>9.1f}"
            f"{row['takeover_s']:>12.2f}{beyond:>13}"
        )
        print(json.dumps(row))


def throughput(
    fresh: Callable[[], str], postmaster: int | None, tmp: Path, loops: int, repeat: int
) -> None:
    """The throughput table: ``repeat`` runs of each store, alternating (PostgreSQL on a
    ``fresh`` store each time, its server's CPU counted from ``postmaster``)."""
    head = f"\n{'store':<12}{'loops':>8}{'rounds/s':>10}{'node us/round':>15}"
    print(f"{head}{'server us/round':>17}")
    # Alternating, so that a machine shared with other work loads both alike.
    for run, kind in enumerate(("sqlite", "postgresql") * repeat):
        store, server = (fresh(), postmaster) if kind == "postgresql" else ("sqlite", None)
        row = trio.run(rounds_on, store, tmp / f"rounds-{kind}-{run}", loops, server)
        shown = "" if row["server_cpu_us_per_round"] is None else row["server_cpu_us_per_round"]
        print(
            f"{kind:<12}{row['loops']:>8}{row['rounds_per_s']:>10}"
            f"{row['node_cpu_us_per_round']:>15}{shown:>17}"
        )
        print(json.dumps(row))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--loops", type=int, default=1_000)
    parser.add_argument("--ttl", type=float, default=3.0, help="lease seconds (3)")
    parser.add_argument("--store", help="a postgresql:// URL (default: a throwaway server)")
    parser.add_argument("--claim-loops", type=int, default=50_000, help="live loops (50,000)")
    parser.add_argument("--passes", type=int, default=200, help="idle claim passes timed")
    parser.add_argument(
        "--only",
        choices=PARTS,
        action="append",
        help="run only this part (again for several; default: all of them)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="throughput runs of each store, alternating SQLite and PostgreSQL (1)",
    )
    parser.add_argument("--role", choices=["hold", "standby"], help=argparse.SUPPRESS)
    parser.add_argument("--state", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error(f"--repeat takes a number of runs, at least 1, not {args.repeat}")
    parts = set(args.only or PARTS)
    if args.role == "hold":
        trio.run(hold, args.store, args.state, args.loops, args.ttl)
        return
    if args.role == "standby":
        trio.run(stand_by, args.store, args.state, args.loops, args.ttl)
        return

    server = None
    url = args.store
    if url is None:
        sys.path.insert(0, str(ROOT))
        from tests.postgres import PostgresServer, _bin_dir  # noqa: PLC0415 - the tests' server

        bin_dir = _bin_dir()
        if bin_dir is None:
            raise SystemExit("no PostgreSQL server binaries (apt-get install postgresql)")
        server = PostgresServer(bin_dir)
        server.start()
    try:
        print(
            f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}, load {os.getloadavg()[0]:.2f}"
        )
        fresh: Callable[[], str] = (lambda: url) if server is None else server.fresh_url
        postmaster = (
            None if server is None else int((server.data / "postmaster.pid").read_text().split()[0])
        )
        with tempfile.TemporaryDirectory(prefix="loopactors-multinode-") as tmp:
            if "takeover" in parts:
                takeovers(fresh, Path(tmp), args.loops, args.ttl)
            if "claims" in parts:
                _print_claims(idle_claim_pass(fresh(), args.claim_loops, args.passes))
            if "throughput" in parts:
                throughput(fresh, postmaster, Path(tmp), args.loops, args.repeat)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
        print(f"# peak RSS of this process {peak} MB")
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
