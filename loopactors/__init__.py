"""loopactors: a runtime for long-running AI-agent loops on supervised trio actors.

General layout (each a public namespace; their implementation modules are private):

- ``loopactors.runtime`` the loop runtime: open_runtime, Runtime, LoopHandle, RuntimeConfig
- ``loopactors.loops``   the loop domain: |loop| syntax, LoopSpec, LoopState, events
- ``loopactors.ledger``  the run ledger and its circuit breaker (pure, no trio)
- ``loopactors.workers`` what runs one round: scripted, python, command
- ``loopactors.storage`` durable state: SQLite and in-memory backends
- ``loopactors.actors``  the actor kernel: Actor, ActorRef, Supervisor, Node
- ``loopactors.errors``  the one exception hierarchy
- ``loopactors.testing`` helpers and a pytest plugin for testing actor programs

The names below are imported on first use, so that a pure part (``loopactors.ledger``,
``loopactors.loops``) can be used without loading trio and the runtime.
"""

from __future__ import annotations

import importlib

from ._version import __version__ as __version__

TYPE_CHECKING = False  # not typing's: ``loopactors context`` does without loading typing
if TYPE_CHECKING:
    from typing import Any

    from .actors import Actor as Actor
    from .actors import ActorRef as ActorRef
    from .actors import ChildSpec as ChildSpec
    from .actors import Node as Node
    from .actors import Supervisor as Supervisor
    from .actors import open_node as open_node
    from .actors import run_node as run_node
    from .errors import LoopactorsError as LoopactorsError
    from .loops import LoopSpec as LoopSpec
    from .loops import LoopState as LoopState
    from .loops import parse_loop as parse_loop
    from .runtime import LoopHandle as LoopHandle
    from .runtime import Runtime as Runtime
    from .runtime import open_runtime as open_runtime

_HOMES = {
    "Actor": "actors",
    "ActorRef": "actors",
    "ChildSpec": "actors",
    "Node": "actors",
    "Supervisor": "actors",
    "open_node": "actors",
    "run_node": "actors",
    "LoopactorsError": "errors",
    "LoopSpec": "loops",
    "LoopState": "loops",
    "parse_loop": "loops",
    "LoopHandle": "runtime",
    "Runtime": "runtime",
    "open_runtime": "runtime",
}

__all__ = [
    "Actor",
    "ActorRef",
    "ChildSpec",
    "LoopHandle",
    "LoopSpec",
    "LoopState",
    "LoopactorsError",
    "Node",
    "Runtime",
    "Supervisor",
    "__version__",
    "open_node",
    "open_runtime",
    "parse_loop",
    "run_node",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'loopactors' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
