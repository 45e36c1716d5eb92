"""Workers: what runs one round, ``prompt in -> RoundResult out``.

General layout: ``_base`` (the interface and its messages), ``_scripted`` (deterministic rounds
for tests and stress), ``_python`` (an async callable by import path), ``_command`` (a
subprocess per round), ``_agent`` (the agent loop of :mod:`loopactors.agent`). All of them are
private; this module is the public surface, and :func:`parse_worker` turns a spec string into a
worker.
"""

import shlex
from collections.abc import Callable
from pathlib import Path

from .._util import fix_public_module
from ..errors import WorkerSpecError
from ._agent import AgentWorker as AgentWorker
from ._agent import in_workspace as _agent_in_workspace
from ._base import ChildLoop as ChildLoop
from ._base import LoopEvents as LoopEvents
from ._base import RoundContext as RoundContext
from ._base import RoundRequest as RoundRequest
from ._base import RoundResult as RoundResult
from ._base import Worker as Worker
from ._base import WorkerStatus as WorkerStatus
from ._cgroup import cgroup_empty as cgroup_empty
from ._cgroup import remove_cgroup as remove_cgroup
from ._cgroup import signal_cgroup as signal_cgroup
from ._check import check_until as check_until
from ._check import run_check as run_check
from ._cli_adapter import cli_adapter, parse_cli_options, register_cli_kind
from ._cli_adapter import cli_kinds as cli_kinds
from ._cli_aider import AiderAdapter
from ._cli_claude import ClaudeAdapter
from ._cli_codex import CodexAdapter
from ._cli_gemini import GeminiAdapter
from ._cli_worker import CliAgentWorker as CliAgentWorker
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
from ._output import cap_output as cap_output
from ._output import is_cut as is_cut
from ._python import PythonWorker as PythonWorker
from ._scripted import ScriptedWorker as ScriptedWorker

__all__ = [
    "AgentWorker",
    "ChildLoop",
    "CliAgentWorker",
    "CommandWorker",
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
    "WorkerStatus",
    "cap_output",
    "cgroup_empty",
    "check_until",
    "check_worker_spec",
    "cli_kinds",
    "confined_child_worker",
    "default_worker_groups_dir",
    "end_orphan_groups",
    "forget_group",
    "in_workspace",
    "is_cut",
    "kill_worker_groups",
    "parse_worker",
    "record_group",
    "remove_cgroup",
    "run_check",
    "signal_cgroup",
    "worker_kinds",
]

# kind -> build(text after "kind:", kill_grace)
_KINDS: dict[str, Callable[[str, float], Worker]] = {
    "agent": lambda rest, grace: AgentWorker.from_spec(rest),
    "command": lambda rest, grace: CommandWorker.from_spec(rest, kill_grace=grace),
    "python": lambda rest, grace: PythonWorker.from_spec(rest),
    "scripted": lambda rest, grace: ScriptedWorker.from_spec(rest),
}

# The coding-agent CLI kinds (docs/agent-clis.md): one adapter each, one shared worker.
register_cli_kind(ClaudeAdapter())
register_cli_kind(CodexAdapter())
register_cli_kind(GeminiAdapter())
register_cli_kind(AiderAdapter())


def worker_kinds() -> tuple[str, ...]:
    """Every worker kind a spec may name."""
    return tuple(sorted({*_KINDS, *cli_kinds()}))


def in_workspace(spec: str, directory: str | Path) -> str:
    """``spec`` (an agent or coding-agent CLI worker spec) with ``workspace=`` set to
    ``directory``, unless the spec names one already (the spec wins: it is what the loop was
    started with).

    Raises:
        WorkerSpecError: ``spec`` is of a kind that has no workspace, or the path holds a comma.
    """
    kind, _, rest = spec.partition(":")
    adapter = cli_adapter(kind)
    if adapter is None:
        return _agent_in_workspace(spec, directory)
    if parse_cli_options(adapter, rest).workspace is not None:
        return spec
    path = Path(directory).resolve()
    if "," in str(path):
        raise WorkerSpecError(f"workspace {str(path)!r} contains a comma, which a spec cannot hold")
    head, args, tail = rest.partition("args=")  # args= takes the rest: the workspace goes first
    head = head.rstrip(",")
    options = ",".join(part for part in (head, f"workspace={path}", args + tail) if part)
    return f"{kind}:{options}"


def parse_worker(spec: str, *, kill_grace: float = 5.0) -> Worker:
    """Build the worker a spec names, checking everything that can be checked now.

    Accepted: ``scripted[:latency=SECONDS,fail_every=K,output=TEXT,tokens=N]``,
    ``python:module.path:function``, ``command:ARGV`` and
    ``agent[:model=NAME,base_url=URL,max_iterations=N,workspace=DIR,...]``. ``kill_grace`` is
    how long a command worker's process group gets between SIGTERM and SIGKILL when a round is
    stopped.

    Raises:
        WorkerSpecError: naming what was wrong and what is accepted (unknown kind, bad or
            repeated option, bad value or template, missing executable, bad import path).
    """
    kind, _, rest = spec.partition(":")
    build = _KINDS.get(kind)
    if build is None:
        if kind in cli_kinds():
            return CliAgentWorker.from_spec(kind, rest, kill_grace=kill_grace)
        raise WorkerSpecError(
            f"unknown worker kind {kind!r} in {spec!r}; accepted kinds: {', '.join(worker_kinds())}"
        )
    return build(rest, kill_grace)


def check_worker_spec(spec: str, *, kill_grace: float = 5.0, here: bool = True) -> str:
    """Check a spec and return its kind.

    With ``here`` (a round runs in this process) this is :func:`parse_worker`. Without (rounds
    run on remote workers), what names a local resource is checked for form only, since it
    must exist where the rounds run, not here: a command's argv must split, a python target
    must read ``module:function``.
    """
    kind, _, rest = spec.partition(":")
    adapter = cli_adapter(kind)
    if adapter is not None and not here:  # the binary must exist where the rounds run
        parse_cli_options(adapter, rest)
        return kind
    if here or kind not in ("command", "python"):
        return parse_worker(spec, kill_grace=kill_grace).kind
    if kind == "command":
        try:
            argv = shlex.split(rest)
        except ValueError as exc:
            raise WorkerSpecError(f"command worker argv {rest!r} cannot be split: {exc}") from None
        if not argv:
            raise WorkerSpecError("command worker needs an argv after 'command:'")
        return kind
    module, sep, function = rest.partition(":")
    if not (sep and module and function.isidentifier()):
        raise WorkerSpecError(f"python worker takes python:module.path:function, got {spec!r}")
    return kind


fix_public_module(globals(), __all__)
