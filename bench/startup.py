"""Start-up benchmark: whole `loopactors` processes next to their yardsticks, in one run.

    python bench/startup.py              # 15 runs of each, alternating
    python bench/startup.py --runs 5

Each command is run as a user runs it (the installed ``loopactors`` script), the yardsticks
alternately with it, and the median wall time is kept: `status`, `history`, `--help` and
`version` on a small state directory against ``python -c "import trio, msgspec, sqlite3"``,
and `context --check` on a 10-attempt ledger against the reference loop-context 1.5.0 under
node (installed as bench/ledger.py installs it; skipped without node). The load average is
printed with the results. Prints one table and, last, one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from ledger import ours_cli, reference_cli, small_ledger

from loopactors.loops import LoopSpec, LoopState, RoundRecord
from loopactors.storage import SqliteBackend, Write

BARE = [sys.executable, "-c", "import trio, msgspec, sqlite3"]


def wall(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def small_state(directory: Path) -> None:
    backend = SqliteBackend(directory / "loopactors.db")
    for i in range(5):
        state = LoopState(
            loop_id=f"l{i}", spec=LoopSpec(task=f"task {i}", rounds=3), phase="complete",
            completed_rounds=3,
        )  # fmt: skip
        rounds = [
            RoundRecord(loop_id=f"l{i}", round=n, status="completed", output=f"output {n}")
            for n in (1, 2, 3)
        ]
        backend.commit([Write(state=state, round=r) for r in rounds])
    backend.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    ours = ours_cli()
    ref = reference_cli(install=True)
    load_before = os.getloadavg()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp)
        small_state(state)
        ledger = state / "ledger.json"
        ledger.write_text(json.dumps(small_ledger()))
        cases: list[tuple[str, list[str], str, list[str] | None]] = [
            ("status", [*ours, "status", "--state", tmp], "bare", BARE),
            ("history", [*ours, "history", "l1", "--state", tmp], "bare", BARE),
            ("--help", [*ours, "--help"], "bare", BARE),
            ("version", [*ours, "version"], "bare", BARE),
            (
                "context --check (10 attempts)",
                [*ours, "context", "--check", "-f", str(ledger)],
                "reference",
                None if ref is None else [*ref, "--check", "-f", str(ledger)],
            ),
        ]
        for name, command, against, yardstick in cases:
            mine: list[float] = []
            theirs: list[float] = []
            for _ in range(args.runs):
                mine.append(wall(command))
                if yardstick is not None:
                    theirs.append(wall(yardstick))
            row: dict[str, Any] = {"case": name, "loopactors_s": statistics.median(mine)}
            if theirs:
                row.update(
                    against=against,
                    yardstick_s=statistics.median(theirs),
                    ratio=statistics.median(mine) / statistics.median(theirs),
                )
            rows.append(row)
    load_after = os.getloadavg()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; load average before {load_before[0]:.2f}, after "
        f"{load_after[0]:.2f}; medians of {args.runs} runs"
    )
    header = f"{'command':<32}{'loopactors':>12}{'yardstick':>12}{'ratio':>8}  yardstick"
    print(header)
    print("-" * len(header))
    for row in rows:
        if "yardstick_s" in row:
            label = (
                'python -c "import trio, msgspec, sqlite3"'
                if row["against"] == "bare"
                else "loop-context 1.5.0 (node)"
            )
            print(
                f"{row['case']:<32}{row['loopactors_s']:>11.3f}s{row['yardstick_s']:>11.3f}s"
                f"{row['ratio']:>8.2f}  {label}"
            )
        else:
            print(f"{row['case']:<32}{row['loopactors_s']:>11.3f}s")
    load = {"load_before": list(load_before), "load_after": list(load_after)}
    print(json.dumps({"bench": "startup", "runs": args.runs, **load, "rows": rows}))


if __name__ == "__main__":
    main()
