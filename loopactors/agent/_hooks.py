"""Hooks (middleware) around the agent loop's stages, with one error policy per hook.

Subclass :class:`AgentHooks` and override what you need; every method is a no-op by default.
Hooks see copies or immutable values (messages and calls are frozen structs): they cannot
rewrite history behind the transcript's back. The only hooks that change the run's course do
it through their return value (``before_tools_batch`` approves or denies, ``after_agent``
may rewrite the final answer).

Error policy (an exception raised by a hook):

============================  ====================================================
hook                          when it raises
============================  ====================================================
before_agent                  recorded as a ``hook_failed`` event; the run goes on
before_compact, after_compact recorded; the run goes on (after_compact always runs)
before_model, after_model     the run fails with :class:`HookError`
on_error                      recorded; the original error is what the run reports
before_tools_batch            fails closed: no call of the batch runs, the run fails
after_tool                    deferred: the tool round is committed first, then the
                              run fails with the first such error
after_tools_batch             after the commit, the run fails
after_agent                   the run fails
============================  ====================================================
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from ..errors import AgentError
from ._transcript import Message, ToolCall
from ._usage import ContextReading
from ._wire import ChatReply

__all__ = ["AgentHooks", "HookError", "ToolDecision", "approve", "deny"]


class HookError(AgentError):
    """A hook whose policy is "the run fails" raised; the hook's error is the cause."""

    def __init__(self, hook: str, error: BaseException) -> None:
        super().__init__(f"hook {hook} failed: {type(error).__name__}: {error}")
        self.hook = hook


@attrs.frozen
class ToolDecision:
    allowed: bool
    reason: str = ""


def approve() -> ToolDecision:
    return ToolDecision(True)


def deny(reason: str) -> ToolDecision:
    """The call is not run; the model reads ``reason`` as the call's error result."""
    return ToolDecision(False, reason)


class AgentHooks:
    """No-op hooks; see the module docstring for what each may do and its error policy."""

    async def before_agent(self, messages: Sequence[Message]) -> None:
        """Once per run, after the first Receive (the user's input is in ``messages``)."""

    async def before_compact(self, reading: ContextReading) -> None:
        """Before a compaction is decided, with the reading it is decided on."""

    async def after_compact(self, action: str) -> None:
        """After the Compact stage (``skip``, ``micro``, ``full``, ``micro_then_full``,
        or ``failed``); always runs."""

    async def before_model(self, messages: Sequence[Message]) -> None:
        """Before each model call, with the exact view sent."""

    async def after_model(self, reply: ChatReply) -> None:
        """After each model call."""

    async def on_error(self, error: BaseException) -> None:
        """The run is about to fail with ``error``."""

    async def before_tools_batch(self, calls: Sequence[ToolCall]) -> Sequence[ToolDecision] | None:
        """Approve or deny the calls about to run (one decision per call, in order);
        ``None`` approves them all."""
        return None

    async def after_tool(self, call: ToolCall, result: Message) -> None:
        """After each call (run, denied or failed), before the round is committed."""

    async def after_tools_batch(
        self, calls: Sequence[ToolCall], results: Sequence[Message]
    ) -> None:
        """After the round is committed."""

    async def after_agent(self, answer: str) -> str | None:
        """After each final answer (not once per run); return text to replace it."""
        return None
