"""Small helpers shared by the package's public namespaces."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import msgspec


def fix_public_module(namespace: dict[str, Any], names: Iterable[str]) -> None:
    """Make re-exported names report their public module, as trio does for its re-exports,
    so tracebacks and reprs show ``loopactors.actors.Actor``, not a private module."""
    public = namespace["__name__"]
    for name in names:
        obj = namespace[name]
        if isinstance(obj, type) and issubclass(obj, msgspec.Struct):
            # msgspec resolves a struct's annotations in its ``__module__``: the public one
            # does not define the names they use, and decoding the struct would fail there.
            continue
        if getattr(obj, "__module__", "").startswith(public + "._"):
            obj.__module__ = public


def backoff_delay(attempt: int, *, first: float, cap: float, factor: float = 2.0) -> float:
    """The wait before retry number ``attempt`` (1 for the first): ``first``, multiplied by
    ``factor`` for each retry after it, never more than ``cap``. The one exponential backoff
    of the package: supervisor restarts, Redis outages, a client's reconnects, model calls."""
    try:
        delay = first * factor ** max(0, attempt - 1)
    except OverflowError:  # a long outage: the cap was reached long ago
        return float(cap)
    return float(min(cap, delay)) if math.isfinite(delay) else float(cap)


def count_of(number: int, noun: str) -> str:
    """``1 round``, ``2 rounds``, ``0 rounds``: a count with its noun (regular plurals)."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"
