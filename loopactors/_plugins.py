"""One registry per axis of change (docs/architecture.md, "Where a change goes"): a name, or
a URL scheme, mapped to the variant that serves it, given as ``"module:attr"`` and imported on
first use, so that registering every built-in variant costs nothing at start-up.

Built-in variants register exactly as a third party's do: by a call to the axis's register
function, or by an entry point in the axis's group (``loopactors.worker_kinds``, ...), read
the first time a name is looked up that no call registered.
"""

from __future__ import annotations

import importlib
from typing import Generic, TypeVar

__all__ = ["Registry", "load_target"]

T = TypeVar("T")


def load_target(target: str) -> object:
    """The object ``"package.module:attr"`` (``attr`` may be dotted) names.

    Raises:
        ValueError: ``target`` is not ``module:attr``.
        ImportError, AttributeError: the module or the attribute does not exist.
    """
    module, sep, attr = target.partition(":")
    if not (sep and module and attr):
        raise ValueError(f"a plug-in target reads 'package.module:attr', got {target!r}")
    value: object = importlib.import_module(module)
    for part in attr.split("."):
        value = getattr(value, part)
    return value


class Registry(Generic[T]):
    """Names of one axis to their variants. ``what`` names the axis in errors ("worker
    kind"); ``group`` is the entry-point group third parties may register through."""

    def __init__(self, what: str, *, group: str | None = None) -> None:
        self.what = what
        self.group = group
        self._targets: dict[str, str | T] = {}
        self._loaded: dict[str, T] = {}
        self._entry_points_read = group is None

    def register(self, name: str, target: str | T, *, replace: bool = False) -> None:
        """Serve ``name`` by ``target``: the variant itself, or ``"module:attr"`` naming it
        (imported on first use). A name is registered once unless ``replace``.

        Raises:
            ValueError: ``name`` is empty or already registered.
        """
        if not name:
            raise ValueError(f"a {self.what} needs a name")
        if name in self._targets and not replace:
            raise ValueError(f"{self.what} {name!r} is already registered")
        self._targets[name] = target
        self._loaded.pop(name, None)

    def unregister(self, name: str) -> None:
        """Forget ``name`` (a test's own variant, after the test)."""
        self._targets.pop(name, None)
        self._loaded.pop(name, None)

    def __contains__(self, name: object) -> bool:
        if isinstance(name, str) and name not in self._targets:
            self._read_entry_points()
        return name in self._targets

    def names(self) -> tuple[str, ...]:
        """Every registered name, sorted."""
        self._read_entry_points()
        return tuple(sorted(self._targets))

    def get(self, name: str) -> T | None:
        """The variant registered as ``name``, imported now if it was given by path; ``None``
        for a name nobody registered."""
        loaded = self._loaded.get(name)
        if loaded is not None:
            return loaded
        if name not in self:
            return None
        target = self._targets[name]
        value: T = load_target(target) if isinstance(target, str) else target  # type: ignore[assignment]
        self._loaded[name] = value
        return value

    def __getitem__(self, name: str) -> T:
        """Like :meth:`get`, for a name that must be registered.

        Raises:
            KeyError: naming the unknown name and the accepted ones.
        """
        value = self.get(name)
        if value is None:
            raise KeyError(f"unknown {self.what} {name!r}; accepted: {', '.join(self.names())}")
        return value

    def _read_entry_points(self) -> None:
        if self._entry_points_read:
            return
        self._entry_points_read = True
        from importlib.metadata import entry_points  # noqa: PLC0415 - only when a name is missed

        for point in entry_points(group=str(self.group)):
            self._targets.setdefault(point.name, point.value)
