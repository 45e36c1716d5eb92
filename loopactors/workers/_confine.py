"""Which worker a child loop started by a model may run. Pure, no trio.

A model's ``loop_start`` names a worker spec of its choosing; run as given, ``command:...`` or
``agent:...,bash=on`` from a model confined to ``bash=off`` would run anything as the node's
user (docs/security.md, agent tools). So a child loop a model starts runs its parent's own spec,
or one the operator listed in ``child_workers``; and even a listed one may not widen what the
parent may do: the same kind (or ``scripted``, which runs nothing), for the agent no wider
``bash``, a workspace inside the parent's, and no ``mcp=`` servers the parent has not.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..errors import WorkerSpecError

__all__ = ["confined_child_worker"]

#: From narrowest to widest: what the agent's ``bash`` option lets a model run.
_BASH_ORDER = ("off", "sandbox", "on")


def _agent_options(spec: str) -> dict[str, str]:
    # Imported here: the agent worker's spec parser, without building a worker.
    from ._agent import _options  # noqa: PLC0415

    return _options(spec.partition(":")[2])


def confined_child_worker(parent: str, requested: str | None, allowed: Sequence[str]) -> str:
    """The spec a child loop started by the model of a ``parent`` round runs.

    ``requested`` is what the model asked for (``None``: the parent's own spec); ``allowed``
    is the operator's ``child_workers``.

    Raises:
        WorkerSpecError: the model asked for a spec that is neither the parent's nor listed,
            or a listed one wider than the parent (the message says what is wider).
    """
    if requested is None or requested == parent:
        return parent
    if requested not in allowed:
        listed = ", ".join(repr(spec) for spec in allowed) if allowed else "none are listed"
        raise WorkerSpecError(
            f"worker {requested!r} is not allowed for a child loop: a model's child loop runs "
            f"its parent's own worker (leave worker out) or one the operator lists in "
            f"child_workers ({listed})"
        )
    kind, child_kind = parent.partition(":")[0], requested.partition(":")[0]
    if child_kind == "scripted":  # runs nothing: narrower than anything
        return requested
    if child_kind != kind:
        raise WorkerSpecError(
            f"worker {requested!r} is not allowed for a child loop: its kind {child_kind} is "
            f"not the parent's kind {kind} (child_workers may narrow a parent, never widen it)"
        )
    if kind == "agent":
        _check_agent(_agent_options(parent), _agent_options(requested), requested)
    return requested


def _check_agent(parent: dict[str, str], child: dict[str, str], requested: str) -> None:
    def refuse(why: str) -> WorkerSpecError:
        return WorkerSpecError(
            f"worker {requested!r} is not allowed for a child loop: {why} (child_workers "
            "may narrow a parent, never widen it)"
        )

    parent_bash, child_bash = parent.get("bash", "on"), child.get("bash", "on")
    if child_bash not in _BASH_ORDER:
        raise refuse(f"bash={child_bash} is not one of {', '.join(_BASH_ORDER)}")
    if _BASH_ORDER.index(child_bash) > _BASH_ORDER.index(parent_bash):
        raise refuse(f"bash={child_bash} is wider than the parent's bash={parent_bash}")
    parent_root = Path(parent.get("workspace", ".")).resolve()
    child_root = Path(child.get("workspace", ".")).resolve()
    if not child_root.is_relative_to(parent_root):
        raise refuse(f"workspace {child_root} is not inside the parent's workspace {parent_root}")
    if "mcp" in child and child.get("mcp") != parent.get("mcp"):
        raise refuse("it starts mcp= servers the parent does not have")
