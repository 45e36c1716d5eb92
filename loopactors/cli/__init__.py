"""The `loopactors` command line: a thin entry that loads only what a command needs.

``loopactors context`` is the run-ledger tool (loop-context's command line) and must start
fast, so it never imports trio or the runtime; ``loopactors code`` (code loops) lives in
``codeloop._cli``; every other command lives in this package: ``_commands`` (the parser and
the runtime's commands), ``_remote`` (``node`` and ``--connect``), ``_prune``, ``_repl*``
(the interactive REPL), ``_progress`` and ``_follow`` (the live display), ``_demo``.
This module imports nothing heavy: each command loads what it needs.
Exit codes are listed in the README.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "context":
        from ..ledger._cli import main as context_main  # noqa: PLC0415 - only what is needed

        return context_main(args[1:])
    if args and args[0] == "code":
        from ..codeloop._cli import main as code_main  # noqa: PLC0415 - only what is needed

        return code_main(args[1:])
    from ._commands import main as runtime_main  # noqa: PLC0415 - trio loads only from here

    return runtime_main(args)
