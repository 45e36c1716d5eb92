"""Peers benchmark: the same durable work on loopactors, LangGraph, DBOS and plain trio + sqlite3.

    pip install -e '.[bench]'              # LangGraph, its SQLite checkpointer, DBOS
    python bench/peers.py                  # 500 loops x 5 rounds, 3 interleaved runs each; recovery
                                           # of 1,000 live loops (5-10 minutes)
    python bench/peers.py --quick          # a smoke run: 50 loops, one run each

The work: L loops, each running 5 rounds of a trivial function (it returns a short string),
each round durably committed to SQLite before the next one starts, all L loops at once. Each
system runs in a process of its own (so its peak RSS is its own), the systems interleaved
(one run of each, then the next run of each), and prints, the median of the runs:

- rounds/s: L x 5 over the time from the first start to the last loop's end;
- CPU per round: the process's CPU time (every thread) over the same span, per round;
- peak RSS per loop: the process's peak RSS minus its RSS once set up, over L;
- recovery: a process starts L loops, waits until each is in its first round (a round that
  would take an hour), and is killed with SIGKILL; a new process then times, from the first
  call of the system's own API (``open_runtime``, opening the checkpointer, ``DBOS()``),
  until every loop is running its round again.

The systems and their settings (each one's documented fastest durable setting):

- loopactors, SQLite store (``durability = "normal"``, the default: WAL, ``synchronous =
  NORMAL``; and ``"full"``: ``synchronous = FULL``, the WAL synced at every commit), each loop
  started and awaited by its own task (``Runtime.start``, ``LoopHandle.wait``), the scripted
  worker at zero latency as the function. Recovery: the runtime resumes every live loop when it
  opens.
- LangGraph with ``AsyncSqliteSaver`` (langgraph-checkpoint-sqlite; aiosqlite: faster than the
  blocking ``SqliteSaver`` for many threads at once), ``durability="sync"`` (each step's
  checkpoint committed before the next step starts; the default ``"async"`` writes it while
  the next step runs), one graph thread per loop, a one-node graph that loops back 5 times.
  The saver sets WAL and leaves SQLite's default ``synchronous`` (FULL). Recovery: LangGraph
  has no recovery of its own; the program lists the threads (``alist``), reads each one's
  state (``aget_state``) and resumes those with a next step (``ainvoke(None, ...)``).
- DBOS on SQLite (``system_database_url = "sqlite:///..."``, DBOS's own settings: rollback
  journal, SQLite's default ``synchronous``), an async workflow per loop running 5 async
  steps (each step's output is recorded before the next). Recovery: ``DBOS.launch()``
  recovers the pending workflows of this executor.
- plain trio + sqlite3, one commit per round: each loop a task that calls the function, then
  writes its row in a transaction of its own (WAL, ``synchronous = NORMAL``, as loopactors).
- plain trio + sqlite3, group commit: the same, each round's row handed to one committer task
  that writes all the rows waiting in one transaction and then wakes their loops.

The floors have no recovery of their own (a dash). A system whose packages are missing is
skipped with a line saying how to install them. Prints one table and, last, one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import trio

ROUNDS = 5
#: Seconds a round of a loop waiting to be killed takes: longer than any run.
HOUR = 3600.0
#: The longest a recovery may take before it is reported as not done.
RECOVERY_LIMIT = 600.0
#: Set in the process of a prepare phase: its first round never ends.
BLOCK_ENV = "LOOPACTORS_PEERS_BLOCK"


def _status_kb(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def rss_kb() -> int:
    """The process's resident set now (KiB)."""
    return _status_kb("VmRSS")


def peak_rss_kb() -> int:
    """The process's peak resident set (KiB) since :func:`reset_peak_rss` (``VmHWM``: unlike
    ``ru_maxrss`` it is not carried over from the parent across ``exec``)."""
    return _status_kb("VmHWM")


def reset_peak_rss() -> None:
    """Start the peak over from the resident set now (Linux: 5 to ``clear_refs``)."""
    with open("/proc/self/clear_refs", "w", encoding="ascii") as refs:
        refs.write("5")


class Meter:
    """Wall and CPU time of the measured span, and the RSS it started from."""

    def __init__(self) -> None:
        reset_peak_rss()
        self.rss_before = rss_kb()
        self.start = time.perf_counter()
        self.cpu = time.process_time()

    def result(self, loops: int) -> dict[str, Any]:
        elapsed = time.perf_counter() - self.start
        cpu = time.process_time() - self.cpu
        rounds = loops * ROUNDS
        return {
            "rounds_per_s": rounds / elapsed,
            "cpu_us_per_round": cpu / rounds * 1e6,
            "rss_kb_per_loop": max(peak_rss_kb() - self.rss_before, 0) / loops,
            "peak_rss_mb": peak_rss_kb() / 1024,
            "seconds": elapsed,
        }


def work(round_number: int) -> str:
    """The trivial function every system runs once per round."""
    return f"round {round_number} done"


class Entered:
    """Counts loops that entered a round (from any thread) and says when all ``loops`` did."""

    def __init__(self, loops: int) -> None:
        self.loops = loops
        self.count = 0
        self.all = threading.Event()
        self._lock = threading.Lock()

    def one(self) -> None:
        with self._lock:
            self.count += 1
            if self.count >= self.loops:
                self.all.set()


# --- loopactors ---------------------------------------------------------------------------


def _loopactors_config(state: Path, loops: int, durability: str) -> Any:
    from loopactors.runtime import RuntimeConfig  # noqa: PLC0415 - in its own process only
    from loopactors.storage import check_durability  # noqa: PLC0415

    return RuntimeConfig(
        store="sqlite",
        state_dir=state,
        durability=check_durability(durability),
        max_live_loops=loops,
        max_concurrent_rounds=loops,
        event_queue_size=loops * 4,
    )


def loopactors_throughput(state: Path, loops: int, durability: str) -> dict[str, Any]:
    from loopactors.runtime import open_runtime  # noqa: PLC0415

    async def main() -> dict[str, Any]:
        async with open_runtime(_loopactors_config(state, loops, durability)) as rt:
            meter = Meter()

            async def one_loop(i: int) -> None:
                started = await rt.start(f"|loop:{ROUNDS},fresh| task {i}", worker="scripted")
                final = await rt.wait(started.loop_id)
                if final.phase != "complete" or final.round != ROUNDS:
                    raise RuntimeError(f"loop {i} ended {final.phase} at round {final.round}")

            async with trio.open_nursery() as nursery:
                for i in range(loops):
                    nursery.start_soon(one_loop, i)
            return meter.result(loops)

    return trio.run(main)


def loopactors_prepare(state: Path, loops: int, durability: str) -> None:
    from loopactors.loops import AnyEvent, RoundStarted  # noqa: PLC0415
    from loopactors.runtime import open_runtime  # noqa: PLC0415

    entered = Entered(loops)

    def observe(event: AnyEvent) -> None:
        if isinstance(event, RoundStarted):
            entered.one()

    async def main() -> None:
        config = _loopactors_config(state, loops, durability)
        async with open_runtime(config, observer=observe) as rt:
            limiter = trio.CapacityLimiter(200)  # starts in flight at once (bench/recovery.py)

            async def start(i: int) -> None:
                async with limiter:
                    worker = f"scripted:latency={HOUR:g}"
                    await rt.start(f"|loop:{ROUNDS},fresh| task {i}", worker=worker)

            async with trio.open_nursery() as nursery:
                for i in range(loops):
                    nursery.start_soon(start, i)
            while not entered.all.is_set():  # noqa: ASYNC110 - set from any thread
                await trio.sleep(0.01)
            ready()
            await trio.sleep_forever()

    trio.run(main)


def loopactors_recover(state: Path, loops: int, durability: str) -> dict[str, Any]:
    from loopactors.loops import AnyEvent, LoopRecovered  # noqa: PLC0415
    from loopactors.runtime import open_runtime  # noqa: PLC0415

    entered = Entered(loops)

    def observe(event: AnyEvent) -> None:
        # Published once the loop's round is dispatched again and that is committed.
        if isinstance(event, LoopRecovered):
            entered.one()

    async def main() -> dict[str, Any]:
        start = time.perf_counter()
        async with open_runtime(_loopactors_config(state, loops, durability), observer=observe):
            with trio.move_on_after(RECOVERY_LIMIT):
                while not entered.all.is_set():  # noqa: ASYNC110 - set from any thread
                    await trio.sleep(0.001)
            result = recovered(start, entered)
            print(json.dumps(result), flush=True)
            os._exit(0)  # stopping the recovered loops is not what is measured
        raise AssertionError("unreachable")

    return trio.run(main)


# --- LangGraph ----------------------------------------------------------------------------


class GraphState(TypedDict):
    round: int
    output: str


def _langgraph(entered: Entered | None = None) -> tuple[Any, Any]:
    """The graph builder (one node that runs ``work`` and loops back until round 5) and
    ``AsyncSqliteSaver``."""
    graph: Any = importlib.import_module("langgraph.graph")
    saver: Any = importlib.import_module("langgraph.checkpoint.sqlite.aio")
    block = os.environ.get(BLOCK_ENV) == "1"

    async def step(state: GraphState) -> dict[str, Any]:
        if entered is not None and state["round"] == 0:
            entered.one()
        if block:
            await asyncio.sleep(HOUR)
        number = state["round"] + 1
        return {"round": number, "output": work(number)}

    def after(state: GraphState) -> str:
        return str(graph.END) if state["round"] >= ROUNDS else "step"

    builder = graph.StateGraph(GraphState)
    builder.add_node("step", step)
    builder.add_edge(graph.START, "step")
    builder.add_conditional_edges("step", after)
    return builder, saver.AsyncSqliteSaver


def _thread(i: int | str) -> dict[str, Any]:
    return {"configurable": {"thread_id": f"loop-{i}" if isinstance(i, int) else i}}


def langgraph_throughput(state: Path, loops: int, _: str) -> dict[str, Any]:
    builder, saver_class = _langgraph()

    async def main() -> dict[str, Any]:
        async with saver_class.from_conn_string(str(state / "langgraph.db")) as saver:
            await saver.setup()
            graph = builder.compile(checkpointer=saver)
            meter = Meter()

            async def one_loop(i: int) -> None:
                final = await graph.ainvoke(
                    {"round": 0, "output": ""}, _thread(i), durability="sync"
                )
                if final["round"] != ROUNDS:
                    raise RuntimeError(f"loop {i} ended at round {final['round']}")

            await asyncio.gather(*(one_loop(i) for i in range(loops)))
            return meter.result(loops)

    return asyncio.run(main())


def langgraph_prepare(state: Path, loops: int, _: str) -> None:
    entered = Entered(loops)
    builder, saver_class = _langgraph(entered)

    async def main() -> None:
        async with saver_class.from_conn_string(str(state / "langgraph.db")) as saver:
            graph = builder.compile(checkpointer=saver)
            tasks = [
                asyncio.ensure_future(
                    graph.ainvoke({"round": 0, "output": ""}, _thread(i), durability="sync")
                )
                for i in range(loops)
            ]
            while not entered.all.is_set():  # noqa: ASYNC110 - set from any thread
                await asyncio.sleep(0.01)
            ready()
            await asyncio.gather(*tasks)

    asyncio.run(main())


def langgraph_recover(state: Path, loops: int, _: str) -> dict[str, Any]:
    entered = Entered(loops)
    builder, saver_class = _langgraph(entered)

    async def main() -> dict[str, Any]:
        start = time.perf_counter()
        async with saver_class.from_conn_string(str(state / "langgraph.db")) as saver:
            graph = builder.compile(checkpointer=saver)
            threads = {c.config["configurable"]["thread_id"] async for c in saver.alist(None)}
            resumed: list[asyncio.Future[Any]] = []
            for thread in sorted(threads):
                config = _thread(thread)
                snapshot = await graph.aget_state(config)
                if snapshot.next:  # unfinished: run its next step again
                    resumed.append(
                        asyncio.ensure_future(graph.ainvoke(None, config, durability="sync"))
                    )
            deadline = start + RECOVERY_LIMIT
            while not entered.all.is_set() and time.perf_counter() < deadline:  # noqa: ASYNC110 - set from any thread
                await asyncio.sleep(0.001)
            result = recovered(start, entered)
            print(json.dumps(result), flush=True)
            os._exit(0)
        raise AssertionError("unreachable")

    return asyncio.run(main())


# --- DBOS ---------------------------------------------------------------------------------


def _dbos(state: Path, entered: Entered | None = None) -> tuple[Any, Any]:
    """DBOS configured on SQLite, and the workflow: 5 async steps of ``work``."""
    dbos: Any = importlib.import_module("dbos")
    block = os.environ.get(BLOCK_ENV) == "1"

    async def step(number: int) -> str:
        if entered is not None and number == 1:
            entered.one()
        if block:
            await asyncio.sleep(HOUR)
        return work(number)

    durable_step: Any = dbos.DBOS.step()(step)  # decorated so: DBOS ships no types

    async def loop(task: str) -> str:
        output = ""
        for number in range(1, ROUNDS + 1):
            output = await durable_step(number)
        return output

    workflow: Any = dbos.DBOS.workflow()(loop)

    dbos.DBOS(
        config={
            "name": "peers",
            "system_database_url": f"sqlite:///{state / 'dbos.sqlite'}",
            "log_level": "WARNING",
        }
    )
    return dbos.DBOS, workflow


def dbos_throughput(state: Path, loops: int, _: str) -> dict[str, Any]:
    app, loop = _dbos(state)

    async def main() -> dict[str, Any]:
        app.launch()
        meter = Meter()

        async def one_loop(i: int) -> None:
            handle = await app.start_workflow_async(loop, f"task {i}")
            if await handle.get_result() != work(ROUNDS):
                raise RuntimeError(f"loop {i} did not end at round {ROUNDS}")

        await asyncio.gather(*(one_loop(i) for i in range(loops)))
        result = meter.result(loops)
        app.destroy()
        return result

    return asyncio.run(main())


def dbos_prepare(state: Path, loops: int, _: str) -> None:
    entered = Entered(loops)
    app, loop = _dbos(state, entered)

    async def main() -> None:
        app.launch()
        for i in range(loops):
            await app.start_workflow_async(loop, f"task {i}")
        while not entered.all.is_set():  # noqa: ASYNC110 - set from any thread
            await asyncio.sleep(0.01)
        ready()
        await asyncio.sleep(HOUR)

    asyncio.run(main())


def dbos_recover(state: Path, loops: int, _: str) -> dict[str, Any]:
    entered = Entered(loops)
    start = time.perf_counter()
    app, _loop = _dbos(state, entered)
    app.launch()  # recovers this executor's pending workflows, in threads of its own
    entered.all.wait(RECOVERY_LIMIT)
    result = recovered(start, entered)
    print(json.dumps(result), flush=True)
    os._exit(0)


# --- plain trio + sqlite3 -------------------------------------------------------------------


def _plain_db(state: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(state / "plain.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("CREATE TABLE loops (id TEXT PRIMARY KEY, round INTEGER, output TEXT)")
    return conn


def plain_throughput(state: Path, loops: int, _: str) -> dict[str, Any]:
    conn = _plain_db(state)

    async def main() -> dict[str, Any]:
        meter = Meter()

        async def one_loop(i: int) -> None:
            for number in range(1, ROUNDS + 1):
                output = work(number)
                conn.execute("BEGIN")
                conn.execute(
                    "INSERT OR REPLACE INTO loops VALUES (?, ?, ?)", (f"loop-{i}", number, output)
                )
                conn.execute("COMMIT")
                await trio.lowlevel.checkpoint()  # the next round after the others had a turn

        async with trio.open_nursery() as nursery:
            for i in range(loops):
                nursery.start_soon(one_loop, i)
        return meter.result(loops)

    return trio.run(main)


def group_throughput(state: Path, loops: int, _: str) -> dict[str, Any]:
    conn = _plain_db(state)

    async def main() -> dict[str, Any]:
        meter = Meter()
        waiting: list[tuple[str, int, str]] = []
        batch_done = trio.Event()
        something = trio.Event()

        async def committer() -> None:
            nonlocal waiting, batch_done, something
            while True:
                await something.wait()
                rows, done = waiting, batch_done
                waiting, batch_done, something = [], trio.Event(), trio.Event()
                conn.execute("BEGIN")
                conn.executemany("INSERT OR REPLACE INTO loops VALUES (?, ?, ?)", rows)
                conn.execute("COMMIT")
                done.set()

        async def one_loop(i: int) -> None:
            for number in range(1, ROUNDS + 1):
                waiting.append((f"loop-{i}", number, work(number)))
                done = batch_done
                something.set()
                await done.wait()  # durable: the next round may start

        async with trio.open_nursery() as outer:
            outer.start_soon(committer)
            async with trio.open_nursery() as nursery:
                for i in range(loops):
                    nursery.start_soon(one_loop, i)
            outer.cancel_scope.cancel()
        return meter.result(loops)

    return trio.run(main)


# --- the harness ----------------------------------------------------------------------------

Phase = Callable[[Path, int, str], Any]


class System:
    def __init__(
        self,
        label: str,
        throughput: Phase,
        *,
        prepare: Phase | None = None,
        recover: Phase | None = None,
        durability: str = "normal",
        needs: tuple[str, ...] = (),
    ) -> None:
        self.label = label
        self.throughput = throughput
        self.prepare = prepare
        self.recover = recover
        self.durability = durability
        self.needs = needs

    def missing(self) -> list[str]:
        """The modules this system needs that are not installed."""
        absent = []
        for module in self.needs:
            try:
                found = importlib.util.find_spec(module) is not None
            except ModuleNotFoundError:
                found = False
            if not found:
                absent.append(module)
        return absent


SYSTEMS = {
    "loopactors": System(
        "loopactors, SQLite (normal)",
        loopactors_throughput,
        prepare=loopactors_prepare,
        recover=loopactors_recover,
    ),
    "loopactors-full": System(
        "loopactors, SQLite (full)",
        loopactors_throughput,
        prepare=loopactors_prepare,
        recover=loopactors_recover,
        durability="full",
    ),
    "langgraph": System(
        "LangGraph + AsyncSqliteSaver",
        langgraph_throughput,
        prepare=langgraph_prepare,
        recover=langgraph_recover,
        needs=("langgraph.graph", "langgraph.checkpoint.sqlite.aio", "aiosqlite"),
    ),
    "dbos": System(
        "DBOS on SQLite",
        dbos_throughput,
        prepare=dbos_prepare,
        recover=dbos_recover,
        needs=("dbos",),
    ),
    "plain": System("trio + sqlite3, commit per round", plain_throughput),
    "group": System("trio + sqlite3, group commit", group_throughput),
}


def ready() -> None:
    print("ready", flush=True)


def recovered(start: float, entered: Entered) -> dict[str, Any]:
    return {
        "recovery_s": time.perf_counter() - start if entered.all.is_set() else None,
        "recovered": entered.count,
        "peak_rss_mb": peak_rss_kb() / 1024,
    }


def child(name: str, phase: str, state: Path, loops: int, env: dict[str, str] | None = None) -> str:
    """Run one phase of one system in a process of its own: its standard output."""
    done = subprocess.run(
        [sys.executable, __file__, "--system", name, "--phase", phase, "--loops", str(loops),
         "--state", str(state)],
        check=False, capture_output=True, text=True, env=env,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{name} {phase} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


def last_json(out: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def run_throughput(name: str, loops: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        return last_json(child(name, "throughput", Path(tmp), loops))


def run_recovery(name: str, loops: int) -> dict[str, Any]:
    """Start ``loops`` loops in one process, SIGKILL it once each is in its first round, and
    time the recovery in a second one."""
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp)
        command = [sys.executable, __file__, "--system", name, "--phase", "prepare",
                   "--loops", str(loops), "--state", str(state)]  # fmt: skip
        env = {**os.environ, BLOCK_ENV: "1"}
        log = state / "prepare.log"  # a file: a pipe nobody reads would fill and stall it
        with (
            log.open("wb") as errors,
            subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, env=env) as first,
        ):
            assert first.stdout is not None
            line = first.stdout.readline()
            if line.strip() != b"ready":
                first.kill()
                first.wait()
                tail = log.read_text(errors="replace")[-3000:]
                raise SystemExit(f"{name}: the first process did not get ready:\n{tail}")
            first.send_signal(signal.SIGKILL)
            first.wait()
        # The recovered loops' first round takes an hour again (as loopactors' spec says).
        return last_json(child(name, "recover", state, loops, env))


def run_phase(name: str, phase: str, state: Path, loops: int) -> None:
    system = SYSTEMS[name]
    function = {"throughput": system.throughput, "prepare": system.prepare}.get(
        phase, system.recover
    )
    assert function is not None
    state.mkdir(parents=True, exist_ok=True)
    print(json.dumps(function(state, loops, system.durability)), flush=True)


def median(results: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in results))


def main() -> None:  # noqa: PLR0915 - one table, in order
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--loops", type=int, default=500, help="loops at once (500)")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved runs of each (3)")
    parser.add_argument(
        "--recovery-loops", type=int, default=1_000, help="live loops to recover (1,000)"
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run: 50 loops, one run")
    parser.add_argument(
        "--only", help=f"comma-separated systems to run: {', '.join(SYSTEMS)} (all)"
    )
    parser.add_argument("--system", choices=list(SYSTEMS), help=argparse.SUPPRESS)
    parser.add_argument(
        "--phase", choices=["throughput", "prepare", "recover"], help=argparse.SUPPRESS
    )
    parser.add_argument("--state", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.system:
        run_phase(args.system, args.phase, args.state, args.loops)
        return
    if args.quick:
        args.loops, args.repeat, args.recovery_loops = 50, 1, 50
    names = list(SYSTEMS) if not args.only else [n.strip() for n in args.only.split(",")]
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        raise SystemExit(f"unknown system(s) {', '.join(unknown)}; accepted: {', '.join(SYSTEMS)}")
    runnable = []
    for name in names:
        missing = SYSTEMS[name].missing()
        if missing:
            print(
                f"{SYSTEMS[name].label}: skipped, not installed ({', '.join(missing)}): "
                "pip install -e '.[bench]'"
            )
        else:
            runnable.append(name)

    load_before = os.getloadavg()
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in runnable}
    for _ in range(args.repeat):
        for name in runnable:
            runs[name].append(run_throughput(name, args.loops))
    recoveries: dict[str, dict[str, Any]] = {}
    for name in runnable:
        if SYSTEMS[name].recover is not None:
            recoveries[name] = run_recovery(name, args.recovery_loops)
    load_after = os.getloadavg()

    versions = []
    for package in ("langgraph", "langgraph-checkpoint-sqlite", "dbos"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions.append(f"{package} {importlib.metadata.version(package)}")
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, SQLite {sqlite3.sqlite_version}"
        + "".join(f", {v}" for v in versions)
        + f"; load average before {load_before[0]:.2f}, after {load_after[0]:.2f}"
    )
    print(
        f"{args.loops:,} loops x {ROUNDS} rounds at once, each round committed before the next; "
        f"median of {args.repeat} interleaved run(s); recovery of {args.recovery_loops:,} "
        "live loops after SIGKILL"
    )
    header = "{:<34}{:>22}{:>11}{:>11}{:>13}".format(
        "system", "rounds/s (min-max)", "CPU us/r", "KB/loop", "recovery s"
    )
    print(header)
    print("-" * len(header))
    reference = statistics.median(r["rounds_per_s"] for r in runs[runnable[0]]) if runnable else 0
    for name in runnable:
        results = runs[name]
        rates = sorted(r["rounds_per_s"] for r in results)
        rate = f"{median(results, 'rounds_per_s'):,.0f} ({rates[0]:,.0f}-{rates[-1]:,.0f})"
        recovery = recoveries.get(name)
        if recovery is None:
            shown = "-"
        elif recovery["recovery_s"] is None:
            shown = f"> {RECOVERY_LIMIT:.0f} ({recovery['recovered']:,})"
        else:
            shown = f"{recovery['recovery_s']:.2f}"
        print(
            f"{SYSTEMS[name].label:<34}{rate:>22}{median(results, 'cpu_us_per_round'):>11.0f}"
            f"{median(results, 'rss_kb_per_loop'):>11.1f}{shown:>13}"
        )
    if reference:
        print(f"(rounds/s relative to {SYSTEMS[runnable[0]].label}: " + ", ".join(
            f"{name} {statistics.median(r['rounds_per_s'] for r in runs[name]) / reference:.2f}x"
            for name in runnable[1:]
        ) + ")")  # fmt: skip
    print(
        json.dumps(
            {
                "bench": "peers",
                "loops": args.loops,
                "recovery_loops": args.recovery_loops,
                "load_before": list(load_before),
                "load_after": list(load_after),
                "runs": runs,
                "recovery": recoveries,
            }
        )
    )


if __name__ == "__main__":
    main()
