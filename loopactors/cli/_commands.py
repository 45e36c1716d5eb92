"""The `loopactors` command line.

Exit codes (also in the README): 0 complete (or success), 1 error, 2 escalated, 3 cancelled,
4 interrupted, 64 bad usage, 130 interrupted by a second Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from .._util import did_you_mean, terminal_safe
from .._version import __version__
from ..errors import ConfigError, LeaseLost, LoopactorsError
from ..stress import _cli as stress_cli
from ..transport import _cli as _cli_transport
from . import _dashboard, _prune, _remote, _replay, _store
from ._address import ACCEPTED, node_ws_url
from ._loop_control import StoredLoops, run_offline

# Only what the parser and the quick commands need is imported here. trio, the runtime, the
# workers, rich and the REPL load in the commands that use them, so `status`, `history`,
# `version` and `--help` start in about the time of importing trio and msgspec
# (tests/cli/test_imports.py keeps it so).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..loops import LoopState
    from ..runtime import RuntimeConfig
    from ._progress import JsonLines, Progress

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 64
#: This node's lease on a shared store ended (LeaseLost): nothing more was committed, and
#: starting it again is safe (a new incarnation).
EXIT_LEASE_LOST = 75
EXIT_ABORTED = 130

_SEVERITY = ["complete", "escalated", "cancelled", "interrupted", "error"]

#: The store when no --store is given (then the configuration file's, then sqlite).
STORE_ENV = "LOOPACTORS_STORE"
#: The commands written once for a state directory and a node (cli/_loop_control.py).
_LOOP_COMMANDS = ("status", "history", "stop", "pause", "resume")

_json = msgspec.json.Encoder()


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; given the ``command`` about to be parsed, the options of the other
    commands may be left out where adding them would load modules (the ``worker`` kinds)."""
    parser = argparse.ArgumentParser(
        prog="loopactors",
        description=(
            "A runtime for long-running AI-agent loops, built as a tree of supervised trio actors."
        ),
    )
    parser.add_argument("--version", action="version", version=f"loopactors {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = commands.add_parser(
        "demo", help="run several loops side by side on embedded defaults (no network, no key)"
    )
    demo.add_argument("--fast", action="store_true", help="no delays (for scripts and tests)")

    run = commands.add_parser("run", help="run one loop in the foreground")
    run.add_argument("text", help='the loop, e.g. "|loop:3,fresh| review this module"')
    run.add_argument(
        "--worker",
        help="worker spec (scripted, command:ARGV, python:MOD:FN, agent[:...], claude[:...])",
    )
    run.add_argument(
        "--workspace",
        type=Path,
        metavar="DIR",
        help="the agent's or coding-agent CLI's directory (default: .)",
    )
    _state_options(run, allow_memory=True)
    run.add_argument("--round-timeout", type=float, metavar="S")
    run.add_argument("--inter-round-delay", type=float, metavar="S")
    run.add_argument("--max-concurrent", type=int, metavar="N", help="rounds in flight at once")
    _notify_options(run)
    _connect_options(run)
    from ..loops import LIMIT_DEFAULTS as limit  # noqa: PLC0415 - loaded by _loop_control
    from ..loops import SIMILARITY_DEFAULT  # noqa: PLC0415

    breaker = run.add_argument_group("run-ledger breaker (loop-context's rules)")
    breaker.add_argument(
        "--stagnation",
        type=int,
        metavar="N",
        help=f"same error N times ({limit['stagnation_threshold']:g})",
    )
    breaker.add_argument(
        "--frustration",
        type=int,
        metavar="N",
        help=f"same action N times ({limit['frustration_threshold']:g})",
    )
    breaker.add_argument(
        "--no-progress",
        type=int,
        metavar="N",
        help="end the loop after N failed or timed-out rounds in a row "
        f"({limit['max_consecutive_failures']:g}; loop-context's name; unchanged output is "
        "--stale-rounds)",
    )
    breaker.add_argument(
        "--stale-rounds",
        type=int,
        metavar="N",
        help="end the loop (no_progress) after N rounds in a row with unchanged output "
        f"({limit['stale_rounds_limit']:g})",
    )
    breaker.add_argument("--token-budget", type=int, metavar="N", help="tokens for the loop")
    breaker.add_argument(
        "--similarity",
        type=float,
        metavar="F",
        help=f"how alike counts as the same ({SIMILARITY_DEFAULT:g})",
    )
    breaker.add_argument(
        "--inject-ledger",
        action="store_true",
        help="prepend the ledger's Loop Context block to each round's prompt",
    )

    commands.add_parser(
        "context",
        help="loop-context's command line (--check, --prune, --inject, --summary, --status)",
        add_help=False,
    )
    commands.add_parser(
        "code",
        help="code loops: unattended coding rounds in git worktrees (init, run, status, ...)",
        add_help=False,
    )
    ledger = commands.add_parser("ledger", help="a loop's run ledger in loop-context's JSON")
    ledger_commands = ledger.add_subparsers(dest="ledger_command", metavar="ACTION")
    export = ledger_commands.add_parser("export", help="print a loop's ledger as JSON")
    export.add_argument("loop_id")
    _state_options(export, allow_memory=False)

    resume = commands.add_parser(
        "resume",
        help="resume every unfinished loop and run them; or, with LOOP_ID and --connect, "
        "resume that loop on a node",
    )
    resume.add_argument("loop_id", nargs="?")
    _state_options(resume, allow_memory=False)
    _runtime_store_options(resume)
    _connect_options(resume)

    status = commands.add_parser("status", help="show loops (or one loop) in a state directory")
    status.add_argument("loop_id", nargs="?")
    _state_options(status, allow_memory=False)
    _connect_options(status)

    _history_and_replay(commands)

    _remote.add_parsers(commands, _state_options, _connect_options)
    _prune.add_parser(commands, _state_options)
    _store.add_parser(commands)
    _dashboard.add_parser(commands, _state_options, _connect_options)
    _cli_transport.add_parsers(
        commands, worker_options=command in (None, "worker")
    )  # --transport on run/resume/node/status; `worker`
    stress_cli.add_parser(commands)

    commands.add_parser("version", help="print the installed version")
    return parser


def _history_and_replay(commands: Any) -> None:
    """`history` and `replay` (whose `--compare` is history's)."""
    history = commands.add_parser("history", help="show the rounds of one loop")
    _history_options(history)
    _replay.add_parser(commands, history, _state_options, _connect_options)


def _notify_options(run: argparse.ArgumentParser) -> None:
    """``--notify`` and ``--notify-on`` (docs/notifications.md); ``--plan`` and
    ``--prompt-file`` (docs/plans.md); ``--until`` and ``--max-cost`` (docs/loops.md)."""
    _until_options(run)
    run.add_argument(
        "--plan",
        metavar="PATH",
        help="a Markdown checklist (- [ ] task) or prd.json: each round works on the next "
        "open task, and the loop completes when every task is done",
    )
    run.add_argument(
        "--prompt-file",
        metavar="PATH",
        help="read the task from this file at the start of every round (TEXT may then be "
        "the activation alone, e.g. '|loop:30|')",
    )
    run.add_argument(
        "--notify",
        action="append",
        metavar="URL",
        help="tell this apprise URL when the loop ends, waits or hits a budget (repeatable; "
        "json://HOST:PORT/PATH, mailto://..., ntfy://TOPIC, ...)",
    )
    run.add_argument(
        "--notify-on",
        metavar="EVENTS",
        help="which events notify, comma-separated (loop_finished,round_deferred,"
        "budget_reached,check_failing; default: all)",
    )


def _history_options(history: argparse.ArgumentParser) -> None:
    history.add_argument("loop_id")
    history.add_argument(
        "--transcript", action="store_true", help="also print each agent round's transcript"
    )
    history.add_argument(
        "--round", type=_round_number, metavar="N", help="print round N's whole output only"
    )
    _state_options(history, allow_memory=False)
    _connect_options(history)


def _round_number(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"a round number (1, 2, ...), not {text!r}")
    return int(text)


def _until_options(run: argparse.ArgumentParser) -> None:
    """``--until``, ``--until-timeout`` and ``--max-cost`` (docs/loops.md)."""
    run.add_argument(
        "--until",
        metavar="CMD",
        help="a shell command run in the workspace after every round: exit 0 completes the "
        "loop, a failure goes into the next prompt (e.g. --until 'pytest -q')",
    )
    run.add_argument(
        "--until-timeout", type=float, metavar="S", help="seconds the --until check may take (600)"
    )
    run.add_argument(
        "--max-cost",
        type=float,
        metavar="USD",
        help="US dollars the loop may spend: no round starts at or over it (cost_budget)",
    )


def _state_options(
    parser: argparse.ArgumentParser, *, allow_memory: bool, with_state: bool = False
) -> None:
    """``--state``, ``--store`` and ``--json`` (``--json`` unless ``with_state``). The state
    directory holds the node's own files (token, process groups, outputs) whatever the
    store; ``allow_memory`` says whether ``--store memory`` makes sense (not for a command
    that reads what a finished process left)."""
    parser.add_argument("--state", type=Path, metavar="DIR", help="state directory (.loopactors)")
    parser.add_argument(
        "--store",
        metavar="URL",
        help="where loops are kept: sqlite (in --state, the default), sqlite:DIR, "
        + ("memory (nothing kept after exit), " if allow_memory else "")
        + "postgresql://USER:PASSWORD@HOST/DB (or $LOOPACTORS_STORE)",
    )
    parser.add_argument("--config", type=Path, metavar="FILE", help="a loopactors.toml file")
    if allow_memory:  # the commands that run a runtime (run, node, repl)
        _runtime_store_options(parser)
    if not with_state:
        parser.add_argument("--json", action="store_true", help="machine-readable output")


#: What a command that runs a runtime (run, node, repl, resume) says of its store and of its
#: place among nodes: flag, metavar, type, help.
_RUNTIME_OPTIONS: tuple[tuple[str, str, type, str], ...] = (
    ("--lease-ttl", "S", float,
     "seconds this node's lease on a PostgreSQL store lasts unless renewed (10)"),
    ("--node-name", "NAME", str,
     "this node's name: it leads its lease ids on a shared store and names its results "
     "stream on a shared Redis"),
    ("--labels", "A,B", str,
     "labels this node carries on a shared store (shared-fs: every node sees the same files, "
     "so no loop is tied to this machine)"),
    ("--durability", "LEVEL", str,
     "normal (the default: a commit survives a crash of the process) or full (each commit "
     "synced to disk: it survives an OS crash or power loss too)"),
)  # fmt: skip


def _runtime_store_options(parser: argparse.ArgumentParser) -> None:
    for flag, metavar, kind, text in _RUNTIME_OPTIONS:
        parser.add_argument(flag, metavar=metavar, type=kind, help=text)


def _connect_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--connect",
        metavar="URL",
        help=f"act on a running node instead: {ACCEPTED}",
    )
    parser.add_argument(
        "--token-file", type=Path, metavar="F", help="the node's token (or $LOOPACTORS_TOKEN)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args_given = list(sys.argv[1:] if argv is None else argv)
    # The top-level parser has no option that takes a value: the first word is the command.
    command = next((arg for arg in args_given if not arg.startswith("-")), "")
    parser = build_parser(command)
    try:
        _check_command(parser, command)
        # Known args first: an unknown option is then refused by its command's parser, with
        # that command's usage, not the top-level one.
        args, unknown = parser.parse_known_args(args_given)
        if unknown:
            _refuse_unknown(parser, args.command, unknown)
        _check_usage(parser, args)
    except SystemExit as exc:  # argparse exits 2 on bad usage; 2 means "escalated" here
        code = exc.code if isinstance(exc.code, int) else EXIT_ERROR
        return EXIT_USAGE if code == 2 else code
    if getattr(args, "connect", None) is not None:
        try:
            args.connect = node_ws_url(args.connect)
        except ConfigError as exc:  # one line, as for a bad DURATION: no usage dump
            print(f"loopactors: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
    try:
        return _dispatch(parser, args)
    except LoopactorsError as exc:
        print(f"loopactors: error: {terminal_safe(str(exc))}", file=sys.stderr)
        return EXIT_LEASE_LOST if isinstance(exc, LeaseLost) else EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_ABORTED
    except BaseExceptionGroup as group:  # raised through a nursery (a lost connection, ...)
        errors = _leaves(group)
        if all(isinstance(e, KeyboardInterrupt) for e in errors):
            return EXIT_ABORTED
        if not all(isinstance(e, LoopactorsError) for e in errors):
            raise
        for error in errors:
            print(f"loopactors: error: {terminal_safe(str(error))}", file=sys.stderr)
        return EXIT_LEASE_LOST if any(isinstance(e, LeaseLost) for e in errors) else EXIT_ERROR


def _check_command(parser: argparse.ArgumentParser, command: str) -> None:
    """A misspelt command (``stauts``) is refused naming the one it likely meant."""
    commands = _subcommands(parser)
    if not command or command in commands:
        return
    hint = did_you_mean(command, commands)
    choices = ", ".join(repr(name) for name in commands)
    parser.error(f"unknown command {command!r}{hint}; choose from {choices}")


def _refuse_unknown(
    parser: argparse.ArgumentParser, command: str | None, unknown: list[str]
) -> None:
    where = _subcommand(parser, command) if command else parser
    options = [o for action in where._actions for o in action.option_strings]
    described = []
    for word in unknown:
        flag = word.partition("=")[0]
        hint = did_you_mean(flag, options) if flag.startswith("--") else ""
        described.append(f"{word}{hint}")
    where.error(f"unrecognized arguments: {' '.join(described)}")


def _subcommands(parser: argparse.ArgumentParser) -> list[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return list(action.choices)
    return []


def _check_usage(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Usage errors argparse cannot see; each exits like argparse's own (64 here)."""
    if args.command == "ledger" and args.ledger_command is None:
        _subcommand(parser, "ledger").error("choose an action: export LOOP_ID")
    if args.command == "worker" and not (args.redis or os.environ.get("LOOPACTORS_REDIS")):
        _subcommand(parser, "worker").error(
            "the worker needs --redis URL (or $LOOPACTORS_REDIS): the Redis its node uses"
        )


def _subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: argparse.ArgumentParser = action.choices[name]
            return found
    raise AssertionError(f"no {name} command")


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    leaves: list[BaseException] = []
    for exc in group.exceptions:
        leaves.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return leaves


def _dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.command == "version":
        print(f"loopactors {__version__}")
        return EXIT_OK
    if args.command == "demo":
        import trio  # noqa: PLC0415 - see the note on the imports

        from ._demo import run_demo  # noqa: PLC0415

        return trio.run(run_demo, args.fast)
    if args.command == "worker":
        return _cli_transport.run_worker(args)
    if args.command == "stress":
        return stress_cli.main(args)
    if args.command == "dashboard":
        return _dashboard.dashboard(args, _config(args))
    if args.command == "replay":
        token = _remote.read_token(args, _config(args).state_dir) if args.connect else None
        return _replay.replay(args, _config(args), token)
    if getattr(args, "connect", None) and args.command != "repl":
        return _on_node(args)
    if args.command == "run":
        import trio  # noqa: PLC0415 - see the note on the imports

        return trio.run(_run, args)
    if args.command == "resume" and args.loop_id is None:
        import trio  # noqa: PLC0415 - see the note on the imports

        return trio.run(_resume, args)
    if args.command in _LOOP_COMMANDS:  # on the state directory, read in place (no runtime)
        stored = StoredLoops(lambda: _config(args))
        local = _config(args) if args.command in ("status", "history") else None
        return run_offline(_remote.loop_command(stored, args, local=local))
    if args.command == "prune":
        return _prune.prune(args, _config(args))
    if args.command == "store":
        return _store.store_command(args)
    if args.command == "node":
        return _remote.run_node(args, _config(args, worker=args.worker))
    if args.command == "repl":
        from ._repl import run_repl  # noqa: PLC0415 - see the note on the imports

        return run_repl(args, _config(args, worker=args.worker))
    if args.command == "ledger" and args.ledger_command == "export":
        return _export_ledger(args)
    parser.print_help(sys.stdout)
    return EXIT_OK


def _on_node(args: argparse.Namespace) -> int:
    import trio  # noqa: PLC0415 - see the note on the imports

    token = _remote.read_token(args, _config(args).state_dir)
    if args.command == "resume" and args.loop_id is None:
        raise ConfigError(
            "`loopactors resume --connect URL` needs the LOOP_ID to resume on the node "
            "(a node resumes its own unfinished loops when it starts)"
        )
    if args.command in _LOOP_COMMANDS:
        return trio.run(_remote.on_node, args, token)
    if args.command == "run":
        options = {k: v for k, v in _loop_options(args).items() if v is not None}
        for flag in ("round_timeout", "inter_round_delay"):
            if getattr(args, flag) is not None:
                options[flag] = getattr(args, flag)
        return trio.run(_remote.remote_run, args, token, options)
    raise ConfigError(f"`loopactors {args.command}` does not take --connect")


def _loop_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "stagnation_threshold": args.stagnation,
        "frustration_threshold": args.frustration,
        "max_consecutive_failures": args.no_progress,
        "stale_rounds_limit": args.stale_rounds,
        "max_tokens": args.token_budget,
        "similarity_threshold": args.similarity,
        "inject_ledger": args.inject_ledger or None,
        "notify": tuple(args.notify) if args.notify else None,
        "until": args.until,
        "until_timeout": args.until_timeout,
        "max_cost_usd": args.max_cost,
        # Absolute here: a node started elsewhere (--connect) reads the same files.
        "plan": str(Path(args.plan).absolute()) if args.plan else None,
        "prompt_file": str(Path(args.prompt_file).absolute()) if args.prompt_file else None,
        "notify_on": tuple(e.strip() for e in args.notify_on.split(",") if e.strip())
        if args.notify_on
        else None,
    }


def _labels(given: str | None) -> tuple[str, ...] | None:
    """``--labels a,b``: the labels, blanks dropped; None when the flag was not given."""
    if given is None:
        return None
    return tuple(label.strip() for label in given.split(",") if label.strip())


def _config(args: argparse.Namespace, **flags: Any) -> RuntimeConfig:
    from ..runtime import load_config  # noqa: PLC0415 - the configuration only

    config = load_config(args.config)
    store = getattr(args, "store", None) or os.environ.get(STORE_ENV) or None
    transport = getattr(args, "transport", None)
    lease_ttl = getattr(args, "lease_ttl", None)
    durability = getattr(args, "durability", None)
    return config.replace(
        state_dir=args.state,
        store=store,
        transport=transport,
        lease_ttl=lease_ttl,
        node_name=getattr(args, "node_name", None),
        labels=_labels(getattr(args, "labels", None)),
        durability=durability,
        **flags,
    )


async def _run(args: argparse.Namespace) -> int:
    from ..runtime import open_runtime  # noqa: PLC0415 - see the note on the imports
    from ..workers import in_workspace, worker_kind  # noqa: PLC0415
    from ._follow import PHASE_EXIT, ctrl_c_leaves, start_and_follow  # noqa: PLC0415
    from ._progress import JsonLines, Progress  # noqa: PLC0415

    config = _config(
        args,
        round_timeout=args.round_timeout,
        inter_round_delay=args.inter_round_delay,
        max_concurrent_rounds=args.max_concurrent,
    )
    worker = args.worker
    if args.workspace is not None:
        worker = in_workspace(worker or config.worker, args.workspace)
    elif (kind := worker_kind(worker or config.worker)) and kind.workspace == "round":
        # Pinned at start, so a `resume` from another directory works in the same place.
        worker = in_workspace(worker or config.worker, Path.cwd())
    options = _loop_options(args)
    async with ctrl_c_leaves(), open_runtime(config) as rt:
        display: JsonLines | Progress = JsonLines() if args.json else Progress()
        if worker is None and (default := worker_kind(config.worker)) and default.stand_in:
            display.note(
                "(no --worker given: this loop uses the scripted worker, a stand-in that needs "
                "no model; --worker SPEC runs a real one)"
            )
        final = await start_and_follow(
            rt,
            lambda chosen: rt.start(args.text, worker=worker, loop_id=chosen, **options),
            display,
            on_node=False,
        )
        return PHASE_EXIT[final.phase]


async def _resume(args: argparse.Namespace) -> int:
    from ..runtime import open_runtime  # noqa: PLC0415 - see the note on the imports
    from ._follow import PHASE_EXIT, ctrl_c_leaves, follow  # noqa: PLC0415
    from ._progress import JsonLines, Progress  # noqa: PLC0415

    config = _config(args)
    display: JsonLines | Progress = JsonLines() if args.json else Progress()
    # Read before the runtime starts: it resumes these at once, and some may end (or be
    # found impossible to resume) before a query made afterwards could see them live.
    backend = StoredLoops(lambda: config).open_store(missing_ok=True)
    live = backend.list_loops(live_only=True) if backend is not None else []
    if backend is not None:
        backend.close()
    if not live:
        display.note(f"nothing to resume in {config.state_dir}")
        return EXIT_OK
    _refuse_unbuildable(live, config)
    display.note(f"resuming {len(live)} loop(s) from {config.state_dir}")
    async with ctrl_c_leaves(), open_runtime(config) as rt:
        async with rt.subscribe() as events:
            for state in live:
                if state.phase == "paused":  # `resume` means all of them, paused ones too
                    await rt.resume(state.loop_id)
            final = await follow([state.loop_id for state in live], events, display, rt)
        return max((PHASE_EXIT[s.phase] for s in final), key=_severity)


def _refuse_unbuildable(live: list[LoopState], config: RuntimeConfig) -> None:
    """Resume nothing when a loop's worker cannot be built here (a program not on PATH, a
    module that does not import): a mistake of this shell, often. Its loop would wait in
    the runtime; from the command line, saying so and leaving every loop as it is (phase,
    agent session) is the better answer."""
    from ..runtime import worker_problem  # noqa: PLC0415 - see the note on the imports

    here = config.transport == "inprocess"
    problems: dict[str, str | None] = {}
    stuck: list[str] = []
    for state in live:
        spec = state.spec.worker
        if spec not in problems:
            problems[spec] = worker_problem(spec, config.kill_grace, here=here)
        problem = problems[spec]
        if problem is not None:
            stuck.append(f"  {state.loop_id} ({state.phase}, round {state.round}): {problem}")
    if stuck:
        raise ConfigError(
            f"resumed nothing: {len(stuck)} of the {len(live)} unfinished loop(s) in "
            f"{config.state_dir} have a worker that cannot be built here\n"
            + "\n".join(stuck)
            + "\nEvery loop is left as it was. Put the program on PATH (or install it), or "
            "make the module importable from here, then run `loopactors resume` again; "
            f"`loopactors stop LOOP_ID --state {config.state_dir}` ends a loop instead."
        )


def _severity(code: int) -> int:
    from ._follow import PHASE_EXIT  # noqa: PLC0415 - see the note on the imports

    phase = next(p for p, c in PHASE_EXIT.items() if c == code)
    return _SEVERITY.index(phase)


def _export_ledger(args: argparse.Namespace) -> int:
    """Write a loop's ledger in loop-context's JSON, so either tool can read it."""
    from ..ledger import encode_json  # noqa: PLC0415 - see the note on the imports
    from ..runtime import ledger_of  # noqa: PLC0415

    state, rounds = run_offline(StoredLoops(lambda: _config(args)).recorded(args.loop_id))
    print(encode_json(msgspec.to_builtins(ledger_of(state, rounds))))
    return EXIT_OK
