"""Scale out: one node, two `loopactors worker` processes, one Redis.

    python examples/scale_out.py

Starts a private redis-server on a free loopback port (it must be installed: `apt-get install
redis-server`), two worker processes that run command rounds, and a node on the in-memory store
whose Dispatcher hands rounds to them through Redis Streams. Each round's command prints the
name of the worker process that ran it.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import trio

from loopactors import open_runtime
from loopactors.runtime import BreakerSettings, RuntimeConfig
from loopactors.transport import local_redis

ROUND = "command:" + shlex.join(["sh", "-c", 'sleep 0.2; echo "on $LOOPACTORS_WORKER_NAME"'])


def start_worker(url: str, name: str) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "loopactors", "worker", "--redis", url, "--name", name]
    # Its log (stderr) says where it connects, the password hidden.
    return subprocess.Popen([*argv, "--kinds", "command", "--slots", "2"])


async def run_loops(url: str) -> list[str]:
    config = RuntimeConfig(
        store="memory",
        transport=url,
        # Every round prints one of two lines: no sign of a stuck loop here.
        breaker=BreakerSettings(stale_rounds_limit=10),
    )
    lines = []
    async with open_runtime(config) as rt:
        loops = [await rt.start(f"|loop:3,fresh| job {i}", worker=ROUND) for i in range(4)]
        workers_used: set[str] = set()
        for i, loop in enumerate(loops):
            final = await rt.wait(loop.loop_id)
            rounds = await rt.history(loop.loop_id)
            workers_used.update(r.output.strip().removeprefix("on ") for r in rounds)
            lines.append(f"job {i}: {final.phase}, {len(rounds)} rounds")
        lines.append(f"rounds ran on: {', '.join(sorted(workers_used))}")
    return lines


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, local_redis(Path(tmp) / "redis") as redis:
        url = redis.url()
        workers = [start_worker(url, name) for name in ("worker-a", "worker-b")]
        try:
            for line in trio.run(run_loops, url):
                print(line)
        finally:
            for worker in workers:
                worker.terminate()  # SIGTERM: a worker leaves cleanly
                worker.wait(30)


if __name__ == "__main__":
    main()
