"""Prove a runtime's promises under load from Python: many loops, random actor crashes and
stops, then every invariant checked against the store.

    python examples/stress_check.py

The same engine as `loopactors stress` (docs/stress.md), on an in-memory store.
"""

from __future__ import annotations

import trio

from loopactors.stress import StressOptions, run_stress


async def main() -> int:
    options = StressOptions(
        loops=50,
        rounds=4,
        worker="scripted:latency=0.002",
        crash_rate=0.02,  # every runtime actor crashes on 2% of its messages
        stop_rate=0.3,  # 30% of the loops are stopped at a random round
        seed=2026,
    )
    report = await run_stress(options)
    print(f"{report.loops} loops: {report.phases}")
    print(f"{report.faults_injected} crashes injected, {report.actor_restarts} actor restarts")
    for check in report.invariants:
        print(f"{'ok' if check.ok else 'FAIL'}: {check.description}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(trio.run(main))
