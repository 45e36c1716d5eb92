"""The runtime's small service actors: Store, Breaker, Compactor (Timers: ``_timers``).

Each is a thin shell: the Store over a storage backend, the Breaker and the Compactor over the
pure rules in :mod:`loopactors.loops._rules`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import msgspec
import trio

from ..actors import Actor, ErrorReply, PendingReply
from ..agent import apply_plan
from ..errors import ActorError, StoreError
from ..ledger import (
    Attempt,
    BreakerConfig,
    Ledger,
    build_context_injection,
    check_circuit_breaker,
)
from ..loops._model import LoopState, RoundRecord
from ..loops._rules import Verdict, build_prompt, check_before_round
from ..messages import (
    ApplyCompaction,
    BuildPrompt,
    CheckRound,
    Commit,
    Escalate,
    ForgetLedger,
    Forward,
    GetCompactorStatistics,
    GetEvents,
    GetLoop,
    GetRounds,
    GetStoreStatistics,
    ListLoops,
    PromptReady,
    PruneLoops,
    RecordAttempt,
)
from ..storage import PRUNE_BATCH, CommitLatency, PruneReport, StoreBackend, Write
from ._delivery import deliver, runner_name
from ._events import EventBus
from ._ledger import attempt_of, breaker_config
from ._retention import keep_pruning

__all__ = ["Breaker", "Compactor", "Store"]


#: Commit at once from this many pending writes; below, wait up to COMMIT_DELAY for more.
FLUSH_AT = 2000
COMMIT_DELAY = 0.01


class _FlushNow:
    """The Store's commit-delay timer, sent to itself."""

    __slots__ = ()


class _PruneNext:
    """The rest of a prune, sent to the back of the Store's own mailbox between batches."""

    __slots__ = ("after", "reply", "total")

    def __init__(self, total: PruneReport, after: str, reply: PendingReply | None) -> None:
        self.total = total
        self.after = after
        self.reply = reply


#: How long a prune batch may take (seconds), past the loop in hand: a loop with thousands of
#: events takes milliseconds on its own, a hundred light ones take a few.
PRUNE_BATCH_SECONDS = 0.02


class Store(Actor[Any]):
    """Durable state with group commit, and the side effects that wait for it.

    Commits are not done one by one: their writes collect while the mailbox drains, then go
    to the backend as one transaction. Only then are the batch's events published, its
    forwards sent and its callers answered. Throughput comes from batching, and nothing that
    depends on a write happens before the write is durable (no debounce window to lose,
    rolebox's W13). A transaction that fails crashes the Store: its supervisor restarts the
    runtime behind it, which recovers from what is durable.
    """

    mailbox_size = 16_384
    uses_nursery = True  # for the commit-delay timer, the retention task, prune batches
    #: The most loops removed per transaction (and per turn of the mailbox) by a prune.
    prune_batch_size = PRUNE_BATCH

    def __init__(
        self,
        open_backend: Callable[[], StoreBackend],
        bus: EventBus,
        *,
        shared: bool = False,
        retention_days: float | None = None,
    ) -> None:
        """``open_backend`` is called at each (re)start. A ``shared`` backend (the in-memory
        one, which must outlive a restart of this actor) is not closed when it stops. With
        ``retention_days``, finished loops older than that are pruned at the start and
        then periodically (see :mod:`._retention`)."""
        self._open_backend = open_backend
        self._bus = bus
        self._shared = shared
        self._retention_days = retention_days
        self.backend: StoreBackend
        self._batch: list[Write] = []
        self._waiting: list[PendingReply] = []
        self._forwards: list[Forward] = []
        self._flush_due = False
        self.commit_latency = CommitLatency()

    async def on_start(self) -> None:
        self.backend = self._open_backend()
        if self._retention_days is not None:
            self.nursery.start_soon(keep_pruning, self.ref, self._retention_days)

    async def handle(self, message: Any) -> Any:
        kind = type(message)
        if kind is _FlushNow:
            self._flush_due = False
            await self._flush()
            return None
        if kind is _PruneNext:
            await self._flush()
            await self._prune(message.total, message.after, message.reply)
            return None
        if kind is Commit:
            self._batch.append(message.write)
            if message.then:
                self._forwards.extend(message.then)
            if self.in_call:
                self._waiting.append(self.defer_reply())
            return None
        await self._flush()  # a read sees every write queued before it
        backend = self.backend
        if kind is GetLoop:
            return await self._run(backend.get_loop, message.loop_id)
        if kind is ListLoops:
            return await self._run(
                lambda: backend.list_loops(live_only=message.live_only, limit=message.limit)
            )
        if kind is GetRounds:
            return await self._run(backend.rounds, message.loop_id)
        if kind is GetEvents:
            return await self._run(backend.events, message.loop_id)
        if kind is GetStoreStatistics:
            stats = await self._run(backend.statistics)
            return msgspec.structs.replace(stats, commit_seconds=self.commit_latency)
        if kind is PruneLoops:
            total = PruneReport(before=message.before, dry_run=message.dry_run)
            await self._prune(total, "", self.defer_reply() if self.in_call else None)
            return None
        return ErrorReply(TypeError(f"the store does not accept {kind.__name__}"))

    async def _prune(self, total: PruneReport, after: str, reply: PendingReply | None) -> None:
        """One batch of a prune (at most PRUNE_BATCH loops removed, PRUNE_SCAN looked at, and
        PRUNE_BATCH_SECONDS past the loop in hand), then the rest at the back of the
        mailbox: commits and reads are served between batches, so a prune of a large store
        never holds the runtime up. The caller is answered with the total at the end.
        """
        try:
            report, cursor = self.backend.prune_batch(
                total.before,
                after=after,
                limit=self.prune_batch_size,
                dry_run=total.dry_run,
                deadline=time.perf_counter() + PRUNE_BATCH_SECONDS,
            )
        except StoreError as exc:
            # That batch was rolled back whole (earlier ones stay done): refused, no crash.
            if reply is not None:
                reply.fail(StoreError(f"{exc}{total.so_far()}"))
            return
        total = total.plus(report)
        if cursor is None:
            if reply is not None:
                reply.reply(total)
            return
        if reply is not None and reply.done:
            return  # the caller gave up (timed out, cancelled): so does the prune
        self.nursery.start_soon(self._prune_later, _PruneNext(total, cursor, reply))

    async def _prune_later(self, rest: _PruneNext) -> None:
        # From another task, a cast joins the back of the mailbox (a self-cast would jump
        # the queue). The Store gone, the caller's pending reply fails with it.
        with contextlib.suppress(ActorError):
            await self.ref.cast(rest)

    async def on_drained(self) -> None:
        batch = len(self._batch)
        if not batch or self._flush_due:
            return
        if self._shared or batch >= FLUSH_AT or self._waiting:
            await self._flush()  # in memory it is free; a full batch or a caller goes now
            return
        # A small batch waits a moment for company: a SQLite transaction costs about the
        # same for 10 writes as for 1,000 on nearby pages. Nobody has been told "done" yet,
        # so the wait loses nothing (PostgreSQL's commit_delay, in spirit).
        self._flush_due = True
        self.nursery.start_soon(self._flush_soon)

    async def _flush_soon(self) -> None:
        await trio.sleep(COMMIT_DELAY)
        with contextlib.suppress(ActorError):
            await self.ref.cast(_FlushNow())

    async def on_stop(self, reason: BaseException | None) -> None:
        try:
            await self._flush()
        finally:
            if not self._shared:
                self.backend.close()

    async def _flush(self) -> None:
        if not self._batch:
            return
        writes, waiting, forwards = self._batch, self._waiting, self._forwards
        self._batch, self._waiting, self._forwards = [], [], []
        started = time.perf_counter()
        try:
            await self._run(self.backend.commit, writes)
        except StoreError as exc:
            for pending in waiting:
                pending.fail(exc)
            raise
        self.commit_latency = self.commit_latency.observe(time.perf_counter() - started)
        publish = self._bus.publish
        for write in writes:
            for event in write.events:
                publish(event)
        for pending in waiting:
            pending.reply(None)
        node = self.node
        for forward in forwards:
            await deliver(node, forward.name, forward.message)

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        # In the event loop's own thread, on purpose. SQLite releases the GIL for every row
        # it steps, so a worker thread waits for the GIL behind the busy event loop at each
        # row: measured at ~130 us per write in a thread against ~25 us here. A commit blocks
        # the loop for at most FLUSH_AT writes (~50 ms); at that load everything waits on
        # the Store anyway.
        return fn(*args)


class Breaker(Actor[Any]):
    """Checks a loop before each round: escalate (told to the loop's runner), or go on (the
    loop is passed to the Compactor). A pipeline of casts, so a busy runtime handles these in
    batches and a runner is woken once, with the outcome.

    It keeps each live loop's run ledger (one attempt per finished round, sent by the
    runner) and applies loop-context's breaker to it after the runtime's own checks. After a
    restart of this actor a ledger is rebuilt from the store when it is next needed.
    """

    mailbox_size = 16_384

    def __init__(self) -> None:
        self._attempts: dict[str, list[Attempt]] = {}
        self._configs: dict[str, BreakerConfig] = {}  # per live loop: its spec is fixed

    async def handle(self, message: Any) -> Any:
        kind = type(message)
        if kind is RecordAttempt:
            attempts = self._attempts.get(message.loop_id)
            if attempts is not None:  # not cached: it is rebuilt from the store when needed
                attempts.append(message.attempt)
            return None
        if kind is ForgetLedger:
            self._attempts.pop(message.loop_id, None)
            self._configs.pop(message.loop_id, None)
            return None
        if kind is not CheckRound:
            return ErrorReply(TypeError(f"the breaker does not accept {kind.__name__}"))
        state = message.state
        ledger = await self._ledger(state)
        verdict = check_before_round(state, message.now)
        if verdict is None:
            config = self._configs.get(state.loop_id)
            if config is None:
                config = self._configs[state.loop_id] = breaker_config(state.spec)
            decision = check_circuit_breaker(ledger, config)
            if decision.escalate:
                verdict = Verdict(trigger=decision.trigger, reason=decision.reason)
        if verdict is not None:
            escalate = Escalate(state.round, message.epoch, verdict)
            await deliver(self.node, runner_name(state.loop_id), escalate)
        else:
            injected = ledger if state.spec.inject_ledger else None
            await deliver(self.node, "compactor", BuildPrompt(state, message.epoch, injected))
        return None

    async def _ledger(self, state: LoopState) -> Ledger:
        attempts = self._attempts.get(state.loop_id)
        if attempts is None:
            records: list[RoundRecord] = []
            if state.round > 1:  # a loop this actor has not seen: its rounds are stored
                records = await self.node.ref("store").call(GetRounds(state.loop_id))
            attempts = [attempt_of(r, state.spec.task) for r in records if r.status != "running"]
            self._attempts[state.loop_id] = attempts
        return Ledger(goal=state.spec.task, attempts=tuple(attempts))


class Compactor(Actor[Any]):
    """Builds each round's prompt (inherit seed or fresh) and hands it to the loop's runner,
    and applies agents' compaction plans, micro and full (:class:`ApplyCompaction`, the pure
    :func:`~loopactors.agent.apply_plan`; the agent commits the result)."""

    mailbox_size = 16_384

    def __init__(self) -> None:
        self.prompts_built = 0
        self.compactions_applied = 0

    async def handle(self, message: Any) -> Any:
        kind = type(message)
        if kind is ApplyCompaction:
            try:
                applied = apply_plan(message.view, message.plan)
            except Exception as exc:
                # Refused, never a crash: a crash here restarts (rest_for_one) the dispatcher
                # and every round in flight. The agent then applies the plan itself.
                return ErrorReply(exc)
            self.compactions_applied += 1
            return applied
        if kind is GetCompactorStatistics:
            return {
                "prompts_built": self.prompts_built,
                "compactions_applied": self.compactions_applied,
            }
        if kind is not BuildPrompt:
            return ErrorReply(TypeError(f"the compactor does not accept {kind.__name__}"))
        self.prompts_built += 1
        state = message.state
        prompt = build_prompt(state)
        if message.ledger is not None and message.ledger.attempts:
            # loop-context's block goes first: the model reads what was tried before the task.
            block = build_context_injection(message.ledger, breaker_config(state.spec))
            prompt = msgspec.structs.replace(prompt, text=f"{block}\n\n{prompt.text}")
        ready = PromptReady(state.round, message.epoch, prompt)
        await deliver(self.node, runner_name(state.loop_id), ready)
        return None
