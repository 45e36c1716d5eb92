"""A worker that outlives a SIGKILLed runtime is ended before its round runs again."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

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


def test_a_worker_left_by_a_killed_runtime_is_ended_before_the_round_runs_again(
    tmp_path: Path,
) -> None:
    # ~10 s: two real CLI processes and a crash; the only way to leave a worker behind.
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    runs = tmp_path / "runs"
    state = tmp_path / "state"
    (tmp_path / "loopactors.toml").write_text("kill_grace = 0.5\n")
    worker = "command:" + shlex.join([sys.executable, str(script), str(runs)])
    config = ["--config", str(tmp_path / "loopactors.toml"), "--state", str(state)]
    run = subprocess.Popen(
        [*CLI, "run", "|loop:2,fresh| work", "--worker", worker, "--json", *config],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not runs.exists() or not runs.read_text():
        assert time.monotonic() < deadline, "the worker never started"
        time.sleep(0.05)
    listed = list((state / "groups").glob("*.json"))
    assert len(listed) == 1  # the worker's group is on disk while it runs
    first_pid = int(runs.read_text().split(":")[1])
    assert json.loads(listed[0].read_text())["pgid"] == first_pid
    run.kill()
    run.wait()
    # The runtime is gone; its worker, in a session of its own, is not.
    assert Path(f"/proc/{first_pid}").exists()
    resumed = subprocess.run(
        [*CLI, "resume", "--json", *config],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert f"process group {first_pid} of loop" in resumed.stderr
    lines = runs.read_text().split()
    # Round 1 ran again only once the first run was gone (never two at once), then round 2.
    assert [line.split(":")[0] for line in lines] == ["1", "1", "2"]
    assert [line.split(":")[2] for line in lines[1:]] == ["False", "False"]
    assert list((state / "groups").glob("*.json")) == []
