"""Scale-out benchmark: one node, 1, 2 and 4 `loopactors worker` processes, one Redis.

    python bench/scaleout.py                      # 200 loops x 5 rounds per case
    python bench/scaleout.py --loops 50 --quick   # smaller, for a smoke run

A private redis-server (append-only file, fsync on every write: the setting under which a
Redis restart loses nothing) runs in a temporary directory. Two cases per worker count:

- ``scripted`` (no latency): every round is pure transport overhead (publish, take, run,
  report, acknowledge, record), so this is the ceiling of rounds per second;
- ``scripted:latency=0.1`` with 8 slots per worker: rounds that wait (as agent rounds wait
  on a model), where capacity grows with the workers.

Rounds per second count from the first loop started to the last loop finished. Prints one
table and, last, one JSON line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from loopactors.runtime import BreakerSettings, RuntimeConfig, open_runtime
from loopactors.transport import local_redis
from loopactors.transport._redis import open_redis
from loopactors.transport._wire import WORKERS_HASH

ROUNDS = 5
CASES = [("scripted", 4), ("scripted:latency=0.1", 8)]


@dataclasses.dataclass(frozen=True)
class Case:
    workers: int
    spec: str
    slots: int
    loops: int


async def wait_for_workers(url: str, count: int) -> None:
    with trio.fail_after(30):
        async with open_redis(url, name="loopactors-bench") as client:
            # Polling Redis (another process's state): no event to wait for here.
            while len(await client.hgetall(WORKERS_HASH)) < count:  # noqa: ASYNC110
                await trio.sleep(0.05)


async def measure(url: str, state: Path, case: Case) -> float:
    await wait_for_workers(url, case.workers)
    config = RuntimeConfig(
        store="sqlite",
        state_dir=state,
        transport=url,
        max_live_loops=case.loops,
        max_concurrent_rounds=case.loops,
        event_queue_size=case.loops * ROUNDS * 3,
        # Scripted rounds without latency say the same each time: no stagnation here.
        breaker=BreakerSettings(stale_rounds_limit=ROUNDS + 1),
    )
    async with open_runtime(config) as rt:
        started = time.perf_counter()
        text = f"|loop:{ROUNDS},fresh| bench"
        handles = [rt.handle(await rt.start(text, worker=case.spec)) for _ in range(case.loops)]
        phases = [(await h.wait()).phase for h in handles]
        elapsed = time.perf_counter() - started
    assert phases == ["complete"] * case.loops, sorted(set(phases))
    return elapsed


def run_case(url: str, state: Path, case: Case) -> dict[str, Any]:
    argv = [sys.executable, "-m", "loopactors", "worker", "--redis", url, "--kinds", "scripted"]
    processes = [
        subprocess.Popen(
            [*argv, "--name", f"w{i}", "--slots", str(case.slots)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i in range(case.workers)
    ]
    try:
        elapsed = trio.run(measure, url, state, case)
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            process.wait(30)
    rounds = case.loops * ROUNDS
    return {
        **dataclasses.asdict(case),
        "rounds": rounds,
        "seconds": round(elapsed, 2),
        "rounds_per_s": round(rounds / elapsed, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="1 and 2 workers, first case only")
    args = parser.parse_args()
    counts = [1, 2] if args.quick else [1, 2, 4]
    cases = CASES[:1] if args.quick else CASES
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, local_redis(Path(tmp) / "redis") as redis:
        for spec, slots in cases:
            for workers in counts:
                url = redis.url(db=len(results))  # a fresh database per case
                state = Path(tmp) / f"state-{len(results)}"
                result = run_case(url, state, Case(workers, spec, slots, args.loops))
                results.append(result)
                print(
                    f"{spec:<22} workers={workers} slots={slots:<2} "
                    f"{result['rounds']} rounds in {result['seconds']:>6} s: "
                    f"{result['rounds_per_s']:>7} rounds/s",
                    flush=True,
                )
    machine = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_1min": round(os.getloadavg()[0], 2),
    }
    print(json.dumps({"machine": machine, "results": results}))


if __name__ == "__main__":
    main()
