"""What confines the core tools to their workspace: paths, globs, walks and file I/O. No trio.

Every path-like argument of every core tool goes through here (see docs/security.md):

- a path is resolved (symlinks followed) and refused when the result is outside the workspace;
  the resolved path is then opened beneath the workspace's directory descriptor with no
  symlink followed on the way (``openat2``, or a walk of ``O_NOFOLLOW`` opens), so a directory
  swapped for a symlink after the check is refused, never followed, and the tools work on
  the descriptor they opened;
- a glob pattern must be relative and free of ``..``; it is matched (by RE2) against the names
  a walk of the workspace yields, and the walk never leaves the workspace: it lists each
  directory through a descriptor opened the same way, and follows a symlink only when what
  it points to is inside, so nothing is listed through a symlink that points out;
- only regular files are read or written: a FIFO, socket or device is refused (opening one
  could block for ever), and a read stops at a byte limit.

The functions here block on the file system: the tools call them in a worker thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
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
    "open_beneath",
    "openat2_available",
    "path_mode",
    "put_back_regular",
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
    """Each file under ``base`` as (its path with no symlink in it, its name relative to
    ``base``), for ``read_regular``.

    ``root`` is the resolved workspace and ``base`` a resolved directory inside it. Every
    directory is opened beneath ``root`` without following a symlink and listed through its
    descriptor; a symlink met in a listing is followed only when its target is inside
    ``root`` (each directory is walked once, so a symlink loop ends); ``.git`` directories are
    skipped; what cannot be opened or listed (gone, changed meanwhile) is skipped.
    """
    with _opened(root) as root_fd:
        seen: set[tuple[int, int]] = set()
        start = base.relative_to(root).parts
        # Depth first, names in order, without recursion.
        stack = [(iter(_listing(root_fd, start, seen)), start, "")]
        while stack:
            entries, parts, prefix = stack[-1]
            entry = next(entries, None)
            if entry is None:
                stack.pop()
                continue
            if should_stop():
                return
            name, mode = entry
            real = (*parts, name)
            if stat.S_ISLNK(mode):
                followed = _follow(root, root_fd, real)
                if followed is None:
                    continue  # points out, dangles or loops: never listed, never followed
                real, mode = followed
            if stat.S_ISDIR(mode):
                if name not in _SKIPPED_DIRS:
                    stack.append((iter(_listing(root_fd, real, seen)), real, prefix + name + "/"))
            elif stat.S_ISREG(mode):
                yield root.joinpath(*real), prefix + name


def _listing(
    root_fd: int, parts: tuple[str, ...], seen: set[tuple[int, int]]
) -> list[tuple[str, int]]:
    """The entries of a directory (name, type bits of the entry itself), once per directory."""
    try:
        fd = open_beneath(root_fd, parts, os.O_RDONLY | os.O_DIRECTORY)
    except (OSError, ToolError):  # gone, changed into a symlink, or unreadable
        return []
    try:
        info = os.fstat(fd)
        if (info.st_dev, info.st_ino) in seen:
            return []
        seen.add((info.st_dev, info.st_ino))
        found: list[tuple[str, int]] = []
        with os.scandir(fd) as it:
            for entry in it:
                try:
                    found.append((entry.name, entry.stat(follow_symlinks=False).st_mode))
                except OSError:
                    continue  # gone meanwhile
        return sorted(found)
    except OSError:
        return []
    finally:
        os.close(fd)


def _follow(root: Path, root_fd: int, parts: tuple[str, ...]) -> tuple[tuple[str, ...], int] | None:
    """Where a symlink of the workspace points (as parts of a path with no symlink in it) and
    the type bits of what is there, or None when it points out, dangles or loops."""
    try:
        target = Path(os.path.realpath(root.joinpath(*parts)))
    except (OSError, RuntimeError):
        return None
    if target != root and not target.is_relative_to(root):
        return None
    real = target.relative_to(root).parts
    try:
        fd = open_beneath(root_fd, real, os.O_PATH)
    except (OSError, ToolError):
        return None
    try:
        return real, os.fstat(fd).st_mode
    finally:
        os.close(fd)


def read_regular(root: Path, path: Path, limit: int = READ_BYTE_LIMIT) -> tuple[bytes, int]:
    """Up to ``limit`` bytes of a regular file of the workspace ``root``, and its size.

    ``path`` is inside ``root`` (``inside_workspace``); it is opened beneath ``root`` with no
    symlink followed on the way, and what was opened is read.

    Raises:
        NotRegularFile: a FIFO, socket, device or directory (opened without blocking).
        ToolError: a symlink was met on the way (the path changed after it was checked).
        OSError: it cannot be opened or read.
    """
    with _opened(root) as root_fd:
        fd = open_beneath(root_fd, _parts(root, path), os.O_RDONLY | os.O_NONBLOCK)
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


def write_regular(root: Path, path: Path, data: bytes) -> None:
    """Create or overwrite a regular file of the workspace ``root`` (parents made as needed).

    Each directory on the way is opened (or made, then opened) relative to the one before
    without following a symlink, and the file is created in the last one the same way.

    Raises:
        NotRegularFile: the path exists and is not a regular file.
        ToolError: a symlink was met on the way (the path changed after it was checked).
        OSError: it cannot be created or written.
    """
    parts = _parts(root, path)
    if not parts:
        raise NotRegularFile(f"{path.name!r} is the workspace; give a file name")
    with _opened(root) as root_fd:
        directory = os.dup(root_fd)
    try:
        for name in parts[:-1]:
            try:
                inner = _open_component(directory, name, _DIR_FLAGS)
            except FileNotFoundError:
                with contextlib.suppress(FileExistsError):  # made meanwhile: open it
                    os.mkdir(name, 0o777, dir_fd=directory)
                inner = _open_component(directory, name, _DIR_FLAGS)
            os.close(directory)
            directory = inner
        with contextlib.suppress(FileNotFoundError):  # a FIFO would refuse a writer: say what
            existing = os.stat(parts[-1], dir_fd=directory, follow_symlinks=False).st_mode
            if not stat.S_ISLNK(existing):
                _check_regular(path, existing)
        flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK
        fd = _open_component(directory, parts[-1], flags, 0o666)
    finally:
        os.close(directory)
    try:
        _check_regular(path, os.fstat(fd).st_mode)
        os.ftruncate(fd, 0)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def put_back_regular(root: Path, path: Path, data: bytes) -> None:
    """Make ``path`` of the workspace ``root`` a regular file holding ``data`` again, whatever
    took its place (a symlink, a FIFO: removed first, never followed). Its directory is
    opened beneath ``root`` with no symlink followed, as :func:`write_regular` does.

    Raises:
        ToolError: a symlink was met on the way to its directory.
        OSError: it cannot be removed or written.
    """
    *on_the_way, name = _parts(root, path)
    with _opened(root) as root_fd:
        directory = open_beneath(root_fd, tuple(on_the_way), _DIR_FLAGS)
    try:
        with contextlib.suppress(FileNotFoundError):
            if not stat.S_ISREG(os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode):
                os.unlink(name, dir_fd=directory)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK
        fd = _open_component(directory, name, flags, 0o666)
    finally:
        os.close(directory)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def path_mode(root: Path, path: Path) -> int | None:
    """The type bits of what ``path`` (inside ``root``, no symlink on the way) is, or None."""
    with _opened(root) as root_fd:
        try:
            fd = open_beneath(root_fd, _parts(root, path), os.O_PATH)
        except (OSError, ToolError):
            return None
    try:
        return os.fstat(fd).st_mode
    finally:
        os.close(fd)


# -- opening beneath the workspace -------------------------------------------------------------

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY
_SYS_OPENAT2 = 437  # the same number on every Linux architecture
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
#: Whether ``openat2`` is used: None to probe the kernel once (tests set False to walk).
_OPENAT2: bool | None = None


class _OpenHow(ctypes.Structure):
    _fields_ = [
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    ]


@functools.cache
def _syscall() -> Callable[..., int]:
    function = ctypes.CDLL(None, use_errno=True).syscall
    function.restype = ctypes.c_long
    return function


def _raw_openat2(dir_fd: int, name: str, flags: int, mode: int, resolve: int) -> int:
    how = _OpenHow(flags, mode if flags & os.O_CREAT else 0, resolve)
    fd = _syscall()(
        ctypes.c_long(_SYS_OPENAT2),
        ctypes.c_int(dir_fd),
        ctypes.c_char_p(os.fsencode(name)),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd < 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number), name)
    return int(fd)


def openat2_available() -> bool:
    """Whether this kernel has ``openat2`` with the resolve flags (Linux 5.6 and later)."""
    return _probe_openat2() if _OPENAT2 is None else _OPENAT2


@functools.cache
def _probe_openat2() -> bool:
    try:
        fd = _raw_openat2(
            -100,  # AT_FDCWD
            "/",
            os.O_PATH | os.O_CLOEXEC,
            0,
            _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS,
        )
    except (OSError, AttributeError):  # ENOSYS, a seccomp filter, not Linux
        return False
    os.close(fd)
    return True


def open_beneath(root_fd: int, parts: tuple[str, ...], flags: int, mode: int = 0) -> int:
    """A descriptor of ``parts`` (names, no ``.`` or ``..``) under the directory ``root_fd``,
    opened without following any symlink on the way or at the end.

    ``openat2`` with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`` where the kernel has it, else
    a walk that opens each directory with ``O_NOFOLLOW | O_DIRECTORY`` relative to the one
    before (docs/security.md).

    Raises:
        ToolError: a symlink was met (the path changed after it was checked).
        OSError: anything else (missing, not a directory, ...).
    """
    if any(name in ("", ".", "..") or "/" in name for name in parts):
        raise ToolError(f"path {'/'.join(parts)!r} is not a plain relative path")
    if not parts:
        return os.open(".", flags | os.O_CLOEXEC, mode, dir_fd=root_fd)
    if openat2_available():
        resolve = _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS
        for _ in range(8):
            try:
                return _raw_openat2(
                    root_fd, "/".join(parts), flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, resolve
                )
            except OSError as exc:
                if exc.errno == errno.EAGAIN:
                    continue  # a rename raced the lookup: the kernel asks to try again
                if exc.errno in (errno.ELOOP, errno.EXDEV):
                    raise _changed(parts) from None
                raise
        raise OSError(errno.EAGAIN, "the path kept changing while it was opened")
    directory = os.dup(root_fd)
    try:
        for name in parts[:-1]:
            inner = _open_component(directory, name, _DIR_FLAGS)
            os.close(directory)
            directory = inner
        return _open_component(directory, parts[-1], flags, mode)
    finally:
        os.close(directory)


def _open_component(directory: int, name: str, flags: int, mode: int = 0) -> int:
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=directory)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (
            exc.errno == errno.ENOTDIR and _is_symlink(directory, name)
        ):
            raise _changed((name,)) from None
        raise


def _is_symlink(directory: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _changed(parts: tuple[str, ...]) -> ToolError:
    return ToolError(
        f"a symlink was met at {'/'.join(parts)!r} while opening it (the path changed after "
        "it was checked); the tools follow no symlink once a path is checked, try again"
    )


@contextlib.contextmanager
def _opened(root: Path) -> Iterator[int]:
    fd = os.open(root, _DIR_FLAGS | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def _parts(root: Path, path: Path) -> tuple[str, ...]:
    try:
        return path.relative_to(root).parts
    except ValueError:
        raise ToolError(f"path {str(path)!r} is outside the workspace {root}") from None


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
