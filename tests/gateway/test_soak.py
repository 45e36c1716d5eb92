"""A gateway soak: a real node process with few file descriptors, under every kind of abusive
connection at once, keeps serving its token holder and running rounds (docs/security.md).

The node runs with ``ulimit -n 400``. For a bounded time (until its loop's 12 rounds are done,
at most 60 s) the test holds idle TCP connections that never send a byte, half-open ones that
send half a request head, upgraded websockets that never say hello, and a flood of connections
opened and closed as fast as they go: well over the node's descriptor limit in all. Meanwhile a
token holder connects afresh and asks for ``status`` every 0.2 s. Asserted: every status
answer comes within 5 s (a liveness bound on a shared CI machine, not a performance goal:
bench/ has those), every round of the loop completes (none fails for want of a descriptor),
and the node's log holds no traceback and only a few rate-limited lines per condition.

About 10 s: the flood has to last as long as the rounds do to mean anything.
"""

from __future__ import annotations

import contextlib
import re
import resource
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from loopactors.client import connect

DESCRIPTOR_LIMIT = 400
ROUNDS = 12
STATUS_BOUND = 5.0
TERMINAL = ("complete", "cancelled", "interrupted", "escalated", "error")
UPGRADE = (
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)


def _limit_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (DESCRIPTOR_LIMIT, DESCRIPTOR_LIMIT))


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[str, str, subprocess.Popen[str]]]:
    log = tmp_path / "node.log"
    with log.open("w") as err:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "loopactors",
                "node",
                "--listen",
                "127.0.0.1:0",
                "--state",
                str(tmp_path / "state"),
                "--worker",
                # Each round's output differs, so that the breaker sees progress.
                "command:sh -c 'cat > /dev/null; sleep 0.2; cat /proc/sys/kernel/random/uuid'",
            ],
            stderr=err,
            text=True,
            preexec_fn=_limit_descriptors,  # noqa: PLW1509 - only setrlimit, before exec
        )
    try:
        deadline = time.monotonic() + 30
        while not (match := re.search(r"serving (ws://\S+)", log.read_text())):
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        token = (tmp_path / "state" / "node.token").read_text().strip()
        yield match.group(1), token, process
    finally:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=30)
        if process.poll() is None:
            process.kill()
            process.wait()


async def _hold(port: int, data: bytes, held: list[trio.SocketStream]) -> None:
    with contextlib.suppress(OSError, trio.BrokenResourceError):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        held.append(stream)
        if data:
            await stream.send_all(data)


async def _churn(port: int, stop: trio.Event, count: list[int]) -> None:
    while not stop.is_set():
        with contextlib.suppress(OSError, trio.BrokenResourceError):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            await stream.aclose()
            count[0] += 1
        await trio.lowlevel.checkpoint()


async def test_token_holders_and_rounds_survive_a_connection_flood(
    node: tuple[str, str, subprocess.Popen[str]], tmp_path: Path
) -> None:
    url, token, process = node
    port = int(url.rsplit(":", 1)[1])
    held: list[trio.SocketStream] = []
    latencies: list[float] = []
    churned = [0]
    stop = trio.Event()
    async with connect(url, token=token) as owner:
        loop = await owner.start(f"|loop:{ROUNDS},fresh| soak")
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for index in range(600):  # idle, half a head, upgraded without hello
                    data = (b"", b"GET / HTTP/1.1\r\nHost: x\r\n", UPGRADE)[index % 3]
                    nursery.start_soon(_hold, port, data, held)
                for _ in range(4):
                    nursery.start_soon(_churn, port, stop, churned)
                while (await owner.get(loop.loop_id)).phase not in TERMINAL:
                    started = time.monotonic()
                    async with connect(url, token=token, timeout=30) as holder:
                        await holder.loops()
                    latencies.append(time.monotonic() - started)
                    await trio.sleep(0.2)
                stop.set()
        final = await owner.get(loop.loop_id)
        rounds = await owner.history(loop.loop_id)
    for stream in held:
        await trio.aclose_forcefully(stream)
    assert final.phase == "complete", final.reason
    assert [r.status for r in rounds.rounds] == ["completed"] * ROUNDS
    assert latencies
    assert max(latencies) < STATUS_BOUND, latencies
    assert churned[0] > 100  # the flood really ran
    assert process.poll() is None
    log = (tmp_path / "node.log").read_text()
    assert "Traceback" not in log
    warnings = Counter(
        re.sub(r"[\d.:\[\]]+", "N", line.split(" ", 3)[-1])[:50]
        for line in log.splitlines()
        if "WARNING" in line
    )
    assert all(count <= 8 for count in warnings.values()), warnings
