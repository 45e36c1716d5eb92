"""Save docs/img/dashboard.png: the dashboard of a node running 50 loops.

    python docs/build_screenshot.py            (or `just screenshot`, part of `just docs`)
    python docs/build_screenshot.py OUT.png    (somewhere else: the docs test does)

A `loopactors node` process (memory store) runs 50 loops in various states (running,
paused, stopped, complete, escalated); the system's headless Chromium, driven by Playwright,
opens the dashboard signed in and takes the picture.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import trio
from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).parents[1] / "bench"))
from dashboard import open_page, start_loops, start_node, wait_for_loops

from loopactors.client import connect

OUT = Path(__file__).parent / "img" / "dashboard.png"

TASKS = [
    "review the storage module",
    "write tests for the parser",
    "summarise open issues",
    "fix flaky network test",
    "tighten the retry policy",
    "document the config file",
    "refactor the CLI entry point",
    "profile the commit path",
    "translate the README",
    "audit dependency licences",
]


async def steer(address: str, token: str, ids: list[str]) -> None:
    """Give the loops a mix of states: some paused, some stopped."""
    async with connect(f"ws://{address}", token=token) as node:
        for loop_id in ids[:4]:
            await node.pause(loop_id)
        for loop_id in ids[4:7]:
            await node.stop(loop_id)


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else OUT
    with tempfile.TemporaryDirectory() as tmp:
        proc, address, token = start_node(Path(tmp), "--store", "memory")
        try:
            texts: list[tuple[str, str]] = []
            for i in range(50):
                task = f"{TASKS[i % len(TASKS)]} #{i + 1}"
                if i % 10 == 9:
                    texts.append((f"|loop:3,fresh| {task}", "scripted:latency=0.05,tokens=900"))
                elif i % 10 == 8:  # the same output every round: the no-progress fuse trips
                    texts.append((f"|loop:20| {task}", "scripted:latency=0.05,output=same"))
                else:
                    latency = round(1.5 + (i % 7) * 0.4, 1)
                    texts.append(
                        (
                            f"|loop:40,fresh| {task}",
                            f"scripted:latency={latency},tokens={120 + 37 * i}",
                        )
                    )
            ids = trio.run(start_loops, address, token, texts)
            trio.run(steer, address, token, [ids[i] for i in (0, 1, 2, 3, 11, 12, 13)])
            time.sleep(3)  # a few rounds in
            with sync_playwright() as pw:
                browser, page = open_page(pw, address, token, width=1400, height=900)
                if wait_for_loops(page, 50) != 50:
                    raise SystemExit("the dashboard did not show the 50 loops")
                time.sleep(2.5)
                out.parent.mkdir(exist_ok=True)
                page.screenshot(path=str(out))
                browser.close()
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    print(f"saved {out}")


if __name__ == "__main__":
    main()
