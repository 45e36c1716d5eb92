"""Workers and backlog, read from Redis for ``loopactors status``.

``collect`` reads (one round trip per stream); ``render`` is pure and builds the rich tables.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec
from rich.table import Table
from rich.text import Text

from .._util import terminal_safe
from ..workers import served_by_default
from ._wire import (
    NODE_GROUP,
    RESULTS_STREAM,
    WORKER_GROUP,
    WORKERS_HASH,
    Heartbeat,
    alive_key,
    decode_heartbeat,
    rounds_stream,
)

__all__ = ["StreamBacklog", "TransportStatus", "collect", "render", "unserved", "workers_serve"]


class StreamBacklog(msgspec.Struct, frozen=True, kw_only=True):
    stream: str
    #: Entries not yet read by the group (``lag``).
    waiting: int
    #: Entries read and not yet acknowledged: rounds running (or held by a dead worker).
    pending: int


class TransportStatus(msgspec.Struct, frozen=True, kw_only=True):
    workers: list[Heartbeat]
    streams: list[StreamBacklog]


async def live_workers(client: Any) -> list[Heartbeat]:
    """The workers beating now (their liveness flag is there and no sweep found them dead)."""
    found = []
    for value in (await client.hgetall(WORKERS_HASH)).values():
        try:
            beat = decode_heartbeat(value)
        except msgspec.DecodeError:
            continue
        if beat.dead_since is None and await client.exists([alive_key(beat.name)]):
            found.append(beat)
    return found


async def workers_serve(client: Any, kind: str) -> bool:
    """Whether a live worker runs rounds of ``kind``."""
    return any(kind in beat.kinds for beat in await live_workers(client))


def unserved(status: TransportStatus) -> list[str]:
    """A line for each kind whose stream has rounds waiting or running that no live worker
    serves (they wait until one that does starts)."""
    alive = {k for w in status.workers if w.dead_since is None for k in w.kinds}
    prefix = rounds_stream("")
    lines = []
    for s in status.streams:
        kind = s.stream.removeprefix(prefix)
        if s.stream.startswith(prefix) and kind not in alive and s.waiting + s.pending:
            lines.append(
                f"no live worker serves {kind!r}: {s.waiting + s.pending} round(s) wait on "
                f"{s.stream}; start one with `loopactors worker --redis URL --kinds {kind}`"
            )
    return lines


async def collect(client: Any, *, now: float | None = None) -> TransportStatus:
    """Read-only: a worker whose liveness flag is gone shows as dead (``dead_since``) even
    before a sweep marked it (no node or worker may be running to sweep)."""
    now = time.time() if now is None else now
    raw = await client.hgetall(WORKERS_HASH)
    workers = []
    for value in raw.values():
        try:
            beat = decode_heartbeat(value)
        except msgspec.DecodeError:
            continue
        if beat.dead_since is None and not await client.exists([alive_key(beat.name)]):
            beat = msgspec.structs.replace(beat, dead_since=now)
        workers.append(beat)
    workers.sort(key=lambda w: w.name)
    kinds = sorted({*served_by_default(), *(k for w in workers for k in w.kinds)})
    streams = [(rounds_stream(kind), WORKER_GROUP) for kind in kinds]
    # Every node's results stream: the unnamed node's and each named one's.
    named = [
        str(name) async for name in client.scan_iter(match=f"{RESULTS_STREAM}:*", type_="stream")
    ]
    streams += [(name, NODE_GROUP) for name in [RESULTS_STREAM, *sorted(named)]]
    backlog = []
    for stream, group in streams:
        if not await client.exists([stream]):
            continue
        # No group yet: no reader of this stream ever came, so everything on it waits.
        waiting, pending = int(await client.xlen(stream)), 0
        for info in await client.xinfo_groups(stream):
            if info.get("name") == group:
                lag = info.get("lag")
                # lag is unknown (None) after deletions; the length then bounds it.
                waiting = int(lag) if lag is not None else int(await client.xlen(stream))
                pending = int(info.get("pending") or 0)
        backlog.append(StreamBacklog(stream=stream, waiting=waiting, pending=pending))
    return TransportStatus(workers=workers, streams=backlog)


def render(status: TransportStatus, *, now: float | None = None) -> list[Table]:
    now = time.time() if now is None else now
    workers = Table(title="workers")
    for column in ("name", "state", "kinds", "slots", "in flight", "last heartbeat"):
        workers.add_column(column)
    for w in status.workers:
        state = "alive" if w.dead_since is None else "dead"
        workers.add_row(
            _text(w.name),
            state,
            _text(",".join(w.kinds)),
            str(w.slots),
            str(w.in_flight),
            f"{now - w.at:.1f} s ago",
        )
    backlog = Table(title="streams")
    for column in ("stream", "waiting", "pending"):
        backlog.add_column(column)
    for s in status.streams:
        backlog.add_row(_text(s.stream), str(s.waiting), str(s.pending))
    return [workers, backlog]


def _text(value: str) -> Text:
    """A name from Redis is data: never markup, no terminal control (docs/security.md)."""
    return Text(terminal_safe(value))
