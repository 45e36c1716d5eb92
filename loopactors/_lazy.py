"""A package's names loaded on first use (PEP 562): importing the package stays cheap.

Apart from ``_util`` on purpose: this imports only ``importlib``, so that the ``context``
command, which loads ``loopactors.ledger`` this way, starts without msgspec or typing
(docs/benchmarks.md, start-up).
"""

from __future__ import annotations

import importlib
import sys

TYPE_CHECKING = False  # not the typing module: not even that is loaded here
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

__all__ = ["lazy_names"]


def lazy_names(
    package: str,
    homes: Mapping[str, str],
    exported: Sequence[str],
    *,
    fix: Callable[[dict[str, object], list[str]], None] | None = None,
    moved: Mapping[str, str] | None = None,
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package``, whose name ``n`` lives in
    its private module ``homes[n]``. A name is imported once, then kept in the package's
    namespace; ``fix`` may rewrite it first (e.g. to show the public module). ``moved``
    maps a name the package no longer has to where it went: asking for it raises an
    ImportError saying so (an AttributeError would read "cannot import name" only)."""

    def __getattr__(name: str) -> object:
        home = homes.get(name)
        if home is None:
            if moved is not None and name in moved:
                raise ImportError(f"{package}.{name} has moved: {moved[name]}", name=package)
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace = {
            "__name__": package,
            name: getattr(importlib.import_module(f"{package}.{home}"), name),
        }
        if fix is not None:
            fix(namespace, [name])
        value = namespace[name]
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(exported)

    return __getattr__, __dir__
