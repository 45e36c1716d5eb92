"""The ContextBuilder actor: what the model sees. It builds each round's prompt (and puts the
run ledger's block in front when the loop asks for it) and applies agents' compaction plans.
A thin shell over :func:`loopactors.loops.build_prompt` and :func:`loopactors.agent.apply_plan`.
"""

from __future__ import annotations

from typing import Any

import msgspec
import trio

from ..actors import Actor, ErrorReply
from ..agent import apply_plan
from ..ledger import build_context_injection
from ..loops import build_prompt
from ._ledger import breaker_config
from ._messages import ApplyCompaction, BuildPrompt, GetContextBuilderStatistics, PromptReady
from ._plans import round_prompt
from ._wiring import deliver, runner_name

__all__ = ["LEDGER_SECONDS", "ContextBuilder"]

#: The longest a round's prompt waits for its ledger block (docs/ledger.md); past it the
#: round goes without one (a note says so) and the work is left to finish in its thread.
LEDGER_SECONDS = 10.0


class ContextBuilder(Actor[Any]):
    """Builds each round's prompt (inherit seed or fresh) and hands it to the loop's runner,
    and applies agents' compaction plans, micro and full (:class:`ApplyCompaction`, the pure
    :func:`~loopactors.agent.apply_plan`; the agent commits the result)."""

    mailbox_size = 16_384

    def __init__(self) -> None:
        self.prompts_built = 0
        self.compactions_applied = 0
        # One ledger block computed at a time: an abandoned one holds it until it ends, so
        # a slow ledger never piles up threads.
        self._ledger_work = trio.CapacityLimiter(1)

    async def handle(self, message: Any) -> Any:
        kind = type(message)
        if kind is ApplyCompaction:
            try:
                applied = apply_plan(message.view, message.plan)
            except Exception as exc:
                # Refused, never a crash: a crash here restarts (rest_for_one) the dispatcher
                # and every round in flight. The agent then applies the plan itself.
                return ErrorReply(exc)
            self.compactions_applied += 1
            return applied
        if kind is GetContextBuilderStatistics:
            return {
                "prompts_built": self.prompts_built,
                "compactions_applied": self.compactions_applied,
            }
        if kind is not BuildPrompt:
            return ErrorReply(TypeError(f"the context builder does not accept {kind.__name__}"))
        self.prompts_built += 1
        state = message.state
        spec = state.spec
        if spec.plan is None and spec.prompt_file is None:
            prompt = build_prompt(state)
        else:
            prompt = await round_prompt(state)  # reads the files in a worker thread
        if message.ledger is not None and message.ledger.attempts:
            # loop-context's block goes first: the model reads what was tried before the task.
            block = await self._ledger_block(message.ledger, state)
            prompt = msgspec.structs.replace(prompt, text=f"{block}\n\n{prompt.text}")
        ready = PromptReady(state.round, message.epoch, prompt)
        await deliver(self.node, runner_name(state.loop_id), ready)
        return None

    async def _ledger_block(self, ledger: Any, state: Any) -> str:
        """The ledger's block, built in a worker thread (never on the event loop), within
        ``LEDGER_SECONDS``; else a one-line note in its place."""
        config = breaker_config(state.spec)
        with trio.move_on_after(LEDGER_SECONDS):
            return await trio.to_thread.run_sync(
                build_context_injection,
                ledger,
                config,
                limiter=self._ledger_work,
                abandon_on_cancel=True,
            )
        return (
            "## Loop Context (managed)\n\n"
            f"(the run ledger's summary of {len(ledger.attempts)} attempts took over "
            f"{LEDGER_SECONDS:g}s to build and is left out of this round)"
        )
