"""Which configuration files an agent could have written, and which the operator trusts.

An agent (or coding-agent CLI) may write files in its workspace; a ``loopactors.toml`` (or a
``pyproject.toml`` with ``[tool.loopactors]``) it leaves there would configure the operator's
next run: its worker, its node's address and token file (docs/security.md, "Agent tools",
item 7; docs/configuration.md, "Files").
So every agent round lists its workspace, with the time it was first seen, in
``$XDG_STATE_HOME/loopactors/agent-workspaces``, outside any workspace; and a configuration
file found by search inside a listed workspace is used only when it has not changed (its
ctime, which no one can set back) since an agent first ran there, or when the operator named
that very version of it (``--config``, which lists it in ``trusted-configs``). No trio: the
command line reads its configuration before anything else.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

__all__ = ["record_agent_workspace", "trust_config", "untrusted_config"]

_WORKSPACES = "agent-workspaces"
_TRUSTED = "trusted-configs"


def state_home() -> Path:
    """``$XDG_STATE_HOME/loopactors`` (default ``~/.local/state/loopactors``)."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(state) / "loopactors"


def _lines(name: str) -> list[list[str]]:
    try:
        text = (state_home() / name).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    return [line.split("\t", 2) for line in text.splitlines() if line.count("\t") >= 1]


def _append(name: str, line: str) -> None:
    home = state_home()
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(home / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, line.encode("utf-8", errors="surrogateescape"))  # one write: whole lines
    finally:
        os.close(fd)


def agent_workspaces() -> dict[Path, int]:
    """Each listed workspace and when an agent first ran there (nanoseconds since the epoch)."""
    found: dict[Path, int] = {}
    for fields in _lines(_WORKSPACES):
        if len(fields) == 2 and fields[0].isdigit():
            found.setdefault(Path(fields[1]), int(fields[0]))
    return found


def record_agent_workspace(workspace: Path) -> None:
    """List ``workspace`` as one an agent writes in (once; the first time is kept).

    Raises:
        OSError: the list cannot be written.
    """
    path = workspace.resolve()
    if "\n" in str(path) or path in agent_workspaces():
        return
    _append(_WORKSPACES, f"{time.time_ns()}\t{path}\n")


def _version(path: Path) -> str:
    info = path.stat()
    return f"{info.st_dev}:{info.st_ino}:{info.st_ctime_ns}"


def trust_config(path: Path) -> None:
    """Note that the operator named this version of ``path`` (best effort: a list that cannot
    be written only means the file must be named again)."""
    try:
        resolved = path.resolve()
        if "\n" not in str(resolved):
            _append(_TRUSTED, f"{_version(resolved)}\t{resolved}\n")
    except OSError:
        pass


def untrusted_config(path: Path) -> str | None:
    """Why the configuration file ``path``, found by search, is not used; ``None``: it is."""
    resolved = path.resolve()
    inside = [
        (workspace, first)
        for workspace, first in agent_workspaces().items()
        if resolved.parent.is_relative_to(workspace)
    ]
    if not inside:
        return None
    try:
        changed = resolved.stat().st_ctime_ns
        version = _version(resolved)
    except OSError:
        return None  # gone since it was found: reading it says so
    if all(changed < first for _, first in inside):
        return None  # as it was before any agent ran there
    if any(fields == [version, str(resolved)] for fields in _lines(_TRUSTED)):
        return None
    workspace = max(inside, key=lambda item: len(item[0].parts))[0]
    return (
        f"configuration file {resolved} was found by search in {workspace}, the workspace of "
        "an agent loop, and has changed since an agent first ran there: an agent may have "
        "written it, so it is not used without your say. Read it, then name it with "
        f"--config {resolved} (that version is then trusted when found again), or run "
        "from a directory outside agents' workspaces"
    )
