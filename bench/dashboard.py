"""Dashboard benchmark: the page open on a node with 2,000 live loops.

    python bench/dashboard.py                 # 2,000 live loops, 20 s of updates
    python bench/dashboard.py --loops 200 --seconds 5   # a smoke run
    python bench/dashboard.py --loops 10000 --latency 20

A `loopactors node` process (memory store) runs N loops of scripted rounds, each round
taking ``--latency`` seconds (2), so the loops make about N events a second (a start and a
finish per round of each loop every two seconds). Headless Chromium (the system's
/usr/bin/chromium, driven by Playwright) shows the loops table. The table's subscription is
a coalescing one (docs/protocol.md): the node sends the latest state of each changed loop at
most every 0.5 s; the page applies what came once per animation frame and records how long
each batch took (`window.__dashboard`). Prints a table, then one JSON line: batches, states
per batch, mean, 95th percentile and worst time to apply a batch, how long a click on the
phase filter took to re-render the table from every loop, the lag (how long after the node
changed a loop the page showed it: the time applied minus the state's ``updated_at``), how
old the page's view of the live loops was at the end (staleness: now minus each live row's
``updated_at``; loops started together change together, so it depends on when it is read),
the node's dropped events and rounds a second, and the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import math
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
from playwright.sync_api import sync_playwright

from loopactors.client import connect

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def start_node(state: Path, *extra: str) -> tuple[subprocess.Popen[bytes], str, str]:
    """A `loopactors node` on a free port; its log goes to a file nobody has to read."""
    log = (state / "node.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopactors", "node", "--listen", "127.0.0.1:0",
         "--state", str(state), "--rate-limit", "1000000", *extra],
        stderr=log,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        match = re.search(r"serving ws://(\S+)", (state / "node.log").read_text())
        if match:
            return proc, match.group(1), (state / "node.token").read_text().strip()
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("the node did not start")


async def start_loops(address: str, token: str, texts: list[tuple[str, str]]) -> list[str]:
    """Start each (text, worker) on the node, 64 at a time; their ids in order."""
    ids: list[str] = [""] * len(texts)
    limit = trio.Semaphore(64)
    async with connect(f"ws://{address}", token=token, timeout=60) as node:

        async def one(index: int, text: str, worker: str) -> None:
            async with limit:
                state = await node.start(text, worker=worker)
                ids[index] = state.loop_id

        async with trio.open_nursery() as nursery:
            for index, (text, worker) in enumerate(texts):
                nursery.start_soon(one, index, text, worker)
    return ids


def open_page(pw: Any, address: str, token: str, width: int = 1300, height: int = 900) -> Any:
    browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    page = browser.new_page(viewport={"width": width, "height": height})
    page.on(
        "console", lambda m: print("console:", m.type, m.text[:200]) if m.type == "error" else None
    )
    page.on("pageerror", lambda e: print("page error:", str(e)[:300]))
    page.goto(f"http://{address}/#token={token}")
    page.wait_for_selector('#conn-status[data-state="connected"]')
    return browser, page


def wait_for_loops(page: Any, count: int, timeout: float = 120.0) -> int:
    """Until the page's counter shows ``count`` loops, or ``timeout`` passed; how many it
    shows (polled from here: the page's CSP forbids the string evaluation that
    wait_for_function would need)."""
    deadline = time.monotonic() + timeout
    while True:
        known = int((page.text_content("#counts") or "0").split(" ", 1)[0] or 0)
        if known >= count or time.monotonic() > deadline:
            return known
        time.sleep(0.2)


async def node_figures(address: str, token: str) -> dict[str, float]:
    """The node's rounds finished, dropped events and clock, from its statistics request."""
    async with connect(f"ws://{address}", token=token, timeout=60) as node:
        stats = await node.statistics()
    return {
        "rounds": sum(stats.rounds.values()),
        "events_dropped": stats.events_dropped,
        "time": stats.time,
    }


def nearest_rank(ordered: list[float], q: float) -> float:
    """The q-quantile of sorted values by nearest rank (never below it on few samples)."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loops", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--latency", type=float, default=2.0, help="seconds per round")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    cpu_before = os.times()
    with tempfile.TemporaryDirectory() as tmp:
        proc, address, token = start_node(Path(tmp), "--store", "memory")
        try:
            texts = [
                (f"|loop:50,fresh| bench loop {i}", f"scripted:latency={args.latency:g}")
                for i in range(args.loops)
            ]
            with sync_playwright() as pw:
                # The page is open first: it sees every loop start, as a user watching would.
                browser, page = open_page(pw, address, token)
                trio.run(start_loops, address, token, texts)
                known = wait_for_loops(page, args.loops, timeout=240)
                page.evaluate(
                    "() => { const s = window.__dashboard; s.batches = 0; s.events = 0; "
                    "s.frames = 0; s.maxBatchMs = 0; s.totalBatchMs = 0; s.recent = []; "
                    "s.lags = []; }"
                )
                before = trio.run(node_figures, address, token)
                time.sleep(args.seconds)
                after = trio.run(node_figures, address, token)
                stats = page.evaluate("() => window.__dashboard")
                staleness = page.evaluate("() => window.__dashboard.staleness()")
                connection = page.text_content("#conn-status")
                # A filter change re-renders the table from every loop, synchronously.
                filter_ms = page.evaluate(
                    "() => { const sel = document.querySelector('#phase-filter'); "
                    "const t0 = performance.now(); sel.value = 'live'; "
                    "sel.dispatchEvent(new Event('change')); sel.value = ''; "
                    "sel.dispatchEvent(new Event('change')); return (performance.now() - t0) / 2; }"
                )
                browser.close()
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    samples = sorted(stats["recent"]) or [0.0]
    lags = sorted(stats["lags"]) or [0.0]
    result = {
        "loops": args.loops,
        "loops_on_page": known,
        "seconds": args.seconds,
        "batches": stats["batches"],
        "events": stats["events"],
        "events_per_batch": round(stats["events"] / max(1, stats["batches"]), 1),
        "mean_batch_ms": round(stats["totalBatchMs"] / max(1, stats["batches"]), 2),
        "p95_batch_ms": round(nearest_rank(samples, 0.95), 2),
        "max_batch_ms": round(stats["maxBatchMs"], 2),
        "filter_click_ms": round(filter_ms, 1),
        "states_frames": stats["frames"],
        "mean_lag_s": round(sum(lags) / len(lags), 2),
        "p95_lag_s": round(nearest_rank(lags, 0.95), 2),
        "max_lag_s": round(lags[-1], 2),
        "mean_staleness_s": staleness["mean"],
        "max_staleness_s": staleness["max"],
        "node_events_dropped": after["events_dropped"] - before["events_dropped"],
        "node_rounds_per_s": round(
            (after["rounds"] - before["rounds"]) / max(1e-9, after["time"] - before["time"]), 1
        ),
        "connection": connection,
        "machine": f"{platform.machine()}, {platform.python_version()}",
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "bench_cpu_s": round(sum(os.times()[:4]) - sum(cpu_before[:4]), 1),
    }
    width = max(len(k) for k in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
