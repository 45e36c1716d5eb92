"""Workers: what runs one round, ``prompt in -> RoundResult out``.

General layout: ``_base`` (the interface and its messages), ``_scripted`` (deterministic rounds
for tests and stress), ``_python`` (an async callable by import path), ``_command`` (a
subprocess per round), ``_agent`` (the agent loop of :mod:`loopactors.agent`). All of them are
private; this module is the public surface. ``_kinds`` holds the registry of worker kinds:
each kind's module declares a ``KIND`` and registers it below, and :func:`parse_worker` turns
a spec string into a worker.
"""

from .._util import fix_public_module
from ..loops import WorkerSpec as WorkerSpec
from ._agent import AgentWorker as AgentWorker
from ._base import ChildLoop as ChildLoop
from ._base import LoopEvents as LoopEvents
from ._base import RoundContext as RoundContext
from ._base import RoundRequest as RoundRequest
from ._base import RoundResult as RoundResult
from ._base import Worker as Worker
from ._base import WorkerStatus as WorkerStatus
from ._budget import DailyBudgets as DailyBudgets
from ._budget import budget_day_start as budget_day_start
from ._budget import clear_daily_spend as clear_daily_spend
from ._budget import configure_daily_budgets as configure_daily_budgets
from ._budget import daily_spend as daily_spend
from ._budget import next_reset as next_reset
from ._budget import record_spend as record_spend
from ._cgroup import cgroup_empty as cgroup_empty
from ._cgroup import remove_cgroup as remove_cgroup
from ._cgroup import signal_cgroup as signal_cgroup
from ._check import check_until as check_until
from ._check import run_check as run_check
from ._cli_adapter import cli_kinds as cli_kinds
from ._cli_worker import CliAgentWorker as CliAgentWorker
from ._cli_worker import cli_worker_kind as cli_worker_kind
from ._command import CommandWorker as CommandWorker
from ._command import GroupStopper as GroupStopper
from ._command import kill_worker_groups as kill_worker_groups
from ._confine import confined_child_worker as confined_child_worker
from ._groups import GroupRecord as GroupRecord
from ._groups import WorkerGroups as WorkerGroups
from ._groups import default_worker_groups_dir as default_worker_groups_dir
from ._groups import end_orphan_groups as end_orphan_groups
from ._groups import forget_group as forget_group
from ._groups import record_group as record_group
from ._kinds import WorkerKind as WorkerKind
from ._kinds import Workspace as Workspace
from ._kinds import check_worker_spec as check_worker_spec
from ._kinds import forget_worker_kind as forget_worker_kind
from ._kinds import in_workspace as in_workspace
from ._kinds import parse_worker as parse_worker
from ._kinds import register_worker_kind as register_worker_kind
from ._kinds import served_by_default as served_by_default
from ._kinds import worker_kind as worker_kind
from ._kinds import worker_kinds as worker_kinds
from ._output import cap_output as cap_output
from ._output import is_cut as is_cut
from ._python import PythonWorker as PythonWorker
from ._python import python_spec as python_spec
from ._scripted import ScriptedWorker as ScriptedWorker

__all__ = [
    "AgentWorker",
    "ChildLoop",
    "CliAgentWorker",
    "CommandWorker",
    "DailyBudgets",
    "GroupRecord",
    "GroupStopper",
    "LoopEvents",
    "PythonWorker",
    "RoundContext",
    "RoundRequest",
    "RoundResult",
    "ScriptedWorker",
    "Worker",
    "WorkerGroups",
    "WorkerKind",
    "WorkerSpec",
    "WorkerStatus",
    "Workspace",
    "budget_day_start",
    "cap_output",
    "cgroup_empty",
    "check_until",
    "check_worker_spec",
    "clear_daily_spend",
    "cli_kinds",
    "cli_worker_kind",
    "configure_daily_budgets",
    "confined_child_worker",
    "daily_spend",
    "default_worker_groups_dir",
    "end_orphan_groups",
    "forget_group",
    "forget_worker_kind",
    "in_workspace",
    "is_cut",
    "kill_worker_groups",
    "next_reset",
    "parse_worker",
    "python_spec",
    "record_group",
    "record_spend",
    "register_worker_kind",
    "remove_cgroup",
    "run_check",
    "served_by_default",
    "signal_cgroup",
    "worker_kind",
    "worker_kinds",
]

# Every kind registers as a third party's would (docs/embedding.md, "Adding a worker kind"); each is
# imported the first time a spec names it.
register_worker_kind("agent", "loopactors.workers._agent:KIND")
register_worker_kind("command", "loopactors.workers._command:KIND")
register_worker_kind("python", "loopactors.workers._python:KIND")
register_worker_kind("scripted", "loopactors.workers._scripted:KIND")
# The coding-agent CLI kinds (docs/agent-clis.md): one adapter each, one shared worker.
register_worker_kind("aider", "loopactors.workers._cli_aider:KIND")
register_worker_kind("claude", "loopactors.workers._cli_claude:KIND")
register_worker_kind("codex", "loopactors.workers._cli_codex:KIND")
register_worker_kind("gemini", "loopactors.workers._cli_gemini:KIND")

fix_public_module(globals(), __all__)
