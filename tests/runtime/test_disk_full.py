"""A full disk under a running runtime: it says so, waits, runs nothing twice, and goes on."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import trio

from loopactors.errors import StoreError
from loopactors.runtime import RuntimeConfig, open_runtime
from tests.hang import HANG
from tests.mounts import small_tmpfs


async def wait_for(condition: object, timeout: float = HANG) -> None:
    with trio.fail_after(timeout):
        while not condition():  # type: ignore[operator]
            await trio.sleep(0.05)


async def test_a_full_disk_stops_dispatching_and_resumes_when_space_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    runs = tmp_path / "runs"
    runs.touch()
    monkeypatch.setenv("DISK_TEST_RUNS", str(runs))
    caplog.set_level(logging.WARNING, "loopactors.runtime")
    with small_tmpfs(tmp_path / "disk", "3m") as disk:
        config = RuntimeConfig(state_dir=disk / "state", worker="python:tests.runtime.disk_fns:big")
        async with open_runtime(config) as rt:
            handle = rt.handle(
                await rt.start(
                    "|loop:40,fresh| fill the disk",
                    # Alike outputs are the point here, not stagnation.
                    stagnation_threshold=1000,
                    stale_rounds_limit=1000,
                )
            )
            await wait_for(lambda: "disk full" in caplog.text)
            assert "database or disk is full" in caplog.text
            # Nothing more is dispatched: at most the round in flight ends meanwhile.
            seen = runs.read_text().split()
            await trio.sleep(1.5)
            assert len(runs.read_text().split()) <= len(seen) + 1
            with pytest.raises(StoreError, match="the disk holding the store is full"):
                await rt.get(handle.loop_id)
            # Space returns: the waiting writes commit and the loop goes on to the end.
            grown = await trio.run_process(
                ["mount", "-o", "remount,size=64m", str(disk)], capture_stderr=True, check=False
            )
            assert grown.returncode == 0, grown.stderr
            with trio.fail_after(HANG):
                state = await handle.wait()
            assert (state.phase, state.completed_rounds) == ("complete", 40)
            assert "the store commits again" in caplog.text
            rounds = await rt.history(handle.loop_id)
            assert [r.round for r in rounds] == list(range(1, 41))
        # Each round ran exactly once: none was dispatched again while the disk was full.
        ran = runs.read_text().split()
        assert sorted(ran, key=int) == [str(n) for n in range(1, 41)]


def test_a_full_disk_at_start_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from loopactors.cli import main

    with small_tmpfs(tmp_path / "disk", "64k") as disk:
        with (disk / "filler").open("wb", buffering=0) as filler:
            try:
                while True:
                    filler.write(b"\0" * 4096)
            except OSError:
                pass  # full
        assert main(["run", "|loop:1| x", "--state", str(disk / "state")]) == 1
    err = capsys.readouterr().err
    assert "the disk is full: free some space, then run again" in err
    assert "Traceback" not in err
