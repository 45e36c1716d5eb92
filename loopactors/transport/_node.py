"""The node's side of the Redis transport: publish round orders, collect their reports.

Each round is an order on the stream of its worker kind; the round's task then waits for the
report with its idempotency key on the results stream. One reader task takes every report,
hands it to the round waiting for that key and acknowledges it; a report nobody waits for
any more (the loop was stopped, or the round was already reported by another worker after a
reclaim) is acknowledged and dropped. Stops go to every worker on the control stream, and a
flag with an expiry catches a stopped round a worker has not taken yet.

A node that restarts dispatches its rounds in flight again under the same keys; an order
whose key already has one on its stream (``order_key``: a worker still runs it, or it waits)
is not published again: the node waits for that one, so a round is never run by two workers
at once because its node was killed. A report that arrived while no node waited (the round
ended while its node was down) is held for a while instead of dropped, and before it
publishes anything a node reads every report waiting on the stream: a round already
reported is taken from there, not run again.

Nodes that share one Redis each have a name (``node_name``) and a results stream of their own.
A round's route names the stream of the node that waits for it now (set when it publishes
or adopts the order), and the worker reports there, acknowledging the order in the same
step. A node that takes a round over from another (a takeover on a shared store) adopts its
order if a worker still has it, so the report comes to it; if the round was already reported
to the other node's stream, it moves that report to its own: the round is not run again. A
report stays on its stream (acknowledged) until the round's record is durable
(``recorded``): a node that dies between taking a report and recording it leaves it there for
the node that dispatches the round next, itself restarted or another. A node publishes only
while its lease on a shared store cannot have ended (``may_publish``), so one woken from a
pause past its lease does not send a round it had in hand; should it adopt one back all the
same, the owner looks at its rounds' routes every few seconds and adopts them again.

While Redis is unreachable every operation retries with backoff: rounds wait in
``awaiting_worker`` and nothing is lost. If Redis comes back without its data (restarted with
no persistence: the node's epoch token is gone), every awaited order is published again
under the same key.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from typing import Any

import trio
from coredis.tokens import PureToken

from ..workers import RoundRequest, RoundResult, WorkerSpec
from ._backoff import RetryDelays
from ._base import RemoteTransport
from ._redis import (
    NO_GROUP,
    RETRIED,
    RETRIED_OR_NO_GROUP,
    client_name,
    create_group,
    note_reachable,
    note_unreachable,
    open_redis,
    retry,
)
from ._status import workers_serve
from ._sweep import expire_dead_workers
from ._url import redact_url
from ._wire import (
    CONTROL_STREAM,
    EPOCH_KEY,
    NODE_GROUP,
    RoundOrder,
    RoundReport,
    StopOrder,
    cancelled_key,
    decode_report,
    encode,
    order_key,
    reported_key,
    results_stream,
    rounds_stream,
    route_key,
)

__all__ = ["RedisTransport"]

log = logging.getLogger("loopactors.transport")

#: How long a stop flag lives: longer than any order waits in a healthy deployment.
CANCEL_FLAG_SECONDS = 24 * 3600
#: Entries the control stream keeps (workers read it live; old stops are useless).
CONTROL_MAXLEN = 10_000
#: How long one blocking read of the results stream waits before it looks again.
BLOCK_MS = 1000
#: Seconds between the node's sweeps for dead workers (live workers sweep too).
SWEEP_SECONDS = 5.0
#: How long, and how many, reports nobody waited for are held for a round dispatched again
#: (a node back after a restart or a takeover); past either the oldest go.
HELD_SECONDS = 600.0
HELD_MAX = 10_000


#: Publish a round's order, unless the latest order published for its key is still on the
#: stream (taken by a worker or waiting): then wait for that one (a node restarted, or took
#: the round over, while the round ran), its route now this node's results stream. Or,
#: unless the round was already reported (noted in its ``reported_key``) and the report is
#: still on a results stream (another node's, or this one's taken by a node that died before
#: recording it): then move that report to the end of this node's. KEYS: the stream, the
#: order's index, the route, the reported note, this node's results stream; ARGV: the order,
#: "1" to adopt (or move), "2" to adopt or move only (never publish), the keys' expiry, the
#: nodes' group. Returns [entry id, 0 published, 1 adopted, 2 moved (the id is the report's
#: in this node's stream), 3 none of these (with "2")]. The other node's stream is a key read
#: from the note: a single Redis, not a cluster.
PUBLISH_OR_ADOPT = """
if ARGV[2] ~= '0' then
  local id = redis.call('GET', KEYS[2])
  if id and #redis.call('XRANGE', KEYS[1], id, id) > 0 then
    redis.call('SET', KEYS[3], KEYS[5], 'EX', ARGV[3])
    return {id, 1}
  end
  local note = redis.call('GET', KEYS[4])
  if note then
    local stream, entry = string.match(note, '^(%S+) (%S+)$')
    if stream then
      local found = redis.call('XRANGE', stream, entry, entry)
      if #found > 0 then
        local moved = redis.call('XADD', KEYS[5], '*', unpack(found[1][2]))
        redis.call('XACK', stream, ARGV[4], entry)
        redis.call('XDEL', stream, entry)
        redis.call('SET', KEYS[4], KEYS[5] .. ' ' .. moved, 'EX', ARGV[3])
        redis.call('SET', KEYS[3], KEYS[5], 'EX', ARGV[3])
        return {moved, 2}
      end
    end
  end
  if ARGV[2] == '2' then
    return {'', 3}
  end
end
local id = redis.call('XADD', KEYS[1], '*', 'order', ARGV[1])
redis.call('SET', KEYS[2], id, 'EX', ARGV[3])
redis.call('SET', KEYS[3], KEYS[5], 'EX', ARGV[3])
return {id, 0}
"""
#: How long the index of an order outlives a worker that died before forgetting it.
ORDER_INDEX_SECONDS = 7 * 24 * 3600
#: Let go of the reports of rounds now recorded (or of reports nobody took in time): each
#: report's entry leaves this node's results stream, its note and route go if they still
#: name it. KEYS: this node's results stream, then each round's note and route; ARGV: each
#: round's report entry.
FORGET = """
for i, entry in ipairs(ARGV) do
  redis.call('XDEL', KEYS[1], entry)
  if redis.call('GET', KEYS[2 * i]) == KEYS[1] .. ' ' .. entry then
    redis.call('DEL', KEYS[2 * i])
  end
  if redis.call('GET', KEYS[2 * i + 1]) == KEYS[1] then
    redis.call('DEL', KEYS[2 * i + 1])
  end
end
return #ARGV
"""
#: Rounds let go of per call of FORGET.
FORGET_BATCH = 256
#: Seconds between two looks at the routes of the rounds waited for here (a node that woke
#: from a pause past its lease may have adopted one back).
ROUTE_CHECK_SECONDS = 3.0
#: A look at the routes this much later than due: this process was paused (or starved).
LATE_SECONDS = 1.0
#: Seconds between two looks at whether a round held back may be published (the node's
#: lease renewed again, or the node stopping).
LEASE_POLL_SECONDS = 0.05


class _Waiter:
    __slots__ = ("any_order", "done", "entry_id", "entry_ids", "order", "result", "stream")

    def __init__(self, stream: str, order: RoundOrder) -> None:
        self.stream = stream
        self.order = order
        self.entry_id: str | None = None
        #: Every order entry published (or adopted) for this wait: their reports are its.
        self.entry_ids: set[str] = set()
        #: A report moved here from another node's stream: the round's report, whichever
        #: order it answered.
        self.any_order = False
        self.result: RoundResult | None = None
        self.done = trio.Event()


class RedisTransport(RemoteTransport):
    """Rounds run on worker processes that share a Redis with the node."""

    knows_workers = True

    def __init__(
        self,
        url: str,
        *,
        consumer: str = "node",
        max_output_bytes: int = 1 << 20,
        node_name: str | None = None,
        may_publish: Callable[[], bool] | None = None,
    ) -> None:
        """``may_publish``: whether this node may hand a round to the workers now (its lease
        on a shared store cannot have ended); a round waits until it may (or is cancelled,
        as the node stops)."""
        self.url = url
        self._may_publish = may_publish
        self.max_output_bytes = max_output_bytes
        self._consumer = consumer
        #: Where this node's reports come (one stream per node name).
        self._results = results_stream(node_name)
        self._client: Any = None
        self._connected = trio.Event()
        self._epoch = secrets.token_hex(8)
        self._waiting: dict[str, _Waiter] = {}
        self._stops: list[str] = []
        self._stops_wake = trio.Event()
        self.reports_dropped = 0
        #: Reports nobody waited for, by round key, with when they came (monotonic) and
        #: their entry on the results stream.
        self._held: dict[str, tuple[RoundResult, float, str]] = {}
        #: Reports a round took, by round key: their entry (kept on the stream until the
        #: round is recorded) and when they were taken (monotonic).
        self._taken: dict[str, tuple[str, float]] = {}
        #: Reports to let go of: (round key, entry), and what wakes the task that does.
        self._forget: list[tuple[str, str]] = []
        self._forget_wake = trio.Event()
        # Set once the reports waiting on the stream at start-up are read (and held).
        self._drained = trio.Event()

    def __repr__(self) -> str:
        return f"RedisTransport({redact_url(self.url)!r})"

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Hold the client and run the report reader and the stop publisher.

        Started at once (rounds wait for the connection on their own), so a node starts while
        Redis is still down.
        """
        async with open_redis(self.url, name=client_name("node")) as client:
            self._client = client
            self._connected.set()
            task_status.started()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._read_reports)
                nursery.start_soon(self._publish_stops)
                nursery.start_soon(self._sweep_dead_workers)
                nursery.start_soon(self._forget_recorded)
                nursery.start_soon(self._keep_routes)

    async def _sweep_dead_workers(self) -> None:
        """Workers that stopped beating are marked dead, then removed (see ``_sweep``), even
        when no live worker is left to do it; and old reports leave this node's stream."""
        while True:
            await trio.sleep(SWEEP_SECONDS)
            try:
                await expire_dead_workers(self._client)
                # Reports older than their notes, which no node takes any more: left by a
                # node that died between recording rounds and letting go of their reports.
                oldest = int((time.time() - ORDER_INDEX_SECONDS) * 1000)
                await self._client.xtrim(self._results, PureToken.MINID, oldest)
            except RETRIED_OR_NO_GROUP:
                continue  # the report reader says when Redis is away

    async def run_remote(self, request: RoundRequest, timeout: float) -> RoundResult:
        """Publish the round's order and wait for its report (cancel the scope to stop it)."""
        key = request.key
        stream = rounds_stream(WorkerSpec.parse(request.worker).kind)
        # One wait per key: the Dispatcher runs a key once at a time.
        waiter = self._waiting[key] = _Waiter(
            stream,
            RoundOrder(
                request=request,
                timeout=timeout,
                published_at=time.time(),
                reply_to=self._results,
            ),
        )
        try:
            await self._connected.wait()
            await self._drained.wait()
            earlier = self._held.pop(key, None)
            if earlier is not None:
                log.info("round %s was reported while no node waited: taken, not run again", key)
                self._taken[key] = (earlier[2], time.monotonic())
                return earlier[0]
            await self._publish(waiter)
            late = self._held.pop(key, None)  # a report read before the publish returned
            if late is not None:
                self._taken[key] = (late[2], time.monotonic())
                return late[0]
            await waiter.done.wait()
            assert waiter.result is not None
            return waiter.result
        finally:
            if self._waiting.get(key) is waiter:
                del self._waiting[key]

    def recorded(self, keys: tuple[str, ...]) -> None:
        """These rounds are recorded: their reports leave the results stream."""
        taken = self._taken
        for key in keys:
            found = taken.pop(key, None)
            if found is not None:
                self._forget.append((key, found[0]))
        if self._forget:
            self._forget_wake.set()

    def cancel(self, key: str) -> None:
        """Stop the round with this key on whichever worker holds it (or will take it)."""
        self._stops.append(key)
        self._stops_wake.set()

    async def serving(self, kind: str) -> bool | None:
        """Whether a live worker (beating, not found dead) runs this kind; None while Redis
        cannot be read."""
        if self._client is None:
            return None
        try:
            return await workers_serve(self._client, kind)
        except RETRIED_OR_NO_GROUP:
            return None

    def statistics(self) -> dict[str, int]:
        return {
            "awaited": len(self._waiting),
            "reports_dropped": self.reports_dropped,
            "reports_held": len(self._held),
        }

    async def _publish(self, waiter: _Waiter, *, adopt: bool = True, only: bool = False) -> None:
        """Publish the waiter's order, or adopt the one on its stream, or move its report
        here; with ``only``, never publish (nothing to adopt or move: nothing done). Not
        while this node's lease may have ended: a node woken from a pause past its lease,
        with a round in hand, would publish it again after the node that took its loop over
        ran it, or take its order back; it stops instead, as soon as it finds out."""
        key = waiter.order.request.key
        if self._may_publish is not None and not self._may_publish():
            log.info("round %s waits: this node's lease on its store may have ended", key)
            while not self._may_publish():  # noqa: ASYNC110 - the store says, no event
                await trio.sleep(LEASE_POLL_SECONDS)
        entry_id, how = await retry(
            "publishing a round",
            self.url,
            self._client.eval,
            PUBLISH_OR_ADOPT,
            keys=[
                waiter.stream,
                order_key(key),
                route_key(key),
                reported_key(key),
                self._results,
            ],
            args=[
                encode(waiter.order).decode(),
                "2" if only else "1" if adopt else "0",
                ORDER_INDEX_SECONDS,
                NODE_GROUP,
            ],
        )
        if int(how) == 1:
            log.info("round %s is still on its worker's stream: waiting for it", key)
        elif int(how) == 2:
            log.info("round %s was reported to another node: its report moved here", key)
            waiter.any_order = True
        elif int(how) == 3:
            return
        waiter.entry_id = str(entry_id)
        waiter.entry_ids.add(waiter.entry_id)

    async def _read_reports(self) -> None:
        client = self._client
        # Reports delivered to an earlier incarnation and never acknowledged come first.
        start = "0"
        outage = True  # the epoch is checked (and set) on the first pass
        backoff = RetryDelays()
        while True:
            try:
                if outage:
                    await self._republish_lost()
                    outage = False
                await self._ensure_group()
                # No blocking until the reports waiting at start-up are all read.
                drained = self._drained.is_set()
                reply = await client.xreadgroup(
                    NODE_GROUP,
                    self._consumer,
                    streams={self._results: start},
                    count=256,
                    block=None if start == "0" or not drained else BLOCK_MS,
                )
            except NO_GROUP:
                continue  # created again on the next pass
            except RETRIED as exc:
                note_unreachable(self.url, "reading reports (rounds wait)", exc, backoff.cap)
                outage = True
                await trio.sleep(backoff.next_delay())
                continue
            if backoff.failures:
                note_reachable(self.url)
                backoff.reset()
            entries = reply.get(self._results, ()) if reply else ()
            if start == "0" and not entries:
                start = ">"
                continue
            if not entries and not drained:
                self._drained.set()
                continue
            done: list[str] = []
            useless: list[str] = []
            for entry in entries:
                done.append(entry.identifier)
                if not self._take_report(entry.field_values.get("report"), entry.identifier):
                    useless.append(entry.identifier)
            if done:
                await retry("acknowledging reports", self.url, self._ack, done, useless)
                if start == "0":  # acknowledged pending entries leave the pending list
                    continue

    async def _ack(self, ids: list[str], useless: list[str]) -> None:
        """Acknowledge reports read; delete at once those of no use to anyone. A report a
        round took, or that is held, stays on the stream until its round is recorded (or
        until it is let go of): a node dispatching the round next finds it there."""
        await self._client.xack(self._results, NODE_GROUP, ids)
        if useless:
            await self._client.xdel(self._results, useless)

    def _take_report(self, raw: str | None, entry_id: str = "") -> bool:
        """Hand a report to the round waiting for it, or hold it (or drop it); whether its
        entry is kept (a round took it, or it is held)."""
        if raw is None:
            self.reports_dropped += 1
            return False
        try:
            report = decode_report(raw)
        except Exception:
            self.reports_dropped += 1
            log.warning("dropped an unreadable round report")
            return False
        waiter = self._waiting.get(report.key)
        if waiter is None or waiter.entry_id is None:  # nobody waits, or not yet published
            return self._hold(report, entry_id)
        if report.entry_id and not waiter.any_order and report.entry_id not in waiter.entry_ids:
            # An order of this key published before, and gone from its stream when this
            # wait published its own: that one runs and reports; this one is history.
            self.reports_dropped += 1
            log.info("dropped the report of an earlier order of round %s", report.key)
            return False
        del self._waiting[report.key]
        waiter.result = report.result
        waiter.done.set()
        now = time.monotonic()
        taken = self._taken
        taken.pop(report.key, None)
        taken[report.key] = (entry_id, now)
        # A round never recorded (its loop fenced out, or stopped): let go in time.
        while taken:
            oldest = next(iter(taken))
            if len(taken) <= HELD_MAX and now - taken[oldest][1] <= HELD_SECONDS:
                break
            self._let_go(oldest, taken.pop(oldest)[0])
        return True

    def _hold(self, report: RoundReport, entry_id: str = "") -> bool:
        """Keep a report nobody waits for: the node may be back after its round ended (a
        restart, a takeover), and dispatch it again. A cancelled run is no result of the
        round: dropped, as is a report of a loop stopped or of a round reported twice
        (after a reclaim), once it is too old or too many others came after it. Whether it
        was kept."""
        if report.result.status == "cancelled":
            self.reports_dropped += 1
            return False
        now = time.monotonic()
        held = self._held
        earlier = held.pop(report.key, None)
        if earlier is not None:
            self._let_go(report.key, earlier[2])
        held[report.key] = (report.result, now, entry_id)
        while held:
            oldest = next(iter(held))
            if len(held) <= HELD_MAX and now - held[oldest][1] <= HELD_SECONDS:
                break
            self._let_go(oldest, held.pop(oldest)[2])
            self.reports_dropped += 1
        return True

    def _let_go(self, key: str, entry_id: str) -> None:
        """The report's entry leaves the stream (by the task that forgets reports)."""
        if entry_id:
            self._forget.append((key, entry_id))
            self._forget_wake.set()

    async def _forget_recorded(self) -> None:
        """Let go of reports of rounds recorded here, or of no use any more, in batches."""
        while True:
            await self._forget_wake.wait()
            self._forget_wake = trio.Event()
            while self._forget:
                batch, self._forget = self._forget[:FORGET_BATCH], self._forget[FORGET_BATCH:]
                keys = [self._results]
                for key, _ in batch:
                    keys += [reported_key(key), route_key(key)]
                entries = [entry for _, entry in batch]
                await retry(
                    "letting go of reports",
                    self.url,
                    self._client.eval,
                    FORGET,
                    keys=keys,
                    args=entries,
                )

    async def _keep_routes(self) -> None:
        """Every few seconds: a round waited for here whose route named another node's
        results stream at two looks in a row (a node that woke from a pause past its lease
        adopted it back) is adopted again, or its report moved here; never published
        again. Two looks, and none right after this process was itself paused (a look that
        comes late starts over): a node woken from a pause past its lease finds its rounds
        adopted by the node that took its loops over, and must not take them back in the
        moment before it finds out (at its next renewal) and stops."""
        elsewhere: set[str] = set()
        while True:
            due = trio.current_time() + ROUTE_CHECK_SECONDS
            await trio.sleep_until(due)
            if trio.current_time() > due + LATE_SECONDS:
                elsewhere = set()
                continue
            waiters = [w for w in self._waiting.values() if w.entry_id is not None]
            seen: set[str] = set()
            for start in range(0, len(waiters), FORGET_BATCH):
                chunk = waiters[start : start + FORGET_BATCH]
                try:
                    routes = await self._client.mget(
                        [route_key(w.order.request.key) for w in chunk]
                    )
                except RETRIED_OR_NO_GROUP:
                    break  # the report reader says when Redis is away
                for waiter, route in zip(chunk, routes, strict=True):
                    key = waiter.order.request.key
                    if route == self._results or self._waiting.get(key) is not waiter:
                        continue
                    if key not in elsewhere:
                        seen.add(key)
                        continue
                    log.warning(
                        "round %s was routed to %s: taking it back", key, route or "nowhere"
                    )
                    await self._publish(waiter, only=True)
            elsewhere = seen

    async def _ensure_group(self) -> None:
        await create_group(self._client, self._results, NODE_GROUP)

    async def _mark_epoch(self) -> bool:
        """Set this node's epoch token unless Redis holds one; False if Redis held none."""
        current = await self._client.get(EPOCH_KEY)
        if current is None:
            await self._client.set(EPOCH_KEY, self._epoch)
            return False
        self._epoch = current
        return True

    async def _republish_lost(self) -> None:
        """After an outage: if Redis lost its data, publish every awaited order again."""
        if await self._mark_epoch():
            return
        for waiter in list(self._waiting.values()):
            if waiter.entry_id is not None and not waiter.done.is_set():
                log.warning(
                    "round %s was lost by redis; publishing it again", waiter.order.request.key
                )
                await self._publish(waiter, adopt=False)

    async def _publish_stops(self) -> None:
        while True:
            await self._stops_wake.wait()
            self._stops_wake = trio.Event()
            keys, self._stops = self._stops, []
            for key in keys:
                await retry("publishing a stop", self.url, self._publish_stop, key)

    async def _publish_stop(self, key: str) -> None:
        await self._client.set(cancelled_key(key), "1", ex=CANCEL_FLAG_SECONDS)
        await self._client.xadd(
            CONTROL_STREAM,
            {"stop": encode(StopOrder(key=key)).decode()},
            trim_strategy=PureToken.MAXLEN,
            threshold=CONTROL_MAXLEN,
            trim_operator=PureToken.APPROXIMATELY,
        )
