"""Node-scoped names, and refs that follow a name across restarts."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from ..errors import ActorNotRunning, NameTaken
from ._actor import _Cell
from ._ref import ActorRef

__all__ = ["NamedRef", "Registry"]

M = TypeVar("M")


class Registry:
    """Maps names to live actor incarnations on one node.

    There is one per node and none at module level, so two nodes in one process (or one
    test) never see each other's names.
    """

    __slots__ = ("_cells",)

    def __init__(self) -> None:
        self._cells: dict[str, _Cell] = {}

    def register(self, name: str, cell: _Cell) -> None:
        current = self._cells.get(name)
        if current is not None and current.alive and current is not cell:
            raise NameTaken(f"the name {name!r} is already registered to a live actor")
        self._cells[name] = cell

    def unregister(self, name: str, cell: _Cell) -> None:
        """Forget ``name`` if it still points at ``cell`` (a newer incarnation keeps it)."""
        if self._cells.get(name) is cell:
            del self._cells[name]

    def whereis(self, name: str) -> ActorRef[Any] | None:
        """The live incarnation registered as ``name``, or ``None``."""
        cell = self._cells.get(name)
        if cell is None or not cell.alive:
            return None
        return cell.ref

    def names(self) -> list[str]:
        return sorted(name for name, cell in self._cells.items() if cell.alive)


class NamedRef(Generic[M]):
    """A ref that resolves its name on every send, so it follows restarts.

    Between an exit and the restart no actor holds the name, and sends raise
    :class:`ActorNotRunning`.
    """

    __slots__ = ("_registry", "name")

    def __init__(self, registry: Registry, name: str) -> None:
        self._registry = registry
        self.name = name

    def __repr__(self) -> str:
        return f"<NamedRef {self.name!r}>"

    def resolve(self) -> ActorRef[M]:
        """The incarnation that holds the name now; raises if none does."""
        ref = self._registry.whereis(self.name)
        if ref is None:
            raise ActorNotRunning(f"no live actor is registered as {self.name!r}")
        return ref

    @property
    def alive(self) -> bool:
        return self._registry.whereis(self.name) is not None

    def cast_nowait(self, message: M) -> None:
        self.resolve().cast_nowait(message)

    async def cast(self, message: M) -> None:
        await self.resolve().cast(message)

    async def call(self, message: M, timeout: float | None = 5.0) -> Any:
        return await self.resolve().call(message, timeout)
