"""The code loop's Python API: init, run on a runtime, status, pause, resume, stop, handoff.

Every writer of ``STATE.json`` holds the lease while it writes: ``run`` for its whole run, the
control commands for an instant. A pause or stop asked for while another owner runs a round is
left as a request (``CONTROL.json``) that the owner applies at the end of that round, the next
safe point.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import attrs

from ..errors import CodeLoopExists, GateClosed, LeaseHeld, OrchestrationError
from ..loops import MAX_ROUNDS, LoopSpec, RoundFinished
from ..runtime import Runtime
from ._events import GateTripped, Initialized, SettingsChanged, StatusChanged
from ._gates import check_settings, dispatch_refusal
from ._git import LoopGit, main_root
from ._handoff import HandOff
from ._lease import Lease, acquire_lease, lease_kept, new_owner, release_lease
from ._ledger import CodeLedger, list_slugs
from ._model import IN_ROUND, Attendance, CodeLoopState
from ._orchestration import (
    DEFAULT_VALIDATE_TIMEOUT,
    Orchestration,
    parse_orchestration,
    render_orchestration,
)
from ._report import CodeLoopStatus, loop_status, write_handoff
from ._round import CodeRound
from ._worker import CODE_ROUND_WORKER, load_orchestration, round_lock

__all__ = ["DEFAULT_ROUND_TIMEOUT", "CodeLoop", "open_code_loop"]

#: Seconds one code round (executor, validation and review together) may take.
DEFAULT_ROUND_TIMEOUT = 3600.0
USER = "user"


async def open_code_loop(slug: str, *, path: Path | str = ".") -> CodeLoop:
    """The code loop ``slug`` of the repository ``path`` is in (also from a linked worktree)."""
    root = await main_root(_absolute(path))
    return CodeLoop(root, slug)


def _absolute(path: Path | str) -> Path:
    return Path(path).absolute()


@attrs.frozen
class CodeLoop:
    """One code loop of one repository: ``<root>/.loop/<slug>/`` and its ``loop/<slug>/``
    branches."""

    root: Path
    slug: str
    ledger: CodeLedger = attrs.field(init=False)
    git: LoopGit = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "ledger", CodeLedger(self.root, self.slug))
        object.__setattr__(self, "git", LoopGit(self.root, self.slug))

    @staticmethod
    async def all(path: Path | str = ".") -> list[CodeLoop]:
        root = await main_root(_absolute(path))
        return [CodeLoop(root, slug) for slug in list_slugs(root)]

    def state(self) -> CodeLoopState:
        return self.ledger.read_state()

    def orchestration(self) -> Orchestration:
        return parse_orchestration(load_orchestration(self.ledger), slug=self.slug)

    async def status(self) -> CodeLoopStatus:
        return await loop_status(self.ledger, self.git)

    # -- set up ------------------------------------------------------------------------------

    async def init(
        self,
        *,
        objective: str,
        executor: str | None = None,
        reviewer: str | None = None,
        validate: str | None = None,
        validate_timeout: float | None = None,
        max_rounds: int | None = None,
        deadline: str | None = None,
        attendance: Attendance = "attended",
        force: bool = False,
    ) -> CodeLoopState:
        """Create the ledger and the candidate branch (cut from the current HEAD).

        An existing ``ORCHESTRATION.md`` is validated and reused (flags that disagree with it
        are refused); otherwise one is written from the flags.

        Raises:
            CodeLoopExists: the loop exists and ``force`` is not given.
            OrchestrationError: missing or bad roles, self-review, bad gates.
        """
        if not objective.strip():
            raise OrchestrationError("the objective is empty: say what the loop should achieve")
        check_settings(attendance=attendance, max_rounds=max_rounds, deadline=deadline)
        previous: CodeLoopState | None = None
        if self.ledger.exists():
            if not force:
                raise CodeLoopExists(
                    f"code loop {self.slug!r} already exists in {self.ledger.dir}; run it "
                    "(loopactors code run), or re-initialise it with --force"
                )
            previous = self.ledger.read_state()
        orchestration = self._orchestration_for(executor, reviewer, validate, validate_timeout)
        lease = acquire_lease(self.ledger.dir, owner=new_owner())
        try:
            if previous is not None and previous.status in IN_ROUND:
                raise LeaseHeld(
                    f"round {previous.round} of {self.slug!r} is still {previous.status}"
                )
            if previous is None and await self.git.rev(self.git.candidate) is not None:
                raise CodeLoopExists(
                    f"branch {self.git.candidate} exists without a ledger; delete it, or "
                    "re-initialise with --force"
                )
            head = await self.git.rev("HEAD")
            if head is None:
                raise OrchestrationError(f"{self.root} has no commit yet; commit something first")
            await self.git.create_branch(self.git.candidate, head, force=force)
            await self.git.exclude_ledger()
            if not self.ledger.orchestration_path.exists():
                text = render_orchestration(orchestration, slug=self.slug, objective=objective)
                self.ledger.write_text(self.ledger.orchestration_path, text)
            if not self.ledger.plan_path.exists():
                plan = (
                    f"# Plan: {self.slug}\n\nObjective: {objective}\n\n- [ ] reach the objective\n"
                )
                self.ledger.write_text(self.ledger.plan_path, plan)
            (self.ledger.dir / "rounds").mkdir(parents=True, exist_ok=True)
            now = time.time()
            state = CodeLoopState(
                slug=self.slug,
                objective=objective,
                attendance=attendance,
                # After --force, numbering goes on: a round branch name is never reused.
                round=previous.round if previous else 0,
                max_rounds=max_rounds,
                deadline=deadline,
                candidate_branch=self.git.candidate,
                base_branch=await self.git.head_branch(),
                base_commit=head,
                candidate_commit=head,
                created_at=now,
                updated_at=now,
            )
            event = Initialized(
                at=now,
                actor=USER,
                prev_status=previous.status if previous else None,
                status="ready",
                round=state.round,
                reason="re-initialised with --force" if previous else "initialised",
                branch=self.git.candidate,
                commit=head,
                state=state,
            )
            return self.ledger.record(previous, event)
        finally:
            release_lease(lease)

    def _orchestration_for(
        self,
        executor: str | None,
        reviewer: str | None,
        validate: str | None,
        validate_timeout: float | None,
    ) -> Orchestration:
        given = {"executor": executor, "reviewer": reviewer, "validate": validate}
        if self.ledger.orchestration_path.exists():
            found = self.orchestration()
            for name, value in given.items():
                if value is not None and value != getattr(found, name):
                    raise OrchestrationError(
                        f"{name} {value!r} differs from ORCHESTRATION.md "
                        f"({getattr(found, name)!r}); edit the file, or leave the flag out"
                    )
            return found
        missing = [name for name, value in given.items() if not value]
        if missing:
            raise OrchestrationError(
                f"no ORCHESTRATION.md yet, so {', '.join(missing)} must be given"
            )
        return Orchestration(
            executor=executor or "",
            reviewer=reviewer or "",
            validate=validate or "",
            validate_timeout=DEFAULT_VALIDATE_TIMEOUT
            if validate_timeout is None
            else validate_timeout,
        ).check()

    # -- controls ------------------------------------------------------------------------------

    async def _with_lease(self, change: Callable[[CodeRound], Awaitable[str]]) -> str:
        self.ledger.read_state()  # a clear error for a loop that does not exist
        lease = acquire_lease(self.ledger.dir, owner=new_owner())
        try:
            worker = CodeRound(self.ledger, self.git, self.orchestration_or_none(), USER)
            worker.state = self.ledger.read_state()
            return await change(worker)
        finally:
            release_lease(lease)

    def orchestration_or_none(self) -> Orchestration:
        try:
            return self.orchestration()
        except Exception:  # controls must work even when roles are being fixed by hand
            return Orchestration(executor="", reviewer="", validate="")

    async def pause(self) -> str:
        """Pause now if idle, else after the running round. Returns what happened."""
        return await self._control("pause")

    async def stop(self) -> str:
        """Stop for good now if idle, else after the running round (then HANDOFF.md)."""
        return await self._control("stop")

    async def _control(self, command: str) -> str:
        async def apply(worker: CodeRound) -> str:
            state = worker.state
            if command == "pause":
                worker._record(
                    StatusChanged,
                    status="paused",
                    reason="paused by the user",
                    next_action="resume",
                )
            else:
                worker._record(
                    StatusChanged,
                    status="stopped",
                    reason="stopped by the user",
                    next_action="none",
                )
                await write_handoff(self.ledger, self.git, worker.state)
            return f"{self.slug}: {state.status} -> {worker.state.status}"

        try:
            return await self._with_lease(apply)
        except LeaseHeld:
            self.ledger.request_control(command)
            return f"{self.slug}: a round is running; it will {command} after that round"

    async def resume(self, *, max_rounds: int | None = None, deadline: str | None = None) -> str:
        """Make a paused, waiting or blocked loop ready again (optionally with new gates);
        open approvals count as approved and no-progress starts over. Also withdraws a pause
        or stop asked for during a running round."""

        async def apply(worker: CodeRound) -> str:
            state = worker.state
            if state.status in ("ready", *IN_ROUND) and not (max_rounds or deadline):
                return f"{self.slug}: already {state.status}"
            rounds = max_rounds if max_rounds is not None else state.max_rounds
            until = deadline if deadline is not None else state.deadline
            check_settings(attendance=state.attendance, max_rounds=rounds, deadline=until)
            worker._record(
                SettingsChanged,
                status=state.status,
                max_rounds=rounds,
                deadline=until,
                reason="resumed by the user",
            )
            if worker.state.status != "ready":
                worker._record(StatusChanged, status="ready", reason="resumed by the user")
            return f"{self.slug}: {state.status} -> ready"

        try:
            return await self._with_lease(apply)
        except LeaseHeld:
            if self.ledger.take_control() is not None:
                return f"{self.slug}: the requested pause/stop is withdrawn"
            raise

    async def handoff(self) -> HandOff:
        """Write ``HANDOFF.md`` now (any status) and return its record."""
        return await write_handoff(self.ledger, self.git, self.state())

    # -- running -------------------------------------------------------------------------------

    async def run(
        self,
        runtime: Runtime,
        *,
        rounds: int | None = 1,
        round_timeout: float = DEFAULT_ROUND_TIMEOUT,
        on_round: Callable[[CodeLoopState], None] | None = None,
    ) -> CodeLoopState:
        """Run up to ``rounds`` rounds (``None``: until a gate stops the loop) as a loop of
        ``runtime``, holding the lease throughout.

        Raises:
            LeaseHeld: another owner is running this loop.
            GateClosed: the loop is paused, stopped, completed, waiting or blocked.
        """
        self.ledger.read_state()  # a clear error for a loop that does not exist
        lease = acquire_lease(self.ledger.dir, owner=new_owner())
        try:
            async with lease_kept(lease):
                return await self._run(runtime, lease, rounds, round_timeout, on_round)
        finally:
            release_lease(lease)

    async def _run(
        self,
        runtime: Runtime,
        lease: Lease,
        rounds: int | None,
        round_timeout: float,
        on_round: Callable[[CodeLoopState], None] | None,
    ) -> CodeLoopState:
        first = CodeRound(self.ledger, self.git, self.orchestration(), lease.owner)
        closed = await first.prepare()  # reconcile a crashed round, apply requests, gates
        if isinstance(closed, str):
            raise GateClosed(f"{self.slug}: {closed}; nothing was dispatched")
        if closed is not None:
            return first.state
        left = rounds
        while left is None or left > 0:
            cap = min(MAX_ROUNDS, runtime.config.max_rounds)  # the node's cap, if lower
            batch = cap if left is None else min(left, cap)
            spec = LoopSpec(
                task=str(self.ledger.dir),
                rounds=batch,
                mode="fresh",
                worker=CODE_ROUND_WORKER,
                objective=first.state.objective,
                round_timeout=round_timeout,
            )
            handle = runtime.handle(await runtime.start(spec))
            if on_round is not None:
                async for event in handle.history_and_events():
                    if isinstance(event, RoundFinished):
                        on_round(self.state())
            final = await handle.wait()
            async with round_lock(self.ledger):
                pass  # a round cancelled with its loop may still be cleaning up
            state = self.state()
            # A batch none of whose rounds merged reaches its cap `escalated` with trigger
            # no_completed_round: for a code loop that is the batch done like any other (its
            # own gates judge rounds that merge nothing), not a breaker trip.
            ran_out = final.phase == "complete" or final.trigger == "no_completed_round"
            if final.phase == "escalated" and not ran_out and state.status == "ready":
                state = await self._breaker_tripped(
                    lease, final.reason or final.trigger or "escalated"
                )
            if dispatch_refusal(state) is not None or not ran_out:
                return state
            # Complete and still ready: every round of the batch ran.
            left = None if left is None else left - batch
        return self.state()

    async def _breaker_tripped(self, lease: Lease, reason: str) -> CodeLoopState:
        worker = CodeRound(self.ledger, self.git, self.orchestration(), lease.owner)
        worker.state = self.ledger.read_state()
        worker._record(
            GateTripped,
            status="blocked",
            active_gate="breaker",
            reason=f"the run-ledger breaker escalated: {reason}",
            next_action="fix what blocks the loop, then resume or stop",
        )
        await write_handoff(self.ledger, self.git, worker.state)
        return worker.state
