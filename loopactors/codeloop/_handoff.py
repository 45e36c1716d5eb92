"""``HANDOFF.md``: a typed hand-off record rendered to Markdown (docs/codeloop.md). Pure, no trio.

The record carries what a code loop's final report owes: status, rounds, the candidate
against main, validation results, pending approvals, the next action, and the statement that
nothing was pushed or merged into main.
"""

from __future__ import annotations

import msgspec

__all__ = ["NOT_PUSHED", "HandOff", "RoundLine", "render_handoff"]

NOT_PUSHED = "Not pushed, not merged into main."


class RoundLine(msgspec.Struct, frozen=True, kw_only=True):
    """One round as the hand-off lists it."""

    round: int
    branch: str
    outcome: str
    validation: str
    verdict: str


class HandOff(msgspec.Struct, frozen=True, kw_only=True):
    slug: str
    objective: str
    status: str
    rounds: int
    merged_rounds: int
    max_rounds: int | None
    deadline: str | None
    active_gate: str | None
    reason: str | None
    candidate_branch: str
    candidate_commit: str
    base: str
    #: ``git diff --stat`` of the candidate against its base (main).
    diff_stat: str
    rounds_table: tuple[RoundLine, ...]
    last_validation_passed: bool | None
    pending_approvals: tuple[str, ...]
    rejected_branches: tuple[str, ...]
    next_action: str
    pushed: bool = False
    merged_into_main: bool = False
    written_at: str = ""


def _validation_word(passed: bool | None) -> str:
    return {True: "passing", False: "failing", None: "not run yet"}[passed]


def render_handoff(h: HandOff) -> str:
    lines = [
        f"# Hand-off: {h.slug}",
        "",
        f"- objective: {h.objective}",
        f"- status: {h.status}" + (f" (gate {h.active_gate}: {h.reason})" if h.active_gate else ""),
        f"- rounds: {h.rounds}"
        + (f" of {h.max_rounds}" if h.max_rounds is not None else "")
        + f", {h.merged_rounds} merged into the candidate",
        f"- deadline: {h.deadline or 'none'}",
        f"- candidate: `{h.candidate_branch}` at {h.candidate_commit[:12]}, base `{h.base}`",
        f"- validation: {_validation_word(h.last_validation_passed)} on the last round that ran it",
        f"- next action: {h.next_action}",
        f"- written: {h.written_at}",
        "",
        "## Candidate against main",
        "",
        "```",
        h.diff_stat.rstrip() or "(no changes)",
        "```",
        "",
        "## Rounds",
        "",
    ]
    if h.rounds_table:
        lines += ["| round | branch | outcome | validation | review |", "|---|---|---|---|---|"]
        lines += [
            f"| {r.round} | `{r.branch}` | {r.outcome} | {r.validation} | {r.verdict} |"
            for r in h.rounds_table
        ]
    else:
        lines.append("No round has run.")
    lines += ["", "## Pending approvals", ""]
    lines += [f"- {item}" for item in h.pending_approvals] or ["None."]
    lines += ["", "## Rejected proposal branches (kept for inspection)", ""]
    lines += [f"- `{branch}`" for branch in h.rejected_branches] or ["None."]
    lines += ["", NOT_PUSHED, ""]
    return "\n".join(lines)
