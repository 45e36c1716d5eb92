"""Plan files read into tasks, the next open task, the round's plan prompt, and what a
plan-driven round does to the loop (progress, completion). Pure, no trio."""

from __future__ import annotations

import json

import msgspec
import pytest

from loopactors.errors import LoopSyntaxError
from loopactors.loops import (
    LoopSpec,
    LoopState,
    PlanProgress,
    Prompt,
    Run,
    after_round,
    build_prompt,
    dispatch_round,
    parse_plan,
    plan_prompt,
)
from loopactors.loops import steps as effects
from loopactors.workers import RoundResult

CHECKLIST = """# Fix plan

Some words, and a list that is not a task list:
- just a bullet

- [x] make the parser strict
- [ ] add the missing test
  - [ ] a nested step counts too
* [X] star bullets work
1. [ ] numbered ones as well

```md
- [ ] a task shown in a code block is not a task
```
"""


def test_a_checklist_is_read_in_file_order() -> None:
    plan = parse_plan(CHECKLIST, "/w/fix_plan.md")
    assert plan.format == "checklist"
    assert [(t.text, t.done) for t in plan.tasks] == [
        ("make the parser strict", True),
        ("add the missing test", False),
        ("a nested step counts too", False),
        ("star bullets work", True),
        ("numbered ones as well", False),
    ]
    assert (plan.done, plan.total, plan.complete) == (2, 5, False)
    nxt = plan.next_task()
    assert nxt is not None
    assert nxt.text == "add the missing test"


def test_a_file_without_tasks_is_refused_saying_what_is_accepted() -> None:
    with pytest.raises(LoopSyntaxError, match=r"the plan /w/notes.md has no tasks: write one"):
        parse_plan("# notes\n- a bullet\n", "/w/notes.md")


def prd(*stories: dict[str, object], key: str = "userStories") -> str:
    return json.dumps({"project": "x", key: list(stories)})


def test_a_prd_takes_the_open_story_with_the_highest_priority() -> None:
    text = prd(
        {"id": "US-1", "title": "log in", "priority": 2, "passes": False},
        {"id": "US-2", "title": "sign up", "priority": 1, "passes": True},
        {"id": "US-3", "description": "reset password", "priority": 3, "passes": False},
    )
    plan = parse_plan(text, "/w/prd.json")
    assert plan.format == "prd"
    assert [(t.id, t.text, t.done) for t in plan.tasks] == [
        ("US-2", "sign up", True),
        ("US-1", "log in", False),
        ("US-3", "reset password", False),
    ]
    nxt = plan.next_task()
    assert nxt is not None
    assert nxt.id == "US-1"
    # A plain list of stories, or "stories", without priorities: file order.
    listed = parse_plan(
        json.dumps([{"title": "a", "passes": True}, {"title": "b", "passes": False}]), "p.json"
    )
    assert [t.text for t in listed.tasks] == ["a", "b"]
    assert parse_plan(prd({"name": "c", "passes": False}, key="stories"), "P.JSON").total == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "is not JSON"),
        (json.dumps({"userStories": []}), "has no stories"),
        (json.dumps({"other": 1}), "has no stories"),
        (prd({"title": "x"}), "story 1 of the plan /w/prd.json has no passes flag"),
        (prd({"title": "x", "passes": "no"}), "has no passes flag"),
    ],
)
def test_a_bad_prd_is_refused_naming_the_problem(text: str, message: str) -> None:
    with pytest.raises(LoopSyntaxError, match=message) as info:
        parse_plan(text, "/w/prd.json")
    assert '"passes": false' in str(info.value)


def test_the_plan_prompt_names_the_next_task_and_how_to_tick_it() -> None:
    plan = parse_plan(CHECKLIST, "/w/fix_plan.md")
    text = plan_prompt("Fix the project.", "/w/fix_plan.md", plan)
    assert text == (
        "Fix the project.\n\nPlan: /w/fix_plan.md (2/5 tasks done)\n"
        "Next task: add the missing test\n"
        "Work on this task only. When it is done, mark it done in /w/fix_plan.md: change its "
        '"- [ ]" to "- [x]". Leave the other tasks as they are.'
    )
    stories = parse_plan(prd({"id": "US-7", "title": "t", "passes": False}), "/w/prd.json")
    assert "Next task: US-7: t\n" in plan_prompt("T", "/w/prd.json", stories)
    assert 'set its "passes" to true' in plan_prompt("T", "/w/prd.json", stories)
    done = parse_plan("- [x] a\n", "p.md")
    assert "Every task in the plan is marked done" in plan_prompt("T", "p.md", done)
    broken = plan_prompt("T", "p.md", None, "cannot read the plan p.md: gone")
    assert broken.endswith("could not be read: cannot read the plan p.md: gone. Fix it first.")


def running(plan_done: int, total: int) -> Run:
    state = LoopState(loop_id="L", spec=LoopSpec(task="T", rounds=5, plan="/w/p.md"))
    state = state.moved("dispatching")
    prompt = Prompt(
        text="T+plan", seed_source="task", task="T+plan", tasks_done=plan_done, tasks_total=total
    )
    run, todo = dispatch_round(Run(state=state), prompt, 10.0)
    save = todo[0]
    assert isinstance(save, effects.Save)
    assert save.record is not None
    assert save.record.prompt == "T+plan"  # the prompt is recorded with the round's intent
    assert (run.state.round_task, run.state.tasks_done, run.state.tasks_total) == (
        "T+plan",
        plan_done,
        total,
    )
    return run


def test_a_round_that_ticks_a_task_is_progress_and_is_recorded() -> None:
    run = running(1, 3)
    same = RoundResult(status="completed", output="same words", progress=False)
    run = msgspec.structs.replace(run, last_normalized="same words")
    after, todo = after_round(run, same, 11.0, plan=PlanProgress(2, 3))
    assert after.state.stale_rounds == 0  # the workspace said no, but a task was ticked
    assert (after.state.tasks_done, after.state.tasks_total) == (2, 3)
    (record,) = [e.record for e in todo if isinstance(e, effects.RecordAttempt)]
    assert (record.tasks_done, record.tasks_total, record.prompt) == (2, 3, "T+plan")
    saves = [e for e in todo if isinstance(e, effects.Save)]
    finished = saves[0].events[0]
    assert "tasks 2/3" in finished.note()
    # No task ticked: judged by the workspace as before.
    after, _ = after_round(running(1, 3), same, 11.0, plan=PlanProgress(1, 3))
    assert after.state.stale_rounds == 1


def test_every_task_done_completes_the_loop() -> None:
    result = RoundResult(status="completed", output="did the last one")
    after, _ = after_round(running(2, 3), result, 11.0, plan=PlanProgress(3, 3))
    assert after.state.phase == "complete"
    assert after.state.reason == "every task of the plan /w/p.md is done (3/3) in round 1"
    # Not while a task is open, nor on a failed round.
    assert (
        after_round(running(2, 3), result, 11.0, plan=PlanProgress(2, 3))[0].state.phase
        == "dispatching"
    )
    failed = RoundResult(status="failed", error="boom")
    assert (
        after_round(running(2, 3), failed, 11.0, plan=PlanProgress(3, 3))[0].state.phase
        == "dispatching"
    )


def test_a_recovered_round_runs_the_same_prompt() -> None:
    run = running(0, 2)
    again = build_prompt(run.state)  # what a restarted runner dispatches (resume_step)
    assert (again.text, again.task) == ("T+plan", "T+plan")
