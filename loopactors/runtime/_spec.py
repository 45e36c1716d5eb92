"""Building and checking a LoopSpec from |loop| text or a spec. Pure, no trio."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import msgspec

from ..errors import LoopSyntaxError
from ..loops import MAX_ROUNDS, ROUNDS_CEILING, LoopSpec, ParsedLoop, check_notify, parse_loop
from ..workers import check_until, python_spec, worker_kind
from ._config import RuntimeConfig
from ._plan_files import read_plan_now, read_task_now

__all__ = ["build_spec", "rounds_over_cap", "validate_spec"]


def rounds_over_cap(rounds: int, max_rounds: int) -> str:
    return (
        f"{rounds} rounds is above this node's cap of {max_rounds} rounds (max_rounds): ask "
        f"for at most {max_rounds}, or raise max_rounds in loopactors.toml (up to "
        f"{ROUNDS_CEILING})"
    )


def build_spec(
    config: RuntimeConfig,
    loop: str | LoopSpec,
    *,
    worker: str | Callable[..., Any] | None = None,
    **options: Any,
) -> LoopSpec:
    """A checked :class:`LoopSpec` from ``|loop...|`` text or a spec.

    Precedence, lowest first: the runtime's defaults, what the text (or the fields set on
    the given spec) says, then ``worker`` and ``options``. Every value is type-checked, so a
    wrong type is refused here, never met later by an actor.
    """
    known = set(LoopSpec.__struct_fields__)
    unknown = sorted(set(options) - known)
    if unknown:
        raise LoopSyntaxError(
            f"unknown loop option(s) {', '.join(unknown)}; accepted: {', '.join(sorted(known))}"
        )
    fields = _defaults(config)
    if isinstance(loop, LoopSpec):
        blank = LoopSpec(task=loop.task)
        fields.update(
            {
                name: getattr(loop, name)
                for name in loop.__struct_fields__
                if getattr(loop, name) != getattr(blank, name) or name == "task"
            }
        )
    elif isinstance(loop, str):
        parsed = _parse(loop, options.get("prompt_file"))
        fields.update(
            task=parsed.task,
            rounds=parsed.rounds,
            mode=parsed.mode,
            objective=parsed.objective,
        )
        if parsed.stale_rounds_limit is not None:
            fields["stale_rounds_limit"] = parsed.stale_rounds_limit
        if parsed.until is not None:
            fields["until"] = parsed.until
    else:
        raise LoopSyntaxError(f"a loop is |loop...| text or a LoopSpec, not {type(loop).__name__}")
    if callable(worker):
        worker = python_spec(worker)
    if worker is not None:
        fields["worker"] = worker
    fields.update({k: v for k, v in options.items() if v is not None})
    for name in ("plan", "prompt_file"):  # where the loop was started from, for good
        if isinstance(fields.get(name), str | Path):
            fields[name] = str(Path(fields[name]).expanduser().absolute())
    try:
        spec = msgspec.convert(fields, LoopSpec)
    except msgspec.ValidationError as exc:
        raise LoopSyntaxError(f"invalid loop option: {exc}") from None
    if options.get("until_timeout") is not None and spec.until is None:  # a timeout of nothing
        raise LoopSyntaxError(
            "until_timeout is given but the loop has no until check to time: add --until CMD "
            '(until="CMD"), or set until in loopactors.toml'
        )
    if options.get("notify_on") and not spec.notify:  # events for no one: not ignored
        raise LoopSyntaxError(
            f"notify_on names {', '.join(spec.notify_on)} but the loop has no notify URL to "
            "send them to: add --notify URL (notify=), or set [notify] urls in loopactors.toml"
        )
    spec = validate_spec(spec, max_rounds=config.max_rounds)
    if options.get("max_cost_usd") is not None:  # the loop's own, not the node's default
        _check_cost_reported(spec.worker)
    return spec


def _defaults(config: RuntimeConfig) -> dict[str, Any]:
    """The runtime's loop defaults, by ``LoopSpec`` field: the ``[breaker]`` table's keys
    are the spec's own, so it is taken whole."""
    return {
        "worker": config.worker,
        "round_timeout": config.round_timeout,
        "inter_round_delay": config.inter_round_delay,
        "seed_cap": config.seed_cap,
        **attrs.asdict(config.breaker),
        "until": config.until,
        "until_timeout": config.until_timeout,
        "notify": config.notify.urls,
        "notify_on": config.notify.events,
        "notify_check_failures": config.notify.check_failures,
    }


def _check_cost_reported(worker: str) -> None:
    """A dollar budget asked for a loop whose worker never reports a cost would never be
    reached: refused, naming the budgets that hold for it (docs/loops.md, Dollar budget)."""
    try:
        kind = worker_kind(worker)
    except ValueError:
        return  # a malformed spec: said when the worker is checked
    if kind is not None and not kind.reports_cost:
        raise LoopSyntaxError(
            f"max_cost_usd cannot be kept for a {kind.name} loop: {kind.name} rounds report "
            "no cost (their cost_usd is always 0); cap its tokens (--token-budget N, "
            "max_tokens) or its time (max_seconds) instead, or use a worker that reports "
            "cost (claude, aider, a python function)"
        )


def _parse(text: str, prompt_file: Any) -> ParsedLoop:
    """``|loop...|`` text; with a prompt file the text may be the activation alone (the
    task is then the file's content, as every round reads it)."""
    try:
        return parse_loop(text)
    except LoopSyntaxError as exc:
        if not isinstance(prompt_file, str | Path) or "the task is empty" not in str(exc):
            raise
    return parse_loop(f"{text}\n{read_task_now(str(prompt_file))}")


_WORKSPACE = re.compile(r"[:,]workspace=([^,]+)")


def _workspace_of(worker: str) -> str | None:
    """The ``workspace=`` of a worker spec (where its rounds, and the check, run)."""
    found = _WORKSPACE.search(worker)
    return found.group(1) if found else None


def validate_spec(spec: LoopSpec, *, max_rounds: int = MAX_ROUNDS) -> LoopSpec:
    """Check a spec's values as strictly as the parser checks text. Rounds above
    ``max_rounds`` (the node's cap) are refused, never clamped: a loop runs the rounds it
    was asked for or does not start."""
    problems = []
    if not spec.task.strip():
        problems.append("the task is empty: say what each round should do")
    if spec.rounds < 1:
        problems.append(f"rounds must be >= 1 (at most {max_rounds}), got {spec.rounds}")
    elif spec.rounds > max_rounds:
        problems.append(rounds_over_cap(spec.rounds, max_rounds))
    for name in ("round_timeout", "max_seconds", "until_timeout"):
        value = getattr(spec, name)
        if value is not None and not (value > 0 and math.isfinite(value)):
            problems.append(f"{name} must be a finite number > 0 seconds, got {value}")
    if not (spec.inter_round_delay >= 0 and math.isfinite(spec.inter_round_delay)):
        problems.append(
            f"inter_round_delay must be a finite number >= 0 seconds, got {spec.inter_round_delay}"
        )
    for name in (
        "max_consecutive_failures",
        "stale_rounds_limit",
        "max_tokens",
        "stagnation_threshold",
        "frustration_threshold",
        "max_unverified_claims",
    ):
        value = getattr(spec, name)
        if value is not None and value < 1:
            problems.append(f"{name} must be >= 1, got {value}")
    if spec.max_cost_usd is not None and not (
        spec.max_cost_usd > 0 and math.isfinite(spec.max_cost_usd)
    ):
        problems.append(
            f"max_cost_usd must be a finite number > 0 dollars, got {spec.max_cost_usd}"
        )
    if spec.until is not None:
        # A check that cannot start is refused now: never a check failing every round.
        try:
            check_until(spec.until, _workspace_of(spec.worker))
        except ValueError as exc:
            problems.append(str(exc))
    if not 0 < spec.similarity_threshold <= 1:
        problems.append(
            f"similarity_threshold must be > 0 and <= 1, got {spec.similarity_threshold}"
        )
    if spec.seed_cap < 0:
        problems.append(f"seed_cap must be >= 0, got {spec.seed_cap}")
    problems += check_notify(spec.notify, spec.notify_on, spec.notify_check_failures)
    # A plan or prompt file that cannot be read is refused now, not met by the first round.
    for name, read in (("plan", read_plan_now), ("prompt_file", read_task_now)):
        path = getattr(spec, name)
        if path is not None:
            try:
                read(path)
            except LoopSyntaxError as exc:
                problems.append(str(exc))
    if spec.notify and not problems:
        from ._notifier import check_notify_urls  # noqa: PLC0415 - apprise only when needed

        problems += check_notify_urls(spec.notify)
    if problems:
        raise LoopSyntaxError("; ".join(problems))
    return spec
