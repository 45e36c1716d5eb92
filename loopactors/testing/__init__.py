"""Helpers for testing code built on loopactors (they are part of the product).

- :func:`inject_crash` makes a named actor crash, to exercise supervision.
- :func:`inject_faults` makes every actor started inside a block crash at random on a
  fraction of its messages (``loopactors stress --crash-rate`` uses it).
- The pytest plugin (loaded automatically when loopactors is installed) provides the
  ``actor_node`` fixture: a node open for the duration of one pytest-trio test.
- Time-based tests should take pytest-trio's ``autojump_clock`` fixture: restart windows,
  grace periods and call timeouts then elapse in virtual time, in milliseconds.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator

from ..actors import Node
from ..actors._actor import _CrashSignal
from ..actors._faults import FaultInjection as FaultInjection
from ..actors._faults import InjectedCrash as InjectedCrash
from ..actors._faults import active_faults
from ..errors import ActorNotRunning

__all__ = ["FaultInjection", "InjectedCrash", "inject_crash", "inject_faults"]


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


@contextlib.contextmanager
def inject_faults(
    rate: float, *, seed: int | None = None, exclude: Collection[str] = ()
) -> Iterator[FaultInjection]:
    """Within the block, every actor that starts (a node opened inside it, and every restart)
    raises :class:`InjectedCrash` on a fraction ``rate`` of its messages, before its handler
    runs; supervisors and the actors named in ``exclude`` are spared.

    The yielded :class:`FaultInjection` counts the crashes (``injected``) and the restarts,
    and can be switched off (``enabled = False``) to read results back undisturbed. Outside
    such a block the kernel's cost is one context-variable read per actor start.
    """
    faults = FaultInjection(rate, seed=seed, exclude=exclude)
    token = active_faults.set(faults)
    try:
        yield faults
    finally:
        active_faults.reset(token)
