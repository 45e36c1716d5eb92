"""How the ``bash`` tool runs a command: on the host, or in a bubblewrap sandbox. No trio.

``bash=on`` (the default) runs ``/bin/sh -c`` in the workspace as the node's own user, with the
node's environment minus the model's API key: it can reach whatever that user can (files,
network, processes). ``bash=sandbox`` runs it under bubblewrap (``bwrap``): a new mount,
process, network, IPC and UTS namespace in which only the system directories (``/usr``,
``/bin``, ``/lib*``, ``/sbin``, ``/etc``, ``/opt``) are visible, read-only, plus a private
``/tmp``, a minimal ``/dev``, its own ``/proc`` and the workspace, read-write, except what
``_protected`` guards: state directories in it are empty private directories, the node's
token file unreadable, the configuration and git's config, hooks and info read-only (a
``pyproject.toml`` stays writable, its ``[tool.loopactors]`` put back after the command if
changed); no network; a short fixed environment. ``bash=off`` offers no ``bash`` tool.
docs/agent.md and docs/security.md state the same.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

import attrs

from ..errors import AgentError
from ._protected import sandbox_guards

__all__ = ["BASH_MODES", "BashMode", "BashPlan", "bash_env", "find_bwrap", "plan_bash"]

BashMode = Literal["on", "sandbox", "off"]
BASH_MODES: tuple[BashMode, ...] = ("on", "sandbox", "off")

#: Never handed to a command: the model's key is the node's, not the agent's.
_SECRET_VARIABLES = frozenset({"LOOPACTORS_LLM_API_KEY"})
#: Directories a sandboxed command sees, read-only (those that exist on this machine).
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
_SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def find_bwrap() -> str:
    """The bubblewrap executable, or a clear error saying how to get it."""
    found = shutil.which("bwrap")
    if found is None:
        raise AgentError(
            "bash=sandbox needs bubblewrap ('bwrap' on PATH; Debian/Ubuntu: apt-get install "
            "bubblewrap); use bash=on to run commands unconfined or bash=off for no bash tool"
        )
    return found


@attrs.frozen
class BashPlan:
    """How one command runs: its argv, and in the sandbox the workspace's ``pyproject.toml``
    files as they were before it (``_protected.put_back_tables`` checks them after it)."""

    argv: list[str]
    root: Path
    tables: dict[Path, bytes] = attrs.field(factory=dict)


def plan_bash(
    mode: BashMode,
    command: str,
    workspace: Path,
    bwrap: str | None = None,
    *,
    hidden: Sequence[Path] = (),
) -> BashPlan:
    """How ``command`` runs in ``workspace`` under ``mode``; in the sandbox the state
    directories inside the workspace (``hidden`` and those ``_protected`` finds) are empty
    private directories and the configuration and git's config, hooks and info are
    read-only."""
    if mode != "sandbox":
        return BashPlan(["/bin/sh", "-c", command], workspace)
    argv = [bwrap or find_bwrap(), "--unshare-all", "--die-with-parent", "--new-session"]
    for directory in _SYSTEM_DIRS:
        if os.path.islink(directory):  # merged /usr: /bin -> usr/bin
            argv += ["--symlink", os.readlink(directory), directory]
        elif os.path.isdir(directory):
            argv += ["--ro-bind", directory, directory]
    root = str(workspace.resolve())
    argv += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    argv += ["--bind", root, root]
    guards = sandbox_guards(Path(root), hidden)
    for path in guards.hide:  # after the workspace's bind: mounted over it
        argv += ["--tmpfs", str(path)]
    for path in guards.blank:
        argv += ["--ro-bind", "/dev/null", str(path)]
    for path in guards.read_only:
        argv += ["--ro-bind", str(path), str(path)]
    for path in guards.sealed:
        argv += ["--tmpfs", str(path), "--remount-ro", str(path)]
    argv += ["--chdir", root, "/bin/sh", "-c", command]
    return BashPlan(argv, Path(root), guards.tables)


def bash_env(mode: BashMode, workspace: Path, extra: Mapping[str, str]) -> dict[str, str]:
    """The environment of a command: the node's (on) or a short fixed one (sandbox), plus
    ``extra`` (the round's variables), never the model's API key."""
    if mode == "sandbox":
        base = {
            "PATH": _SANDBOX_PATH,
            "HOME": str(workspace.resolve()),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "TERM": "dumb",
        }
    else:
        base = dict(os.environ)
    env = {**base, **extra}
    for name in _SECRET_VARIABLES:
        env.pop(name, None)
    return env
