"""The run ledger and circuit breaker: loop-context's behaviour, pure and without trio.

Mirrors ``loop-context`` (its behaviour as specified for this project) name for name in
snake_case. Layout: ``_js`` (JavaScript whitespace, numbers and JSON), ``_text`` (signatures,
similarity, trace pruning), ``_model`` (Structs, ledger parsing, config checks), ``_breaker``
(the breaker and the pure daily-budget step), ``_grouping`` (exact fast error grouping),
``_summary`` (prune, summary, context block).

Compatibility with loop-context (docs/compat.md)
-----------------------------------------------

Quirks kept (a script may rely on them): URL schemes glued by the drive-form path rule
(``httpusers?id=#``), ``and/or`` becoming ``andor``, ``:digits`` removal eating ports,
a trailing LF counting as a pruned line, the summary ``sample`` being the literal first line,
collapsing against the group head (which keeps its own error, action and tokens), the context
block showing the head's error, the breaker comparing with the last element (not the
neighbour), unknown outcomes counted as failures by the summary only, and two missing actions
counting as identical in the frustration walk.

Deliberate differences (plain bugs or JavaScript accidents no script can rely on):

1. Attempts are typed. An attempt that is not an object or has a wrongly typed key (a string
   ``tokensUsed``, a non-string ``error``/``action``/``outcome``/``timestamp``, a non-number
   ``iteration``) is refused by :func:`parse_ledger` with ``Invalid attempt: ...`` naming the
   path, instead of crashing later or concatenating strings. Exit 1 either way in the CLI.
2. Unknown attempt keys are dropped, and pruned attempts are written in the Struct's key
   order (``iteration, timestamp, action, outcome, error, tokensUsed, repeated``), which is
   the usual input order, rather than the input's own order.
3. A JSON ``null`` ledger gets the ``Invalid ledger: ...`` message instead of a TypeError.
4. ``error: null`` no longer crashes the pruner (``--prune``, ``--inject``): it is kept as
   ``null`` and read as "no error", as the breaker already does.
5. In the frustration walk a missing action compared with a string (or ``null`` with a missing
   action) ends the walk instead of crashing.
6. A ``null`` action and a missing action are one entry (``None``) in ``actionsTried``,
   printed ``undefined``; loop-context lists them separately, the first as ``null``.
7. ``BreakerConfig.token_budget=None`` means no cap (Python has no ``undefined``).
8. The decoder refuses numbers beyond the double range (``1e400``, Infinity upstream) and
   lone-surrogate escapes; ``startedAt`` must be a string or null.
9. Daily state: a state file whose ``tokensUsedToday`` is not a number is unreadable, so the
   day restarts at 0 (upstream concatenates ``"5" + 100``); a missing one counts as 0
   (upstream writes ``null``). :func:`record_daily_spend` is only the pure step
   ``(previous state, UTC day, delta) -> new state``; locking is the CLI's job.
"""

from .._lazy import lazy_names

TYPE_CHECKING = False

if TYPE_CHECKING:
    from ._breaker import DailySpend as DailySpend
    from ._breaker import apply_daily_budget as apply_daily_budget
    from ._breaker import check_circuit_breaker as check_circuit_breaker
    from ._breaker import decode_daily_spend as decode_daily_spend
    from ._breaker import encode_daily_spend as encode_daily_spend
    from ._breaker import newest_attempt_tokens as newest_attempt_tokens
    from ._breaker import record_daily_spend as record_daily_spend
    from ._breaker import total_tokens as total_tokens
    from ._breaker import trailing_failure_run as trailing_failure_run
    from ._breaker import utc_day as utc_day
    from ._facts import BreakerFacts as BreakerFacts
    from ._facts import breaker_facts as breaker_facts
    from ._js import encode_json as encode_json
    from ._js import format_number as format_number
    from ._model import Attempt as Attempt
    from ._model import AttemptSummary as AttemptSummary
    from ._model import BreakerConfig as BreakerConfig
    from ._model import BreakerDecision as BreakerDecision
    from ._model import ErrorGroup as ErrorGroup
    from ._model import Ledger as Ledger
    from ._model import LedgerError as LedgerError
    from ._model import PruneConfig as PruneConfig
    from ._model import Trigger as Trigger
    from ._model import assert_positive_integer as assert_positive_integer
    from ._model import assert_similarity_threshold as assert_similarity_threshold
    from ._model import parse_ledger as parse_ledger
    from ._model import validate_breaker_config as validate_breaker_config
    from ._model import validate_prune_config as validate_prune_config
    from ._summary import build_context_injection as build_context_injection
    from ._summary import format_summary as format_summary
    from ._summary import prune_ledger as prune_ledger
    from ._summary import summarize_attempts as summarize_attempts
    from ._text import calculate_similarity as calculate_similarity
    from ._text import error_signature as error_signature
    from ._text import prune_stack_trace as prune_stack_trace

__all__ = [
    "Attempt",
    "AttemptSummary",
    "BreakerConfig",
    "BreakerDecision",
    "BreakerFacts",
    "DailySpend",
    "ErrorGroup",
    "Ledger",
    "LedgerError",
    "PruneConfig",
    "Trigger",
    "apply_daily_budget",
    "assert_positive_integer",
    "assert_similarity_threshold",
    "breaker_facts",
    "build_context_injection",
    "calculate_similarity",
    "check_circuit_breaker",
    "decode_daily_spend",
    "encode_daily_spend",
    "encode_json",
    "error_signature",
    "format_number",
    "format_summary",
    "newest_attempt_tokens",
    "parse_ledger",
    "prune_ledger",
    "prune_stack_trace",
    "record_daily_spend",
    "summarize_attempts",
    "total_tokens",
    "trailing_failure_run",
    "utc_day",
    "validate_breaker_config",
    "validate_prune_config",
]

# Names load their module on first use: ``loopactors context --check`` loads only the
# modules it runs (no msgspec on a small ledger; docs/benchmarks.md, start-up).
_HOMES = {
    "Attempt": "_model",
    "AttemptSummary": "_model",
    "BreakerConfig": "_model",
    "BreakerDecision": "_model",
    "BreakerFacts": "_facts",
    "DailySpend": "_breaker",
    "ErrorGroup": "_model",
    "Ledger": "_model",
    "LedgerError": "_model",
    "PruneConfig": "_model",
    "Trigger": "_model",
    "apply_daily_budget": "_breaker",
    "assert_positive_integer": "_model",
    "assert_similarity_threshold": "_model",
    "breaker_facts": "_facts",
    "build_context_injection": "_summary",
    "calculate_similarity": "_text",
    "check_circuit_breaker": "_breaker",
    "decode_daily_spend": "_breaker",
    "encode_daily_spend": "_breaker",
    "encode_json": "_js",
    "error_signature": "_text",
    "format_number": "_js",
    "format_summary": "_summary",
    "newest_attempt_tokens": "_breaker",
    "parse_ledger": "_model",
    "prune_ledger": "_summary",
    "prune_stack_trace": "_text",
    "record_daily_spend": "_breaker",
    "summarize_attempts": "_summary",
    "total_tokens": "_breaker",
    "trailing_failure_run": "_breaker",
    "utc_day": "_breaker",
    "validate_breaker_config": "_model",
    "validate_prune_config": "_model",
}


__getattr__, __dir__ = lazy_names(__name__, _HOMES, __all__)
