"""The Breaker actor: checks a loop before each round (the runtime's own rules and the run
ledger's circuit breaker), a thin shell over :mod:`loopactors.loops` and :mod:`loopactors.ledger`.
"""

from __future__ import annotations

from typing import Any

from ..actors import Actor, ErrorReply
from ..ledger import (
    Attempt,
    BreakerConfig,
    Ledger,
    check_circuit_breaker,
    validate_breaker_config,
)
from ..loops import LoopState, RoundRecord, Verdict, build_prompt, check_before_round
from ._ledger import attempt_of, breaker_config
from ._messages import (
    BuildPrompt,
    CheckRound,
    Escalate,
    ForgetLedger,
    GetRounds,
    PromptReady,
    RecordAttempt,
)
from ._wiring import CONTEXT_BUILDER, STORE, deliver, runner_name

__all__ = ["Breaker"]


class Breaker(Actor[Any]):
    """Checks a loop before each round: escalate (told to the loop's runner), or go on (the
    round's prompt to the runner, built here from the state alone, or the loop passed to the
    ContextBuilder when its prompt reads files or carries the ledger's block). A pipeline of
    casts, so a busy runtime handles these in batches and a runner is woken once, with the
    outcome.

    It keeps each live loop's run ledger (one attempt per finished round, sent by the
    runner) and applies loop-context's breaker to it after the runtime's own checks. After a
    restart of this actor a ledger is rebuilt from the store when it is next needed.
    """

    mailbox_size = 16_384

    def __init__(self) -> None:
        self._attempts: dict[str, list[Attempt]] = {}
        self._configs: dict[str, BreakerConfig] = {}  # per live loop: its spec is fixed

    async def handle(self, message: Any) -> Any:
        kind = type(message)
        if kind is RecordAttempt:
            attempts = self._attempts.get(message.loop_id)
            if attempts is not None:  # not cached: it is rebuilt from the store when needed
                attempts.append(message.attempt)
            return None
        if kind is ForgetLedger:
            self._attempts.pop(message.loop_id, None)
            self._configs.pop(message.loop_id, None)
            return None
        if kind is not CheckRound:
            return ErrorReply(TypeError(f"the breaker does not accept {kind.__name__}"))
        state = message.state
        ledger = await self._ledger(state)
        verdict = check_before_round(state, message.now)
        if verdict is None:
            config = self._configs.get(state.loop_id)
            if config is None:  # checked once per loop: its spec is fixed
                config = breaker_config(state.spec)
                validate_breaker_config(config)
                self._configs[state.loop_id] = config
            decision = check_circuit_breaker(ledger, config, validated=True)
            if decision.escalate:
                verdict = Verdict(trigger=decision.trigger, reason=decision.reason)
        if verdict is not None:
            escalate = Escalate(state.round, message.epoch, verdict)
            await deliver(self.node, runner_name(state.loop_id), escalate)
        elif (
            state.spec.inject_ledger
            or state.spec.plan is not None
            or state.spec.prompt_file is not None
        ):
            injected = ledger if state.spec.inject_ledger else None
            await deliver(self.node, CONTEXT_BUILDER, BuildPrompt(state, message.epoch, injected))
        else:
            # A prompt from the state alone (pure: no file read, no ledger block) is built
            # here and goes straight to the runner: a hop through the ContextBuilder would
            # only cost a wake-up a round (it is for what reads files or waits).
            ready = PromptReady(state.round, message.epoch, build_prompt(state))
            await deliver(self.node, runner_name(state.loop_id), ready)
        return None

    async def _ledger(self, state: LoopState) -> Ledger:
        attempts = self._attempts.get(state.loop_id)
        if attempts is None:
            records: list[RoundRecord] = []
            if state.round > 1:  # a loop this actor has not seen: its rounds are stored
                records = await self.node.ref(STORE).call(GetRounds(state.loop_id))
            attempts = [attempt_of(r, state.spec.task) for r in records if r.status != "running"]
            self._attempts[state.loop_id] = attempts
        return Ledger(goal=state.spec.task, attempts=tuple(attempts))
