"""``WorkerGroups``: a ``loopactors worker`` process's list of its command rounds' process
groups, and the ending of those a dead worker process of the machine left
(docs/scale-out.md, "A killed worker's command ends with it")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import trio

from loopactors.workers import WorkerGroups, record_group
from tests.hang import HANG
from tests.processes import alive, start_time

pytestmark = pytest.mark.skipif(
    not Path("/proc/sys/kernel/random/boot_id").exists(), reason="needs Linux's /proc"
)


class Processes:
    """Stubborn process groups (they ignore SIGTERM, as a stubborn command would), each
    killed and reaped at the end of the test."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self) -> subprocess.Popen[bytes]:
        code = (
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print(flush=True); time.sleep(60)"
        )
        process = subprocess.Popen(
            [sys.executable, "-c", code], start_new_session=True, stdout=subprocess.PIPE
        )
        self.started.append(process)
        assert process.stdout is not None
        process.stdout.readline()  # its SIGTERM handler is set
        return process

    def gone(self) -> tuple[int, int]:
        """The pid and start time of a process that ran and is gone (reaped)."""
        process = self.start()
        start = start_time(process.pid)
        process.kill()
        process.wait()
        return process.pid, start

    def close(self) -> None:
        for process in self.started:
            process.kill()
            process.wait()
            assert process.stdout is not None
            process.stdout.close()


@pytest.fixture
def processes() -> Iterator[Processes]:
    started = Processes()
    try:
        yield started
    finally:
        started.close()


def list_of(boot: Path, owner_pid: int, owner_start: int) -> Path:
    """A worker process's list, as ``WorkerGroups.open`` writes it."""
    folder = boot / str(owner_pid)
    (folder / "groups").mkdir(parents=True)
    (folder / "owner.json").write_bytes(
        msgspec.json.encode({"pid": owner_pid, "start": owner_start})
    )
    return folder


async def test_a_dead_processs_groups_end_and_a_live_ones_stay(
    tmp_path: Path, processes: Processes
) -> None:
    listing = WorkerGroups(tmp_path)
    # A worker process that is gone left a stubborn group listed.
    gone_pid, gone_start = processes.gone()
    orphan = processes.start()
    dead_list = list_of(listing.boot, gone_pid, gone_start)
    record_group(dead_list, "l1", 3, orphan.pid)
    # A live worker process's group, and a list of another machine (a shared home).
    live_owner = processes.start()
    live_group = processes.start()
    live_list = list_of(listing.boot, live_owner.pid, start_time(live_owner.pid))
    record_group(live_list, "l2", 1, live_group.pid)
    elsewhere = list_of(tmp_path / "other-host-boot", gone_pid, gone_start)
    record_group(elsewhere, "l3", 1, live_group.pid)
    unowned = listing.boot / "12345"
    (unowned / "groups").mkdir(parents=True)
    with trio.fail_after(HANG):
        ended = await listing.end_dead(grace=0.2)
    assert [(r.loop_id, r.round, r.pgid) for r in ended] == [("l1", 3, orphan.pid)]
    with trio.fail_after(HANG):
        while orphan.poll() is None:  # TERM ignored: killed after the grace
            await trio.sleep(0.01)
    assert orphan.returncode == -signal.SIGKILL
    assert not dead_list.exists()
    assert alive(live_group.pid)
    assert live_list.exists()
    assert elsewhere.exists()
    assert unowned.exists()


async def test_a_process_lists_its_groups_and_removes_the_list_at_close(tmp_path: Path) -> None:
    listing = WorkerGroups(tmp_path)
    await listing.end_dead(grace=0.2)
    listing.open()
    assert listing.own.name == str(os.getpid())
    listing.started("l1", 2, 4242, None)
    assert (listing.own / "groups" / "4242.json").exists()
    listing.ended(4242)
    assert not (listing.own / "groups" / "4242.json").exists()
    # Its own list is never taken for a dead one's.
    assert await listing.end_dead(grace=0.2) == []
    assert listing.own.exists()
    listing.close()
    assert not listing.own.exists()
