"""`loopactors store copy`: a store's loops moved into another, whole, never over a loop the
target holds, never while a runtime holds either store, its loops resumable there."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from loopactors.cli import main
from loopactors.errors import StoreError
from loopactors.loops._events import LoopFinished, LoopStarted, RoundFinished, RoundSummary
from loopactors.loops._model import LoopSpec, LoopState, RoundRecord
from loopactors.runtime import lock_state_dir
from loopactors.storage import (
    CopyReport,
    MemoryBackend,
    StoreBackend,
    Write,
    copy_loops,
    open_backend,
    open_store,
)

from ..postgres import store_url
from ..runtime.test_recovery import assert_each_round_once, finish, run_until

NOTIFIED = LoopSpec(task="report", rounds=1, notify=("json://127.0.0.1:9/",))


def finished_with_notification(backend: StoreBackend, loop_id: str) -> None:
    """A finished loop whose final event queued a notification in ``backend``."""
    state = LoopState(
        loop_id=loop_id, spec=NOTIFIED, phase="complete", round=1, created_at=1.0, updated_at=2.0
    )
    summary = RoundSummary(round=1, status="completed", duration=0.1)
    backend.commit(
        [
            Write(
                state=state,
                round=RoundRecord(loop_id=loop_id, round=1, status="completed", output="done"),
                events=(
                    LoopStarted(loop_id=loop_id, at=1.0, rounds=1, mode="fresh", worker="scripted"),
                    RoundFinished(
                        loop_id=loop_id, at=1.5, round=1, rounds=1, status="completed", duration=0.1
                    ),
                    LoopFinished(
                        loop_id=loop_id,
                        at=2.0,
                        phase="complete",
                        rounds=1,
                        completed_rounds=1,
                        summary=(summary,),
                    ),
                ),
            )
        ]
    )


def same_history(source: StoreBackend, target: StoreBackend, loop_id: str) -> None:
    assert target.get_loop(loop_id) == source.get_loop(loop_id)
    assert target.rounds(loop_id) == source.rounds(loop_id)
    assert target.events(loop_id) == source.events(loop_id)


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the copy goes: a fresh SQLite directory or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        return str(tmp_path / "target")
    return store_url(request, "postgres")


async def test_a_sqlite_store_moves_whole_and_its_live_loop_finishes_there(
    tmp_path: Path, target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    source_dir = tmp_path / "source"
    live = await run_until(
        source_dir, "|loop:4,fresh| survive", "round 2 started", worker="scripted:latency=0.05"
    )
    source = open_backend("sqlite", source_dir)
    finished_with_notification(source, "finished-1")
    assert source.statistics().notifications == 1
    source.close()

    assert main(["store", "copy", "--from", str(source_dir), "--to", target, "--json"]) == 0
    report = CopyReport(**json.loads(capsys.readouterr().out))
    assert (report.loops, report.queued_notifications, report.dry_run) == (2, 1, False)

    source = open_backend("sqlite", source_dir)
    copied = open_backend(target if "://" in target else f"sqlite:{target}", None)
    try:
        for loop_id in (live, "finished-1"):
            same_history(source, copied, loop_id)
        assert report.rounds == sum(len(source.rounds(i)) for i in (live, "finished-1"))
        assert report.events == sum(len(source.events(i)) for i in (live, "finished-1"))
        # History already acted on: its notification is not queued a second time.
        assert copied.statistics().notifications == 0
        assert source.get_loop(live).phase == "awaiting_worker"  # type: ignore[union-attr]
    finally:
        source.close()
        copied.close()

    # The loop killed mid-round resumes on the copy, each round recorded once.
    final, rounds, _ = await finish(tmp_path / "node", live, target)
    assert final.phase == "complete"
    assert_each_round_once(rounds, 4)


def test_a_loop_the_target_holds_is_never_overwritten(
    tmp_path: Path, target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    source_dir = tmp_path / "source"
    source = open_backend("sqlite", source_dir)
    for n in range(3):
        finished_with_notification(source, f"loop-{n}")
    source.close()
    url = target if "://" in target else f"sqlite:{target}"
    held = open_backend(url, None)
    finished_with_notification(held, "loop-1")  # the target's own loop-1
    before = held.events("loop-1")
    held.close()

    assert main(["store", "copy", "--from", str(source_dir), "--to", target]) == 1
    error = capsys.readouterr().err
    assert "1 of the 3 loops to copy are already in the target store (loop-1)" in error
    assert "nothing was copied" in error
    held = open_backend(url, None)
    try:
        assert held.get_loop("loop-0") is None
        assert held.get_loop("loop-2") is None
        assert held.events("loop-1") == before
    finally:
        held.close()


def test_a_dry_run_counts_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = open_backend("sqlite", tmp_path / "source")
    finished_with_notification(source, "only")
    source.close()
    target = tmp_path / "target"
    argv = ["store", "copy", "--from", str(tmp_path / "source"), "--to", str(target)]
    assert main([*argv, "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith("would copy 1 loop, 1 round and 3 events")
    assert not target.exists()


def test_a_store_held_by_a_runtime_is_not_copied(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source_dir = tmp_path / "source"
    source = open_backend("sqlite", source_dir)
    finished_with_notification(source, "busy")
    source.close()
    with lock_state_dir(source_dir):  # what a running node holds
        assert main(["store", "copy", "--from", str(source_dir), "--to", "sqlite:x"]) == 1
    assert "in use" in capsys.readouterr().err
    target_dir = tmp_path / "target"
    with lock_state_dir(target_dir):
        assert main(["store", "copy", "--from", str(source_dir), "--to", str(target_dir)]) == 1
    assert "in use" in capsys.readouterr().err
    assert open_store(f"sqlite:{target_dir}", None, read_only=True) is None


@pytest.mark.parametrize(
    ("source", "target", "says"),
    [
        ("{tmp}/a", "{tmp}/a", "--from and --to name the same store"),
        ("{tmp}/a", "memory", "--to 'memory' is a store in this process's memory"),
        ("sqlite", "{tmp}/b", "--from 'sqlite' names no directory"),
        ("{tmp}/nowhere", "{tmp}/b", "no store to copy in"),
        ("{tmp}/a", "mysql://x", "unknown store 'mysql://x'; accepted: sqlite"),
    ],
)
def test_bad_stores_are_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], source: str, target: str, says: str
) -> None:
    store = open_backend("sqlite", tmp_path / "a")
    finished_with_notification(store, "kept")
    store.close()
    argv = ["store", "copy", "--from", source.format(tmp=tmp_path)]
    assert main([*argv, "--to", target.format(tmp=tmp_path)]) == 1
    assert says in capsys.readouterr().err
    store = open_backend("sqlite", tmp_path / "a")
    assert store.get_loop("kept") is not None
    store.close()


def test_copy_loops_pages_through_many_loops_and_commits_in_batches(tmp_path: Path) -> None:
    source = MemoryBackend()
    for n in range(1_234):
        finished_with_notification(source, f"loop-{n:05}")
    target = MemoryBackend()
    seen: list[CopyReport] = []
    report = copy_loops(source, target, progress=seen.append)
    assert (report.loops, report.rounds, report.events) == (1_234, 1_234, 3 * 1_234)
    assert target.statistics().loops == 1_234
    assert seen
    assert seen[-1].loops < 1_234
    assert [s.loop_id for s in target.list_loops()] == [s.loop_id for s in source.list_loops()]


def test_an_incomplete_read_back_is_an_error(tmp_path: Path) -> None:
    source = MemoryBackend()
    finished_with_notification(source, "lost")

    class DroppingEvents(MemoryBackend):
        def commit(self, writes: Sequence[Write]) -> None:
            super().commit([Write(state=w.state, round=w.round) for w in writes])

    with pytest.raises(StoreError, match="1 copied loops read back different from the source"):
        copy_loops(source, DroppingEvents())
