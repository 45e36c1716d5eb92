"""One code round under a held lease: executor -> validation -> reviewer -> merge or keep.

Each step is recorded in the ledger before its side effect (the round's intent before its
branch exists), so a crash at any point is found by :meth:`CodeRound.reconcile` at the next
start: a round caught while its executor ran is marked interrupted (its branch kept, its
number never reused); one caught in validation or review is resumed on its branch.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import attrs
import msgspec
import trio

from ..errors import GitError, LoopactorsError
from ..workers import RoundResult, in_workspace, parse_worker
from ._events import CodeRoundFinished, GateTripped, RoundInterrupted, RoundStarted, StatusChanged
from ._gates import Gate, check_gates, is_progress, parse_approvals, parse_verdict
from ._git import LoopGit
from ._guard import (
    RepoSnapshot,
    breaches,
    live_loops,
    load_turn,
    push_urls,
    refuse_push_env,
    save_turn,
    take_snapshot,
    undo,
)
from ._ledger import CodeLedger, write_atomic
from ._model import IN_ROUND, CodeLoopState, round_name
from ._orchestration import Orchestration, works_in_its_spec
from ._receipts import (
    executor_prompt,
    review_prompt,
    review_receipt,
    validation_receipt,
    worker_env,
    worker_receipt,
    worker_request,
)
from ._report import write_handoff
from ._validation import run_validation

__all__ = ["CodeRound", "RoundOutcome"]

_TAIL = 4000
T = TypeVar("T")


@attrs.frozen
class RoundOutcome:
    """What one call did: the round it ran (None if none), and the loop's state after it."""

    round: int | None
    merged: bool
    state: CodeLoopState
    summary: str

    @property
    def stopped(self) -> bool:
        """The loop dispatches no further round."""
        return self.state.status != "ready"


@attrs.define
class CodeRound:
    """Runs the next round of one loop; the caller holds the lease."""

    ledger: CodeLedger
    git: LoopGit
    orchestration: Orchestration
    actor: str
    clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)
    state: CodeLoopState = attrs.field(init=False)
    #: The ledger files as this round last wrote them (see :meth:`CodeLedger.fingerprint`).
    _written: tuple[int, ...] = attrs.field(init=False, default=())
    #: What a role's turn changed in the repository that it must not (see ``_guard``).
    _breach: str | None = attrs.field(init=False, default=None)

    def _record(self, event_type: type, **fields: object) -> CodeLoopState:
        state = self.state
        fields.setdefault("round", state.round)
        event = event_type(at=time.time(), actor=self.actor, prev_status=state.status, **fields)
        self.state = self.ledger.record(state, event)
        self._written = self.ledger.fingerprint()
        return self.state

    async def _tampered(self, base: str) -> str | None:
        """What a worker changed that it must not: refs, hooks or config outside the loop's
        branches, the ledger, or the candidate branch."""
        if self._breach is not None:
            return self._breach
        if self.ledger.fingerprint() != self._written:
            return "STATE.json or RUNS.jsonl changed during a worker's turn (only the loop may)"
        if await self.git.rev(self.git.candidate) != base:
            return "the candidate branch moved during the round (only a merge may move it)"
        return None

    # -- before a round ----------------------------------------------------------------------

    async def prepare(self) -> Gate | str | None:
        """Load the state, reconcile a crashed round, apply a pending pause or stop, and check
        the gates. Returns the gate that tripped (now recorded, HANDOFF.md written), a refusal
        (paused, stopped, ...), or None when a round may start."""
        self.state = self.ledger.read_state()
        if self.state.status in IN_ROUND:
            await self.reconcile()
        await self._settle_breach()
        if self.state.status == "ready":
            command = self.ledger.take_control()
            if command == "pause":
                self._record(
                    StatusChanged, status="paused", reason="paused by request", next_action="resume"
                )
            elif command == "stop":
                self._record(
                    StatusChanged, status="stopped", reason="stopped by request", next_action="none"
                )
                await write_handoff(self.ledger, self.git, self.state)
        if self.state.status != "ready":
            return f"the loop is {self.state.status}" + (
                f" ({self.state.active_gate}: {self.state.reason})"
                if self.state.active_gate
                else ""
            )
        gate = check_gates(self.state, self.clock())
        if gate is not None:
            await self._trip(gate)
        return gate

    async def _trip(self, gate: Gate) -> None:
        self._record(
            GateTripped,
            status=gate.status,
            active_gate=gate.name,
            reason=gate.reason,
            next_action="review the candidate, then resume or stop"
            if gate.status == "waiting_review"
            else "fix what blocks the loop, then resume or stop",
        )
        await write_handoff(self.ledger, self.git, self.state)

    async def _settle_breach(self) -> None:
        """Record a breach a turn left noted (``BREACH.txt``) as the safety gate, then drop the
        note: a crash anywhere between finding a breach and recording it ends here at the
        next run, never with the breach forgotten (docs/security.md)."""
        try:
            text = self.ledger.breach_path.read_text(encoding="utf-8", errors="replace").strip()
        except FileNotFoundError:
            return
        if text and not (self.state.status == "blocked" and self.state.active_gate == "safety"):
            await self._trip(Gate("safety", text, "blocked"))
        self.ledger.breach_path.unlink(missing_ok=True)

    def _note_breach(self, text: str) -> None:
        write_atomic(self.ledger.breach_path, text.encode())

    async def reconcile(self) -> None:
        """A round left in flight by a process that is gone (its lease expired)."""
        state = self.state
        number = state.round
        branch = self.git.round_branch(number)
        tip = await self.git.rev(branch)
        breach = await self._check_crashed_turn()
        if state.status == "running" or tip is None or breach is not None:
            reason = f"interrupted while {state.status} (its process is gone); the branch is kept"
            await self._interrupt(number, reason + (f"; {breach}" if breach else ""))
            await self._settle_breach()
            self.ledger.turn_path.unlink(missing_ok=True)  # checked, and the check recorded
            return
        self.ledger.turn_path.unlink(missing_ok=True)
        # Validation and review read only the committed branch: run them again.
        self._record(
            StatusChanged,
            status=state.status,
            reason="resumed after a crash",
            branch=branch,
            commit=tip,
        )
        await self._resume_from(state.status)

    async def _interrupt(self, number: int, reason: str) -> None:
        branch = self.git.round_branch(number)
        await self.git.remove_worktree(self.ledger.worktree(number))
        base = self._round_base(number)
        tip = await self.git.rev(branch)
        if tip is not None and base is not None and tip == base:
            await self.git.delete_branch(branch)  # no work on it: nothing to inspect
            tip = None
        self.ledger.append_lesson(f"- {round_name(number)}: interrupted ({reason})")
        self._record(RoundInterrupted, status="ready", reason=reason, branch=branch, commit=tip)

    def _round_base(self, number: int) -> str | None:
        for event in reversed(self.ledger.read_events()):
            if isinstance(event, RoundStarted) and event.round == number:
                return event.commit
        return None

    async def _resume_from(self, status: str) -> None:
        number = self.state.round
        branch = self.git.round_branch(number)
        worktree = self.ledger.worktree(number)
        base = self._round_base(number) or self.state.candidate_commit
        tip = await self.git.rev(branch) or base
        self._breach = None
        await self.git.remove_worktree(worktree)
        await self.git.add_worktree(worktree, branch)
        try:
            await self._validate_and_review(number, base, tip, executor_output="", done=False)
        finally:
            with trio.CancelScope(shield=True):
                await self._cleanup(number)

    # -- the round ---------------------------------------------------------------------------

    async def run(self) -> RoundOutcome:
        """:meth:`prepare`, then one round if the gates allow it."""
        closed = await self.prepare()
        if closed is not None:
            summary = closed if isinstance(closed, str) else f"gate {closed.name}: {closed.reason}"
            return RoundOutcome(None, False, self.state, f"no round: {summary}")
        state = self.state
        number = state.round + 1
        branch = self.git.round_branch(number)
        self._breach = None
        base = await self.git.rev(self.git.candidate)
        if base is None:
            await self._trip(
                Gate("safety", f"the candidate branch {self.git.candidate} is gone", "blocked")
            )
            return RoundOutcome(None, False, self.state, "no round: the candidate branch is gone")
        # The intent first: a crash from here on is found by reconcile, never run twice.
        self._record(
            RoundStarted,
            status="running",
            round=number,
            branch=branch,
            commit=base,
            next_action="wait for the round",
        )
        try:
            await self._new_branch(branch, base)
            worktree = self.ledger.worktree(number)
            await self.git.remove_worktree(worktree)
            await self.git.add_worktree(worktree, branch)
            result = await self._execute(number, base)
            tip = await self.git.rev(branch) or base
            if self.state.status == "running":
                await self._after_executor(number, base, tip, result)
        except BaseException as exc:
            with trio.CancelScope(shield=True):
                if self.state.status in IN_ROUND:
                    why = (
                        "cancelled (stop or round timeout)"
                        if _is_cancel(exc)
                        else f"{type(exc).__name__}: {exc}"
                    )
                    if self._breach is not None:
                        why += f"; {self._breach}"
                    await self._interrupt(number, why)
            if isinstance(exc, LoopactorsError | OSError):
                return RoundOutcome(number, False, self.state, f"round {number} failed: {exc}")
            raise
        finally:
            with trio.CancelScope(shield=True):
                await self._cleanup(number)
                await self._settle_breach()  # e.g. a stop after the turn found a breach
        merged = self.state.merged_rounds > state.merged_rounds
        return RoundOutcome(number, merged, self.state, self.state.reason or "")

    async def _new_branch(self, branch: str, base: str) -> None:
        if await self.git.rev(branch) is not None:
            raise GitError(f"branch {branch} already exists; a round number is never reused")
        await self.git.create_branch(branch, base)

    async def _execute(self, number: int, base: str) -> RoundResult:
        o = self.orchestration
        prompt = executor_prompt(self.state, number, self.ledger, self.git, o)
        return await self._ask(number, "executor", o.executor, prompt)

    async def _ask(self, number: int, role: str, spec: str, prompt: str) -> RoundResult:
        """Run the executor or the reviewer, in the round's worktree."""
        request = worker_request(
            self.state, self.ledger, self.git, number=number, role=role, spec=spec, prompt=prompt
        )
        if works_in_its_spec(spec):  # e.g. the agent worker: pinned to the round's worktree
            spec = in_workspace(spec, self.ledger.worktree(number))
        refuse = refuse_push_env(await push_urls(self.git.root))
        request = msgspec.structs.replace(request, env={**request.env, **refuse})
        worker = parse_worker(spec)
        return await self._guarded(role, lambda: worker.run(request, None))

    async def _guarded(self, role: str, turn: Callable[[], Awaitable[T]]) -> T:
        """Run ``turn`` (a role's, or validation's, which runs the executor's code) between
        two snapshots of the repository and the ledger; what it changed is put back where
        it can be and noted as a breach."""
        before = await take_snapshot(self.git.root, ledger=self.ledger.dir)
        # Durably, before the turn: if the loop crashes during it, reconcile checks it.
        save_turn(self.ledger.turn_path, role, before)
        try:
            return await turn()
        finally:
            with trio.CancelScope(shield=True):
                text = await self._check_turn(role, before)
                self._breach = self._breach or text
                self.ledger.turn_path.unlink(missing_ok=True)

    async def _check_turn(self, role: str, before: RepoSnapshot, *, when: str = "") -> str | None:
        """Compare the repository with ``before``; put back and say what the turn changed."""
        root, slug = self.git.root, self.git.slug
        after = await take_snapshot(root, hooks_as_in=before, ledger=self.ledger.dir)
        live = live_loops(root, slug)
        found = breaches(before, after, slug, live=live)
        if not found:
            return None
        text = f"the {role} changed the repository outside loop/{slug}/{when}: " + "; ".join(found)
        self._note_breach(text + " (the loop stopped while putting it back)")  # before undoing
        left = await undo(root, before, after, slug, live=live)
        text += ("; not put back: " + "; ".join(left)) if left else " (all put back)"
        self._note_breach(text)
        return text

    async def _check_crashed_turn(self) -> str | None:
        """The after-check of a role's turn the loop crashed in (its snapshot is in the
        ledger): what changed since the turn began, put back where it can be."""
        try:
            saved = load_turn(self.ledger.turn_path)
        except ValueError as exc:
            text = f"the record of the repository before a crashed turn is unreadable ({exc})"
            self._note_breach(text)
            return text
        checked = None
        if saved is not None:
            role, before = saved
            when = " during a turn the loop crashed in (or since)"
            checked = await self._check_turn(role, before, when=when)
        if checked is not None:
            return checked
        # Found and put back before the crash: the note is all that is left of it.
        try:
            return self.ledger.breach_path.read_text(encoding="utf-8", errors="replace").strip()
        except FileNotFoundError:
            return None

    async def _after_executor(self, number: int, base: str, tip: str, result: RoundResult) -> None:
        worktree = self.ledger.worktree(number)
        commits = await self.git.commits(base, tip)
        dirty = await self.git.dirty(worktree)
        stat = await self.git.diff_stat(base, tip)
        self.ledger.write_receipt(
            number,
            "worker",
            worker_receipt(
                number,
                self.orchestration.executor,
                result=result,
                commits=commits,
                dirty=dirty,
                stat=stat,
            ),
        )
        if await self._ended_if_tampered(number, base, tip, result.output):
            return
        problem: str | None = None
        if result.status != "completed":
            problem = f"executor {result.status}: {result.error or ''}".strip()
        elif not commits:
            problem = "the executor committed nothing"
        if problem is not None:
            await self._end_round(number, base, tip, reason=problem, output=result.output)
            return
        self._record(
            StatusChanged,
            status="validating",
            branch=self.git.round_branch(number),
            commit=tip,
            next_action="wait for the round",
        )
        await self._validate_and_review(
            number, base, tip, executor_output=result.output, done=result.done
        )

    async def _validate_and_review(
        self, number: int, base: str, tip: str, *, executor_output: str, done: bool
    ) -> None:
        branch = self.git.round_branch(number)
        passed, report = await self._guarded(
            "validation",
            lambda: run_validation(
                self.orchestration,
                self.ledger.worktree(number),
                worker_env(self.ledger, self.git, number, "validation"),
            ),
        )
        if await self._ended_if_tampered(number, base, tip, executor_output):
            return
        self.ledger.write_receipt(
            number, "validation", validation_receipt(number, self.orchestration, passed, report)
        )
        if not passed:
            await self._end_round(
                number,
                base,
                tip,
                validation=False,
                reason="validation failed",
                output=executor_output,
            )
            return
        if self.state.status == "validating":
            self._record(
                StatusChanged,
                status="reviewing",
                branch=branch,
                commit=tip,
                next_action="wait for the round",
            )
        o = self.orchestration
        diff = await self.git.diff(base, tip)
        stat = await self.git.diff_stat(base, tip)
        prompt = review_prompt(
            self.state, number=number, branch=branch, stat=stat, diff=diff, validation=report
        )
        result = await self._ask(number, "reviewer", o.reviewer, prompt)
        if result.status == "completed":
            verdict = parse_verdict(result.output)
        else:
            verdict = parse_verdict("")
            verdict = attrs.evolve(
                verdict, reason=f"reviewer {result.status}: {result.error or ''}".strip()
            )
        self.ledger.write_receipt(
            number, "review", review_receipt(number, o.reviewer, result, verdict)
        )
        merged = False
        if await self._ended_if_tampered(number, base, tip, result.output, reviewed=True):
            return
        if verdict.approved:
            await self.git.advance_candidate(base, tip)
            merged = True
        word = "approve" if verdict.approved else "reject"
        reason = (
            "merged into the candidate"
            if merged
            else f"review rejected: {verdict.reason.splitlines()[0] if verdict.reason else ''}"
        )
        await self._end_round(
            number,
            base,
            tip,
            merged=merged,
            validation=True,
            verdict=word,
            reason=reason,
            output=executor_output + "\n" + result.output,
            done=done and merged,
        )

    async def _ended_if_tampered(
        self, number: int, base: str, tip: str, output: str, *, reviewed: bool = False
    ) -> bool:
        """End the round at the safety gate if a worker changed what it must not
        (:meth:`_tampered`); whether it did. ``reviewed``: it came to the review (so its
        validation passed), which it fails."""
        problem = await self._tampered(base)
        if problem is None:
            return False
        await self._end_round(
            number,
            base,
            tip,
            reason=problem,
            output=output,
            validation=True if reviewed else None,
            verdict="reject" if reviewed else None,
            gate=Gate("safety", problem, "blocked"),
        )
        return True

    async def _end_round(
        self,
        number: int,
        base: str,
        tip: str,
        *,
        reason: str,
        output: str,
        merged: bool = False,
        validation: bool | None = None,
        verdict: str | None = None,
        done: bool = False,
        gate: Gate | None = None,
    ) -> None:
        state = self.state
        approvals = tuple(dict.fromkeys((*state.pending_approvals, *parse_approvals(output))))
        progress = is_progress(
            merged=merged,
            validation_passed=validation,
            last_validation_passed=state.last_validation_passed,
        )
        candidate = tip if merged else state.candidate_commit
        self._record(
            CodeRoundFinished,
            status="completed" if done else "ready",
            reason=reason,
            branch=self.git.round_branch(number),
            commit=tip,
            next_action="none" if done else "run_next_round",
            merged=merged,
            validation_passed=validation,
            verdict=verdict,
            progress=progress,
            no_progress_rounds=0 if progress else state.no_progress_rounds + 1,
            last_validation_passed=state.last_validation_passed
            if validation is None
            else validation,
            merged_rounds=state.merged_rounds + merged,
            candidate_commit=candidate,
            pending_approvals=approvals,
        )
        self.ledger.append_lesson(f"- {round_name(number)}: {reason}")
        await self.git.remove_worktree(self.ledger.worktree(number))
        if merged or tip == base:  # in the candidate now, or nothing to inspect
            await self.git.delete_branch(self.git.round_branch(number))
        if done:
            await write_handoff(self.ledger, self.git, self.state)
            return
        if gate is None:
            # Pause or stop asked for during the round, then the gates for the next one.
            await self.prepare()
        else:
            await self._trip(gate)

    async def _cleanup(self, number: int) -> None:
        """A finished round's worktree goes; its branch stays unless it was merged."""
        if self.state.status not in IN_ROUND:
            await self.git.remove_worktree(self.ledger.worktree(number))


def _is_cancel(exc: BaseException) -> bool:
    """A cancellation, also when a nursery on the way wrapped it in a group."""
    if isinstance(exc, BaseExceptionGroup):
        return any(_is_cancel(inner) for inner in exc.exceptions)
    return isinstance(exc, trio.Cancelled)
