"""The supervisor's vocabulary: child specs, restart types and strategies, backoff, the
messages a supervisor accepts, and :class:`SupervisorRef` to send them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import attrs
import msgspec

from .._util import backoff_delay
from ._ref import ActorRef

if TYPE_CHECKING:
    from ._actor import Actor

__all__ = [
    "Backoff",
    "ChildInfo",
    "ChildSpec",
    "GetStatistics",
    "Restart",
    "StartChild",
    "StartChildren",
    "Strategy",
    "SupervisorRef",
    "SupervisorStatistics",
    "TerminateChild",
    "WhichChildren",
]

Restart = Literal["permanent", "transient", "temporary"]
Strategy = Literal["one_for_one", "one_for_all", "rest_for_one"]

RESTARTS = ("permanent", "transient", "temporary")
STRATEGIES = ("one_for_one", "one_for_all", "rest_for_one")

#: Grace period for an actor child whose spec does not set ``shutdown``.
DEFAULT_SHUTDOWN = 5.0


def _check_choice(allowed: tuple[str, ...]) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    def check(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value not in allowed:
            raise ValueError(f"{attribute.name} must be one of {', '.join(allowed)}; got {value!r}")

    return check


def _check_shutdown(_: Any, __: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and not (value >= 0):
        raise ValueError(
            "shutdown must be grace seconds >= 0 (0 = cancel at once, math.inf = wait as long "
            f"as it takes) or None for the default; got {value!r}"
        )


@attrs.frozen
class ChildSpec:
    """How a supervisor starts, restarts and stops one child.

    ``factory`` makes a fresh actor for every (re)start. ``restart``: ``permanent`` is
    always restarted, ``transient`` only after a crash, ``temporary`` never. ``shutdown`` is
    the grace period of a stop, in seconds, before the child's task is cancelled: ``0``
    cancels at once, ``math.inf`` waits for as long as it takes, and ``None`` means 5 s for
    an actor and ``math.inf`` for a supervisor. ``name`` registers the child on the node.
    """

    id: str
    factory: Callable[[], Actor[Any]]
    restart: Restart = attrs.field(default="permanent", validator=_check_choice(RESTARTS))
    shutdown: float | None = attrs.field(default=None, validator=_check_shutdown)
    name: str | None = None
    mailbox_size: float | None = None


@attrs.frozen
class Backoff:
    """Delay before a restart: ``initial * factor ** (n - 1)`` capped at ``maximum``.

    ``n`` counts the supervisor's restarts inside the current intensity window, so a child
    that crashes in a tight loop is restarted more and more slowly until the window clears.
    """

    initial: float = 0.1
    factor: float = 2.0
    maximum: float = 10.0

    def delay(self, attempt: int) -> float:
        return backoff_delay(attempt, first=self.initial, cap=self.maximum, factor=self.factor)


@attrs.frozen
class ChildInfo:
    """One child as :meth:`SupervisorRef.which_children` reports it."""

    id: str
    name: str | None
    restart: Restart
    running: bool
    ref: ActorRef[Any] | None
    is_supervisor: bool
    #: Times the supervisor restarted it (its incarnations after the first).
    restarts: int = 0


@attrs.frozen
class SupervisorStatistics:
    children: int
    running: int
    restarts: int


class StartChild(msgspec.Struct, frozen=True):
    """Start a child at run time; replies with its :class:`ActorRef`."""

    spec: ChildSpec


class StartChildren(msgspec.Struct, frozen=True):
    """Start several children at run time with one request, side by side; replies with a
    list holding, for each spec in order, its :class:`ActorRef` or the error that refused
    it."""

    specs: tuple[ChildSpec, ...]


class TerminateChild(msgspec.Struct, frozen=True):
    """Stop a child (within its shutdown grace) and forget its spec."""

    child_id: str


class WhichChildren(msgspec.Struct, frozen=True):
    """Reply: a list of :class:`ChildInfo`, in start order."""


class GetStatistics(msgspec.Struct, frozen=True):
    """Reply: :class:`SupervisorStatistics`."""


SupervisorMessage = StartChild | StartChildren | TerminateChild | WhichChildren | GetStatistics


class SupervisorRef:
    """Typed helpers over a supervisor's :class:`ActorRef`."""

    __slots__ = ("ref",)

    def __init__(self, ref: ActorRef[Any]) -> None:
        self.ref = ref

    async def start_child(self, spec: ChildSpec, timeout: float | None = None) -> ActorRef[Any]:
        """Start a child now; returns once its ``on_start`` returned.

        Raises :class:`ChildStartError` (with the cause) if it failed to start.
        """
        ref: ActorRef[Any] = await self.ref.call(StartChild(spec), timeout)
        return ref

    async def start_children(
        self, specs: Sequence[ChildSpec], timeout: float | None = None
    ) -> list[ActorRef[Any] | BaseException]:
        """Start several children with one request; returns once each one's ``on_start``
        returned or failed. For each spec, in order, its ref or the error that refused it
        (nothing is raised for those). Their ``on_start`` hooks run side by side, so a batch
        costs about what one start costs rather than one start each."""
        started: list[ActorRef[Any] | BaseException] = await self.ref.call(
            StartChildren(tuple(specs)), timeout
        )
        return started

    async def terminate_child(self, child_id: str, timeout: float | None = None) -> None:
        """Stop a child within its shutdown grace and forget it."""
        await self.ref.call(TerminateChild(child_id), timeout)

    async def which_children(self) -> list[ChildInfo]:
        children: list[ChildInfo] = await self.ref.call(WhichChildren())
        return children

    async def statistics(self) -> SupervisorStatistics:
        stats: SupervisorStatistics = await self.ref.call(GetStatistics())
        return stats
