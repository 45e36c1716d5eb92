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
import re
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from ._tools import ToolError

__all__ = [
    "READ_BYTE_LIMIT",
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


def compile_glob(pattern: str) -> re.Pattern[str]:
    """A glob (``*``, ``?``, ``[...]`` within a name; ``**`` for any directories) as a regex
    matched against ``/``-separated relative paths.

    Raises:
        ToolError: the pattern is empty, absolute, or has a ``..`` part.
    """
    if not pattern or "\0" in pattern:
        raise ToolError(f"glob pattern {pattern!r} must be a non-empty relative pattern")
    parts = pattern.replace(os.sep, "/").split("/")
    if pattern.startswith(("/", "~")) or ".." in parts:
        raise ToolError(
            f"glob pattern {pattern!r} must stay inside the workspace "
            "(relative, without '..' parts), e.g. '**/*.py'"
        )
    out: list[str] = []
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if part == "**":
            out.append(".*" if last else "(?:[^/]+/)*")
            continue
        out.append(_translate_name(part) + ("" if last else "/"))
    return re.compile("".join(out), re.DOTALL)


def _translate_name(part: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(part):
        char = part[i]
        i += 1
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            start = i + 1 if part[i : i + 1] == "!" else i
            end = part.find("]", start + 1 if part[start : start + 1] == "]" else start)
            if end < 0:
                out.append(re.escape(char))
                continue
            body = part[i:end].replace("\\", "\\\\").replace("[", "\\[")
            i = end + 1
            if body.startswith("!"):
                body = "^" + body[1:]
            elif body.startswith("^"):
                body = "\\" + body
            out.append(f"(?!/)[{body}]")
        else:
            out.append(re.escape(char))
    return "".join(out)


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
