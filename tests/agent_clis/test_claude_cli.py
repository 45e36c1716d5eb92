"""``loopactors run ... --worker claude`` as a user runs it: the real CLI, a fake endpoint,
a git workspace, and a crash of the runtime mid-loop followed by ``loopactors resume``.

These start the runtime and the real Claude Code as subprocesses (a few seconds each).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.hang import HANG

from ._fakes import AnthropicFake, Request, Response, Turn, billed_between, git_workspace

CLI = [sys.executable, "-m", "loopactors"]


def run_cli(*args: str, cwd: Path, timeout: float = HANG) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


def write(ws: Path, name: str, text: str) -> Turn:
    return Turn(tools=[("Write", {"file_path": str(ws / name), "content": text})])


def test_run_completes_a_multi_round_loop_in_a_git_workspace(
    tmp_path: Path, anthropic: AnthropicFake, claude_env: dict[str, str]
) -> None:
    ws = git_workspace(tmp_path / "ws")
    anthropic.turns = [
        write(ws, "one.txt", "1\n"),
        Turn(text="one written"),
        write(ws, "two.txt", "2\n"),
        Turn(text="two written"),
        write(ws, "three.txt", "3\n"),
        Turn(text="all there\n<promise>DONE</promise>"),
    ]
    state = tmp_path / "state"
    done = run_cli(
        "run",
        '|loop:5 objective="three files"| add the next file',
        "--worker",
        "claude",
        "--state",
        str(state),
        "--json",
        cwd=ws,  # the workspace defaults to the current directory
    )
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    finished = [e for e in events if e["type"] == "round_finished"]
    assert [e["status"] for e in finished] == ["completed"] * 3
    assert all(e["cost_usd"] > 0 for e in finished)
    assert [e["files_changed"] for e in finished] == [1, 1, 1]
    assert [e["tool"] for e in events if e["type"] == "agent_step"] == ["Write"] * 3
    assert events[-1]["type"] == "loop_finished"
    assert events[-1]["phase"] == "complete"
    assert sorted(p.name for p in ws.glob("*.txt")) == ["one.txt", "three.txt", "two.txt"]
    loop_id = events[0]["loop_id"]
    history = json.loads(
        run_cli("history", loop_id, "--state", str(state), "--json", cwd=ws).stdout
    )
    rounds = history["rounds"]
    assert [r["tokens"] > 0 for r in rounds] == [True] * 3
    assert history["loop"]["cost_usd"] == sum(r["cost_usd"] for r in rounds)
    # each inherit round resumed the agent's previous session
    assert "one written" in str(anthropic.conversations[2])
    assert "two written" in str(anthropic.conversations[4])
    status = run_cli("status", "--state", str(state), cwd=ws)
    assert f"${history['loop']['cost_usd']:.4f}" in status.stdout


def test_a_crash_mid_loop_then_resume_continues_the_agent_session(
    tmp_path: Path, anthropic: AnthropicFake, claude_env: dict[str, str]
) -> None:
    ws = git_workspace(tmp_path / "ws")
    anthropic.turns = [
        write(ws, "one.txt", "1\n"),
        Turn(text="one written"),
        # round 2 (after the crash, dispatched again): the same two steps
        write(ws, "two.txt", "2\n"),
        Turn(text="two written"),
    ]
    reached_round_2 = threading.Event()
    release = threading.Event()
    answer = anthropic.handle
    calls = {"n": 0}

    def hold_round_2(request: Request) -> Response:
        if isinstance(request.body, dict) and request.body.get("tools"):
            calls["n"] += 1
            if calls["n"] == 3:  # round 2's first call, in the run that is about to crash
                reached_round_2.set()
                release.wait(HANG)
                return Response(500, {"type": "error", "error": {"type": "api_error"}})
        return answer(request)

    anthropic.server.handler = hold_round_2
    state = tmp_path / "state"
    runner = subprocess.Popen(
        [*CLI, "run", "|loop:2| add a file", "--worker", "claude", "--state", str(state)],
        cwd=ws,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert reached_round_2.wait(HANG), "round 2 never reached the provider"
        os.killpg(runner.pid, signal.SIGKILL)  # the runtime and its CLI, mid-round
        runner.wait(HANG)
    finally:
        release.set()
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
    time.sleep(0.2)
    anthropic.server.handler = answer
    resumed = run_cli("resume", "--state", str(state), cwd=tmp_path)  # from elsewhere
    assert resumed.returncode == 0, resumed.stderr
    listed = json.loads(run_cli("status", "--state", str(state), "--json", cwd=tmp_path).stdout)
    (loop,) = listed
    assert loop["phase"] == "complete"
    history = json.loads(
        run_cli("history", loop["loop_id"], "--state", str(state), "--json", cwd=tmp_path).stdout
    )
    assert [(r["round"], r["status"]) for r in history["rounds"]] == [
        (1, "completed"),
        (2, "completed"),
    ]
    assert (ws / "two.txt").exists()  # the workspace pinned at start, not resume's cwd
    # round 2 after the crash resumed round 1's session: the provider saw round 1 again
    assert "one written" in str(anthropic.conversations[-2])


def test_after_a_crash_and_resume_each_round_still_costs_what_it_was_billed(
    tmp_path: Path, anthropic: AnthropicFake, claude_env: dict[str, str]
) -> None:
    """The session's running total is committed with each round, so a resumed session's
    next round is charged its own requests only: no double count, nothing negative."""
    ws = git_workspace(tmp_path / "ws")
    usage = {"input_tokens": 1000, "output_tokens": 100}
    anthropic.turns = [Turn(text=f"reply {n}", usage=usage) for n in (1, 2, 3)]
    reached_round_2 = threading.Event()
    release = threading.Event()
    answer = anthropic.handle
    calls = {"n": 0}

    def hold_round_2(request: Request) -> Response:
        if isinstance(request.body, dict) and request.body.get("tools"):
            calls["n"] += 1
            if calls["n"] == 2:  # round 2's call, in the run that is about to crash
                reached_round_2.set()
                release.wait(HANG)
                return Response(500, {"type": "error", "error": {"type": "api_error"}})
        return answer(request)

    anthropic.server.handler = hold_round_2
    state = tmp_path / "state"
    toml = tmp_path / "loopactors.toml"
    toml.write_text("[breaker]\nstale_rounds_limit = 5\n")  # the replies change no file
    runner = subprocess.Popen(
        [
            *CLI, "run", "|loop:3| go on", "--worker", "claude:model=claude-sonnet-4-5",
            "--state", str(state), "--config", str(toml),
        ],
        cwd=ws,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:
        assert reached_round_2.wait(HANG), "round 2 never reached the provider"
        os.killpg(runner.pid, signal.SIGKILL)
        runner.wait(HANG)
    finally:
        release.set()
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
    time.sleep(0.2)
    anthropic.server.handler = answer
    resumed = run_cli("resume", "--state", str(state), cwd=ws)
    assert resumed.returncode == 0, resumed.stderr
    (loop,) = json.loads(run_cli("status", "--state", str(state), "--json", cwd=ws).stdout)
    history = json.loads(
        run_cli("history", loop["loop_id"], "--state", str(state), "--json", cwd=ws).stdout
    )
    rounds = history["rounds"]
    assert [r["status"] for r in rounds] == ["completed"] * 3
    assert len({r["session_id"] for r in rounds}) == 1  # round 2 resumed round 1's session
    ends = [r["started_at"] for r in rounds[1:]] + [time.time()]
    for record, end in zip(rounds, ends, strict=True):
        billed = billed_between(anthropic, record["started_at"], end)
        assert record["cost_usd"] == pytest.approx(billed), record
        assert record["cost_usd"] == pytest.approx(0.0045)  # 1000 in, 100 out each
    assert [r["session_cost_usd"] for r in rounds] == pytest.approx([0.0045, 0.009, 0.0135])
    assert history["loop"]["cost_usd"] == pytest.approx(0.0135)


def test_an_overnight_run_until_plan_max_cost_and_notify(
    tmp_path: Path, anthropic: AnthropicFake, claude_env: dict[str, str]
) -> None:
    """issue 23's end to end through the command line: `loopactors run --worker claude
    --until --plan --max-cost --notify` edits a git workspace until its check passes, each
    round's cost is what the fake billed for it, and a receiver on loopback is told."""
    import http.server

    test = "from calc import add\nassert add(2, 3) == 5, add(2, 3)\nprint('ok')\n"
    ws = git_workspace(
        tmp_path / "ws",
        {
            "calc.py": "def add(a, b):\n    return a - b\n",
            "test_calc.py": test,
            "fix_plan.md": "- [ ] read calc.py\n- [ ] fix add\n",
        },
    )
    calc, plan = str(ws / "calc.py"), str(ws / "fix_plan.md")

    def tick(task: str) -> Turn:
        edit = {"file_path": plan, "old_string": f"- [ ] {task}", "new_string": f"- [x] {task}"}
        return Turn(tools=[("Edit", edit)])

    anthropic.turns = [
        Turn(tools=[("Read", {"file_path": calc}), ("Read", {"file_path": plan})]),
        tick("read calc.py"),
        Turn(text="Read it; fixing add next."),  # round 1: the check fails
        Turn(tools=[("Edit", {"file_path": calc, "old_string": "a - b", "new_string": "a + b"})]),
        tick("fix add"),
        Turn(tools=[("Bash", {"command": "git -c user.name=a -c user.email=a@a commit -qam fix"})]),
        Turn(text="Fixed."),  # round 2: the check passes, every task is done
    ]
    received: list[dict[str, object]] = []
    arrived = threading.Event()

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
            arrived.set()
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state = tmp_path / "state"
    try:
        done = run_cli(
            "run",
            "|loop:6| make python3 test_calc.py pass",
            "--worker",
            "claude:model=claude-sonnet-4-5",
            "--plan",
            "fix_plan.md",
            "--until",
            "python3 test_calc.py",
            "--max-cost",
            "1",
            "--notify",
            f"json://127.0.0.1:{server.server_address[1]}/overnight",
            "--state",
            str(state),
            "--json",
            cwd=ws,
        )
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    finished = [e for e in events if e["type"] == "round_finished"]
    assert [(e["tasks_done"], e["tasks_total"]) for e in finished] == [(1, 2), (2, 2)]
    assert [e["check"]["exit_code"] for e in finished] == [1, 0]
    assert events[-1]["phase"] == "complete"
    loop_id = events[-1]["loop_id"]
    # Delivered by `run` before it exited.
    assert arrived.is_set()
    assert [note["title"] for note in received] == [f"loop {loop_id} complete"]
    history = json.loads(
        run_cli("history", loop_id, "--state", str(state), "--json", cwd=ws).stdout
    )
    rounds = history["rounds"]
    ends = [r["started_at"] for r in rounds[1:]] + [time.time()]
    for record, end in zip(rounds, ends, strict=True):
        assert record["cost_usd"] == pytest.approx(
            billed_between(anthropic, record["started_at"], end)
        )
    assert history["loop"]["cost_usd"] == pytest.approx(sum(r["cost_usd"] for r in rounds))
    assert "Plan: " in rounds[1]["prompt"]
    assert "Next task: fix add" in rounds[1]["prompt"]
    assert "a + b" in (ws / "calc.py").read_text()
