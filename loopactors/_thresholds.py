"""The run ledger's breaker defaults, written once for the two packages that apply them and
may not import each other: ``loopactors.ledger`` (loop-context's rules, exactly: docs/ledger.md,
"Config checks") and ``loopactors.loops`` (the breaker's trigger table, which ``LoopSpec``,
``[breaker]`` and the CLI read). Plain numbers, no imports: the ``context`` command loads this.
"""

#: Alike trailing failures, by error signature, that trip the ``stagnation`` trigger.
STAGNATION_THRESHOLD = 3
#: Alike trailing failures, by action, that trip the ``frustration`` trigger.
FRUSTRATION_THRESHOLD = 3
#: How alike two errors or actions must be to count as the same.
SIMILARITY_THRESHOLD = 0.85
