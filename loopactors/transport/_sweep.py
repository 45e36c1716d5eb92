"""Expiring workers that stopped beating (a SIGKILL, a lost machine) from Redis.

Every heartbeat sets the worker's liveness flag (:func:`~._wire.alive_key`) with an expiry of
its idle timeout. A sweep, run by every live worker and by the node, looks at each worker in
the workers hash whose flag is gone:

1. the first sweep to see it marks it dead (``dead_since`` in its record, so ``status`` shows
   it) and leaves its orders to be reclaimed by the live workers (XAUTOCLAIM, after the same
   idle timeout);
2. a later sweep removes its consumer from each group where it holds nothing any more, and
   its record once it holds nothing anywhere. A consumer still holding orders is never
   removed: that would drop the orders from the pending list, and nobody could reclaim them.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import msgspec

from ._redis import NO_GROUP
from ._wire import WORKER_GROUP, WORKERS_HASH, alive_key, decode_heartbeat, encode, rounds_stream

__all__ = ["drop_idle_consumers", "expire_dead_workers"]

log = logging.getLogger("loopactors.transport")


async def expire_dead_workers(client: Any, *, now: float | None = None) -> list[str]:
    """One sweep; returns the names of the workers it removed."""
    now = time.time() if now is None else now
    removed: list[str] = []
    records = await client.hgetall(WORKERS_HASH)
    for field, value in records.items():
        try:
            beat = decode_heartbeat(value)
        except msgspec.DecodeError:
            log.warning("removing an unreadable worker record %r", field)
            await client.hdel(WORKERS_HASH, [field])
            continue
        if await client.exists([alive_key(beat.name)]):
            continue
        if beat.dead_since is None:
            log.warning(
                "worker %s stopped beating %.0f s ago: marked dead; its rounds go to "
                "the other workers",
                beat.name,
                max(now - beat.at, 0.0),
            )
            dead = msgspec.structs.replace(beat, dead_since=now)
            await client.hset(WORKERS_HASH, {field: encode(dead).decode()})
            continue
        streams = [rounds_stream(kind) for kind in beat.kinds]
        holding = await drop_idle_consumers(client, streams, beat.name)
        if holding == 0 and not await client.exists([alive_key(beat.name)]):
            await client.hdel(WORKERS_HASH, [field])
            log.info("worker %s removed (dead, holding no rounds)", beat.name)
            removed.append(beat.name)
    return removed


async def drop_idle_consumers(client: Any, streams: list[str], name: str) -> int:
    """Remove the consumer ``name`` from each stream's worker group where it holds nothing;
    returns the orders it still holds."""
    holding = 0
    for stream in streams:
        holding += await _drop_idle_consumer(client, stream, name)
    return holding


async def _drop_idle_consumer(client: Any, stream: str, name: str) -> int:
    """Remove the consumer ``name`` from the stream's worker group if it holds nothing;
    returns the orders it still holds there."""
    try:
        consumers = await client.xinfo_consumers(stream, WORKER_GROUP)
    except NO_GROUP:
        return 0
    except Exception as exc:  # no such stream: nothing held there
        if "no such key" in str(exc).lower():
            return 0
        raise
    for consumer in consumers:
        if consumer.get("name") != name:
            continue
        pending = int(consumer.get("pending") or 0)
        if pending == 0:
            await client.xgroup_delconsumer(stream, WORKER_GROUP, name)
        return pending
    return 0
