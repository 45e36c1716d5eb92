"""How the runtime scales: rounds/s, round-transition latency and peak memory from 10 to
50,000 concurrent loops, next to a plain-trio baseline, drawn as a chart.

    pip install -e '.[bench]'
    python bench/scaling.py                  # 10 .. 50,000 loops (several minutes)
    python bench/scaling.py --quick          # 10 .. 1,000 loops (seconds)
    python bench/scaling.py --out scaling.png
    python bench/scaling.py --replot run.txt  # redraw from a saved run's output

Every point runs in a fresh process (so peak RSS is its own): ``loopactors stress``'s engine
on the memory store and on SQLite (scripted worker, zero latency, 5 rounds a loop), and the
same rounds with plain trio (one task per loop, direct calls, no actors, no store). Prints a
table, writes the chart (default docs/img/scaling.png) and, last, one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
from pathlib import Path
from typing import Any

import trio

# bench/ is on sys.path when this file runs as a script: the bare baseline of loops.py (the
# one these figures were recorded against: no store, no events).
from loops import ROUNDS, bare_baseline_case, in_subprocess

from loopactors.stress import StressOptions, run_stress
from loopactors.stress._run import peak_rss_mb

FULL = [10, 100, 1_000, 10_000, 50_000]
QUICK = [10, 100, 1_000]
CASES = ("baseline", "memory", "sqlite")
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "docs" / "img" / "scaling.png"


async def runtime_case(loops: int, store: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        options = StressOptions(
            loops=loops,
            rounds=ROUNDS,
            store=store,
            state_dir=Path(tmp) if store == "sqlite" else None,
            stall_timeout=120.0,
        )
        report = await run_stress(options, verify=False, count_loops=False)
    if not report.ok:
        raise SystemExit(f"{store} with {loops} loops stalled")
    return {
        "rounds_per_s": report.rounds_per_s,
        "p50_transition_ms": report.p50_transition_ms,
        "p99_transition_ms": report.p99_transition_ms,
        "seconds": report.seconds,
    }


def run_case(case: str, loops: int) -> dict[str, Any]:
    if case == "baseline":
        result: dict[str, Any] = trio.run(bare_baseline_case, loops)
    else:
        result = trio.run(runtime_case, loops, case)
    result["peak_rss_mb"] = peak_rss_mb()
    return result


def draw(results: dict[str, dict[int, dict[str, Any]]], sizes: list[int], out: Path) -> None:
    import matplotlib  # noqa: PLC0415 - a bench-only extra, needed only to draw

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    panels = [
        ("rounds_per_s", "rounds/s", "throughput"),
        ("p99_transition_ms", "ms", "p99 round transition"),
        ("peak_rss_mb", "MB", "peak RSS"),
    ]
    figure, axes = plt.subplots(1, len(panels), figsize=(15, 4.5))
    for axis, (key, unit, title) in zip(axes, panels, strict=True):
        for case in CASES:
            points = [(n, results[case][n][key]) for n in sizes if n in results[case]]
            axis.plot([n for n, _ in points], [v for _, v in points], marker="o", label=case)
        axis.set_xscale("log")
        axis.set_yscale("log")  # the baseline is an order of magnitude above the runtime
        axis.set_xlabel("concurrent loops")
        axis.set_ylabel(unit)
        axis.set_title(title)
        axis.grid(True, which="both", alpha=0.3)
        axis.legend()
    figure.suptitle(f"loopactors scaling ({ROUNDS} rounds a loop, scripted worker, zero latency)")
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help=f"only {QUICK}")
    parser.add_argument("--sizes", help="comma-separated loop counts (overrides --quick)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where the chart goes")
    parser.add_argument("--no-chart", action="store_true", help="print the table only")
    parser.add_argument(
        "--replot", type=Path, metavar="FILE", help="draw the chart from a saved run's output"
    )
    parser.add_argument("--case", choices=CASES)
    parser.add_argument("--loops", type=int)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case, args.loops)))
        return
    if args.replot:
        line = args.replot.read_text().strip().splitlines()[-1]
        saved = json.loads(line)["results"]
        loaded = {case: {int(n): r for n, r in saved[case].items()} for case in CASES}
        draw(loaded, sorted(loaded["baseline"]), args.out)
        print(f"chart: {args.out}")
        return
    sizes = [int(n) for n in args.sizes.split(",")] if args.sizes else QUICK if args.quick else FULL
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, trio {trio.__version__}"
    )
    header = "{:<10}{:>9}{:>12}{:>12}{:>12}{:>10}".format(
        "case", "loops", "rounds/s", "p50 ms", "p99 ms", "peak MB"
    )
    print(header)
    print("-" * len(header))
    results: dict[str, dict[int, dict[str, Any]]] = {case: {} for case in CASES}
    for loops in sizes:
        for case in CASES:
            r = results[case][loops] = in_subprocess(case, loops, __file__)
            print(
                f"{case:<10}{loops:>9,}{r['rounds_per_s']:>12,.0f}{r['p50_transition_ms']:>12.2f}"
                f"{r['p99_transition_ms']:>12.2f}{r['peak_rss_mb']:>10.0f}",
                flush=True,
            )
    if not args.no_chart:
        draw(results, sizes, args.out)
        print(f"chart: {args.out}")
    print(json.dumps({"bench": "scaling", "rounds": ROUNDS, "results": results}))


if __name__ == "__main__":
    main()
