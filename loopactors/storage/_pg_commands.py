"""Commands routed to the node that owns their loop, and events relayed to the nodes whose
clients follow it, on a PostgreSQL store shared by several nodes (docs/multinode.md).

A node asked to stop, pause or resume a loop another node owns, or to start a child of it,
inserts the command into the ``commands`` table and NOTIFYs; the owner, LISTENing on a
connection of its own (waited on from trio by its socket, no thread), applies the pending
commands of the loops it owns (a child is admitted by its parent's owner, in the parent's
tree), writes each answer (the loop's state after it, the child's first state, or the
error) and NOTIFYs back; the sender
reads the answer and deletes the row. A command for a loop no node owns (its node died or
left) waits for the node that claims it. Notifications are hints only: both sides also
read the table every :data:`POLL` seconds, so a lost notification delays a command, never
loses it.

Events: a node NOTIFYs (coalesced, its id as payload) when its own loops had events; each
node reads, for the loops its clients follow that other nodes own, the events numbered after
the last it delivered (the events table is the truth) and hands them to their followers on
its local bus. While a client here follows every loop (``cluster``), it also reads the
events the other nodes wrote that became visible since its last read: each events row
names the transaction that wrote it, and a read keeps its snapshot's horizon (``xmax``)
and the transactions in flight then (``xip``); the next read takes exactly the rows of
those transactions and of later ones, so each event comes once, whatever order the
transactions commit in.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Container
from typing import Any

import msgspec
import trio

from .._util import closed_on_failure
from ..errors import (
    AdmissionRefused,
    CommandNotAnswered,
    LoopactorsError,
    LoopNotFound,
    RemoteError,
    StoreError,
)
from ..loops import TERMINAL_PHASES, AnyEvent, LoopFinished, LoopState, event_decoder
from ._kinds import RelayTarget, StoreUrl
from ._postgres import _HELD, Holding, _psycopg, writer_of

__all__ = [
    "ANSWERS_CHANNEL",
    "COMMANDS_CHANNEL",
    "EVENTS_CHANNEL",
    "POLL",
    "Routes",
    "open_routes",
]

log = logging.getLogger("loopactors.store")

#: Where a sender says a command waits (payload: the loop id).
COMMANDS_CHANNEL = "loopactors_commands"
#: Where an owner says a command is answered (payload: the command's id).
ANSWERS_CHANNEL = "loopactors_answers"
#: Where a node says its loops had new events (payload: its node id).
EVENTS_CHANNEL = "loopactors_events"
#: Seconds between reads of the table when no notification came (the fallback).
POLL = 2.0
#: Seconds between two event notifications of one node: one per batch of commits.
NOTIFY_EVERY = 0.02
#: Loops remembered as ended on this node (its own, followed first-hand to their end).
ENDED_KEPT = 10_000

#: Applies a command (the loop's id, the command, its stop mode, a start's request) to a
#: loop of this node: its state after (a start's: the new child's), or None when the loop is
#: not (yet) run here (claimed but not recovered): the command is tried again later.
Apply = Callable[[str, str, str, bytes | None], Awaitable[LoopState | None]]

_INSERT = f"""WITH c AS (
    INSERT INTO commands (loop_id, command, stop_mode, sent_by, request)
    VALUES (%s, %s, %s, %s, %s)
    RETURNING id, loop_id
) SELECT id, pg_notify('{COMMANDS_CHANNEL}', loop_id) FROM c"""
# The commands waiting for the loops this node owns (those in hand are left out).
_PENDING = """SELECT c.id, c.loop_id, c.command, c.stop_mode, c.request FROM commands c
    JOIN loops l ON l.loop_id = c.loop_id
    WHERE c.answered_at IS NULL AND l.owner = %s AND NOT (c.id = ANY(%s::int8[])) ORDER BY c.id"""
_ANSWER = f"""WITH a AS (
    UPDATE commands SET answered_at = clock_timestamp(), state = %s, error_code = %s,
        error = %s
    WHERE id = %s AND answered_at IS NULL RETURNING id
) SELECT pg_notify('{ANSWERS_CHANNEL}', id::text) FROM a"""
# A command's answer, and its loop as it stands (the loop may have ended meanwhile).
_READ = """SELECT l.phase, l.state, c.answered_at IS NOT NULL, c.state, c.error_code, c.error
    FROM loops l LEFT JOIN commands c ON c.id = %s WHERE l.loop_id = %s"""
# Where the followed loops stand: their last event's number, and whether they are this node's.
_FOLLOWED = """SELECT loop_id, event_seq, owner IS NOT DISTINCT FROM %s FROM loops
    WHERE loop_id = ANY(%s)"""
# The events of each loop after the last one delivered, in order.
_NEW_EVENTS = """SELECT e.loop_id, e.seq, e.event FROM events e
    JOIN unnest(%s::text[], %s::int8[]) AS w (loop_id, after)
        ON e.loop_id = w.loop_id AND e.seq > w.after
    ORDER BY e.loop_id, e.seq"""
# Where the events table stands: what a read's snapshot sees (the first read of every loop).
_HORIZON = """SELECT txid_snapshot_xmax(t.s), ARRAY(SELECT txid_snapshot_xip(t.s))
    FROM (SELECT txid_current_snapshot() AS s) t"""
# The events other nodes wrote that the last read's snapshot did not see (written by a
# transaction in flight then, or by a later one), and where this read's snapshot stands:
# one row with no event when there is none.
_CLUSTER_EVENTS = """SELECT txid_snapshot_xmax(t.s), ARRAY(SELECT txid_snapshot_xip(t.s)),
        e.loop_id, e.event
    FROM (SELECT txid_current_snapshot() AS s) t
    LEFT JOIN events e ON (e.tx >= %s::int8 OR e.tx = ANY(%s::int8[])) AND e.writer <> %s::int8
    ORDER BY e.loop_id, e.seq"""
# Answers nobody read for an hour: their senders went away.
_FORGET = """DELETE FROM commands
    WHERE answered_at < clock_timestamp() - interval '1 hour'"""
_OWNER = """SELECT l.owner, n.state, n.host, n.pid FROM loops l
    LEFT JOIN nodes n ON n.node_id = l.owner WHERE l.loop_id = %s"""


class Routes:
    """One node's end of the commands table: :meth:`send` for commands to loops other nodes
    own, :meth:`serve` to apply those sent to its own."""

    def __init__(
        self,
        url: str,
        *,
        shown: str,
        node_id: str,
        timeout: float,
        holding: Holding | None = None,
    ) -> None:
        """``holding``: what the node holds (:func:`open_routes` gives the lease's). The
        loops it owns (the fences it holds, kept up to date by its commits and claims) have
        their events on its own bus first-hand: the relay asks the database only about the
        other loops followed here. While it knows of no other node on the store, it tells
        nobody of its events."""
        pg = _psycopg()
        self.shown = shown
        self.node_id = node_id
        self._holding = holding
        self._owned: Container[str] = () if holding is None else holding.fences
        self.timeout = timeout
        self._error: type[Exception] = pg.Error
        self._decoder = msgspec.json.Decoder(LoopState)
        self._waiting: dict[int, trio.Event] = {}
        #: Answers heard before their sender began waiting (it was still reading its id).
        self._early: set[int] = set()
        self._in_hand: set[int] = set()
        self._wake = trio.Event()
        #: Relayed loops (followed here, owned elsewhere): the last event number delivered.
        self._relayed: dict[str, int] = {}
        #: What a replay read of a loop's log saw before its relay started (its length).
        self._seen: dict[str, int] = {}
        self._relay_wake = trio.Event()
        #: While something here follows every loop: where the last read of the events
        #: table stood (its snapshot's xmax and in-flight transactions); None otherwise.
        self._horizon: tuple[int, list[int]] | None = None
        self._writer = writer_of(node_id)
        self._local_events = trio.Event()
        #: The last ENDED_KEPT loops that ended here, as an ordered set: all their events
        #: were published here and none comes after, so a follower needs no relay of them.
        self._ended: dict[str, None] = {}
        self._url = url
        self._replacing = threading.Lock()
        #: Set by :meth:`close`: a thread still running (abandoned by a cancelled caller)
        #: opens no new connection after it, which nobody would close.
        self._closed = False
        self._connect: Callable[[str], Any] = lambda name: pg.connect(
            url, autocommit=True, application_name=name
        )
        try:
            # Statements from worker threads, one at a time (psycopg's own lock).
            self._conn = self._connect("loopactors commands")
            with closed_on_failure(self._conn):
                # Said once as it starts: a node that knew of no other one tells this one
                # of its events from now on.
                self._conn.execute("SELECT pg_notify(%s, %s)", (EVENTS_CHANNEL, node_id))
                self._listen = self._listening()
        except pg.Error as exc:
            raise StoreError(f"cannot connect to the store {shown}: {exc}") from None

    def _listening(self) -> Any:
        """A connection LISTENing on the three channels; only waited on from trio (its
        socket), never from a thread."""
        conn = self._connect("loopactors listen")
        with closed_on_failure(conn):
            for channel in (COMMANDS_CHANNEL, ANSWERS_CHANNEL, EVENTS_CHANNEL):
                conn.execute(f"LISTEN {channel}")
        return conn

    def close(self) -> None:
        with self._replacing:
            self._closed = True
        self._listen.close()
        with self._conn.lock:  # after the statement in flight, if any
            self._conn.close()

    def _run(self, query: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        for attempt in (1, 2):
            conn = self._conn
            try:
                conn = self._reconnected()
                cursor = conn.execute(query, params)
                return cursor.fetchall() if cursor.description else []
            except self._error as exc:
                # Once more on a new connection if this one was lost: a statement is
                # harmless twice (a command applied twice is applied once).
                if attempt == 2 or not conn.closed:
                    raise StoreError(
                        f"cannot route a command through the store {self.shown}: {exc}"
                    ) from None
        raise AssertionError("unreachable")

    def _reconnected(self) -> Any:
        """The connection for statements, a new one if it was lost (the server restarted,
        or ended it); one thread at a time replaces it."""
        with self._replacing:
            if self._conn.closed:
                self._conn.close()  # its resources too
                if self._closed:
                    raise StoreError(f"the routes of the store {self.shown} are closed")
                self._conn = self._connect("loopactors commands")
            return self._conn

    async def _sql(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        return await trio.to_thread.run_sync(self._run, query, params, abandon_on_cancel=True)

    # -- the sender's side -----------------------------------------------------------------

    async def send(self, loop_id: str, command: str, stop_mode: str) -> LoopState:
        """Have the node that owns ``loop_id`` apply ``command``; its answer: the loop's
        state after it (or the loop's final state, if it ended first).

        Raises:
            CommandNotAnswered: no answer within ``timeout`` (the command is withdrawn).
            LoopNotFound: the loop is gone (pruned meanwhile).
            RemoteError: the owner refused the command (its code and message).
        """
        return await self._send(loop_id, command, stop_mode, None, None)

    async def start(self, parent_id: str, child_id: str, request: bytes) -> LoopState:
        """Have the node that owns loop ``parent_id`` admit the child ``request`` describes
        (its id, ``child_id``, and spec; the owner decodes it), in the parent's tree; the
        child's first state.

        Raises:
            CommandNotAnswered: no answer within ``timeout`` (the start is withdrawn).
            AdmissionRefused: the owner refused the child (its message), or the parent
                ended before its owner took the start.
            LoopNotFound: the parent is gone (pruned meanwhile).
            RemoteError: the owner failed otherwise (its code and message).
        """
        return await self._send(parent_id, "start", "now", request, child_id)

    async def _send(
        self, loop_id: str, command: str, stop_mode: str, request: bytes | None, child: str | None
    ) -> LoopState:
        [(command_id, _)] = await self._sql(
            _INSERT, loop_id, command, stop_mode, self.node_id, request
        )
        deadline = trio.current_time() + self.timeout
        try:
            while True:
                self._waiting[command_id] = answered = trio.Event()
                if command_id in self._early:
                    self._early.discard(command_id)
                    answered.set()
                with trio.move_on_at(min(deadline, trio.current_time() + POLL)):
                    await answered.wait()
                found = await self._answer(command_id, loop_id, child)
                if found is not None:
                    return found
                if trio.current_time() >= deadline:
                    withdrawn = await self._sql(
                        "DELETE FROM commands WHERE id = %s AND answered_at IS NULL RETURNING 1",
                        command_id,
                    )
                    if withdrawn:
                        raise await self._not_answered(loop_id, command)
                    # Answered at the last moment: that answer stands.
        finally:
            self._waiting.pop(command_id, None)

    async def _answer(self, command_id: int, loop_id: str, child: str | None) -> LoopState | None:
        """The command's answer if it came (the row is then deleted), the loop's final
        state if it ended unanswered (withdrawn), else None. A start (``child``: the id of
        the loop it starts) whose parent ended unanswered gets the child if its admission
        went through meanwhile, else a refusal."""
        rows = await self._sql(_READ, command_id, loop_id)
        if not rows:
            await self._sql("DELETE FROM commands WHERE id = %s", command_id)
            raise LoopNotFound(f"no loop {loop_id!r} in the store {self.shown} (pruned?)")
        phase, loop_state, done, state, code, error = rows[0]
        if done:
            await self._sql("DELETE FROM commands WHERE id = %s", command_id)
            if state is None:
                raise _refused(code or "internal", error or "the command failed", child)
            return self._decoder.decode(state)
        if phase in TERMINAL_PHASES:
            withdrawn = await self._sql(
                "DELETE FROM commands WHERE id = %s AND answered_at IS NULL RETURNING 1",
                command_id,
            )
            if withdrawn and child is None:  # any command on a finished loop: its final state
                return self._decoder.decode(loop_state)
            if withdrawn:
                started = await self._sql("SELECT state FROM loops WHERE loop_id = %s", child)
                if started:  # admitted as the parent ended (and ended with it)
                    return self._decoder.decode(started[0][0])
                raise AdmissionRefused(
                    f"parent loop {loop_id!r} is not live (it ended); a child loop lives in "
                    "its parent's scope"
                )
        return None

    async def _not_answered(self, loop_id: str, command: str) -> CommandNotAnswered:
        rows = await self._sql(_OWNER, loop_id)
        owner, state, host, pid = rows[0] if rows else (None, None, None, None)
        waited = f"in {self.timeout:.0f} s"
        if owner is None or state != "live":
            return CommandNotAnswered(
                f"no live node owns loop {loop_id!r} (its node died or left) and no node "
                f"claimed it {waited}: the {command} was not applied; try again"
            )
        return CommandNotAnswered(
            f"the node {owner} (host {host}, pid {pid}) that runs loop {loop_id!r} did not "
            f"answer the {command} {waited}: it was not applied; try again"
        )

    # -- the owner's side ------------------------------------------------------------------

    async def serve(self, apply: Apply) -> None:
        """Apply the commands sent for this node's loops, as they come, until cancelled;
        wake the senders waiting here as their answers come."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._hear)
            polls = 0
            while True:
                self._wake = trio.Event()
                try:
                    pending = await self._sql(_PENDING, self.node_id, list(self._in_hand))
                except StoreError as exc:
                    log.warning("%s; trying again", exc)
                    pending = []
                polls += 1
                if polls % 100 == 0:
                    with contextlib.suppress(StoreError):  # left by senders that went away
                        await self._sql(_FORGET)
                for row in pending:
                    self._in_hand.add(row[0])
                    nursery.start_soon(self._apply, apply, tuple(row))
                with trio.move_on_after(POLL):
                    await self._wake.wait()

    def poll(self) -> None:
        """Look for commands now (this node just claimed loops)."""
        self._wake.set()

    async def _apply(self, apply: Apply, row: tuple[Any, ...]) -> None:
        """Apply one pending command: ``row`` is its id, loop id, command, stop mode and
        request (a start's)."""
        command_id, loop_id, command, stop_mode, request = row
        try:
            try:
                state = await apply(loop_id, command, stop_mode, request)
            except LoopactorsError as exc:
                answer: tuple[Any, ...] = (None, exc.protocol_code or "internal", str(exc))
            else:
                if state is None:
                    return  # not run here yet: tried again at the next poll
                answer = (msgspec.json.encode(state), None, None)
            await self._sql(_ANSWER, *answer, command_id)
        except StoreError as exc:
            log.warning("%s; trying again", exc)
        finally:
            self._in_hand.discard(command_id)

    async def _hear(self) -> None:
        """Wait on the LISTEN connection's socket: a command for any loop wakes the server
        (it reads only its own loops' commands), an answer wakes its sender."""
        while True:
            conn = self._listen
            try:
                if conn.closed:  # lost: LISTEN again (the polls cover what was missed)
                    self._listen = conn = await trio.to_thread.run_sync(self._listening)
                await trio.lowlevel.wait_readable(conn.fileno())
                heard = list(conn.notifies(timeout=0))
            except (self._error, OSError) as exc:
                log.warning("LISTEN on %s failed (%s): polling meanwhile", self.shown, exc)
                with contextlib.suppress(self._error):
                    conn.close()
                await trio.sleep(POLL)
                continue
            for notice in heard:
                if notice.channel == COMMANDS_CHANNEL:
                    self._wake.set()
                elif notice.channel == EVENTS_CHANNEL:
                    if notice.payload != self.node_id:
                        self._relay_wake.set()
                        if self._holding is not None:
                            self._holding.heard += 1  # another node is here: tell it
                else:
                    with contextlib.suppress(ValueError):
                        command_id = int(notice.payload)
                        waiting = self._waiting.get(command_id)
                        if waiting is not None:
                            waiting.set()
                        else:  # maybe its sender's, still reading its id; else another node's
                            if len(self._early) > 1_000:
                                self._early.clear()  # bounded: the poll covers any lost
                            self._early.add(command_id)

    # -- events ----------------------------------------------------------------------------

    def seen(self, loop_id: str, count: int) -> None:
        """A replay read ``count`` events of the loop's log: the relay of the loop delivers
        every event after those (the subscriber drops the ones it already has)."""
        if loop_id in self._relayed:
            self._relayed[loop_id] = min(self._relayed[loop_id], count)
        else:
            self._seen[loop_id] = count
        self._relay_wake.set()

    def follow(self) -> None:
        """A client here began following a loop: look at once whether it is relayed."""
        self._relay_wake.set()

    def local_event(self, event: AnyEvent) -> None:
        """An event was published on this node's bus (one of its own loops': relayed ones
        are not published there): tell the other nodes (coalesced)."""
        if self._holding is None or not self._holding.alone():
            self._local_events.set()
        if type(event) is LoopFinished:
            ended = self._ended
            ended[event.loop_id] = None
            if len(ended) > ENDED_KEPT:
                del ended[next(iter(ended))]

    async def relay(self, target: RelayTarget) -> None:
        """Until cancelled: hand ``target`` the new events of the loops other nodes own that
        are followed here (one by one, or all of them), and tell the other nodes when this
        one's loops had events."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._announce)
            while True:
                self._relay_wake = trio.Event()
                try:
                    await self._relay_once(set(target.followed()), target.relay_followed)
                except StoreError as exc:
                    log.warning("%s; trying again", exc)
                try:
                    await self._relay_cluster(target)
                except StoreError as exc:  # the horizon stays: the next read takes it all
                    log.warning("%s; trying again", exc)
                with trio.move_on_after(POLL):
                    await self._relay_wake.wait()

    async def _relay_cluster(self, target: RelayTarget) -> None:
        """While something here follows every loop: hand it the events the other nodes
        wrote since the last read, each once."""
        if not target.cluster_wanted():
            self._horizon = None  # nothing read meanwhile: the next follower starts anew
            return
        if self._horizon is None:  # from now on
            [(xmax, xip)] = await self._sql(_HORIZON)
            self._horizon = (xmax, xip)
            return
        xmax, xip = self._horizon
        rows = await self._sql(_CLUSTER_EVENTS, xmax, xip, self._writer)
        self._horizon = (rows[0][0], rows[0][1])
        decode = event_decoder.decode
        for _, _, loop_id, data in rows:
            if loop_id is not None:
                target.relay_cluster(decode(data))

    async def _relay_once(self, followed: set[str], publish: Callable[[AnyEvent], None]) -> None:
        for loop_id in list(self._relayed):
            if loop_id not in followed:
                del self._relayed[loop_id]
        for loop_id in list(self._seen):
            if loop_id not in followed:
                del self._seen[loop_id]
        # A loop this node owns, or ran to its end, needs no read: a node's own loops are
        # most of what its clients follow, and each new follower wakes the relay.
        owned, ended = self._owned, self._ended
        others = sorted(
            loop_id for loop_id in followed if loop_id not in owned and loop_id not in ended
        )
        for loop_id in [loop_id for loop_id in self._relayed if loop_id in owned]:
            del self._relayed[loop_id]  # moved here: followed first-hand from now on
        if not others:
            return
        rows = await self._sql(_FOLLOWED, self.node_id, others)
        wanted: dict[str, int] = {}
        for loop_id, seq, mine in rows:
            if mine:  # this node's bus has them first-hand
                self._relayed.pop(loop_id, None)
                continue
            if loop_id not in self._relayed:  # followed from now on (or from a replay's read)
                self._relayed[loop_id] = min(seq, self._seen.pop(loop_id, seq))
            if seq > self._relayed[loop_id]:
                wanted[loop_id] = self._relayed[loop_id]
        if not wanted:
            return
        decode = event_decoder.decode
        found = await self._sql(_NEW_EVENTS, list(wanted), list(wanted.values()))
        for loop_id, seq, data in found:
            if loop_id in self._relayed and seq == self._relayed[loop_id] + 1:
                self._relayed[loop_id] = seq
                publish(decode(data))

    async def _announce(self) -> None:
        """NOTIFY the other nodes when this node's loops had events, at most once every
        :data:`NOTIFY_EVERY` seconds."""
        while True:
            await self._local_events.wait()
            self._local_events = trio.Event()
            try:
                await self._sql("SELECT pg_notify(%s, %s)", EVENTS_CHANNEL, self.node_id)
            except StoreError as exc:
                log.warning("%s; the other nodes read the events at their next poll", exc)
            await trio.sleep(NOTIFY_EVERY)


def _refused(code: str, message: str, child: str | None) -> Exception:
    """The error an owner's refusal is raised as here: a refused start (``child``: the loop
    it starts) as an admission refused here would be (protocol code ``rejected``), any
    other refusal by its code."""
    if child is not None and code == AdmissionRefused.protocol_code:
        return AdmissionRefused(message)
    return RemoteError.for_code(code, message)


@contextlib.asynccontextmanager
async def open_routes(url: StoreUrl, timeout: float) -> AsyncIterator[Routes]:
    """The routes of the node holding its lease on ``url`` (:func:`_hold` first)."""
    holding = _HELD.get(url.text)
    if holding is None:
        raise StoreError(f"no lease is held on the store {url.redacted}: commands cannot be routed")
    routes = await trio.to_thread.run_sync(
        lambda: Routes(
            url.text,
            shown=url.redacted,
            node_id=holding.node_id,
            timeout=timeout,
            holding=holding,
        )
    )
    try:
        yield routes
    finally:
        routes.close()
