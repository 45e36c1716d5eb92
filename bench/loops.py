"""Loop runtime benchmark: many concurrent loops, next to a plain-trio baseline, in one run.

    python bench/loops.py                 # 10,000 loops x 5 rounds (about a minute)
    python bench/loops.py --loops 1000    # smaller
    python bench/loops.py --durability    # SQLite with durability normal and full, 3 times

Each case runs in a fresh process (so peak RSS is its own). The headline is the natural
embedding: each loop started and awaited by its own task (``open_runtime``, ``Runtime.start``,
``LoopHandle.wait``), with the memory store and with SQLite. Then the runtime driven through
one event subscription (all loops started from one nursery, their events read in batches),
with each store, and two plain-trio baselines, one task per loop and direct
function calls, no actors. The baseline does the runtime's work for the same rounds (spec,
breaker checks, prompt, records and events in the in-memory store backend, each round in its
own cancel scope); the bare baseline only calls the worker. Last, stop-to-cancelled latency
and the scheduling floor. Prints one table and, last, one JSON line.

Also ``sqlite-floor`` (in the full run): plain trio + sqlite3 committing one row per round,
the SQLite store's yardstick; and ``idle`` (only with ``--case idle``): the resident set per
loop waiting for its next round.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import platform
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio
import trio.testing

from loopactors.actors import Actor, open_node
from loopactors.ledger import Ledger, check_circuit_breaker
from loopactors.loops._events import (
    AnyEvent,
    LoopFinished,
    RoundFinished,
    RoundStarted,
    RoundSummary,
)
from loopactors.loops._model import LoopSpec, LoopState, RoundRecord
from loopactors.loops._rules import (
    build_prompt,
    check_before_round,
    next_phase,
    normalize_output,
    round_intent,
)
from loopactors.runtime import RuntimeConfig, open_runtime
from loopactors.runtime._ledger import attempt_of, breaker_config
from loopactors.runtime._spec import build_spec
from loopactors.storage import (
    DURABILITIES,
    MemoryBackend,
    SqliteBackend,
    Write,
    check_durability,
)
from loopactors.workers import RoundRequest, parse_worker

ROUNDS = 5


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def runtime_case(loops: int, store: str, durability: str = "normal") -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        config = RuntimeConfig(
            store=store,
            durability=check_durability(durability),
            state_dir=Path(tmp),
            max_live_loops=loops,
            max_concurrent_rounds=loops,
            event_queue_size=loops * ROUNDS * 3,
        )
        async with open_runtime(config) as rt:
            finished_at: dict[tuple[str, int], float] = {}
            gaps: list[float] = []
            with rt.subscribe() as events:
                start = time.perf_counter()
                cpu_start = time.process_time()
                # Events are read while the loops are being started, and what is queued is
                # read at each wake-up (as an actor drains its mailbox). Read only after the
                # last start returned, one event per await, they waited in the queue and were
                # read after the work was done, one scheduler pass each (see
                # docs/benchmarks.md).
                async with trio.open_nursery() as nursery:
                    for i in range(loops):
                        nursery.start_soon(rt.start, f"|loop:{ROUNDS},fresh| task {i}")
                    done = 0
                    while done < loops:
                        batch = [await events.receive()]
                        with contextlib.suppress(trio.WouldBlock):
                            while True:
                                batch.append(events.receive_nowait())
                        now = time.perf_counter()
                        for event in batch:
                            if isinstance(event, RoundFinished):
                                finished_at[(event.loop_id, event.round)] = now
                                if event.round == ROUNDS:
                                    done += 1
                            elif isinstance(event, RoundStarted) and event.round > 1:
                                previous = finished_at.pop((event.loop_id, event.round - 1), None)
                                if previous is not None:
                                    gaps.append(now - previous)
                elapsed = time.perf_counter() - start
                cpu = time.process_time() - cpu_start
            stats = await rt.store_statistics()
            assert stats.rounds == loops * ROUNDS, stats
            assert stats.live_loops == 0, stats
    return {
        "rounds_per_s": loops * ROUNDS / elapsed,
        "p50_transition_ms": percentile(gaps, 0.50) * 1000,
        "p99_transition_ms": percentile(gaps, 0.99) * 1000,
        "seconds": elapsed,
        "cpu_seconds": cpu,
        "commits": stats.commits,
    }


async def embedded_case(loops: int, store: str, durability: str = "normal") -> dict[str, Any]:
    """The natural embedding: each loop started and awaited by its own task, through
    ``open_runtime``, ``Runtime.start`` and ``LoopHandle.wait`` only (the headline)."""
    with tempfile.TemporaryDirectory() as tmp:
        config = RuntimeConfig(
            store=store,
            durability=check_durability(durability),
            state_dir=Path(tmp),
            max_live_loops=loops,
            max_concurrent_rounds=loops,
        )
        async with open_runtime(config) as rt:

            async def one_loop(i: int) -> None:
                handle = rt.handle(await rt.start(f"|loop:{ROUNDS},fresh| task {i}"))
                final = await handle.wait()
                if final.phase != "complete":
                    raise RuntimeError(f"loop {handle.loop_id} ended {final.phase}")

            result = await _timed_loops(loops, one_loop, [])
            stats = await rt.store_statistics()
            assert stats.rounds == loops * ROUNDS, stats
            assert stats.live_loops == 0, stats
    return {**result, "commits": stats.commits}


async def bare_baseline_case(loops: int) -> dict[str, Any]:
    """The worker calls alone: one task per loop, a prompt, a request and a state per round,
    no spec checks, no breaker, no records, no store, no events."""
    worker = parse_worker("scripted")
    gaps: list[float] = []

    async def one_loop(i: int) -> None:
        state = LoopState(loop_id=f"l{i}", spec=LoopSpec(task=f"task {i}", rounds=ROUNDS))
        previous_end = None
        for number in range(1, ROUNDS + 1):
            now = time.perf_counter()
            if previous_end is not None:
                gaps.append(now - previous_end)
            prompt = build_prompt(state)
            request = RoundRequest(
                loop_id=state.loop_id, round=number, rounds=ROUNDS, mode="fresh",
                prompt=prompt.text, task=state.spec.task, worker="scripted",
            )  # fmt: skip
            result = await worker.run(request, None)
            state = LoopState(
                loop_id=state.loop_id, spec=state.spec, round=number + 1,
                completed_rounds=state.completed_rounds + 1, last_output=result.output,
            )  # fmt: skip
            previous_end = time.perf_counter()

    return await _timed_loops(loops, one_loop, gaps)


async def sqlite_floor_case(loops: int) -> dict[str, Any]:
    """The durable floor: the bare baseline's rounds, each committed as one row in its own
    SQLite transaction before the next round starts, with the SQLite store's pragmas (WAL,
    ``synchronous = NORMAL``), on the event loop's thread as the store commits. The issue's
    yardstick for the SQLite store: "a plain trio + sqlite3 loop that commits one row per
    round with the same pragmas"."""
    worker = parse_worker("scripted")
    gaps: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        conn = sqlite3.connect(Path(tmp) / "floor.db", isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute(
            "CREATE TABLE rounds (loop_id TEXT, round INTEGER, output TEXT, "
            "PRIMARY KEY (loop_id, round))"
        )

        async def one_loop(i: int) -> None:
            state = LoopState(loop_id=f"l{i}", spec=LoopSpec(task=f"task {i}", rounds=ROUNDS))
            previous_end = None
            for number in range(1, ROUNDS + 1):
                now = time.perf_counter()
                if previous_end is not None:
                    gaps.append(now - previous_end)
                prompt = build_prompt(state)
                request = RoundRequest(
                    loop_id=state.loop_id, round=number, rounds=ROUNDS, mode="fresh",
                    prompt=prompt.text, task=state.spec.task, worker="scripted",
                )  # fmt: skip
                result = await worker.run(request, None)
                conn.execute("BEGIN")
                conn.execute(
                    "INSERT INTO rounds VALUES (?, ?, ?)", (state.loop_id, number, result.output)
                )
                conn.execute("COMMIT")
                state = LoopState(
                    loop_id=state.loop_id, spec=state.spec, round=number + 1,
                    completed_rounds=state.completed_rounds + 1, last_output=result.output,
                )  # fmt: skip
                previous_end = time.perf_counter()

        try:
            result = await _timed_loops(loops, one_loop, gaps)
            (count,) = conn.execute("SELECT count(*) FROM rounds").fetchone()
            assert count == loops * ROUNDS, count
        finally:
            conn.close()
    return result


def rss_now_mb() -> float:
    """The process's resident set now (not its peak), from /proc."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


async def idle_case(loops: int) -> dict[str, Any]:
    """Idle live loops: each runs its first round, then waits an hour for the next (an
    inter-round delay), on SQLite (which keeps rounds and events on disk, so what stays in
    the process is the runtime's own): the resident set per waiting loop, after a garbage
    collection, against the runtime open with no loop."""
    waiting = 0
    all_waiting = trio.Event()

    def observe(event: AnyEvent) -> None:
        nonlocal waiting
        if isinstance(event, RoundFinished) and event.round == 1:
            waiting += 1
            if waiting == loops:
                all_waiting.set()

    with tempfile.TemporaryDirectory() as tmp:
        config = RuntimeConfig(
            store="sqlite",
            state_dir=Path(tmp),
            max_live_loops=loops,
            max_concurrent_rounds=loops,
            inter_round_delay=3600.0,
            event_queue_size=loops * 4,
        )
        async with open_runtime(config, observer=observe) as rt:
            gc.collect()
            before = rss_now_mb()
            limiter = trio.CapacityLimiter(200)  # as bench/recovery.py starts them

            async def start(i: int) -> None:
                async with limiter:
                    await rt.start(f"|loop:{ROUNDS},fresh| task {i}")

            started = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for i in range(loops):
                    nursery.start_soon(start, i)
            await all_waiting.wait()
            await trio.sleep(0.2)  # the last runners schedule their wake-ups
            seconds = time.perf_counter() - started
            gc.collect()
            after = rss_now_mb()
            result = {
                "loops": loops,
                "rss_before_mb": before,
                "rss_after_mb": after,
                "bytes_per_idle_loop": (after - before) * 2**20 / loops,
                "seconds": seconds,
                "peak_rss_mb": peak_rss_mb(),
            }
            # Stopping tens of thousands of loops is not what is measured: leave at once.
            print(json.dumps(result), flush=True)
            os._exit(0)
    raise AssertionError("unreachable")


async def baseline_case(loops: int, store: str = "memory") -> dict[str, Any]:
    """The runtime's work for the same rounds, done with direct function calls in one plain
    trio task per loop: no actors, no messages, no scheduling between steps.

    ``store="sqlite"`` writes the same writes to the SQLite backend, each in its own
    transaction as it is made (the runtime's Store groups many loops' writes in one): what the
    design's rows cost with no actor at all, against the one-row floor.

    Per loop, what the runtime does: the spec built from the same ``|loop|`` text, and per
    round the loop breaker and the ledger breaker, the prompt, the round's intent (state,
    running record, events) written to the in-memory store backend, the worker run in its own
    cancel scope with the round timeout, the record, the ledger attempt, the no-progress
    comparison, the next state and the events, written again; the events go to a list, as
    the runtime's go to the subscriber. Only what exists because of the actors is left out.
    """
    if store == "memory":
        return await _baseline_loops(loops, MemoryBackend())
    with tempfile.TemporaryDirectory() as tmp:
        backend = SqliteBackend(Path(tmp) / "baseline.db")
        try:
            return await _baseline_loops(loops, backend)
        finally:
            backend.close()


async def _baseline_loops(  # noqa: PLR0915 - one loop, in order
    loops: int, backend: MemoryBackend | SqliteBackend
) -> dict[str, Any]:
    config = RuntimeConfig(store="memory")
    worker = parse_worker("scripted")
    published: list[AnyEvent] = []
    gaps: list[float] = []

    def commit(write: Write) -> None:
        backend.commit((write,))
        published.extend(write.events)

    async def one_loop(i: int) -> None:
        spec = build_spec(config, f"|loop:{ROUNDS},fresh| task {i}")
        state = LoopState(loop_id=f"l{i}", spec=spec, created_at=time.time())
        commit(Write(state=state))
        breaker = breaker_config(spec)
        attempts: list[Any] = []
        summary: list[RoundSummary] = []
        normalized: str | None = None
        previous_end = None
        while True:
            now = time.time()
            if previous_end is not None:
                gaps.append(time.perf_counter() - previous_end)
            state = state.moved("dispatching", started_at=state.started_at or now)
            verdict = check_before_round(state, now)
            ledger = Ledger(goal=spec.task, attempts=tuple(attempts))
            decision = check_circuit_breaker(ledger, breaker)
            if verdict is not None or decision.escalate:  # work not inside an assert (-O)
                raise RuntimeError(f"the baseline's loop {state.loop_id} escalated")
            prompt = build_prompt(state)
            state = state.moved("awaiting_worker")
            running, events = round_intent(state, prompt, now, first=state.round == 1)
            commit(Write(state=state, round=running, events=tuple(events)))
            request = RoundRequest(
                loop_id=state.loop_id, round=state.round, rounds=spec.rounds, mode=spec.mode,
                prompt=prompt.text, task=spec.task, worker=spec.worker,
            )  # fmt: skip
            started = time.monotonic()
            with trio.move_on_after(spec.round_timeout):
                result = await worker.run(request, None)
            record = RoundRecord(
                loop_id=state.loop_id, round=state.round, status=result.status,
                seed_source=prompt.seed_source, output=result.output, tokens=result.tokens,
                started_at=now, duration=time.monotonic() - started,
            )  # fmt: skip
            attempts.append(attempt_of(record, spec.task))
            summary.append(RoundSummary(round=record.round, status="completed"))
            current = normalize_output(result.output)
            state = state.moved(
                "summarizing", completed_rounds=state.completed_rounds + 1,
                last_output=result.output, consecutive_failures=0,
                stale_rounds=state.stale_rounds + 1 if current == normalized else 0,
                tokens_used=state.tokens_used + result.tokens,
            )  # fmt: skip
            normalized = current
            finished = RoundFinished(
                loop_id=state.loop_id, at=time.time(), round=record.round, rounds=spec.rounds,
                status=record.status, duration=record.duration, tokens=record.tokens,
            )  # fmt: skip
            previous_end = time.perf_counter()
            if next_phase(state) != "complete":
                state = state.moved("dispatching", round=state.round + 1)
                commit(Write(state=state, round=record, events=(finished,)))
                continue
            final = state.moved("finalizing").moved("complete")
            done = LoopFinished(
                loop_id=state.loop_id, at=time.time(), phase="complete", rounds=spec.rounds,
                completed_rounds=final.completed_rounds, summary=tuple(summary),
            )  # fmt: skip
            commit(Write(state=final, round=record, events=(finished, done)))
            return

    result = await _timed_loops(loops, one_loop, gaps)
    assert backend.statistics().rounds == loops * ROUNDS
    assert len(published) == loops * (2 * ROUNDS + 2)
    return result


async def _timed_loops(
    loops: int, one_loop: Callable[[int], Awaitable[None]], gaps: list[float]
) -> dict[str, Any]:
    start = time.perf_counter()
    cpu_start = time.process_time()
    async with trio.open_nursery() as nursery:
        for i in range(loops):
            nursery.start_soon(one_loop, i)
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    return {
        "rounds_per_s": loops * ROUNDS / elapsed,
        "p50_transition_ms": percentile(gaps, 0.50) * 1000,
        "p99_transition_ms": percentile(gaps, 0.99) * 1000,
        "seconds": elapsed,
        "cpu_seconds": cpu,
    }


async def stop_case(loops: int) -> dict[str, Any]:
    """Stop-to-cancelled: loops mid-round (a slow worker), each stopped and timed."""
    config = RuntimeConfig(store="memory", max_live_loops=loops, max_concurrent_rounds=loops)
    async with open_runtime(config) as rt:
        handles = [
            rt.handle(await rt.start(f"|loop:5| stop me {i}", worker="scripted:latency=60"))
            for i in range(loops)
        ]
        await trio.sleep(0.5)
        latencies = []
        for handle in handles:
            start = time.perf_counter()
            state = await handle.stop()
            latencies.append(time.perf_counter() - start)
            assert state.phase == "cancelled"
    return {
        "p50_stop_ms": percentile(latencies, 0.50) * 1000,
        "p99_stop_ms": percentile(latencies, 0.99) * 1000,
    }


async def floor_case(loops: int) -> dict[str, Any]:
    """What one round must cost in scheduling alone, in the runtime's design: each primitive
    timed ``loops * ROUNDS`` times, 1,000 tasks or actors at a time, in CPU microseconds per
    operation."""
    ops = loops * ROUNDS
    wave = min(loops, 1000)

    def per_op(cpu_start: float) -> float:
        return (time.process_time() - cpu_start) / ops * 1e6

    async def checkpoints() -> None:
        for _ in range(ROUNDS):
            await trio.lowlevel.checkpoint()

    cpu = time.process_time()
    for _ in range(loops // wave):
        async with trio.open_nursery() as nursery:
            for _ in range(wave):
                nursery.start_soon(checkpoints)
    checkpoint_us = per_op(cpu)

    async def one_round() -> None:
        with trio.CancelScope():
            await trio.lowlevel.checkpoint()

    cpu = time.process_time()
    for _ in range(ops // wave):
        async with trio.open_nursery() as nursery:
            for _ in range(wave):
                nursery.start_soon(one_round)
    round_task_us = per_op(cpu)

    class Idle(Actor[Any]):
        async def handle(self, message: Any) -> None:
            return None

    async with open_node() as node:
        refs = [await node.spawn(Idle) for _ in range(wave)]
        await trio.testing.wait_all_tasks_blocked()
        cpu = time.process_time()
        for n in range(ops // wave):
            for ref in refs:
                ref.cast_nowait(n)
            await trio.testing.wait_all_tasks_blocked()
        wake_us = per_op(cpu)

    send, receive = trio.open_memory_channel[int](loops * ROUNDS)

    async def consume() -> None:
        async for _ in receive:
            pass

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        await trio.testing.wait_all_tasks_blocked()
        cpu = time.process_time()
        for n in range(ops):
            send.send_nowait(n)
        send.close()
    event_us = per_op(cpu)
    return {
        "checkpoint_us": checkpoint_us,
        "round_task_us": round_task_us,
        "actor_wake_us": wake_us,
        "event_receive_us": event_us,
    }


def _ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f}ms"  # NaN: not measured in that case


def run_case(case: str, loops: int, durability: str = "normal") -> dict[str, Any]:
    if case in ("embedded-memory", "embedded-sqlite"):
        result = trio.run(embedded_case, loops, case.removeprefix("embedded-"), durability)
    elif case == "memory":
        result = trio.run(runtime_case, loops, "memory")
    elif case == "sqlite":
        result = trio.run(runtime_case, loops, "sqlite", durability)
    elif case == "baseline":
        result = trio.run(baseline_case, loops)
    elif case == "baseline-sqlite":
        result = trio.run(baseline_case, loops, "sqlite")
    elif case == "bare":
        result = trio.run(bare_baseline_case, loops)
    elif case == "idle":
        trio.run(idle_case, loops)  # prints its own result and exits
    elif case == "sqlite-floor":
        result = trio.run(sqlite_floor_case, loops)
    elif case == "floor":
        result = trio.run(floor_case, loops)
    else:
        result = trio.run(stop_case, loops)
    result["peak_rss_mb"] = peak_rss_mb()
    return result


def in_subprocess(
    case: str, loops: int, script: str = __file__, durability: str = "normal"
) -> dict[str, Any]:
    """Run ``script --case CASE --loops N`` in a fresh process (its own peak RSS); its last
    line of output is the case's result as JSON."""
    given = ["--case-durability", durability] if durability != "normal" else []
    out = subprocess.run(
        [sys.executable, script, "--case", case, "--loops", str(loops), *given],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--loops", type=int, default=10_000)
    parser.add_argument("--stop-loops", type=int, default=1_000)
    parser.add_argument(
        "--case",
        choices=[
            "embedded-memory", "embedded-sqlite", "memory", "sqlite", "baseline",
            "baseline-sqlite", "bare", "sqlite-floor", "stop", "floor", "idle",
        ],
    )  # fmt: skip
    parser.add_argument(
        "--durability",
        action="store_true",
        help="only the SQLite cases, with durability normal and with full, interleaved",
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs of each (--durability)")
    parser.add_argument("--case-durability", choices=DURABILITIES, default="normal")
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case, args.loops, args.case_durability)))
        return
    if args.durability:
        durability_main(args.loops, args.repeat)
        return
    load_before = os.getloadavg()
    results = {
        "embedded-memory": in_subprocess("embedded-memory", args.loops),
        "embedded-sqlite": in_subprocess("embedded-sqlite", args.loops),
        "baseline": in_subprocess("baseline", args.loops),
        "baseline-sqlite": in_subprocess("baseline-sqlite", args.loops),
        "bare": in_subprocess("bare", args.loops),
        "sqlite-floor": in_subprocess("sqlite-floor", args.loops),
        "memory": in_subprocess("memory", args.loops),
        "sqlite": in_subprocess("sqlite", args.loops),
        "stop": in_subprocess("stop", args.stop_loops),
        "floor": in_subprocess("floor", args.loops),
    }
    base = results["baseline"]["rounds_per_s"]
    bare = results["bare"]["rounds_per_s"]
    load_after = os.getloadavg()
    machine = f"{platform.machine()}, {os.cpu_count()} cores"
    print(
        f"machine: {machine}, Python {platform.python_version()}, trio {trio.__version__}; "
        f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}"
    )
    print(f"{args.loops:,} concurrent loops x {ROUNDS} rounds, scripted worker, zero latency")
    header = "{:<30}{:>10}{:>10}{:>10}{:>10}{:>9}{:>13}{:>9}".format(
        "case", "rounds/s", "CPU us/r", "p50 step", "p99 step", "peak MB", "vs baseline", "vs bare"
    )
    print(header)
    print("-" * len(header))
    rounds = args.loops * ROUNDS
    labels = {
        "embedded-memory": "start+wait per task, memory",
        "embedded-sqlite": "start+wait per task, SQLite",
        "baseline": "baseline (same work)",
        "baseline-sqlite": "same work, SQLite, no actors",
        "bare": "bare baseline (worker calls)",
        "sqlite-floor": "trio + sqlite3, commit a round",
        "memory": "loopactors, memory store",
        "sqlite": "loopactors, SQLite store",
    }
    for name, label in labels.items():
        r = results[name]
        print(
            f"{label:<30}{r['rounds_per_s']:>10,.0f}{r['cpu_seconds'] / rounds * 1e6:>10.1f}"
            f"{_ms(r['p50_transition_ms']):>10}{_ms(r['p99_transition_ms']):>10}"
            f"{r['peak_rss_mb']:>9.0f}{r['rounds_per_s'] / base:>13.2f}"
            f"{r['rounds_per_s'] / bare:>9.2f}"
        )
    floor_rate = results["sqlite-floor"]["rounds_per_s"]
    print(
        "SQLite store against trio + sqlite3 committing each round (goal >= 0.5): "
        f"one subscription {results['sqlite']['rounds_per_s'] / floor_rate:.2f}, "
        f"start+wait per task {results['embedded-sqlite']['rounds_per_s'] / floor_rate:.2f}; "
        "the same work with no actor, a transaction per write "
        f"{results['baseline-sqlite']['rounds_per_s'] / floor_rate:.2f}"
    )
    stop = results["stop"]
    print(
        f"stop-to-cancelled over {args.stop_loops:,} loops mid-round: "
        f"p50 {stop['p50_stop_ms']:.2f} ms, p99 {stop['p99_stop_ms']:.2f} ms"
    )
    floor = results["floor"]
    print(
        "scheduling floor, CPU us per operation: trio checkpoint "
        f"{floor['checkpoint_us']:.1f}, round task (spawn, cancel scope, checkpoint, exit) "
        f"{floor['round_task_us']:.1f}, idle actor woken by a cast {floor['actor_wake_us']:.1f}, "
        f"event received by a subscriber {floor['event_receive_us']:.1f}"
    )
    load = {"load_before": list(load_before), "load_after": list(load_after)}
    print(json.dumps({"bench": "loops", "loops": args.loops, "rounds": ROUNDS, **load, **results}))


def durability_main(loops: int, repeat: int) -> None:
    """The SQLite store with ``durability = "normal"`` (``synchronous = NORMAL``) and
    ``"full"`` (``synchronous = FULL``: the WAL synced at every commit), runs interleaved so
    that both see the same load; the median of ``repeat`` runs of each."""
    load_before = os.getloadavg()
    cases = ("sqlite", "embedded-sqlite")
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for _ in range(repeat):
        for case in cases:
            for durability in DURABILITIES:
                result = in_subprocess(case, loops, durability=durability)
                runs.setdefault((case, durability), []).append(result)
    load_after = os.getloadavg()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, SQLite {sqlite3.sqlite_version}; load average before "
        f"{load_before[0]:.2f}, after {load_after[0]:.2f}"
    )
    print(f"{loops:,} concurrent loops x {ROUNDS} rounds, scripted worker, median of {repeat}")
    header = "{:<30}{:>11}{:>24}{:>10}{:>15}{:>9}".format(
        "case", "durability", "rounds/s (min-max)", "CPU us/r", "rounds/commit", "peak MB"
    )
    print(header)
    print("-" * len(header))
    labels = {
        "sqlite": "loopactors, SQLite store",
        "embedded-sqlite": "start+wait per task, SQLite",
    }
    summary: dict[str, Any] = {}
    for case in cases:
        for durability in DURABILITIES:
            results = runs[(case, durability)]
            rates = sorted(r["rounds_per_s"] for r in results)
            middle = sorted(results, key=lambda r: r["rounds_per_s"])[len(results) // 2]
            print(
                f"{labels[case]:<30}{durability:>11}"
                f"{f'{rates[len(rates) // 2]:,.0f} ({rates[0]:,.0f}-{rates[-1]:,.0f})':>24}"
                f"{middle['cpu_seconds'] / (loops * ROUNDS) * 1e6:>10.1f}"
                f"{loops * ROUNDS / max(middle['commits'], 1):>15.1f}"
                f"{middle['peak_rss_mb']:>9.0f}"
            )
            summary[f"{case}-{durability}"] = results
    load = {"load_before": list(load_before), "load_after": list(load_after)}
    print(json.dumps({"bench": "loops-durability", "loops": loops, **load, **summary}))


if __name__ == "__main__":
    main()
