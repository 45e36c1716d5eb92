"""The process groups of command workers, on disk while they run.

A command worker runs in its own session, so a SIGKILL of the process that started it (a
runtime, or a ``loopactors worker``) leaves it running, and the round would then run again
next to it. So each worker's process group is written to ``<dir>/groups/<pgid>.json`` as soon
as it starts (with the round it runs, the boot and its leader's start time, to recognise it
later) and removed when the round is over. A runtime lists its groups in its state directory
and at start ends every group still listed before it resumes any loop
(:func:`end_orphan_groups`); ``loopactors worker`` processes list theirs in a directory per
process and end those of a dead one (:class:`WorkerGroups`). Linux only (``/proc``);
elsewhere groups are listed but left alone, with a log line. A worker that ran in a cgroup of
its own (``_cgroup.py``) has it listed too: it is ended with the group, which also ends what
left the group (setsid).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
from pathlib import Path

import msgspec
import trio

from ._cgroup import cgroup_empty, remove_cgroup, signal_cgroup

__all__ = [
    "GROUPS_DIR",
    "GroupRecord",
    "WorkerGroups",
    "default_worker_groups_dir",
    "end_orphan_groups",
    "forget_group",
    "record_group",
]

GROUPS_DIR = "groups"
_POLL = 0.05
#: After SIGKILL, how long a group gets to disappear before the start goes on regardless.
_KILL_WAIT = 5.0

log = logging.getLogger("loopactors.workers")


class GroupRecord(msgspec.Struct, frozen=True, kw_only=True):
    loop_id: str
    round: int
    pgid: int
    boot_id: str | None
    #: The group leader's start time in clock ticks since boot (``/proc/PID/stat`` field 22).
    leader_start: int | None
    #: The worker's own cgroup (a directory of the cgroup2 file system), if it had one.
    cgroup: str | None = None


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def _stat(pid: int) -> list[str] | None:
    """``/proc/PID/stat`` from the state field on (the name may hold spaces and parens)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def _start_time(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[19]) if fields is not None else None


def _group_alive(pgid: int) -> bool:
    """A member of the group is alive (a zombie nobody reaps does not count)."""
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    for pid in pids:
        fields = _stat(pid)
        if fields is not None and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


def record_group(
    state_dir: Path, loop_id: str, round_number: int, pgid: int, *, cgroup: str | None = None
) -> None:
    """Write the group's record (atomically: a crash leaves it whole or absent)."""
    record = GroupRecord(
        loop_id=loop_id,
        round=round_number,
        pgid=pgid,
        boot_id=_boot_id(),
        leader_start=_start_time(pgid),
        cgroup=cgroup,
    )
    folder = state_dir / GROUPS_DIR
    try:
        folder.mkdir(exist_ok=True)
        part = folder / f"{pgid}.json.part"
        part.write_bytes(msgspec.json.encode(record))
        part.replace(folder / f"{pgid}.json")
    except OSError as exc:  # a full disk: the round runs, unlisted (said once per round)
        log.warning("cannot record process group %d of loop %s: %s", pgid, loop_id, exc)


def forget_group(state_dir: Path, pgid: int) -> None:
    with contextlib.suppress(OSError):
        (state_dir / GROUPS_DIR / f"{pgid}.json").unlink()


def _ours(record: GroupRecord) -> bool:
    """The group is still the one recorded: same boot, and its leader (if alive) started
    when recorded. Linux reuses no id while a group of that id exists."""
    if record.boot_id is None or record.boot_id != _boot_id() or record.leader_start is None:
        return False
    start = _start_time(record.pgid)
    return start is None or start == record.leader_start


async def end_orphan_groups(
    state_dir: Path, grace: float, *, left_by: str = "a crashed runtime"
) -> list[GroupRecord]:
    """End every group ``left_by`` left listed in ``state_dir``: SIGTERM, up to ``grace``
    seconds, then SIGKILL, and wait until none of its processes is alive. Returns the groups
    ended."""
    folder = state_dir / GROUPS_DIR
    try:
        paths = sorted(folder.glob("*.json"))
    except OSError:
        return []
    ended: list[GroupRecord] = []
    for path in paths:
        try:
            record = msgspec.json.decode(path.read_bytes(), type=GroupRecord)
        except (OSError, msgspec.DecodeError):
            path.unlink(missing_ok=True)
            continue
        cgroup = _own_cgroup(record)
        if cgroup is not None and _ours(record) and not cgroup_empty(cgroup):
            ended.append(record)
            log.warning(
                "the cgroup of process group %d of loop %s round %d outlived %s: ending it "
                "before the round runs again",
                record.pgid,
                record.loop_id,
                record.round,
                left_by,
            )
            signal_cgroup(cgroup, signal.SIGTERM)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(record.pgid, signal.SIGTERM)
        elif _ours(record) and _group_alive(record.pgid):
            ended.append(record)
            log.warning(
                "process group %d of loop %s round %d outlived %s: ending it before the "
                "round runs again",
                record.pgid,
                record.loop_id,
                record.round,
                left_by,
            )
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(record.pgid, signal.SIGTERM)
        elif record.boot_id is None or record.leader_start is None:
            log.warning("process group %d cannot be recognised here: left alone", record.pgid)
    await _wait_gone(ended, grace)
    for record in ended:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(record.pgid, signal.SIGKILL)
        cgroup = _own_cgroup(record)
        if cgroup is not None:
            signal_cgroup(cgroup, signal.SIGKILL)
    await _wait_gone(ended, _KILL_WAIT)
    for path in paths:
        path.unlink(missing_ok=True)
    for record in ended:
        cgroup = _own_cgroup(record)
        if cgroup is not None:
            remove_cgroup(cgroup)
    return ended


def _own_cgroup(record: GroupRecord) -> Path | None:
    """The record's cgroup, if it names one of the workers' (never anything else)."""
    if record.cgroup is None:
        return None
    path = Path(record.cgroup)
    if not path.name.startswith("loopactors-") or not (path / "cgroup.procs").exists():
        return None
    return path


async def _wait_gone(records: list[GroupRecord], limit: float) -> None:
    with trio.move_on_after(limit):
        # Polling: nothing notifies us when another process's group ends.
        while any(_record_alive(r) for r in records):  # noqa: ASYNC110
            await trio.sleep(_POLL)


def _record_alive(record: GroupRecord) -> bool:
    cgroup = _own_cgroup(record)
    return _group_alive(record.pgid) or (cgroup is not None and not cgroup_empty(cgroup))


def _running(owner: _Owner) -> bool:
    """The owner process runs: its pid is the same process (same start) and not a zombie."""
    fields = _stat(owner.pid)
    return fields is not None and fields[0] != "Z" and int(fields[19]) == owner.start


def default_worker_groups_dir() -> Path:
    """Where ``loopactors worker`` processes list their groups unless told otherwise."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(state) / "loopactors" / "worker-groups"


class _Owner(msgspec.Struct, frozen=True, kw_only=True):
    """The worker process a directory of groups belongs to."""

    pid: int
    #: Its start time in clock ticks since boot: a reused pid is not the same process.
    start: int


_OWNER = "owner.json"


class WorkerGroups:
    """The process groups of one ``loopactors worker`` process, listed in
    ``<base>/<host>-<boot>/<pid>/groups/`` while they run (docs/scale-out.md).

    A worker process SIGKILLed mid-round leaves its command's group running, and after the
    idle timeout another worker runs the round again. Every worker process of the machine
    therefore ends, at its start and then every sweep, the groups listed by any worker
    process of this boot that is gone (:meth:`end_dead`). Directories of another host or boot
    are never touched: a shared home directory holds other machines' lists.
    """

    def __init__(self, base: Path) -> None:
        boot = _boot_id()
        pid = os.getpid()
        start = _start_time(pid)
        if boot is None or start is None:
            raise OSError("process groups are recognised through /proc, which is not here")
        self.boot = base / f"{socket.gethostname()}-{boot}"
        self.owner = _Owner(pid=pid, start=start)
        self.own = self.boot / str(pid)

    def open(self) -> None:
        """List this process's groups from now on; OSError if its directory cannot be made.
        Call :meth:`end_dead` first: a directory of a dead process of the same pid is ended
        with the others."""
        part = self.boot / f"{self.owner.pid}.part"
        shutil.rmtree(part, ignore_errors=True)
        (part / GROUPS_DIR).mkdir(parents=True)
        (part / _OWNER).write_bytes(msgspec.json.encode(self.owner))
        part.replace(self.own)  # whole or absent: a reader never sees a list without owner

    def close(self) -> None:
        """This process runs no more rounds: its list goes."""
        shutil.rmtree(self.own, ignore_errors=True)

    def started(self, loop_id: str, round_number: int, pgid: int, cgroup: str | None) -> None:
        record_group(self.own, loop_id, round_number, pgid, cgroup=cgroup)

    def ended(self, pgid: int) -> None:
        forget_group(self.own, pgid)

    async def end_dead(self, grace: float) -> list[GroupRecord]:
        """End the groups listed by the worker processes of this boot that are gone, and
        remove their lists. Returns the groups ended."""
        try:
            folders = sorted(path for path in self.boot.iterdir() if path.name.isdigit())
        except OSError:
            return []
        ended: list[GroupRecord] = []
        for folder in folders:
            try:
                owner = msgspec.json.decode((folder / _OWNER).read_bytes(), type=_Owner)
            except (OSError, msgspec.DecodeError):
                continue  # not a list this code wrote: left alone
            if owner == self.owner or _running(owner):
                continue
            ended += await end_orphan_groups(
                folder, grace, left_by=f"worker process {owner.pid}, which is gone"
            )
            shutil.rmtree(folder, ignore_errors=True)
        return ended
