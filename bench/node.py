"""Node benchmark: requests per second over the websocket API, and event fan-out.

    python bench/node.py           # status requests over 1 and 50 connections, fan-out to 200
    python bench/node.py --quick   # a smoke run (CI)

The node runs as its own process (`loopactors node`, memory store, the per-connection rate
limit raised so that it does not cap the measurement); the clients run in this process, with
`loopactors.client` (typed replies, one task per request) and with a lean client (pre-encoded
frames, replies counted only), which shows what the node itself can answer. Both processes
share the machine's cores. Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
from trio_websocket import open_websocket_url

from loopactors.client import NodeClient, connect
from loopactors.loops import LoopFinished


def start_node(state: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    # The node's log goes to a file: a pipe nobody reads would fill and stall the node.
    log = (state / "node.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopactors", "node", "--listen", "127.0.0.1:0", "--store",
         "memory", "--state", str(state), "--rate-limit", "1000000"],
        stderr=log,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        match = re.search(r"serving (ws://\S+)", (state / "node.log").read_text())
        if match:
            return proc, match.group(1), (state / "node.token").read_text().strip()
        time.sleep(0.05)
    raise SystemExit("the node did not start")


async def status_rate(
    url: str, token: str, loop_id: str, *, connections: int, inflight: int, seconds: float
) -> float:
    """Status requests answered per second, ``inflight`` outstanding per connection."""
    done = 0
    async with trio.open_nursery() as nursery:
        deadline = trio.current_time() + seconds

        async def worker(node: NodeClient) -> None:
            nonlocal done
            while trio.current_time() < deadline:
                await node.get(loop_id)
                done += 1

        async def client() -> None:
            async with connect(url, token=token) as node, trio.open_nursery() as inner:
                for _ in range(inflight):
                    inner.start_soon(worker, node)

        start = time.perf_counter()
        for _ in range(connections):
            nursery.start_soon(client)
    return done / (time.perf_counter() - start)


async def raw_status_rate(
    url: str, token: str, loop_id: str, *, connections: int, window: int, seconds: float
) -> float:
    """Like :func:`status_rate`, with a minimal client: pre-encoded requests, ``window`` in
    flight per connection, replies counted but not decoded. What the node can answer when
    the client costs little."""
    done = 0
    request = json.dumps({"type": "status", "id": 1, "loop_id": loop_id})
    hello = json.dumps({"type": "hello", "id": 0, "protocol": 1, "token": token})
    start = time.perf_counter()
    deadline = trio.current_time() + seconds

    async def client() -> None:
        nonlocal done
        async with open_websocket_url(url) as ws:
            await ws.send_message(hello)
            await ws.get_message()
            for _ in range(window):
                await ws.send_message(request)
            while trio.current_time() < deadline:
                await ws.get_message()
                done += 1
                await ws.send_message(request)
            for _ in range(window):
                await ws.get_message()

    async with trio.open_nursery() as nursery:
        for _ in range(connections):
            nursery.start_soon(client)
    return done / (time.perf_counter() - start)


async def fanout(
    url: str, token: str, subscribers: int, loops: int, rounds: int
) -> dict[str, float]:
    """Events delivered per second to ``subscribers`` clients subscribed to every loop."""
    per_loop = 2 + 2 * rounds
    expected = loops * per_loop
    received = [0] * subscribers
    ready = trio.Semaphore(0)
    async with trio.open_nursery() as nursery:

        async def subscriber(i: int) -> None:
            async with (
                connect(url, token=token) as node,
                await node.subscribe(queue_size=expected + 10) as events,
            ):
                ready.release()
                finished = 0
                async for event in events:
                    received[i] += 1
                    if isinstance(event, LoopFinished):
                        finished += 1
                        if finished == loops:
                            return

        for i in range(subscribers):
            nursery.start_soon(subscriber, i)
        for _ in range(subscribers):
            await ready.acquire()
        start = time.perf_counter()
        async with connect(url, token=token) as starter:
            for i in range(loops):
                await starter.start(f"|loop:{rounds},fresh| fan-out {i}")
    elapsed = time.perf_counter() - start
    total = sum(received)
    return {
        "events": total,
        "expected": expected * subscribers,
        "seconds": elapsed,
        "events_per_s": total / elapsed,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        proc, url, token = start_node(Path(tmp))
        try:
            async with connect(url, token=token) as node:
                loop_id = (await node.start("|loop:1| a loop to ask about")).loop_id
            seconds = 1.0 if args.quick else 5.0
            results: dict[str, Any] = {
                "status_1_conn_sequential": await status_rate(
                    url, token, loop_id, connections=1, inflight=1, seconds=seconds
                ),
                "status_1_conn_64_inflight": await status_rate(
                    url, token, loop_id, connections=1, inflight=64, seconds=seconds
                ),
                "status_50_conn": await status_rate(
                    url, token, loop_id, connections=50, inflight=1, seconds=seconds
                ),
                "raw_status_1_conn_16_inflight": await raw_status_rate(
                    url, token, loop_id, connections=1, window=16, seconds=seconds
                ),
                "raw_status_50_conn_4_inflight": await raw_status_rate(
                    url, token, loop_id, connections=50, window=4, seconds=seconds
                ),
            }
            subs, loops = (20, 20) if args.quick else (200, 200)
            results["fanout"] = await fanout(url, token, subs, loops, 2)
            results["fanout"]["subscribers"] = subs
            results["fanout"]["loops"] = loops
            return results
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    results = trio.run(run, args)
    fan = results["fanout"]
    rows = [
        (
            "status, 1 connection, one at a time",
            f"{results['status_1_conn_sequential']:,.0f} req/s",
        ),
        (
            "status, 1 connection, 64 in flight",
            f"{results['status_1_conn_64_inflight']:,.0f} req/s",
        ),
        ("status, 50 connections, one at a time", f"{results['status_50_conn']:,.0f} req/s"),
        (
            "status, lean client, 1 conn, 16 in flight",
            f"{results['raw_status_1_conn_16_inflight']:,.0f} req/s",
        ),
        (
            "status, lean client, 50 conns, 4 in flight",
            f"{results['raw_status_50_conn_4_inflight']:,.0f} req/s",
        ),
        (
            f"events to {fan['subscribers']} subscribers ({fan['loops']} loops)",
            f"{fan['events_per_s']:,.0f} ev/s ({fan['events']:,}/{fan['expected']:,})",
        ),
    ]
    for case, rate in rows:
        print(f"{case:<44} {rate:>28}")
    results["machine"] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    print(json.dumps(results))
    if fan["events"] != fan["expected"]:
        raise SystemExit("fan-out lost events")


if __name__ == "__main__":
    main()
