"""Helpers for testing code built on loopactors (they are part of the product).

- :func:`inject_crash` makes a named actor crash, to exercise supervision.
- The pytest plugin (loaded automatically when loopactors is installed) provides the
  ``actor_node`` fixture: a node open for the duration of one pytest-trio test.
- Time-based tests should take pytest-trio's ``autojump_clock`` fixture: restart windows,
  grace periods and call timeouts then elapse in virtual time, in milliseconds.
"""

from __future__ import annotations

from ..actors import Node
from ..actors._actor import InjectedCrash as InjectedCrash
from ..actors._actor import _CrashSignal
from ..errors import ActorNotRunning

__all__ = ["InjectedCrash", "inject_crash"]


def inject_crash(node: Node, name: str, error: BaseException | None = None) -> None:
    """Make the actor registered as ``name`` crash with ``error`` (default
    :class:`InjectedCrash`) once it reaches this request in its mailbox.

    The crash behaves exactly like an exception raised by a handler: pending calls fail with
    it as their cause and the supervisor applies its strategy.
    """
    ref = node.whereis(name)
    if ref is None:
        raise ActorNotRunning(f"no live actor is registered as {name!r} on node {node.name!r}")
    ref.cast_nowait(
        _CrashSignal(
            error if error is not None else InjectedCrash(f"crash injected into actor {name!r}")
        )
    )
