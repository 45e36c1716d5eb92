"""Small helpers shared by the package's public namespaces."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def fix_public_module(namespace: dict[str, Any], names: Iterable[str]) -> None:
    """Make re-exported names report their public module, as trio does for its re-exports,
    so tracebacks and reprs show ``loopactors.actors.Actor``, not a private module."""
    public = namespace["__name__"]
    for name in names:
        obj = namespace[name]
        if getattr(obj, "__module__", "").startswith(public + "._"):
            obj.__module__ = public
