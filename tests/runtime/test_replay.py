"""Replay on a real runtime: a recorded round run again on another worker as a new loop,
its prompt (seed included) exactly the original's; and `history --compare` beside it, here
and from the command line."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import trio

from loopactors.errors import LoopNotFound, ReplayError
from loopactors.runtime import open_runtime

from . import replay_fns
from .conftest import sqlite_config

FIRST = "python:tests.runtime.replay_fns:first_model"
SECOND = "python:tests.runtime.replay_fns:second_model"


@pytest.fixture(autouse=True)
def _seen() -> None:
    replay_fns.SEEN.clear()


async def test_a_round_runs_again_on_another_worker_as_a_linked_loop(tmp_path: Path) -> None:
    async with open_runtime(sqlite_config(tmp_path)) as rt:
        original = rt.handle(await rt.start("|loop:3| improve the text", worker=FIRST))
        await original.wait()
        rounds = await original.history()
        replay = rt.handle(await rt.replay(original.loop_id[:8], 2, worker=SECOND))
        final = await replay.wait()
        replayed = await replay.history()
        with pytest.raises(ReplayError, match="has no round 9"):
            await rt.replay(original.loop_id, 9)
        with pytest.raises(LoopNotFound):
            await rt.replay("nosuchloop", 1)
        same_worker = rt.handle(await rt.replay(original.loop_id, 1))
        await same_worker.wait()
    assert final.phase == "complete"
    assert final.spec.replay_of == f"{original.loop_id}:2"
    assert (final.spec.rounds, final.spec.worker) == (1, SECOND)
    # Round 2 of an inherit loop was seeded with round 1's output: the replay gets the same.
    assert rounds[1].seed_source == "previous_output"
    assert rounds[1].prompt.startswith("first model, round i\n\n---\n\n")
    assert replay_fns.SEEN[3] == ("second", rounds[1].prompt)
    assert replayed[0].prompt == rounds[1].prompt
    assert (replayed[0].output, replayed[0].tokens) == ("second model's answer", 40)
    assert replay_fns.SEEN[-1] == ("first", rounds[0].prompt)


async def cli(*args: str) -> tuple[int, str, str]:
    done = await trio.run_process(
        [sys.executable, "-m", "loopactors", *args],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env={**os.environ, "COLUMNS": "160"},
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def test_replay_and_compare_from_the_command_line(tmp_path: Path) -> None:
    state = str(tmp_path)
    code, out, err = await cli(
        "run", "|loop:2| improve", "--worker", FIRST, "--state", state, "--json"
    )
    assert code == 0, err
    loop_id = json.loads(out.splitlines()[0])["loop_id"]
    code, out, err = await cli(
        "replay", loop_id, "--round", "2", "--worker", SECOND, "--state", state, "--json"
    )
    assert code == 0, err
    replay_id = json.loads(out.splitlines()[0])["loop_id"]
    assert f"replaying round 2 of {loop_id} as loop {replay_id}" in err
    code, out, err = await cli("history", loop_id, "--compare", replay_id, "--state", state)
    assert code == 0, err
    assert f"{loop_id} round 2" in out
    assert f"{replay_id} round 1" in out
    assert "first model, round ii" in out
    assert "second model's answer" in out
    assert SECOND in out
    code, out, _ = await cli("history", loop_id, "--compare", replay_id, "--state", state, "--json")
    both = json.loads(out)
    assert both["original"]["round"]["tokens"] == 100
    assert both["replay"]["round"]["tokens"] == 40
    assert both["replay"]["round"]["prompt"] == both["original"]["round"]["prompt"]
    code, _, err = await cli("history", replay_id, "--compare", loop_id, "--state", state)
    assert code == 1
    assert f"loop {loop_id} is not a replay" in err
    code, _, err = await cli("replay", loop_id, "--round", "5", "--state", state)
    assert code == 1
    assert f"loop {loop_id} has no round 5 (its recorded rounds: 1, 2)" in err
