"""A worker that outlives a SIGKILLed runtime is ended before its round runs again."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loopactors.workers import _cgroup
from tests.hang import HANG

CLI = [sys.executable, "-m", "loopactors"]

# The first run of round 1 ignores SIGTERM and stays; every later run notes whether the
# first one (its pid from the runs file) is still alive, then finishes.
WORKER = """
import os, pathlib, signal, sys, time
runs = pathlib.Path(sys.argv[1])
earlier = runs.read_text().split() if runs.exists() else []
def alive(pid):
    try:
        text = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rindex(")") + 2] != "Z"
first_alive = alive(int(earlier[0].split(":")[1])) if earlier else None
with runs.open("a") as f:
    f.write(f"{os.environ['LOOPACTORS_ROUND']}:{os.getpid()}:{first_alive}\\n")
if not earlier:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(300)
print("done")
"""


def _start_run(tmp_path: Path, worker_text: str) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """A real ``loopactors run`` of two rounds of ``worker_text`` (its runs file is its
    argument); returns the process, the runs file and the state directory."""
    script = tmp_path / "worker.py"
    script.write_text(worker_text)
    runs = tmp_path / "runs"
    state = tmp_path / "state"
    (tmp_path / "loopactors.toml").write_text("kill_grace = 0.5\n")
    worker = "command:" + shlex.join([sys.executable, str(script), str(runs)])
    run = subprocess.Popen(
        [*CLI, "run", "|loop:2,fresh| work", "--worker", worker, "--json", *_config(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return run, runs, state


def _config(tmp_path: Path) -> list[str]:
    return ["--config", str(tmp_path / "loopactors.toml"), "--state", str(tmp_path / "state")]


def _wait_for_text(path: Path, what: str) -> None:
    deadline = time.monotonic() + HANG
    while not path.exists() or not path.read_text():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _resume(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "resume", "--json", *_config(tmp_path)],
        capture_output=True,
        text=True,
        timeout=HANG,
        check=False,
    )


def test_a_worker_left_by_a_killed_runtime_is_ended_before_the_round_runs_again(
    tmp_path: Path,
) -> None:
    # ~10 s: two real CLI processes and a crash; the only way to leave a worker behind.
    run, runs, state = _start_run(tmp_path, WORKER)
    _wait_for_text(runs, "the worker never started")
    listed = list((state / "groups").glob("*.json"))
    assert len(listed) == 1  # the worker's group is on disk while it runs
    first_pid = int(runs.read_text().split(":")[1])
    assert json.loads(listed[0].read_text())["pgid"] == first_pid
    run.kill()
    run.wait()
    # The runtime is gone; its worker, in a session of its own, is not.
    assert Path(f"/proc/{first_pid}").exists()
    resumed = _resume(tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert f"process group {first_pid} of loop" in resumed.stderr
    lines = runs.read_text().split()
    # Round 1 ran again only once the first run was gone (never two at once), then round 2.
    assert [line.split(":")[0] for line in lines] == ["1", "1", "2"]
    assert [line.split(":")[2] for line in lines[1:]] == ["False", "False"]
    assert list((state / "groups").glob("*.json")) == []


# The first run of round 1 starts a grandchild in a session of its own (it has left the
# worker's process group) that ignores SIGTERM; every later run notes whether it is alive.
ESCAPING_WORKER = """
import os, pathlib, signal, sys, time
runs = pathlib.Path(sys.argv[1])
escapee = pathlib.Path(sys.argv[1] + ".escapee")
def alive(pid):
    try:
        text = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rindex(")") + 2] != "Z"
if escapee.exists():
    with runs.open("a") as f:
        f.write(f"{os.environ['LOOPACTORS_ROUND']}:{alive(int(escapee.read_text()))}\\n")
    print("done")
    sys.exit(0)
if os.fork() == 0:
    os.setsid()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    escapee.write_text(str(os.getpid()))
    time.sleep(300)
    os._exit(0)
time.sleep(300)
"""


def test_a_grandchild_that_left_the_group_is_ended_through_its_cgroup_after_a_crash(
    tmp_path: Path,
) -> None:
    # ~7 s: two real CLI processes and a crash.
    if (reason := _cgroup.unavailable_reason()) is not None:
        pytest.skip(f"command workers get no cgroup here: {reason}")
    run, runs, state = _start_run(tmp_path, ESCAPING_WORKER)
    escapee = tmp_path / "runs.escapee"
    _wait_for_text(escapee, "the worker never started its grandchild")
    [listed] = list((state / "groups").glob("*.json"))
    cgroup = Path(json.loads(listed.read_text())["cgroup"])
    escapee_pid = int(escapee.read_text())
    assert escapee_pid in [int(pid) for pid in (cgroup / "cgroup.procs").read_text().split()]
    run.kill()
    run.wait()
    assert Path(f"/proc/{escapee_pid}").exists()  # left behind, in a session of its own
    resumed = _resume(tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "the cgroup of process group" in resumed.stderr
    # Round 1 ran again only once the grandchild was gone, then round 2.
    assert runs.read_text().split() == ["1:False", "2:False"]
    assert not cgroup.exists()
    assert list((state / "groups").glob("*.json")) == []
