"""`loopactors node` as a real process: serve, be driven by the CLI, survive SIGTERM."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.hang import HANG

LOOPACTORS = [sys.executable, "-m", "loopactors"]
#: Seconds a node gets to print an awaited line before the test fails.
WAIT_LIMIT = 120.0


class NodeProcess:
    def __init__(self, state: Path, *extra: str, env: dict[str, str] | None = None) -> None:
        self.state = state
        self.proc = subprocess.Popen(
            [*LOOPACTORS, "node", "--listen", "127.0.0.1:0", "--state", str(state), *extra],
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.log: list[str] = []
        self.url = self._wait_for(r"serving (ws://\S+)").group(1)

    def _wait_for(self, pattern: str) -> re.Match[str]:
        for line in self.log:  # already read (e.g. while waiting for an earlier line)
            match = re.search(pattern, line)
            if match:
                return match
        assert self.proc.stderr is not None
        # A line that never comes must fail the test, not hang it: the node is killed, which
        # ends the read below.
        watchdog = threading.Timer(WAIT_LIMIT, self.proc.kill)
        watchdog.start()
        try:
            for line in self.proc.stderr:
                self.log.append(line)
                match = re.search(pattern, line)
                if match:
                    return match
        finally:
            watchdog.cancel()
        raise AssertionError(f"node exited before {pattern!r}: {''.join(self.log)}")

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(  # noqa: PLW1510 - the exit code is asserted
            [*LOOPACTORS, *args, "--connect", self.url, "--state", str(self.state)],
            capture_output=True,
            text=True,
            timeout=HANG,
        )

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.stderr is not None
        self.log.extend(self.proc.stderr)
        self.proc.stderr.close()
        return self.proc.wait(timeout=HANG)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[NodeProcess]:
    process = NodeProcess(tmp_path, "--worker", "scripted:latency=0.05")
    yield process
    if process.proc.poll() is None:
        process.proc.kill()
        process.proc.wait()


def test_cli_commands_act_on_a_remote_node(node: NodeProcess) -> None:
    run = node.cli("run", "|loop:2,fresh| remote job", "--json")
    assert run.returncode == 0, run.stderr
    events = [json.loads(line) for line in run.stdout.splitlines()]
    assert events[-1]["type"] == "loop_finished"
    assert events[-1]["phase"] == "complete"
    loop_id = events[-1]["loop_id"]
    status = node.cli("status", loop_id, "--json")
    assert json.loads(status.stdout)["phase"] == "complete"
    history = node.cli("history", loop_id, "--json")
    assert [r["round"] for r in json.loads(history.stdout)["rounds"]] == [1, 2]
    missing = node.cli("status", "no-such-loop")
    assert missing.returncode == 1
    assert "no loop 'no-such-loop'" in missing.stderr
    assert node.terminate() == 0
    log = "".join(node.log)
    assert f"loop {loop_id} started: 2 rounds" in log
    assert f"loop {loop_id} complete after 2/2 rounds" in log


def test_stop_over_the_wire_and_a_wrong_token(node: NodeProcess, tmp_path: Path) -> None:
    started = subprocess.Popen(
        [
            *LOOPACTORS,
            "run",
            "|loop:5| long",
            "--worker",
            "scripted:latency=30",
            "--json",
            "--connect",
            node.url,
            "--state",
            str(node.state),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert started.stdout is not None
    first = json.loads(started.stdout.readline())
    assert first["type"] == "loop_started"
    stop = node.cli("stop", first["loop_id"])
    assert stop.returncode == 0, stop.stderr
    assert "cancelled" in stop.stdout
    assert started.wait(timeout=HANG) == 3  # the follower sees the loop end cancelled
    wrong = tmp_path / "wrong.token"
    wrong.write_text("not-the-token\n")
    refused = node.cli("status", "--token-file", str(wrong))
    assert refused.returncode == 1
    assert "unauthorized" in refused.stderr
    assert "not-the-token" not in refused.stderr


def test_sigterm_mid_run_then_restart_resumes_the_loops(tmp_path: Path) -> None:
    state = tmp_path / "state"
    # Rounds long enough that the loops are mid-run at the SIGTERM however loaded the machine.
    first = NodeProcess(state, "--worker", "scripted:latency=5")
    loop_ids = _start_loops(first.url, state, 3)  # 4 rounds of 5 s each
    assert first.terminate() == 0  # graceful: clients told, loops left resumable
    assert "shutting down" in "".join(first.log)
    second = NodeProcess(state, "--worker", "scripted:latency=0.01")
    try:
        for loop_id in loop_ids:
            second._wait_for(rf"loop {loop_id} complete after 4/4 rounds")
        log = "".join(second.log)
        assert all(f"loop {loop_id} recovered" in log for loop_id in loop_ids)
        history = second.cli("history", loop_ids[0], "--json")
        rounds = [r["round"] for r in json.loads(history.stdout)["rounds"]]
        assert rounds == [1, 2, 3, 4]  # each round recorded once across the restart
    finally:
        assert second.terminate() == 0


def _start_loops(url: str, state: Path, count: int) -> list[str]:
    script = f"""
import trio
from loopactors.client import connect
async def main():
    token = open({str(state / "node.token")!r}).read().strip()
    async with connect({url!r}, token=token) as node:
        for i in range(1, {count} + 1):
            state = await node.start("|loop:4,fresh| survive " + str(i))
            print(state.loop_id, flush=True)
        await trio.sleep(0.5)
trio.run(main)
"""
    out = subprocess.run(  # noqa: PLW1510 - the exit code is asserted
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=HANG,
        env={**os.environ},
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_a_command_on_a_directory_a_node_holds_is_told_its_url(node: NodeProcess) -> None:
    assert (node.state / "node.url").read_text().strip() == node.url
    held = subprocess.run(
        [*LOOPACTORS, "run", "|loop:1| here", "--state", str(node.state)],
        capture_output=True, text=True, timeout=HANG, check=False,
    )  # fmt: skip
    assert held.returncode == 1
    assert f"a node serves it: act on it there with --connect {node.url}" in held.stderr
    assert node.terminate() == 0
    assert not (node.state / "node.url").exists()


def test_pause_and_resume_a_loop_on_a_node_by_prefix(node: NodeProcess, tmp_path: Path) -> None:
    run = subprocess.Popen(
        [*LOOPACTORS, "run", "|loop:2| long", "--worker", "scripted:latency=30", "--json",
         "--connect", node.url, "--state", str(node.state)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert run.stdout is not None
    loop_id = json.loads(run.stdout.readline())["loop_id"]
    paused = node.cli("pause", loop_id[:6])
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout.startswith(f"{loop_id}: pauses once round 1 (running now) is recorded")
    state = json.loads(node.cli("status", loop_id, "--json").stdout)
    assert state["pause_requested"] is True
    resumed = node.cli("resume", loop_id[:6])  # withdraws the pause asked for
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout == f"{loop_id}: awaiting_worker, round 1 (resumed)\n"
    assert json.loads(node.cli("status", loop_id, "--json").stdout)["pause_requested"] is False
    assert node.cli("stop", loop_id).returncode == 0
    _, err = run.communicate(timeout=HANG)
    assert run.returncode == 3, err
    offline = subprocess.run(
        [*LOOPACTORS, "pause", loop_id, "--state", str(tmp_path / "other")],
        capture_output=True, text=True, timeout=HANG, check=False,
    )  # fmt: skip
    assert offline.returncode == 1
    assert "pause acts on a running loop: give the node's --connect URL" in offline.stderr


def test_run_that_loses_its_node_says_the_loop_stays_there(node: NodeProcess) -> None:
    run = subprocess.Popen(
        [*LOOPACTORS, "run", "|loop:3| long", "--worker", "scripted:latency=30", "--json",
         "--connect", node.url, "--state", str(node.state)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert run.stdout is not None
    loop_id = json.loads(run.stdout.readline())["loop_id"]
    node.proc.kill()  # the node goes away; the loop is still in its state directory
    node.proc.wait()
    assert node.proc.stderr is not None
    node.proc.stderr.close()
    _, err = run.communicate(timeout=HANG)
    assert run.returncode == 1
    assert f"loop {loop_id} stays on the node" in err
    assert f"loopactors status {loop_id} --connect {node.url}" in err
    assert "Traceback" not in err


def test_healthz_says_shutting_down_until_the_node_is_gone(tmp_path: Path) -> None:
    # Over 2 s on purpose: the round in flight takes 3 s to wind down, the window under test.
    node = NodeProcess(tmp_path, "--worker", "python:tests.runtime.round_fns:slow_to_stop")
    health = node.url.replace("ws://", "http://") + "/healthz"
    assert httpx.get(health, timeout=HANG).text == "ok\n"
    [loop_id] = _start_loops(node.url, node.state, 1)
    deadline = time.monotonic() + HANG
    while "awaiting_worker" not in node.cli("status", loop_id).stdout:
        assert time.monotonic() < deadline, "the round never started"
        time.sleep(0.1)
    node.proc.send_signal(signal.SIGTERM)
    answers: list[str] = []
    while node.proc.poll() is None:  # every answer until the port closes with the process
        try:
            reply = httpx.get(health, timeout=HANG)
            answers.append(f"{reply.status_code} {reply.text.strip()}")
        except httpx.TransportError:
            answers.append("refused")
        time.sleep(0.05)
    assert node.terminate() == 0
    seen = [a for a in answers if a != "refused"]
    assert seen, "the shutdown was over before a probe"
    assert set(seen) == {"503 shutting down"}, answers
    # Refused only at the very end, once the port closed with the runtime stopped.
    assert "refused" not in answers[: answers.index(seen[-1])]


def test_replay_and_compare_on_a_node(node: NodeProcess) -> None:
    run = node.cli("run", "|loop:2| remote job", "--json")
    assert run.returncode == 0, run.stderr
    loop_id = json.loads(run.stdout.splitlines()[-1])["loop_id"]
    replay = node.cli("replay", loop_id[:10], "--round", "2", "--worker", "scripted", "--json")
    assert replay.returncode == 0, replay.stderr
    said = re.search(rf"replaying round 2 of {loop_id[:10]} as loop (\S+);", replay.stderr)
    assert said is not None, replay.stderr
    replay_id = said.group(1)
    status = json.loads(node.cli("status", replay_id, "--json").stdout)
    assert status["phase"] == "complete"
    assert status["spec"]["replay_of"] == f"{loop_id}:2"
    assert status["spec"]["worker"] == "scripted"
    compared = node.cli("history", loop_id, "--compare", replay_id, "--json")
    assert compared.returncode == 0, compared.stderr
    both = json.loads(compared.stdout)
    assert both["original"]["round"]["round"] == 2
    assert both["replay"]["round"]["prompt"] == both["original"]["round"]["prompt"]
    missing = node.cli("replay", loop_id, "--round", "3")
    assert missing.returncode == 1
    assert "has no round 3" in missing.stderr
    assert node.terminate() == 0


def test_a_node_restarted_without_a_loop_s_program_keeps_the_loop_waiting(
    tmp_path: Path,
) -> None:
    """SIGKILL a node mid-round, start it again where the worker's program is not on PATH:
    the loop waits, `status` says why, and only a stop ends it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    agent = bin_dir / "my-agent"
    agent.write_text("#!/bin/sh\ncat >/dev/null\nsleep 30\n")
    agent.chmod(0o755)
    state = tmp_path / "state"
    first = NodeProcess(state, env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    try:
        run = subprocess.Popen(
            [*LOOPACTORS, "run", "|loop:3| needs my-agent", "--worker", "command:my-agent",
             "--json", "--connect", first.url, "--state", str(state)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert run.stdout is not None
        loop_id = ""
        for line in run.stdout:
            event = json.loads(line)
            loop_id = event["loop_id"]
            if event["type"] == "round_started":
                break
    finally:
        first.proc.kill()  # no clean-up at all
        first.proc.wait()
        assert first.proc.stderr is not None
        first.proc.stderr.close()
    run.communicate(timeout=60)

    second = NodeProcess(state)  # this PATH has no bin_dir
    try:
        shown: dict[str, object] = {}
        for _ in range(100):  # the recovery commits the wait just after the node serves
            shown = json.loads(second.cli("status", loop_id, "--json").stdout)
            if shown["reason"] is not None:
                break
        assert shown["phase"] not in ("complete", "cancelled", "interrupted", "escalated")
        reason = str(shown["reason"])
        assert reason.startswith("waiting for its worker: 'command:my-agent' cannot be built")
        assert "'my-agent' not found" in reason
        table = second.cli("status")
        assert "waiting for its worker" in table.stdout, table.stdout
        stopped = second.cli("stop", loop_id, "--json")
        assert stopped.returncode == 0, stopped.stderr
        assert json.loads(second.cli("status", loop_id, "--json").stdout)["phase"] == "cancelled"
    finally:
        assert second.terminate() == 0
    assert "Traceback" not in "".join(second.log)
