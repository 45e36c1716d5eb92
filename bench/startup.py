"""Start-up benchmark: whole `loopactors` processes next to their yardsticks, in one run.

    python bench/startup.py              # 15 runs of each, alternating
    python bench/startup.py --runs 5

Each command is run as a user runs it (the installed ``loopactors`` script: the editable
install of this checkout, and a regular install of a wheel built from it, in a temporary
virtual environment, unless ``--no-regular``), the yardsticks alternately with it, and the
median wall and CPU times (from ``wait4``) are kept: `status`, `history`, `--help` and
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
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from ledger import ours_cli, reference_cli, small_ledger

from loopactors.loops import LoopSpec, LoopState, RoundRecord
from loopactors.storage import SqliteBackend, Write

BARE = [sys.executable, "-c", "import trio, msgspec, sqlite3"]


def wall(command: list[str]) -> tuple[float, float]:
    """One whole process: (wall seconds, CPU seconds from wait4)."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(process.pid, 0)
    return time.perf_counter() - start, usage.ru_utime + usage.ru_stime


def regular_install(directory: Path) -> list[str] | None:
    """The ``loopactors`` script of a regular (non-editable) install, as ``pip install``
    gives a user: a wheel built from this checkout, installed by pip into a new virtual
    environment that finds the dependencies in this one's site-packages.
    """
    root = Path(__file__).resolve().parent.parent
    wheels, venv = directory / "wheels", directory / "venv"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    try:
        subprocess.run([*pip, "wheel", "--no-deps", "-w", str(wheels), str(root)], check=True)
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        python = venv / "bin" / "python"
        wheel = [str(path) for path in wheels.glob("*.whl")]
        subprocess.run([*pip, "--python", str(python), "install", "--no-deps", *wheel], check=True)
    except (subprocess.CalledProcessError, OSError) as exc:
        print(f"no regular install measured: {exc}")
        return None
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    ours = sysconfig.get_path("purelib")
    # The dependencies: this environment's site-packages as a plain path (its own .pth
    # files, the editable install's among them, are not read from there).
    (Path(site) / "dependencies.pth").write_text(ours + "\n")
    return [str(venv / "bin" / "loopactors")]


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
    parser.add_argument(
        "--no-regular", dest="regular", action="store_false",
        help="skip the regular (wheel) install; by default one is built into a temporary venv",
    )  # fmt: skip
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
        installed = regular_install(state / "regular") if args.regular else None
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
        if installed is not None:
            cases += [
                ("version, regular install", [*installed, "version"], "bare", BARE),
                (
                    "context --check (10 attempts), regular install",
                    [*installed, "context", "--check", "-f", str(ledger)],
                    "reference",
                    None if ref is None else [*ref, "--check", "-f", str(ledger)],
                ),
            ]
        for name, command, against, yardstick in cases:
            mine: list[tuple[float, float]] = []
            theirs: list[tuple[float, float]] = []
            for _ in range(args.runs):
                mine.append(wall(command))
                if yardstick is not None:
                    theirs.append(wall(yardstick))
            row: dict[str, Any] = {
                "case": name,
                "loopactors_s": statistics.median(w for w, _ in mine),
                "loopactors_cpu_s": statistics.median(c for _, c in mine),
            }
            if theirs:
                row.update(
                    against=against,
                    yardstick_s=statistics.median(w for w, _ in theirs),
                    yardstick_cpu_s=statistics.median(c for _, c in theirs),
                )
                row["ratio"] = row["loopactors_s"] / row["yardstick_s"]
                row["cpu_ratio"] = row["loopactors_cpu_s"] / row["yardstick_cpu_s"]
            rows.append(row)
    load_after = os.getloadavg()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; load average before {load_before[0]:.2f}, after "
        f"{load_after[0]:.2f}; medians of {args.runs} runs"
    )
    header = (
        f"{'command':<48}{'loopactors':>11}{'yardstick':>11}{'ratio':>7}{'CPU ours':>10}"
        f"{'CPU yard':>10}{'ratio':>7}  yardstick"
    )
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
                f"{row['case']:<48}{row['loopactors_s']:>10.3f}s{row['yardstick_s']:>10.3f}s"
                f"{row['ratio']:>7.2f}{row['loopactors_cpu_s']:>9.3f}s"
                f"{row['yardstick_cpu_s']:>9.3f}s{row['cpu_ratio']:>7.2f}  {label}"
            )
        else:
            print(f"{row['case']:<48}{row['loopactors_s']:>10.3f}s")
    load = {"load_before": list(load_before), "load_after": list(load_after)}
    print(json.dumps({"bench": "startup", "runs": args.runs, **load, "rows": rows}))


if __name__ == "__main__":
    main()
