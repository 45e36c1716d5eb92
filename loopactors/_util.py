"""Small helpers shared by the package's public namespaces."""

from __future__ import annotations

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
