"""What confines the core tools to their workspace: paths, globs, walks and file I/O. No trio.

Every path-like argument of every core tool goes through here (see docs/security.md):

- a path is resolved (symlinks followed) and refused when the result is outside the workspace;
- a glob pattern must be relative and free of ``..``; it is matched against the names a walk of
  the workspace yields, and the walk never leaves the workspace: a symlink is followed only when
  what it points to is inside, so nothing is listed through a symlink that points out;
- only regular files are read or written: a FIFO, socket or device is refused (opening one
  could block for ever), files are opened without following a symlink swapped in after the
  check, and a read stops at a byte limit.

The functions here block on the file system: the tools call them in a worker thread.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

import re2

from ._tools import ToolError

__all__ = [
    "GLOB_MAX_CHARS",
    "GLOB_MAX_WILDCARDS",
    "READ_BYTE_LIMIT",
    "GlobMatcher",
    "NotRegularFile",
    "compile_glob",
    "read_regular",
    "walk_files",
    "write_regular",
]

#: Bytes a tool reads of one file at most (a larger file is read up to here, and says so).
READ_BYTE_LIMIT = 8 * 1024 * 1024
_SKIPPED_DIRS = frozenset({".git"})


class NotRegularFile(ToolError):
    """The path is a FIFO, socket, device or directory: the tools read and write files only."""


#: A glob pattern is at most this long ...
GLOB_MAX_CHARS = 1024
#: ... and holds at most this many wildcards (``*``, ``**``, ``?``, ``[...]``).
GLOB_MAX_WILDCARDS = 64

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False


class GlobMatcher(Protocol):
    """A compiled glob: ``fullmatch`` says whether a ``/``-separated relative path matches."""

    def fullmatch(self, text: str) -> object | None: ...


def compile_glob(pattern: str) -> GlobMatcher:
    """A glob (``*``, ``?``, ``[...]`` within a name; ``**`` for any directories) compiled by
    RE2 for ``/``-separated relative paths: matching is linear in the path whatever the
    pattern, so no pattern can stall the node (docs/security.md).

    Raises:
        ToolError: the pattern is empty, absolute, has a ``..`` part, is longer than
            ``GLOB_MAX_CHARS`` or has more than ``GLOB_MAX_WILDCARDS`` wildcards.
    """
    if not pattern or "\0" in pattern:
        raise ToolError(f"glob pattern {pattern!r} must be a non-empty relative pattern")
    if len(pattern) > GLOB_MAX_CHARS:
        raise ToolError(
            f"glob pattern is {len(pattern)} characters, longer than {GLOB_MAX_CHARS} "
            "characters; give a shorter one"
        )
    parts = pattern.replace(os.sep, "/").split("/")
    if pattern.startswith(("/", "~")) or ".." in parts:
        raise ToolError(
            f"glob pattern {pattern!r} must stay inside the workspace "
            "(relative, without '..' parts), e.g. '**/*.py'"
        )
    out: list[str] = []
    wildcards = 0
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if part == "**":
            wildcards += 1
            out.append(".*" if last else "(?:[^/]+/)*")
            continue
        translated, count = _translate_name(part)
        wildcards += count
        out.append(translated + ("" if last else "/"))
    if wildcards > GLOB_MAX_WILDCARDS:
        raise ToolError(
            f"glob pattern {pattern[:60]!r}... has {wildcards} wildcards, more than "
            f"{GLOB_MAX_WILDCARDS} wildcards; give a simpler one"
        )
    try:
        matcher: GlobMatcher = re2.compile("(?s:" + "".join(out) + ")", _RE2_OPTIONS)
    except re2.error as exc:  # too large for RE2's memory bound
        raise ToolError(f"glob pattern {pattern[:60]!r} is too complex: {exc}") from None
    return matcher


def _translate_name(part: str) -> tuple[str, int]:
    """One name of a glob as RE2 syntax, and how many wildcards it holds."""
    out: list[str] = []
    wildcards = 0
    i = 0
    while i < len(part):
        char = part[i]
        i += 1
        if char == "*":
            wildcards += 1
            while part[i : i + 1] == "*":  # '**' inside a name is '*'
                i += 1
            out.append("[^/]*")
        elif char == "?":
            wildcards += 1
            out.append("[^/]")
        elif char == "[":
            start = i + 1 if part[i : i + 1] == "!" else i
            end = part.find("]", start + 1 if part[start : start + 1] == "]" else start)
            if end < 0:
                out.append(_escape(char))
                continue
            wildcards += 1
            negated = part[i : i + 1] == "!"
            out.append(_char_class(part[start:end], negated=negated))
            i = end + 1
        else:
            out.append(_escape(char))
    return "".join(out), wildcards


def _char_class(body: str, *, negated: bool) -> str:
    """``[body]`` (or ``[!body]``) as an RE2 class that never matches ``/``, as a name never
    holds one: ranges are cut around it, and a negated class adds it."""
    ranges: list[tuple[int, int]] = []
    i = 0
    while i < len(body):
        if i + 2 < len(body) and body[i + 1] == "-":
            low, high = ord(body[i]), ord(body[i + 2])
            i += 3
        else:
            low = high = ord(body[i])
            i += 1
        if low > high:
            continue  # an empty range, as fnmatch takes it
        if not negated and low <= _SLASH <= high:
            ranges.extend(r for r in ((low, _SLASH - 1), (_SLASH + 1, high)) if r[0] <= r[1])
        else:
            ranges.append((low, high))
    if negated:
        ranges.append((_SLASH, _SLASH))
    if not ranges:
        return "[^\\x00-\\x{10FFFF}]"  # matches nothing
    items = "".join(
        _class_char(low) if low == high else f"{_class_char(low)}-{_class_char(high)}"
        for low, high in ranges
    )
    return f"[{'^' if negated else ''}{items}]"


_SLASH = ord("/")


def _class_char(code: int) -> str:
    return f"\\x{{{code:x}}}"


def _escape(char: str) -> str:
    return char if char.isalnum() or char == "_" else f"\\x{{{ord(char):x}}}"


def walk_files(
    root: Path, base: Path, *, should_stop: Callable[[], bool] = lambda: False
) -> Iterator[tuple[Path, str]]:
    """Each file under ``base`` as (its resolved path, its name relative to ``base``).

    ``root`` is the resolved workspace and ``base`` a resolved directory inside it. A symlink
    is followed only when its target is inside ``root`` (each directory is walked once, so a
    symlink loop ends); ``.git`` directories are skipped; what cannot be listed is skipped.
    """
    seen: set[Path] = {base}
    # Depth first, names in order, without recursion.
    stack: list[tuple[Iterator[os.DirEntry[str]], str]] = [(_entries(base), "")]
    while stack:
        entry = next(stack[-1][0], None)
        if entry is None:
            stack.pop()
            continue
        if should_stop():
            return
        name = stack[-1][1] + entry.name
        path = Path(entry.path)
        try:
            if entry.is_symlink():
                path = path.resolve()
                if not path.is_relative_to(root):
                    continue  # points out: never listed, never followed
                mode = path.stat().st_mode
            else:
                mode = entry.stat(follow_symlinks=False).st_mode
        except (OSError, RuntimeError):  # dangling, or a symlink loop
            continue
        if stat.S_ISDIR(mode):
            if entry.name not in _SKIPPED_DIRS and path not in seen:
                seen.add(path)
                stack.append((_entries(path), name + "/"))
        elif stat.S_ISREG(mode):
            yield path, name


def _entries(directory: Path) -> Iterator[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as it:
            return iter(sorted(it, key=lambda entry: entry.name))
    except OSError:  # gone or unreadable: nothing to list
        return iter(())


def read_regular(path: Path, limit: int = READ_BYTE_LIMIT) -> tuple[bytes, int]:
    """Up to ``limit`` bytes of a regular file, and its size.

    Raises:
        NotRegularFile: a FIFO, socket, device or directory (opened without blocking).
        OSError: it cannot be opened or read.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        _check_regular(path, info.st_mode)
        chunks: list[bytes] = []
        left = limit
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks), info.st_size
    finally:
        os.close(fd)


def write_regular(path: Path, data: bytes) -> None:
    """Create or overwrite a regular file (parents made as needed).

    Raises:
        NotRegularFile: the path exists and is not a regular file.
        OSError: it cannot be created or written.
    """
    try:
        _check_regular(path, path.lstat().st_mode)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o666)
    try:
        _check_regular(path, os.fstat(fd).st_mode)
        os.ftruncate(fd, 0)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _check_regular(path: Path, mode: int) -> None:
    if not stat.S_ISREG(mode):
        kind = (
            "a directory"
            if stat.S_ISDIR(mode)
            else "a FIFO"
            if stat.S_ISFIFO(mode)
            else "a socket"
            if stat.S_ISSOCK(mode)
            else "a device"
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "not a regular file"
        )
        raise NotRegularFile(
            f"{path.name!r} is {kind}; the tools read and write regular files only"
        )
