"""Plan files: a Markdown checklist or a ``prd.json`` of stories, read into tasks; the next
open task; and the part of a round's prompt that names it (docs/plans.md).

Pure, no trio and no I/O: the runtime reads the file and hands its text here.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

import msgspec

from ..errors import LoopSyntaxError

__all__ = [
    "Plan",
    "PlanTask",
    "parse_plan",
    "plan_format",
    "plan_prompt",
]

PlanFormat = Literal["checklist", "prd"]

# `- [ ] task`, `* [x] task`, `+ [X] task`, `1. [ ] task`, indented or not.
_CHECKBOX = re.compile(r"^[ \t]*(?:[-*+]|\d+[.)])[ \t]+\[([ xX])\][ \t]+(\S.*?)[ \t]*$")
_FENCE = re.compile(r"^[ \t]*(```|~~~)")

#: The keys of a prd.json story that may carry its words, in the order they are tried.
_STORY_TEXT = ("title", "description", "story", "name", "id")


class PlanTask(msgspec.Struct, gc=False, frozen=True, kw_only=True):
    """One task: its words as the plan has them, and whether it is done."""

    text: str
    done: bool
    #: A prd.json story's ``id``, if it has one.
    id: str | None = None


class Plan(msgspec.Struct, gc=False, frozen=True, kw_only=True):
    format: PlanFormat
    tasks: tuple[PlanTask, ...]

    @property
    def done(self) -> int:
        return sum(task.done for task in self.tasks)

    @property
    def total(self) -> int:
        return len(self.tasks)

    @property
    def complete(self) -> bool:
        return self.done == self.total

    def next_task(self) -> PlanTask | None:
        """The first open task (a prd.json's by priority, then file order), or ``None``."""
        return next((task for task in self.tasks if not task.done), None)


def plan_format(path: str) -> PlanFormat:
    """``prd`` for a ``.json`` file, ``checklist`` for anything else."""
    return "prd" if path.lower().endswith(".json") else "checklist"


def parse_plan(text: str, path: str) -> Plan:
    """The tasks of the plan file at ``path`` whose content is ``text``.

    Raises:
        LoopSyntaxError: the file has no task, or (prd.json) is not the documented shape;
            the message names the file and what is accepted.
    """
    if plan_format(path) == "prd":
        return Plan(format="prd", tasks=_prd_tasks(text, path))
    tasks = []
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced  # a checkbox shown in a code block is not a task
            continue
        match = None if fenced else _CHECKBOX.match(line)
        if match is not None:
            tasks.append(PlanTask(text=match[2], done=match[1] != " "))
    if not tasks:
        raise LoopSyntaxError(
            f"the plan {path} has no tasks: write one `- [ ] task` line per task (`- [x]` "
            "when done), or use a prd.json with stories that have a passes flag"
        )
    return Plan(format="checklist", tasks=tuple(tasks))


def _prd_tasks(text: str, path: str) -> tuple[PlanTask, ...]:
    shape = (
        'accepted: {"userStories": [{"id": "US-1", "title": "...", "passes": false}, ...]} '
        '(or "stories", or the list itself)'
    )
    try:
        data: Any = json.loads(text)
    except ValueError as exc:
        raise LoopSyntaxError(f"the plan {path} is not JSON ({exc}); {shape}") from None
    stories = data
    if isinstance(data, dict):
        stories = data.get("userStories", data.get("stories"))
    if not isinstance(stories, list) or not stories:
        raise LoopSyntaxError(f"the plan {path} has no stories; {shape}")
    found: list[tuple[float, int, PlanTask]] = []
    for index, story in enumerate(stories, 1):
        if not isinstance(story, dict) or not isinstance(story.get("passes"), bool):
            raise LoopSyntaxError(
                f"story {index} of the plan {path} has no passes flag (true or false); {shape}"
            )
        words = next(
            (str(story[k]).strip() for k in _STORY_TEXT if str(story.get(k) or "").strip()),
            f"story {index}",
        )
        story_id = story.get("id")
        priority = story.get("priority")
        order = float(priority) if isinstance(priority, int | float) else float("inf")
        task = PlanTask(
            text=words, done=story["passes"], id=None if story_id is None else str(story_id)
        )
        found.append((order, index, task))
    # snarktank/ralph's rule: the open story with the highest priority (lowest number) next.
    return tuple(task for _, _, task in sorted(found, key=lambda item: (item[0], item[1])))


def plan_prompt(task: str, path: str, plan: Plan | None, problem: str | None = None) -> str:
    """A plan-driven round's task: the loop's task, then the plan's part (docs/plans.md).

    ``problem``: why the plan could not be read this round (the agent is told to fix it).
    """
    if plan is None:
        return f"{task}\n\nPlan: {path}\nThe plan file could not be read: {problem}. Fix it first."
    how = (
        'change its "- [ ]" to "- [x]"'
        if plan.format == "checklist"
        else 'set its "passes" to true'
    )
    nxt = plan.next_task()
    head = f"{task}\n\nPlan: {path} ({plan.done}/{plan.total} tasks done)\n"
    if nxt is None:
        return (
            head + "Every task in the plan is marked done. Check that each really is; for one "
            "that is not, mark it open again and work on it."
        )
    named = f"{nxt.id}: {nxt.text}" if nxt.id else nxt.text
    return (
        head + f"Next task: {named}\n"
        f"Work on this task only. When it is done, mark it done in {path}: {how}. "
        "Leave the other tasks as they are."
    )
