"""The process groups of a runtime's command workers, on disk while they run.

A command worker runs in its own session, so a SIGKILL of the runtime leaves it running. A
runtime that resumes would then start the same round next to it. So each worker's process
group is written to ``<state_dir>/groups/<pgid>.json`` as soon as it starts (with the round it
runs, the boot and its leader's start time, to recognise it later) and removed when the round
is over; at start a runtime ends every group still listed before it resumes any loop
(:func:`end_orphan_groups`). Linux only (``/proc``); elsewhere groups are listed but left
alone, with a log line. A worker that ran in a cgroup of its own (``workers/_cgroup.py``) has
it listed too: it is ended with the group, which also ends what left the group (setsid).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from pathlib import Path

import msgspec
import trio

from ..workers import cgroup_empty, remove_cgroup, signal_cgroup

__all__ = ["GROUPS_DIR", "GroupRecord", "end_orphan_groups", "forget_group", "record_group"]

GROUPS_DIR = "groups"
_POLL = 0.05
#: After SIGKILL, how long a group gets to disappear before the start goes on regardless.
_KILL_WAIT = 5.0

log = logging.getLogger("loopactors.runtime")


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


async def end_orphan_groups(state_dir: Path, grace: float) -> list[GroupRecord]:
    """End every group a crashed runtime left listed: SIGTERM, up to ``grace`` seconds, then
    SIGKILL, and wait until none of its processes is alive. Returns the groups ended."""
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
                "the cgroup of process group %d of loop %s round %d outlived a crashed "
                "runtime: ending it before the round runs again",
                record.pgid,
                record.loop_id,
                record.round,
            )
            signal_cgroup(cgroup, signal.SIGTERM)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(record.pgid, signal.SIGTERM)
        elif _ours(record) and _group_alive(record.pgid):
            ended.append(record)
            log.warning(
                "process group %d of loop %s round %d outlived a crashed runtime: ending it "
                "before the round runs again",
                record.pgid,
                record.loop_id,
                record.round,
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
