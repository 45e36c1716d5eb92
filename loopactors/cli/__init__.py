"""The `loopactors` command line: a thin entry that loads only what a command needs.

``loopactors context`` is the run-ledger tool (loop-context's command line, docs/ledger.md)
and must start fast, so it never imports trio or the runtime; ``loopactors code`` (code
loops) lives in ``codeloop._cli``; every other command lives in this package: ``_commands``
(the parser and the runtime's commands), ``_remote`` (``node`` and ``--connect``),
``_prune``, ``_repl*`` (the interactive REPL), ``_progress`` and ``_follow`` (the live
display), ``_demo``.
This module imports nothing heavy: each command loads what it needs.
Exit codes are listed in the README.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

#: The exit code when stdout was closed early (``loopactors status --json | head``): what a
#: process killed by SIGPIPE reports to a shell, without the traceback.
EXIT_STDOUT_CLOSED = 141


def main(argv: Sequence[str] | None = None) -> int:
    # As `python -m loopactors` does: modules of the working directory can be imported (a
    # `python:mymod:fn` worker), also from the `loopactors` console script.
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        code = _main(argv)
        sys.stdout.flush()  # a closed pipe shows here, not at exit as an ignored error
    except BrokenPipeError:
        return _stdout_closed()
    except SystemExit as exc:
        if not _closed_pipe(exc):
            raise
        return _stdout_closed()
    except BaseExceptionGroup as group:  # raised through a nursery (the live display)
        leaves = _leaves(group)
        if not any(_closed_pipe(e) for e in leaves) or not all(
            _closed_pipe(e) or isinstance(e, KeyboardInterrupt) for e in leaves
        ):
            raise
        return _stdout_closed()
    return code


def _closed_pipe(exc: BaseException) -> bool:
    """A write to a closed stdout: the error itself, or rich's exit after one."""
    if isinstance(exc, BrokenPipeError):
        return True
    return isinstance(exc, SystemExit) and isinstance(exc.__context__, BrokenPipeError)


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    leaves: list[BaseException] = []
    for exc in group.exceptions:
        leaves.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return leaves


def _stdout_closed() -> int:
    """Stdout's reader went away: nothing more to say, and nothing to flush at exit either."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real file descriptor (captured output)
        pass
    finally:
        os.close(devnull)
    return EXIT_STDOUT_CLOSED


def _main(argv: Sequence[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "context":
        from ..ledger._cli import main as context_main  # noqa: PLC0415 - only what is needed

        return context_main(args[1:])
    if args and args[0] == "code":
        from ..codeloop._cli import main as code_main  # noqa: PLC0415 - only what is needed

        return code_main(args[1:])
    from ._commands import main as runtime_main  # noqa: PLC0415 - trio loads only from here

    return runtime_main(args)
