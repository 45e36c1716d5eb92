"""Actor kernel benchmark: loopactors next to plain trio doing the same work, in one run.

    python bench/actors.py            # full run (about a minute on 2 cores)
    python bench/actors.py --quick    # smaller counts, for a smoke test

Prints one table and, last, one JSON line with every figure.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import trio

from loopactors.actors import Actor, open_node


class Tick(msgspec.Struct, frozen=True):
    n: int


class Sink(Actor[Any]):
    def __init__(self) -> None:
        self.count = 0

    async def handle(self, message: Any) -> Any:
        self.count += 1
        return message


TICK = Tick(1)


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


# -- cast throughput ---------------------------------------------------------------------


async def actor_cast(messages: int, producers: int) -> float:
    async with open_node() as node:
        sink = Sink()
        ref = await node.spawn(lambda: sink)
        per = messages // producers

        async def produce() -> None:
            for _ in range(per):
                await ref.cast(TICK)

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(producers):
                nursery.start_soon(produce)
        await ref.call(TICK)  # everything before it has been handled
        elapsed = time.perf_counter() - start
        assert sink.count == per * producers + 1
        return rate(per * producers, elapsed)


async def trio_cast(messages: int, producers: int, batched: bool) -> float:
    send, recv = trio.open_memory_channel[Tick](1024)
    per = messages // producers
    total = per * producers
    done = trio.Event()

    async def consume() -> None:
        seen = 0
        if batched:
            while seen < total:
                await recv.receive()
                seen += 1
                while True:
                    try:
                        recv.receive_nowait()
                    except trio.WouldBlock:
                        break
                    seen += 1
        else:
            async for _ in recv:
                seen += 1
                if seen == total:
                    break
        done.set()

    async def produce() -> None:
        for _ in range(per):
            if batched:
                try:
                    send.send_nowait(TICK)
                    continue
                except trio.WouldBlock:
                    pass
            await send.send(TICK)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        await trio.lowlevel.checkpoint()
        start = time.perf_counter()
        for _ in range(producers):
            nursery.start_soon(produce)
        await done.wait()
        elapsed = time.perf_counter() - start
    return rate(total, elapsed)


# -- call round trips --------------------------------------------------------------------


async def actor_call(calls: int) -> float:
    async with open_node() as node:
        ref = await node.spawn(Sink)
        start = time.perf_counter()
        for _ in range(calls):
            await ref.call(TICK)
        return rate(calls, time.perf_counter() - start)


async def trio_call(calls: int) -> float:
    # The plain-trio way: a request channel, and one reply channel reused for every call.
    requests, serve = trio.open_memory_channel[Tick](1024)
    reply_send, reply_recv = trio.open_memory_channel[Tick](1)

    async def server() -> None:
        async for message in serve:
            await reply_send.send(message)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(server)
        start = time.perf_counter()
        for _ in range(calls):
            await requests.send(TICK)
            await reply_recv.receive()
        elapsed = time.perf_counter() - start
        nursery.cancel_scope.cancel()
    return rate(calls, elapsed)


# -- spawns ------------------------------------------------------------------------------


async def actor_spawn(count: int) -> float:
    async with open_node() as node:
        start = time.perf_counter()
        for _ in range(count):
            await node.spawn(Sink)
        return rate(count, time.perf_counter() - start)


async def idle_task(
    task_status: trio.TaskStatus[trio.MemorySendChannel[Tick]] = trio.TASK_STATUS_IGNORED,
) -> None:
    send, recv = trio.open_memory_channel[Tick](1024)
    task_status.started(send)
    async for _ in recv:
        pass


async def trio_spawn(count: int) -> float:
    async with trio.open_nursery() as nursery:
        start = time.perf_counter()
        for _ in range(count):
            await nursery.start(idle_task)
        elapsed = time.perf_counter() - start
        nursery.cancel_scope.cancel()
    return rate(count, elapsed)


# -- memory per idle actor (each in a fresh process: freed memory would skew the next) -----


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def memory_probe(kind: str, count: int) -> float:
    async with trio.open_nursery() as nursery:
        if kind == "actor":
            async with open_node() as node:
                await node.spawn(Sink)
                gc.collect()
                before = rss_bytes()
                for _ in range(count):
                    await node.spawn(Sink)
                gc.collect()
                return (rss_bytes() - before) / count
        await nursery.start(idle_task)
        gc.collect()
        before = rss_bytes()
        for _ in range(count):
            await nursery.start(idle_task)
        gc.collect()
        per = (rss_bytes() - before) / count
        nursery.cancel_scope.cancel()
        return per


def memory_in_subprocess(kind: str, count: int) -> float:
    out = subprocess.run(
        [sys.executable, __file__, "--memory-probe", kind, "--count", str(count)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return float(out.strip())


# -- the run -----------------------------------------------------------------------------


def best_of(runs: int, fn: Callable[[], Awaitable[float]]) -> float:
    return max(trio.run(fn) for _ in range(runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--memory-probe", choices=["actor", "trio"])
    parser.add_argument("--count", type=int, default=10_000)
    args = parser.parse_args()
    if args.memory_probe:
        print(trio.run(memory_probe, args.memory_probe, args.count))
        return

    scale = 10 if args.quick else 1
    messages, calls, spawns, idle = 500_000 // scale, 50_000 // scale, 10_000 // scale, 10_000
    runs = 1 if args.quick else 3
    rows: list[tuple[str, str, float, str, float, str]] = []

    def row(  # noqa: PLR0917 - one positional per table column
        name: str, unit: str, ours: float, base_name: str, base: float, goal: str
    ) -> None:
        rows.append((name, unit, ours, base_name, base, goal))

    row(
        "cast 1->1",
        "msg/s",
        best_of(runs, lambda: actor_cast(messages, 1)),
        "trio, one await per message",
        best_of(runs, lambda: trio_cast(messages, 1, False)),
        ">= 400k",
    )
    row(
        "cast 1->1",
        "msg/s",
        rows[-1][2],
        "trio, drained in batches",
        best_of(runs, lambda: trio_cast(messages, 1, True)),
        "",
    )
    row(
        "cast 8->1",
        "msg/s",
        best_of(runs, lambda: actor_cast(messages, 8)),
        "trio, one await per message",
        best_of(runs, lambda: trio_cast(messages, 8, False)),
        "",
    )
    row(
        "call round trip",
        "calls/s",
        best_of(runs, lambda: actor_call(calls)),
        "trio, reused reply channel",
        best_of(runs, lambda: trio_call(calls)),
        ">= 25k",
    )
    row(
        "spawn",
        "actors/s",
        best_of(runs, lambda: actor_spawn(spawns)),
        "trio task + channel",
        best_of(runs, lambda: trio_spawn(spawns)),
        "",
    )
    row(
        f"idle memory ({idle:,})",
        "bytes/actor",
        memory_in_subprocess("actor", idle),
        "trio task + channel",
        memory_in_subprocess("trio", idle),
        "<= 8 KB",
    )

    machine = f"{platform.machine()}, {os.cpu_count()} cores"
    print(f"machine: {machine}, Python {platform.python_version()}, trio {trio.__version__}")
    columns = ("measure", "loopactors", "unit", "baseline", "baseline is", "goal")
    header = "{:<24}{:>14}  {:<12}{:>14}  {:<30}{:<10}".format(*columns)
    print(header)
    print("-" * len(header))
    for name, unit, ours, base_name, base, goal in rows:
        print(f"{name:<24}{ours:>14,.0f}  {unit:<12}{base:>14,.0f}  {base_name:<30}{goal:<10}")
    print(
        json.dumps(
            {
                "bench": "actors",
                "python": platform.python_version(),
                "trio": trio.__version__,
                "rows": [
                    {
                        "measure": n,
                        "unit": u,
                        "loopactors": round(o),
                        "baseline": base_name,
                        "baseline_value": round(b),
                        "goal": g,
                    }
                    for n, u, o, base_name, b, g in rows
                ],
            }
        )
    )


if __name__ == "__main__":
    main()
