"""What the core tools never touch inside the workspace, and what the sandbox hides. No trio.

Inside a workspace sit files that govern the run rather than belong to the task
(docs/security.md, agent tools 6): the node's state directory (its token, its store: a loop
written there runs at the next start), the configuration (``loopactors.toml``; a
``pyproject.toml``'s ``[tool.loopactors]``), and git's own ``config``, ``hooks`` and ``info``
(a ``core.fsmonitor`` or a hook runs a command at the operator's next ``git status``). So:

- a state directory (the node's own, any directory named ``.loopactors``, any holding
  ``runtime.lock``, ``loopactors.db`` or ``node.token``) is neither read, written nor listed;
- ``loopactors.toml`` is neither read, written nor listed, wherever it sits;
- a ``pyproject.toml`` may be written only as long as its ``[tool.loopactors]`` stays as it was;
- nothing inside a ``.git`` directory is written, and its ``config``, ``hooks`` and ``info``
  are not read either (``git`` through ``bash`` is the way to use a repository).

For ``bash=sandbox``, :func:`sandbox_guards` finds the same things near the top of the
workspace so that the sandbox mounts a state directory away and the rest read-only, but for
the ``pyproject.toml`` files: a command may change them (``uv add``), and
:func:`put_back_tables` puts back each one whose ``[tool.loopactors]`` it changed.
"""

from __future__ import annotations

import contextlib
import os
import tomllib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs

from ._tools import ToolError
from ._workspace import put_back_regular, read_regular

__all__ = ["Protected", "SandboxGuards", "put_back_tables", "sandbox_guards"]

CONFIG_FILE = "loopactors.toml"
PYPROJECT = "pyproject.toml"
STATE_DIR_NAME = ".loopactors"
#: Files only a state directory holds.
STATE_MARKERS = ("runtime.lock", "loopactors.db", "node.token")
_GIT_GUARDED = frozenset({"config", "config.worktree", "hooks", "info"})
#: How deep :func:`sandbox_guards` looks, and how many directories at most.
SANDBOX_SCAN_DEPTH = 3
SANDBOX_SCAN_DIRS = 5_000


def is_state_dir(directory: Path) -> bool:
    if directory.name == STATE_DIR_NAME:
        return True
    return any(os.path.lexists(directory / marker) for marker in STATE_MARKERS)


def _tool_table(data: bytes | None) -> Any:
    if data is None:
        return None
    return tomllib.loads(data.decode("utf-8")).get("tool", {}).get("loopactors")


@attrs.frozen
class Protected:
    """The rules above for one workspace; ``hidden`` are what the runtime names as its own
    (its state directory, its token file), refused wherever they are."""

    hidden: tuple[Path, ...] = ()

    def reason(
        self, root: Path, target: Path, *, write: bool, seen: dict[Path, bool] | None = None
    ) -> str | None:
        """Why ``target`` (resolved, inside ``root``) is refused, or ``None``. ``seen`` keeps
        which directories are state directories across the calls of one listing."""
        known = {} if seen is None else seen

        def state_dir(directory: Path) -> bool:
            if directory not in known:
                known[directory] = is_state_dir(directory)
            return known[directory]

        for hidden in self.hidden:
            if target == hidden or target.is_relative_to(hidden):
                return "it is the node's own state (its state directory or token file)"
        parts = target.relative_to(root).parts
        if ".git" in parts:
            rest = parts[parts.index(".git") + 1 :]
            if write:
                return "the tools do not write inside .git (use git through bash)"
            if _GIT_GUARDED.intersection(rest):
                return "git's config, hooks and info are not the tools' to read"
        if parts and parts[-1] == CONFIG_FILE:
            return f"{CONFIG_FILE} configures the node that runs this agent"
        directory = root
        if state_dir(directory):
            return "the workspace is a state directory"
        for part in parts[:-1] if not target.is_dir() else parts:
            directory = directory / part
            if state_dir(directory):
                return "it is in a loopactors state directory"
        return None

    def check(self, root: Path, target: Path, name: str, *, write: bool) -> None:
        """Raises :class:`ToolError` when ``target`` is refused."""
        why = self.reason(root, target, write=write)
        if why is not None:
            raise ToolError(f"path {name!r} is off limits to the tools: {why}")

    def check_write(
        self, root: Path, target: Path, name: str, old: bytes | None, new: bytes
    ) -> None:
        """:meth:`check` for a write, plus the ``pyproject.toml`` rule (``old``: its content
        now, ``None`` when it does not exist)."""
        self.check(root, target, name, write=True)
        if target.name != PYPROJECT:
            return
        try:
            before = _tool_table(old)
        except (tomllib.TOMLDecodeError, UnicodeDecodeError):
            before = None  # broken already: only its [tool.loopactors] after counts
        try:
            after = _tool_table(new)
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ToolError(
                f"{name!r} would not be valid TOML ({exc}); a pyproject.toml may configure the "
                "node, so the tools write it only as valid TOML"
            ) from None
        if after != before:
            raise ToolError(
                f"{name!r}: the tools may change a pyproject.toml but not its "
                "[tool.loopactors] table, which configures the node that runs this agent"
            )

    def listing(self, root: Path) -> Callable[[Path], bool]:
        """Whether a file a walk of ``root`` found may be listed (one walk: what it learns
        about directories is kept for the rest of it)."""
        seen: dict[Path, bool] = {}
        return lambda target: self.reason(root, target, write=False, seen=seen) is None


@attrs.frozen
class SandboxGuards:
    """What the ``bash=sandbox`` sandbox mounts over inside the workspace."""

    #: State directories: an empty private directory in their place.
    hide: list[Path]
    #: The node's token file: unreadable in its place.
    blank: list[Path]
    #: Configuration files and git's ``config``, ``hooks``, ``info``: read-only.
    read_only: list[Path]
    #: A git ``hooks`` or ``info`` directory that does not exist: an empty read-only one, so
    #: that no hook or attributes file can be planted there.
    sealed: list[Path]
    #: ``pyproject.toml`` files, writable, with their bytes before the command: their
    #: ``[tool.loopactors]`` is checked after it (:func:`put_back_tables`).
    tables: dict[Path, bytes] = attrs.field(factory=dict)


def sandbox_guards(root: Path, hidden: Sequence[Path] = ()) -> SandboxGuards:
    """The :class:`SandboxGuards` of ``root``: ``hidden`` (the node's own paths) and what is
    found down to :data:`SANDBOX_SCAN_DEPTH` levels, at most :data:`SANDBOX_SCAN_DIRS`
    directories."""
    hide = [path for path in hidden if path.is_relative_to(root) and path.is_dir()]
    blank = [path for path in hidden if path.is_relative_to(root) and path.is_file()]
    read_only: list[Path] = []
    sealed: list[Path] = []
    tables: dict[Path, bytes] = {}
    for directory, names in _scan(root):
        if directory != root and is_state_dir(directory):
            hide.append(directory)
            continue
        if CONFIG_FILE in names and (directory / CONFIG_FILE).is_file():
            read_only.append(directory / CONFIG_FILE)
        if PYPROJECT in names and (directory / PYPROJECT).is_file():
            with contextlib.suppress(OSError, ToolError):
                tables[directory / PYPROJECT] = read_regular(root, directory / PYPROJECT)[0]
        git = directory / ".git"
        if ".git" in names and git.is_dir() and not git.is_symlink():
            read_only += [git / n for n in sorted(_GIT_GUARDED) if os.path.lexists(git / n)]
            sealed += [git / n for n in ("hooks", "info") if not os.path.lexists(git / n)]
    hidden_set = set(hide)
    read_only = [
        p for p in read_only if not any(p.is_relative_to(h) for h in hidden_set) and p not in blank
    ]
    sealed = [p for p in sealed if not any(p.is_relative_to(h) for h in hidden_set)]
    tables = {
        p: data for p, data in tables.items() if not any(p.is_relative_to(h) for h in hidden_set)
    }
    return SandboxGuards(sorted(hidden_set), blank, read_only, sealed, tables)


def put_back_tables(root: Path, before: dict[Path, bytes]) -> list[str]:
    """After a sandboxed command: put back, as it was, each ``pyproject.toml`` of ``before``
    whose ``[tool.loopactors]`` the command changed (or that it made unreadable, removed or
    replaced with something else). Returns what was put back (relative to ``root``), and
    for what could not be, why."""
    found: list[str] = []
    for path, old in before.items():
        name = str(path.relative_to(root))
        try:
            new: bytes | None = read_regular(root, path)[0]
        except FileNotFoundError:
            new = b""  # removed: as if empty (no table)
        except (OSError, ToolError):
            new = None  # something else in its place (a link, a FIFO): put back
        if new is not None and _same_table(old, new):
            continue
        try:
            put_back_regular(root, path, old)
        except (OSError, ToolError) as exc:
            found.append(f"{name} (not put back: {exc})")
        else:
            found.append(name)
    return found


def _same_table(old: bytes, new: bytes) -> bool:
    try:
        after = _tool_table(new)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
        return False
    try:
        return bool(_tool_table(old) == after)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
        return after is None  # broken before: only a table made since counts


def _scan(root: Path) -> Iterator[tuple[Path, set[str]]]:
    queue = [(root, 0)]
    seen = 0
    while queue and seen < SANDBOX_SCAN_DIRS:
        directory, depth = queue.pop(0)
        seen += 1
        try:
            with os.scandir(directory) as it:
                entries = list(it)
        except OSError:
            continue
        names = {entry.name for entry in entries}
        yield directory, names
        if depth >= SANDBOX_SCAN_DEPTH or (directory != root and is_state_dir(directory)):
            continue
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.name != ".git" and entry.is_dir(follow_symlinks=False):
                queue.append((Path(entry.path), depth + 1))
