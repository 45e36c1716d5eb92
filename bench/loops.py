"""Loop runtime benchmark: many concurrent loops, next to a plain-trio baseline, in one run.

    python bench/loops.py                 # 10,000 loops x 5 rounds (about a minute)
    python bench/loops.py --loops 1000    # smaller

Each case runs in a fresh process (so peak RSS is its own): the runtime with the memory
store, the runtime with SQLite, and a plain-trio baseline that runs the same rounds with
direct function calls and no actors. A last case measures stop-to-cancelled latency. Prints
one table and, last, one JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
import trio.testing

from loopactors.actors import Actor, open_node
from loopactors.loops._events import RoundFinished, RoundStarted
from loopactors.loops._model import LoopSpec, LoopState
from loopactors.loops._rules import build_prompt
from loopactors.runtime import RuntimeConfig, open_runtime
from loopactors.workers import RoundRequest, parse_worker

ROUNDS = 5


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def runtime_case(loops: int, store: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        config = RuntimeConfig(
            store=store,  # type: ignore[arg-type]
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
    }


async def baseline_case(loops: int) -> dict[str, Any]:
    """The same rounds with plain trio: one task per loop, direct calls, no actors, no store."""
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
            await rt.start(f"|loop:5| stop me {i}", worker="scripted:latency=60")
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


def run_case(case: str, loops: int) -> dict[str, Any]:
    if case == "memory":
        result = trio.run(runtime_case, loops, "memory")
    elif case == "sqlite":
        result = trio.run(runtime_case, loops, "sqlite")
    elif case == "baseline":
        result = trio.run(baseline_case, loops)
    elif case == "floor":
        result = trio.run(floor_case, loops)
    else:
        result = trio.run(stop_case, loops)
    result["peak_rss_mb"] = peak_rss_mb()
    return result


def in_subprocess(case: str, loops: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--case", case, "--loops", str(loops)],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--loops", type=int, default=10_000)
    parser.add_argument("--stop-loops", type=int, default=1_000)
    parser.add_argument("--case", choices=["memory", "sqlite", "baseline", "stop", "floor"])
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case, args.loops)))
        return
    results = {
        "baseline": in_subprocess("baseline", args.loops),
        "memory": in_subprocess("memory", args.loops),
        "sqlite": in_subprocess("sqlite", args.loops),
        "stop": in_subprocess("stop", args.stop_loops),
        "floor": in_subprocess("floor", args.loops),
    }
    base = results["baseline"]["rounds_per_s"]
    machine = f"{platform.machine()}, {os.cpu_count()} cores"
    print(f"machine: {machine}, Python {platform.python_version()}, trio {trio.__version__}")
    print(f"{args.loops:,} concurrent loops x {ROUNDS} rounds, scripted worker, zero latency")
    header = "{:<26}{:>12}{:>14}{:>14}{:>12}{:>14}".format(
        "case", "rounds/s", "p50 step ms", "p99 step ms", "peak MB", "vs baseline"
    )
    print(header)
    print("-" * len(header))
    for name in ("baseline", "memory", "sqlite"):
        r = results[name]
        print(
            f"{name:<26}{r['rounds_per_s']:>12,.0f}{r['p50_transition_ms']:>14.2f}"
            f"{r['p99_transition_ms']:>14.2f}{r['peak_rss_mb']:>12.0f}"
            f"{r['rounds_per_s'] / base:>14.2f}"
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
    print(json.dumps({"bench": "loops", "loops": args.loops, "rounds": ROUNDS, **results}))


if __name__ == "__main__":
    main()
