"""The ledger views: pruning, the summary and the context block (docs/ledger.md)."""

from __future__ import annotations

import msgspec
from msgspec import UNSET

from ._breaker import check_circuit_breaker, total_tokens
from ._grouping import group_signatures
from ._js import format_number, js_string, trim, truthy_number
from ._model import (
    Attempt,
    AttemptSummary,
    BreakerConfig,
    ErrorGroup,
    Ledger,
    PruneConfig,
    assert_similarity_threshold,
    validate_prune_config,
)
from ._rules import SIMILARITY_THRESHOLD
from ._text import calculate_similarity, error_signature, prune_stack_trace

__all__ = ["build_context_injection", "format_summary", "prune_ledger", "summarize_attempts"]

_DEFAULT_BREAKER = BreakerConfig()
_DEFAULT_PRUNE = PruneConfig()


def _error_text(attempt: Attempt) -> str:
    return attempt.error if isinstance(attempt.error, str) else ""


def prune_ledger(ledger: Ledger, config: PruneConfig = _DEFAULT_PRUNE) -> Ledger:
    """The last ``window`` attempts, traces cut, similar consecutive failures collapsed."""
    validate_prune_config(config)
    window = int(config.window)
    recent = ledger.attempts[-window:] if window > 0 else ()
    out: list[Attempt] = []
    for attempt in recent:
        copy = attempt
        if isinstance(attempt.error, str):
            # The reference crashes on ``error: null`` here; null is kept as it is instead.
            copy = msgspec.structs.replace(
                attempt, error=prune_stack_trace(attempt.error, config.max_trace_lines)
            )
        prev = out[-1] if out else None
        if (
            prev is not None
            and prev.outcome == "failure"
            and copy.outcome == "failure"
            and calculate_similarity(
                error_signature(_error_text(prev)), error_signature(_error_text(copy))
            )
            >= config.similarity_threshold
        ):
            out[-1] = collapse_into(prev, copy)
        else:
            out.append(copy)
    return Ledger(goal=ledger.goal, started_at=ledger.started_at, attempts=tuple(out))


def collapse_into(head: Attempt, later: Attempt) -> Attempt:
    """``head`` with ``later`` collapsed into it by the pruner: only the count and the
    iteration move; the group head keeps its own error, action and tokens, and later
    entries are compared with the head."""
    repeated = head.repeated
    start = 1 if repeated is None or repeated is UNSET else repeated
    return msgspec.structs.replace(head, repeated=start + 1, iteration=later.iteration)


def summarize_attempts(
    ledger: Ledger, similarity_threshold: float = SIMILARITY_THRESHOLD
) -> AttemptSummary:
    """Counts, tokens, grouped errors and the actions tried (docs/ledger.md, "Summary")."""
    assert_similarity_threshold(similarity_threshold)
    successes = noops = failures = 0
    actions: dict[str | None, None] = {}
    signatures: list[str] = []
    samples: list[str] = []
    memo: dict[str, str] = {}
    for attempt in ledger.attempts:
        action = attempt.action
        actions.setdefault(None if action is UNSET else action)
        if attempt.outcome == "success":
            successes += 1
        elif attempt.outcome == "noop":
            noops += 1
        else:
            failures += 1  # any other outcome, missing included, counts as a failure
            error = attempt.error
            if isinstance(error, str) and error:
                sig = memo.get(error)
                if sig is None:
                    sig = memo[error] = error_signature(error)
                signatures.append(sig)
                # The literal first line, even if blank (the signature skips blank lines).
                samples.append(trim(error.split("\n", 1)[0]))

    counts: list[int] = []
    heads: list[int] = []
    for position, group in enumerate(group_signatures(signatures, similarity_threshold)):
        if group == len(counts):
            counts.append(0)
            heads.append(position)
        counts[group] += 1
    groups = [
        ErrorGroup(signature=signatures[head], count=count, sample=samples[head])
        for head, count in zip(heads, counts, strict=True)
    ]
    groups.sort(key=lambda g: -g.count)  # stable: ties keep creation order
    return AttemptSummary(
        total_attempts=len(ledger.attempts),
        successes=successes,
        failures=failures,
        noops=noops,
        tokens_used=total_tokens(ledger),
        distinct_errors=tuple(groups),
        actions_tried=tuple(actions),
    )


def _action_text(action: str | None) -> str:
    # A missing action prints as JavaScript's template does.
    return "undefined" if action is None else action


def format_summary(summary: AttemptSummary) -> str:
    """The text of ``--summary`` and the first half of ``--status`` (no trailing newline)."""
    lines = [
        f"Attempts: {summary.total_attempts}  ({summary.successes} ok \u00b7 "
        f"{summary.failures} failed \u00b7 {summary.noops} no-op)"
    ]
    if truthy_number(summary.tokens_used):  # J7: 0 and NaN hide the line
        lines.append(f"Tokens used: {format_number(summary.tokens_used)}")
    if summary.distinct_errors:
        lines.append("Distinct errors (most frequent first):")
        lines += [f"  ({g.count}\u00d7) {g.sample}" for g in summary.distinct_errors]
    if summary.actions_tried:
        lines.append("Actions tried:")
        lines += [f"  - {_action_text(a)}" for a in summary.actions_tried]
    return "\n".join(lines)


def build_context_injection(
    ledger: Ledger,
    breaker: BreakerConfig = _DEFAULT_BREAKER,
    prune: PruneConfig = _DEFAULT_PRUNE,
) -> str:
    """The markdown block to prepend to the next prompt (docs/ledger.md, "Context injection"),
    without a final newline."""
    summary = summarize_attempts(ledger, breaker.similarity_threshold)
    decision = check_circuit_breaker(ledger, breaker)
    pruned = prune_ledger(ledger, prune)

    progress = (
        f"**Progress:** iteration {summary.total_attempts} \u00b7 {summary.successes} ok "
        f"\u00b7 {summary.failures} failed"
    )
    if truthy_number(summary.tokens_used):
        progress += f" \u00b7 {format_number(summary.tokens_used)} tokens"
    lines = ["## Loop Context (managed)", "", f"**Goal:** {ledger.goal}", progress, ""]
    if summary.actions_tried:
        lines.append("**Already tried (do NOT repeat):**")
        lines += [f"- {_action_text(a)}" for a in summary.actions_tried]
        lines.append("")
    if summary.distinct_errors:
        lines.append("**Failure patterns:**")
        lines += [f"- ({g.count}\u00d7) {g.sample}" for g in summary.distinct_errors]
        lines.append("")
    last_fail = next((a for a in reversed(pruned.attempts) if a.outcome == "failure"), None)
    if last_fail is not None and isinstance(last_fail.error, str) and last_fail.error:
        lines += ["**Most recent error (pruned):**", "```", last_fail.error, "```", ""]
    if decision.escalate:
        lines.append(
            f"> STOP \u2014 circuit breaker tripped ({decision.trigger}). {decision.reason}"
        )
    else:
        lines.append(
            f"> Circuit breaker: OK ({decision.iterations}/"
            f"{js_string(breaker.max_iterations)} iterations used)."
        )
    return "\n".join(lines)
