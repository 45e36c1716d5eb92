"""Budgets from loop-cost's registry, through an installed ``loop-cost`` command.

loop-context runs ``node <loop-cost>/dist/cli.js``; here the ``loop-cost`` found on PATH is
run directly (it is the same CLI, installed by npm as a bin), with the same arguments and
the same error messages.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

from ._cli_args import CliError, Options
from ._js import is_number, trim

__all__ = ["resolve_daily_cap", "resolve_run_budget"]

SCENARIOS = ("realistic", "action", "report", "caching")
_MISSING = (
    "Resolving a budget from a pattern requires @cobusgreyling/loop-cost. "
    "Install it, or run from the loop-engineering monorepo."
)


def _reject_constant(name: str) -> Any:
    raise ValueError(name)  # JSON.parse has no NaN/Infinity literals


def _run_loop_cost(pattern: str, opts: Options, *, with_caching: bool) -> Any:
    exe = shutil.which("loop-cost")
    if exe is None:
        raise CliError(_MISSING)
    args = [
        exe,
        "--pattern",
        pattern,
        "--level",
        "L1" if opts.budget_level is None else opts.budget_level,
    ]
    if opts.budget_cadence:
        args += ["--cadence", opts.budget_cadence]
    if opts.budget_conservative:
        args.append("--conservative")
    if with_caching:
        args.append("--with-caching")
    args.append("--json")
    proc = subprocess.run(args, stdin=subprocess.DEVNULL, capture_output=True, check=False)
    if proc.returncode != 0:
        stderr = trim(proc.stderr.decode("utf-8", errors="replace"))
        # Node reports a signal death as code null.
        code = "null" if proc.returncode < 0 else str(proc.returncode)
        raise CliError(stderr or f"loop-cost exited with code {code}.")
    stdout = proc.stdout.decode("utf-8", errors="replace")
    if not trim(stdout):
        raise CliError("loop-cost produced no output.")
    try:
        return json.loads(stdout, parse_constant=_reject_constant)
    except ValueError:
        raise CliError("loop-cost produced output that could not be parsed as JSON.") from None


def _get(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, dict) else None


def resolve_run_budget(opts: Options) -> int | float:
    """``scenarios[<scenario>].tokensPerRun`` for ``--budget-from-pattern``."""
    scenario = "realistic" if opts.budget_scenario is None else opts.budget_scenario
    if scenario not in SCENARIOS:
        raise CliError(f"Invalid --budget-scenario: {scenario}. Valid: {', '.join(SCENARIOS)}")
    assert opts.budget_pattern is not None
    output = _run_loop_cost(opts.budget_pattern, opts, with_caching=scenario == "caching")
    tokens = _get(_get(_get(output, "scenarios"), scenario), "tokensPerRun")
    if not is_number(tokens):
        hint = (
            " This pattern may be missing stable_fraction in registry.yaml."
            if scenario == "caching"
            else ""
        )
        raise CliError(f"loop-cost output missing scenarios.{scenario}.tokensPerRun.{hint}")
    result: int | float = tokens
    return result


def resolve_daily_cap(pattern: str, opts: Options) -> int | float:
    """loop-cost's ``suggestedDailyCap`` (no scenario, no caching) for the daily budget."""
    cap = _get(_run_loop_cost(pattern, opts, with_caching=False), "suggestedDailyCap")
    if not is_number(cap):
        raise CliError("loop-cost output missing suggestedDailyCap.")
    result: int | float = cap
    return result
