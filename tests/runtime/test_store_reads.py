"""Reads of a loop's state while writes wait for the group commit: a state is read without
committing the batch early, and a final state only once it is durable."""

from __future__ import annotations

import time
from pathlib import Path

import trio
import trio.testing

from loopactors.loops import LoopSpec, LoopState
from loopactors.runtime import open_runtime
from loopactors.runtime._messages import Commit
from loopactors.runtime._store import Store
from loopactors.storage import Write

from .conftest import sqlite_config


async def test_a_state_is_read_from_the_batch_and_an_end_once_durable(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runtime(sqlite_config(tmp_path)) as rt:
        store = rt.node.ref("store")
        ref = rt.node.whereis("store")
        assert ref is not None
        actor = ref._cell.actor
        assert isinstance(actor, Store)
        await trio.testing.wait_all_tasks_blocked()
        commits = actor.backend.statistics().commits
        state = LoopState(
            loop_id="batched", spec=LoopSpec(task="t"), phase="dispatching", created_at=time.time()
        )
        await store.cast(Commit(Write(state=state)))
        assert await rt.get("batched") == state
        assert actor.backend.statistics().commits == commits  # still waiting for company
        assert actor.backend.get_loop("batched") is None

        running = state.moved("awaiting_worker")
        await store.cast(Commit(Write(state=running)))
        assert await rt.get("batched") == running  # the last one queued
        assert actor.backend.statistics().commits == commits

        final = running.moved("cancelled", reason="stopped by request")
        await store.cast(Commit(Write(state=final)))
        assert await rt.get("batched") == final
        assert actor.backend.statistics().commits == commits + 1  # read once durable
        assert actor.backend.get_loop("batched") == final

        # Group commit goes on as before: a state queued now is committed a moment later.
        other = LoopState(loop_id="other", spec=LoopSpec(task="t"), created_at=time.time())
        await store.cast(Commit(Write(state=other)))
        await trio.sleep(1)
        assert actor.backend.get_loop("other") == other
        assert actor.backend.statistics().commits == commits + 2
