"""cli/_loop_control.py: one LoopControl for every target. StoredLoops (a state directory no
runtime runs) next to the Runtime that wrote it: the same answers, without trio; the pages
and output heads the commands rely on."""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from loopactors.cli._loop_control import StoredLoops, run_offline
from loopactors.errors import AmbiguousLoopId, ConfigError, LoopNotFound, StoreError
from loopactors.loops import LoopState, RoundRecord
from loopactors.runtime import RuntimeConfig, open_runtime


def sqlite(state_dir: Path) -> RuntimeConfig:
    return RuntimeConfig(store="sqlite", state_dir=state_dir, shutdown_grace=5.0)


async def three_loops(state_dir: Path) -> list[LoopState]:
    """Three finished loops, run by a real runtime on a real SQLite store."""
    async with open_runtime(sqlite(state_dir)) as rt:
        handles = [
            rt.handle(await rt.start("|loop:2,fresh| write a long answer", loop_id=f"{name}-loop"))
            for name in ("alpha", "beta", "alpine")
        ]
        return [await handle.wait() for handle in handles]


async def test_stored_loops_answer_as_the_runtime_did(tmp_path: Path) -> None:
    finished = await three_loops(tmp_path)
    async with open_runtime(sqlite(tmp_path)) as rt:
        live_state, live_rounds = await rt.recorded("beta-loop")
        pages = [page async for page in rt.loop_pages(page=2)]
        headed_state, headed_rounds = await rt.recorded("beta-loop", output_head=5)
    stored = StoredLoops(lambda: sqlite(tmp_path))
    assert run_offline(stored.get("alpi")) == finished[2]  # a unique prefix will do
    assert run_offline(stored.recorded("beta-loop")) == (live_state, live_rounds)
    assert run_offline(stored.recorded("beta", output_head=5)) == (headed_state, headed_rounds)
    assert all(len(r.output) <= 5 for r in headed_rounds)
    assert any(len(r.output) > 5 for r in live_rounds)
    # The runtime's pages hold every loop once, newest first, as the one stored page does.
    assert [len(page) for page in pages] == [2, 1]
    stored_pages = run_offline(_collect(stored.loop_pages()))
    assert [s.loop_id for s in stored_pages[0]] == [s.loop_id for p in pages for s in p]
    with pytest.raises(AmbiguousLoopId):
        run_offline(stored.get("alp"))
    with pytest.raises(LoopNotFound, match="no loop 'zeta'"):
        run_offline(stored.get("zeta"))


async def _collect(pages: Any) -> list[list[LoopState]]:
    return [page async for page in pages]


async def test_stop_ends_a_stored_loop_cancelled_and_pause_is_refused(tmp_path: Path) -> None:
    async with open_runtime(sqlite(tmp_path)) as rt:
        handle = rt.handle(await rt.start("|loop:5,fresh| slow", worker="scripted:latency=30"))
        await handle.wait_phase("awaiting_worker")
        loop_id = handle.loop_id
    stored = StoredLoops(lambda: sqlite(tmp_path))
    assert run_offline(stored.get(loop_id)).phase == "awaiting_worker"
    with pytest.raises(ConfigError, match="pause acts on a running loop"):
        run_offline(stored.pause(loop_id))
    with pytest.raises(ConfigError, match="resume LOOP_ID acts on a node"):
        run_offline(stored.resume(loop_id))
    stopped = run_offline(stored.stop(loop_id))
    assert stopped.phase == "cancelled"
    _, rounds = run_offline(stored.recorded(loop_id))
    assert [r.status for r in rounds] == ["cancelled"]  # the round in flight is closed
    assert run_offline(stored.stop(loop_id)) == stopped  # already ended: unchanged


def test_a_state_directory_that_is_missing_or_a_file_is_an_error(tmp_path: Path) -> None:
    missing = StoredLoops(lambda: sqlite(tmp_path / "nowhere"))
    with pytest.raises(StoreError, match="no state directory"):
        run_offline(missing.list())
    assert missing.open_store(missing_ok=True) is None
    (tmp_path / "file").write_text("")
    with pytest.raises(StoreError, match="is not a directory"):
        run_offline(StoredLoops(lambda: sqlite(tmp_path / "file")).list())
    empty = StoredLoops(lambda: sqlite(tmp_path))
    assert run_offline(empty.list()) == []
    with pytest.raises(LoopNotFound, match=r"no store there"):
        run_offline(empty.stop("x"))


class _Suspend:
    def __await__(self) -> Generator[None, None, None]:
        yield


def test_run_offline_refuses_a_command_that_waits() -> None:
    async def waits() -> RoundRecord:
        await _Suspend()
        raise AssertionError("not reached")

    with pytest.raises(RuntimeError, match="waited on something"):
        run_offline(waits())
