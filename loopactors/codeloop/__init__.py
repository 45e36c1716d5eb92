"""Code loops: unattended coding rounds in git worktrees, gated by validation and review.

General layout: ``_model`` (statuses, legal moves, slug), ``_events`` (typed ``RUNS.jsonl``
events and the fold that rebuilds the state), ``_ledger`` (the ``.loop/<slug>/`` files),
``_orchestration`` (``ORCHESTRATION.md``), ``_gates`` (gates, progress, verdicts),
``_handoff`` (the hand-off record), ``_lease`` (one owner at a time, across processes),
``_git`` (real git, confined to ``loop/<slug>/``), ``_round`` (one round), ``_worker`` (a round
as a runtime worker), ``_loop`` (the Python API), ``_node_request`` (the node protocol's ``code``
request), ``_cli`` (``loopactors code``).
"""

from .._util import fix_public_module
from ._events import AnyCodeEvent as AnyCodeEvent
from ._events import CodeRoundFinished as CodeRoundFinished
from ._events import GateTripped as GateTripped
from ._events import Initialized as Initialized
from ._events import RoundInterrupted as RoundInterrupted
from ._events import RoundStarted as RoundStarted
from ._events import SettingsChanged as SettingsChanged
from ._events import StatusChanged as StatusChanged
from ._events import rebuild_state as rebuild_state
from ._gates import ReviewVerdict as ReviewVerdict
from ._gates import parse_deadline as parse_deadline
from ._gates import parse_verdict as parse_verdict
from ._git import main_root as main_root
from ._handoff import HandOff as HandOff
from ._handoff import render_handoff as render_handoff
from ._lease import LeaseRecord as LeaseRecord
from ._ledger import CodeLedger as CodeLedger
from ._loop import CodeLoop as CodeLoop
from ._loop import open_code_loop as open_code_loop
from ._model import Attendance as Attendance
from ._model import CodeLoopState as CodeLoopState
from ._model import CodeStatus as CodeStatus
from ._model import check_slug as check_slug
from ._node_request import CODE_REQUEST as CODE_REQUEST
from ._node_request import Code as Code
from ._node_request import CodeLoops as CodeLoops
from ._node_request import answer_code as answer_code
from ._node_request import code_request as code_request
from ._orchestration import Orchestration as Orchestration
from ._orchestration import parse_orchestration as parse_orchestration
from ._report import CodeLoopStatus as CodeLoopStatus
from ._worker import CODE_ROUND_WORKER as CODE_ROUND_WORKER
from ._worker import code_round as code_round

__all__ = [
    "CODE_REQUEST",
    "CODE_ROUND_WORKER",
    "AnyCodeEvent",
    "Attendance",
    "Code",
    "CodeLedger",
    "CodeLoop",
    "CodeLoopState",
    "CodeLoopStatus",
    "CodeLoops",
    "CodeRoundFinished",
    "CodeStatus",
    "GateTripped",
    "HandOff",
    "Initialized",
    "LeaseRecord",
    "Orchestration",
    "ReviewVerdict",
    "RoundInterrupted",
    "RoundStarted",
    "SettingsChanged",
    "StatusChanged",
    "answer_code",
    "check_slug",
    "code_request",
    "code_round",
    "main_root",
    "open_code_loop",
    "parse_deadline",
    "parse_orchestration",
    "parse_verdict",
    "rebuild_state",
    "render_handoff",
]

fix_public_module(globals(), __all__)
