"""``loopactors context``: loop-context's command line on the pure ledger module (docs/ledger.md).

Only the standard library and the ledger are imported, so the command starts fast (no trio,
rich or runtime); ``--check`` on a small ledger without the daily budget or a hook does not
even load msgspec (docs/benchmarks.md, start-up): the other operations import their modules
when they run. Messages, output and exit codes are loop-context's; the prefix
stays ``loop-context`` so scripts that grep for it keep working.
"""

from __future__ import annotations

import errno
import gc
import io
import os
import stat
import sys
from collections.abc import Callable, Sequence

from ._cli_args import Options, parse_args
from ._facts import SMALL_LEDGER_BYTES, BreakerFacts, read_breaker_facts
from ._js import encode_plain_json, is_integer
from ._rules import BreakerLimits, breaker_verdict, check_limits

TYPE_CHECKING = False  # typing itself is not loaded by ``context --check``
if TYPE_CHECKING:
    from typing import BinaryIO, TypeVar

    from ._model import BreakerConfig, BreakerDecision, Ledger, PruneConfig, Trigger

    _Limits = TypeVar("_Limits", BreakerLimits, BreakerConfig)

__all__ = ["HELP", "main"]

EXIT_CONTINUE, EXIT_ERROR, EXIT_ESCALATE = 0, 1, 2

_DAILY_EXAMPLE = (
    "loopactors context --check --ledger run.json --daily-budget-from-pattern ci-sweeper "
    "--on-exceed ./on-exceed.sh"
)

# Seconds; _cli_daily.HOOK_TIMEOUT (a test checks they agree). That module, the budget lookups
# and the summary load only when a flag or operation needs them: --check starts faster.
_HOOK_TIMEOUT = 10.0

HELP = f"""loop-context — stateful memory manager for agent loops

Keeps a loop's context window clean and stops runaway loops. Reads a run ledger
(JSON) and summarizes, prunes, injects, or applies the circuit breaker.

Usage:
  loopactors context [operation] [--ledger <file.json>] [options]
  cat ledger.json | loopactors context --check
  loopactors context --check --ledger run.json --budget-from-pattern ci-sweeper --budget-level L2
  {_DAILY_EXAMPLE}

Operations (default: --status):
  --check      Run the circuit breaker. Exit 0 = continue, 2 = escalate.
  --prune      Emit a pruned ledger (recent window, trimmed traces, collapsed).
  --inject     Emit the compact context block for the next prompt.
  --summary    Emit a factual rollup of the run.
  --status     Human-readable overview (summary + breaker decision).

Options:
  -f, --ledger <file>       Ledger JSON file (default: stdin)
  --json                    Machine-readable output where applicable
  --max-iterations <n>      Iteration cap (default: 10)
  --stagnation <n>          Same-error repeat limit (default: 3)
  --no-progress <n>         Consecutive-failure limit (default: 5)
  --token-budget <n>        Total token cap (default: none)
  --budget-from-pattern <id>
                            Resolve the token cap from loop-cost's registry
                            estimate instead of typing a number. Ignored if
                            --token-budget is also given (explicit wins).
  --budget-level <L1|L2|L3> Readiness level for --budget-from-pattern (default: L1)
  --budget-scenario <realistic|action|report|caching>
                            Which loop-cost scenario to use (default: realistic).
                            caching requires stable_fraction set on the pattern
                            in registry.yaml (see loop-cost --with-caching).
  --budget-cadence <spec>   Cadence override passed through to loop-cost
  --budget-conservative     Use the slower cadence in a range (loop-cost flag)
  --daily-budget-from-pattern <id>
                            Track cumulative daily spend for this pattern
                            across separate --check calls/runs and escalate
                            (trigger: daily-budget) once it reaches loop-cost's
                            suggested daily cap. Ignored if a per-run trigger
                            already escalated. Uses --budget-level/-cadence/
                            -conservative for the lookup.
  --daily-state-dir <dir>  Where daily-spend.<pattern>.json is kept (default: .loop-context)
  --on-exceed <script>      On escalate, pipe the decision as JSON to this
                            script's stdin (its exit code is not checked and
                            does not change --check's own). --check waits for
                            it at most {_HOOK_TIMEOUT:g} s, then kills it.
  --similarity-threshold <f> Fraction in (0, 1] to cluster similar errors (default: 0.85)
  --window <n>              Attempts kept when pruning (default: 5)
  --max-trace-lines <n>     Stack-trace lines kept (default: 8)
  -h, --help                This help

Ledger shape:
  {{ "goal": "...", "attempts": [ {{ "iteration": 1, "action": "...",
    "outcome": "failure", "error": "...", "tokensUsed": 1200 }} ] }}

Exit codes: 0 continue · 2 escalate · 1 error
"""


def _node_message(exc: OSError, syscall: str) -> str:
    """An OSError worded as Node words it (``ENOENT: no such file or directory, open 'x'``)."""
    if exc.errno == errno.EISDIR:
        return "EISDIR: illegal operation on a directory, read"
    code = errno.errorcode.get(exc.errno or 0, "EIO")
    reason = (exc.strerror or "").lower()
    return f"{code}: {reason}, {syscall} '{exc.filename if exc.filename is not None else ''}'"


def _open(path: str) -> BinaryIO:
    try:
        return open(path, "rb")
    except OSError as exc:
        raise RuntimeError(_node_message(exc, "open")) from None


def _node_errors(read: Callable[[int], bytes]) -> Callable[[int], bytes]:
    """``read`` raising what a failed open raises (Node's wording)."""

    def guarded(size: int) -> bytes:
        try:
            return read(size)
        except OSError as exc:
            raise RuntimeError(_node_message(exc, "open")) from None

    return guarded


class _Input:
    """The ledger: a regular file (read as often as needed), or the bytes of a small one from
    standard input or a pipe. A larger one from those is spooled as it arrives into an
    anonymous temporary file, then read as a file is (a block at a time: docs/ledger.md)."""

    __slots__ = ("data", "handle")

    def __init__(self, path: str | None) -> None:
        self.handle: BinaryIO | None = None
        self.data: bytes | None = None
        if path:
            handle = _open(path)
            if stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                self.handle = handle
                return
            with handle:
                self._spool(_node_errors(handle.read))
        elif sys.stdin is None:
            self.data = b""
        else:
            self._spool(sys.stdin.buffer.read)

    def _spool(self, read: Callable[[int], bytes]) -> None:
        head = read(SMALL_LEDGER_BYTES + 1)  # a buffered read: all of it, or up to EOF
        if len(head) <= SMALL_LEDGER_BYTES:
            self.data = head
            return
        import tempfile  # noqa: PLC0415 - a large ledger from a pipe only

        spool = tempfile.TemporaryFile()  # noqa: SIM115 - open until close()
        try:
            while head:
                spool.write(head)
                head = read(1 << 16)
            spool.seek(0)
        except BaseException:
            spool.close()
            raise
        self.handle = spool

    def large(self) -> bool:
        """Whether this is a file above the small-ledger size."""
        return self.handle is not None and os.fstat(self.handle.fileno()).st_size > (
            SMALL_LEDGER_BYTES
        )

    def read(self) -> Callable[[int], bytes]:
        """The ledger's reader, from its start."""
        if self.handle is None:
            assert self.data is not None
            return io.BytesIO(self.data).read
        self.handle.seek(0)
        return _node_errors(self.handle.read)

    def whole(self) -> bytes:
        """The ledger's bytes."""
        return self.read()(-1)

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()


def _read_ledger(source: _Input) -> Ledger:
    from ._model import parse_ledger  # noqa: PLC0415 - not needed by --check

    # Node's utf8 decoding replaces bad bytes instead of failing.
    return parse_ledger(source.whole().decode("utf-8", errors="replace"))


def _write(text: str) -> None:
    out = sys.stdout
    out.write(text + "\n")
    out.flush()


def _limits(opts: Options, token_budget: int | float | None, make: type[_Limits]) -> _Limits:
    """The breaker's limits as the command line gives them, as ``make`` (the plain
    :class:`BreakerLimits` of ``--check``, or the public :class:`BreakerConfig`)."""
    if token_budget is not None and is_integer(token_budget):
        token_budget = int(token_budget)
    return make(
        max_iterations=opts.max_iterations,
        stagnation_threshold=opts.stagnation,
        no_progress_threshold=opts.no_progress,
        similarity_threshold=opts.similarity_threshold,
        # A non-integral loop-cost value is kept so the breaker's own check refuses it.
        token_budget=token_budget,  # type: ignore[arg-type]
    )


def _configs(opts: Options, token_budget: int | float | None) -> tuple[BreakerConfig, PruneConfig]:
    from ._model import BreakerConfig, PruneConfig  # noqa: PLC0415 - not needed by --check

    breaker = _limits(opts, token_budget, BreakerConfig)
    prune = PruneConfig(
        max_trace_lines=opts.max_trace_lines,
        window=opts.window,
        similarity_threshold=opts.similarity_threshold,
    )
    return breaker, prune


def _check(facts: BreakerFacts, limits: BreakerLimits, opts: Options) -> dict[str, object]:
    """The decision as JSON fields (the order of :class:`BreakerDecision`'s keys)."""
    check_limits(limits)
    trigger, reason = breaker_verdict(facts, limits)
    if opts.daily_pattern or (trigger != "ok" and opts.on_exceed):
        decision = _daily_budget_and_hook(facts, trigger, reason, opts)
        trigger, reason = decision.trigger, decision.reason
    escalate = trigger != "ok"
    return {
        "iterations": facts.iterations,
        "tokensUsed": facts.tokens_used,
        "shouldContinue": not escalate,
        "escalate": escalate,
        "trigger": trigger,
        "reason": reason,
    }


def _daily_budget_and_hook(
    facts: BreakerFacts, trigger: Trigger, reason: str, opts: Options
) -> BreakerDecision:
    # Only when asked for: these load msgspec and the daily-state and hook modules.
    from ._breaker import apply_daily_budget  # noqa: PLC0415
    from ._model import BreakerDecision  # noqa: PLC0415

    ok = trigger == "ok"
    decision = BreakerDecision(
        iterations=facts.iterations,
        tokens_used=facts.tokens_used,
        should_continue=ok,
        escalate=not ok,
        trigger=trigger,
        reason=reason,
    )
    if opts.daily_pattern:
        # Recorded even when a per-run trigger already escalated (docs/ledger.md, "Daily budget").
        from ._cli_budget import resolve_daily_cap  # noqa: PLC0415
        from ._cli_daily import add_daily_spend  # noqa: PLC0415

        state = add_daily_spend(opts.daily_state_dir, opts.daily_pattern, facts.newest_tokens)
        if not decision.escalate:
            cap = resolve_daily_cap(opts.daily_pattern, opts)
            decision = apply_daily_budget(
                decision, opts.daily_pattern, state.tokens_used_today, cap
            )
    if decision.escalate and opts.on_exceed:
        from ._cli_daily import run_hook  # noqa: PLC0415

        run_hook(opts.on_exceed, decision)
    return decision


def _run(opts: Options) -> int:
    token_budget: int | float | None = opts.token_budget
    if opts.budget_pattern and token_budget is None:
        from ._cli_budget import resolve_run_budget  # noqa: PLC0415 - only when asked for

        token_budget = resolve_run_budget(opts)
    source = _Input(opts.ledger)
    try:
        return _operation(opts, token_budget, source)
    finally:
        source.close()


def _operation(opts: Options, token_budget: int | float | None, source: _Input) -> int:
    if opts.operation == "check":
        # The breaker reads only what its rules need, straight from the JSON (see _facts).
        facts = _check_facts(opts, source)
        answer = _check(facts, _limits(opts, token_budget, BreakerLimits), opts)
        if opts.json:
            _write(encode_plain_json(answer))
        else:
            verdict = "ESCALATE" if answer["escalate"] else "CONTINUE"
            _write(f"{verdict} [{answer['trigger']}] \u2014 {answer['reason']}")
        return EXIT_ESCALATE if answer["escalate"] else EXIT_CONTINUE
    if opts.operation == "summary":
        return _summary(opts, source)
    from ._breaker import check_circuit_breaker  # noqa: PLC0415 - not needed by --check
    from ._js import encode_json  # noqa: PLC0415
    from ._summary import (  # noqa: PLC0415
        build_context_injection,
        format_summary,
        prune_ledger,
        summarize_attempts,
    )

    if opts.operation == "status":
        done = _streamed_status(opts, token_budget, source)
        if done is not None:
            return done
    breaker, prune = _configs(opts, token_budget)
    if opts.operation == "inject" and _streamed_inject(breaker, prune, source):
        return EXIT_CONTINUE
    if opts.operation == "prune" and source.large():
        from ._prune_read import read_pruned_ledger  # noqa: PLC0415

        pruned = read_pruned_ledger(source.read(), source.read, prune)
        if pruned is not None:
            from ._js import write_json  # noqa: PLC0415

            write_json(pruned, sys.stdout.write)  # a piece at a time, not one string
            _write("")
            return EXIT_CONTINUE
    ledger = _read_ledger(source)
    if opts.operation == "prune":
        _write(encode_json(prune_ledger(ledger, prune)))
        return EXIT_CONTINUE
    if opts.operation == "inject":
        _write(build_context_injection(ledger, breaker, prune))
        return EXIT_CONTINUE
    # status: no daily tracking, no hook, --json ignored.
    text = format_summary(summarize_attempts(ledger))
    decision = check_circuit_breaker(ledger, breaker)
    verdict = "ESCALATE" if decision.escalate else "CONTINUE"
    _write(f"{text}\n\nCircuit breaker: {verdict} [{decision.trigger}]\n  {decision.reason}")
    return EXIT_ESCALATE if decision.escalate else EXIT_CONTINUE


def _check_facts(opts: Options, source: _Input) -> BreakerFacts:
    """The breaker's facts for ``--check``: a large file with a huge attempt is read a block
    at a time (``_facts_read.read_file_facts``), anything else whole."""
    if source.large():
        from ._facts_read import read_file_facts  # noqa: PLC0415 - loads msgspec

        assert source.handle is not None
        source.handle.seek(0)
        # A failed read raises an OSError: worded as _node_errors words it (_main).
        return read_file_facts(source.handle, opts.similarity_threshold)
    return read_breaker_facts(source.whole(), opts.similarity_threshold)


def _streamed_status(opts: Options, token_budget: int | float | None, source: _Input) -> int | None:
    """``--status`` of a large file, read twice a block at a time (the breaker's facts, then
    the summary; never both held: docs/ledger.md); None leaves the ledger to the whole read
    (a small ledger, input the block reader gives up on)."""
    if not source.large():
        return None
    from ._facts_stream import read_streamed_facts  # noqa: PLC0415 - not needed by --check
    from ._summary_read import format_streamed_summary, read_summary  # noqa: PLC0415

    facts = read_streamed_facts(source.read(), opts.similarity_threshold)
    if facts is None:
        return None
    limits = _limits(opts, token_budget, BreakerLimits)
    check_limits(limits)  # after the ledger, as the whole read checks them
    trigger, reason = breaker_verdict(facts, limits)
    del facts
    summary = read_summary(source.read())
    if summary is None:
        return None
    # The summary always groups at the default 0.85, as summarize_attempts(ledger) does.
    format_streamed_summary(summary, sys.stdout.write)
    del summary
    escalate = trigger != "ok"
    verdict = "ESCALATE" if escalate else "CONTINUE"
    _write(f"\n\nCircuit breaker: {verdict} [{trigger}]\n  {reason}")
    return EXIT_ESCALATE if escalate else EXIT_CONTINUE


def _streamed_inject(breaker: BreakerConfig, prune: PruneConfig, source: _Input) -> bool:
    """``--inject`` of a large file, read three times a block at a time (``_inject_read``);
    False leaves the ledger to the whole read (a small ledger, a threshold below 0.8, input
    the block reader gives up on), with nothing written."""
    if not source.large():
        return False
    from ._inject_read import streams_injection, write_streamed_injection  # noqa: PLC0415

    if not streams_injection(breaker):
        return False
    read = source.read()
    out = sys.stdout
    done = write_streamed_injection(read, source.read, breaker, prune, out.write)
    out.flush()
    return done


def _summary(opts: Options, source: _Input) -> int:
    """``--summary``: read a block at a time where the input allows (see _summary_read)."""
    from ._summary_read import (  # noqa: PLC0415 - not needed by --check
        format_streamed_summary,
        read_summary,
        write_summary_json,
    )

    streamed = read_summary(source.read())
    out = sys.stdout
    if streamed is not None:
        if opts.json:
            write_summary_json(streamed, out.write)
        else:
            format_streamed_summary(streamed, out.write)
        _write("")
        return EXIT_CONTINUE
    # Input the block reader leaves to parse_ledger: its error, or its summary.
    from ._js import write_json  # noqa: PLC0415
    from ._model import parse_ledger  # noqa: PLC0415
    from ._summary import format_summary, summarize_attempts  # noqa: PLC0415

    data = source.whole()
    # The summary always groups at the default 0.85 (the reference ignores the flag here).
    summary = summarize_attempts(parse_ledger(data.decode("utf-8", errors="replace")))
    del data
    if opts.json:
        # Piece by piece: a summary of many groups is never held as one string.
        write_json(summary, out.write)
        _write("")
    else:
        _write(format_summary(summary))
    return EXIT_CONTINUE


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``loopactors context``; returns the exit code (0 continue, 2 escalate, 1 error)."""
    # The ledger's objects form no reference cycles, and on a large ledger the collector's
    # passes over every live object cost a third of the run: off while the command runs.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _main(argv)
    finally:
        if collecting:
            gc.enable()


def _main(argv: Sequence[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        opts = parse_args(args)
        if opts.help:
            _write(HELP)
            return EXIT_CONTINUE
        return _run(opts)
    except Exception as exc:  # every failure is "loop-context failed", exit 1
        if isinstance(exc, OSError) and exc.errno is not None:
            message = _node_message(exc, "mkdir" if exc.filename == "" else "open")
        else:
            message = str(exc)
        sys.stderr.write(f"loop-context failed: {message}\n")
        sys.stderr.flush()
        return EXIT_ERROR
