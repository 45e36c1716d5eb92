"""What a round tells its workers (prompts) and what it keeps of them (receipts). Pure text."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..workers import RoundRequest, RoundResult
from ._gates import ReviewVerdict
from ._model import CodeLoopState, round_name

if TYPE_CHECKING:
    from ._git import LoopGit
    from ._ledger import CodeLedger
    from ._orchestration import Orchestration

__all__ = [
    "executor_prompt",
    "review_prompt",
    "review_receipt",
    "validation_receipt",
    "worker_env",
    "worker_receipt",
    "worker_request",
]

_TAIL = 4000
_LESSONS_TAIL = 3000


def _tail(text: str, limit: int = _TAIL) -> str:
    text = text.strip()
    return text if len(text) <= limit else "[...]\n" + text[-limit:]


def _fence(text: str) -> str:
    return f"```\n{text.rstrip()}\n```" if text.strip() else "(empty)"


def executor_prompt(
    state: CodeLoopState,
    number: int,
    ledger: CodeLedger,
    git: LoopGit,
    orchestration: Orchestration,
) -> str:
    plan = ledger.plan_path.read_text(encoding="utf-8") if ledger.plan_path.exists() else ""
    lessons = ledger.lessons()
    return f"""You are the executor of round {number} of the code loop {state.slug!r}.

Objective: {state.objective}

Your working directory is this round's worktree: {ledger.worktree(number)}
Branch: {git.round_branch(number)} (cut from {git.candidate})
Ledger (read it, never write it): {ledger.dir}

Acceptance for this round: the validation command `{orchestration.validate}` passes in the
worktree, and a reviewer approves the diff.

Change the code and commit on this branch. Do not push, do not switch branches, do not touch
other branches. Ask a human for anything risky with a line `NEEDS-APPROVAL: what`.

## Plan
{_tail(plan, _LESSONS_TAIL) or "(none)"}

## Lessons of earlier rounds
{_tail(lessons, _LESSONS_TAIL) or "(none)"}
"""


def review_prompt(
    state: CodeLoopState, *, number: int, branch: str, stat: str, diff: str, validation: str
) -> str:
    return f"""You review round {number} of the code loop {state.slug!r}.

Objective: {state.objective}
Proposal branch: {branch} (your working directory is its worktree)

Validation passed:
{_fence(_tail(validation, 1500))}

Diff statistics:
{_fence(stat)}

Diff:
{_fence(diff)}

Answer with a line `VERDICT: approve` or `VERDICT: reject`, followed by your reasons.
"""


def worker_receipt(
    number: int,
    executor: str,
    *,
    result: RoundResult,
    commits: list[str],
    dirty: list[str],
    stat: str,
) -> str:
    lines = [
        f"# {round_name(number)}: executor",
        "",
        f"- executor: `{executor}`",
        f"- status: {result.status}" + (f" ({result.error})" if result.error else ""),
        f"- commits: {len(commits)}",
        f"- duration: {result.duration:.1f} s",
        "",
        "## Commits",
        "",
        *([f"- {c}" for c in commits] or ["None."]),
        "",
        "## Diff statistics",
        "",
        _fence(stat),
        "",
    ]
    if dirty:
        lines += [
            "## Uncommitted changes (discarded with the worktree)",
            "",
            _fence("\n".join(dirty)),
            "",
        ]
    lines += ["## Output", "", _fence(_tail(result.output)), ""]
    return "\n".join(lines)


def validation_receipt(number: int, orchestration: Orchestration, passed: bool, report: str) -> str:
    return "\n".join(
        [
            f"# {round_name(number)}: validation",
            "",
            f"- command: `{orchestration.validate}`",
            f"- timeout: {orchestration.validate_timeout:g} s",
            f"- result: {'passed' if passed else 'failed'}",
            "",
            _fence(_tail(report)),
            "",
        ]
    )


def review_receipt(number: int, reviewer: str, result: RoundResult, verdict: ReviewVerdict) -> str:
    return "\n".join(
        [
            f"# {round_name(number)}: review",
            "",
            f"- reviewer: `{reviewer}`",
            f"- status: {result.status}" + (f" ({result.error})" if result.error else ""),
            f"- verdict: {'approve' if verdict.approved else 'reject'}",
            f"- reason: {verdict.reason}",
            "",
            "## Review",
            "",
            _fence(_tail(result.output)),
            "",
        ]
    )


def worker_env(ledger: CodeLedger, git: LoopGit, number: int, role: str) -> dict[str, str]:
    """The environment every worker of a round gets, besides its own process's."""
    return {
        "LOOPACTORS_WORKTREE": str(ledger.worktree(number)),
        "LOOPACTORS_BRANCH": git.round_branch(number),
        "LOOPACTORS_LEDGER": str(ledger.dir),
        "LOOPACTORS_ROLE": role,
    }


def worker_request(
    state: CodeLoopState,
    ledger: CodeLedger,
    git: LoopGit,
    *,
    number: int,
    role: str,
    spec: str,
    prompt: str,
) -> RoundRequest:
    """The request of a round's executor or reviewer: it runs in the round's worktree."""
    return RoundRequest(
        loop_id=f"code:{state.slug}",
        round=number,
        rounds=state.max_rounds or number,
        mode="fresh",
        prompt=prompt,
        task=state.objective,
        worker=spec,
        objective=state.objective,
        cwd=str(ledger.worktree(number)),
        env=worker_env(ledger, git, number, role),
    )
