"""Nodes: a root supervisor, a name registry, and the two ways to run them."""

from __future__ import annotations

import itertools
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypedDict, Unpack

import trio

from ..errors import ChildStartError
from ._actor import Actor, StartFailed, new_cell, run_actor
from ._childspec import Backoff, ChildSpec, Restart, Strategy, SupervisorRef
from ._ref import ActorRef
from ._registry import NamedRef, Registry
from ._supervisor import Supervisor

__all__ = ["Node", "open_node", "run_node"]

#: How long a node's shutdown waits for the tree to stop gracefully before cancelling it.
DEFAULT_SHUTDOWN_GRACE = 10.0


class Node:
    """One tree of supervised actors and the names registered on it.

    Made by :func:`open_node` (embedded) or :func:`run_node` (a standalone process); never
    constructed directly.
    """

    def __init__(self, name: str, shutdown_grace: float) -> None:
        self.name = name
        self.shutdown_grace = shutdown_grace
        self.registry = Registry()
        self.supervisor: SupervisorRef
        self._ids = itertools.count(1)

    def __repr__(self) -> str:
        return f"<Node {self.name!r}>"

    def whereis(self, name: str) -> ActorRef[Any] | None:
        """The live actor registered as ``name`` right now, or ``None``."""
        return self.registry.whereis(name)

    def ref(self, name: str) -> NamedRef[Any]:
        """A ref that follows ``name`` across restarts."""
        return NamedRef(self.registry, name)

    async def start_child(self, spec: ChildSpec) -> ActorRef[Any]:
        """Start a child of the node's root supervisor (see :class:`ChildSpec`)."""
        return await self.supervisor.start_child(spec)

    async def terminate_child(self, child_id: str) -> None:
        await self.supervisor.terminate_child(child_id)

    async def spawn(
        self,
        factory: Callable[[], Actor[Any]],
        *,
        name: str | None = None,
        restart: Restart = "temporary",
        mailbox_size: float | None = None,
    ) -> ActorRef[Any]:
        """Start one actor under the root supervisor; its child id is its name or a new id."""
        child_id = name if name is not None else f"actor-{next(self._ids)}"
        spec = ChildSpec(child_id, factory, restart=restart, name=name, mailbox_size=mailbox_size)
        return await self.start_child(spec)


@asynccontextmanager
async def open_node(
    children: Sequence[ChildSpec] = (),
    *,
    name: str = "node",
    strategy: Strategy = "one_for_one",
    max_restarts: int = 3,
    max_seconds: float = 5.0,
    backoff: Backoff | None = None,
    shutdown_grace: float = DEFAULT_SHUTDOWN_GRACE,
) -> AsyncIterator[Node]:
    """Run a node inside the calling trio program for the duration of the block.

    The children start in order before the block begins (a failure raises
    :class:`ChildStartError`). Leaving the block, by return, exception, cancellation or
    Ctrl-C, stops the tree in reverse order: each child gets its own grace, and the whole
    shutdown gets at most ``shutdown_grace`` seconds before what is left is cancelled. If
    the root supervisor gives up (:class:`RestartIntensityExceeded`), the block is cancelled
    and that error is raised from it.
    """
    if not (shutdown_grace >= 0):
        raise ValueError(f"shutdown_grace must be >= 0 seconds; got {shutdown_grace!r}")
    node = Node(name, shutdown_grace)
    root = Supervisor(
        children,
        strategy=strategy,
        max_restarts=max_restarts,
        max_seconds=max_seconds,
        backoff=backoff,
    )
    cell = new_cell(name, None, node, root)
    node.supervisor = SupervisorRef(cell.ref)
    # Once started, the tree is shielded from the host's cancellation so that it can be
    # stopped in order. Not while starting: a host that gives up then must reach the
    # children's start hooks, or nursery.start would wait on a tree nobody stops.
    tree_scope = trio.CancelScope()
    tree_done = trio.Event()
    failure: BaseException | None = None
    body_error: BaseException | None = None

    async def run_tree(task_status: trio.TaskStatus[ActorRef[Any]]) -> None:
        nonlocal failure
        reason: BaseException | None = None
        try:
            with tree_scope:
                reason = await run_actor(root, cell, task_status=task_status)
            if reason is not None:
                failure = reason
                nursery.cancel_scope.cancel()
        finally:
            tree_done.set()

    start_error: BaseException | None = None
    async with trio.open_nursery() as nursery:
        try:
            await nursery.start(run_tree)
        except StartFailed as exc:
            start_error = exc.cause  # raised below: inside the nursery it would be wrapped
        else:
            tree_scope.shield = True
            try:
                yield node
            except BaseException as exc:
                body_error = exc
            finally:
                with trio.CancelScope(shield=True):
                    cell.request_stop()
                    with trio.move_on_after(shutdown_grace):
                        await tree_done.wait()
                    tree_scope.cancel()
                    await tree_done.wait()
    _raise_outcome(name, start_error, failure, body_error)


def _raise_outcome(
    name: str,
    start_error: BaseException | None,
    failure: BaseException | None,
    body_error: BaseException | None,
) -> None:
    """What a node's block ends with: its start failure, then the tree's, then the body's."""
    if isinstance(start_error, ChildStartError):
        raise start_error from start_error.__cause__
    if start_error is not None:
        raise ChildStartError(f"node {name!r} failed to start: {start_error!r}", name) from (
            start_error
        )
    if failure is not None:
        raise failure
    if body_error is not None:
        raise body_error


class NodeOptions(TypedDict, total=False):
    """:func:`open_node`'s options (its defaults apply), which :func:`run_node` passes on."""

    name: str
    strategy: Strategy
    max_restarts: int
    max_seconds: float
    backoff: Backoff | None
    shutdown_grace: float


def run_node(
    children: Sequence[ChildSpec] = (),
    *,
    main: Callable[[Node], Awaitable[None]] | None = None,
    **options: Unpack[NodeOptions],
) -> None:
    """Run a node as the whole process, until SIGINT or SIGTERM (or until ``main`` returns).

    ``options`` are :func:`open_node`'s. The signal stops the tree in order within
    ``shutdown_grace``, as leaving :func:`open_node` does.
    """

    main_error: list[Exception] = []

    async def serve() -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with (
                open_node(children, **options) as node,
                trio.open_nursery() as nursery,
            ):

                async def until_signal() -> None:
                    async for _ in signals:
                        nursery.cancel_scope.cancel()
                        return

                nursery.start_soon(until_signal)
                if main is not None:
                    try:
                        await main(node)
                    except Exception as exc:
                        main_error.append(exc)  # raised below, not wrapped in a group
                    nursery.cancel_scope.cancel()
                else:
                    await trio.sleep_forever()
        if main_error:
            raise main_error[0]

    trio.run(serve)
