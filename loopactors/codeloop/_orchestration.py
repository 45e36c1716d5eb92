"""``ORCHESTRATION.md``: who does what in a code loop. Rendered from a template when missing,
parsed and validated when present (a user-written one is reused, never regenerated), and
rejected with the reason when it cannot be used. Pure, no trio.

The fields are ``- key: value`` lines under fixed headings; everything else is prose for
people. The reviewer is required and must differ from the executor: no
review of one's own work (docs/codeloop.md).
"""

from __future__ import annotations

import math
import re
import shlex

import attrs

from ..errors import OrchestrationError, SelfReviewRefused, WorkerSpecError
from ..workers import WorkerSpec, in_workspace, parse_worker, worker_kind

__all__ = [
    "DEFAULT_VALIDATE_TIMEOUT",
    "Orchestration",
    "parse_orchestration",
    "render_orchestration",
    "same_worker",
    "works_in_its_spec",
]

DEFAULT_VALIDATE_TIMEOUT = 600.0
PHASES = ("milestone", "polish", "milestone->polish")
_FIELD = re.compile(r"^\s*[-*]\s*([a-z][a-z ]*?)\s*:\s*(.*?)\s*$")
_HEADING = re.compile(r"^##\s+(.+?)\s*$")
#: heading -> keys read under it
_SECTIONS = {
    "roles": ("planner", "executor", "reviewer"),
    "validation": ("command", "timeout"),
    "phases": ("phases", "blueprint"),
}


def works_in_its_spec(spec: str) -> bool:
    """The worker works in the workspace its spec names, not in the round's directory (the
    agent kind): a code loop names the round's worktree in its spec."""
    kind = worker_kind(spec)
    return kind is not None and kind.workspace == "spec"


def same_worker(a: str, b: str) -> bool:
    """Two specs name the same worker (spacing and quoting aside)."""

    def norm(spec: str) -> tuple[str, ...]:
        read = WorkerSpec.parse(spec.strip())
        try:
            return (read.kind.strip(), *shlex.split(read.options))
        except ValueError:
            return (read.kind.strip(), read.options.strip())

    return norm(a) == norm(b)


@attrs.frozen(kw_only=True)
class Orchestration:
    """The roles and validation a code loop runs with."""

    executor: str
    reviewer: str
    validate: str
    validate_timeout: float = DEFAULT_VALIDATE_TIMEOUT
    planner: str | None = None
    phases: str = "milestone"
    blueprint: str | None = "PLAN.md"

    def check(self) -> Orchestration:
        """Raise :class:`OrchestrationError` naming the first field that cannot be used."""
        for role, spec in (("executor", self.executor), ("reviewer", self.reviewer)):
            if not spec.strip():
                raise OrchestrationError(f"the {role} is required (a worker spec)")
            try:
                parse_worker(spec)
            except WorkerSpecError as exc:
                raise OrchestrationError(f"the {role} {spec!r} cannot be used: {exc}") from None
            if works_in_its_spec(spec) and in_workspace(spec, "/") == spec:
                raise OrchestrationError(
                    f"the {role} {spec!r} names a workspace; in a code loop an agent works in "
                    "its round's worktree: leave workspace= out"
                )
        if same_worker(self.executor, self.reviewer):
            raise SelfReviewRefused(
                f"the reviewer {self.reviewer!r} is the executor: a round may not review "
                "itself; name a different reviewer worker"
            )
        if self.planner is not None:
            try:
                parse_worker(self.planner)
            except WorkerSpecError as exc:
                raise OrchestrationError(f"the planner {self.planner!r}: {exc}") from None
        try:
            argv = shlex.split(self.validate)
        except ValueError as exc:
            raise OrchestrationError(f"validation command {self.validate!r}: {exc}") from None
        if not argv:
            raise OrchestrationError(
                "a validation command is required (the repository's test command, e.g. "
                "'python -m pytest -q'); it runs in each round's worktree"
            )
        if not (math.isfinite(self.validate_timeout) and self.validate_timeout > 0):
            raise OrchestrationError(
                f"validation timeout must be > 0 seconds, got {self.validate_timeout!r}"
            )
        if self.phases not in PHASES:
            raise OrchestrationError(
                f"phases {self.phases!r} is unknown; accepted: {', '.join(PHASES)}"
            )
        if "milestone" in self.phases:
            if not self.blueprint:
                raise OrchestrationError(
                    "milestone phases need a blueprint: a document path (like PLAN.md) or 'planner'"
                )
            if self.blueprint == "planner" and self.planner is None:
                raise OrchestrationError("blueprint 'planner' needs a planner role, not none")
        return self


def render_orchestration(orchestration: Orchestration, *, slug: str, objective: str) -> str:
    """The template, filled in; :func:`parse_orchestration` reads back the same values."""
    o = orchestration
    candidate = f"loop/{slug}/candidate"
    return f"""# Orchestration: {slug}

## Goal

{objective}

## Roles

- planner: {o.planner or "none"}
- executor: {o.executor}
- reviewer: {o.reviewer}

## Validation

- command: {o.validate}
- timeout: {o.validate_timeout:g}

## Phases

- phases: {o.phases}
- blueprint: {o.blueprint or "none"}

## Permissions

Executors and reviewers work only in their round's worktree. Unattended loops take no
network or remote writes, use no credentials and write nothing outside the repository unless
the objective authorizes it explicitly; irreversible delivery always waits for approval. A
worker asks for approval with a line `NEEDS-APPROVAL: what`.

## Gates

The gates (attendance, deadline, maximum rounds) are in STATE.json and are checked before
every round; two rounds in a row without progress stop the loop.

## Contract

- The candidate branch `{candidate}` receives only work that passed validation and review.
- Each round proposes on its own branch `loop/{slug}/rNNN`, cut from the candidate, in a fresh
  worktree.
- Nothing is pushed and nothing is merged into main automatically.
- Only the coordinator writes STATE.json and RUNS.jsonl; executors and reviewers return
  receipts.
- The reviewer differs from the executor; no round reviews itself.
"""


def parse_orchestration(text: str, *, slug: str) -> Orchestration:
    """Read and validate an ``ORCHESTRATION.md``.

    Raises:
        OrchestrationError: a missing or repeated field, a bad value, self-review, or a
            contract that does not name the loop's candidate branch.
    """
    values: dict[str, str] = {}
    section: str | None = None
    headings: set[str] = set()
    for line in text.splitlines():
        heading = _HEADING.match(line)
        if heading:
            section = heading.group(1).strip().lower()
            headings.add(section)
            continue
        field = _FIELD.match(line)
        if field is None or section not in _SECTIONS:
            continue
        key = field.group(1)
        if key not in _SECTIONS[section]:
            continue
        name = "validate" if key == "command" else key
        if name in values:
            raise OrchestrationError(f"ORCHESTRATION.md gives {key!r} twice under ## {section}")
        values[name] = field.group(2)
    missing = [name for name in ("executor", "reviewer", "validate") if not values.get(name)]
    if missing:
        raise OrchestrationError(
            f"ORCHESTRATION.md lacks {', '.join(missing)} (lines like '- executor: SPEC' under "
            "## Roles and '- command: CMD' under ## Validation)"
        )
    if "contract" not in headings or f"loop/{slug}/candidate" not in text:
        raise OrchestrationError(
            f"ORCHESTRATION.md has no ## Contract naming the candidate branch loop/{slug}/candidate"
        )
    timeout = DEFAULT_VALIDATE_TIMEOUT
    if "timeout" in values:
        try:
            timeout = float(values["timeout"])
        except ValueError:
            raise OrchestrationError(
                f"validation timeout {values['timeout']!r} is not a number of seconds"
            ) from None

    def optional(name: str, default: str | None) -> str | None:
        value = values.get(name, default)
        return None if value is None or value.lower() in ("none", "") else value

    return Orchestration(
        executor=values["executor"],
        reviewer=values["reviewer"],
        validate=values["validate"],
        validate_timeout=timeout,
        planner=optional("planner", None),
        phases=values.get("phases", "milestone").replace("→", "->"),
        blueprint=optional("blueprint", "PLAN.md"),
    ).check()
