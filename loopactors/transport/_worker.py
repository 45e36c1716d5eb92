"""A worker process: takes round orders from Redis and runs them with the usual backends.

It joins the consumer group of the stream of each kind it runs (so it never sees orders of
another kind), runs up to ``slots`` rounds at once, and acknowledges an order only after its
report is on the results stream. Its heartbeat both says it is alive (for ``status``) and
keeps the idle time of the orders it holds short; an order idle past ``idle_timeout`` belongs
to a dead worker and any live one claims it (XAUTOCLAIM) and runs it again under the same key.
A stop on the control stream cancels the round here, as in-process: a command worker's
process group gets SIGTERM, then SIGKILL after ``kill_grace``.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import math
import os
import socket
import time
from pathlib import Path
from typing import Any

import attrs
import msgspec
import trio

from ..workers import CommandWorker, RoundResult, Worker, WorkerGroups, parse_worker, run_check
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
from ._sweep import drop_idle_consumers, expire_dead_workers
from ._url import redact_url
from ._wire import (
    CONTROL_STREAM,
    WORKER_GROUP,
    WORKERS_HASH,
    Heartbeat,
    RoundOrder,
    RoundReport,
    alive_key,
    cancelled_key,
    decode_order,
    decode_stop,
    encode,
    order_key,
    reported_key,
    rounds_stream,
    route_key,
)

__all__ = ["WorkerSettings", "default_worker_name", "serve_worker"]

log = logging.getLogger("loopactors.worker")

BLOCK_MS = 1000
#: Report a round and let go of its order, in one step: the report goes to the results
#: stream of the node that waits for the round now (its route; the order's own if none),
#: where it went is noted (a node taking the round over moves it from there), and the order
#: is acknowledged and deleted, its index too if it names this order. KEYS: the route, the
#: reported note, the order's stream, the order's index; ARGV: the report, the order's
#: ``reply_to``, the worker group, the order's entry id, the note's expiry. The results
#: stream is a key the script reads from the route: a single Redis, not a cluster.
REPORT = """
local stream = redis.call('GET', KEYS[1]) or ARGV[2]
local id = redis.call('XADD', stream, '*', 'report', ARGV[1])
redis.call('SET', KEYS[2], stream .. ' ' .. id, 'EX', ARGV[5])
redis.call('XACK', KEYS[3], ARGV[3], ARGV[4])
redis.call('XDEL', KEYS[3], ARGV[4])
if redis.call('GET', KEYS[4]) == ARGV[4] then
  redis.call('DEL', KEYS[4])
end
return id
"""
#: How long a report's note (and a round's route) outlives the report: longer than a node
#: takes to come back or be taken over.
REPORTED_SECONDS = 7 * 24 * 3600
#: Stops remembered for rounds this worker has not (yet) got: a stop can overtake an order.
STOPS_REMEMBERED = 10_000


def default_worker_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@attrs.frozen(kw_only=True)
class WorkerSettings:
    url: str
    kinds: tuple[str, ...]
    slots: int = 4
    name: str = attrs.field(factory=default_worker_name)
    kill_grace: float = 5.0
    #: Seconds between heartbeats.
    heartbeat: float = 1.0
    #: An order held this long without a heartbeat is taken over by another worker.
    idle_timeout: float = 15.0
    #: An order taken more often than this (its workers died) fails instead of running again.
    max_deliveries: int = 5
    #: Where this process lists its command rounds' process groups, so that if it is killed
    #: the machine's next worker process ends them (``workers.WorkerGroups``); None: unlisted.
    groups_dir: Path | None = None

    def __attrs_post_init__(self) -> None:
        if self.slots < 1:
            raise ValueError(f"slots must be >= 1, got {self.slots}")
        if not self.kinds:
            raise ValueError("a worker needs at least one kind")
        if self.max_deliveries < 1:
            raise ValueError(f"max_deliveries must be >= 1, got {self.max_deliveries}")
        if not 0 < self.heartbeat < self.idle_timeout:
            raise ValueError("the heartbeat must be > 0 and shorter than the idle timeout")


class _Held:
    """An order this worker holds: queued locally or running."""

    __slots__ = ("entry_id", "order", "scope", "stopped", "stream")

    def __init__(self, stream: str, entry_id: str, order: RoundOrder) -> None:
        self.stream = stream
        self.entry_id = entry_id
        self.order = order
        self.scope: trio.CancelScope | None = None
        self.stopped = False


async def serve_worker(
    settings: WorkerSettings, *, task_status: Any = trio.TASK_STATUS_IGNORED
) -> None:
    """Run a worker until cancelled; started once it has said hello to Redis."""
    name = client_name("worker", settings.name)
    try:
        async with open_redis(settings.url, name=name) as client:
            process = _WorkerProcess(settings, client)
            await process.serve(task_status)
    finally:
        # Say goodbye on a fresh connection (a cancelled one is closed mid-command); the
        # orders it held are taken over by the other workers after the idle timeout, and its
        # consumers that hold nothing go now.
        with trio.move_on_after(2) as cleanup:
            cleanup.shield = True
            try:
                async with open_redis(settings.url, name=name) as client:
                    await client.hdel(WORKERS_HASH, [settings.name])
                    await client.delete([alive_key(settings.name)])
                    streams = [rounds_stream(kind) for kind in settings.kinds]
                    await drop_idle_consumers(client, streams, settings.name)
            except Exception:
                log.warning("worker %s could not say goodbye to redis", settings.name)


class _WorkerProcess:
    def __init__(self, settings: WorkerSettings, client: Any) -> None:
        self.s = settings
        self.client = client
        self.streams = [rounds_stream(kind) for kind in settings.kinds]
        self.held: dict[str, _Held] = {}  # key -> order, queued or running
        self.queue: collections.deque[_Held] = collections.deque()
        self.running = 0
        self.changed = trio.Event()
        self.stops: collections.OrderedDict[str, None] = collections.OrderedDict()
        self.backends: dict[str, Worker] = {}
        self.rounds_run = 0
        self.process_groups: WorkerGroups | None = None

    @property
    def free(self) -> int:
        return self.s.slots - self.running - len(self.queue)

    def _wake(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    async def serve(self, task_status: Any) -> None:
        await self._list_process_groups()
        await self._ensure_groups()
        await retry("saying hello", self.s.url, self._beat)
        log.info(
            "worker %s on %s: kinds %s, %d slot(s)",
            self.s.name,
            redact_url(self.s.url),
            ",".join(self.s.kinds),
            self.s.slots,
        )
        try:
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                control_from = await self._control_tail()
                nursery.start_soon(self._take_orders)
                nursery.start_soon(self._reclaim)
                nursery.start_soon(self._heartbeat)
                nursery.start_soon(self._read_stops, control_from)
                nursery.start_soon(self._start_rounds)
                if self.process_groups is not None:
                    nursery.start_soon(self._end_dead_process_groups, self.process_groups)
                task_status.started()
        finally:
            if self.process_groups is not None:  # every round has ended its group by now
                self.process_groups.close()

    async def _list_process_groups(self) -> None:
        """List the command rounds' groups (docs/scale-out.md), once those that a worker
        process of this machine left when it was killed are ended."""
        if self.s.groups_dir is None:
            return
        try:
            listing = WorkerGroups(self.s.groups_dir)
            await listing.end_dead(self.s.kill_grace)
            listing.open()
        except OSError as exc:
            log.warning(
                "worker %s cannot list its command rounds' process groups in %s (%s): if "
                "it is killed, they run on",
                self.s.name,
                self.s.groups_dir,
                exc,
            )
            return
        self.process_groups = listing

    async def _end_dead_process_groups(self, listing: WorkerGroups) -> None:
        # As often as orders are reclaimed: a dead process's round ends here before it can
        # be taken over and run again elsewhere (when the dead one shared this machine).
        while True:
            await trio.sleep(self.s.idle_timeout / 4)
            await listing.end_dead(self.s.kill_grace)

    # -- taking orders -------------------------------------------------------------------------

    async def _ensure_groups(self) -> None:
        for stream in self.streams:
            await retry(
                "creating a consumer group",
                self.s.url,
                create_group,
                self.client,
                stream,
                WORKER_GROUP,
            )

    async def _take_orders(self) -> None:
        while True:
            if self.free <= 0:
                await self.changed.wait()
                continue
            try:
                reply = await self.client.xreadgroup(
                    WORKER_GROUP,
                    self.s.name,
                    streams=dict.fromkeys(self.streams, ">"),
                    count=self.free,
                    block=BLOCK_MS,
                )
            except RETRIED as exc:
                note_unreachable(self.s.url, "taking orders", exc, 0.2)
                await trio.sleep(0.2)
                continue
            except NO_GROUP:  # Redis restarted without its data
                await self._ensure_groups()
                continue
            note_reachable(self.s.url)
            for stream, entries in (reply or {}).items():
                self._hold(stream, entries)

    async def _reclaim(self) -> None:
        """Claim orders held too long by a worker that stopped beating (it died)."""
        idle_ms = int(self.s.idle_timeout * 1000)
        while True:
            await trio.sleep(self.s.idle_timeout / 4)
            with contextlib.suppress(*RETRIED_OR_NO_GROUP):  # the next pass tries again
                await expire_dead_workers(self.client)
            for stream in self.streams:
                if self.free <= 0:
                    break
                try:
                    reply = await self.client.xautoclaim(
                        stream, WORKER_GROUP, self.s.name, idle_ms, "0-0", count=self.free
                    )
                except RETRIED_OR_NO_GROUP:
                    break
                entries = reply[1]
                if entries:
                    log.info("worker %s reclaimed %d round(s)", self.s.name, len(entries))
                    entries = await self._drop_poison(stream, entries)
                self._hold(stream, entries)

    async def _drop_poison(self, stream: str, entries: Any) -> list[Any]:
        """Fail, instead of running again, an order whose workers died too often running it
        (a round that kills or exhausts its worker would otherwise go round forever)."""
        keep = []
        for entry in entries:
            try:
                [info] = await self.client.xpending(
                    stream, WORKER_GROUP, entry.identifier, entry.identifier, 1
                )
                deliveries = int(info.delivered)
            except RETRIED_OR_NO_GROUP:
                deliveries = 0  # Redis away: the usual path decides
            except ValueError:
                deliveries = 0  # acknowledged meanwhile: nothing pending to count
            if deliveries <= self.s.max_deliveries:
                keep.append(entry)
                continue
            order = _order_of(entry)
            if order is None:
                self.nursery.start_soon(self._forget, stream, entry.identifier)
                continue
            log.warning(
                "worker %s: round %s was taken %d times by workers that died; failing it",
                self.s.name,
                order.request.key,
                deliveries - 1,
            )
            error = (
                f"the workers running this round died {deliveries - 1} times "
                f"(more than --max-deliveries {self.s.max_deliveries}); not run again"
            )
            held = _Held(stream, entry.identifier, order)
            self.nursery.start_soon(self._report, held, RoundResult(status="failed", error=error))
        return keep

    def _hold(self, stream: str, entries: Any) -> None:
        for entry in entries:
            order = _order_of(entry)
            if order is None:
                log.warning("dropping an unreadable order %s on %s", entry.identifier, stream)
                self.nursery.start_soon(self._forget, stream, entry.identifier)
                continue
            key = order.request.key
            already = self.held.get(key)
            if already is not None:
                if already.entry_id != entry.identifier:
                    # Published again: the run under way reports once for both.
                    self.nursery.start_soon(self._forget, stream, entry.identifier)
                # else: our own order, reclaimed by us after missed heartbeats: keep it held.
                continue
            held = self.held[key] = _Held(stream, entry.identifier, order)
            self.queue.append(held)
        self._wake()

    async def _start_rounds(self) -> None:
        while True:
            while self.queue and self.running < self.s.slots:
                held = self.queue.popleft()
                self.running += 1
                self.nursery.start_soon(self._run_round, held)
            await self.changed.wait()

    # -- running one round ---------------------------------------------------------------------

    async def _run_round(self, held: _Held) -> None:
        key = held.order.request.key
        started = time.monotonic()
        try:
            result = await self._result_of(held)
            result = msgspec.structs.replace(result, duration=time.monotonic() - started)
            await self._report(held, result)
            self.rounds_run += 1
        finally:
            self.running -= 1
            if self.held.get(key) is held:
                del self.held[key]
            self._wake()

    async def _report(self, held: _Held, result: RoundResult) -> None:
        key = held.order.request.key
        report = RoundReport(key=key, result=result, worker=self.s.name, entry_id=held.entry_id)
        # Done with it before the order leaves the stream: a node may publish the round
        # again as soon as it has, and that order must then run (not count as this one).
        if self.held.get(key) is held:
            del self.held[key]
        # The report and the order's acknowledgement in one step: never one without the
        # other, whatever happens to this process between them.
        await retry(
            "publishing a report",
            self.s.url,
            self.client.eval,
            REPORT,
            keys=[route_key(key), reported_key(key), held.stream, order_key(key)],
            args=[
                encode(report).decode(),
                held.order.reply_to,
                WORKER_GROUP,
                held.entry_id,
                REPORTED_SECONDS,
            ],
        )

    async def _result_of(self, held: _Held) -> RoundResult:
        request = held.order.request
        if request.key in self.stops or await retry(
            "checking for a stop", self.s.url, self.client.exists, [cancelled_key(request.key)]
        ):
            return RoundResult(status="cancelled", error="round stopped before it started")
        try:
            backend = self._backend(request.worker)
        except Exception as exc:
            return RoundResult(status="failed", error=f"{type(exc).__name__}: {exc}")
        if backend.kind not in self.s.kinds:
            return RoundResult(
                status="failed", error=f"worker {self.s.name} does not run {backend.kind!r}"
            )
        timeout = held.order.timeout
        scope = held.scope = trio.CancelScope(deadline=trio.current_time() + timeout)
        result: RoundResult | None = None
        with scope:
            try:
                result = await backend.run(request, None)
                if request.until is not None and result.status == "completed":
                    # The loop's check, where the round ran: its own timeout, a stop ends it.
                    scope.deadline = math.inf
                    check = await run_check(
                        request.until,
                        cwd=backend.workspace_of(request),
                        timeout=request.until_timeout,
                        kill_grace=self.s.kill_grace,
                        env={
                            "LOOPACTORS_LOOP_ID": request.loop_id,
                            "LOOPACTORS_ROUND": str(request.round),
                            **request.env,
                        },
                        max_output_bytes=request.max_output_bytes,
                    )
                    result = msgspec.structs.replace(result, check=check)
            except Exception as exc:  # a worker bug fails the round, not the process
                result = RoundResult(status="failed", error=f"{type(exc).__name__}: {exc}")
        if result is not None:
            return result
        if held.stopped:
            return RoundResult(status="cancelled", error="round cancelled")
        return RoundResult(
            status="timed_out", error=f"round took longer than its timeout of {timeout} s"
        )

    def _backend(self, spec: str) -> Worker:
        backend = self.backends.get(spec)
        if backend is None:
            backend = parse_worker(spec, kill_grace=self.s.kill_grace)
            if isinstance(backend, CommandWorker) and self.process_groups is not None:
                backend = attrs.evolve(backend, groups=self.process_groups)
            self.backends[spec] = backend
        return backend

    async def _forget(self, stream: str, entry_id: str) -> None:
        """Acknowledge and delete an order: the stream's length is then its backlog."""
        await retry("acknowledging", self.s.url, self.client.xack, stream, WORKER_GROUP, [entry_id])
        await retry("deleting", self.s.url, self.client.xdel, stream, [entry_id])

    # -- heartbeat and stops -------------------------------------------------------------------

    async def _heartbeat(self) -> None:
        while True:
            await trio.sleep(self.s.heartbeat)
            with contextlib.suppress(*RETRIED_OR_NO_GROUP):  # the next beat tries again
                await self._beat()

    async def _beat(self) -> None:
        beat = Heartbeat(
            name=self.s.name,
            kinds=self.s.kinds,
            slots=self.s.slots,
            in_flight=self.running,
            at=time.time(),
        )
        await self.client.hset(WORKERS_HASH, {self.s.name: encode(beat).decode()})
        expiry = max(int(self.s.idle_timeout * 1000), 1)
        await self.client.set(alive_key(self.s.name), "1", px=expiry)
        by_stream: dict[str, list[str]] = {}
        for held in list(self.held.values()):
            by_stream.setdefault(held.stream, []).append(held.entry_id)
        for stream, ids in by_stream.items():
            # Claiming our own entries resets their idle time: nobody reclaims them.
            await self.client.xclaim(stream, WORKER_GROUP, self.s.name, 0, ids, justid=True)

    async def _control_tail(self) -> str:
        last = await retry(
            "reading the control stream",
            self.s.url,
            self.client.xrevrange,
            CONTROL_STREAM,
            count=1,
        )
        return last[0].identifier if last else "0-0"

    async def _read_stops(self, after: str) -> None:
        while True:
            try:
                reply = await self.client.xread({CONTROL_STREAM: after}, count=256, block=BLOCK_MS)
            except RETRIED:
                await trio.sleep(0.2)
                continue
            for entry in (reply or {}).get(CONTROL_STREAM, ()):
                after = entry.identifier
                try:
                    stop = decode_stop(entry.field_values["stop"])
                except Exception:
                    continue
                self._stop(stop.key)

    def _stop(self, key: str) -> None:
        self.stops[key] = None
        if len(self.stops) > STOPS_REMEMBERED:
            self.stops.popitem(last=False)
        held = self.held.get(key)
        if held is not None and held.scope is not None:
            log.info("worker %s stopping round %s", self.s.name, key)
            held.stopped = True
            held.scope.cancel()


def _order_of(entry: Any) -> RoundOrder | None:
    raw = entry.field_values.get("order") if entry.field_values else None
    try:
        return decode_order(raw or "")
    except msgspec.DecodeError:
        return None
