"""``loopactors code``: code loops from the command line (init, run, status, controls).

Exit codes: 0 success (after ``run``: the loop is still ready, or completed), 1 error, 2 the
loop stopped at a gate or dispatches nothing (waiting_review, blocked, paused), 3 stopped,
64 bad usage, 75 another process holds the loop's lease (a round is running; try later), 130
Ctrl-C (the round in flight is marked interrupted).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import msgspec
import trio

from ..errors import GateClosed, LeaseHeld, LoopactorsError
from ..runtime import load_config, open_runtime
from ._loop import DEFAULT_ROUND_TIMEOUT, CodeLoop, open_code_loop
from ._model import CodeLoopState
from ._report import CodeLoopStatus, rounds_finished, run_summary

__all__ = ["build_parser", "main"]

EXIT_OK, EXIT_ERROR, EXIT_GATE, EXIT_STOPPED, EXIT_USAGE, EXIT_LEASE = 0, 1, 2, 3, 64, 75
EXIT_ABORTED = 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loopactors code",
        description="Code loops: coding rounds in git worktrees, gated by validation and review.",
    )
    parser.add_argument(
        "--repo", default=".", help="a path in the repository (default: the working directory)"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    init = commands.add_parser("init", help="create a loop: ledger, orchestration, candidate")
    init.add_argument("--slug", required=True, help="lowercase kebab-case name of the loop")
    init.add_argument("--objective", required=True)
    init.add_argument("--executor", help="worker spec that changes code and commits")
    init.add_argument("--reviewer", help="worker spec that reviews (not the executor)")
    init.add_argument("--validate", metavar="CMD", help="validation command (argv, no shell)")
    init.add_argument("--validate-timeout", type=float, metavar="S")
    init.add_argument("--max-rounds", type=int, metavar="N")
    init.add_argument("--deadline", metavar="ISO", help="e.g. 2026-12-01T06:00:00Z")
    init.add_argument("--attendance", choices=("attended", "unattended"), default="attended")
    init.add_argument("--force", action="store_true", help="re-initialise an existing loop")

    run = commands.add_parser("run", help="run rounds in the foreground")
    run.add_argument("--slug", required=True)
    how = run.add_mutually_exclusive_group()
    how.add_argument("--rounds", type=int, default=None, metavar="K", help="at most K (1)")
    how.add_argument("--until-gate", action="store_true", help="until a gate stops the loop")
    run.add_argument("--round-timeout", type=float, default=DEFAULT_ROUND_TIMEOUT, metavar="S")

    status = commands.add_parser("status", help="read-only report (every loop without --slug)")
    status.add_argument("--slug")
    status.add_argument("--json", action="store_true")

    for name, text in (
        ("pause", "pause now, or after the running round"),
        ("stop", "stop for good now, or after the running round"),
        ("handoff", "write HANDOFF.md now and print it"),
    ):
        command = commands.add_parser(name, help=text)
        command.add_argument("--slug", required=True)
    resume = commands.add_parser("resume", help="make a paused, waiting or blocked loop ready")
    resume.add_argument("--slug", required=True)
    resume.add_argument("--max-rounds", type=int, metavar="N")
    resume.add_argument("--deadline", metavar="ISO")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:
        return EXIT_USAGE if exc.code not in (0, None) else EXIT_OK
    if args.command == "run" and args.rounds is not None and args.rounds < 1:
        print("loopactors code: --rounds must be >= 1", file=sys.stderr)
        return EXIT_USAGE
    try:
        return trio.run(_command, args)
    except LeaseHeld as exc:
        print(f"loopactors code: {exc}", file=sys.stderr)
        return EXIT_LEASE
    except GateClosed as exc:
        print(f"loopactors code: {exc}", file=sys.stderr)
        return EXIT_GATE
    except LoopactorsError as exc:
        print(f"loopactors code: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        # The round in flight was cancelled and marked interrupted; the lease is released.
        print("loopactors code: interrupted", file=sys.stderr)
        return EXIT_ABORTED


def _exit_of(state: CodeLoopState) -> int:
    if state.status in ("ready", "completed"):
        return EXIT_OK
    return EXIT_STOPPED if state.status == "stopped" else EXIT_GATE


async def _command(args: argparse.Namespace) -> int:
    repo = Path(args.repo)
    if args.command == "status":
        loops = (
            [await open_code_loop(args.slug, path=repo)] if args.slug else await CodeLoop.all(repo)
        )
        reports = [await loop.status() for loop in loops]
        if args.json:
            print(msgspec.json.encode(reports if not args.slug else reports[0]).decode())
        elif not reports:
            print("no code loops in this repository (start one with: loopactors code init)")
        for report in [] if args.json else reports:
            print(_describe(report))
        return EXIT_OK
    loop = await open_code_loop(args.slug, path=repo)
    if args.command == "init":
        state = await loop.init(
            objective=args.objective,
            executor=args.executor,
            reviewer=args.reviewer,
            validate=args.validate,
            validate_timeout=args.validate_timeout,
            max_rounds=args.max_rounds,
            deadline=args.deadline,
            attendance=args.attendance,
            force=args.force,
        )
        print(f"{state.slug}: ready; ledger {loop.ledger.dir}, candidate {state.candidate_branch}")
        return EXIT_OK
    if args.command == "run":
        rounds = None if args.until_gate else (args.rounds or 1)
        before = loop.ledger.read_state().round

        def progress(state: CodeLoopState) -> None:
            # The round's own outcome: the state's reason may already be a gate's.
            outcome = rounds_finished(loop.ledger, after=state.round - 1)
            reason = outcome[0].reason if outcome else state.reason
            print(f"{state.slug} round {state.round}: {reason} -> {state.status}", flush=True)

        config = load_config().replace(store="memory")
        async with open_runtime(config) as runtime:
            state = await loop.run(
                runtime, rounds=rounds, round_timeout=args.round_timeout, on_round=progress
            )
        print(run_summary(state, rounds_finished(loop.ledger, after=before)))
        return _exit_of(state)
    if args.command == "handoff":
        await loop.handoff()
        print(loop.ledger.handoff_path.read_text(encoding="utf-8"), end="")
        return EXIT_OK
    if args.command == "resume":
        print(await loop.resume(max_rounds=args.max_rounds, deadline=args.deadline))
        return EXIT_OK
    print(await (loop.pause() if args.command == "pause" else loop.stop()))
    return EXIT_OK


def _describe(report: CodeLoopStatus) -> str:
    state = report.state
    lines = [
        f"{state.slug}: {state.status}, round {state.round}"
        + (f" of {state.max_rounds}" if state.max_rounds else "")
        + f", {state.merged_rounds} merged, {state.attendance}",
        f"  objective: {state.objective}",
        f"  candidate: {state.candidate_branch} at {state.candidate_commit[:12]}",
    ]
    if state.active_gate:
        lines.append(f"  gate: {state.active_gate}: {state.reason}")
    if state.deadline:
        lines.append(f"  deadline: {state.deadline}")
    if report.lease is not None:
        stale = " (stale: its holder is gone or expired)" if report.lease.stale(time.time()) else ""
        lines.append(f"  lease: {report.lease.owner} (pid {report.lease.pid}){stale}")
    if report.pending_control:
        lines.append(f"  requested: {report.pending_control} after the running round")
    if state.pending_approvals:
        lines.append(f"  pending approvals: {'; '.join(state.pending_approvals)}")
    if report.rejected_branches:
        lines.append(f"  kept branches: {', '.join(report.rejected_branches)}")
    lines.append(f"  next: {state.next_action}")
    return "\n".join(lines)
