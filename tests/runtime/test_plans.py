"""Plan-driven loops on a real runtime with real files: each round gets the next open task,
the worker ticks it off, the runtime reads the plan after each round and the loop completes
when every task is done; a prompt file is read again every round."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import trio

from loopactors.errors import LoopSyntaxError
from loopactors.runtime import open_runtime

from . import plan_fns
from .conftest import memory_config, sqlite_config

TICKING = "python:tests.runtime.plan_fns:ticking"
IDLE = "python:tests.runtime.plan_fns:idle"


@pytest.fixture(autouse=True)
def _prompts() -> None:
    plan_fns.PROMPTS.clear()


def checklist(tmp_path: Path) -> Path:
    plan = tmp_path / "fix_plan.md"
    plan.write_text("# plan\n- [x] read the code\n- [ ] fix the parser\n- [ ] add a test\n")
    return plan


async def test_a_checklist_loop_works_task_by_task_until_all_are_done(tmp_path: Path) -> None:
    plan = checklist(tmp_path)
    async with open_runtime(sqlite_config(tmp_path / "state")) as rt:
        handle = rt.handle(
            await rt.start("|loop:10| Fix the project.", worker=TICKING, plan=str(plan))
        )
        final = await handle.wait()
        rounds = await handle.history()
    assert final.phase == "complete"
    assert final.reason == f"every task of the plan {plan} is done (3/3) in round 2"
    assert (final.tasks_done, final.tasks_total) == (3, 3)
    assert [(r.tasks_done, r.tasks_total) for r in rounds] == [(2, 3), (3, 3)]
    assert "Next task: fix the parser" in plan_fns.PROMPTS[0]
    assert f"Plan: {plan} (1/3 tasks done)" in plan_fns.PROMPTS[0]
    assert "Next task: add a test" in plan_fns.PROMPTS[1]
    assert rounds[0].prompt == plan_fns.PROMPTS[0]  # recorded as given
    assert plan.read_text().count("- [x]") == 3


async def test_a_prd_loop_follows_priorities(tmp_path: Path) -> None:
    prd = tmp_path / "prd.json"
    stories = [
        {"id": "US-1", "title": "log in", "priority": 2, "passes": False},
        {"id": "US-2", "title": "sign up", "priority": 1, "passes": False},
    ]
    prd.write_text(json.dumps({"project": "app", "userStories": stories}))
    async with open_runtime(memory_config()) as rt:
        handle = rt.handle(
            await rt.start("|loop:5,fresh| Build the app.", worker=TICKING, plan=str(prd))
        )
        final = await handle.wait()
    assert final.phase == "complete"
    assert ["US-2: sign up" in plan_fns.PROMPTS[0], "US-1: log in" in plan_fns.PROMPTS[1]] == [
        True,
        True,
    ]
    assert all(s["passes"] for s in json.loads(prd.read_text())["userStories"])


async def test_rounds_that_tick_nothing_trip_the_no_progress_fuse(tmp_path: Path) -> None:
    plan = checklist(tmp_path)
    async with open_runtime(memory_config()) as rt:
        handle = rt.handle(await rt.start("|loop:10| Fix it.", worker=IDLE, plan=str(plan)))
        final = await handle.wait()
    assert (final.phase, final.trigger) == ("escalated", "no_progress")
    assert (final.tasks_done, final.tasks_total) == (1, 3)


async def test_a_plan_the_agent_breaks_is_reported_in_the_next_prompt(tmp_path: Path) -> None:
    plan = checklist(tmp_path)
    async with open_runtime(memory_config()) as rt:
        handle = rt.handle(await rt.start("|loop:2| Fix it.", worker=IDLE, plan=str(plan)))
        await handle.wait_phase("awaiting_worker")
        plan.write_text("the agent replaced the whole file\n")
        final = await handle.wait()
        rounds = await handle.history()
    # Its rounds ran out with the plan never all done: not a success.
    assert (final.phase, final.trigger) == ("escalated", "plan_not_done")
    assert rounds[0].tasks_total is None  # unreadable after round 1: nothing recorded
    assert f"the plan {plan} has no tasks" in plan_fns.PROMPTS[1]
    assert "Fix it first." in plan_fns.PROMPTS[1]


async def test_rounds_that_run_out_with_tasks_open_escalate(tmp_path: Path) -> None:
    plan = checklist(tmp_path)
    async with open_runtime(memory_config()) as rt:
        handle = rt.handle(await rt.start("|loop:2| Fix it.", worker=IDLE, plan=str(plan)))
        final = await handle.wait()
    assert (final.phase, final.trigger) == ("escalated", "plan_not_done")
    assert final.reason == (
        f"the 2 rounds ran out and the plan {plan} has 2 of its 3 tasks still open"
    )


async def test_a_missing_or_bad_plan_is_refused_at_start(tmp_path: Path) -> None:
    async with open_runtime(memory_config()) as rt:
        with pytest.raises(LoopSyntaxError, match=r"cannot read the plan .*nope\.md"):
            await rt.start("|loop:2| x", plan=str(tmp_path / "nope.md"))
        empty = tmp_path / "empty.md"
        empty.write_text("nothing to do\n")
        with pytest.raises(LoopSyntaxError, match="has no tasks"):
            await rt.start("|loop:2| x", plan=str(empty))
        with pytest.raises(LoopSyntaxError, match=r"the prompt file .* is empty"):
            empty.write_text("  \n")
            await rt.start("|loop:2| x", prompt_file=str(empty))


async def test_a_relative_plan_path_is_made_absolute_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checklist(tmp_path)
    monkeypatch.chdir(tmp_path)
    async with open_runtime(memory_config()) as rt:
        spec = rt.build_spec("|loop:2| x", plan="fix_plan.md")
    assert spec.plan == str(tmp_path / "fix_plan.md")


async def test_the_prompt_file_is_read_again_every_round(tmp_path: Path) -> None:
    prompt = tmp_path / "PROMPT.md"
    prompt.write_text("task version 1\n")
    plan_fns.EDIT["path"] = prompt
    async with open_runtime(memory_config()) as rt:
        # The activation alone: the task is the file's.
        handle = rt.handle(
            await rt.start(
                "|loop:3,fresh|",
                worker="python:tests.runtime.plan_fns:editing_prompt",
                prompt_file=str(prompt),
            )
        )
        final = await handle.wait()
        rounds = await handle.history()
    assert final.phase == "complete"
    assert final.spec.task == "task version 1"
    assert plan_fns.PROMPTS == ["task version 1", "task version 2", "task version 3"]
    assert [r.prompt for r in rounds] == plan_fns.PROMPTS


async def test_loopactors_run_with_a_plan_shows_tasks_in_status(tmp_path: Path) -> None:
    plan = checklist(tmp_path)
    state = tmp_path / "state"
    done = await trio.run_process(
        [
            sys.executable,
            "-m",
            "loopactors",
            "run",
            "|loop:10| Fix the project.",
            "--worker",
            TICKING,
            "--plan",
            str(plan),
            "--state",
            str(state),
        ],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    status = await trio.run_process(
        [sys.executable, "-m", "loopactors", "status", "--state", str(state)],
        capture_stdout=True,
        env={"COLUMNS": "200", **__import__("os").environ},
    )
    assert "2/10 tasks 3/3" in status.stdout.decode()


async def test_with_a_check_the_plan_done_and_the_check_passing_complete_it(
    tmp_path: Path,
) -> None:
    async with open_runtime(memory_config()) as rt:
        # The check passes from the start: the loop still works until every task is done.
        passing = rt.handle(
            await rt.start(
                "|loop:10| Fix it.", worker=TICKING, plan=str(checklist(tmp_path)), until="true"
            )
        )
        final = await passing.wait()
        assert final.phase == "complete"
        assert (final.tasks_done, final.completed_rounds) == (3, 2)
        assert final.reason == "objective met: the check `true` passed after round 2"
        # Every task ticked, but the check fails: ticking is a claim it refutes.
        refuted = tmp_path / "refuted"
        refuted.mkdir()
        failing = rt.handle(
            await rt.start(
                "|loop:4| Fix it.", worker=TICKING, plan=str(checklist(refuted)), until="false"
            )
        )
        final = await failing.wait()
        rounds = await failing.history()
    assert final.phase == "escalated"
    assert final.tasks_done == 3
    assert [r.unverified_claim for r in rounds][:2] == [False, True]
