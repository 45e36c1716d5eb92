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

For ``bash=sandbox``, :func:`sandbox_guards` finds the same things at any depth of the
workspace so that the sandbox mounts a state directory away and the rest read-only, but for
the ``pyproject.toml`` files: a command may change them (``uv add``), and
:func:`put_back_tables` puts back each one whose ``[tool.loopactors]`` it changed.

Reading every directory before every command costs a ``scandir`` each (about a second per
command on a tree of 50,000: docs/benchmarks.md). The scan of a workspace is kept
(:class:`_Scan`): before a command each directory is ``lstat``-ed, and only one whose inode,
ctime or mtime changed is read again (adding, removing or renaming an entry changes its
directory's mtime and ctime, and no process can set a ctime back). A directory changed
within the last :data:`_RACY_NS` may change again within the same timestamp: it is read
again each time until it is older.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
import tomllib
from collections.abc import Callable, Sequence
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
#: The names :func:`sandbox_guards` looks for in a directory.
_WATCHED = frozenset({CONFIG_FILE, PYPROJECT, ".git", *STATE_MARKERS})
#: A directory changed this recently (ns) is not trusted to the kept scan (see above): a
#: timestamp is as coarse as the kernel's clock tick, far below this.
_RACY_NS = 2_000_000_000
#: Workspaces whose scan is kept (the least recently used are dropped first).
_KEPT_SCANS = 16


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
    found in the whole workspace (its kept scan brought up to date: :func:`scan`)."""
    hide = [path for path in hidden if path.is_relative_to(root) and path.is_dir()]
    blank = [path for path in hidden if path.is_relative_to(root) and path.is_file()]
    read_only: list[Path] = []
    sealed: list[Path] = []
    tables: dict[Path, bytes] = {}
    for found, names in scan(root):
        directory = Path(found)
        if directory != root and (
            directory.name == STATE_DIR_NAME or not names.isdisjoint(STATE_MARKERS)
        ):
            hide.append(directory)
            continue
        if CONFIG_FILE in names and (directory / CONFIG_FILE).is_file():
            read_only.append(directory / CONFIG_FILE)
        if PYPROJECT in names and (directory / PYPROJECT).is_file():
            with contextlib.suppress(OSError, ToolError):
                tables[directory / PYPROJECT] = read_regular(root, directory / PYPROJECT)[0]
        git = directory / ".git"
        if ".git" in names and git.is_dir() and not git.is_symlink():
            for git_dir in (git, *_submodule_git_dirs(git)):
                read_only += [
                    git_dir / n for n in sorted(_GIT_GUARDED) if os.path.lexists(git_dir / n)
                ]
                sealed += [
                    git_dir / n for n in ("hooks", "info") if not os.path.lexists(git_dir / n)
                ]
    hidden_set = set(hide)
    read_only = [
        p for p in read_only if not any(p.is_relative_to(h) for h in hidden_set) and p not in blank
    ]
    sealed = [p for p in sealed if not any(p.is_relative_to(h) for h in hidden_set)]
    tables = {
        p: data for p, data in tables.items() if not any(p.is_relative_to(h) for h in hidden_set)
    }
    return SandboxGuards(sorted(hidden_set), blank, read_only, sealed, tables)


def _submodule_git_dirs(git: Path) -> list[Path]:
    """The git directories of the submodules of the repository whose git directory is
    ``git``: under ``modules/``, each at its submodule's path (so possibly several levels
    down), nested submodules under their parent's ``modules/`` in turn. A git directory is
    one holding ``HEAD``; no symlink is followed."""
    found: list[Path] = []
    pending = [git / "modules"]
    while pending:
        directory = pending.pop()
        try:
            entries = [e for e in os.scandir(directory) if e.is_dir(follow_symlinks=False)]
        except OSError:
            continue  # none, or not readable: nothing of it can be guarded
        for entry in entries:
            path = Path(entry.path)
            if os.path.isfile(path / "HEAD"):
                found.append(path)
                pending.append(path / "modules")
            else:
                pending.append(path)  # a directory of a submodule's path, e.g. libs/
    return found


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


class _Scan:
    """The kept scan of one workspace, by directory: its inode, ctime and mtime (ns) when
    it was read (a ctime of -1: changed too recently to trust), the names of
    :data:`_WATCHED` in it, its subdirectories' paths (not ``.git``, no symlink followed,
    last first: the walk pops them), and whether it is a state directory (hidden whole,
    not looked into)."""

    __slots__ = ("dirs", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.dirs: dict[str, _Dir] = {}


_Dir = tuple[int, int, int, frozenset[str], tuple[str, ...], bool]
_scans: dict[str, _Scan] = {}
_scans_lock = threading.Lock()


def scan(root: Path) -> list[tuple[str, frozenset[str]]]:
    """The directories of ``root`` (but inside a state directory or ``.git``) that hold
    any of :data:`_WATCHED` or are named like a state directory, with those names, parents
    first; each directory is read again only if it changed since the last scan of ``root``
    (see the module's note)."""
    top = str(root)
    with _scans_lock:
        kept = _scans.pop(top, None) or _Scan()
        _scans[top] = kept  # the most recently used last
        while len(_scans) > _KEPT_SCANS:
            del _scans[next(iter(_scans))]
    with kept.lock:
        return _refresh(top, kept)


def _refresh(top: str, kept: _Scan) -> list[tuple[str, frozenset[str]]]:
    before: dict[str, _Dir] = kept.dirs
    after: dict[str, _Dir] = {}
    recent = time.time_ns() - _RACY_NS
    found: list[tuple[str, frozenset[str]]] = []
    stack = [top]
    lstat, get = os.lstat, before.get
    while stack:
        path = stack.pop()
        try:
            st = lstat(path)
        except OSError:
            continue
        entry = get(path)
        if (
            entry is None
            or entry[1] != st.st_ctime_ns
            or entry[2] != st.st_mtime_ns
            or entry[0] != st.st_ino
        ):
            if not stat.S_ISDIR(st.st_mode):
                continue
            read = _read_dir(path, path != top)
            if read is None:
                continue
            trusted = max(st.st_ctime_ns, st.st_mtime_ns) < recent
            entry = (st.st_ino, st.st_ctime_ns if trusted else -1, st.st_mtime_ns, *read)
        after[path] = entry
        if entry[3] or entry[5]:
            found.append((path, entry[3]))
        if not entry[5]:
            stack.extend(entry[4])
    kept.dirs = after
    return found


_NONE: frozenset[str] = frozenset()


def _read_dir(path: str, inner: bool) -> tuple[frozenset[str], tuple[str, ...], bool] | None:
    """The names of :data:`_WATCHED` in ``path``, its subdirectories' paths (last first)
    and whether it is a state directory (``inner``: not the workspace itself)."""
    try:
        with os.scandir(path) as it:
            entries = list(it)
    except OSError:
        return None
    watched = _WATCHED.intersection(entry.name for entry in entries) or _NONE
    state = inner and (
        os.path.basename(path) == STATE_DIR_NAME or not watched.isdisjoint(STATE_MARKERS)
    )
    subdirs = sorted(
        (
            entry.path
            for entry in entries
            if entry.name != ".git" and entry.is_dir(follow_symlinks=False)
        ),
        reverse=True,
    )
    return frozenset(watched), tuple(subdirs), state
