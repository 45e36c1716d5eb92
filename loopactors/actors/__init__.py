"""The actor kernel: supervised actors on trio structure (docs/actors.md).

General layout: ``_actor`` (actors, mailboxes, refs), ``_registry`` (node-scoped names),
``_supervisor`` (restart strategies), ``_node`` (the root of a tree, embedded or standalone).
All of them are private; this module is the public surface. The kernel knows nothing of loops.
"""

from .._util import fix_public_module
from ._actor import Actor as Actor
from ._childspec import Backoff as Backoff
from ._childspec import ChildInfo as ChildInfo
from ._childspec import ChildSpec as ChildSpec
from ._childspec import Restart as Restart
from ._childspec import Strategy as Strategy
from ._childspec import SupervisorRef as SupervisorRef
from ._childspec import SupervisorStatistics as SupervisorStatistics
from ._node import Node as Node
from ._node import open_node as open_node
from ._node import run_node as run_node
from ._ref import ActorRef as ActorRef
from ._ref import ActorStatistics as ActorStatistics
from ._ref import ErrorReply as ErrorReply
from ._ref import PendingReply as PendingReply
from ._registry import NamedRef as NamedRef
from ._supervisor import Supervisor as Supervisor

__all__ = [
    "Actor",
    "ActorRef",
    "ActorStatistics",
    "Backoff",
    "ChildInfo",
    "ChildSpec",
    "ErrorReply",
    "NamedRef",
    "Node",
    "PendingReply",
    "Restart",
    "Strategy",
    "Supervisor",
    "SupervisorRef",
    "SupervisorStatistics",
    "open_node",
    "run_node",
]


fix_public_module(globals(), __all__)
