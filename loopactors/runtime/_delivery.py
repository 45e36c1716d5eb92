"""How the runtime's actors find each other: runner names, the named services, what a
runner is given, and casts that tolerate absence."""

from __future__ import annotations

import contextlib
import weakref
from typing import TYPE_CHECKING, Any

import attrs

from ..actors import NamedRef, Node
from ..errors import ActorError, MailboxFull

if TYPE_CHECKING:
    from ._events import EventBus

__all__ = ["RUNNER_PREFIX", "RunnerDeps", "Services", "deliver", "runner_name", "services_of"]

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

    __slots__ = ("breaker", "compactor", "coordinator", "dispatcher", "store", "timers")

    def __init__(self, node: Node) -> None:
        self.store: NamedRef[Any] = node.ref("store")
        self.breaker: NamedRef[Any] = node.ref("breaker")
        self.compactor: NamedRef[Any] = node.ref("compactor")
        self.dispatcher: NamedRef[Any] = node.ref("dispatcher")
        self.timers: NamedRef[Any] = node.ref("timers")
        self.coordinator: NamedRef[Any] = node.ref("coordinator")


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
