"""Node benchmark: requests per second over the websocket API, and event fan-out.

    python bench/node.py           # status requests over 1 and 50 connections, fan-out to 200
    python bench/node.py --quick   # a smoke run (CI)
    python bench/node.py --glob    # /healthz and stop while an agent runs the worst glob

``--glob`` (issue 27, item 5): a loop's agent, driven by a chat-completions server on loopback
that answers every request with a ``glob`` call of ``*a`` x 24 + ``*b``, globs a workspace of
names of 40 a's (Python's ``re`` backtracked on each for minutes and held the GIL: the node
froze). While the agent globs, ``/healthz`` is asked every 50 ms, then the loop is stopped;
prints how long each took.

The node runs as its own process (`loopactors node`, memory store, the per-connection rate
limit raised so that it does not cap the measurement); the clients run in this process, with
`loopactors.client` (typed replies, one task per request) and with a lean client (pre-encoded
frames, replies counted only), which shows what the node itself can answer. Both processes
share the machine's cores. Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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


def node_cpu(pid: int) -> float:
    """Seconds of CPU (user + system) the node process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def status_rate(
    url: str, token: str, loop_id: str, *, connections: int, inflight: int, seconds: float
) -> tuple[float, int]:
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
    return done / (time.perf_counter() - start), done


async def raw_status_rate(
    url: str, token: str, loop_id: str, *, connections: int, window: int, seconds: float
) -> tuple[float, int]:
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
    return done / (time.perf_counter() - start), done


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
            cases: dict[str, Callable[[], Awaitable[tuple[float, int]]]] = {
                "status_1_conn_sequential": functools.partial(
                    status_rate, url, token, loop_id, connections=1, inflight=1, seconds=seconds
                ),
                "status_1_conn_64_inflight": functools.partial(
                    status_rate, url, token, loop_id, connections=1, inflight=64, seconds=seconds
                ),
                "status_50_conn": functools.partial(
                    status_rate, url, token, loop_id, connections=50, inflight=1, seconds=seconds
                ),
                "raw_status_1_conn_16_inflight": functools.partial(
                    raw_status_rate, url, token, loop_id, connections=1, window=16, seconds=seconds
                ),
                "raw_status_50_conn_4_inflight": functools.partial(
                    raw_status_rate, url, token, loop_id, connections=50, window=4, seconds=seconds
                ),
            }
            results: dict[str, Any] = {}
            for name, case in cases.items():
                cpu = node_cpu(proc.pid)
                rate, requests = await case()
                results[name] = rate
                # The node's own CPU per request answered (the clients' is not in it).
                results[f"{name}_node_us"] = (node_cpu(proc.pid) - cpu) / requests * 1e6
            subs, loops = (20, 20) if args.quick else (200, 200)
            cpu = node_cpu(proc.pid)
            results["fanout"] = await fanout(url, token, subs, loops, 2)
            results["fanout"]["node_us_per_event"] = (
                (node_cpu(proc.pid) - cpu) / max(results["fanout"]["events"], 1) * 1e6
            )
            results["fanout"]["subscribers"] = subs
            results["fanout"]["loops"] = loops
            return results
        finally:
            proc.terminate()
            proc.wait(timeout=30)


#: Issue 27's worst glob and the name it backtracked on.
WORST_GLOB = "*a" * 24 + "*b"
VICTIM = "a" * 40


class GlobModel:
    """A chat-completions server on loopback whose every reply asks for the worst glob."""

    def __init__(self) -> None:
        #: When each request came (perf_counter): between two, the agent ran one glob.
        self.requests: list[float] = []
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                model.requests.append(time.perf_counter())
                call = {"id": f"g{len(model.requests)}", "type": "function",
                        "function": {"name": "glob",
                                     "arguments": json.dumps({"pattern": WORST_GLOB})}}  # fmt: skip
                message = {"role": "assistant", "content": None, "tool_calls": [call]}
                data = json.dumps({
                    "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5},
                }).encode()  # fmt: skip
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the loop was stopped while it asked

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/v1"


async def healthz(url: str) -> tuple[float, bytes]:
    """One ``GET /healthz`` on a new connection: seconds until the whole answer, its status."""
    host, port = url.removeprefix("ws://").split("/")[0].rsplit(":", 1)
    start = time.perf_counter()
    stream = await trio.open_tcp_stream(host, int(port))
    async with stream:
        await stream.send_all(f"GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = await stream.receive_some()
            if not chunk:
                break
            answer += chunk
    return time.perf_counter() - start, answer.split(b"\r\n", 1)[0]


async def until(predicate: Callable[[], bool]) -> None:
    """Polls: the model server's thread cannot set a trio event."""
    while not predicate():  # noqa: ASYNC110
        await trio.sleep(0.001)


async def glob_stop(args: argparse.Namespace) -> dict[str, Any]:
    """/healthz and ``stop`` while a loop's agent globs the worst pattern (see the module)."""
    names = 2000 if args.quick else args.glob_names
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp) / "workspace"
        workspace.mkdir()
        for n in range(names):
            (workspace / f"{VICTIM}{n:06}").write_bytes(b"")
        (workspace / VICTIM).write_bytes(b"")
        state = Path(tmp) / "state"
        state.mkdir()
        model = GlobModel()
        proc, url, token = start_node(state)
        try:
            async with connect(url, token=token) as node:
                worker = (
                    f"agent:model=m,base_url={model.base_url},workspace={workspace},stream=false"
                )
                loop_id = (await node.start("|loop:50| list the files", worker=worker)).loop_id
                with trio.fail_after(60):  # two globs answered: the agent is in its loop
                    await until(lambda: len(model.requests) >= 3)
                latencies: list[float] = []
                statuses: set[bytes] = set()
                end = trio.current_time() + (1.0 if args.quick else 5.0)
                while trio.current_time() < end:
                    seconds, status = await healthz(url)
                    latencies.append(seconds)
                    statuses.add(status)
                    await trio.sleep(0.05)
                asked = len(model.requests)
                # Stop a fifth of a glob after the model asked for one: mid-glob.
                await until(lambda: len(model.requests) > asked)
                gaps = [b - a for a, b in zip(model.requests, model.requests[1:], strict=False)]
                await trio.sleep(sorted(gaps)[len(gaps) // 2] / 5)
                into_glob = time.perf_counter() - model.requests[-1]
                start = time.perf_counter()
                stopped = await node.stop(loop_id)
                stop_reply = time.perf_counter() - start
                final = await node.get(loop_id)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            model.server.shutdown()
    latencies.sort()
    return {
        "names": names + 1,
        "globs_during_healthz": asked,
        "glob_seconds_median": sorted(gaps)[len(gaps) // 2],
        "stop_sent_s_into_glob": into_glob,
        "healthz_requests": len(latencies),
        "healthz_statuses": sorted(s.decode() for s in statuses),
        "healthz_p50_s": latencies[len(latencies) // 2],
        "healthz_max_s": latencies[-1],
        "stop_reply_s": stop_reply,
        "phase_after_stop": str(final.phase),
        "stop_reply_phase": str(stopped.phase),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--glob", action="store_true", help="only the worst-glob case")
    parser.add_argument("--glob-names", type=int, default=20000, help="names the glob meets")
    args = parser.parse_args()
    if args.glob:
        report_glob(trio.run(glob_stop, args))
        return
    results = trio.run(run, args)
    fan = results["fanout"]
    labels = {
        "status_1_conn_sequential": "status, 1 connection, one at a time",
        "status_1_conn_64_inflight": "status, 1 connection, 64 in flight",
        "status_50_conn": "status, 50 connections, one at a time",
        "raw_status_1_conn_16_inflight": "status, lean client, 1 conn, 16 in flight",
        "raw_status_50_conn_4_inflight": "status, lean client, 50 conns, 4 in flight",
    }
    print(f"{'case':<44} {'rate':>28} {'node CPU':>12}")
    for name, label in labels.items():
        rate = f"{results[name]:,.0f} req/s"
        cpu = f"{results[name + '_node_us']:.0f} us/req"
        print(f"{label:<44} {rate:>28} {cpu:>12}")
    label = f"events to {fan['subscribers']} subscribers ({fan['loops']} loops)"
    rate = f"{fan['events_per_s']:,.0f} ev/s ({fan['events']:,}/{fan['expected']:,})"
    cpu = f"{fan['node_us_per_event']:.0f} us/ev"
    print(f"{label:<44} {rate:>28} {cpu:>12}")
    results["machine"] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    print(json.dumps(results))
    if fan["events"] != fan["expected"]:
        raise SystemExit("fan-out lost events")


def report_glob(result: dict[str, Any]) -> None:
    print(
        f"worst glob ({WORST_GLOB!r}) over {result['names']:,} names of 40+ a's: "
        f"one glob call {result['glob_seconds_median']:.3f} s (median, between model requests)"
    )
    print(
        f"/healthz while the agent globs: {result['healthz_requests']} requests, "
        f"p50 {result['healthz_p50_s'] * 1000:.1f} ms, max {result['healthz_max_s'] * 1000:.1f} ms,"
        f" {', '.join(result['healthz_statuses'])}"
    )
    print(
        f"stop {result['stop_sent_s_into_glob']:.3f} s into a glob: answered in "
        f"{result['stop_reply_s'] * 1000:.1f} ms "
        f"({result['stop_reply_phase']}; then {result['phase_after_stop']})"
    )
    result["machine"] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load": os.getloadavg(),
    }
    print(json.dumps({"bench": "node-glob", **result}))
    if result["healthz_max_s"] >= 1.0 or result["stop_reply_s"] >= 1.0:
        raise SystemExit("over 1 s: the node did not answer in time")


if __name__ == "__main__":
    main()
