"""Code rounds on real git repositories with command workers, run on the runtime."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from loopactors.codeloop import CodeLoop, open_code_loop, rebuild_state
from loopactors.errors import (
    CodeLoopExists,
    GateClosed,
    OrchestrationError,
    SelfReviewRefused,
)
from loopactors.runtime import Runtime

from .toyrepo import VALIDATE, git, worker


async def new_loop(
    repo: Path, executor: str = "fix", reviewer: str = "approve", **options: object
) -> CodeLoop:
    loop = await open_code_loop("fix-calc", path=repo)
    base = repo.parent
    fields: dict[str, object] = {
        "objective": "make VALUE 42",
        "executor": worker(base, executor),
        "reviewer": worker(base, reviewer),
        "validate": VALIDATE,
    }
    fields.update(options)
    await loop.init(**fields)  # type: ignore[arg-type]
    return loop


async def test_a_round_that_passes_both_gates_lands_on_the_candidate(
    repo: Path, rt: Runtime
) -> None:
    main = git(repo, "rev-parse", "main")
    loop = await new_loop(repo)
    state = await loop.run(rt, rounds=1)
    assert (state.status, state.round, state.merged_rounds) == ("ready", 1, 1)
    candidate = git(repo, "rev-parse", "loop/fix-calc/candidate")
    assert candidate == state.candidate_commit != main
    assert git(repo, "show", "loop/fix-calc/candidate:calc.py") == "VALUE = 42"
    assert git(repo, "rev-parse", "main") == main  # main untouched
    assert (repo / "calc.py").read_text() == "VALUE = 0\n"  # and its working tree too
    # The merged proposal branch and its worktree are gone; receipts stay.
    assert git(repo, "branch", "--list", "loop/fix-calc/r*") == ""
    assert git(repo, "worktree", "list").count("\n") == 0
    receipts = loop.ledger.round_dir(1)
    assert "result: passed" in (receipts / "validation.md").read_text()
    assert "verdict: approve" in (receipts / "review.md").read_text()
    assert "commits: 1" in (receipts / "worker.md").read_text()
    assert "r001: merged" in loop.ledger.lessons()
    assert git(repo, "status", "--porcelain") == ""  # .loop/ is excluded
    # The runtime ran it: one loop, one completed round, recorded by its store.
    (runtime_loop,) = await rt.list()
    assert runtime_loop.spec.task == str(loop.ledger.dir)
    assert [r.status for r in await rt.history(runtime_loop.loop_id)] == ["completed"]
    assert rebuild_state(loop.ledger.read_events()) == loop.state()


@pytest.mark.parametrize(
    ("executor", "reviewer", "reason"),
    [
        ("break", "approve", "validation failed"),
        ("fix", "reject", "review rejected: the change is too risky"),
        ("fix", "silent", "review rejected: no verdict"),
        ("noop", "approve", "the executor committed nothing"),
    ],
)
async def test_a_round_that_fails_a_gate_changes_neither_main_nor_the_candidate(
    repo: Path, rt: Runtime, executor: str, reviewer: str, reason: str
) -> None:
    main = git(repo, "rev-parse", "main")
    loop = await new_loop(repo, executor, reviewer)
    state = await loop.run(rt, rounds=1)
    assert (state.status, state.merged_rounds, state.reason) == ("ready", 0, reason)
    assert git(repo, "rev-parse", "loop/fix-calc/candidate") == main
    assert git(repo, "rev-parse", "main") == main
    kept = (await loop.status()).rejected_branches
    assert kept == (() if executor == "noop" else ("loop/fix-calc/r001",))
    assert git(repo, "worktree", "list").count("\n") == 0
    (runtime_loop,) = await rt.list()
    assert [r.status for r in await rt.history(runtime_loop.loop_id)] == ["failed"]


async def test_the_reviewer_must_not_be_the_executor(repo: Path) -> None:
    with pytest.raises(SelfReviewRefused):
        await new_loop(repo, "fix", "fix")
    assert not (repo / ".loop" / "fix-calc" / "STATE.json").exists()


async def test_workers_run_in_the_worktree_with_the_loop_environment(
    repo: Path, rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = repo.parent / "env.json"
    monkeypatch.setenv("TOY_ENV_OUT", str(out))
    loop = await new_loop(repo, "env")
    await loop.run(rt, rounds=1)
    seen = json.loads(out.read_text())
    worktree = str(loop.ledger.worktree(1))
    assert seen == {
        "LOOPACTORS_WORKTREE": worktree,
        "LOOPACTORS_BRANCH": "loop/fix-calc/r001",
        "LOOPACTORS_LEDGER": str(loop.ledger.dir),
        "cwd": worktree,
    }


async def test_deadline_gate_dispatches_nothing_and_writes_the_handoff(
    repo: Path, rt: Runtime
) -> None:
    past = (dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)).isoformat()
    loop = await new_loop(repo, attendance="unattended", deadline=past)
    state = await loop.run(rt, rounds=3)
    assert (state.status, state.active_gate, state.round) == ("waiting_review", "deadline", 0)
    assert await rt.list() == []  # nothing was dispatched
    handoff = loop.ledger.handoff_path.read_text()
    assert "gate deadline" in handoff
    assert "Not pushed, not merged into main." in handoff
    with pytest.raises(GateClosed, match="waiting_review"):
        await loop.run(rt, rounds=1)


async def test_max_rounds_gate_stops_after_the_last_round(repo: Path, rt: Runtime) -> None:
    loop = await new_loop(repo, attendance="unattended", max_rounds=2)
    state = await loop.run(rt, rounds=None)
    assert (state.status, state.active_gate, state.round, state.merged_rounds) == (
        "waiting_review",
        "max_rounds",
        2,
        2,
    )
    assert "| 2 | `loop/fix-calc/r002` | merged" in loop.ledger.handoff_path.read_text()
    # Resuming with a higher limit makes it ready again; it runs one more round.
    await loop.resume(max_rounds=3)
    state = await loop.run(rt, rounds=None)
    assert (state.round, state.active_gate) == (3, "max_rounds")


async def test_two_rounds_without_progress_block_the_loop_with_a_handoff(
    repo: Path, rt: Runtime
) -> None:
    loop = await new_loop(repo, "fix", "reject", max_rounds=10)
    state = await loop.run(rt, rounds=None)
    assert (state.status, state.active_gate, state.round) == ("blocked", "no_progress", 2)
    assert state.no_progress_rounds == 2
    handoff = loop.ledger.handoff_path.read_text()
    assert "- `loop/fix-calc/r001`" in handoff
    assert "- `loop/fix-calc/r002`" in handoff
    assert "review rejected" in handoff
    await loop.resume()
    assert loop.state().no_progress_rounds == 0


async def test_init_refuses_an_existing_loop_unless_forced(repo: Path) -> None:
    loop = await new_loop(repo)
    with pytest.raises(CodeLoopExists, match="--force"):
        await loop.init(objective="again")
    # ORCHESTRATION.md is reused; a flag that disagrees with it is refused.
    with pytest.raises(OrchestrationError, match=r"differs from ORCHESTRATION\.md"):
        await loop.init(objective="again", executor=worker(repo.parent, "noop"), force=True)
    state = await loop.init(objective="again", force=True)
    assert state.objective == "again"
    assert [type(e).__name__ for e in loop.ledger.read_events()] == ["Initialized"] * 2


async def test_from_inside_a_linked_worktree_the_main_ledger_is_found(
    repo: Path, rt: Runtime
) -> None:
    loop = await new_loop(repo, "fix", "reject", max_rounds=5)
    await loop.run(rt, rounds=1)
    # The kept proposal branch, checked out in a worktree of its own.
    inside = repo.parent / "elsewhere"
    git(repo, "worktree", "add", "-q", str(inside), "loop/fix-calc/r001")
    found = await open_code_loop("fix-calc", path=inside)
    assert found.root == repo
    assert found.state() == loop.state()
    assert not (inside / ".loop").exists()
    assert [lp.slug for lp in await CodeLoop.all(inside)] == ["fix-calc"]


async def test_pause_and_stop_while_idle_and_refusals(repo: Path, rt: Runtime) -> None:
    loop = await new_loop(repo)
    assert await loop.pause() == "fix-calc: ready -> paused"
    with pytest.raises(GateClosed, match="paused"):
        await loop.run(rt, rounds=1)
    await loop.resume()
    assert await loop.stop() == "fix-calc: ready -> stopped"
    assert "status: stopped" in loop.ledger.handoff_path.read_text()
    with pytest.raises(GateClosed, match="stopped"):
        await loop.run(rt, rounds=1)


async def test_an_executor_that_writes_the_ledger_blocks_the_loop(repo: Path, rt: Runtime) -> None:
    main = git(repo, "rev-parse", "main")
    loop = await new_loop(repo, "meddle")
    state = await loop.run(rt, rounds=3)
    assert (state.status, state.active_gate, state.round) == ("blocked", "safety", 1)
    assert "ledger file STATE.json changed" in (state.reason or "")
    assert git(repo, "rev-parse", "loop/fix-calc/candidate") == main
    assert rebuild_state(loop.ledger.read_events()) == loop.state()


async def test_an_agent_executor_works_in_the_rounds_worktree(repo: Path, rt: Runtime) -> None:
    from tests.agent.chat_server import ChatServer, completion

    fix = {"path": "calc.py", "old_string": "VALUE = 0", "new_string": "VALUE = 42"}
    replies = [
        completion(calls=[("e", "edit", fix)]),
        completion(calls=[("b", "bash", {"command": "git commit -qam 'agent fix'"})]),
        completion("Set VALUE to 42 and committed."),
    ]
    with ChatServer(replies) as server:
        executor = f"agent:model=scripted,base_url={server.base_url}"
        loop = await open_code_loop("fix-calc", path=repo)
        reviewer = worker(repo.parent, "approve")
        with pytest.raises(OrchestrationError, match="names a workspace"):
            await loop.init(
                objective="o", executor=f"{executor},workspace=/", reviewer=reviewer, validate="v"
            )
        await loop.init(
            objective="make VALUE 42", executor=executor, reviewer=reviewer, validate=VALIDATE
        )
        state = await loop.run(rt, rounds=1)
    assert (state.merged_rounds, state.reason) == (1, "merged into the candidate")
    assert git(repo, "show", "loop/fix-calc/candidate:calc.py") == "VALUE = 42"
    assert (repo / "calc.py").read_text() == "VALUE = 0\n"  # the agent never touched main
