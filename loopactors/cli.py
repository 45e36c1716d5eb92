"""The `loopactors` command line.

Exit codes (documented in the README): 0 success, 1 error, 64 bad usage.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import __version__

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 64


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loopactors",
        description=(
            "A runtime for long-running AI-agent loops, built as a tree of supervised trio actors."
        ),
    )
    parser.add_argument("--version", action="version", version=f"loopactors {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser("version", help="print the installed version")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad usage; ours is 64 (EX_USAGE)
        code = exc.code if isinstance(exc.code, int) else EXIT_ERROR
        return EXIT_USAGE if code == 2 else code
    if args.command == "version":
        print(f"loopactors {__version__}")
        return EXIT_OK
    parser.print_help(sys.stdout)
    return EXIT_OK
