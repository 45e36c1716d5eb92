"""A deleted or replaced ``runtime.lock`` lets no second runtime in, and stops the first.

Before, deleting the lock file let a second runtime create a new one and lock it: it ended
the first runtime's live worker as an orphan, and both ran the same loop's rounds (21
overlapping runs). The runtime now also locks the state directory itself, and watches the
lock file's inode like the directory's and the database's (docs/security.md).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from loopactors.errors import StateDirectoryLost, StoreError
from loopactors.runtime import RuntimeConfig, open_runtime


def delete_lock(state: Path) -> None:
    (state / "runtime.lock").unlink()


def replace_lock(state: Path) -> None:
    (state / "runtime.lock").unlink()
    (state / "runtime.lock").write_text("pid 1")


@pytest.mark.parametrize(
    ("change", "said"),
    [(delete_lock, "runtime.lock was deleted"), (replace_lock, "runtime.lock was replaced")],
)
async def test_a_lost_lock_file_admits_no_second_runtime_and_stops_the_first(
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
    change: Callable[[Path], None],
    said: str,
) -> None:
    state = tmp_path / "state"
    config = RuntimeConfig(state_dir=state, worker="scripted:latency=0.5")
    with pytest.raises(StateDirectoryLost, match=said) as info:
        async with open_runtime(config) as first:
            handle = await first.start("|loop:50| long work")
            await trio.sleep(1)
            change(state)
            # The second runtime is refused while the first still runs ...
            with pytest.raises(StoreError, match="is in use by another loopactors runtime"):
                async with open_runtime(config):
                    pytest.fail("a second runtime opened the state directory")
            with trio.fail_after(5):  # ... and the first stops within a check or so
                await trio.sleep_forever()
    assert "stopped taking work" in str(info.value)
    # Once the first has stopped, the directory is free again; the loop is still there.
    async with open_runtime(config) as second:
        assert [s.loop_id for s in await second.list()] == [handle.loop_id]
    assert (state / "runtime.lock").exists()
    assert os.stat(state / "runtime.lock").st_size == 0
