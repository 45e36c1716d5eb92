"""What travels through Redis, and where: stream names and the entries' encoding.

Pure data, no I/O: a round order (node -> worker), a round report (worker -> node), a stop
(node -> workers) and a worker's heartbeat, each one msgspec JSON field of a stream entry or
hash value, so ``redis-cli`` shows them readably.
"""

from __future__ import annotations

import msgspec

from ..workers import RoundRequest, RoundResult

__all__ = [
    "CONTROL_STREAM",
    "EPOCH_KEY",
    "NODE_GROUP",
    "RESULTS_STREAM",
    "WORKERS_HASH",
    "WORKER_GROUP",
    "Heartbeat",
    "RoundOrder",
    "RoundReport",
    "StopOrder",
    "alive_key",
    "cancelled_key",
    "order_key",
    "reported_key",
    "results_stream",
    "rounds_stream",
    "route_key",
]

PREFIX = "loopactors"
#: Round results, from the workers to a node without a name (consumer group
#: :data:`NODE_GROUP`); a named node has its own (:func:`results_stream`).
RESULTS_STREAM = f"{PREFIX}:results"
#: Stops, from the node to every worker (read by all, no group).
CONTROL_STREAM = f"{PREFIX}:control"
#: Worker name -> its latest :class:`Heartbeat`.
WORKERS_HASH = f"{PREFIX}:workers"
#: A token the node sets once: gone after an outage means Redis came back without its data.
EPOCH_KEY = f"{PREFIX}:epoch"
WORKER_GROUP = "workers"
NODE_GROUP = "nodes"


def results_stream(node_name: str | None) -> str:
    """The stream a node reads its rounds' reports from: one per node name, so that nodes
    sharing one Redis never take each other's reports (docs/scale-out.md, "Several nodes")."""
    return RESULTS_STREAM if node_name is None else f"{RESULTS_STREAM}:{node_name}"


def route_key(key: str) -> str:
    """The results stream of the node that waits for a round now: set when it publishes or
    adopts the round's order, read by the worker as it reports."""
    return f"{PREFIX}:route:{key}"


def reported_key(key: str) -> str:
    """Where a round's report went (``STREAM ENTRY``): a node that takes the round over after
    it was reported to another node's stream moves it to its own instead of running the round
    again."""
    return f"{PREFIX}:reported:{key}"


def rounds_stream(kind: str) -> str:
    """The stream of round orders for one worker kind: only workers of that kind read it."""
    return f"{PREFIX}:rounds:{kind}"


def alive_key(name: str) -> str:
    """A worker's liveness flag: set with an expiry of its idle timeout on every heartbeat, so
    it disappears on Redis's own clock once the worker stops beating (no clock skew)."""
    return f"{PREFIX}:alive:{name}"


def order_key(key: str) -> str:
    """The stream entry of the latest order published for a round key: a node that restarts
    waits for that order (when it is still on its stream) instead of publishing another,
    so a round in flight on a worker is never run a second time alongside (docs/scale-out.md).
    Deleted by the worker that forgets the order."""
    return f"{PREFIX}:order:{key}"


def cancelled_key(key: str) -> str:
    """A flag, with an expiry, that a worker checks before it starts a round it took."""
    return f"{PREFIX}:cancelled:{key}"


class RoundOrder(msgspec.Struct, frozen=True, kw_only=True):
    """Run this round: the request (idempotency key ``loop_id:round``, worker spec, prompt)
    and the seconds it may run once a worker starts it (its deadline is start + timeout)."""

    request: RoundRequest
    timeout: float
    #: Wall-clock time the node published it (for backlog ages in status).
    published_at: float
    #: The results stream of the node that published it (the report goes to the stream the
    #: round's route names when it is reported, this one if none).
    reply_to: str = RESULTS_STREAM


class RoundReport(msgspec.Struct, frozen=True, kw_only=True):
    """The result of one round, from the worker that ran it."""

    key: str
    result: RoundResult
    worker: str
    #: The order's stream entry: a report of an order the node no longer waits for (it
    #: published the round again once that order was gone) is dropped. Empty: not said.
    entry_id: str = ""


class StopOrder(msgspec.Struct, frozen=True, kw_only=True):
    """Stop the round with this key wherever it runs (SIGTERM, then SIGKILL, for commands)."""

    key: str


class Heartbeat(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    kinds: tuple[str, ...]
    slots: int
    in_flight: int
    #: Wall-clock time of the beat (the worker's clock).
    at: float
    #: Set by a sweep that found the worker's liveness flag gone (its beats stopped):
    #: the time it was found dead. A beat from the worker clears it.
    dead_since: float | None = None


encode = msgspec.json.Encoder().encode
decode_order = msgspec.json.Decoder(RoundOrder).decode
decode_report = msgspec.json.Decoder(RoundReport).decode
decode_stop = msgspec.json.Decoder(StopOrder).decode
decode_heartbeat = msgspec.json.Decoder(Heartbeat).decode
