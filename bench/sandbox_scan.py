"""Sandbox scan benchmark: what finding the guarded paths costs before each `bash=sandbox`
command, on trees of many directories.

    python bench/sandbox_scan.py                    # trees of 5,000 and 50,000 directories
    python bench/sandbox_scan.py --dirs 5000 --repeats 9

Each tree has ``--dirs`` directories, ten to a parent (so 5,000 reach five levels and
50,000 six), two files in each, and at its deepest level a ``loopactors.toml``, a state
directory and a git repository. Measured in this process on the function the `bash` tool
calls in a thread before each command (``_protected.sandbox_guards``), wall time:

- ``first command``: nothing kept yet, every directory read (``scandir``), the tree made
  more than two seconds before;
- ``next command``: nothing changed, the kept scan brought up to date (one ``lstat`` per
  directory); the median of ``--repeats``;
- ``after a change``: a directory made deep down by the command before (its parent and
  itself read again, and again until they are two seconds old); the median;
- ``every directory read``: the kept scan dropped before each call, what a scan of the
  whole tree without it costs each command (warm caches); the median;
- ``kept``: the memory the kept scan holds between commands (``tracemalloc``).

With bubblewrap installed, ``bwrap ... true`` end to end (plan and run) is timed too, as
a yardstick. The load average is printed with the results (on a shared machine, compare
rows of one run). Prints one table and, last, one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loopactors.agent import _protected
from loopactors.agent._sandbox import plan_bash


def make_tree(root: Path, dirs: int) -> Path:
    """``dirs`` directories, ten to a parent, breadth first; returns the deepest one."""
    root.mkdir()
    queue = [root]
    made = 0
    deepest = root
    while made < dirs:
        parent = queue.pop(0)
        for i in range(10):
            if made >= dirs:
                break
            child = parent / f"d{i}"
            child.mkdir()
            (child / "main.py").write_text("print()\n")
            (child / "README.md").write_text("x\n")
            queue.append(child)
            deepest = child
            made += 1
    (deepest / "loopactors.toml").write_text('worker = "scripted"\n')
    (deepest / ".loopactors").mkdir()
    (deepest / ".loopactors" / "node.token").write_text("t\n")
    subprocess.run(["git", "init", "-q", str(deepest / "repo")], check=True)
    return deepest


def timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def measure(dirs: int, repeats: int, bwrap: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ws"
        deepest = make_tree(root, dirs)
        # Directories changed in the last two seconds are read at every call: let the
        # tree age as a checkout does between its making and an agent's commands.
        time.sleep(_protected._RACY_NS / 1e9 + 0.1)
        _protected._scans.clear()
        first = timed(lambda: _protected.sandbox_guards(root))
        guards = _protected.sandbox_guards(root)
        assert deepest / "loopactors.toml" in guards.read_only
        assert deepest / ".loopactors" in guards.hide
        assert deepest / "repo" / ".git" / "config" in guards.read_only
        steady = [timed(lambda: _protected.sandbox_guards(root)) for _ in range(repeats)]
        changed = []
        for i in range(repeats):
            (deepest / f"new{i}").mkdir()
            changed.append(timed(lambda: _protected.sandbox_guards(root)))

        def cold() -> None:
            _protected._scans.clear()
            _protected.sandbox_guards(root)

        full = [timed(cold) for _ in range(max(3, repeats // 3))]
        # What the kept scan holds between commands.
        _protected._scans.clear()
        tracemalloc.start()
        _protected.sandbox_guards(root)
        kept_bytes = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        row: dict[str, Any] = {
            "dirs": dirs,
            "first_s": first,
            "next_s": statistics.median(steady),
            "after_change_s": statistics.median(changed),
            "every_dir_read_s": statistics.median(full),
            "kept_bytes": kept_bytes,
        }
        if bwrap:

            def command() -> None:
                plan = plan_bash("sandbox", "true", root)
                subprocess.run(plan.argv, check=True, cwd=root)

            row["bwrap_true_s"] = statistics.median(timed(command) for _ in range(repeats))
        return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dirs", default="5000,50000", help="tree sizes, comma-separated")
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    bwrap = shutil.which("bwrap") is not None
    load_before = os.getloadavg()
    rows = [measure(int(n), args.repeats, bwrap) for n in args.dirs.split(",")]
    load_after = os.getloadavg()
    machine = {
        "machine": platform.machine(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in load_after],
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    print(
        f"machine: {machine['machine']}, {machine['cores']} cores, Python {machine['python']}, "
        f"kernel {machine['kernel']}; load average before {load_before[0]:.2f}, "
        f"after {load_after[0]:.2f}"
    )
    header = (
        f"{'directories':>12}{'first':>10}{'next':>10}{'per dir':>10}{'changed':>10}"
        f"{'all read':>10}{'per dir':>10}{'kept':>9}{'bwrap true':>12}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        dirs = row["dirs"]
        bw = row.get("bwrap_true_s")
        print(
            f"{dirs:>12,}{row['first_s'] * 1e3:>8.0f}ms{row['next_s'] * 1e3:>8.1f}ms"
            f"{row['next_s'] / dirs * 1e6:>8.2f}us{row['after_change_s'] * 1e3:>8.1f}ms"
            f"{row['every_dir_read_s'] * 1e3:>8.0f}ms"
            f"{row['every_dir_read_s'] / dirs * 1e6:>8.1f}us"
            f"{row['kept_bytes'] / 2**20:>6.1f}MiB"
            f"{'-' if bw is None else f'{bw * 1e3:.0f}ms':>12}"
        )
    print(json.dumps({"bench": "sandbox_scan", **machine, "rows": rows}))


if __name__ == "__main__":
    main()
