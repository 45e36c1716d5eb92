"""A state directory deleted or replaced under a running runtime stops it, loudly."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
import trio

from loopactors.errors import StateDirectoryLost
from loopactors.runtime import RuntimeConfig, open_runtime
from tests.gateway.test_cli_node import NodeProcess
from tests.hang import HANG, PROMPT


def delete_dir(state: Path) -> None:
    shutil.rmtree(state)


def delete_db(state: Path) -> None:
    (state / "loopactors.db").unlink()


def replace_dir(state: Path) -> None:
    state.rename(state.with_name("moved"))
    state.mkdir()
    (state / "loopactors.db").write_bytes(b"")


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (delete_dir, "was deleted"),
        (delete_db, "loopactors.db was deleted"),
        (replace_dir, "was replaced"),
    ],
)
async def test_a_lost_state_directory_stops_the_runtime(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, change: object, said: str
) -> None:
    state = tmp_path / "state"
    config = RuntimeConfig(state_dir=state, worker="scripted:latency=0.5")
    with pytest.raises(StateDirectoryLost, match=said) as info:
        async with open_runtime(config) as rt:
            handle = rt.handle(await rt.start("|loop:50| long work"))
            await trio.sleep(1)
            change(state)  # type: ignore[operator]
            with trio.fail_after(5):  # cancelled by the watch within a second or so
                await trio.sleep_forever()
    assert "stopped taking work" in str(info.value)
    assert handle.loop_id


def test_a_node_whose_state_directory_is_deleted_exits_non_zero(tmp_path: Path) -> None:
    state = tmp_path / "state"
    node = NodeProcess(state, "--worker", "scripted:latency=0.05")
    try:
        run = node.cli("run", "|loop:2| before", "--json")
        assert run.returncode == 0, run.stderr
        shutil.rmtree(state)
        deleted = time.monotonic()
        assert node.proc.wait(timeout=HANG) == 1
        assert time.monotonic() - deleted < PROMPT  # a second's check, then a graceful stop
        assert node.proc.stderr is not None
        log = "".join(node.log) + node.proc.stderr.read()
        assert f"{state} was deleted under the running runtime: stopping (exit 1)" in log
        assert "Traceback" not in log
    finally:
        if node.proc.poll() is None:
            node.proc.kill()
            node.proc.wait()
        assert node.proc.stderr is not None
        node.proc.stderr.close()
