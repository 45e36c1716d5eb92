"""Plan files and prompt files, read for a loop's rounds (docs/plans.md).

The reading is here (off the event loop, in a worker thread); what a plan means is the pure
``loops.parse_plan`` and ``loops.plan_prompt``.
"""

from __future__ import annotations

import msgspec
import trio

from ..errors import LoopSyntaxError
from ..loops import LoopState, Plan, PlanProgress, Prompt, build_prompt, plan_prompt
from ._plan_files import read_plan_now, read_task_now

__all__ = ["plan_progress", "read_plan", "read_task_file", "round_prompt"]


async def read_plan(path: str) -> tuple[Plan | None, str | None]:
    """The plan, or ``None`` and why it could not be read."""
    try:
        return await trio.to_thread.run_sync(read_plan_now, path), None
    except LoopSyntaxError as exc:
        return None, str(exc)


async def read_task_file(path: str) -> tuple[str | None, str | None]:
    try:
        return await trio.to_thread.run_sync(read_task_now, path), None
    except LoopSyntaxError as exc:
        return None, str(exc)


async def plan_progress(state: LoopState) -> PlanProgress | None:
    """A plan-driven loop's plan as read after a round; ``None`` without a plan, or when
    it cannot be read (the next round's prompt says why)."""
    if state.spec.plan is None:
        return None
    plan, _ = await read_plan(state.spec.plan)
    return None if plan is None else PlanProgress(plan.done, plan.total)


async def round_prompt(state: LoopState) -> Prompt:
    """The round's prompt: :func:`loops.build_prompt` with the task read from the prompt
    file and the plan's part added (docs/plans.md), when the loop has them."""
    spec = state.spec
    if spec.plan is None and spec.prompt_file is None:
        return build_prompt(state)
    task = spec.task
    if spec.prompt_file is not None:
        read, problem = await read_task_file(spec.prompt_file)
        # An unreadable prompt file this round: the last task known, and the agent is told.
        task = read if read is not None else f"{spec.task}\n\n(Note: {problem}.)"
    plan = None
    if spec.plan is not None:
        plan, problem = await read_plan(spec.plan)
        task = plan_prompt(task, spec.plan, plan, problem)
    prompt = build_prompt(msgspec.structs.replace(state, round_task=task))
    if plan is not None:
        prompt = msgspec.structs.replace(prompt, tasks_done=plan.done, tasks_total=plan.total)
    return prompt
