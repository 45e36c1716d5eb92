"""The Coordinator: admits loops, starts their runners, routes commands, recovers.

It keeps only live loops in memory (an index for the caps and the loop tree); a finished
loop leaves at once and its history stays in the store (rolebox's W20). Any number of loops
may share an owner, one after another or at the same time.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import re
import secrets
import time
from typing import Any

import attrs
import trio

from .._util import gc_paused
from ..actors import Actor, ChildSpec, ErrorReply, PendingReply, SupervisorRef
from ..errors import (
    ActorError,
    ActorNotRunning,
    AdmissionRefused,
    CallFailed,
    LoopNotFound,
    OwnedElsewhere,
    WorkerSpecError,
)
from ..loops import LoopState, RoundRecord, RoundSummary, cancel_loop, loop_id_problem
from ..storage import Write
from ..workers import check_worker_spec
from ._messages import (
    Admitted,
    Commit,
    ControlLoop,
    ForgetLedger,
    Forward,
    GetLoop,
    GetLoops,
    GetRounds,
    GetRoundSummaries,
    ListLiveLoops,
    LoopEnded,
    LoopsClaimed,
    LoopsFencedOut,
    StartLoop,
)
from ._runner import Resumed, RunnerFactory, worker_problem
from ._wiring import BREAKER, COORDINATOR, RunnerDeps, runner_name, services_of

__all__ = ["Coordinator", "CoordinatorLimits"]

log = logging.getLogger("loopactors.runtime")

#: How long a command waits for a loop's runner to come back from a restart.
RUNNER_PATIENCE = 5.0

_SPACE = re.compile(r"\s+")


def fingerprint(task: str) -> str:
    """A task as the duplicate check compares it: whitespace collapsed, case folded."""
    return _SPACE.sub(" ", task).strip().casefold()


class _StartMore:
    """The Coordinator's note to itself: more admitted loops wait for their runners."""

    __slots__ = ()


#: How many runners the Coordinator starts with one request to the loop supervisor. With
#: 10,000 loops admitted at once (bench/loops.py, memory store), 4 gave ~20% more rounds/s
#: than 1 (one request per runner); 8 and more gave less, and longer steps between rounds,
#: as more loops in flight together make the garbage collector's full passes longer.
START_BATCH = 4
#: How many recovered runners the Coordinator asks the loop supervisor for at a time.
RECOVERY_BATCH = 1_000
#: _known's answer for a loop id nobody has used (None there means "answered later").
_NEW = object()


@attrs.frozen
class CoordinatorLimits:
    max_live_loops: int = 10_000
    max_tree_loops: int = 30
    runner_shutdown: float = 5.0


@attrs.define
class _Live:
    parent_id: str | None
    task: str
    #: Made with the first child: most loops have none, and an empty set is 216 bytes.
    children: set[str] | None = None


class Coordinator(Actor[Any]):
    mailbox_size = 16_384

    def __init__(self, deps: RunnerDeps, limits: CoordinatorLimits) -> None:
        self.deps = deps
        self.limits = limits
        self._live: dict[str, _Live] = {}
        # Admitted, not yet durable: commands for them wait here until the runner exists.
        self._admitting: dict[str, tuple[LoopState, PendingReply]] = {}
        self._held: dict[str, list[tuple[ControlLoop, PendingReply]]] = {}
        self._stop_on_admit: set[str] = set()
        #: Durable admissions whose runners are not started yet, oldest first.
        self._ready: collections.deque[str] = collections.deque()
        #: Worker specs that parsed at an admission and cannot stop parsing later (scripted
        #: and python ones; a command's executable may go away): loops mostly share a few,
        #: and parsing one again for every loop costs more than the other admission checks.
        self._usable_workers: set[str] = set()

    async def on_start(self) -> None:
        # Recovering many loops makes objects that all live on (runners, rounds): garbage
        # collections would walk the growing heap again and again for nothing (a third of
        # the CPU time of recovering 50,000 loops, bench/recovery.py).
        with gc_paused():
            await self._recover()

    async def _recover(self) -> None:
        self.svc = services_of(self.node)
        loops = self.node.whereis("loops")
        if loops is None:
            raise ActorError("the loop supervisor is not running")
        supervisor = SupervisorRef(loops)
        # Recovery: every non-terminal loop resumes from its last committed step. A runner
        # still alive (only this actor restarted) is adopted; the others are started.
        # With no runner alive (the runtime's start) nothing but this actor changes a live
        # loop, so the snapshot below stays true and the new runners take it as it is;
        # else each reads its loop again (it may have moved on since).
        fresh = (await supervisor.statistics()).children == 0
        # On a shared store, the live loops this node owns; the others are other nodes'.
        states: list[LoopState] = await self.svc.store.call(ListLiveLoops(), self.deps.call_timeout)
        await self._resume(supervisor, states, fresh=fresh)

    async def _claimed(self, loop_ids: tuple[str, ...]) -> None:
        """Loops this node took over while running (a shared store, docs/multinode.md):
        recovered as at the start. As then, the states read here stay true: the claim made
        them this node's, and no runner of theirs runs here, so nothing else changes them."""
        loops = self.node.whereis("loops")
        new = tuple(i for i in loop_ids if i not in self._live and i not in self._admitting)
        if loops is None or not new:
            return  # a Coordinator that starts again recovers them with every owned loop
        found: list[LoopState] = await self.svc.store.call(GetLoops(new), self.deps.call_timeout)
        states = [state for state in found if not state.terminal]
        log.info("recovering %d loops claimed from other nodes", len(states))
        await self._resume(SupervisorRef(loops), states, fresh=True)

    async def _resume(
        self, supervisor: SupervisorRef, states: list[LoopState], *, fresh: bool
    ) -> None:
        states.sort(key=lambda s: (s.created_at, s.loop_id))  # parents before children
        for state in states:
            self._index(state)
        resume: list[LoopState] = []
        for state in states:
            parent_id = state.spec.parent_id
            runner = self.node.whereis(runner_name(state.loop_id))
            if parent_id is not None and parent_id not in self._live:
                # Its parent ended while this actor was down: it ends too (it lived in the
                # parent's scope), rather than run on as an orphan.
                if runner is not None:
                    await self._send_control(ControlLoop(loop_id=state.loop_id, command="stop"))
                else:
                    await self._end_without_runner(state, "its parent loop ended")
            elif runner is None:
                resume.append(state)
        if resume:
            handed = await self._resumed(resume) if fresh else {}
            # In batches, each within the call timeout: 50,000 runners asked for at once took
            # longer than that on a loaded machine, and the runtime then failed to open
            # (bench/recovery.py).
            for first in range(0, len(resume), RECOVERY_BATCH):
                batch = resume[first : first + RECOVERY_BATCH]
                specs = [
                    self._runner_spec(state, recovered=True, resumed=handed.get(state.loop_id))
                    for state in batch
                ]
                for result in await supervisor.start_children(specs, self.deps.call_timeout):
                    if isinstance(result, BaseException):
                        raise result

    async def _resumed(self, states: list[LoopState]) -> dict[str, Resumed]:
        """What the recovered runners would each read from the store as they start, read
        for all of them at once: their rounds (one read, not one per loop) and whether
        their workers can still be used (one check per worker spec, not one per loop)."""
        started = [s.loop_id for s in states if s.phase != "activating"]
        summaries: dict[str, tuple[RoundSummary, ...]] = await self.svc.store.call(
            GetRoundSummaries(tuple(started)), self.deps.call_timeout
        )
        problems: dict[str, str | None] = {}
        handed: dict[str, Resumed] = {}
        here = not self.deps.remote_workers
        for state in states:
            spec = state.spec.worker
            if spec not in problems:
                problems[spec] = worker_problem(spec, self.deps.kill_grace, here=here)
            handed[state.loop_id] = Resumed(summaries.get(state.loop_id, ()), problems[spec])
        return handed

    async def handle(self, message: Any) -> Any:
        kind = type(message)
        if kind is StartLoop:
            return await self._admit(message)
        if kind is ControlLoop:
            return await self._control(message)
        if kind is Admitted:
            self._ready.append(message.loop_id)  # its runner starts with a batch, when drained
            return None
        if kind is _StartMore:
            return None  # on_drained goes on with the next batch
        if kind is LoopEnded:
            await self._ended(message.state)
            return None
        if kind is LoopsClaimed:
            await self._claimed(message.loop_ids)
            return None
        if kind is LoopsFencedOut:
            await self._fenced(message.loop_ids)
            return None
        return ErrorReply(TypeError(f"the coordinator does not accept {kind.__name__}"))

    # -- admission -------------------------------------------------------------------------

    async def _admit(self, message: StartLoop) -> Any:
        spec = message.spec
        loop_id = message.loop_id or new_loop_id()
        if message.loop_id is not None:
            known = await self._known(message)
            if known is not _NEW:
                return known
        parent_id = spec.parent_id
        if parent_id is not None and parent_id not in self._live and self.deps.shared_store:
            parent = await self.svc.store.call(GetLoop(parent_id), self.deps.call_timeout)
            if parent is not None and not parent.terminal:
                # Another node's (or one claimed here, not recovered yet): the runtime routes
                # the start to the parent's owner, which admits the child in its tree.
                return ErrorReply(
                    OwnedElsewhere(
                        f"parent loop {parent_id!r} runs on another node of the shared store "
                        "(a child loop is admitted by its parent's node)"
                    )
                )
        refusal = self._refusal(message)
        if refusal is not None:
            return ErrorReply(refusal)
        now = time.time()
        state = LoopState(loop_id=loop_id, spec=spec, created_at=now, updated_at=now)
        # Counted at once (for the caps); started, and answered, once durable. Admissions
        # from many callers thus share the Store's batches instead of waiting in line.
        self._index(state)
        self._admitting[loop_id] = (state, self.defer_reply())
        admitted = Forward(COORDINATOR, Admitted(loop_id))
        await self.svc.store.cast(Commit(Write(state=state), (admitted,)))
        return None

    async def _known(self, message: StartLoop) -> Any:
        """The answer for a loop id seen before, ``_NEW`` for a new one.

        A start that names a loop id is idempotent: the same spec under an id already used
        gets that loop as it is (a retry whose first answer was lost, over the wire or to a
        crash), so a start is never done twice; a retry while the first is still being
        admitted waits for it. A different spec under a used id is refused: a loop's
        history is never overwritten (rolebox's W10).
        """
        loop_id = message.loop_id
        assert loop_id is not None
        problem = loop_id_problem(loop_id)
        if problem is not None:  # an id names files: never a path (docs/loops.md)
            return ErrorReply(AdmissionRefused(problem))
        admitting = self._admitting.get(loop_id)
        existing: LoopState | None = admitting[0] if admitting is not None else None
        if existing is None and (loop_id in self._live or message.check_existing):
            existing = await self.svc.store.call(GetLoop(loop_id), self.deps.call_timeout)
        if existing is None:
            return _NEW
        if existing.spec != message.spec:
            return ErrorReply(
                AdmissionRefused(
                    f"loop id {loop_id!r} is already used by a loop that is {existing.phase} "
                    "with another spec; choose another id (the same spec gets that loop)"
                )
            )
        if loop_id in self._admitting:
            # Answered with the loop's state once its runner exists (see _start_ready).
            status = ControlLoop(loop_id=loop_id, command="status")
            self._held.setdefault(loop_id, []).append((status, self.defer_reply()))
            return None
        return existing

    async def on_drained(self) -> None:
        if self._ready:
            await self._start_ready()

    async def _start_ready(self) -> None:
        """Start the runners of up to START_BATCH loops whose admission is durable, side by
        side with one request to the loop supervisor, and answer their callers.

        One request per runner would cost a few scheduler passes each, so loops would start
        one by one; all at once would put every admitted loop in flight together (more
        memory, and longer garbage collections). Batches go between the two.
        """
        batch: list[tuple[LoopState, PendingReply]] = []
        while self._ready and len(batch) < START_BATCH:
            loop_id = self._ready.popleft()
            entry = self._admitting.get(loop_id)
            if entry is None:
                continue
            state, pending = entry
            parent_id = state.spec.parent_id
            if loop_id in self._stop_on_admit or (
                parent_id is not None and parent_id not in self._live
            ):
                # Its parent ended (or stopped it) while it was being admitted: it ends unstarted.
                self._stop_on_admit.discard(loop_id)
                del self._admitting[loop_id]
                final = await self._end_without_runner(state, "its parent loop ended")
                refused = f"parent loop {parent_id!r} ended; child not started"
                pending.fail(AdmissionRefused(refused))
                self._answer_held(loop_id, final)
                continue
            batch.append(entry)
        if self._ready:
            self.ref.cast_nowait(_StartMore())  # the next batch, after this one
        if not batch:
            return
        loops = self.node.whereis("loops")
        specs = [self._runner_spec(state, recovered=False) for state, _ in batch]
        results: list[Any]
        if loops is None:
            results = [ActorError("the loop supervisor is not running")] * len(batch)
        else:
            try:
                results = await SupervisorRef(loops).start_children(specs, self.deps.call_timeout)
            except ActorError as exc:  # the loop supervisor went down meanwhile
                results = [exc] * len(batch)
        for (state, pending), result in zip(batch, results, strict=True):
            loop_id = state.loop_id
            del self._admitting[loop_id]
            if isinstance(result, BaseException):
                reason = f"its runner failed to start: {result}"
                final = await self._end_without_runner(state, reason)
                pending.fail(AdmissionRefused(f"the loop's runner failed to start: {result}"))
                self._answer_held(loop_id, final)
                continue
            pending.reply(state)
            for command, waiting in self._held.pop(loop_id, []):
                try:  # commands sent while it was being admitted
                    waiting.reply(await self._send_control(command))
                except Exception as exc:  # a command's failure is its caller's, not ours
                    waiting.fail(exc)

    def _answer_held(self, loop_id: str, final: LoopState) -> None:
        for _, waiting in self._held.pop(loop_id, []):
            waiting.reply(final)

    async def _end_without_runner(self, state: LoopState, reason: str) -> LoopState:
        """Cancel a live loop that has no runner (orphaned, or refused after admission)."""
        rounds: list[RoundRecord] = await self.svc.store.call(
            GetRounds(state.loop_id), self.deps.call_timeout
        )
        # The round it had in flight, if any, is closed; the final event has every round.
        final, record, events = cancel_loop(state, reason, time.time(), rounds=rounds)
        # The Breaker may hold its ledger (it ran rounds before a Coordinator restart).
        forget = Forward(BREAKER, ForgetLedger(state.loop_id))
        await self.svc.store.call(
            Commit(Write(state=final, round=record, events=events), (forget,)),
            self.deps.call_timeout,
        )
        self._forget(state.loop_id)
        return final

    def _refusal(self, message: StartLoop) -> Exception | None:
        spec = message.spec
        if len(self._live) >= self.limits.max_live_loops:
            return AdmissionRefused(
                f"the runtime already runs {len(self._live)} live loops "
                f"(max_live_loops = {self.limits.max_live_loops}); wait for some to finish "
                "or raise the cap"
            )
        if spec.worker not in self._usable_workers:
            try:
                kind = check_worker_spec(
                    spec.worker, kill_grace=self.deps.kill_grace, here=not self.deps.remote_workers
                )
            except WorkerSpecError as exc:
                return exc
            except Exception as exc:  # anything else about a bad spec: refuse it, never crash
                return WorkerSpecError(f"cannot use worker {spec.worker!r}: {exc}")
            # Bounded: specs may differ for every loop.
            if kind.stable_spec and len(self._usable_workers) < 1024:
                self._usable_workers.add(spec.worker)
        if spec.parent_id is None:
            return None
        parent = self._live.get(spec.parent_id)
        if parent is None:
            return AdmissionRefused(
                f"parent loop {spec.parent_id!r} is not live; a child loop lives in its "
                "parent's scope"
            )
        # The reference's rule: a child may not repeat the task of any of its ancestors.
        wanted = fingerprint(spec.task)
        ancestor_id: str | None = spec.parent_id
        root_id = spec.parent_id
        while ancestor_id is not None:
            ancestor = self._live[ancestor_id]
            if fingerprint(ancestor.task) == wanted:
                return AdmissionRefused(
                    "identical task already looping in ancestor chain (loop "
                    f"{ancestor_id}): refine the task or report the blockage instead"
                )
            root_id = ancestor_id
            ancestor_id = ancestor.parent_id
        tree = self._tree_size(root_id)
        if tree + 1 > self.limits.max_tree_loops:
            return AdmissionRefused(
                f"loop tree budget exhausted: {tree} live loops in the tree of {root_id} "
                f"(max_tree_loops = {self.limits.max_tree_loops}); some must finish first"
            )
        return None

    def _tree_size(self, root_id: str) -> int:
        size, todo = 0, [root_id]
        while todo:
            loop = self._live.get(todo.pop())
            if loop is not None:
                size += 1
                todo.extend(loop.children or ())
        return size

    def _runner_spec(
        self, state: LoopState, *, recovered: bool, resumed: Resumed | None = None
    ) -> ChildSpec:
        return ChildSpec(
            state.loop_id,
            RunnerFactory(state.loop_id, self.deps, state, recovered=recovered, resumed=resumed),
            restart="transient",
            name=runner_name(state.loop_id),
            shutdown=self.limits.runner_shutdown,
        )

    # -- commands --------------------------------------------------------------------------

    async def _control(self, message: ControlLoop) -> Any:
        loop_id = message.loop_id
        if loop_id in self._admitting:
            if message.command == "status":
                return self._admitting[loop_id][0]
            # Runs once the loop's runner exists (its first state is not durable yet).
            self._held.setdefault(loop_id, []).append((message, self.defer_reply()))
            return None
        if loop_id not in self._live:
            state = await self.svc.store.call(GetLoop(loop_id), self.deps.call_timeout)
            if state is None:
                return ErrorReply(LoopNotFound(f"no loop {loop_id!r} in this runtime's store"))
            if self.deps.shared_store and not state.terminal and message.command != "status":
                # Another node's (docs/multinode.md): the runtime routes the command to
                # it (not from here, which would wait for that node's answer).
                return ErrorReply(
                    OwnedElsewhere(
                        f"loop {loop_id!r} runs on another node of the shared store "
                        "(`loopactors status --store URL` names each loop's node)"
                    )
                )
            return state  # finished: every command is a no-op that reports the final state
        if message.command == "stop":
            # Children live in their parent's scope: they go first, then the parent.
            for child_id in self._descendants(loop_id):
                await self._send_control(ControlLoop(loop_id=child_id, command="stop"))
        return await self._send_control(message)

    async def _send_control(self, message: ControlLoop) -> Any:
        """Deliver a command to the loop's runner, riding out a restart of the runner.

        A loop still being admitted has no runner yet: the command waits for it (a caller's
        command), or the loop is ended unstarted (a parent's stop reaching its child).

        A runner that finished meanwhile (the command met its last round) is answered for by
        the store, which by then holds the final state.
        """
        loop_id = message.loop_id
        if loop_id in self._admitting:
            if message.command == "stop":
                self._stop_on_admit.add(loop_id)
            return self._admitting[loop_id][0]
        name = runner_name(loop_id)
        deadline = trio.current_time() + RUNNER_PATIENCE
        while True:
            ref = self.node.whereis(name)
            if ref is not None:
                try:
                    return await ref.call(message, self.deps.call_timeout)
                except (CallFailed, ActorNotRunning):
                    pass
            state: LoopState | None = await self.svc.store.call(
                GetLoop(loop_id), self.deps.call_timeout
            )
            if state is None:
                return ErrorReply(LoopNotFound(f"no loop {loop_id!r}"))
            if state.terminal or loop_id not in self._live:
                return state
            if trio.current_time() >= deadline:
                return ErrorReply(
                    ActorNotRunning(
                        f"loop {loop_id!r} has no running runner (restarting?); try again"
                    )
                )
            await trio.sleep(0.01)  # its runner is being restarted by the loop supervisor

    def _descendants(self, loop_id: str) -> list[str]:
        """Live descendants, deepest first."""
        found: list[str] = []
        for child in self._live[loop_id].children or ():
            if child in self._live:
                found.extend(self._descendants(child))
                found.append(child)
        return found

    async def _fenced(self, loop_ids: frozenset[str]) -> None:
        """The Store found these loops not this node's (a shared store: another node owns
        them, or they changed owner since this node took them); nothing of them was
        written. An admission of an id another node admitted first gets that loop if the
        spec is the same, a refusal otherwise; a running loop's runner stops here."""
        loops = self.node.whereis("loops")
        for loop_id in sorted(loop_ids):
            admitting = self._admitting.pop(loop_id, None)
            self._stop_on_admit.discard(loop_id)
            self._forget(loop_id)
            if admitting is not None:
                state, pending = admitting
                existing: LoopState | None = await self.svc.store.call(
                    GetLoop(loop_id), self.deps.call_timeout
                )
                if existing is not None and existing.spec == state.spec:
                    pending.reply(existing)
                    self._answer_held(loop_id, existing)
                    continue
                refusal = AdmissionRefused(
                    f"loop id {loop_id!r} was taken by another node at the same moment"
                    + (" with another spec" if existing is not None else "")
                    + "; choose another id (the same spec gets that loop)"
                )
                pending.fail(refusal)
                for _, waiting in self._held.pop(loop_id, []):
                    waiting.fail(refusal)
                continue
            log.error(
                "loop %s is not this node's any more (another node owns it, or it changed "
                "owner): its runner stops here, nothing of it is written",
                loop_id,
            )
            if loops is not None:
                with contextlib.suppress(Exception):  # it may have stopped on its own
                    await SupervisorRef(loops).terminate_child(loop_id, self.deps.call_timeout)

    async def _ended(self, state: LoopState) -> None:
        loop = self._live.get(state.loop_id)
        if loop is None:
            return
        # A loop's children end with it: they live in its scope.
        for child_id in self._descendants(state.loop_id):
            await self._send_control(ControlLoop(loop_id=child_id, command="stop"))
        self._forget(state.loop_id)

    # -- the index of live loops -----------------------------------------------------------

    def _index(self, state: LoopState) -> None:
        parent_id = state.spec.parent_id
        self._live[state.loop_id] = _Live(parent_id=parent_id, task=state.spec.task)
        parent = self._live.get(parent_id) if parent_id is not None else None
        if parent is not None:
            if parent.children is None:
                parent.children = set()
            parent.children.add(state.loop_id)

    def _forget(self, loop_id: str) -> None:
        loop = self._live.pop(loop_id, None)
        parent = self._live.get(loop.parent_id) if loop and loop.parent_id is not None else None
        if parent is not None and parent.children:
            parent.children.discard(loop_id)

    def statistics(self) -> dict[str, int]:
        return {"live_loops": len(self._live)}


def new_loop_id() -> str:
    """Short, unique, roughly time-ordered: seconds since the epoch in hex, then randomness."""
    # 64 random bits: with 32, 10,000 loops started within one second shared an id about
    # once in a hundred runs (the birthday bound), and the second start was refused.
    return f"{int(time.time()):x}-{secrets.token_hex(8)}"
