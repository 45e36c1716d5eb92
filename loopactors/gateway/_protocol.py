"""The node's websocket protocol: every frame as a tagged msgspec Struct. Pure, no trio.

A client sends requests; each carries an ``id`` (an int or a string the client picks) and gets
exactly one reply with the same id: :class:`Ok` with data, or :class:`Error` with a stable
``code``. The first request on a connection must be :class:`Hello`. Events of subscribed
loops are pushed as :class:`EventFrame` (and :class:`GapFrame` when the client fell behind).
``docs/protocol.md`` describes a session; ``docs/protocol.schema.json`` is :func:`json_schema`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, Literal, Union

import msgspec

from ..loops import AnyEvent, LoopSpec, LoopState, RoundRecord
from ..runtime import BreakerStanding
from ..storage import CommitLatency, NodeLease

__all__ = [
    "CAPABILITIES",
    "CLIENT_FRAMES",
    "MAX_COALESCE",
    "MIN_COALESCE",
    "PROTOCOL_REQUESTS",
    "PROTOCOL_VERSION",
    "REPLY_DATA",
    "STATES_PER_FRAME",
    "ActorInfo",
    "Closing",
    "Error",
    "ErrorCode",
    "EventFrame",
    "GapFrame",
    "Hello",
    "History",
    "Limits",
    "LoopOwners",
    "LoopStatus",
    "NodeInfo",
    "NodeStatistics",
    "Ok",
    "Output",
    "Owners",
    "Pause",
    "Ping",
    "Pong",
    "Replay",
    "Resume",
    "Rounds",
    "ServerFrame",
    "Start",
    "States",
    "Statistics",
    "Status",
    "Stop",
    "Subscribe",
    "Subscribed",
    "Unsubscribe",
    "Unsubscribed",
    "json_schema",
]

#: Bumped on any change a client written for the previous version could misread.
PROTOCOL_VERSION: Final = 1

#: What this node's protocol offers; a client may check before relying on one.
CAPABILITIES: Final = (
    "start",
    "stop",
    "pause",
    "resume",
    "status",
    "history",
    "output",
    "subscribe",
    "ping",
    "statistics",
    "coalesce",
    "replay",
    "owners",
)

RequestId = int | str

#: The shortest and longest ``coalesce`` interval of a subscription (seconds).
MIN_COALESCE: Final = 0.05
MAX_COALESCE: Final = 60.0
#: The most loops in one ``states`` frame: more changed loops go in several frames.
STATES_PER_FRAME: Final = 500

#: Stable error codes (``docs/protocol.md`` says when each is sent).
ErrorCode = Literal[
    "bad_json",
    "bad_frame",
    "unknown_type",
    "invalid_request",
    "frame_too_large",
    "hello_required",
    "unsupported_protocol",
    "unauthorized",
    "not_found",
    "rejected",
    "too_many_connections",
    "too_many_subscriptions",
    "too_many_requests",
    "rate_limited",
    "shutting_down",
    "unavailable",
    "internal",
]


class _Request(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", forbid_unknown_fields=True
):
    id: RequestId


# -- requests (client -> node) ----------------------------------------------------------------


class Hello(_Request, frozen=True, kw_only=True, tag="hello"):
    """First frame: the protocol version the client speaks, and the token unless it was sent
    as an ``Authorization: Bearer`` header."""

    protocol: int
    token: str | None = None
    client: str | None = None


class Ping(_Request, frozen=True, kw_only=True, tag="ping"):
    pass


class Start(_Request, frozen=True, kw_only=True, tag="start"):
    """Start a loop from ``|loop...|`` text or a structured ``spec`` (exactly one).

    ``worker`` overrides the node's default worker; ``options`` are further LoopSpec fields
    (``round_timeout``, ``max_tokens``, ``stagnation_threshold``, ...). A ``loop_id`` chosen
    by the client makes a retried start safe: the second one finds the first's loop.
    """

    text: str | None = None
    spec: LoopSpec | None = None
    worker: str | None = None
    loop_id: str | None = None
    options: dict[str, Any] = {}


class Replay(_Request, frozen=True, kw_only=True, tag="replay"):
    """Run round ``round`` of loop ``loop_id`` again, its recorded prompt (seed included), on
    ``worker`` (default: the original's), as a new one-round loop whose ``spec.replay_of``
    is ``LOOP_ID:ROUND``; ``loop_id_new`` makes a retried replay safe, as ``start``'s
    ``loop_id`` does. Answered with the new loop's first state."""

    loop_id: str
    round: int
    worker: str | None = None
    loop_id_new: str | None = None
    options: dict[str, Any] = {}


class Stop(_Request, frozen=True, kw_only=True, tag="stop"):
    """Stop now (the round in flight is cancelled), or after the round in flight."""

    loop_id: str
    after_round: bool = False


class Pause(_Request, frozen=True, kw_only=True, tag="pause"):
    loop_id: str


class Resume(_Request, frozen=True, kw_only=True, tag="resume"):
    loop_id: str


class Status(_Request, frozen=True, kw_only=True, tag="status"):
    """One loop (``loop_id``), or the loops in the store, newest first; each loop's
    ``last_output`` cut to its first ``output_head`` characters (an ``output`` request gives
    a round's whole output)."""

    loop_id: str | None = None
    live_only: bool = False
    limit: int | None = None
    output_head: int = 200
    #: The ``next`` of the previous answer: the page after it.
    after: str | None = None


class History(_Request, frozen=True, kw_only=True, tag="history"):
    """A loop's rounds; each output (and the loop's ``last_output``) cut to its first
    ``output_head`` characters."""

    loop_id: str
    output_head: int = 200


class Output(_Request, frozen=True, kw_only=True, tag="output"):
    """One round's record with its whole output."""

    loop_id: str
    round: int


class Subscribe(_Request, frozen=True, kw_only=True, tag="subscribe"):
    """Events of one loop, or of every loop when ``loop_id`` is null.

    With ``replay`` (one loop only) the loop's stored events come first, then the live ones,
    with no gap and no repeat between the two: a client that starts a loop and subscribes
    after, or one that reconnects, sees every event of the loop.

    With ``coalesce`` (seconds, from ``MIN_COALESCE`` to ``MAX_COALESCE``) no event is sent:
    instead, at most once per that interval, one :class:`States` frame (or a few, of at most
    ``STATES_PER_FRAME`` loops each) with the latest state of each loop that changed since
    the last one. A view of thousands of loops (the dashboard) stays live this way at a cost
    bounded by the loops that changed, not by their events, and never misses a change.

    With ``replay``, every event frame carries ``seq``, the event's place in the loop's log
    (1, 2, 3, ... as the store keeps it; null for the live-only ``agent_step`` and
    ``round_waiting``, never stored), and ``after`` skips the first ``after`` stored
    events: a client that reconnects, to this node or to the one that took its store over,
    subscribes again with ``after`` = the last ``seq`` it got, and misses nothing and sees
    nothing twice.
    """

    loop_id: str | None = None
    replay: bool = False
    coalesce: float | None = None
    after: int = 0


class Unsubscribe(_Request, frozen=True, kw_only=True, tag="unsubscribe"):
    subscription: str


class Statistics(_Request, frozen=True, kw_only=True, tag="statistics"):
    """The node's figures right now: loops by phase, rounds, store, connections, actors."""


class Owners(_Request, frozen=True, kw_only=True, tag="owners"):
    """The node incarnation that owns each of these loops (whole ids, at most
    ``max_status_loops``), on a store several nodes share (docs/multinode.md)."""

    loop_ids: list[str]


# -- reply data -----------------------------------------------------------------------------


class Limits(msgspec.Struct, frozen=True, kw_only=True):
    max_frame_bytes: int
    max_subscriptions: int
    max_requests_per_second: float
    max_inflight_requests: int
    subscriber_queue: int
    slow_subscriber: Literal["gap", "disconnect"]
    #: The largest ``limit`` of a ``status`` request (a page of loops).
    max_status_loops: int = 1000


class NodeInfo(msgspec.Struct, frozen=True, kw_only=True):
    """The reply to :class:`Hello`."""

    protocol: int
    node_id: str
    version: str
    capabilities: list[str]
    default_worker: str
    limits: Limits


class Pong(msgspec.Struct, frozen=True, kw_only=True):
    #: The node's wall clock (seconds since the epoch).
    time: float


class LoopOwners(msgspec.Struct, frozen=True, kw_only=True):
    """Each loop asked for and the id of the node incarnation that owns it (null: no node
    does, it waits to be claimed; or no such loop). ``owners`` is null on a store of one
    node, which has no owners."""

    owners: dict[str, str | None] | None = None


class LoopStatus(msgspec.Struct, frozen=True, kw_only=True):
    loops: list[LoopState]
    #: More loops follow: ask again with ``after`` set to this. None on the last page.
    next: str | None = None


class Rounds(msgspec.Struct, frozen=True, kw_only=True):
    loop: LoopState
    rounds: list[RoundRecord]
    #: The breaker as it stands: each trigger's count and limit, and the closest one.
    breaker: BreakerStanding | None = None


class Subscribed(msgspec.Struct, frozen=True, kw_only=True):
    subscription: str
    loop_id: str | None


class Unsubscribed(msgspec.Struct, frozen=True, kw_only=True):
    subscription: str
    #: Events sent on it, and events it missed because the client fell behind.
    delivered: int
    missed: int


class ActorInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One actor of the node's tree. The children of a supervisor started at run time (one
    loop runner per loop) are summed up in one entry, ``path`` ``<supervisor>/*``."""

    #: Child ids from the root, joined by ``/``.
    path: str
    running: bool
    #: Times it was restarted (for a summed-up entry: all of them together).
    restarts: int
    supervisor: bool
    #: A supervisor's children (for a summed-up entry: how many it stands for).
    children: int = 0


class NodeStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """The reply to :class:`Statistics`. Counters (``rounds``, ``tokens``, ...) count since
    the node's gateway started; store figures count what the store holds."""

    node_id: str
    #: The node's wall clock, and seconds since its gateway started.
    time: float
    uptime: float
    #: Loops in the store by phase.
    loops: dict[str, int]
    live_loops: int
    #: Rounds finished by status, tokens and cost reported by workers.
    rounds: dict[str, int]
    tokens: int
    cost_usd: float
    store_rounds: int
    store_events: int
    store_commits: int
    commit_seconds: CommitLatency
    connections: int
    subscriptions: int
    #: Events a subscriber (or the node's own metrics) missed because it fell behind.
    events_dropped: int
    actors: list[ActorInfo]
    #: Notifications since the node started: delivered, failed attempts (retried later),
    #: dropped (too old); and waiting in the store's queue now.
    notifications_sent: int = 0
    notifications_failed: int = 0
    notifications_dropped: int = 0
    notifications_queued: int = 0
    #: ``[time, rounds finished since the start]`` every 5 seconds over the last 5 minutes,
    #: oldest first: sampled by the node whether or not anyone asks (the dashboard's chart).
    rate_samples: list[tuple[float, int]] = []
    #: US dollars spent in the current budget day per account (``KIND:FINGERPRINT``), and
    #: the daily budgets (``account``, ``total``; unset ones left out): docs/loops.md.
    daily_cost_usd: dict[str, float] = {}
    daily_budget_usd: dict[str, float] = {}
    #: The nodes that share this node's store (PostgreSQL), newest first, at most 20; empty
    #: for a store of its own (SQLite). ``cluster_self``: this node's id among them.
    cluster: list[NodeLease] = []
    cluster_self: str | None = None


#: The protocol's own requests, each with the data type of its :class:`Ok` reply: the client
#: frames, the reply types and the schema derive from this table, and the gateway answers
#: each through its table of requests (``_answers``), as it does an application's.
PROTOCOL_REQUESTS: Final[tuple[tuple[type[msgspec.Struct], type[msgspec.Struct]], ...]] = (
    (Hello, NodeInfo),
    (Ping, Pong),
    (Start, LoopState),
    (Replay, LoopState),
    (Stop, LoopState),
    (Pause, LoopState),
    (Resume, LoopState),
    (Status, LoopStatus),
    (History, Rounds),
    (Output, RoundRecord),
    (Subscribe, Subscribed),
    (Unsubscribe, Unsubscribed),
    (Statistics, NodeStatistics),
    (Owners, LoopOwners),
)
#: The request types above; a node may serve more (``gateway.NodeRequest``).
CLIENT_FRAMES: Final = tuple(frame for frame, _ in PROTOCOL_REQUESTS)
#: The data type of the :class:`Ok` reply to each request type.
REPLY_DATA: Final[dict[str, type[msgspec.Struct]]] = {
    str(frame.__struct_config__.tag): reply for frame, reply in PROTOCOL_REQUESTS
}


# -- frames (node -> client) ------------------------------------------------------------------


class Ok(msgspec.Struct, frozen=True, kw_only=True, tag="ok", tag_field="type"):
    id: RequestId
    #: One of the types in :data:`REPLY_DATA`, by the request's type.
    data: Any


class Error(msgspec.Struct, frozen=True, kw_only=True, tag="error", tag_field="type"):
    """A request that failed; ``id`` is null when the frame's id could not be read."""

    id: RequestId | None
    code: ErrorCode
    message: str


class EventFrame(msgspec.Struct, frozen=True, kw_only=True, tag="event", tag_field="type"):
    subscription: str
    event: AnyEvent
    #: The event's place in its loop's log, on a ``replay`` subscription (else null, and
    #: null for an event never stored: ``agent_step``, ``round_waiting``).
    seq: int | None = None


class GapFrame(msgspec.Struct, frozen=True, kw_only=True, tag="gap", tag_field="type"):
    """``missed`` events of this subscription were dropped because the client fell behind."""

    subscription: str
    missed: int


class States(msgspec.Struct, frozen=True, kw_only=True, tag="states", tag_field="type"):
    """The latest state of each loop that changed, on a ``coalesce`` subscription (each
    ``last_output`` cut to its first 200 characters, as in a ``status`` answer)."""

    subscription: str
    loops: list[LoopState]


class Closing(msgspec.Struct, frozen=True, kw_only=True, tag="closing", tag_field="type"):
    """The node is about to close this connection (shutdown, too slow, ...)."""

    reason: str


ServerFrame = Ok | Error | EventFrame | GapFrame | States | Closing


def json_schema(
    added: Sequence[tuple[type[msgspec.Struct], type[msgspec.Struct]]] = (),
) -> dict[str, Any]:
    """The protocol as one JSON Schema document, with the requests a node adds (each a frame
    and its reply's data; ``docs/protocol.schema.json`` holds a ``loopactors node``'s)."""
    reply_data = dict(REPLY_DATA)
    reply_data.update((str(frame.__struct_config__.tag), reply) for frame, reply in added)
    data_types = sorted(set(reply_data.values()), key=lambda t: t.__name__)
    frames: Any = Union[tuple(CLIENT_FRAMES + tuple(frame for frame, _ in added))]  # noqa: UP007
    (client, server, *_), components = msgspec.json.schema_components(
        [frames, ServerFrame, *data_types], ref_template="#/$defs/{name}"
    )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"loopactors node protocol, version {PROTOCOL_VERSION}",
        "description": (
            "Frames are JSON text. A client sends client_frame; the node sends server_frame. "
            "reply_data names the type of an ok frame's data for each request type."
        ),
        "protocol": PROTOCOL_VERSION,
        "client_frame": client,
        "server_frame": server,
        "reply_data": {
            kind: {"$ref": f"#/$defs/{t.__name__}"} for kind, t in sorted(reply_data.items())
        },
        "$defs": components,
    }
