"""A cgroup (v2) per command worker, where the system lets this process make one.

A worker's process group holds what it starts, until a process calls ``setsid`` (a daemon,
``setsid cmd &``): that one leaves the group, and a stop that signals the group misses it. A
cgroup holds every descendant, whatever sessions they make, so where one can be made each
command worker runs in its own, and a stop ends all of it (docs/security.md).

Where: a directory ``loopactors-<pid>-<n>`` under this process's own cgroup of the cgroup2
file system (``/proc/self/cgroup``'s ``0::`` line, under the cgroup2 mount). That works as
root, or in a cgroup delegated to the user (systemd's ``Delegate=yes``, a container). The
first worker that cannot have one (no cgroup2, no permission) logs why once; from then on
workers run with their process group alone, as everywhere else.

The child joins its cgroup before it runs the worker's program: it starts as ``/bin/sh``,
writes itself to ``cgroup.procs`` and ``exec``s the program, so nothing it starts can be
outside. Plain file I/O (sysfs), no trio.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import signal
from pathlib import Path

__all__ = [
    "cgroup_empty",
    "join_argv",
    "joined",
    "new_cgroup",
    "remove_cgroup",
    "runs_directly",
    "signal_cgroup",
    "unavailable_reason",
]

log = logging.getLogger("loopactors.workers")

#: The shell line that joins the cgroup named by ``$1`` and runs the rest of the arguments.
#: A failed join still runs the program (the worker checks membership and says so).
_JOIN = '{ echo 0 > "$1/cgroup.procs"; } 2>/dev/null; shift; exec "$@"'
_SH = "/bin/sh"
_counter = itertools.count(1)


class _Where:
    #: None until the first look; then the directory new cgroups go under, or the reason
    #: there is none (a str).
    base: Path | str | None = None


_where = _Where()
#: Cgroups of workers that ended while processes they started were still running (left
#: alone, as their process groups are): removed once empty.
_leftover: set[Path] = set()


def _find_base() -> Path | str:
    if not Path(_SH).exists():
        return f"{_SH} is missing"
    try:
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
        own = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError as exc:
        return f"/proc cannot be read ({exc.strerror})"
    mount = next(
        (line.split()[4] for line in mounts if " - cgroup2 " in line),
        None,
    )
    if mount is None:
        return "no cgroup2 file system is mounted"
    relative = next((line[3:] for line in own if line.startswith("0::")), None)
    if relative is None:
        return "this process is in no cgroup2 cgroup"
    base = Path(mount) / relative.lstrip("/")
    _remove_stale(base)
    probe = base / f"loopactors-{os.getpid()}-probe"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as exc:
        return f"{base} does not let this process make a cgroup ({exc.strerror})"
    if not os.access(base / "cgroup.procs", os.W_OK):
        return f"{base}/cgroup.procs is not writable by this process"
    return base


def _remove_stale(base: Path) -> None:
    """Empty cgroups of workers of processes that are gone (they ended before them)."""
    with contextlib.suppress(OSError):
        for path in base.glob("loopactors-*-*"):
            pid = path.name.split("-")[1]
            if pid.isdigit() and not _alive(int(pid)):
                remove_cgroup(path)


def unavailable_reason() -> str | None:
    """Why command workers get no cgroup here, or None when they do."""
    if _where.base is None:
        found = _find_base()
        if isinstance(found, str):
            _give_up(found)  # logs why, once
        else:
            _where.base = found
    return _where.base if isinstance(_where.base, str) else None


def _give_up(reason: str) -> None:
    if not isinstance(_where.base, str):
        _where.base = reason
        log.warning(
            "command workers run without a cgroup of their own (%s): a process that leaves "
            "its worker's process group (setsid) is not stopped with it",
            reason,
        )


def new_cgroup() -> Path | None:
    """A fresh cgroup for one worker, or None where none can be made."""
    if unavailable_reason() is not None:
        return None
    base = _where.base
    assert isinstance(base, Path)
    for old in list(_leftover):
        if remove_cgroup(old):
            _leftover.discard(old)
    path = base / f"loopactors-{os.getpid()}-{next(_counter)}"
    try:
        path.mkdir()
    except OSError as exc:
        _give_up(f"{path} cannot be made ({exc.strerror})")
        return None
    return path


def runs_directly(executable: str) -> bool:
    """The kernel can exec ``executable`` as it is: a regular executable file that is an ELF
    binary or a ``#!`` script whose interpreter exists. Anything else runs without the
    joining shell, so that it fails exactly as it would there (a shell would run a file with
    no ``#!`` as a script, and say "not found" for what exec calls a format error)."""
    try:
        if not os.access(executable, os.X_OK):
            return False
        with open(executable, "rb") as file:
            head = file.read(256)
    except OSError:
        return False
    if head.startswith(b"\x7fELF"):
        return True
    if not head.startswith(b"#!"):
        return False
    words = head[2:].split(b"\n", 1)[0].split()
    return bool(words) and os.access(os.fsdecode(words[0]), os.X_OK)


def join_argv(cgroup: Path, executable: str, argv: tuple[str, ...]) -> list[str]:
    """The command line that runs ``executable`` (with ``argv[1:]``) inside ``cgroup``."""
    return [_SH, "-c", _JOIN, "sh", str(cgroup), executable, *argv[1:]]


def joined(cgroup: Path, pid: int) -> bool | None:
    """The worker's process is in its cgroup (True; also when it is gone), it runs its
    program outside (False), or that cannot be told yet (None: it is still the shell about
    to join, or between two programs, or exiting)."""
    if pid in _members(cgroup) or not _alive(pid):
        return True
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # gone
    if not cmdline or _JOIN.encode() in cmdline.split(b"\0")[:3]:
        return None
    return pid in _members(cgroup)  # joined meanwhile, else not


def not_joined(cgroup: Path) -> None:
    """Say once that workers cannot be moved into a cgroup here; make no more."""
    _give_up(f"a process cannot be moved into {cgroup}")


def _alive(pid: int) -> bool:
    """Running or sleeping: a process that exited (a zombie not yet reaped) is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _members(cgroup: Path) -> list[int]:
    try:
        text = (cgroup / "cgroup.procs").read_text()
    except OSError:
        return []
    return [int(line) for line in text.split()]


def signal_cgroup(cgroup: Path, signum: int) -> None:
    """Send ``signum`` to every process in ``cgroup`` (SIGKILL: ``cgroup.kill`` where the
    kernel has it, which leaves no process time to fork away)."""
    if signum == signal.SIGKILL:
        try:
            (cgroup / "cgroup.kill").write_text("1")
        except OSError:
            pass
        else:
            return
    for pid in _members(cgroup):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def cgroup_empty(cgroup: Path) -> bool:
    """No process is left in ``cgroup`` (or it is gone)."""
    try:
        events = (cgroup / "cgroup.events").read_text()
    except FileNotFoundError:
        return True
    except OSError:
        return not _members(cgroup)
    return "populated 0" in events


def remove_cgroup(cgroup: Path) -> bool:
    """Remove an empty cgroup; False (kept for later) while a process is still in it."""
    try:
        cgroup.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def leave(cgroup: Path) -> None:
    """The worker is done with ``cgroup``: removed now if empty, else once it is."""
    if not remove_cgroup(cgroup):
        _leftover.add(cgroup)
