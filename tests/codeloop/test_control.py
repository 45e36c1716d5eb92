"""Pause, stop and crashes around a running round; the lease; the breaker; the runtime worker."""

from __future__ import annotations

import time
from pathlib import Path

import msgspec
import pytest
import trio

from loopactors.codeloop import CODE_ROUND_WORKER, CodeLoop, open_code_loop
from loopactors.codeloop._events import RoundStarted, StatusChanged
from loopactors.codeloop._lease import (
    LEASE_FILE,
    LeaseRecord,
    acquire_lease,
    read_lease,
    release_lease,
    renew_lease,
)
from loopactors.errors import GateClosed, LeaseHeld
from loopactors.loops import LoopSpec
from loopactors.runtime import BreakerSettings, Runtime, RuntimeConfig, open_runtime
from tests.hang import HANG

from .toyrepo import VALIDATE, git, worker


async def new_loop(repo: Path, executor: str, reviewer: str = "approve") -> CodeLoop:
    loop = await open_code_loop("fix-calc", path=repo)
    await loop.init(
        objective="make VALUE 42",
        executor=worker(repo.parent, executor),
        reviewer=worker(repo.parent, reviewer),
        validate=VALIDATE,
        max_rounds=5,
    )
    return loop


def exists(path: Path) -> bool:
    return path.exists()


async def wait_for(path: Path) -> None:
    with trio.fail_after(HANG):  # real subprocesses: real time
        while not exists(path):
            await trio.sleep(0.02)


async def test_pause_and_stop_during_a_round_take_effect_after_it(
    repo: Path, rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    sync = repo.parent / "sync"
    sync.mkdir()
    monkeypatch.setenv("TOY_SYNC", str(sync))
    loop = await new_loop(repo, "wait")
    async with trio.open_nursery() as nursery:
        done: list[object] = []

        async def run() -> None:
            done.append(await loop.run(rt, rounds=3))

        nursery.start_soon(run)
        await wait_for(sync / "started-1")
        assert loop.state().status == "running"
        assert await loop.pause() == "fix-calc: a round is running; it will pause after that round"
        assert (await loop.status()).pending_control == "pause"
        # Another process (or owner) cannot run it meanwhile.
        with pytest.raises(LeaseHeld):
            await loop.run(rt, rounds=1)
        (sync / "release").write_text("go")
    state = loop.state()
    assert (state.status, state.round, state.merged_rounds) == ("paused", 1, 1)
    assert (await loop.status()).pending_control is None


async def test_resume_withdraws_a_requested_pause(
    repo: Path, rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    sync = repo.parent / "sync"
    sync.mkdir()
    monkeypatch.setenv("TOY_SYNC", str(sync))
    loop = await new_loop(repo, "wait")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: loop.run(rt, rounds=1))
        await wait_for(sync / "started-1")
        await loop.stop()
        assert await loop.resume() == "fix-calc: the requested pause/stop is withdrawn"
        (sync / "release").write_text("go")
    assert loop.state().status == "ready"


async def test_stopping_the_runtime_loop_interrupts_the_round_and_cleans_up(
    repo: Path, rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    sync = repo.parent / "sync"
    sync.mkdir()
    monkeypatch.setenv("TOY_SYNC", str(sync))
    loop = await new_loop(repo, "wait")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: loop.run(rt, rounds=1))
        await wait_for(sync / "started-1")
        (runtime_loop,) = await rt.list()
        await rt.handle(runtime_loop.loop_id).stop()
    state = loop.state()
    assert (state.status, state.round) == ("ready", 1)
    assert "cancelled" in (state.reason or "")
    assert git(repo, "worktree", "list").count("\n") == 0
    assert read_lease(loop.ledger.dir) is None


async def test_a_round_found_in_validation_after_a_crash_is_resumed(
    repo: Path, rt: Runtime
) -> None:
    loop = await new_loop(repo, "fix")
    # What a process that died during validation leaves: intent, branch with the executor's
    # commit, status validating, and a lease of a process that is gone.
    base = git(repo, "rev-parse", "main")
    git(repo, "branch", "loop/fix-calc/r001", base)
    work = repo.parent / "scratch"
    git(repo, "worktree", "add", "-q", str(work), "loop/fix-calc/r001")
    (work / "calc.py").write_text("VALUE = 42\n")
    git(work, "commit", "-qam", "fix")
    git(repo, "worktree", "remove", str(work))
    state = loop.state()
    state = loop.ledger.record(state, RoundStarted(
        at=time.time(), actor="gone", prev_status="ready", status="running", round=1,
        branch="loop/fix-calc/r001", commit=base))  # fmt: skip
    loop.ledger.record(state, StatusChanged(
        at=time.time(), actor="gone", prev_status="running", status="validating", round=1,
    ))  # fmt: skip
    dead = LeaseRecord(owner="gone", host="elsewhere", pid=1, acquired_at=0, expires_at=1)
    (loop.ledger.dir / LEASE_FILE).write_bytes(msgspec.json.encode(dead))

    state = await loop.run(rt, rounds=1)
    kinds = [type(e).__name__ for e in loop.ledger.read_events()]
    assert kinds.count("RoundStarted") == 2  # round 1 (before the crash) and round 2
    assert "RoundInterrupted" not in kinds
    # Round 1 was resumed and merged; round 2 ran after it.
    assert (state.round, state.merged_rounds) == (2, 2)
    assert "resumed after a crash" in [
        getattr(e, "reason", None) for e in loop.ledger.read_events()
    ]


async def run_into_the_safety_gate(loop: CodeLoop, rt: Runtime, reason: str) -> list[str]:
    """Run the loop: the safety gate trips with ``reason`` and the breach note is used up.
    Returns the kinds of the ledger's events."""
    with pytest.raises(GateClosed, match="safety: the executor changed"):
        await loop.run(rt, rounds=1)
    state = loop.state()
    assert (state.status, state.active_gate) == ("blocked", "safety")
    assert state.reason == reason
    assert not loop.ledger.breach_path.exists()
    return [type(e).__name__ for e in loop.ledger.read_events()]


async def test_a_breach_noted_before_a_crash_trips_the_safety_gate_at_the_next_run(
    repo: Path, rt: Runtime
) -> None:
    """A crash after a turn's breach was found (and its note written) but before a safety
    gate recorded it: the round is already marked interrupted ("ready"). The next run trips
    the gate from the note and starts no round (docs/security.md)."""
    loop = await new_loop(repo, "fix")
    text = "the executor changed the repository outside loop/fix-calc/: tag v-evil created"
    loop.ledger.breach_path.write_text(text + " (all put back)")
    kinds = await run_into_the_safety_gate(loop, rt, text + " (all put back)")
    assert "RoundStarted" not in kinds
    assert kinds[-1] == "GateTripped"


async def test_a_breach_found_and_put_back_before_a_crash_mid_round_is_not_lost(
    repo: Path, rt: Runtime
) -> None:
    """The turn's after-check put the repository back and noted the breach, then the process
    died with the round in flight: the repository now matches the turn's snapshot, so only
    the note tells. The crashed round is interrupted and the safety gate trips."""
    loop = await new_loop(repo, "fix")
    base = git(repo, "rev-parse", "main")
    loop.ledger.record(loop.state(), RoundStarted(
        at=time.time(), actor="gone", prev_status="ready", status="running", round=1,
        branch="loop/fix-calc/r001", commit=base))  # fmt: skip
    dead = LeaseRecord(owner="gone", host="elsewhere", pid=1, acquired_at=0, expires_at=1)
    (loop.ledger.dir / LEASE_FILE).write_bytes(msgspec.json.encode(dead))
    text = "the executor changed the repository outside loop/fix-calc/: refs/heads/main moved"
    loop.ledger.breach_path.write_text(text + " (all put back)")
    kinds = await run_into_the_safety_gate(loop, rt, text + " (all put back)")
    assert kinds[-2:] == ["RoundInterrupted", "GateTripped"]
    assert kinds.count("RoundStarted") == 1  # no new round after the breach


async def test_the_runtime_breaker_escalation_blocks_the_loop(repo: Path) -> None:
    loop = await new_loop(repo, "fix", "reject")
    config = RuntimeConfig(store="memory", breaker=BreakerSettings(max_consecutive_failures=1))
    async with open_runtime(config) as runtime:
        state = await loop.run(runtime, rounds=3)
    assert (state.status, state.active_gate, state.round) == ("blocked", "breaker", 1)
    assert "breaker" in loop.ledger.handoff_path.read_text()


async def test_a_runtime_loop_of_code_rounds_takes_the_lease_per_round(
    repo: Path, rt: Runtime
) -> None:
    """What a runtime that resumed a code loop on its own does: each round takes the lease."""
    loop = await new_loop(repo, "fix")
    spec = LoopSpec(task=str(loop.ledger.dir), rounds=1, worker=CODE_ROUND_WORKER, mode="fresh")
    final = await (rt.handle(await rt.start(spec))).wait()
    assert final.phase == "complete"
    assert loop.state().merged_rounds == 1
    assert read_lease(loop.ledger.dir) is None
    # While someone else holds the lease, the round fails and says why.
    other = LeaseRecord(
        owner="someone", host="elsewhere", pid=1, acquired_at=0, expires_at=time.time() + 60
    )
    (loop.ledger.dir / LEASE_FILE).write_bytes(msgspec.json.encode(other))
    final = await (rt.handle(await rt.start(spec))).wait()
    (record,) = await rt.history(final.loop_id)
    assert record.status == "failed"
    assert "LeaseHeld" in (record.error or "")
    assert loop.state().round == 1


def test_lease_is_exclusive_expires_and_can_be_lost(tmp_path: Path) -> None:
    a = acquire_lease(tmp_path, owner="a", ttl=60)
    with pytest.raises(LeaseHeld, match="held by a"):
        acquire_lease(tmp_path, owner="b")
    assert acquire_lease(tmp_path, owner="a").owner == "a"  # the owner may take it again
    release_lease(a)
    b = acquire_lease(tmp_path, owner="b", ttl=0.01)
    time.sleep(0.02)  # expired: free for the next owner
    c = acquire_lease(tmp_path, owner="c")
    with pytest.raises(LeaseHeld, match="lost"):
        renew_lease(b)
    release_lease(b)  # losing it meanwhile is no error, and c keeps it
    record = read_lease(tmp_path)
    assert record is not None
    assert record.owner == "c"
    release_lease(c)
    assert read_lease(tmp_path) is None
