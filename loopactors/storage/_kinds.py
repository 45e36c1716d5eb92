"""Stores plug in by URL: a scheme names a :class:`StoreKind`, registered as ``"module:attr"``
and imported on first use (docs/architecture.md, "Where a change goes").

``sqlite`` (the state directory's file), ``sqlite:DIR`` or a plain directory, ``memory``
(``memory:``), ``postgresql://...``; a third party registers its own scheme with
:func:`register_store` or an entry point in the ``loopactors.stores`` group. The runtime
asks the kind what it needs to know (is the data in this process? in files on this disk?
do its calls block?) and never tests a store's name.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

import msgspec

from .._plugins import Registry
from .._util import closed_on_failure, redact_url
from ..errors import ConfigError, StoreError

if TYPE_CHECKING:
    from ..loops import AnyEvent, LoopState
    from ._base import StoreBackend

__all__ = [
    "DURABILITIES",
    "CommandRoutes",
    "Durability",
    "Placement",
    "RelayTarget",
    "StoreKind",
    "StoreUrl",
    "check_durability",
    "check_store",
    "open_store",
    "parse_store",
    "register_store",
    "store_kind",
    "unregister_store",
]


#: How hard a commit is pushed to disk (docs/loops.md, "Durability"): ``normal`` survives a
#: crash or SIGKILL of the process; ``full`` also an OS crash or power loss, each commit
#: synced to disk before it is reported done.
Durability = Literal["normal", "full"]
DURABILITIES: tuple[Durability, ...] = ("normal", "full")


def check_durability(value: object) -> Durability:
    """``value`` as a :data:`Durability`.

    Raises:
        ConfigError: naming the value and the accepted ones.
    """
    for durability in DURABILITIES:
        if value == durability:
            return durability
    raise ConfigError(f"unknown durability {value!r}; accepted: {', '.join(DURABILITIES)}")


class StoreUrl(msgspec.Struct, frozen=True):
    """A store's URL taken apart: ``scheme`` and what follows ``scheme:`` (``rest``, empty
    for a bare ``sqlite`` or ``memory``)."""

    text: str
    scheme: str
    rest: str = ""

    @property
    def redacted(self) -> str:
        """The URL with any password hidden: what logs, errors and ``status`` show."""
        return redact_url(self.text)


#: Opens a store: its URL, the node's state directory (node-local files), and whether to
#: open it only to read. With ``read_only``, a store that does not exist yet is ``None``.
Opener = Callable[[StoreUrl, Path | None, bool], "StoreBackend | None"]


class RelayTarget(Protocol):
    """Where a node's relay hands the events of loops other nodes run: its event bus."""

    def followed(self) -> Collection[str]:
        """The loops followed one by one here."""
        ...

    def relay_followed(self, event: AnyEvent) -> None:
        """An event of a loop followed here, for its followers."""

    def cluster_wanted(self) -> bool:
        """Something here follows every loop, other nodes' included."""
        ...

    def relay_cluster(self, event: AnyEvent) -> None:
        """An event of another node's loop, for the followers of every loop."""


class CommandRoutes(Protocol):
    """A node's way to the owners of loops on a store shared by several nodes."""

    async def send(self, loop_id: str, command: str, stop_mode: str) -> LoopState:
        """Have the loop's owner apply the command; the loop's state after it."""
        ...

    async def start(self, parent_id: str, child_id: str, request: bytes) -> LoopState:
        """Have the parent's owner admit the child ``request`` describes; its first state."""
        ...

    async def serve(
        self, apply: Callable[[str, str, str, bytes | None], Awaitable[LoopState | None]]
    ) -> None:
        """Apply, until cancelled, the commands other nodes send for this node's loops:
        ``apply(loop_id, command, stop_mode, request)`` (``request``: what a ``start``
        starts); it returns None for a loop not run here yet: tried again later."""
        ...

    def poll(self) -> None:
        """Look for commands now (this node just claimed loops)."""

    async def relay(self, target: RelayTarget) -> None:
        """Until cancelled: hand ``target`` the new events of the loops other nodes run
        that are followed here, and tell the other nodes when this node's loops had
        events."""
        ...

    def follow(self) -> None:
        """A client here began following a loop."""

    def seen(self, loop_id: str, count: int) -> None:
        """A replay read the first ``count`` events of the loop's log."""

    def local_event(self, event: AnyEvent) -> None:
        """An event was published on this node's bus."""


def _anywhere(state: LoopState) -> str | None:
    return None


class Placement(msgspec.Struct, frozen=True, kw_only=True):
    """Where a node stands among the nodes that share a store, and which loops stay on its
    machine (docs/multinode.md, "What does not move")."""

    #: The node's name (``node_name``): its incarnations' ids start with it.
    name: str = "node"
    #: What it carries (``host:HOSTNAME``, and the operator's, e.g. ``shared-fs``): it claims
    #: a loop tree only if each of its loops has no affinity or one of these.
    labels: frozenset[str] = frozenset()
    #: The affinity of a loop admitted here: the label a node must carry to run it
    #: (``host:HOSTNAME`` for a loop tied to this machine's files), None for any node.
    affinity: Callable[[LoopState], str | None] = _anywhere


class StoreKind(msgspec.Struct, frozen=True, kw_only=True):
    """One kind of store, with what the runtime needs to know of it as data."""

    scheme: str
    #: ``(url, state_dir, read_only) -> backend`` (``None``: read-only and nothing there).
    open: Opener
    #: The data lives in this process: one backend per runtime, kept across restarts of the
    #: Store actor, gone at exit (nothing to lock, recover or read offline).
    in_process: bool = False
    #: The data is in files of one directory on this machine (``rest``, or the state
    #: directory when empty): the runtime locks that directory and watches these files.
    local_files: tuple[str, ...] = ()
    #: What is wrong with a URL of this kind (None: nothing), checked with the
    #: configuration, before anything is opened.
    check: Callable[[StoreUrl], str | None] | None = None
    #: ``(url, lease_ttl, stop_margin, capacity, placement) -> async context manager``:
    #: what a runtime holds on the store while it runs (a lease on a shared server, where
    #: several nodes each own some of the loops). It yields the batches of loop ids the node
    #: claims while it runs (loops of nodes that died or left, at most ``capacity`` live
    #: here, those ``placement``'s labels allow), which the runtime recovers; it raises
    #: ``LeaseLost`` from the runtime's block when the hold ends before the block does.
    #: None: nothing held (the node owns every loop).
    hold: (
        Callable[
            [StoreUrl, float, float, int, Placement],
            AbstractAsyncContextManager[AsyncIterator[list[str]]],
        ]
        | None
    ) = None
    #: ``(url, timeout) -> async context manager``, entered after ``hold``: the routes of
    #: commands to loops other nodes own (answered within ``timeout`` seconds or refused).
    #: None: every loop is this node's.
    commands: Callable[[StoreUrl, float], AbstractAsyncContextManager[CommandRoutes]] | None = None
    #: ``(url) -> bool``, called from the runtime's event loop while it holds its lease:
    #: whether the lease cannot have ended yet by this process's own clock (renewed
    #: recently enough). False once it may have (a node woken from a pause past its
    #: lease): the node then hands no round to anyone else before it knows. None: nothing
    #: held.
    lease_valid: Callable[[StoreUrl], bool] | None = None
    #: Calls wait on I/O (a network, a server): the Store actor makes them in a worker
    #: thread so the event loop never waits on them. SQLite is faster inline (measured).
    blocking: bool = True

    def local_dir(self, url: StoreUrl, state_dir: Path) -> Path | None:
        """The directory of a store kept in local files (None for any other store)."""
        if not self.local_files:
            return None
        return Path(url.rest).expanduser() if url.rest else state_dir


_stores: Registry[StoreKind] = Registry("store", group="loopactors.stores")
_stores.register("sqlite", "loopactors.storage._sqlite:KIND")
_stores.register("memory", "loopactors.storage._memory:KIND")
_stores.register("postgresql", "loopactors.storage._postgres:KIND")
_stores.register("postgres", "loopactors.storage._postgres:KIND")

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]+")


def register_store(scheme: str, target: str | StoreKind, *, replace: bool = False) -> None:
    """Serve store URLs of ``scheme`` by ``target``: a :class:`StoreKind`, or
    ``"module:attr"`` naming one (imported the first time such a URL is used)."""
    if not _SCHEME.fullmatch(scheme):
        raise ValueError(
            f"a store scheme is a letter then letters, digits, +, - or ., got {scheme!r}"
        )
    _stores.register(scheme.lower(), target, replace=replace)


def unregister_store(scheme: str) -> None:
    """Forget ``scheme`` (a test's own store, after the test)."""
    _stores.unregister(scheme.lower())


def _accepted() -> str:
    others = "".join(f", {name}:..." for name in _stores.names() if name not in _BUILT_IN)
    return (
        f"sqlite, sqlite:DIR (or a directory), memory, postgresql://USER:PASSWORD@HOST/DB{others}"
    )


_BUILT_IN = frozenset({"sqlite", "memory", "postgresql", "postgres"})


def parse_store(text: str) -> StoreUrl:
    """Take a store URL apart, checking only its form and that its scheme is registered.

    Raises:
        ConfigError: naming the value (password hidden) and the accepted forms.
    """
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"no store given (got {text!r}); accepted: {_accepted()}")
    scheme, sep, rest = text.partition(":")
    if sep and "://" in text and not _SCHEME.fullmatch(scheme):
        scheme = ""
    if not sep or not _SCHEME.fullmatch(scheme):
        # No scheme: a bare name (`sqlite`, `memory`), else a path to a SQLite directory.
        if _SCHEME.fullmatch(text) and "/" not in text:
            scheme, rest = text, ""
        else:
            scheme, rest = "sqlite", text
    scheme = scheme.lower()
    if scheme not in _stores:
        raise ConfigError(f"unknown store {redact_url(text)!r}; accepted: {_accepted()}")
    return StoreUrl(text=text, scheme=scheme, rest=rest)


def check_store(text: str) -> str:
    """``text`` if it names a registered kind of store in a form that kind accepts.

    Raises:
        ConfigError: naming the value (password hidden) and what is accepted.
    """
    url = parse_store(text)
    kind = store_kind(url)
    problem = None if kind.check is None else kind.check(url)
    if problem is not None:
        raise ConfigError(f"bad store {url.redacted!r}: {problem}")
    return text


def store_kind(url: str | StoreUrl) -> StoreKind:
    """The kind of store ``url`` names, its module imported now if it was not yet.

    Raises:
        ConfigError: an unknown scheme, or a kind whose module cannot be loaded.
    """
    parsed = parse_store(url) if isinstance(url, str) else url
    try:
        kind = _stores[parsed.scheme]
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"cannot load the store {parsed.redacted!r}: {exc}") from exc
    if not isinstance(kind, StoreKind):
        raise ConfigError(
            f"the store {parsed.scheme!r} is registered as {type(kind).__name__}, not a StoreKind"
        )
    return kind


def open_store(
    url: str | StoreUrl,
    state_dir: Path | None,
    *,
    read_only: bool = False,
    durability: Durability = "normal",
) -> StoreBackend | None:
    """Open the store ``url`` names; ``state_dir`` is the node's state directory (where a
    bare ``sqlite`` keeps its file). With ``read_only`` nothing is created, migrated or
    written, and a store that does not exist yet is ``None``; otherwise its commits are as
    durable as ``durability`` says (``normal`` or ``full``, docs/loops.md).

    Raises:
        ConfigError: the URL is not a store's.
        StoreError: the store cannot be opened.
    """
    parsed = parse_store(url) if isinstance(url, str) else url
    kind = store_kind(parsed)
    problem = None if kind.check is None else kind.check(parsed)
    if problem is not None:
        raise ConfigError(f"bad store {parsed.redacted!r}: {problem}")
    if kind.local_files and not parsed.rest and state_dir is None:
        raise StoreError(f"the {parsed.scheme} store needs a state directory")
    durability = check_durability(durability)
    backend = kind.open(parsed, state_dir, read_only)
    if backend is not None and not read_only:
        with closed_on_failure(backend):
            backend.set_durability(durability)
    return backend
