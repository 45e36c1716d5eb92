"""The Compact stage's work: apply the planner's decision to the transcript.

Micro is planned here and applied by a :data:`MicroApplier` (the pure :func:`apply_micro`;
inside the runtime, the ContextBuilder actor runs it). The stage commits the applied entries'
projections with a compare-and-swap on the revision it planned on. An applier that fails
(the ContextBuilder crashed, was restarting, or refused) is not fatal: the plan is applied locally,
the same pure function, and ``compaction_failed`` says so. A stale revision (the transcript
changed meanwhile) drops the plan; the next reading plans again.

Full asks the summary model, then commits with a compare-and-swap on the transcript's
revision; a failed attempt (empty, unclosed, cut or tool-asking summary, model error) leaves
history untouched and is retried up to ``max_full_failures`` times, then is terminal at high
pressure (:class:`CompactRetriesExhausted`). The failure counter is this stage's own (never
shared with tool failures). Two successful full compactions in a row without new work (a user
prompt or a tool round) that leave the provider-reported usage at or above the full threshold
end the run (:class:`CompactBudgetUnrecovered`): compacting again could not help.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import attrs

from ..errors import ModelError
from ._compaction import (
    CompactBudgetUnrecovered,
    CompactionConfig,
    CompactRetriesExhausted,
    FullPlan,
    MicroPlan,
    apply_plan,
    decide,
)
from ._llm import ChatModel
from ._summary import (
    SummaryFailed,
    injected_messages,
    parse_summary,
    recently_read_paths,
    summary_request,
)
from ._tools import ToolError, inside_workspace
from ._transcript import Entry, StaleTranscript, Transcript, TranscriptError
from ._usage import ContextReading, TokenTotals, UsageTracker
from ._workspace import read_regular

__all__ = ["CompactStage", "MicroApplier", "apply_locally"]

#: Applies a micro or full plan to the entries it was planned on: ``(plan, view) -> applied
#: view``. Inside the runtime it is the ContextBuilder actor; here, by default, the agent itself.
MicroApplier = Callable[[MicroPlan | FullPlan, tuple[Entry, ...]], Awaitable[tuple[Entry, ...]]]


async def apply_locally(plan: MicroPlan | FullPlan, view: tuple[Entry, ...]) -> tuple[Entry, ...]:
    """The default applier: :func:`apply_plan` in the agent's own task."""
    return apply_plan(view, plan)


@attrs.define(kw_only=True)
class CompactStage:
    config: CompactionConfig
    transcript: Transcript
    usage: UsageTracker
    totals: TokenTotals
    summary_model: ChatModel
    workspace: Path
    emit: Callable[[str, str], None]
    applier: MicroApplier = apply_locally
    full_failures: int = 0
    #: Successful full compactions since the last new work.
    fulls_without_work: int = 0
    _acted_on: tuple[int, int] | None = None

    def note_work(self) -> None:
        """New input or a tool round: fresh material, so compaction may help again."""
        self.fulls_without_work = 0

    def reading(self) -> ContextReading | None:
        """The current reading, or None when it was already acted on (one attempt each)."""
        reading = self.usage.reading(self.transcript, self.config.context_window)
        if reading.generation == self._acted_on:
            return None
        self._acted_on = reading.generation
        return reading

    async def run(self, reading: ContextReading) -> str:
        """One compaction attempt on ``reading``; returns the action taken."""
        config = self.config
        over = reading.used >= config.full_threshold * config.context_window
        if over and reading.basis == "reported" and self.fulls_without_work >= 2:
            raise CompactBudgetUnrecovered(
                f"after {self.fulls_without_work} full compactions without new work the "
                f"provider still reports {reading.used} of {config.context_window} tokens"
            )
        decision = decide(self.transcript, reading, config, full_failures=self.full_failures)
        if decision.micro is not None and decision.action in ("micro", "micro_then_full"):
            if not await self._micro(decision.micro):
                return "skip"
            self.emit(
                "compacted",
                f"micro: {len(decision.micro.projections)} message(s), "
                f"~{decision.micro.estimated_tokens_saved} tokens (estimated); "
                f"context at {reading.used}/{reading.window} ({reading.basis})",
            )
        if decision.action in ("full", "micro_then_full"):
            await self._full(over)
        return decision.action

    async def _micro(self, plan: MicroPlan) -> bool:
        """Apply ``plan`` through the applier and commit it; False when it went stale."""
        view = tuple(self.transcript.entries)
        applied = await self._apply(plan, view)
        if len(applied) != len(view):
            raise TranscriptError(f"the applier returned {len(applied)} of {len(view)} entries")
        projections = {
            index: projection
            for index, entry in enumerate(applied)
            if (projection := entry.projection) is not None and projection != view[index].projection
        }
        try:
            self.transcript.apply_projections(projections, revision=plan.revision)
        except StaleTranscript as exc:
            self.emit("compaction_failed", f"micro: {exc}; planning again at the next reading")
            return False
        return True

    async def _full(self, over: bool) -> None:
        while True:
            try:
                await self._try_full()
            except (SummaryFailed, ModelError) as exc:
                self.full_failures += 1
                self.emit("compaction_failed", f"full #{self.full_failures}: {exc}")
                if self.full_failures < self.config.max_full_failures:
                    continue
                if over:
                    raise CompactRetriesExhausted(
                        f"full compaction failed {self.full_failures} times in a row "
                        f"(last: {exc}); the context is at or above "
                        f"{self.config.full_threshold:.0%} of {self.config.context_window} tokens"
                    ) from exc
                return
            self.full_failures = 0
            self.fulls_without_work += 1
            return

    async def _try_full(self) -> None:
        config = self.config
        revision = self.transcript.revision
        request = summary_request(self.transcript.model_view(), config)
        reply = await self.summary_model.complete(request, max_tokens=config.summary_max_tokens)
        self.totals.add(reply.usage)
        if reply.tool_calls or reply.interrupted:
            raise SummaryFailed("the summary reply was cut or asked for tools")
        summary = parse_summary(reply.content)
        paths = recently_read_paths(self.transcript.entries)
        injected = injected_messages(summary, paths, self._read, config)
        plan = FullPlan(revision=revision, injected=tuple(injected))
        applied = await self._apply(plan, tuple(self.transcript.entries))
        excluded = self.transcript.commit_view(applied, revision=revision)
        self.usage.reset()
        self.emit(
            "compacted",
            f"full: {excluded} message(s) excluded, summary of {len(summary)} chars, "
            f"{len(injected) - 1} file(s) re-injected",
        )

    async def _apply(
        self, plan: MicroPlan | FullPlan, view: tuple[Entry, ...]
    ) -> tuple[Entry, ...]:
        """``plan`` applied to ``view`` by the applier or, if it fails, here."""
        try:
            return await self.applier(plan, view)
        except Exception as exc:  # the applier may be an actor elsewhere: never fatal here
            kind = "micro" if isinstance(plan, MicroPlan) else "full"
            self.emit(
                "compaction_failed",
                f"{kind}: the applier failed ({type(exc).__name__}: {exc}); applied locally",
            )
            return apply_plan(view, plan)  # a bad plan raises here as it would have

    def _read(self, path: str) -> str | None:
        try:
            root = self.workspace.resolve()
            data, _ = read_regular(root, inside_workspace(self.workspace, path))
            return data.decode("utf-8")
        except (ToolError, OSError, UnicodeDecodeError):
            return None
