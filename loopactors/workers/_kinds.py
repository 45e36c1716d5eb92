"""Worker kinds: what the first word of a worker spec names, and what the runtime may ask of
it. Each kind is one module that declares a :class:`WorkerKind` (its parser and its
capabilities, as data); every kind, built in or not, registers through
:func:`register_worker_kind`, or an entry point in the group ``loopactors.worker_kinds``
(docs/embedding.md, "Adding a worker kind"). Nothing outside this package names a kind.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

import attrs

from .._plugins import Registry
from ..errors import WorkerSpecError
from ..loops import WorkerSpec
from ._base import Worker

__all__ = [
    "WorkerKind",
    "Workspace",
    "check_worker_spec",
    "in_workspace",
    "parse_worker",
    "register_worker_kind",
    "served_by_default",
    "worker_kind",
    "worker_kinds",
]

#: Where a kind's rounds run: ``none`` (nowhere in particular), ``spec`` (in the workspace its
#: spec names, the round's directory aside: a code loop pins it to the round's worktree),
#: ``round`` (in the round's directory, else its spec's workspace, else the process's: a loop
#: started from a shell pins it to the shell's directory, so that a resume works there too).
Workspace = Literal["none", "spec", "round"]


@attrs.frozen(kw_only=True)
class WorkerKind:
    """One worker kind: how its spec becomes a worker, and its capabilities."""

    #: The spec's first word.
    name: str
    #: The worker for the options after ``name:``, given a process group's kill grace;
    #: raises :class:`WorkerSpecError` naming what is wrong and what is accepted.
    build: Callable[[str, float], Worker]
    #: The spec names something that must exist where the rounds run (an executable, an
    #: import path, a CLI's binary): where they run elsewhere, only ``check_form`` is used.
    local_resources: bool = False
    #: The options' form, checked without the local resources (raises like ``build``).
    check_form: Callable[[str], None] | None = None
    workspace: Workspace = "none"
    #: The spec with ``workspace=`` set to a directory, unless it names one (``workspace``
    #: other than ``none``).
    pin_workspace: Callable[[str, str | Path], str] | None = None
    #: A spec that checked once stays usable (nothing it names can disappear), so a node may
    #: remember it instead of checking it for every loop.
    stable_spec: bool = False
    #: A worker process (``loopactors worker``) runs it unless told which kinds to run.
    served_by_default: bool = False
    #: Its rounds need no model and do no work (the scripted kind): where it is used by
    #: default, the command line says so.
    stand_in: bool = False
    #: Its rounds say what they cost (``cost_usd``), so a dollar budget (``max_cost_usd``)
    #: can be kept; ``False`` where a round's cost is always 0 and such a budget is refused.
    reports_cost: bool = True


_KINDS: Registry[WorkerKind] = Registry("worker kind", group="loopactors.worker_kinds")


def register_worker_kind(name: str, kind: WorkerKind | str, *, replace: bool = False) -> None:
    """Make ``name`` a worker kind, served by ``kind`` or by the :class:`WorkerKind` that
    ``"module:attr"`` names (imported the first time a spec names it).

    Raises:
        ValueError: ``name`` is registered already (unless ``replace``).
    """
    if isinstance(kind, WorkerKind) and kind.name != name:
        raise ValueError(f"worker kind {kind.name!r} registered as {name!r}")
    _KINDS.register(name, kind, replace=replace)


def forget_worker_kind(name: str) -> None:
    """Undo :func:`register_worker_kind` (a test's own kind)."""
    _KINDS.unregister(name)


def worker_kinds() -> tuple[str, ...]:
    """Every worker kind a spec may name."""
    return _KINDS.names()


def worker_kind(spec: str | WorkerSpec) -> WorkerKind | None:
    """The kind ``spec`` names, ``None`` for a kind nobody registered."""
    name = spec.kind if isinstance(spec, WorkerSpec) else WorkerSpec.parse(spec).kind
    kind = _KINDS.get(name)
    if kind is not None and kind.name != name:
        raise ValueError(f"worker kind {kind.name!r} registered as {name!r}")
    return kind


def served_by_default() -> tuple[str, ...]:
    """The kinds a worker process runs unless told otherwise."""
    return _kinds_where(lambda kind: kind.served_by_default)


def _kinds_where(test: Callable[[WorkerKind], bool]) -> tuple[str, ...]:
    return tuple(name for name in worker_kinds() if test(_known(WorkerSpec.parse(name))))


def _known(spec: WorkerSpec) -> WorkerKind:
    kind = worker_kind(spec)
    if kind is None:
        raise WorkerSpecError(
            f"unknown worker kind {spec.kind!r} in {spec.text!r}; "
            f"accepted kinds: {', '.join(worker_kinds())}"
        )
    return kind


def parse_worker(spec: str, *, kill_grace: float = 5.0) -> Worker:
    """Build the worker a spec names, checking everything that can be checked now.

    Accepted: ``scripted[:latency=SECONDS,fail_every=K,output=TEXT,tokens=N]``,
    ``python:module.path:function``, ``command:ARGV``,
    ``agent[:model=NAME,base_url=URL,max_iterations=N,workspace=DIR,...]``, the coding-agent
    CLI kinds (docs/agent-clis.md) and any kind registered. ``kill_grace`` is how long a
    command worker's process group gets between SIGTERM and SIGKILL when a round is stopped.

    Raises:
        WorkerSpecError: naming what was wrong and what is accepted (unknown kind, bad or
            repeated option, bad value or template, missing executable, bad import path).
    """
    read = WorkerSpec.parse(spec)
    return _known(read).build(read.options, kill_grace)


def check_worker_spec(spec: str, *, kill_grace: float = 5.0, here: bool = True) -> WorkerKind:
    """Check a spec and return its kind.

    With ``here`` (a round runs in this process) this is :func:`parse_worker`. Without (rounds
    run on remote workers), what names a local resource is checked for form only, since it
    must exist where the rounds run, not here: a command's argv must split, a python target
    must read ``module:function``, a CLI's options must parse.
    """
    read = WorkerSpec.parse(spec)
    kind = _known(read)
    if not here and kind.local_resources and kind.check_form is not None:
        kind.check_form(read.options)
    else:
        kind.build(read.options, kill_grace)
    return kind


def in_workspace(spec: str, directory: str | Path) -> str:
    """``spec`` with ``workspace=`` set to ``directory``, unless the spec names one already
    (the spec wins: it is what the loop was started with).

    Raises:
        WorkerSpecError: ``spec`` is of a kind that has no workspace, or the path holds a comma.
    """
    kind = _known(WorkerSpec.parse(spec))
    if kind.pin_workspace is None:
        with_one = ", ".join(_kinds_where(lambda kind: kind.workspace != "none"))
        raise WorkerSpecError(
            f"a workspace applies to the kinds {with_one}, not to {spec!r} ({kind.name})"
        )
    return kind.pin_workspace(spec, directory)


def workspace_path(directory: str | Path) -> str:
    """``directory`` resolved, as a spec may hold it.

    Raises:
        WorkerSpecError: the path holds a comma, which separates a spec's options.
    """
    path = str(Path(directory).resolve())
    if "," in path:
        raise WorkerSpecError(f"workspace {path!r} contains a comma, which a spec cannot hold")
    return path
