"""Fault injection: actors that crash at random, to prove that supervision absorbs it.

A :class:`FaultInjection` is made active for a block of trio code with
:func:`loopactors.testing.inject_faults`; every actor started inside that block (their tasks
inherit the context variable) is *armed* when it starts: with probability ``rate`` each
message it receives raises :class:`InjectedCrash` before its handler runs, exactly like a
handler that failed. Arming also counts starts per actor name, so restarts can be reported.

When no injection is active the kernel pays one context-variable read per actor start and
nothing per message.
"""

from __future__ import annotations

import collections
import contextvars
import random
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._actor import Actor

__all__ = ["FaultInjection", "InjectedCrash", "active_faults"]


class InjectedCrash(Exception):
    """Raised inside an actor by :func:`loopactors.testing.inject_crash` or
    :func:`loopactors.testing.inject_faults`."""


class FaultInjection:
    """Which actors crash, how often, and what happened so far.

    ``exclude`` names actors that are never armed (their starts are still counted).
    Supervisors are never armed: a supervisor that loses a child-exit message stops being
    a supervisor, and a crash of the root would only end the node.
    """

    def __init__(
        self, rate: float, *, seed: int | None = None, exclude: Collection[str] = ()
    ) -> None:
        if not 0 <= rate <= 1:
            raise ValueError(f"the crash rate must be between 0 and 1, got {rate!r}")
        self.rate = rate
        self.seed = seed
        self.exclude = frozenset(exclude)
        #: Off switch for every armed actor (e.g. while a test reads back the results).
        self.enabled = True
        self.injected = 0
        self.starts: collections.Counter[str] = collections.Counter()
        self._random = random.Random(seed)

    @property
    def restarts(self) -> int:
        """Starts of an actor name that had started before (each is a restart)."""
        return sum(count - 1 for count in self.starts.values())

    def arm(self, actor: Actor[Any], name: str) -> None:
        """Called by the kernel as ``actor`` starts (before ``on_start``)."""
        self.starts[name] += 1
        from ._supervisor import Supervisor  # noqa: PLC0415 - the kernel imports this module

        if self.rate == 0 or name in self.exclude or isinstance(actor, Supervisor):
            return
        actor.handle = self._crashing(actor.handle, name)  # type: ignore[method-assign,assignment]

    def _crashing(self, handle: Callable[[Any], Any], name: str) -> Callable[[Any], Any]:
        chance = self._random.random

        async def crashing_handle(message: Any) -> Any:
            if self.enabled and chance() < self.rate:
                self.injected += 1
                raise InjectedCrash(
                    f"fault injected into actor {name!r} on {type(message).__name__}"
                )
            return await handle(message)

        return crashing_handle


#: The injection in force for the actors started in this context (None: off).
active_faults: contextvars.ContextVar[FaultInjection | None] = contextvars.ContextVar(
    "loopactors_active_faults", default=None
)
