"""The loop commands (``status``, ``history``, ``stop``, ``pause``, ``resume LOOP_ID``), once
for every place loops live, in the one loop vocabulary (``loops.LoopReader``).

``Runtime`` (an embedded node), ``NodeClient`` (a node over the wire: ``--connect``) and
:class:`StoredLoops` (a store no runtime runs, read and changed in place) implement
:class:`LoopCommands`. :class:`StoredLoops` is the offline view: it never waits on anything, so
the quick commands run on it through :func:`run_offline`, without trio
(tests/cli/test_imports.py keeps it so); what needs a running loop it refuses, saying so.
"""

from __future__ import annotations

import argparse
import builtins
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any, Protocol, TypeVar

import msgspec

from .._util import terminal_safe
from ..errors import ConfigError, LoopNotFound, StoreError
from ..loops import (
    LoopReader,
    LoopState,
    RoundRecord,
    cancel_loop,
    output_heads,
    replay_pair,
    round_of,
    shown,
)
from ..storage import StoreUrl, Write, parse_store, store_kind

# The runtime, client, rich and the agent load where they are used (see cli/_commands.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..client import NodeClient
    from ..runtime import BudgetSettings, Runtime, RuntimeConfig
    from ..storage import NodeLease, StoreBackend

__all__ = [
    "LoopCommands",
    "StoredLoops",
    "pause_loop",
    "print_history",
    "resume_loop",
    "run_offline",
    "show_history",
    "show_status",
    "stop_loop",
]

T = TypeVar("T")

_json = msgspec.json.Encoder()

#: How much of a round's output ``history`` shows in its table (``--round N``: all of it).
_OUTPUT_SHOWN = 200


class LoopCommands(LoopReader, Protocol):
    """A node's loops as the commands see them: embedded (``Runtime``), over the wire
    (``NodeClient``), or in a store no runtime runs (:class:`StoredLoops`): the vocabulary's
    reads and commands, every loop page by page, and one round's whole output."""

    def loop_pages(
        self, *, live_only: bool = False, page: int | None = None
    ) -> AsyncIterator[list[LoopState]]: ...
    async def output(self, loop_id: str, round: int) -> RoundRecord: ...
    async def owners(self, loop_ids: builtins.list[str]) -> dict[str, str | None] | None: ...
    async def stop(self, loop_id: str, *, after_round: bool = False) -> LoopState: ...
    async def pause(self, loop_id: str) -> LoopState: ...
    async def resume(self, loop_id: str) -> LoopState: ...


if TYPE_CHECKING:  # all three implement it (checked by mypy)
    _embedded: type[LoopCommands] = Runtime
    _remote: type[LoopCommands] = NodeClient


class StoredLoops:
    """The loops of a store no runtime is running, read straight from it: read-only (a
    read-only disk will do); ``stop`` takes the store's directory lock (the state
    directory's for a store on a server) and ends the loop cancelled. Nothing here resumes a
    loop, so ``pause`` and ``resume`` are refused."""

    def __init__(self, config: Callable[[], RuntimeConfig]) -> None:
        # Read when first needed: `pause` without --connect is refused before anything.
        self._config = config

    @property
    def state_dir(self) -> Path:
        return Path(self._config().state_dir)

    async def get(self, loop_id: str) -> LoopState:
        with self._reading() as backend:
            return self._find(backend, loop_id)

    async def list(
        self, *, live_only: bool = False, limit: int | None = None
    ) -> builtins.list[LoopState]:
        with self._reading() as backend:
            if backend is None:
                return []
            loops: builtins.list[LoopState] = backend.list_loops(live_only=live_only, limit=limit)
            return loops

    async def loop_pages(
        self, *, live_only: bool = False, page: int | None = None
    ) -> AsyncIterator[builtins.list[LoopState]]:
        yield await self.list(live_only=live_only)  # one read: the store is on this disk

    async def history(
        self, loop_id: str, *, output_head: int | None = None
    ) -> builtins.list[RoundRecord]:
        return (await self.recorded(loop_id, output_head=output_head))[1]

    async def recorded(
        self, loop_id: str, *, output_head: int | None = None
    ) -> tuple[LoopState, builtins.list[RoundRecord]]:
        """The loop and its rounds (one read of the store)."""
        with self._reading() as backend:
            state = self._find(backend, loop_id)
            rounds: builtins.list[RoundRecord] = backend.rounds(state.loop_id)
        return output_heads(state, rounds, output_head)

    async def output(self, loop_id: str, round: int) -> RoundRecord:
        with self._reading() as backend:
            state = self._find(backend, loop_id)
            return round_of(state.loop_id, backend.rounds(state.loop_id), round)

    async def stop(self, loop_id: str, *, after_round: bool = False) -> LoopState:
        """End the loop cancelled now (no round is in flight without a runtime); the round it
        had in flight, if any, is closed as the runtime's stop would."""
        existing = self.open_store(missing_ok=True)
        if existing is None:
            raise LoopNotFound(f"no loop {loop_id!r} in {self.where} (no store there)")
        existing.close()
        try:
            lock = self.lock()
            lock.__enter__()
        except StoreError as exc:
            raise StoreError(f"{exc}; to stop a loop of a running node use --connect URL") from None
        try:
            backend = self.open_to_write()
            try:
                state = backend.get_loop(backend.resolve_loop_id(loop_id, where=self.where))
                if state is None:
                    raise LoopNotFound(f"no loop {loop_id!r} in {self.where}")
                if not state.terminal:
                    state = _cancel(backend, state)
            finally:
                backend.close()
        finally:
            lock.__exit__(None, None, None)
        return state

    async def pause(self, loop_id: str) -> LoopState:
        raise ConfigError(
            "pause acts on a running loop: give the node's --connect URL (a loop in a state "
            "directory no runtime runs is not running; `loopactors stop` ends it there)"
        )

    async def resume(self, loop_id: str) -> LoopState:
        raise ConfigError(
            "resume LOOP_ID acts on a node: give its --connect URL; without LOOP_ID, "
            "`loopactors resume` runs every unfinished loop of the state directory here"
        )

    def _url(self) -> StoreUrl:
        url = parse_store(self._config().store)
        if store_kind(url).in_process:
            raise ConfigError(
                f"the {url.text} store keeps nothing after its process exits: give a durable "
                "store (--state DIR, --store sqlite:DIR or postgresql://...), or --connect URL "
                "for a running node"
            )
        return url

    @property
    def where(self) -> str:
        """The store, for messages: its directory, or its URL with any password hidden."""
        url = parse_store(self._config().store)
        local = store_kind(url).local_dir(url, self.state_dir)
        return url.redacted if local is None else str(local)

    def lock(self) -> contextlib.AbstractContextManager[object]:
        """The lock that keeps a runtime off while the store is changed here: its
        directory's for a store in local files, else the state directory's."""
        from ..runtime import lock_state_dir  # noqa: PLC0415 - the lock only

        url = self._url()
        return lock_state_dir(store_kind(url).local_dir(url, self.state_dir) or self.state_dir)

    def open_to_write(self) -> StoreBackend:
        """The store, opened to change it (under :meth:`lock`)."""
        from ..storage import open_backend  # noqa: PLC0415 - see the note on the imports

        return open_backend(self._url().text, self.state_dir, durability=self._config().durability)

    async def owners(self, loop_ids: builtins.list[str]) -> dict[str, str | None] | None:
        """The node incarnation owning each loop (None: no node does), on a store several
        nodes share; None on a store of one node, which has no owners."""
        if store_kind(self._url()).hold is None:
            return None
        with self._reading() as backend:
            owned = {} if backend is None else backend.loop_owners(loop_ids)
        return {loop_id: owned.get(loop_id) for loop_id in loop_ids}

    async def nodes(self) -> builtins.list[NodeLease]:
        """The node incarnations that held the store (a shared store's leases)."""
        with self._reading() as backend:
            return [] if backend is None else list(backend.nodes())

    def open_store(self, *, missing_ok: bool = False) -> StoreBackend | None:
        """The store, opened read-only; None if there is none yet. For a store in local
        files, a path that is not a directory is an error, and so is a missing directory
        unless ``missing_ok``."""
        from ..storage import open_store  # noqa: PLC0415 - see the note on the imports

        url = self._url()
        local = store_kind(url).local_dir(url, self.state_dir)
        if missing_ok and local is not None and not local.exists():
            return None
        return open_store(url, self.state_dir, read_only=True)

    def _reading(self) -> _Reading:
        return _Reading(self.open_store())

    def _find(self, backend: StoreBackend | None, given: str) -> LoopState:
        """The loop ``given`` names (its whole id or a unique prefix) in the store."""
        where = self.where
        if backend is None:
            raise LoopNotFound(f"no loop {given!r} in {where}")
        state = backend.get_loop(backend.resolve_loop_id(given, where=where))
        if state is None:  # pruned between the two reads
            raise LoopNotFound(f"no loop {given!r} in {where}")
        return state


if TYPE_CHECKING:
    _stored: type[LoopCommands] = StoredLoops


class _Reading:
    """``with``: the store open for reading (or None), closed after."""

    def __init__(self, backend: StoreBackend | None) -> None:
        self.backend = backend

    def __enter__(self) -> Any:
        return self.backend

    def __exit__(self, *exc: object) -> None:
        if self.backend is not None:
            self.backend.close()


def _cancel(backend: StoreBackend, state: LoopState) -> LoopState:
    rounds = backend.rounds(state.loop_id)
    reason = "stopped while no runtime was running it"
    final, record, events = cancel_loop(
        state, reason, time.time(), rounds=rounds, stop_requested="now"
    )
    backend.commit([Write(state=final, round=record, events=events)])
    return final


def run_offline(command: Coroutine[Any, Any, T]) -> T:
    """Run a command on :class:`StoredLoops` without an event loop: nothing in it waits, so
    the coroutine finishes at its first step (a quick command starts without trio)."""
    try:
        command.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    command.close()
    raise RuntimeError("an offline command waited on something; run it under trio")


# -- the commands, once for every target ----------------------------------------------------


async def show_status(
    control: LoopCommands,
    args: argparse.Namespace,
    *,
    empty: str,
    transport: str | None = None,
    budget: BudgetSettings | None = None,
) -> int:
    """``status [LOOP_ID]``: one loop or every loop (page by page), as a table or JSON, and a
    Redis ``transport``'s workers and streams when given."""
    if args.loop_id is not None:
        states = [await control.get(args.loop_id)]
    else:
        states = [state async for page in control.loop_pages() for state in page]
    # A store several nodes share: the node that owns each loop (None elsewhere).
    owners = await control.owners([s.loop_id for s in states]) if states else None
    if args.json:
        payload: Any = [_json_loop(state, owners) for state in states]
        if args.loop_id is not None:
            payload = payload[0]
        if args.loop_id is None and transport is not None:
            from ..transport import status_data  # noqa: PLC0415 - see the note

            data = status_data(transport)
            if data is not None:  # a Redis transport: the loops, its workers and streams
                payload = {"loops": states, "transport": data}
        print(_json.encode(payload).decode())
        return 0
    from rich.console import Console  # noqa: PLC0415 - see the note on the imports

    from ._progress import final_table  # noqa: PLC0415
    from ._tables import print_rows  # noqa: PLC0415

    console = Console()
    if states:
        title = _status_title(control, states)
        named = None
        if owners is not None:  # a column naming each loop's node ("-": none)
            named = {loop_id: owner for loop_id, owner in owners.items() if owner}
        print_rows(console, final_table(states, title=title, owners=named))
    else:
        # A path as given: never markup (a "[b]" in it is text), never wrapped.
        console.print(empty, markup=False, highlight=False, soft_wrap=True)
    if isinstance(control, StoredLoops) and args.loop_id is None:
        for lease in await control.nodes():
            console.print(_node_line(lease), markup=False, highlight=False, soft_wrap=True)
    if budget is not None and args.loop_id is None:
        for line in await _spent_today(control, states, budget):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    if transport is not None:
        from ..transport import print_status  # noqa: PLC0415 - see the note

        print_status(transport, console=console)
    return 0


def _json_loop(state: LoopState, owners: dict[str, str | None] | None) -> Any:
    """A loop as ``status --json`` shows it: its state, and on a store several nodes share
    ``owner``, the node incarnation that owns it (null: none, waiting to be claimed)."""
    if owners is None:
        return shown(state)
    loop = msgspec.to_builtins(shown(state))
    loop["owner"] = owners.get(state.loop_id)
    return loop


async def _spent_today(
    control: LoopCommands, states: list[LoopState], budget: BudgetSettings
) -> list[str]:
    """What each account spent in the current budget day, from the stored rounds, against
    the daily budgets (docs/loops.md, Daily budgets); nothing when none is set."""
    if budget.daily_cost_usd is None and budget.daily_total_cost_usd is None:
        return []
    from ..workers import budget_day_start  # noqa: PLC0415 - see the note on the imports

    day = budget_day_start(time.time(), budget.reset_hour)
    spent: dict[str, float] = {}
    for state in states:
        if state.updated_at < day or not state.cost_usd:
            continue
        rounds = await control.history(state.loop_id, output_head=0)
        for record in rounds:
            if record.account and record.cost_usd > 0 and record.started_at >= day:
                spent[record.account] = spent.get(record.account, 0.0) + record.cost_usd

    def of(dollars: float | None) -> str:
        return "" if dollars is None else f" of ${dollars:.2f}"

    since = time.strftime("%Y-%m-%d %H:%M", time.localtime(day))
    lines = [f"spent since {since}: ${sum(spent.values()):.4f}{of(budget.daily_total_cost_usd)}"]
    lines += [
        f"  {account}: ${dollars:.4f}{of(budget.daily_cost_usd)}"
        for account, dollars in sorted(spent.items())
    ]
    return lines


def _status_title(control: LoopCommands, states: list[LoopState]) -> str:
    """What the table lists: how many loops, how many still live, and where."""
    live = sum(not s.terminal for s in states)
    where = f" in {control.state_dir}" if isinstance(control, StoredLoops) else ""
    return f"{len(states)} loop(s){where}, {live} live"


def _node_line(lease: NodeLease) -> str:
    """``node ID (host H, pid P, gateway ws://H:PORT): live, lease ends in 8.2 s, 40 live
    loops`` for one line of ``status`` (no gateway: a runtime that serves none)."""
    gateway = f", gateway {lease.gateway}" if lease.gateway else ""
    where = f"host {lease.host}, pid {lease.pid}{gateway}"
    head = f"node {lease.node_id} ({terminal_safe(where)}): {lease.state}"
    if lease.lease_left is not None:
        owned = f", {lease.loops} live loop{'s' * (lease.loops != 1)}"
        return f"{head}, lease ends in {max(lease.lease_left, 0.0):.1f} s{owned}"
    return f"{head} (declared so by {lease.dead_by})" if lease.dead_by else head


async def show_history(
    control: LoopCommands, args: argparse.Namespace, *, output_head: int | None = None
) -> int:
    """``history LOOP_ID``: its rounds, as a table (with ``--transcript``) or JSON; with
    ``--round N``, that round's whole output (its record, with ``--json``); with
    ``--compare REPLAY_ID``, the replayed round beside the replay's (docs/replay.md)."""
    if getattr(args, "round", None) is not None:
        state = await control.get(args.loop_id)
        record = await control.output(state.loop_id, args.round)
        return print_round(args, record)
    state = await control.get(args.loop_id)
    rounds = await control.history(state.loop_id, output_head=output_head)
    compare = getattr(args, "compare", None)
    if compare is not None:
        replay_state = await control.get(compare)
        replay_rounds = await control.history(replay_state.loop_id, output_head=output_head)
        original, replayed = replay_pair(state, rounds, replay_state, replay_rounds)
        return print_comparison(args, (state, original), (replay_state, replayed))
    return print_history(args, state, rounds)


def print_round(args: argparse.Namespace, record: RoundRecord) -> int:
    """One round: its whole output on stdout (a round that did not complete: its status and
    error on stderr), control characters made visible (``--json``: as recorded)."""
    if args.json:
        print(_json.encode(record).decode())
        return 0
    if record.output:
        output = terminal_safe(record.output)
        print(output, end="" if output.endswith("\n") else "\n")
    if getattr(args, "transcript", False) and record.transcript:
        from ..agent import format_transcript  # noqa: PLC0415 - see the note on the imports

        print(f"\n=== round {record.round} transcript")
        print(terminal_safe(format_transcript(record.transcript)))
    if record.status != "completed":
        error = f": {terminal_safe(record.error)}" if record.error else ""
        print(f"round {record.round} {record.status}{error}", file=sys.stderr)
    return 0


def _check_text(record: RoundRecord) -> str:
    """The round's ``until`` check, where the loop had one (``-`` otherwise)."""
    check = getattr(record, "check", None)
    if check is None:
        return "-"
    code = getattr(check, "exit_code", None)
    return "passed" if code == 0 else f"failed (exit {code})"


def _cost(record: RoundRecord) -> str:
    return f"${record.cost_usd:.4f}" if record.cost_usd else "-"


def print_comparison(
    args: argparse.Namespace,
    original: tuple[LoopState, RoundRecord],
    replay: tuple[LoopState, RoundRecord | None],
) -> int:
    """A replayed round and its replay side by side: output head, tokens, cost, check."""
    (first, was), (second, now) = original, replay
    if args.json:
        payload = {
            "original": {"loop_id": first.loop_id, "worker": first.spec.worker, "round": was},
            "replay": {"loop_id": second.loop_id, "worker": second.spec.worker, "round": now},
        }
        print(_json.encode(payload).decode())
        return 0
    from rich.console import Console  # noqa: PLC0415 - see the note on the imports

    from ._tables import Column, Rows, print_rows  # noqa: PLC0415

    def cells(record: RoundRecord | None) -> list[str]:
        if record is None:
            return ["not run yet", "-", "-", "-", "-", "-"]
        return [
            record.status,
            "?" if record.duration is None else f"{record.duration:.2f}s",
            str(record.tokens),
            _cost(record),
            _check_text(record),
            (record.output or record.error or "")[:_OUTPUT_SHOWN],
        ]

    names = ["status", "duration", "tokens", "cost", "check", "output"]
    left, right = cells(was), cells(now)
    rows = [["loop", f"{first.loop_id} round {was.round}", f"{second.loop_id} round 1"]]
    rows.append(["worker", first.spec.worker, second.spec.worker])
    rows += [[name, a, b] for name, a, b in zip(names, left, right, strict=True)]
    columns = [
        Column(""),
        Column("original", flex=True),
        Column("replay", flex=True),
    ]
    print_rows(Console(), Rows(columns, rows, title="replayed round"))
    return 0


async def stop_loop(control: LoopCommands, args: argparse.Namespace) -> int:
    state = await control.stop(args.loop_id, after_round=args.after_round)
    if state.phase == "cancelled":
        done = f"cancelled after {state.completed_rounds} completed round(s)"
    elif state.stop_requested == "after_round":
        done = f"stops after the round in flight (round {state.round})"
    else:
        done = f"already {state.phase}"
    return _print_done(args, state, done)


async def pause_loop(control: LoopCommands, args: argparse.Namespace) -> int:
    state = await control.pause(args.loop_id)
    if state.phase == "paused":
        done = f"paused at round {state.round}"
    elif state.pause_requested:
        done = (
            f"pauses once round {state.round} (running now) is recorded; "
            "no next round is dispatched"
        )
    else:
        done = f"already {state.phase}"
    return _print_done(args, state, done)


async def resume_loop(control: LoopCommands, args: argparse.Namespace) -> int:
    state = await control.resume(args.loop_id)
    if state.terminal:
        done = f"already {state.phase}"
    else:
        done = f"{state.phase}, round {state.round} (resumed)"
    return _print_done(args, state, done)


def _print_done(args: argparse.Namespace, state: LoopState, done: str) -> int:
    """What a stop, pause or resume did: the loop's state as JSON with ``--json``, else
    ``done`` after the loop's id."""
    print(_json.encode(shown(state)).decode() if args.json else f"{state.loop_id}: {done}")
    return 0


def print_history(args: argparse.Namespace, state: LoopState, rounds: list[RoundRecord]) -> int:
    if args.json:
        print(_json.encode({"loop": shown(state), "rounds": rounds}).decode())
        return 0
    from rich.console import Console  # noqa: PLC0415 - see the note on the imports

    from ._tables import Column, Rows, print_rows  # noqa: PLC0415

    columns = [
        Column("round", justify="right"),
        Column("status"),
        Column("duration", justify="right"),
        Column("output", flex=True),
    ]
    rows = [
        [
            str(record.round),
            record.status,
            "?" if record.duration is None else f"{record.duration:.2f}s",
            (record.output or record.error or "")[:_OUTPUT_SHOWN],
        ]
        for record in rounds
    ]
    if any(record.tasks_total is not None for record in rounds):  # a plan-driven loop
        columns.insert(3, Column("tasks", justify="right"))
        for row, record in zip(rows, rounds, strict=True):
            tasks = (
                "" if record.tasks_total is None else f"{record.tasks_done}/{record.tasks_total}"
            )
            row.insert(3, tasks)
    done = f"{state.completed_rounds}/{state.spec.rounds} completed"
    title = f"{state.loop_id}: {state.phase}, {done}"
    print_rows(Console(), Rows(columns, rows, title=title))
    if getattr(args, "transcript", False):
        for record in rounds:
            if record.transcript:
                print(f"\n=== round {record.round} transcript")
                from ..agent import format_transcript  # noqa: PLC0415 - see the note on imports

                print(terminal_safe(format_transcript(record.transcript)))
    return 0
