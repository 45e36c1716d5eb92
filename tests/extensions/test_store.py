"""A store added from outside the package (tests/extensions/fake_store.py), with no edit
under ``loopactors/``: registered by a call, loops run, survive a killed node and are
recovered on it; registered by an entry point, the command line runs and reads it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from loopactors.errors import ConfigError
from loopactors.loops import RoundStarted
from loopactors.runtime import RuntimeConfig, open_runtime
from loopactors.storage import register_store, unregister_store

from . import fake_store

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake() -> Iterator[None]:
    register_store("fake", "tests.extensions.fake_store:KIND")
    try:
        yield
    finally:
        unregister_store("fake")


def config(tmp_path: Path, **changes: object) -> RuntimeConfig:
    url = f"fake://{tmp_path / 'loops.jsonl'}"
    return RuntimeConfig(store=url, state_dir=tmp_path / "state", shutdown_grace=5.0).replace(
        **changes
    )


async def test_loops_run_on_a_store_registered_from_outside(tmp_path: Path, fake: None) -> None:
    async with open_runtime(config(tmp_path)) as rt:
        final = await (rt.handle(await rt.start("|loop:3,fresh| hello"))).wait()
        assert final.phase == "complete"
        assert [r.round for r in await rt.history(final.loop_id)] == [1, 2, 3]
    backend = fake_store.OPENED[-1]
    # A blocking store is called off the event loop's thread.
    assert threading.get_ident() not in backend.threads
    assert (tmp_path / "loops.jsonl").stat().st_size > 0
    # Another runtime on the same store reads what the first committed.
    async with open_runtime(config(tmp_path)) as rt:
        assert (await rt.get(final.loop_id)).phase == "complete"
        events = await rt.stored_events(final.loop_id)
        assert [type(e).__name__ for e in events][-1] == "LoopFinished"


async def test_a_node_killed_mid_loop_resumes_it_from_that_store(
    tmp_path: Path, fake: None
) -> None:
    with trio.CancelScope() as scope:
        async with open_runtime(config(tmp_path, shutdown_grace=0.0)) as rt:
            with rt.subscribe() as events:
                handle = rt.handle(
                    await rt.start("|loop:4,fresh| survive", worker="scripted:latency=0.05")
                )
                async for event in events:
                    if isinstance(event, RoundStarted) and event.round == 2:
                        scope.cancel()  # the node dies: no graceful stop
    assert scope.cancelled_caught
    async with open_runtime(config(tmp_path)) as rt:
        final = await rt.handle(handle.loop_id).wait()
        rounds = await rt.history(handle.loop_id)
    assert final.phase == "complete"
    assert [(r.round, r.status) for r in rounds] == [(n, "completed") for n in range(1, 5)]


def test_an_unregistered_scheme_is_refused_naming_the_accepted_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown store 'fake://.*accepted: sqlite"):
        RuntimeConfig(store=f"fake://{tmp_path}/x")


def test_the_command_line_uses_a_store_from_an_entry_point(tmp_path: Path) -> None:
    # A distribution's metadata on the path, as `pip install` of a plug-in leaves it.
    site = tmp_path / "site"
    info = site / "loopactors_fake_store-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: loopactors-fake-store\nVersion: 1.0\n"
    )
    (info / "entry_points.txt").write_text(
        "[loopactors.stores]\nfake = tests.extensions.fake_store:KIND\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), str(REPO), os.environ.get("PYTHONPATH", "")]),
        "LOOPACTORS_STORE": f"fake://{tmp_path / 'loops.jsonl'}",
    }

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "loopactors", *args, "--state", str(tmp_path / "state")],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )

    run = cli("run", "|loop:2,fresh| hello", "--json")
    assert run.returncode == 0, run.stderr
    loop_id = json.loads(run.stdout.splitlines()[0])["loop_id"]
    status = cli("status", "--json")
    assert status.returncode == 0, status.stderr
    [loop] = json.loads(status.stdout)
    assert (loop["loop_id"], loop["phase"]) == (loop_id, "complete")
    history = cli("history", loop_id[:8], "--json")
    assert history.returncode == 0, history.stderr
    assert [r["round"] for r in json.loads(history.stdout)["rounds"]] == [1, 2]
    pruned = cli("prune", "--older-than", "0", "--json")
    assert pruned.returncode == 0, pruned.stderr
    assert json.loads(pruned.stdout)["loops"] == 1
    assert json.loads(cli("status", "--json").stdout) == []
