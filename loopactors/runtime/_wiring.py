"""How the runtime's actors reach each other: the names they are registered under, refs to
the named services, what a runner is given, and casts that tolerate absence."""

from __future__ import annotations

import contextlib
import weakref
from typing import TYPE_CHECKING, Any

import attrs

from ..actors import NamedRef, Node
from ..errors import ActorError, MailboxFull

if TYPE_CHECKING:
    from ._events import EventBus

__all__ = [
    "BREAKER",
    "CONTEXT_BUILDER",
    "COORDINATOR",
    "DISPATCHER",
    "NOTIFIER",
    "RUNNER_PREFIX",
    "STORE",
    "TIMERS",
    "RunnerDeps",
    "Services",
    "deliver",
    "runner_name",
    "services_of",
]

# The names the runtime's service actors are registered under on their node.
STORE = "store"
BREAKER = "breaker"
CONTEXT_BUILDER = "context_builder"
DISPATCHER = "dispatcher"
TIMERS = "timers"
NOTIFIER = "notifier"
COORDINATOR = "coordinator"

RUNNER_PREFIX = "loop:"


def runner_name(loop_id: str) -> str:
    """The name a loop's runner is registered under on its node."""
    return RUNNER_PREFIX + loop_id


async def deliver(node: Node, name: str, message: Any) -> None:
    """Cast ``message`` to the actor registered as ``name``, waiting only if its mailbox is
    full. Nobody there means nobody needs it: a loop that ended, or an actor that is
    restarting and recovers from the store."""
    ref = node.whereis(name)
    if ref is None:
        return
    try:
        ref.cast_nowait(message)
    except MailboxFull:
        with contextlib.suppress(ActorError):
            await ref.cast(message)
    except ActorError:
        return


class Services:
    """Refs to the runtime's named actors on one node (they follow restarts)."""

    __slots__ = ("breaker", "context_builder", "coordinator", "dispatcher", "store", "timers")

    def __init__(self, node: Node) -> None:
        self.store: NamedRef[Any] = node.ref(STORE)
        self.breaker: NamedRef[Any] = node.ref(BREAKER)
        self.context_builder: NamedRef[Any] = node.ref(CONTEXT_BUILDER)
        self.dispatcher: NamedRef[Any] = node.ref(DISPATCHER)
        self.timers: NamedRef[Any] = node.ref(TIMERS)
        self.coordinator: NamedRef[Any] = node.ref(COORDINATOR)


_services: weakref.WeakKeyDictionary[Node, Services] = weakref.WeakKeyDictionary()


def services_of(node: Node) -> Services:
    """One shared :class:`Services` per node (a memo, not a registry: names stay per node)."""
    found = _services.get(node)
    if found is None:
        found = _services[node] = Services(node)
    return found


@attrs.frozen
class RunnerDeps:
    """What every runner needs besides the services: the event bus and a few settings."""

    bus: EventBus
    kill_grace: float
    call_timeout: float = 60.0
    #: Rounds run on remote workers: a worker spec's local resources are not checked here.
    remote_workers: bool = False
    #: Seconds between two looks whether a waiting loop's worker can be built now.
    worker_retry: float = 30.0
    #: The store is shared by several nodes (PostgreSQL): a live loop this node does not
    #: run is another node's.
    shared_store: bool = False
