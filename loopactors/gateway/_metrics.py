"""The node's figures: rounds, tokens and cost counted from the event stream, and the rest
(loops by phase, actors, store, connections) read when asked. Served as the protocol's
``statistics`` reply and as Prometheus metrics (``GET /metrics``), from one registry per node.

``docs/observability.md`` lists the metric families.
"""

from __future__ import annotations

import collections
import logging
import os
import socket
import time
import typing
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import msgspec
import trio
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from ..actors import SupervisorRef
from ..errors import ActorError, LoopNotFound
from ..loops import AnyEvent, LoopFinished, LoopStarted, Phase, RoundFinished, WorkerSpec
from ..runtime import Gap, Runtime, RuntimeConfig
from ..storage import CommitLatency
from ..workers import daily_spend, worker_kinds
from ._protocol import ActorInfo, NodeStatistics

if TYPE_CHECKING:
    from ._gateway import Gateway

__all__ = ["NodeMetrics", "worker_kind"]

log = logging.getLogger("loopactors.gateway")
#: How a shared store's lease row names this machine (this node is the row with its pid).
_HOST = socket.gethostname()

#: Round durations (seconds) as the histogram's buckets: scripted rounds take milliseconds,
#: agent rounds minutes.
ROUND_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0)
#: A supervisor with more children than this is shown summed up (one loop runner per loop).
_LISTED_CHILDREN = 32
#: Events the metrics' own subscription may hold before it counts them as dropped.
_QUEUE = 10_000
#: How a round can finish (``loopactors_rounds_total``'s ``status``; a deferred round is not
#: finished, it runs again).
FINISHED_STATUSES = ("completed", "failed", "timed_out", "cancelled")

#: The node samples its rounds finished this often (seconds), and keeps the samples this long:
#: the dashboard's rounds/s chart, whether or not a page was open meanwhile.
RATE_EVERY = 5.0
RATE_WINDOW = 300.0


class RateSamples:
    """``(time, rounds finished so far)`` pairs over the last ``window`` seconds, oldest
    first. Pure: the node adds one every ``RATE_EVERY`` seconds."""

    def __init__(self, window: float = RATE_WINDOW) -> None:
        self.window = window
        self._samples: collections.deque[tuple[float, int]] = collections.deque()

    def add(self, at: float, finished: int) -> None:
        self._samples.append((at, finished))
        while self._samples and self._samples[0][0] < at - self.window:
            self._samples.popleft()

    def samples(self) -> list[tuple[float, int]]:
        return list(self._samples)


def worker_kind(worker: str) -> str:
    """``command:./agent.sh --fast`` -> ``command``: a label with few values."""
    return WorkerSpec.parse(worker).kind or "?"


class NodeMetrics:
    """Counts what the node's loops did, and reads the rest of its figures on demand.

    Made once per gateway (its counters live as long as it); :meth:`run` follows the event
    stream in the gateway's nursery.
    """

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.started = time.time()
        self.registry = CollectorRegistry()
        self._rounds = Counter(
            "loopactors_rounds",
            "Rounds finished, by status and worker kind.",
            ["status", "worker_kind"],
            registry=self.registry,
        )
        self._durations = Histogram(
            "loopactors_round_duration_seconds",
            "How long finished rounds took, by worker kind.",
            ["worker_kind"],
            buckets=ROUND_BUCKETS,
            registry=self.registry,
        )
        self._tokens = Counter(
            "loopactors_tokens",
            "Tokens the workers reported, by worker kind.",
            ["worker_kind"],
            registry=self.registry,
        )
        self._cost = Counter(
            "loopactors_cost_usd",
            "Cost in US dollars the workers reported.",
            registry=self.registry,
        )
        self.rounds: dict[str, int] = {}
        self.rates = RateSamples()
        #: What the samples are stamped with (the node's wall clock; a test's virtual one).
        self.now: Callable[[], float] = time.time
        self.tokens = 0
        self.cost_usd = 0.0
        #: Events this node's own metrics subscription missed (it fell behind).
        self.missed = 0
        self._kinds: dict[str, str] = {}
        self._snapshot: NodeStatistics | None = None
        # Every known series exists from the start, at 0: a rate or an increase over a
        # series that appears only with its first round is empty (docs/observability.md's
        # alert on a node restarted with a hanging loop would never fire).
        for kind in worker_kinds():
            for status in FINISHED_STATUSES:
                self._rounds.labels(status, kind)
            self._durations.labels(kind)
            self._tokens.labels(kind)
        self.registry.register(_Snapshot(self))
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self._exposed = _WithoutCreated(self.registry)

    async def run(self) -> None:
        """Count every event the runtime publishes (until cancelled)."""
        with self.runtime.subscribe(None, queue_size=_QUEUE) as events:
            async for first in events:
                # Everything queued is counted at once: one checkpoint a batch, not one an
                # event (with thousands of busy loops a checkpoint waits for all of them).
                batch = [first]
                while len(batch) < _QUEUE:
                    try:
                        batch.append(events.receive_nowait())
                    except trio.WouldBlock:
                        break
                for event in batch:
                    if isinstance(event, Gap):
                        self.missed += event.missed
                    else:
                        await self._count(event)  # no checkpoint unless a kind is looked up

    async def sample_rates(self) -> None:
        """Every ``RATE_EVERY`` seconds, the rounds finished so far (until cancelled)."""
        while True:
            self.rates.add(self.now(), sum(self.rounds.values()))
            await trio.sleep(RATE_EVERY)

    async def _count(self, event: AnyEvent) -> None:
        if isinstance(event, LoopStarted):
            self._kinds[event.loop_id] = worker_kind(event.worker)
        elif isinstance(event, RoundFinished):
            kind = await self._kind_of(event.loop_id)
            self._rounds.labels(event.status, kind).inc()
            self.rounds[event.status] = self.rounds.get(event.status, 0) + 1
            if event.duration is not None:
                self._durations.labels(kind).observe(event.duration)
            if event.tokens:
                self._tokens.labels(kind).inc(event.tokens)
                self.tokens += event.tokens
            cost = getattr(event, "cost_usd", None)  # reported by workers that know a price
            if isinstance(cost, int | float) and cost > 0:
                self._cost.inc(cost)
                self.cost_usd += cost
        elif isinstance(event, LoopFinished):
            self._kinds.pop(event.loop_id, None)

    async def _kind_of(self, loop_id: str) -> str:
        kind = self._kinds.get(loop_id)
        if kind is None:  # a loop that started before this gateway (recovered, say)
            try:
                kind = worker_kind((await self.runtime.get(loop_id)).spec.worker)
            except (LoopNotFound, ActorError):
                kind = "?"
            self._kinds[loop_id] = kind
        return kind

    async def statistics(self, gateway: Gateway) -> NodeStatistics:
        """The node's figures right now (the store and the actor tree are asked)."""
        runtime = self.runtime
        store = await runtime.store_statistics()
        gateway_stats = gateway.statistics()
        notifier = await runtime.notifier_statistics()
        return NodeStatistics(
            node_id=gateway.node_id,
            time=time.time(),
            uptime=time.time() - self.started,
            loops=dict(store.phases),
            live_loops=store.live_loops,
            rounds=dict(self.rounds),
            tokens=self.tokens,
            cost_usd=self.cost_usd,
            store_rounds=store.rounds,
            store_events=store.events,
            store_commits=store.commits,
            commit_seconds=store.commit_seconds or CommitLatency(),
            connections=gateway_stats.connections,
            subscriptions=gateway_stats.subscriptions,
            events_dropped=gateway.events_dropped + self.missed,
            actors=await actor_tree(runtime),
            notifications_sent=notifier.sent,
            notifications_failed=notifier.failed,
            notifications_dropped=notifier.dropped,
            notifications_queued=store.notifications,
            rate_samples=self.rates.samples(),
            daily_cost_usd=_daily_spent(),
            daily_budget_usd=_daily_budgets(runtime.config),
            cluster=store.nodes,
            cluster_self=next(
                (
                    n.node_id
                    for n in store.nodes
                    if n.state == "live" and (n.host, n.pid) == (_HOST, os.getpid())
                ),
                None,
            ),
        )

    async def exposition(self, gateway: Gateway) -> bytes:
        """The Prometheus text exposition of every metric, read now."""
        self._snapshot = await self.statistics(gateway)
        try:
            return generate_latest(self._exposed)
        finally:
            self._snapshot = None


async def actor_tree(runtime: Runtime) -> list[ActorInfo]:
    """The node's actors, depth first, with restart counts."""
    found: list[ActorInfo] = []

    async def walk(supervisor: SupervisorRef, prefix: str) -> int:
        try:
            children = await supervisor.which_children()
        except ActorError:
            return 0  # restarting right now: its children are shown at the next look
        if len(children) > _LISTED_CHILDREN:
            found.append(
                ActorInfo(
                    path=f"{prefix}*",
                    running=all(c.running for c in children),
                    restarts=sum(c.restarts for c in children),
                    supervisor=False,
                    children=len(children),
                )
            )
            return len(children)
        for child in children:
            index = len(found)
            info = ActorInfo(
                path=f"{prefix}{child.id}",
                running=child.running,
                restarts=child.restarts,
                supervisor=child.is_supervisor,
            )
            found.append(info)
            if child.is_supervisor and child.ref is not None:
                count = await walk(SupervisorRef(child.ref), f"{info.path}/")
                found[index] = msgspec.structs.replace(info, children=count)
        return len(children)

    with trio.move_on_after(5.0):
        await walk(runtime.node.supervisor, "")
    return found


class _WithoutCreated(Collector):
    """The registry without its ``*_created`` series: a counter's creation time is noise to
    every query here (restarts are read from the counters resetting), and doubles the lines.
    (prometheus-client's own switch for it is process-wide: an embedding program's metrics
    are left as they are.)"""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Any]:
        for family in self.registry.collect():
            family.samples = [s for s in family.samples if not s.name.endswith("_created")]
            yield family


class _Snapshot(Collector):
    """The figures read at scrape time (the store, the actors, the connections)."""

    def __init__(self, metrics: NodeMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Any]:
        stats = self.metrics._snapshot
        if stats is None:  # only :meth:`NodeMetrics.exposition` reads them
            return
        loops = GaugeMetricFamily(
            "loopactors_loops", "Loops in the store by phase.", labels=["phase"]
        )
        for phase in typing.get_args(Phase):
            loops.add_metric([phase], stats.loops.get(phase, 0))
        yield loops
        restarts = CounterMetricFamily(
            "loopactors_actor_restarts",
            "Times a supervisor restarted the actor (loop runners summed up as loops/*).",
            labels=["actor"],
        )
        for actor in stats.actors:
            restarts.add_metric([actor.path], actor.restarts)
        yield restarts
        latency = stats.commit_seconds
        buckets: list[tuple[str, float]] = []
        total = 0
        for bound, count in zip((*latency.bounds, float("inf")), latency.counts, strict=True):
            total += count
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), total))
        commits = HistogramMetricFamily(
            "loopactors_store_commit_seconds",
            "How long the store's group commits took.",
        )
        commits.add_metric([], buckets, latency.sum)
        yield commits
        connections = GaugeMetricFamily(
            "loopactors_gateway_connections", "Websocket clients connected now."
        )
        connections.add_metric([], stats.connections)
        yield connections
        dropped = CounterMetricFamily(
            "loopactors_events_dropped",
            "Events subscribers missed because they fell behind.",
        )
        dropped.add_metric([], stats.events_dropped)
        yield dropped
        yield from _daily_budget_families(self.metrics.runtime.config)
        notifications = CounterMetricFamily(
            "loopactors_notifications",
            "Notifications delivered, failed (each retried later) and dropped (too old).",
            labels=["outcome"],
        )
        notifications.add_metric(["sent"], stats.notifications_sent)
        notifications.add_metric(["failed"], stats.notifications_failed)
        notifications.add_metric(["dropped"], stats.notifications_dropped)
        yield notifications
        queued = GaugeMetricFamily(
            "loopactors_notifications_queued", "Notifications waiting in the store's queue."
        )
        queued.add_metric([], stats.notifications_queued)
        yield queued


def _daily_budget_families(config: RuntimeConfig) -> Iterator[Any]:
    """Today's spend per account and in all, and the daily budgets (docs/loops.md)."""
    today = GaugeMetricFamily(
        "loopactors_daily_cost_usd",
        "US dollars spent in the current budget day, per account (KIND:FINGERPRINT) and in "
        'all (account="total").',
        labels=["account"],
    )
    for account, dollars in _daily_spent().items():
        today.add_metric([account], dollars)
    yield today
    budgets = GaugeMetricFamily(
        "loopactors_daily_budget_usd",
        "The daily budgets: per account and for all accounts (unset ones are left out).",
        labels=["scope"],
    )
    for scope, dollars in _daily_budgets(config).items():
        budgets.add_metric([scope], dollars)
    yield budgets


def _daily_spent() -> dict[str, float]:
    spent, total = daily_spend()
    return {
        **{f"{kind}:{account}": d for (kind, account), d in sorted(spent.items())},
        "total": total,
    }


def _daily_budgets(config: RuntimeConfig) -> dict[str, float]:
    budget = config.budget
    found = {"account": budget.daily_cost_usd, "total": budget.daily_total_cost_usd}
    return {scope: dollars for scope, dollars in found.items() if dollars is not None}
