"""The embedding API: open a runtime inside a trio program, start loops, steer them.

async with open_runtime(state_dir=".loopactors") as rt:
    state = await rt.start("|loop:3,fresh| review this module", worker="scripted")
    async for event in rt.handle(state).history_and_events():  # ends with its last event
        print(event.note())
    final = await rt.wait(state.loop_id)

``Runtime`` speaks the one vocabulary of ``loops.LoopControl`` (``start``, ``get``, ``list``,
``history``, ``stop``, ``pause``, ``resume``, ``subscribe``, ``wait``), as a node's client and a
round's context do; the older spellings stay for one release (docs/embedding.md).
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import socket
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import attrs
import msgspec
import trio

from .._util import deprecated, former_name
from ..actors import ChildSpec, NamedRef, Node, Supervisor, open_node
from ..agent import Entry, FullPlan, MicroPlan
from ..errors import (
    ActorNotRunning,
    CallFailed,
    ConfigError,
    InvalidRequest,
    LoopNotFound,
    OwnedElsewhere,
)
from ..loops import (
    MATCHES_SHOWN,
    TERMINAL_PHASES,
    AgentStep,
    AnyEvent,
    LoopControl,
    LoopFinished,
    LoopSpec,
    LoopState,
    Phase,
    RoundRecord,
    StopMode,
    output_heads,
    replay_spec,
    resolve_loop_id,
    round_of,
)
from ..storage import (
    CommandRoutes,
    Placement,
    PruneReport,
    StoreBackend,
    StoreStatistics,
    open_backend,
    parse_store,
    store_kind,
)
from ..workers import (
    DailyBudgets,
    RoundContext,
    budget_day_start,
    clear_daily_spend,
    configure_daily_budgets,
    end_orphan_groups,
    forget_group,
    record_group,
    record_spend,
    worker_kind,
)
from ._breaker import Breaker
from ._config import RuntimeConfig, load_config
from ._context_builder import ContextBuilder
from ._coordinator import Coordinator, CoordinatorLimits, new_loop_id
from ._dispatcher import Dispatcher
from ._events import STATE_EVENTS, Changes, EventBus, Gap, Subscription
from ._lock import lock_state_dir, watch_state_dir
from ._messages import (
    ApplyCompaction,
    ControlLoop,
    FindLoopIds,
    GetEvents,
    GetLoop,
    GetLoopOwners,
    GetLoops,
    GetNotifierStatistics,
    GetRounds,
    GetStoreStatistics,
    ListLoops,
    LoopsClaimed,
    PruneLoops,
    SetNodeGateway,
    StartLoop,
)
from ._notifier import Notifier, NotifierStatistics
from ._spec import build_spec
from ._store import Store
from ._timers import Timers
from ._transports import DispatchSettings, open_transport, transport_kind
from ._wiring import (
    BREAKER,
    CONTEXT_BUILDER,
    COORDINATOR,
    DISPATCHER,
    NOTIFIER,
    STORE,
    TIMERS,
    RunnerDeps,
    deliver,
    services_of,
)

__all__ = ["LoopHandle", "Runtime", "open_runtime"]

Command = Literal["stop", "pause", "resume", "status"]

#: How long a runtime call waits for a restarting actor to come back before giving up.
RESTART_PATIENCE = 10.0

#: How long an agent waits for the ContextBuilder to apply a compaction plan before it
#: applies the plan itself.
COMPACTION_TIMEOUT = 30.0

#: The largest ``older_than`` of a prune: a hundred years, in seconds.
MAX_AGE = 36_500 * 86_400.0


@attrs.define(eq=False)
class LoopHandle:
    """One loop, seen from the program that started (or found) it."""

    runtime: Runtime
    loop_id: str

    def __repr__(self) -> str:
        return f"<LoopHandle {self.loop_id}>"

    async def get(self) -> LoopState:
        """The loop's committed state."""
        return await self.runtime.get(self.loop_id)

    status = former_name("LoopHandle.status", get)

    async def stop(self, *, after_round: bool = False) -> LoopState:
        """Stop now (the round in flight is cancelled), or after the round in flight."""
        mode: StopMode = "after_round" if after_round else "now"
        return await self.runtime._control(self.loop_id, "stop", mode)

    async def pause(self) -> LoopState:
        """Let the round in flight finish, then dispatch nothing until :meth:`resume`."""
        return await self.runtime._control(self.loop_id, "pause")

    async def resume(self) -> LoopState:
        return await self.runtime._control(self.loop_id, "resume")

    async def history(self) -> list[RoundRecord]:
        return await self.runtime.history(self.loop_id)

    def events(self, *, queue_size: int | None = None) -> Subscription:
        """Live events of this loop from now on (iterate with ``async for``).

        For the events that happened before, see :meth:`Runtime.stored_events`, or use
        :meth:`history_and_events`.
        """
        return self.runtime.subscribe(self.loop_id, queue_size=queue_size)

    async def history_and_events(self) -> AsyncIterator[AnyEvent | Gap]:
        """Every event of this loop: those already in the store, then live ones, without a
        gap or a repeat between the two; ends after the loop's final event."""
        with self.events() as live:
            stored = await self.runtime.stored_events(self.loop_id)
            seen = set(stored)
            for event in stored:
                yield event
                if isinstance(event, LoopFinished):
                    return
            async for item in live:
                if item in seen:
                    continue
                yield item
                if isinstance(item, LoopFinished):
                    return

    async def wait(self) -> LoopState:
        """Wait until the loop reaches a terminal phase and return its final state."""
        return await self.wait_phase()

    async def wait_phase(self, *phases: Phase) -> LoopState:
        """Wait until the loop is in one of ``phases`` (default: any terminal phase), or
        terminal, and return its state then."""
        wanted = set(phases) or set(TERMINAL_PHASES)

        def reached(state: LoopState) -> bool:
            return state.phase in wanted or state.terminal

        # Every way into a terminal phase publishes LoopFinished (after its commit): waiting
        # for an end only needs that event; another phase may follow any event.
        kinds = (LoopFinished,) if wanted <= TERMINAL_PHASES else None
        with self.runtime.bus.watch(self.loop_id, kinds) as watch:
            state = await self.get()
            while not reached(state):
                await watch.wait()
                state = await self.get()  # the store has the truth
            return state


class _RoutedStart(msgspec.Struct, frozen=True):
    """A child's start sent to its parent's owner node (docs/multinode.md): what it admits."""

    loop_id: str
    spec: LoopSpec


_routed_start = msgspec.json.Decoder(_RoutedStart)


class Runtime:
    """A running loop runtime: a node with the runtime's actors, and the way to talk to them."""

    def __init__(self, node: Node, config: RuntimeConfig, bus: EventBus) -> None:
        self.node = node
        self.config = config
        self.bus = bus
        self._coordinator = node.ref(COORDINATOR)
        self._store = node.ref(STORE)
        #: The way to the owners of other nodes' loops (a shared store), set as it opens.
        self._routes: CommandRoutes | None = None

    def serving(self) -> bool:
        """The actors every request needs, the store and the coordinator, are running now
        (not between a crash and their restart): what a node's health check reports."""
        return self.node.whereis(STORE) is not None and self.node.whereis(COORDINATOR) is not None

    async def start(
        self,
        loop: str | LoopSpec,
        *,
        worker: str | Callable[..., Any] | None = None,
        parent_id: str | None = None,
        loop_id: str | None = None,
        **options: Any,
    ) -> LoopState:
        """Start a loop from ``|loop...|`` text or a :class:`LoopSpec`; its first state, as
        admitted (``handle(state)`` for a :class:`LoopHandle`).

        ``options`` are :class:`LoopSpec` fields (``round_timeout``, ``max_tokens``, ...);
        unset ones come from the runtime's configuration. ``worker`` is a spec, or an async
        function defined at a module's top level, stored as its ``python:module:function``.
        """
        spec = self.build_spec(loop, worker=worker, parent_id=parent_id, **options)
        # The id is chosen here so that a start whose answer was lost (the Coordinator
        # crashed) can be asked again safely: the retry finds the loop if it was admitted.
        message = StartLoop(
            spec=spec,
            loop_id=new_loop_id() if loop_id is None else loop_id,
            check_existing=loop_id is not None,
        )
        deadline = trio.current_time() + RESTART_PATIENCE
        while True:
            try:
                state: LoopState = await self._coordinator.call(message, timeout=60.0)
            except (ActorNotRunning, CallFailed):
                if trio.current_time() >= deadline:
                    raise
                message = msgspec.structs.replace(message, check_existing=True)
                await trio.sleep(0.05)
                continue
            except OwnedElsewhere:
                if self._routes is None or spec.parent_id is None or message.loop_id is None:
                    raise
                # The parent runs on another node: that node admits the child, in the
                # parent's tree (a tree moves as one), and answers with it.
                request = msgspec.json.encode(_RoutedStart(message.loop_id, spec))
                return await self._routes.start(spec.parent_id, message.loop_id, request)
            return state

    async def replay(
        self,
        loop_id: str,
        round_number: int,
        *,
        worker: str | None = None,
        new_loop_id: str | None = None,
        **options: Any,
    ) -> LoopState:
        """Run round ``round_number`` of loop ``loop_id`` again, its recorded prompt (seed
        included) on ``worker`` (default: the original's), as a new one-round loop whose
        ``replay_of`` names the original round (docs/replay.md); its first state. ``options`` as
        :meth:`start`.

        Raises:
            LoopNotFound: no such loop.
            ReplayError: no such round, or one that never ran.
        """
        state, rounds = await self.recorded(await self.resolve_loop_id(loop_id))
        spec = replay_spec(state, rounds, round_number, worker=worker)
        # The worker given whole: build_spec takes a spec's fields that differ from its
        # defaults, and `scripted` is the default.
        return await self.start(spec, worker=spec.worker, loop_id=new_loop_id, **options)

    def build_spec(
        self,
        loop: str | LoopSpec,
        *,
        worker: str | Callable[..., Any] | None = None,
        **options: Any,
    ) -> LoopSpec:
        """The :class:`LoopSpec` that :meth:`start` would run, checked."""
        return build_spec(self.config, loop, worker=worker, **options)

    def handle(self, loop: str | LoopState) -> LoopHandle:
        """A :class:`LoopHandle` for a loop id (not checked) or a state (``start``'s)."""
        return LoopHandle(self, loop if isinstance(loop, str) else loop.loop_id)

    async def resolve_loop_id(self, given: str) -> str:
        """The id of the one loop whose id is ``given`` or starts with it.

        Raises:
            LoopNotFound: none does.
            AmbiguousLoopId: several do (the message lists them).
        """
        matches: list[str] = await self._ask(self._store, FindLoopIds(given, MATCHES_SHOWN + 1))
        return resolve_loop_id(given, matches, where="this runtime's store")

    async def get(self, loop_id: str) -> LoopState:
        """The loop's state; a unique prefix of its id will do.

        Raises:
            LoopNotFound: no loop has that id, or an id starting with it.
            AmbiguousLoopId: several ids start with it (the message lists them).
        """
        state: LoopState | None = await self._ask(self._store, GetLoop(loop_id))
        if state is None:  # not a whole id: a prefix, or nothing (asked only then)
            whole = await self.resolve_loop_id(loop_id)
            state = await self._ask(self._store, GetLoop(whole))
            if state is None:  # pruned between the two reads
                raise LoopNotFound(f"no loop {loop_id!r} in this runtime's store")
        return state

    async def states(self, loop_ids: Sequence[str]) -> builtins.list[LoopState]:
        """The states of these loops, in this order; one not in the store is left out."""
        states: list[LoopState] = await self._ask(self._store, GetLoops(tuple(loop_ids)))
        return states

    async def list(
        self,
        *,
        live_only: bool = False,
        limit: int | None = None,
        after: tuple[float, str] | None = None,
    ) -> builtins.list[LoopState]:
        """Loops in the store, newest first (only the live ones if ``live_only``); ``after``
        a loop's ``(created_at, loop_id)``: the ones listed after it (the next page)."""
        loops: builtins.list[LoopState] = await self._ask(
            self._store, ListLoops(live_only=live_only, limit=limit, after=after)
        )
        return loops

    loops = former_name("Runtime.loops", list)

    async def stop(self, loop_id: str, *, after_round: bool = False) -> LoopState:
        """Stop a loop now, or after the round in flight (as :meth:`LoopHandle.stop`)."""
        return await self.handle(loop_id).stop(after_round=after_round)

    async def pause(self, loop_id: str) -> LoopState:
        return await self.handle(loop_id).pause()

    async def resume(self, loop_id: str) -> LoopState:
        return await self.handle(loop_id).resume()

    async def wait(self, loop_id: str) -> LoopState:
        """Wait until the loop reaches a terminal phase; its final state (as
        :meth:`LoopHandle.wait`)."""
        return await self.handle(loop_id).wait()

    async def loop_pages(
        self, *, live_only: bool = False, page: int | None = None
    ) -> AsyncIterator[builtins.list[LoopState]]:
        """Every loop in the store, newest first, ``page`` loops (all if None) at a time."""
        after: tuple[float, str] | None = None
        while True:
            loops = await self.list(live_only=live_only, limit=page, after=after)
            if loops or after is None:
                yield loops
            if page is None or len(loops) < page:
                return
            after = (loops[-1].created_at, loops[-1].loop_id)

    async def history(
        self, loop_id: str, *, output_head: int | None = None
    ) -> builtins.list[RoundRecord]:
        """The loop's rounds in order, each output cut to ``output_head`` characters if
        given; a unique prefix of its id will do (as :meth:`get`)."""
        return (await self.recorded(loop_id, output_head=output_head))[1]

    async def recorded(
        self, loop_id: str, *, output_head: int | None = None
    ) -> tuple[LoopState, builtins.list[RoundRecord]]:
        """The loop and its rounds as recorded, each output cut to ``output_head``
        characters if given (``loops.output_heads``)."""
        state = await self.get(loop_id)  # a clear error for an unknown id
        rounds: builtins.list[RoundRecord] = await self._ask(self._store, GetRounds(state.loop_id))
        return output_heads(state, rounds, output_head)

    async def output(self, loop_id: str, round: int) -> RoundRecord:
        """One round's record, its output whole (``history`` over the wire cuts outputs).

        Raises:
            LoopNotFound: no such loop, or it has no such round (the message says which it has).
        """
        state, rounds = await self.recorded(loop_id)
        return round_of(state.loop_id, rounds, round)

    async def stored_events(self, loop_id: str) -> builtins.list[AnyEvent]:
        """The loop's event log as the store keeps it."""
        state = await self.get(loop_id)
        events: builtins.list[AnyEvent] = await self._ask(self._store, GetEvents(state.loop_id))
        if self._routes is not None:  # a replay: a relay of the loop goes on from there
            self._routes.seen(state.loop_id, len(events))
        return events

    async def owners(self, loop_ids: Sequence[str]) -> dict[str, str | None] | None:
        """The node incarnation owning each of these loops (None: no node does, it waits to
        be claimed; or no such loop), on a store several nodes share; None on a store of
        this node's own, which has no owners."""
        if store_kind(self.config.store).hold is None:
            return None
        owned: dict[str, str] = await self._ask(self._store, GetLoopOwners(tuple(loop_ids)))
        return {loop_id: owned.get(loop_id) for loop_id in loop_ids}

    async def set_gateway_url(self, url: str) -> None:
        """Record where this node's gateway listens (``ws://HOST:PORT``), so that the other
        nodes of a shared store list it (``status --store``, their dashboards); nothing on a
        store of one node."""
        await self._ask(self._store, SetNodeGateway(url))

    async def store_statistics(self) -> StoreStatistics:
        stats: StoreStatistics = await self._ask(self._store, GetStoreStatistics())
        return stats

    async def notifier_statistics(self) -> NotifierStatistics:
        """Notifications delivered, failed (each retried) and dropped since the start."""
        stats: NotifierStatistics = await self._ask(
            self.node.ref(NOTIFIER), GetNotifierStatistics()
        )
        return stats

    async def prune(self, older_than: float, *, dry_run: bool = False) -> PruneReport:
        """Remove the loops that finished more than ``older_than`` seconds ago, with their
        rounds and events (with ``dry_run``, only count them). Live and paused loops are
        never removed. A pruned loop is gone: ``get`` and ``history`` raise
        :class:`LoopNotFound` for it. See ``retention_days`` to have this done periodically.
        """
        if isinstance(older_than, bool) or not isinstance(older_than, int | float):
            raise ConfigError(f"older_than must be a number of seconds >= 0, got {older_than!r}")
        if not 0 <= older_than <= MAX_AGE:  # NaN and infinity included
            raise ConfigError(
                f"older_than must be >= 0 and <= {MAX_AGE:.0f} seconds (100 years), "
                f"got {older_than!r}"
            )
        before = time.time() - older_than
        # No call timeout: the first prune of a large store may take a while.
        report: PruneReport = await self._ask(
            self._store, PruneLoops(before, dry_run), timeout=None
        )
        return report

    def subscribe(
        self, loop_id: str | None = None, *, queue_size: int | None = None, cluster: bool = False
    ) -> Subscription:
        """Live events of one loop, or of all loops (``loop_id=None``): ``with`` or
        ``async with`` it, and ``async for`` its events. Of all loops, those this runtime
        runs; with ``cluster``, on a store shared by several nodes, those the other nodes
        run too (docs/multinode.md). One loop's come whichever node runs it."""
        return self.bus.subscribe(loop_id, queue_size=queue_size, cluster=cluster)

    def changes(self, loop_id: str | None = None, *, cluster: bool = False) -> Changes:
        """Which loops changed (had an event that changes their state) since last asked: a
        view of many loops reads their states at its own pace and never falls behind
        (``cluster`` as for :meth:`subscribe`)."""
        return self.bus.changes(loop_id, kinds=STATE_EVENTS, cluster=cluster)

    async def wait_all(self) -> builtins.list[LoopState]:
        """Wait until no loop is live; return the loops that were live when called, final."""
        live = await self.list(live_only=True)
        return [await self.wait(state.loop_id) for state in live]

    async def _control(
        self, loop_id: str, command: Command, stop_mode: StopMode = "now"
    ) -> LoopState:
        message = ControlLoop(loop_id=loop_id, command=command, stop_mode=stop_mode)
        try:
            state: LoopState = await self._ask(self._coordinator, message)
        except OwnedElsewhere:
            if self._routes is None:
                raise
            # Another node runs it: that node applies the command and answers.
            return await self._routes.send(loop_id, command, stop_mode)
        return state

    async def _apply_routed(
        self, loop_id: str, command: str, stop_mode: str, request: bytes | None
    ) -> LoopState | None:
        """A command another node routed here for a loop this node owns (a ``start``: of a
        child of it, which ``request`` describes); None while this node does not run the
        loop yet (claimed, being recovered): it is tried again."""
        if command == "start":
            return await self._start_routed(loop_id, request)
        if command not in ("stop", "pause", "resume") or stop_mode not in ("now", "after_round"):
            raise InvalidRequest(
                f"cannot apply a routed command {command!r} (stop mode {stop_mode!r}): "
                "stop, pause or resume (stop mode now or after_round) are accepted"
            )
        message = ControlLoop(
            loop_id=loop_id,
            command=command,  # type: ignore[arg-type] # checked above
            stop_mode=stop_mode,  # type: ignore[arg-type]
        )
        try:
            state: LoopState = await self._ask(self._coordinator, message)
        except OwnedElsewhere:
            return None
        return state

    async def _start_routed(self, parent_id: str, request: bytes | None) -> LoopState | None:
        try:
            routed = _routed_start.decode(request or b"")
        except msgspec.DecodeError as exc:
            raise InvalidRequest(
                f"cannot start a child of loop {parent_id!r} routed here: its request is not "
                f"a child's id and spec ({exc})"
            ) from None
        if routed.spec.parent_id != parent_id:
            raise InvalidRequest(
                f"a start routed to the owner of loop {parent_id!r} names the parent "
                f"{routed.spec.parent_id!r}: only children of the loop it was sent for"
            )
        # The id was chosen by the sender: asked again (a retry, a poll), it gets that loop.
        message = StartLoop(spec=routed.spec, loop_id=routed.loop_id, check_existing=True)
        try:
            state: LoopState = await self._ask(self._coordinator, message)
        except OwnedElsewhere:
            return None
        return state

    async def _ask(self, ref: NamedRef[Any], message: Any, timeout: float | None = 60.0) -> Any:
        """Call a runtime actor, riding out a restart of it (up to ``RESTART_PATIENCE`` s).

        Only for requests that may safely be asked twice (reads, stop, pause, resume): one
        that never arrived, or whose actor crashed while handling it, is sent again.
        """
        deadline = trio.current_time() + RESTART_PATIENCE
        while True:
            try:
                return await ref.call(message, timeout=timeout)
            except (ActorNotRunning, CallFailed):
                if trio.current_time() >= deadline:
                    raise
            await trio.sleep(0.05)


def dispatch_settings(config: RuntimeConfig) -> DispatchSettings:
    """What the runtime's round transport is opened with."""
    url = parse_store(config.store)
    lease_valid = store_kind(url).lease_valid
    return DispatchSettings(
        may_dispatch=None if lease_valid is None else functools.partial(lease_valid, url),
        max_concurrent=config.max_concurrent_rounds,
        max_per_kind=config.max_concurrent_per_kind,
        kill_grace=config.kill_grace,
        max_output_bytes=config.max_output_bytes,
        node_name=config.node_name,
        outputs_dir=Path(config.state_dir) / "outputs"
        if config.keep_full_outputs and not store_kind(config.store).in_process
        else None,
    )


def runtime_children(config: RuntimeConfig, deps: RunnerDeps) -> list[ChildSpec]:
    """The node's tree, in start order (stopped in reverse, restarted rest_for_one)."""

    kind = store_kind(config.store)
    if kind.in_process:
        kept = open_backend(config.store, None)  # outlives restarts of the Store actor

        def backend() -> StoreBackend:
            return kept
    else:

        def backend() -> StoreBackend:
            return open_backend(config.store, Path(config.state_dir), durability=config.durability)

    limits = CoordinatorLimits(
        max_live_loops=config.max_live_loops, max_tree_loops=config.max_tree_loops
    )
    return [
        ChildSpec(
            STORE,
            functools.partial(
                Store,
                backend,
                deps.bus,
                shared=kind.in_process,
                blocking=kind.blocking,
                retention_days=config.retention_days,
                tell_recorded=not transport_kind(config.transport).rounds_here,
            ),
            name=STORE,
            shutdown=30.0,
        ),
        ChildSpec(BREAKER, Breaker, name=BREAKER),
        ChildSpec(CONTEXT_BUILDER, ContextBuilder, name=CONTEXT_BUILDER),
        ChildSpec(
            DISPATCHER,
            functools.partial(
                Dispatcher,
                context_factory=functools.partial(RuntimeRoundContext, config, deps.bus),
                transport=functools.partial(
                    open_transport, config.transport, dispatch_settings(config)
                ),
                max_output_bytes=config.max_output_bytes,
                publish=deps.bus.publish,
                outputs_dir=dispatch_settings(config).outputs_dir,
            ),
            name=DISPATCHER,
            shutdown=config.kill_grace + 5.0,
        ),
        ChildSpec(TIMERS, Timers, name=TIMERS),
        ChildSpec(
            "loops",
            functools.partial(
                Supervisor,
                strategy="one_for_one",
                max_restarts=config.loop_max_restarts,
                max_seconds=config.max_restart_seconds,
            ),
            name="loops",
        ),
        ChildSpec(COORDINATOR, functools.partial(Coordinator, deps, limits), name=COORDINATOR),
        ChildSpec(
            NOTIFIER,
            functools.partial(Notifier, config.notify),
            name=NOTIFIER,
            shutdown=config.notify.timeout + 5.0,
        ),
    ]


@attrs.define(eq=False)
class RuntimeRoundContext:
    """The runtime's side of :class:`~loopactors.workers.RoundContext`: what a round may do
    besides returning output (the one loop vocabulary, its starts made child loops of the
    round's loop; events; compaction)."""

    # Made for every round, so it only keeps references; the Runtime is built on use.
    _config: RuntimeConfig
    _bus: EventBus
    _node: Node
    loop_id: str
    round: int

    @property
    def runtime(self) -> Runtime:
        """The whole runtime, for a ``python:`` function that wants more than the protocol
        offers (``context.runtime.start(...)`` starts an independent root loop). Not part of
        ``RoundContext``: workers of the package use only the protocol."""
        return Runtime(self._node, self._config, self._bus)

    async def start(
        self,
        loop: str | LoopSpec,
        *,
        worker: str | None = None,
        loop_id: str | None = None,
        **options: Any,
    ) -> LoopState:
        return await self.runtime.start(
            loop, worker=worker, loop_id=loop_id, parent_id=self.loop_id, **options
        )

    async def get(self, loop_id: str) -> LoopState:
        return await self.runtime.get(loop_id)

    async def list(
        self, *, live_only: bool = False, limit: int | None = None
    ) -> builtins.list[LoopState]:
        return await self.runtime.list(live_only=live_only, limit=limit)

    async def history(
        self, loop_id: str, *, output_head: int | None = None
    ) -> builtins.list[RoundRecord]:
        return await self.runtime.history(loop_id, output_head=output_head)

    async def stop(self, loop_id: str, *, after_round: bool = False) -> LoopState:
        return await self.runtime.stop(loop_id, after_round=after_round)

    async def pause(self, loop_id: str) -> LoopState:
        return await self.runtime.pause(loop_id)

    async def resume(self, loop_id: str) -> LoopState:
        return await self.runtime.resume(loop_id)

    async def wait(self, loop_id: str) -> LoopState:
        return await self.runtime.wait(loop_id)

    def subscribe(self, loop_id: str | None = None) -> Subscription:
        return self._bus.subscribe(loop_id)

    # -- the spellings before the one vocabulary, kept for one release ---------------------

    async def start_child(self, text: str, **options: Any) -> LoopHandle:
        deprecated("RoundContext.start_child", "start (which returns the child's state)")
        return self.runtime.handle(await self.start(text, **options))

    @property
    def child_workers(self) -> tuple[str, ...]:
        return self._config.child_workers

    @property
    def node_paths(self) -> tuple[str, ...]:
        return tuple(str(Path(path).resolve()) for path in self._config.protected_paths())

    get_loop = former_name("RoundContext.get_loop", get)
    list_loops = former_name("RoundContext.list_loops", list)
    loop_history = former_name("RoundContext.loop_history", history)
    stop_loop = former_name("RoundContext.stop_loop", stop)

    async def apply_compaction(
        self, plan: MicroPlan | FullPlan, view: tuple[Entry, ...]
    ) -> tuple[Entry, ...]:
        builder = services_of(self._node).context_builder
        applied: tuple[Entry, ...] = await builder.call(
            ApplyCompaction(plan, view), timeout=COMPACTION_TIMEOUT
        )
        return applied

    @property
    def _groups(self) -> Path | None:
        """Where a runtime with a state directory records its rounds' process groups, so
        that its next start ends those a crash left running. Found on use: most rounds
        start none, and parsing the store's URL for each round cost more than the rest of
        making its context."""
        config = self._config
        return None if store_kind(config.store).in_process else Path(config.state_dir)

    def process_group_started(self, pgid: int, cgroup: str | None = None) -> None:
        groups = self._groups
        if groups is not None:
            record_group(groups, self.loop_id, self.round, pgid, cgroup=cgroup)

    def process_group_ended(self, pgid: int) -> None:
        groups = self._groups
        if groups is not None:
            forget_group(groups, pgid)

    def agent_step(self, tool: str, detail: str) -> None:
        self._bus.publish(
            AgentStep(
                loop_id=self.loop_id, at=time.time(), round=self.round, tool=tool, detail=detail
            )
        )


if TYPE_CHECKING:  # the runtime implements the workers' protocol and the vocabulary (mypy)
    _context: type[RoundContext] = RuntimeRoundContext
    _control: type[LoopControl] = Runtime


@asynccontextmanager
async def open_runtime(
    config: RuntimeConfig | None = None,
    *,
    state_dir: str | Path | None = None,
    store: str | None = None,
    config_file: Path | None = None,
    observer: Callable[[AnyEvent], None] | None = None,
    **overrides: Any,
) -> AsyncIterator[Runtime]:
    """Run the loop runtime inside the calling trio program for the duration of the block.

    Configuration: ``config`` if given, else ``loopactors.toml`` / ``[tool.loopactors]``
    found from the working directory (or ``config_file``), then the keyword overrides.
    Every non-terminal loop in the store is resumed from its last committed step at once.

    ``observer`` is called with every event as it is published, from the very start (so it
    sees the recoveries a subscription made after the block begins could miss). It runs in
    the publishing actor: it must be quick and must not block; what it raises is logged.
    """
    if config is None:
        config = load_config(config_file)
    config = config.replace(state_dir=state_dir, store=store, **overrides)
    url = parse_store(config.store)
    kind = store_kind(url)
    state_dir = Path(config.state_dir)
    store_dir = kind.local_dir(url, state_dir)
    async with contextlib.AsyncExitStack() as stack:
        claims = None
        if kind.hold is not None:
            # Before anything is read: a node runs only while it holds its lease on the
            # store, and recovers the loops it owns then. Its rounds stop (kill_grace)
            # before its lease could end.
            claims = await stack.enter_async_context(
                kind.hold(
                    url,
                    config.lease_ttl,
                    config.kill_grace + 1.0,
                    config.max_live_loops,
                    placement(config),
                )
            )
        lock = None
        if not kind.in_process:
            # The node's own files (process groups, outputs, token) and, for a store in
            # local files, the store: one runtime each, two would resume the same loops.
            lock = stack.enter_context(lock_state_dir(state_dir))
            if store_dir is not None and store_dir.resolve() != state_dir.resolve():
                lock = stack.enter_context(lock_state_dir(store_dir))
            # Workers a crashed runtime left running end before their rounds run again.
            await end_orphan_groups(state_dir, config.kill_grace)
        routes = None
        if kind.commands is not None:
            # Commands for other nodes' loops go to them; theirs for this node's come here.
            # Opened before the loops start: a caller subscribing at once misses nothing.
            routes = await stack.enter_async_context(
                kind.commands(url, route_timeout(config.lease_ttl))
            )
        runtime = await stack.enter_async_context(_open_runtime(config, observer))
        runtime._routes = routes
        if claims is not None:
            # Loops this node takes over while it runs (from nodes that died or left).
            nursery = await stack.enter_async_context(trio.open_nursery())
            stack.callback(nursery.cancel_scope.cancel)
            nursery.start_soon(_recover_claims, runtime.node, claims, runtime._routes)
            if routes is not None:
                nursery.start_soon(routes.serve, runtime._apply_routed)
                # Events of loops followed here that other nodes run.
                bus = runtime.bus
                bus.taps.append(routes.local_event)
                bus.on_follow = routes.follow
                nursery.start_soon(routes.relay, bus)
        if store_dir is not None:
            files = [store_dir / name for name in kind.local_files]
            await stack.enter_async_context(watch_state_dir(store_dir, *files, lock=lock))
        yield runtime


#: The label of a node that says its loops' files are on storage every node sees.
SHARED_FS = "shared-fs"


def placement(config: RuntimeConfig) -> Placement:
    """Where this node stands among the nodes sharing its store: its name, its labels
    (``host:HOSTNAME`` and ``config.labels``), and which loops stay on this machine
    (docs/multinode.md, "What does not move")."""
    host = f"host:{socket.gethostname()}"
    labels = frozenset({host, *config.labels})
    rounds_here = transport_kind(config.transport).rounds_here

    def affinity(state: LoopState) -> str | None:
        # A loop whose rounds run in this process, with a kind that needs something of
        # this machine (an executable, a module, a CLI, a workspace), stays here; unless
        # the operator says every node sees the same files.
        if not rounds_here or SHARED_FS in labels:
            return None
        kind = worker_kind(state.spec.worker)
        if kind is None or kind.local_resources or kind.workspace != "none":
            return host
        return None

    return Placement(name=config.node_name or "node", labels=labels, affinity=affinity)


def route_timeout(lease_ttl: float) -> float:
    """How long a command routed to another node waits for its answer: long enough for a
    loop whose node died to be claimed (a lease and a renewal) and its runner started."""
    return max(30.0, 3.0 * lease_ttl)


async def _recover_claims(
    node: Node, claims: AsyncIterator[list[str]], routes: CommandRoutes | None
) -> None:
    """Hand each batch of loops the node claimed to its Coordinator, which recovers them
    (one that is restarting recovers every loop the node owns anyway); commands waiting
    for them are looked for at once."""
    async for claimed in claims:
        await deliver(node, COORDINATOR, LoopsClaimed(tuple(claimed)))
        if routes is not None:
            routes.poll()


@asynccontextmanager
async def _open_runtime(
    config: RuntimeConfig, observer: Callable[[AnyEvent], None] | None = None
) -> AsyncIterator[Runtime]:
    bus = EventBus(config.event_queue_size, observer)
    deps = RunnerDeps(
        bus=bus,
        kill_grace=config.kill_grace,
        remote_workers=not transport_kind(config.transport).rounds_here,
        worker_retry=config.worker_retry,
        shared_store=store_kind(config.store).hold is not None,
    )
    children = runtime_children(config, deps)
    async with open_node(
        children,
        name="loopactors",
        strategy="rest_for_one",
        max_restarts=config.max_restarts,
        max_seconds=config.max_restart_seconds,
        shutdown_grace=config.shutdown_grace,
    ) as node:
        runtime = Runtime(node, config, bus)
        await _daily_budgets(runtime, config)
        yield runtime


async def _daily_budgets(runtime: Runtime, config: RuntimeConfig) -> None:
    """Set the node's daily budgets, and what each account spent today from the store's
    rounds of the day (so a restart forgets no spend)."""
    budget = config.budget
    budgets = DailyBudgets(budget.daily_cost_usd, budget.daily_total_cost_usd, budget.reset_hour)
    configure_daily_budgets(budgets)
    clear_daily_spend()
    if not budgets.any:
        return
    day = budget_day_start(time.time(), budget.reset_hour)
    for state in await runtime.list():
        if state.updated_at < day:
            continue
        for record in await runtime.history(state.loop_id):
            if record.account and record.cost_usd > 0 and record.started_at >= day:
                kind, _, account = record.account.partition(":")
                record_spend(kind, account, record.cost_usd, record.started_at)
