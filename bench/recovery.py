"""Recovery benchmark: the time from ``open_runtime`` to every loop running again after a
SIGKILL, on SQLite.

    python bench/recovery.py                  # 50,000 live loops
    python bench/recovery.py --loops 1000     # smaller
    python bench/recovery.py --prepared DIR   # keep the killed store in DIR, recover a copy

A first process opens a runtime on a fresh state directory, starts the loops (each in its
first round on a worker that takes an hour) and, once every round is running, is killed with
SIGKILL. A second process opens a runtime on the same directory and times, from the call to
``open_runtime``: the block's start (the store read and the runners started) and the moment
every loop has been re-dispatched and its recovery committed (its ``LoopRecovered`` event
published, which the Store does only after the commit). Prints one table line and one JSON
line; the load average is recorded with the run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from loopactors.loops import AnyEvent, LoopRecovered, RoundStarted
from loopactors.runtime import RuntimeConfig, open_runtime

WORKER = "scripted:latency=3600"


def config_for(state_dir: Path, loops: int) -> RuntimeConfig:
    return RuntimeConfig(
        store="sqlite",
        state_dir=state_dir,
        max_live_loops=loops,
        max_concurrent_rounds=loops,
        event_queue_size=loops * 4,
    )


async def prepare(state_dir: Path, loops: int) -> None:
    """Start the loops, say so once every first round runs, then wait to be killed."""
    running = 0
    all_running = trio.Event()

    def observe(event: AnyEvent) -> None:
        nonlocal running
        if isinstance(event, RoundStarted):
            running += 1
            if running == loops:
                all_running.set()

    async with open_runtime(config_for(state_dir, loops), observer=observe) as rt:
        # A few hundred starts in flight at once: 50,000 at once would queue most of them
        # in the Coordinator's mailbox past the call timeout.
        limiter = trio.CapacityLimiter(200)

        async def start(i: int) -> None:
            async with limiter:
                await rt.start(f"|loop:3,fresh| task {i}", worker=WORKER)

        async with trio.open_nursery() as nursery:
            for i in range(loops):
                nursery.start_soon(start, i)
        await all_running.wait()
        print("ready", flush=True)
        await trio.sleep_forever()


async def recover(state_dir: Path, loops: int) -> dict[str, Any]:
    recovered = 0
    everyone = trio.Event()

    def observe(event: AnyEvent) -> None:
        nonlocal recovered
        if isinstance(event, LoopRecovered):
            recovered += 1
            if recovered == loops:
                everyone.set()

    start = time.perf_counter()
    cpu = time.process_time()
    async with open_runtime(config_for(state_dir, loops), observer=observe):
        opened = time.perf_counter() - start
        with trio.move_on_after(600):
            await everyone.wait()
        result = {
            "loops": loops,
            "open_s": opened,
            "all_running_s": time.perf_counter() - start,
            "cpu_s": time.process_time() - cpu,
            "recovered": recovered,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }
        print(json.dumps(result), flush=True)
        # Stopping 50,000 loops is not what is measured: leave at once.
        os._exit(0)
    raise AssertionError("unreachable")


def kill_prepared(state: Path, loops: int) -> float:
    """Prepare ``loops`` live loops in ``state`` and SIGKILL their process: the time taken."""
    base = [sys.executable, __file__, "--loops", str(loops), "--state", str(state)]
    started = time.perf_counter()
    with subprocess.Popen([*base, "--phase", "prepare"], stdout=subprocess.PIPE) as child:
        assert child.stdout is not None
        line = child.stdout.readline()
        if line.strip() != b"ready":
            raise SystemExit(f"the first process did not get ready: {line!r}")
        prepared = time.perf_counter() - started
        child.send_signal(signal.SIGKILL)
        child.wait()
    return prepared


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--loops", type=int, default=50_000)
    parser.add_argument(
        "--prepared",
        type=Path,
        help="keep the killed state directory here (made on the first use) and recover a "
        "copy of it: repeated runs skip the preparation",
    )
    parser.add_argument("--phase", choices=["prepare", "recover"], help=argparse.SUPPRESS)
    parser.add_argument("--state", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase == "prepare":
        trio.run(prepare, args.state, args.loops)
        return
    if args.phase == "recover":
        trio.run(recover, args.state, args.loops)
        return

    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state"
        prepared: float | None = None
        kept = args.prepared
        if kept is None or not kept.exists():
            prepared = kill_prepared(state if kept is None else kept, args.loops)
        if kept is not None:
            shutil.copytree(kept, state)
        base = [sys.executable, __file__, "--loops", str(args.loops), "--state", str(state)]
        load_before = os.getloadavg()
        out = subprocess.run(  # its stderr passes through: a failure says why
            [*base, "--phase", "recover"], check=True, stdout=subprocess.PIPE, text=True
        ).stdout
        result = json.loads(out.strip().splitlines()[-1])
        load_after = os.getloadavg()
    result.update(
        prepare_s=prepared,
        machine=f"{platform.machine()}, {os.cpu_count()} cores",
        python=platform.python_version(),
        load_before=[round(x, 2) for x in load_before],
        load_after=[round(x, 2) for x in load_after],
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    )
    print(
        f"machine: {result['machine']}, Python {result['python']}; load average before "
        f"{load_before[0]:.2f}, after {load_after[0]:.2f}"
    )
    print(
        f"{args.loops:,} live loops on SQLite, killed with SIGKILL mid-round: runtime open in "
        f"{result['open_s']:.2f} s, every loop running again after {result['all_running_s']:.2f} s"
        f" ({result['recovered']:,} recovered; {result['cpu_s']:.2f} s CPU, peak "
        f"{result['peak_rss_mb']:.0f} MB)"
    )
    print(json.dumps({"bench": "recovery", **result}))


if __name__ == "__main__":
    main()
