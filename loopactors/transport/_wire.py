"""What travels through Redis, and where: stream names and the entries' encoding.

Pure data, no I/O: a round order (node -> worker), a round report (worker -> node), a stop
(node -> workers) and a worker's heartbeat, each one msgspec JSON field of a stream entry or
hash value, so ``redis-cli`` shows them readably.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..loops._model import Mode
from ..workers import RoundRequest, RoundResult, WorkerStatus

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
    "WireRequest",
    "WireResult",
    "cancelled_key",
    "rounds_stream",
]

PREFIX = "loopactors"
#: Round results, from every worker to the node (consumer group :data:`NODE_GROUP`).
RESULTS_STREAM = f"{PREFIX}:results"
#: Stops, from the node to every worker (read by all, no group).
CONTROL_STREAM = f"{PREFIX}:control"
#: Worker name -> its latest :class:`Heartbeat`.
WORKERS_HASH = f"{PREFIX}:workers"
#: A token the node sets once: gone after an outage means Redis came back without its data.
EPOCH_KEY = f"{PREFIX}:epoch"
WORKER_GROUP = "workers"
NODE_GROUP = "nodes"
#: The kinds a worker process can run.
KNOWN_KINDS = ("agent", "command", "python", "scripted")


def rounds_stream(kind: str) -> str:
    """The stream of round orders for one worker kind: only workers of that kind read it."""
    return f"{PREFIX}:rounds:{kind}"


def cancelled_key(key: str) -> str:
    """A flag, with an expiry, that a worker checks before it starts a round it took."""
    return f"{PREFIX}:cancelled:{key}"


class WireRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A :class:`RoundRequest` on the wire: the same fields, decodable here (msgspec resolves
    a struct's annotations in its public module, which does not define the names they use)."""

    loop_id: str
    round: int
    rounds: int
    mode: Mode
    prompt: str
    task: str
    worker: str
    objective: str | None = None
    cwd: str | None = None
    env: dict[str, str] = msgspec.field(default_factory=dict)

    @classmethod
    def of(cls, request: RoundRequest) -> WireRequest:
        return cls(**msgspec.structs.asdict(request))

    def to_request(self) -> RoundRequest:
        return RoundRequest(**msgspec.structs.asdict(self))

    @property
    def key(self) -> str:
        return f"{self.loop_id}:{self.round}"


class RoundOrder(msgspec.Struct, frozen=True, kw_only=True):
    """Run this round: the request (idempotency key ``loop_id:round``, worker spec, prompt)
    and the seconds it may run once a worker starts it (its deadline is start + timeout)."""

    request: WireRequest
    timeout: float
    #: Wall-clock time the node published it (for backlog ages in status).
    published_at: float


class WireResult(msgspec.Struct, frozen=True, kw_only=True):
    """A :class:`RoundResult` on the wire (the same fields, decodable here)."""

    status: WorkerStatus
    output: str = ""
    error: str | None = None
    tokens: int = 0
    duration: float = 0.0
    done: bool = False
    transcript: tuple[dict[str, Any], ...] = ()

    @classmethod
    def of(cls, result: RoundResult) -> WireResult:
        return cls(**msgspec.structs.asdict(result))

    def to_result(self) -> RoundResult:
        return RoundResult(**msgspec.structs.asdict(self))


class RoundReport(msgspec.Struct, frozen=True, kw_only=True):
    """The result of one round, from the worker that ran it."""

    key: str
    result: WireResult
    worker: str


class StopOrder(msgspec.Struct, frozen=True, kw_only=True):
    """Stop the round with this key wherever it runs (SIGTERM, then SIGKILL, for commands)."""

    key: str


class Heartbeat(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    kinds: tuple[str, ...]
    slots: int
    in_flight: int
    at: float


encode = msgspec.json.Encoder().encode
decode_order = msgspec.json.Decoder(RoundOrder).decode
decode_report = msgspec.json.Decoder(RoundReport).decode
decode_stop = msgspec.json.Decoder(StopOrder).decode
decode_heartbeat = msgspec.json.Decoder(Heartbeat).decode
