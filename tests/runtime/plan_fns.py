"""Python workers for the plan tests: ``python:tests.runtime.plan_fns:NAME``."""

from __future__ import annotations

import json
import re
from pathlib import Path

from loopactors.workers import RoundContext, RoundRequest, RoundResult

#: Every prompt a worker was given, in order.
PROMPTS: list[str] = []

_PLAN = re.compile(r"^Plan: (\S+) \(", re.MULTILINE)
_NEXT = re.compile(r"^Next task: (.+)$", re.MULTILINE)


def _tick(prompt: str) -> None:
    """Mark the prompt's next task done in the plan the prompt names, as an agent would."""
    plan, task = _PLAN.search(prompt), _NEXT.search(prompt)
    if plan is None or task is None:
        return
    path = Path(plan[1])
    if path.suffix == ".json":
        data = json.loads(path.read_text())
        for story in data["userStories"]:
            if f"{story['id']}: {story['title']}" == task[1]:
                story["passes"] = True
        path.write_text(json.dumps(data))
    else:
        path.write_text(path.read_text().replace(f"- [ ] {task[1]}", f"- [x] {task[1]}", 1))


async def ticking(request: RoundRequest, context: RoundContext | None) -> RoundResult:
    """Does the next task and ticks it off; the same reply every round."""
    PROMPTS.append(request.prompt)
    _tick(request.prompt)
    return RoundResult(status="completed", output="did the task", progress=False)


async def idle(request: RoundRequest, context: RoundContext | None) -> RoundResult:
    """Ticks nothing and changes nothing."""
    PROMPTS.append(request.prompt)
    return RoundResult(status="completed", output="looked at it", progress=False)


async def editing_prompt(request: RoundRequest, context: RoundContext | None) -> RoundResult:
    """Rewrites PROMPT.md in its directory (``request.env['PROMPT_FILE']`` is not set, so the
    path is the one in EDIT) for the next round, as a user editing it would."""
    PROMPTS.append(request.prompt)
    EDIT["path"].write_text(f"task version {request.round + 1}\n")
    return RoundResult(status="completed", output=f"round {request.round * 'x'}")


EDIT: dict[str, Path] = {}
