"""The ``codex`` kind: the real Codex CLI (pinned, from npm) against a Responses API fake.

Each test runs ``loopactors`` as a user does (a real process, a real git workspace), with the
worker ``codex:...`` pointed at the fake on loopback. A round is one ``codex exec`` (about a
second), so the tests take a few seconds each.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from loopactors.workers import parse_worker
from loopactors.workers._cli_codex import CodexAdapter, codex_limit, round_usage
from tests.hang import HANG

from ._fakes import quiet_env
from ._loops import (
    events,
    git,
    kill_all,
    of_type,
    off_loopback,
    processes_with,
    read_until,
    run,
    start,
    traced,
    wait_for,
)
from ._openai_fake import ModelTurn, ResponsesFake, openai_error

COMMIT = (
    "printf 'hello\\n' > hello.txt && git add hello.txt && "
    "git -c user.name=agent -c user.email=agent@example.com commit -qm 'add hello'"
)

#: The provider fake the ``fake`` fixture serves (conftest.py).
FAKE = ResponsesFake


def env_for(home: Path, fake: ResponsesFake) -> dict[str, str]:
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    return quiet_env(
        home,
        OPENAI_API_KEY="sk-test",
        OPENAI_BASE_URL=f"{fake.url}/v1",
        CODEX_HOME=str(home / ".codex"),
    )


def spec(codex: Path, fake: ResponsesFake, **extra: str) -> str:
    keys = {"binary": str(codex), "model": "gpt-5", **extra}
    # Retries off: a scripted error answers once (Codex retries a 5xx/429 five times).
    retries = (
        "-c model_providers.loopactors.stream_max_retries=0 "
        "-c model_providers.loopactors.request_max_retries=0"
    )
    return ",".join(f"{k}={v}" for k, v in keys.items()) + f",args={retries}"


def user_texts(body: dict[str, Any]) -> list[str]:
    """The user messages and tool results a Responses request carries (not the harness's)."""
    texts = []
    for item in body.get("input", []):
        if item.get("type") == "function_call_output":
            texts.append("tool result")
        elif item.get("role") in ("user", "assistant"):
            for part in item.get("content", []):
                text = part.get("text", "")
                if not text.startswith("<"):
                    texts.append(f"{item['role']}: {text}")
    return texts


def test_a_tool_using_round_commits_in_the_workspace_and_the_next_resumes_the_session(
    codex: Path, fake: ResponsesFake, home: Path, workspace: Path
) -> None:
    fake.turns = [
        ModelTurn(tools=[("exec_command", {"cmd": COMMIT})], input_tokens=100, output_tokens=20),
        ModelTurn(text="Added hello.txt.", input_tokens=120, output_tokens=10, cached_tokens=80),
        ModelTurn(text="All done.\n<promise>DONE</promise>", input_tokens=300, output_tokens=5),
    ]
    result = run(
        [
            "run",
            '|loop iterations=3 mode=inherit objective="hello.txt exists"| add hello.txt',
            "--store",
            "memory",
            "--json",
            "--worker",
            "codex:" + spec(codex, fake),
        ],
        env_for(home, fake),
        cwd=workspace,
    )
    assert result.returncode == 0, result.stderr
    all_events = events(result.stdout)
    finished = of_type(all_events, "round_finished")
    assert [e["status"] for e in finished] == ["completed", "completed"]
    assert all_events[-1]["phase"] == "complete"  # the promise ended the loop at round 2
    # The edit landed, as a commit Codex's command made.
    assert (workspace / "hello.txt").read_text() == "hello\n"
    assert git(workspace, "log", "--format=%s").splitlines() == ["add hello", "start"]
    assert finished[0]["commits"] == 1
    # Tokens: uncached input + output + cache reads, per round (not Codex's running total).
    assert finished[0]["tokens"] == (100 + 20) + (40 + 10 + 80)
    assert finished[1]["tokens"] == 300 + 5
    assert finished[0]["cost_usd"] == 0.0  # Codex does not report a cost
    steps = of_type(all_events, "agent_step")
    assert steps[0]["tool"] == "command"
    assert "printf" in steps[0]["detail"]
    # Round 2 resumed round 1's session: the fake saw the earlier conversation again.
    assert len(fake.conversations) == 3
    second = user_texts(fake.conversations[2])
    assert second[0].startswith("user: add hello.txt")
    assert "tool result" in second
    assert "assistant: Added hello.txt." in second
    assert second[-1].startswith("user: add hello.txt")


def test_an_error_fails_the_round_with_the_cli_message(
    codex: Path, fake: ResponsesFake, home: Path, workspace: Path
) -> None:
    fake.turns = [ModelTurn(error=openai_error(400, "invalid_request_error", "no such model"))]
    result = run(
        [
            "run",
            "|loop:1| hi",
            "--store",
            "memory",
            "--json",
            "--worker",
            "codex:" + spec(codex, fake),
        ],
        env_for(home, fake),
        cwd=workspace,
    )
    finished = of_type(events(result.stdout), "round_finished")
    assert finished[0]["status"] == "failed"
    assert "no such model" in finished[0]["error"]
    assert of_type(events(result.stdout), "round_deferred") == []


def test_a_usage_limit_defers_the_round_then_it_completes(
    codex: Path, fake: ResponsesFake, home: Path, workspace: Path
) -> None:
    fake.turns = [
        ModelTurn(
            error=openai_error(429, "usage_limit_reached", "The usage limit has been reached")
        ),
        ModelTurn(text="Done after the wait."),
    ]
    result = run(
        [
            "run",
            "|loop:1| hi",
            "--store",
            "memory",
            "--json",
            "--worker",
            "codex:" + spec(codex, fake, backoff="1"),
        ],
        env_for(home, fake),
        cwd=workspace,
    )
    assert result.returncode == 0, result.stderr
    all_events = events(result.stdout)
    deferred = of_type(all_events, "round_deferred")
    assert len(deferred) == 1
    assert deferred[0]["round"] == 1
    assert "usage limit" in deferred[0]["reason"]
    assert deferred[0]["until"] > time.time() - 60
    finished = of_type(all_events, "round_finished")
    assert [e["status"] for e in finished] == ["completed"]
    assert all_events[-1]["phase"] == "complete"
    # The run that met the limit left no session to resume: the round started afresh.
    assert sum(t.startswith("user: hi") for t in user_texts(fake.conversations[1])) == 1


def test_the_usage_limit_reset_time_codex_prints_is_the_deferral_time() -> None:
    now = time.mktime((2026, 12, 1, 3, 0, 0, 0, 0, -1))
    message = "You've hit your usage limit. Upgrade to Pro or try again at 4:40 AM."
    limit = codex_limit(message, now=now)
    assert limit is not None
    assert limit.until == now + 100 * 60
    later = codex_limit("You've hit your usage limit. Try again later.", now=now)
    assert later is not None
    assert later.until is None  # the worker's backoff applies
    rate = codex_limit("exceeded retry limit, last status: 429 Too Many Requests", now=now)
    assert rate is not None
    assert codex_limit("unexpected status 400 Bad Request: no such model", now=now) is None


def test_stop_mid_round_ends_the_codex_process_group(
    codex: Path, fake: ResponsesFake, home: Path, workspace: Path
) -> None:
    fake.turns = [ModelTurn(text="too late", delay=60)]
    proc = start(
        [
            "run",
            "|loop:2| hi",
            "--store",
            "memory",
            "--json",
            "--worker",
            "codex:" + spec(codex, fake),
        ],
        env_for(home, fake),
        cwd=workspace,
    )
    try:
        read_until(proc, "round_started", 1)
        wait_for(lambda: len(fake.conversations) == 1)  # codex is waiting for its answer
        assert [p for p in processes_with(str(home)) if p != proc.pid]
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=HANG)
        assert proc.returncode == 3, err
        assert events(out)[-1]["phase"] == "cancelled"
        wait_for(lambda: processes_with(str(home)) == [])
    finally:
        kill_all(processes_with(str(home)))
        proc.kill()


def test_a_crash_mid_loop_resumes_and_keeps_the_codex_session(
    codex: Path, fake: ResponsesFake, home: Path, workspace: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    # Each round appends to a file (real work: the no-progress rule stays quiet).
    fake.turns = [
        ModelTurn(tools=[("exec_command", {"cmd": "echo 1 >> count.txt"})]),
        ModelTurn(text="first"),
        ModelTurn(text="never delivered", delay=60),
        ModelTurn(tools=[("exec_command", {"cmd": "echo 2 >> count.txt"})]),
        ModelTurn(text="second"),
        ModelTurn(tools=[("exec_command", {"cmd": "echo 3 >> count.txt"})]),
        ModelTurn(text="third"),
    ]
    env = env_for(home, fake)
    args = ["--state", str(state), "--json"]
    proc = start(
        ["run", "|loop:3,inherit| count", *args, "--worker", "codex:" + spec(codex, fake)],
        env,
        cwd=workspace,
    )
    try:
        first = read_until(proc, "round_finished", 1)
        assert first["status"] == "completed"
        read_until(proc, "round_started", 2)
        wait_for(lambda: len(fake.conversations) == 3)
        proc.kill()  # a crash: no clean-up at all
        proc.communicate()
    finally:
        kill_all(processes_with(str(home)))  # the orphaned codex of round 2
    resumed = run(["resume", *args], env, cwd=workspace)
    assert resumed.returncode == 0, resumed.stderr
    assert events(resumed.stdout)[-1]["phase"] == "complete"
    history = run(["history", first["loop_id"], *args], env, cwd=workspace)
    rounds = json.loads(history.stdout)["rounds"]
    assert [r["round"] for r in rounds] == [1, 2, 3]
    assert all(r["status"] == "completed" for r in rounds)
    sessions = {r["session_id"] for r in rounds}
    assert len(sessions) == 1  # one Codex session across the crash
    # The re-run round 2 resumed round 1's session: its request holds round 1's answer.
    assert "assistant: first" in user_texts(fake.conversations[3])
    assert (workspace / "count.txt").read_text() == "1\n2\n3\n"


def test_codex_reads_its_own_round_usage_from_the_rollout(tmp_path: Path) -> None:
    day = tmp_path / "sessions" / "2026" / "12" / "01"
    day.mkdir(parents=True)
    lines = [
        {"type": "event_msg", "payload": {"type": "task_started"}},
        _token_count(100, 0, 20),
        {"type": "event_msg", "payload": {"type": "task_started"}},
        _token_count(150, 50, 10),
        _token_count(200, 100, 5),
    ]
    (day / "rollout-2026-12-01T00-00-00-abc.jsonl").write_text(
        "".join(json.dumps(line) + "\n" for line in lines)
    )
    usage = round_usage("abc", tmp_path)
    assert usage is not None
    assert usage["input_tokens"] == 350
    assert usage["cached_input_tokens"] == 150
    assert usage["output_tokens"] == 15
    assert round_usage("missing", tmp_path) is None


def _token_count(inp: int, cached: int, out: int) -> dict[str, Any]:
    last = {"input_tokens": inp, "cached_input_tokens": cached, "output_tokens": out}
    return {
        "type": "event_msg",
        "payload": {"type": "token_count", "info": {"last_token_usage": last}},
    }


def test_a_missing_codex_binary_is_refused_naming_the_package(tmp_path: Path) -> None:
    with pytest.raises(Exception, match=r"codex.*npm install -g @openai/codex"):
        parse_worker(f"codex:binary={tmp_path / 'nope'}")
    with pytest.raises(Exception, match="sandbox 'nowhere' is unknown; accepted: bypass"):
        parse_worker("codex:sandbox=nowhere")


def test_nothing_leaves_loopback(
    codex: Path, fake: ResponsesFake, home: Path, workspace: Path, tmp_path: Path
) -> None:
    """Every connect(2) of Codex and its children, traced: only the fake on 127.0.0.1."""
    log = tmp_path / "connect.log"
    fake.turns = [ModelTurn(tools=[("exec_command", {"cmd": "echo hi > hi.txt"})])]
    worker = "codex:" + spec(traced(codex, log), fake)
    result = run(
        ["run", "|loop:1| hi", "--store", "memory", "--json", "--worker", worker],
        env_for(home, fake),
        cwd=workspace,
    )
    assert of_type(events(result.stdout), "round_finished")[0]["status"] == "completed"
    assert (workspace / "hi.txt").exists()
    assert "127.0.0.1" in log.read_text()
    assert off_loopback(log) == []


def test_unreadable_output_or_a_silent_exit_fails_the_round() -> None:
    parser = CodexAdapter().parser()
    parser.feed("Error: something broke before the JSON started")
    outcome = parser.finish(1, "")
    assert outcome.is_error
    assert outcome.error == (
        "codex printed unreadable output: 'Error: something broke before the JSON started'"
    )
    parser = CodexAdapter().parser()
    outcome = parser.finish(2, "error: unexpected argument '--bogus' found")
    assert outcome.error == "codex exited with code 2: error: unexpected argument '--bogus' found"
    assert outcome.limit is None
