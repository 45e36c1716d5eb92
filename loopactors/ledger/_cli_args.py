"""Argument parsing for ``loopactors context``, token for token as loop-context does it.

A hand-written parser, because argparse cannot reproduce loop-context's: unknown tokens are
silently ignored, a value flag takes the next token whatever it looks like, and numeric values
are validated while parsing with loop-context's own messages.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from ..errors import LoopactorsError
from ._js import as_double, trim
from ._rules import (
    MAX_ITERATIONS,
    MAX_TRACE_LINES,
    NO_PROGRESS_THRESHOLD,
    SIMILARITY_THRESHOLD,
    STAGNATION_THRESHOLD,
    WINDOW,
    assert_similarity_threshold,
)

__all__ = ["CliError", "Options", "js_to_number", "parse_args"]


class CliError(LoopactorsError):
    """A command-line problem; printed as ``loop-context failed: <message>``, exit 1."""


class Options:
    """The parsed command line; the class attributes are the defaults (no dataclass: it
    loads ``inspect``, a start-up cost)."""

    operation: str = "status"
    ledger: str | None = None
    json: bool = False
    help: bool = False
    max_iterations: int = MAX_ITERATIONS
    stagnation: int = STAGNATION_THRESHOLD
    no_progress: int = NO_PROGRESS_THRESHOLD
    token_budget: int | None = None
    window: int = WINDOW
    max_trace_lines: int = MAX_TRACE_LINES
    similarity_threshold: float = SIMILARITY_THRESHOLD
    budget_pattern: str | None = None
    #: ``None`` when the flag ended argv; the lookups then use the default.
    budget_level: str | None = "L1"
    budget_scenario: str | None = "realistic"
    budget_cadence: str | None = None
    budget_conservative: bool = False
    daily_pattern: str | None = None
    #: ``None`` when the flag ended argv (the reference then crashes once it is used).
    daily_state_dir: str | None = ".loop-context"
    on_exceed: str | None = None


_OPERATIONS = {
    "--check": "check",
    "--prune": "prune",
    "--inject": "inject",
    "--summary": "summary",
    "--status": "status",
}
_INT_FLAGS = {
    "--max-iterations": "max_iterations",
    "--stagnation": "stagnation",
    "--no-progress": "no_progress",
    "--token-budget": "token_budget",
    "--window": "window",
    "--max-trace-lines": "max_trace_lines",
}
_STRING_FLAGS = {
    "-f": "ledger",
    "--ledger": "ledger",
    "--budget-from-pattern": "budget_pattern",
    "--budget-level": "budget_level",
    "--budget-scenario": "budget_scenario",
    "--budget-cadence": "budget_cadence",
    "--daily-budget-from-pattern": "daily_pattern",
    "--daily-state-dir": "daily_state_dir",
    "--on-exceed": "on_exceed",
}

# ECMAScript StringNumericLiteral; [0-9] because Python's \d also matches non-ASCII digits and
# float() alone would accept "1_0", "inf" and "nan", which Number() turns into NaN.
_DECIMAL = re.compile(r"[+-]?(?:Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)")
_RADIX = {"x": (16, "[0-9a-fA-F]"), "o": (8, "[0-7]"), "b": (2, "[01]")}


def js_to_number(raw: str) -> float:
    """``Number(raw)``: J1 trim, decimal/Infinity, unsigned 0x/0o/0b; anything else is NaN."""
    text = trim(raw)
    if not text:
        return 0.0
    if _DECIMAL.fullmatch(text):
        return float(text.replace("Infinity", "inf"))
    if len(text) > 2 and text[0] == "0" and text[1].lower() in _RADIX:
        base, digit = _RADIX[text[1].lower()]
        if re.fullmatch(f"{digit}+", text[2:]):
            return as_double(int(text[2:], base))
    return math.nan


def _positive_int(flag: str, raw: str | None) -> int:
    if not raw:
        raise CliError(f"{flag} requires a positive integer value.")
    value = js_to_number(raw)
    if not value.is_integer() or value < 1:  # NaN and Infinity are not integers
        raise CliError(f'{flag} must be a positive integer; got "{raw}".')
    return int(value)


def _fraction(flag: str, raw: str | None) -> float:
    if not raw:
        raise CliError(f"{flag} requires a value between 0 and 1 (e.g. 0.85).")
    value = js_to_number(raw)
    # A NaN is reported with the raw text (`got abc.`), a number with its JS form (`got 0.`).
    assert_similarity_threshold(raw if math.isnan(value) else value, flag)
    return value


def parse_args(argv: Sequence[str]) -> Options:
    """Left to right; the first bad numeric value raises :class:`CliError` or ConfigError."""
    opts = Options()
    i = 0
    while i < len(argv):
        token = argv[i]
        # A value flag at the end of argv gets an absent value, like argv[++i] in JavaScript.
        value = argv[i + 1] if i + 1 < len(argv) else None
        if token in ("-h", "--help"):
            opts.help = True
            return opts  # later tokens are not even validated
        if token in _OPERATIONS:
            opts.operation = _OPERATIONS[token]
        elif token == "--json":
            opts.json = True
        elif token == "--budget-conservative":
            opts.budget_conservative = True
        elif token in _INT_FLAGS:
            setattr(opts, _INT_FLAGS[token], _positive_int(token, value))
            i += 1
        elif token == "--similarity-threshold":
            opts.similarity_threshold = _fraction(token, value)
            i += 1
        elif token in _STRING_FLAGS:
            setattr(opts, _STRING_FLAGS[token], value)
            i += 1
        i += 1
    return opts
