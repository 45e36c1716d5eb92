"""Proof under load: ``loopactors stress`` and its kill trials.

General layout: ``_report`` (pure: the invariants checked over what a store holds, and the
report), ``_run`` (one stress run on an embedded runtime), ``_kill`` (kill trials: child
processes SIGKILLed at random moments, then resumed), ``_cli`` (the subcommand).
"""

from .._util import fix_public_module
from ._kill import run_kill_trials as run_kill_trials
from ._report import InvariantCheck as InvariantCheck
from ._report import KillTrial as KillTrial
from ._report import StoredLoop as StoredLoop
from ._report import StressReport as StressReport
from ._report import check_loops as check_loops
from ._report import render_report as render_report
from ._run import StressOptions as StressOptions
from ._run import read_sqlite as read_sqlite
from ._run import run_stress as run_stress

__all__ = [
    "InvariantCheck",
    "KillTrial",
    "StoredLoop",
    "StressOptions",
    "StressReport",
    "check_loops",
    "read_sqlite",
    "render_report",
    "run_kill_trials",
    "run_stress",
]

fix_public_module(globals(), __all__)
