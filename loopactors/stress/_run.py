"""One stress run on an embedded runtime: start N loops, stop some, crash actors, read back.

The runtime is opened with an observer that sees every event as it is published (no queue
that could drop one); it counts rounds, times round transitions, and asks for the chosen
stops. The figures come from events; the verdict comes from the store alone.
"""

from __future__ import annotations

import random
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import trio

from ..errors import ConfigError, LoopactorsError
from ..loops import MAX_ROUNDS, AnyEvent, LoopFinished, LoopState, RoundFinished, RoundStarted
from ..runtime import Runtime, RuntimeConfig, new_loop_id, open_runtime
from ..storage import StoreBackend, open_store, parse_store, store_kind
from ..testing import FaultInjection, inject_faults
from ._report import StoredLoop, StressReport, check_loops, percentile, phase_counts

__all__ = ["StressOptions", "run_stress"]

#: Loops being started at once (each start is a call to the Coordinator).
STARTERS = 64
#: Tries of one start while faults are injected (each crash may lose an answer).
START_ATTEMPTS = 20
#: Restart limits while crashes are injected: the injected crashes alone must never
#: exhaust a supervisor's restart intensity (that would test the limit, not recovery).
UNLIMITED_RESTARTS = 1_000_000_000

Progress = Callable[["Tally"], None]


@attrs.frozen
class StressOptions:
    loops: int
    rounds: int
    worker: str = "scripted"
    #: A store URL (storage.open_store): memory, sqlite, postgresql://...
    store: str = "memory"
    state_dir: Path | None = None
    crash_rate: float = 0.0
    stop_rate: float = 0.0
    seed: int = 0
    #: Seconds without any progress after which the remaining loops count as stuck.
    stall_timeout: float = 60.0
    #: Prefix of the loops' tasks (tasks of live loops must differ; kill trials add loops).
    task_prefix: str = ""

    def check(self) -> None:
        problems = []
        if self.loops < 0:
            problems.append(f"--loops must be >= 0, got {self.loops}")
        if not 1 <= self.rounds <= MAX_ROUNDS:
            problems.append(f"--rounds must be from 1 to {MAX_ROUNDS}, got {self.rounds}")
        for flag, rate in (("--crash-rate", self.crash_rate), ("--stop-rate", self.stop_rate)):
            if not 0 <= rate <= 1:
                problems.append(f"{flag} must be between 0 and 1, got {rate}")
        url = parse_store(self.store)
        if store_kind(url).local_files and not url.rest and self.state_dir is None:
            problems.append(f"the {url.scheme} store needs --state DIR")
        if problems:
            raise ConfigError("; ".join(problems))


class Tally:
    """What the observer saw; read by the progress display and the report."""

    def __init__(self, stop_at: dict[str, int], stops: trio.MemorySendChannel[str]) -> None:
        self.rounds_done = 0
        self.finished: set[str] = set()
        self.gaps: list[float] = []
        self.last_progress = time.monotonic()
        #: Set once every loop in ``waiting`` has finished.
        self.done = trio.Event()
        #: The loops the run waits for; None until known (loops may finish before that).
        self.waiting: set[str] | None = None
        self._last_finish: dict[str, tuple[int, float]] = {}
        self._stop_at = stop_at
        self._stops = stops

    def expect(self, loop_ids: set[str]) -> None:
        self.waiting = loop_ids - self.finished
        if not self.waiting:
            self.done.set()

    def observe(self, event: AnyEvent) -> None:
        kind = type(event)
        if kind is RoundStarted:
            assert isinstance(event, RoundStarted)
            # The runner's own timestamps: publishing comes after a group commit, which
            # would make the gap look as small as a batch.
            previous = self._last_finish.pop(event.loop_id, None)
            if previous is not None and previous[0] == event.round - 1:
                self.gaps.append(max(0.0, event.at - previous[1]))
            target = self._stop_at.get(event.loop_id)
            if target is not None and event.round >= target:
                del self._stop_at[event.loop_id]
                self._stops.send_nowait(event.loop_id)
        elif kind is RoundFinished:
            assert isinstance(event, RoundFinished)
            self.last_progress = time.monotonic()
            if event.status == "completed":
                self.rounds_done += 1
            self._last_finish[event.loop_id] = (event.round, event.at)
        elif kind is LoopFinished:
            self.last_progress = time.monotonic()
            self.finished.add(event.loop_id)
            self._last_finish.pop(event.loop_id, None)
            if self.waiting is not None:
                self.waiting.discard(event.loop_id)
                if not self.waiting:
                    self.done.set()


def stress_config(options: StressOptions) -> RuntimeConfig:
    crashing = options.crash_rate > 0
    return RuntimeConfig(
        store=options.store,
        state_dir=options.state_dir or Path(".loopactors"),
        worker=options.worker,
        max_live_loops=max(options.loops, 10_000),
        max_concurrent_rounds=max(options.loops, 1_000),
        max_restarts=UNLIMITED_RESTARTS if crashing else 10,
        loop_max_restarts=UNLIMITED_RESTARTS if crashing else 1_000,
    )


async def run_stress(
    options: StressOptions,
    *,
    progress: Progress | None = None,
    progress_interval: float = 0.1,
    count_loops: bool = True,
    verify: bool = True,
) -> StressReport:
    """Run the stress, then check every invariant over the loops the store holds.

    Loops already in the store (a state directory from an earlier run) are resumed by the
    runtime as it opens and are checked too; ``expected_loops`` is how many loops the store
    should hold in the end: ``options.loops`` more than before, checked if ``count_loops``.
    Without ``verify`` (benchmarks) nothing is read back and no invariant is checked.
    """
    options.check()
    rng = random.Random(options.seed)
    loop_ids = [new_loop_id() for _ in range(options.loops)]
    stop_at = {
        loop_id: rng.randint(1, options.rounds)
        for loop_id in loop_ids
        if rng.random() < options.stop_rate
    }
    stops_send, stops_receive = trio.open_memory_channel[str](float("inf"))
    tally = Tally(stop_at, stops_send)
    state_dir = options.state_dir or Path(".loopactors")
    in_process = store_kind(options.store).in_process
    before = len(read_store(options.store, state_dir)) if not in_process and count_loops else 0
    with inject_faults(options.crash_rate, seed=rng.randrange(2**32)) as faults:
        # Not while the node starts: a child that fails its first start fails the node (as
        # OTP's does), which would test booting, not recovery.
        faults.enabled = False
        async with open_runtime(stress_config(options), observer=tally.observe) as rt:
            faults.enabled = True
            began = time.perf_counter()
            stuck = await _drive(
                rt,
                options,
                loop_ids,
                tally,
                stops_receive,
                progress=progress,
                progress_interval=progress_interval,
            )
            seconds = time.perf_counter() - began
            faults.enabled = False  # read back undisturbed
            stored = await _read_from_runtime(rt) if in_process and verify else None
    if stored is None:
        stored = read_store(options.store, state_dir) if verify else []
    return build_report(
        options,
        stored,
        tally,
        faults,
        seconds=seconds,
        expected_loops=before + options.loops if count_loops else None,
        stuck=stuck,
    )


async def _drive(
    rt: Runtime,
    options: StressOptions,
    loop_ids: list[str],
    tally: Tally,
    stops: trio.MemoryReceiveChannel[str],
    *,
    progress: Progress | None,
    progress_interval: float,
) -> bool:
    """Start the loops and wait for every loop to end; True if they stalled instead."""
    resumed = [s.loop_id for s in await rt.list(live_only=True)]
    tally.expect(set(loop_ids) | set(resumed))
    text = f"|loop:{options.rounds},fresh| stress {options.task_prefix}{{}}"
    pending = iter(enumerate(loop_ids))

    async def starter() -> None:
        for i, loop_id in pending:
            await _start_through_crashes(rt, text.format(i), loop_id)
            tally.last_progress = time.monotonic()

    async def stopper() -> None:
        async for loop_id in stops:
            try:
                await rt.handle(loop_id).stop()
            except LoopactorsError as exc:  # reported by the invariants, if it matters
                print(f"loopactors stress: stop of {loop_id} failed: {exc}", file=sys.stderr)

    stuck = False
    async with trio.open_nursery() as nursery:
        nursery.start_soon(stopper)
        if progress is not None:
            nursery.start_soon(_show_progress, tally, progress, progress_interval)
        async with trio.open_nursery() as starters:
            for _ in range(min(STARTERS, len(loop_ids))):
                starters.start_soon(starter)
        while True:
            with trio.move_on_after(min(2.0, options.stall_timeout)):
                await tally.done.wait()
                break
            # An event can be missed (e.g. a restart): the store knows.
            if (await rt.store_statistics()).live_loops == 0:
                break
            if time.monotonic() - tally.last_progress > options.stall_timeout:
                stuck = True
                break
        nursery.cancel_scope.cancel()
    if progress is not None:
        progress(tally)
    return stuck


async def _start_through_crashes(rt: Runtime, text: str, loop_id: str) -> None:
    """Start a loop while actors crash on purpose: a start whose answer a crash lost is sent
    again under the same id, which returns the loop if the first one was admitted."""
    for attempt in range(START_ATTEMPTS):
        try:
            await rt.start(text, loop_id=loop_id)
        except LoopactorsError:
            if attempt == START_ATTEMPTS - 1:
                raise
            await trio.sleep(0.01 * (attempt + 1))
        else:
            return


async def _show_progress(tally: Tally, progress: Progress, interval: float) -> None:
    while True:
        progress(tally)
        await trio.sleep(interval)


async def _read_from_runtime(rt: Runtime) -> list[StoredLoop]:
    stored = []
    for state in await rt.list():
        rounds = await rt.history(state.loop_id)
        events = await rt.stored_events(state.loop_id)
        stored.append(StoredLoop(state=state, rounds=tuple(rounds), events=tuple(events)))
    return stored


def open_existing(store: str, state_dir: Path) -> StoreBackend | None:
    """The durable store ``store`` names, opened to read; None if it holds nothing yet."""
    url = parse_store(store)
    kind = store_kind(url)
    local = kind.local_dir(url, state_dir)
    if kind.in_process or (local is not None and not local.exists()):
        return None
    return open_store(url, state_dir, read_only=True)


def read_store(store: str, state_dir: Path) -> list[StoredLoop]:
    """Every loop in a durable store, read straight from it (no runtime)."""
    backend = open_existing(store, state_dir)
    if backend is None:
        return []
    try:
        return [
            StoredLoop(
                state=state,
                rounds=tuple(backend.rounds(state.loop_id)),
                events=tuple(backend.events(state.loop_id)),
            )
            for state in backend.list_loops()
        ]
    finally:
        backend.close()


def read_sqlite(state_dir: Path) -> list[StoredLoop]:
    """``read_store("sqlite", state_dir)``: the name before stores had URLs (kept for one
    release)."""
    return read_store("sqlite", state_dir)


def peak_rss_mb() -> float:
    # ru_maxrss is in KiB on Linux, bytes on macOS.
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**20


def build_report(
    options: StressOptions,
    stored: list[StoredLoop],
    tally: Tally,
    faults: FaultInjection,
    *,
    seconds: float,
    expected_loops: int | None,
    stuck: bool,
    kill_trials: Any = (),
    peak_rss: float | None = None,
    restarts: int | None = None,
) -> StressReport:
    invariants = check_loops(stored, rounds=options.rounds, expected_loops=expected_loops)
    completed = sum(1 for loop in stored for r in loop.rounds if r.status == "completed")
    states: list[LoopState] = [loop.state for loop in stored]
    return StressReport(
        loops=len(stored),
        rounds_per_loop=options.rounds,
        worker=options.worker,
        store=options.store,
        crash_rate=options.crash_rate,
        stop_rate=options.stop_rate,
        seed=options.seed,
        seconds=seconds,
        rounds_completed=completed,
        rounds_per_s=tally.rounds_done / seconds if seconds > 0 else 0.0,
        p50_transition_ms=_ms(percentile(tally.gaps, 0.50)),
        p99_transition_ms=_ms(percentile(tally.gaps, 0.99)),
        peak_rss_mb=peak_rss_mb() if peak_rss is None else peak_rss,
        faults_injected=faults.injected,
        actor_restarts=faults.restarts if restarts is None else restarts,
        phases=phase_counts(states),
        invariants=tuple(invariants),
        kill_trials=tuple(kill_trials),
        ok=not stuck and all(inv.ok for inv in invariants),
    )


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000
