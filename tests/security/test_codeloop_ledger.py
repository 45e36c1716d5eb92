"""A code loop's roles cannot steer it through its ledger or the repository's git internals
(docs/security.md, code loops 6 and 7).

Real git repositories, real command workers (tests/codeloop/toyrepo.py). An executor that
rewrites ``ORCHESTRATION.md`` (its next reviewer: ``/bin/echo VERDICT: approve``), or any other
file of ``.loop/<slug>/``, edits the main checkout through the ledger's path, plants a smudge
filter (``git config --global`` and ``.git/info/attributes``), adds a worktree elsewhere or an
``objects/info/alternates``: each trips the ``safety`` gate (exit 2 through the command line),
nothing of the round is merged, and the reason names the change.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from loopactors.runtime import Runtime

from ..codeloop.test_guard import new_loop
from ..codeloop.toyrepo import git, worker


async def run_tampering_round(repo: Path, rt: Runtime) -> tuple[str, str]:
    main = git(repo, "rev-parse", "main")
    loop = await new_loop(repo)
    state = await loop.run(rt, rounds=3)
    assert (state.status, state.active_gate, state.round, state.merged_rounds) == (
        "blocked",
        "safety",
        1,
        0,
    ), state.reason
    assert git(repo, "rev-parse", "loop/fix-calc/candidate") == main  # nothing merged
    assert "gate safety" in loop.ledger.handoff_path.read_text()
    return state.reason or "", main


@pytest.mark.parametrize(
    ("how", "name"),
    [
        ("orchestration", "ORCHESTRATION.md"),
        ("ledger:PLAN.md", "PLAN.md"),
        ("ledger:LESSONS.md", "LESSONS.md"),
        ("ledger:HANDOFF.md", "HANDOFF.md"),
        ("ledger:rounds/r001/review.md", "rounds/r001/review.md"),
        ("ledger:STATE.json", "STATE.json"),
    ],
)
async def test_a_role_that_writes_the_ledger_trips_safety(
    repo: Path, rt: Runtime, monkeypatch: pytest.MonkeyPatch, how: str, name: str
) -> None:
    monkeypatch.setenv("TOY_TAMPER", how)
    (repo / ".loop" / "fix-calc").mkdir(parents=True)
    (repo / ".loop" / "fix-calc" / "PLAN.md").write_text("# Plan\n")
    (repo / ".loop" / "fix-calc" / "HANDOFF.md").write_text("# Hand-off\n")
    reason, _ = await run_tampering_round(repo, rt)
    assert f"ledger file {name} " in reason
    assert "only the loop writes the ledger" in reason


def test_the_code_cli_exits_2_when_the_executor_rewrites_the_orchestration(
    repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from loopactors.cli import main

    monkeypatch.setenv("TOY_TAMPER", "orchestration")
    base = repo.parent
    assert main(
        ["code", "--repo", str(repo), "init", "--slug", "fix-calc", "--objective", "o",
         "--executor", worker(base, "tamper"), "--reviewer", worker(base, "approve"),
         "--validate", "false"]
    ) == 0  # fmt: skip
    assert main(["code", "--repo", str(repo), "run", "--slug", "fix-calc"]) == 2
    assert "ledger file ORCHESTRATION.md changed" in capsys.readouterr().out
    # A second run does not pick the rewritten roles up: the loop stays blocked.
    assert main(["code", "--repo", str(repo), "run", "--slug", "fix-calc"]) == 2
    assert git(repo, "rev-parse", "loop/fix-calc/candidate") == git(repo, "rev-parse", "main")


async def test_a_role_that_edits_the_main_checkout_trips_safety(
    repo: Path, rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOY_TAMPER", "main-checkout")
    reason, _ = await run_tampering_round(repo, rt)
    assert "the main checkout changed (check.py)" in reason
    assert "not put back: the main checkout (check.py)" in reason


async def test_a_planted_filter_trips_safety_and_is_removed(
    repo: Path, rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    mark = repo.parent / "filter-ran"
    monkeypatch.setenv("HOME", str(repo.parent / "home"))  # the role's `git config --global`
    (repo.parent / "home").mkdir()
    monkeypatch.setenv("TOY_TAMPER", "attributes")
    monkeypatch.setenv("TOY_FILTER_MARK", str(mark))
    reason, _ = await run_tampering_round(repo, rt)
    assert ".git/info/attributes created" in reason
    assert f"the user's git configuration {repo.parent / 'home' / '.gitconfig'} created" in reason
    assert reason.endswith("(all put back)")
    assert not (repo / ".git" / "info" / "attributes").exists()
    assert not (repo.parent / "home" / ".gitconfig").exists()
    assert not mark.exists()


async def test_no_filter_runs_in_the_loops_own_git(
    repo: Path, rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Filters already in place (the user's global configuration, the repository's
    configuration and ``.git/info/attributes``) do not run in the loop's ``git worktree add``
    or ``git diff``; the round runs as usual."""
    home = repo.parent / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    mark = repo.parent / "filter-ran"
    (home / ".gitconfig").write_text(f'[filter "user"]\n\tsmudge = "touch {mark}.user; cat"\n')
    git(repo, "config", "filter.repo.smudge", f"touch {mark}.repo; cat")
    git(repo, "config", "diff.repo.textconv", f"sh -c 'touch {mark}.diff; cat \"$0\"'")
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "attributes").write_text(
        "calc.py filter=user diff=repo\ncheck.py filter=repo\n"
    )
    loop = await new_loop(repo, "fix")
    state = await loop.run(rt, rounds=1)
    assert (state.status, state.merged_rounds) == ("ready", 1), state.reason
    assert sorted(p.name for p in repo.parent.iterdir() if p.name.startswith("filter-ran")) == []


async def test_a_worktree_added_elsewhere_trips_safety(
    repo: Path, rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOY_TAMPER", "worktree")
    monkeypatch.setenv("TOY_ELSEWHERE", str(repo.parent / "elsewhere"))
    reason, _ = await run_tampering_round(repo, rt)
    assert "linked worktree elsewhere added" in reason
    assert "not put back: linked worktree elsewhere" in reason


async def test_alternates_planted_by_a_role_trip_safety_and_are_removed(
    repo: Path, rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOY_TAMPER", "alternates")
    monkeypatch.setenv("TOY_ELSEWHERE", str(repo.parent / "elsewhere" / "objects"))
    reason, _ = await run_tampering_round(repo, rt)
    assert ".git/objects/info/alternates changed" in reason
    assert not (repo / ".git" / "objects" / "info" / "alternates").exists()


async def test_a_submodules_git_files_planted_by_a_role_trip_safety_and_are_put_back(
    repo: Path, rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A submodule's configuration and hooks (``.git/modules/sub/``) steer the operator's
    next ``git status``, which recurses into it: a role that plants an fsmonitor command and
    a hook there trips the gate, both are put back, and the loop's own git ran neither."""
    source = repo.parent / "subsource"
    source.mkdir()
    git(source, "init", "-q")
    (source / "lib.py").write_text("X = 1\n")
    git(source, "add", "lib.py")
    git(source, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "lib")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(source), "sub")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "add sub")
    module = repo / ".git" / "modules" / "sub"
    config_before = (module / "config").read_bytes()
    mark = repo.parent / "fsmonitor-ran"
    monkeypatch.setenv("TOY_TAMPER", "submodule")
    monkeypatch.setenv("TOY_FILTER_MARK", str(mark))
    reason, _ = await run_tampering_round(repo, rt)
    assert ".git/modules/sub/config changed" in reason
    assert ".git/modules/sub/hooks/post-checkout created" in reason
    assert reason.endswith("(all put back)")
    assert (module / "config").read_bytes() == config_before
    assert not (module / "hooks" / "post-checkout").exists()
    assert not mark.exists()
