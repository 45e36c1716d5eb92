"""Kill trials: the stress in a child process on SQLite, SIGKILLed at a random moment.

Trial k starts a child that resumes whatever the earlier children left live and starts N
new loops, and kills it with SIGKILL once it has reported a random number of rounds (plus a
random few milliseconds, so the kill lands anywhere in a commit cycle). After the last
trial, this process opens the runtime on the same directory, which resumes every loop
left, waits for them, and checks the invariants over all the loops the store holds.
"""

from __future__ import annotations

import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import IO

import attrs
import msgspec
import trio

from ._report import InvariantCheck, KillTotals, KillTrial, StressReport
from ._run import StressOptions, Tally, open_existing, run_stress

__all__ = ["child_progress", "run_kill_trials"]

#: Seconds a child may go without reporting progress before it is killed anyway.
SILENT_CHILD = 60.0


def child_progress() -> Callable[[Tally], None]:
    """The child's progress callback: the rounds seen so far, one line on stdout each time
    they change (the parent decides when to kill from them)."""
    last = -1

    def show(tally: Tally) -> None:
        nonlocal last
        if tally.rounds_done != last:
            last = tally.rounds_done
            sys.stdout.write(f"{last}\n")
            sys.stdout.flush()

    return show


def _child_argv(options: StressOptions, trial: int, seed: int) -> list[str]:
    return [
        sys.executable, "-m", "loopactors", "stress", "--kill-child",
        "--loops", str(options.loops), "--rounds", str(options.rounds),
        "--worker", options.worker, "--store", options.store, "--state", str(options.state_dir),
        "--crash-rate", str(options.crash_rate), "--stop-rate", str(options.stop_rate),
        "--seed", str(seed), "--task-prefix", f"{options.task_prefix}t{trial}-",
        "--stall-timeout", str(options.stall_timeout),
    ]  # fmt: skip


def _one_trial(options: StressOptions, trial: int, rng: random.Random) -> KillTrial:
    target = rng.randint(0, max(1, options.loops * options.rounds))
    began = time.perf_counter()
    child = subprocess.Popen(
        _child_argv(options, trial, rng.randrange(2**31)),
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert child.stdout is not None
    lines: queue.Queue[str | None] = queue.Queue()
    reader = threading.Thread(target=_read_lines, args=(child.stdout, lines), daemon=True)
    reader.start()
    rounds = 0
    try:
        while True:
            try:
                line = lines.get(timeout=SILENT_CHILD)
            except queue.Empty:
                break  # silent for too long: kill it anyway
            if line is None:
                break  # the child ended first
            rounds = int(line)
            if rounds >= target:
                time.sleep(rng.uniform(0, 0.02))
                break
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
    finally:
        code = child.wait()
        reader.join()
        child.stdout.close()
    return KillTrial(
        trial=trial,
        killed=code == -signal.SIGKILL,
        rounds_at_kill=rounds,
        seconds=time.perf_counter() - began,
        exit_code=code,
    )


def _read_lines(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line.strip())
    lines.put(None)


def _store_counts(options: StressOptions) -> tuple[int, int, int]:
    """Loops in the state directory's store, their completed rounds, and the live ones."""
    assert options.state_dir is not None
    backend = open_existing(options.store, options.state_dir)
    if backend is None:
        return 0, 0, 0
    try:
        states = backend.list_loops()
    finally:
        backend.close()
    live = sum(1 for state in states if not state.terminal)
    return len(states), sum(state.completed_rounds for state in states), live


def run_kill_trials(options: StressOptions, trials: int, *, progress: IO[str]) -> StressReport:
    """K kill trials, then a last run that resumes everything, then the invariants."""
    rng = random.Random(options.seed)
    results = []
    loops_before, rounds_before, _ = start = _store_counts(options)
    for trial in range(1, trials + 1):
        result = _one_trial(options, trial, rng)
        loops_after, rounds_after, _ = _store_counts(options)
        result = msgspec.structs.replace(
            result,
            loops_admitted=loops_after - loops_before,
            rounds_completed=rounds_after - rounds_before,
        )
        loops_before, rounds_before = loops_after, rounds_after
        results.append(result)
        how = f"killed after {result.rounds_at_kill} rounds" if result.killed else "finished"
        progress.write(
            f"kill trial {trial}/{trials}: {result.loops_admitted} loops admitted, "
            f"{result.rounds_completed} rounds completed, {how}\n"
        )
    _, _, left_live = _store_counts(options)
    final = attrs.evolve(options, loops=0, task_prefix=f"{options.task_prefix}final-")
    report = trio.run(_final_run, final)
    loops_end, rounds_end, _ = _store_counts(options)
    totals = KillTotals(
        loops_per_trial=options.loops,
        resumed_loops=left_live,
        resume_rounds=rounds_end - rounds_before,
        resume_seconds=report.seconds,
        loops=loops_end - start[0],
        rounds_completed=rounds_end - start[1],
        seconds=sum(t.seconds for t in results) + report.seconds,
    )
    failed = [t for t in results if not t.killed and t.exit_code != 0]
    children = InvariantCheck(
        name="children_ran",
        description="every child ran until its kill (or to its end)",
        checked=len(results),
        violations=len(failed),
        examples=tuple(f"trial {t.trial}: exit code {t.exit_code}" for t in failed[:5]),
    )
    return msgspec.structs.replace(
        report,
        kill_trials=tuple(results),
        kill_totals=totals,
        invariants=(children, *report.invariants),
        ok=report.ok and not failed,
    )


async def _final_run(options: StressOptions) -> StressReport:
    # How many loops the children admitted before their kills is not known here.
    return await run_stress(options, count_loops=False)
