"""The ``gemini`` kind: the real Gemini CLI (pinned, from npm) against a Gemini API fake.

Each test runs ``loopactors`` as a user does (a real process, a real git workspace), with the
worker ``gemini:...`` pointed at the fake on loopback. One run of the CLI takes a second or
two (it is a large Node program), so the tests take several seconds each.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from loopactors.workers import parse_worker
from loopactors.workers._cli_gemini import GeminiAdapter, gemini_limit
from tests.hang import HANG

from ._fakes import quiet_env
from ._gemini_fake import GeminiFake, gemini_error
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
from ._openai_fake import ModelTurn

COMMIT = "git add hello.txt && git -c user.name=agent -c user.email=a@example.com commit -qm hi"

#: The provider fake the ``fake`` fixture serves (conftest.py).
FAKE = GeminiFake


def env_for(home: Path, fake: GeminiFake) -> dict[str, str]:
    return quiet_env(home, GEMINI_API_KEY="test-key", GOOGLE_GEMINI_BASE_URL=fake.url)


def spec(gemini: Path, fake: GeminiFake, **extra: str) -> str:
    keys = {"binary": str(gemini), "model": "gemini-2.5-flash", **extra}
    return ",".join(f"{k}={v}" for k, v in keys.items())


def texts(contents: list[dict[str, Any]]) -> list[str]:
    """What a request's conversation holds: user/model texts, calls and their results."""
    found = []
    for content in contents:
        for part in content.get("parts", []):
            if "functionCall" in part:
                found.append(f"call {part['functionCall']['name']}")
            elif "functionResponse" in part:
                found.append(f"result {part['functionResponse']['name']}")
            elif "text" in part and not part["text"].startswith("<"):
                found.append(f"{content.get('role')}: {part['text']}")
    return found


def loop(gemini: Path, fake: GeminiFake, prompt: str, *extra: str, **keys: str) -> list[str]:
    return ["run", prompt, *extra, "--json", "--worker", "gemini:" + spec(gemini, fake, **keys)]


def test_a_tool_using_round_commits_in_the_workspace_and_the_next_resumes_the_session(
    gemini: Path, fake: GeminiFake, home: Path, workspace: Path
) -> None:
    hello = str(workspace / "hello.txt")
    fake.turns = [
        ModelTurn(tools=[("write_file", {"file_path": hello, "content": "hello\n"})]),
        ModelTurn(tools=[("run_shell_command", {"command": COMMIT})]),
        ModelTurn(text="Added hello.txt.", input_tokens=200, output_tokens=10, cached_tokens=150),
        ModelTurn(text="All done.\n<promise>DONE</promise>", input_tokens=300, output_tokens=5),
    ]
    prompt = '|loop iterations=3 mode=inherit objective="hello.txt exists"| add hello.txt'
    result = run(
        loop(gemini, fake, prompt, "--store", "memory"), env_for(home, fake), cwd=workspace
    )
    assert result.returncode == 0, result.stderr
    all_events = events(result.stdout)
    finished = of_type(all_events, "round_finished")
    assert [e["status"] for e in finished] == ["completed", "completed"]
    assert all_events[-1]["phase"] == "complete"
    assert (workspace / "hello.txt").read_text() == "hello\n"
    assert git(workspace, "log", "--format=%s").splitlines() == ["hi", "start"]
    assert finished[0]["commits"] == 1
    # Tokens: uncached input + output + cached, summed over the round's model calls.
    assert finished[0]["tokens"] == (100 + 20) * 2 + (50 + 10 + 150)
    assert finished[1]["tokens"] == 300 + 5
    assert finished[0]["cost_usd"] == 0.0  # the Gemini CLI reports no cost
    steps = of_type(all_events, "agent_step")
    assert [s["tool"] for s in steps] == ["write_file", "run_shell_command"]
    assert steps[0]["detail"] == hello
    # Round 2 resumed round 1's session: the fake saw the whole earlier conversation.
    assert len(fake.conversations) == 4
    second = texts(fake.conversations[3])
    assert "call write_file" in second
    assert "result run_shell_command" in second
    assert "model: Added hello.txt." in second
    assert second[-1].startswith("user: add hello.txt")


def test_an_error_fails_the_round_with_the_cli_message(
    gemini: Path, fake: GeminiFake, home: Path, workspace: Path
) -> None:
    fake.turns = [ModelTurn(error=gemini_error(400, "INVALID_ARGUMENT", "no such model"))]
    result = run(
        loop(gemini, fake, "|loop:1| hi", "--store", "memory"), env_for(home, fake), cwd=workspace
    )
    finished = of_type(events(result.stdout), "round_finished")
    assert finished[0]["status"] == "failed"
    assert "no such model" in finished[0]["error"]
    assert of_type(events(result.stdout), "round_deferred") == []


def test_a_used_up_quota_defers_the_round_then_it_completes(
    gemini: Path, fake: GeminiFake, home: Path, workspace: Path
) -> None:
    daily = gemini_error(
        429,
        "RESOURCE_EXHAUSTED",
        "Quota exceeded",
        quota_id="GenerateRequestsPerDayPerProjectPerModel-FreeTier",
    )
    fake.turns = [ModelTurn(error=daily), ModelTurn(text="Done after the wait.")]
    result = run(
        loop(gemini, fake, "|loop:1| hi", "--store", "memory", backoff="1"),
        env_for(home, fake),
        cwd=workspace,
    )
    assert result.returncode == 0, result.stderr
    all_events = events(result.stdout)
    deferred = of_type(all_events, "round_deferred")
    assert len(deferred) == 1
    assert "daily quota" in deferred[0]["reason"]
    finished = of_type(all_events, "round_finished")
    assert [e["status"] for e in finished] == ["completed"], finished[0]["error"]
    assert all_events[-1]["phase"] == "complete"


def test_the_retry_time_of_a_gemini_quota_error_is_the_deferral_time() -> None:
    now = 1_000_000.0
    message = (
        "[API Error: You exceeded your current quota.\nSuggested retry after 3600s.]\n"
        "Please wait and try again later."
    )
    limit = gemini_limit(message, now=now)
    assert limit is not None
    assert limit.until == now + 3600
    daily = gemini_limit("You have exhausted your daily quota on this model.", now=now)
    assert daily is not None
    assert daily.until is None
    assert gemini_limit("[API Error: no such model]", now=now) is None


def test_stop_mid_round_ends_the_gemini_process_group(
    gemini: Path, fake: GeminiFake, home: Path, workspace: Path
) -> None:
    fake.turns = [ModelTurn(text="too late", delay=60)]
    proc = start(
        loop(gemini, fake, "|loop:2| hi", "--store", "memory"), env_for(home, fake), cwd=workspace
    )
    try:
        read_until(proc, "round_started", 1)
        wait_for(lambda: len(fake.conversations) == 1)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=HANG)
        assert proc.returncode == 3, err
        assert events(out)[-1]["phase"] == "cancelled"
        wait_for(lambda: processes_with(str(home)) == [])
    finally:
        kill_all(processes_with(str(home)))
        proc.kill()


def test_a_crash_mid_loop_resumes_and_keeps_the_gemini_session(
    gemini: Path, fake: GeminiFake, home: Path, workspace: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    count = str(workspace / "count.txt")
    fake.turns = [
        ModelTurn(tools=[("write_file", {"file_path": count, "content": "1\n"})]),
        ModelTurn(text="first"),
        ModelTurn(text="never delivered", delay=60),
        ModelTurn(tools=[("write_file", {"file_path": count, "content": "2\n"})]),
        ModelTurn(text="second"),
    ]
    env = env_for(home, fake)
    args = ["--state", str(state)]
    proc = start(loop(gemini, fake, "|loop:2,inherit| count", *args), env, cwd=workspace)
    try:
        first = read_until(proc, "round_finished", 1)
        assert first["status"] == "completed"
        read_until(proc, "round_started", 2)
        wait_for(lambda: len(fake.conversations) == 3)
        proc.kill()
        proc.communicate()
    finally:
        kill_all(processes_with(str(home)))
    resumed = run(["resume", *args, "--json"], env, cwd=workspace)
    assert resumed.returncode == 0, resumed.stderr
    assert events(resumed.stdout)[-1]["phase"] == "complete"
    history = run(["history", first["loop_id"], *args, "--json"], env, cwd=workspace)
    rounds = json.loads(history.stdout)["rounds"]
    assert [(r["round"], r["status"]) for r in rounds] == [(1, "completed"), (2, "completed")]
    assert len({r["session_id"] for r in rounds}) == 1
    assert "model: first" in texts(fake.conversations[3])
    assert (workspace / "count.txt").read_text() == "2\n"


def test_bad_gemini_specs_are_refused_with_what_is_accepted(tmp_path: Path) -> None:
    with pytest.raises(Exception, match=r"gemini.*npm install -g @google/gemini-cli"):
        parse_worker(f"gemini:binary={tmp_path / 'nope'}")
    with pytest.raises(Exception, match="permission_mode 'ask' is unknown; accepted: yolo"):
        parse_worker("gemini:permission_mode=ask")
    with pytest.raises(Exception, match="max_turns"):
        parse_worker("gemini:max_turns=3")


def test_nothing_leaves_loopback(
    gemini: Path, fake: GeminiFake, home: Path, workspace: Path, tmp_path: Path
) -> None:
    """Every connect(2) of the Gemini CLI and its children, traced: only the fake."""
    log = tmp_path / "connect.log"
    hi = str(workspace / "hi.txt")
    fake.turns = [ModelTurn(tools=[("write_file", {"file_path": hi, "content": "hi\n"})])]
    worker = "gemini:" + spec(traced(gemini, log), fake)
    result = run(
        ["run", "|loop:1| hi", "--store", "memory", "--json", "--worker", worker],
        env_for(home, fake),
        cwd=workspace,
    )
    assert of_type(events(result.stdout), "round_finished")[0]["status"] == "completed"
    assert (workspace / "hi.txt").exists()
    assert "127.0.0.1" in log.read_text()
    assert off_loopback(log) == []


def test_a_gemini_result_with_null_counts_is_still_the_result() -> None:
    parser = GeminiAdapter().parser()
    for text in (
        json.dumps({"type": "init", "session_id": "s-1"}),
        json.dumps({"type": "message", "role": "assistant", "content": "done"}),
        json.dumps(
            {
                "type": "result",
                "status": "success",
                "stats": {"input_tokens": None, "output_tokens": 7, "cached": None},
            }
        ),
    ):
        parser.feed(text)
    outcome = parser.finish(0, "")
    assert (outcome.reply, outcome.is_error, outcome.output_tokens) == ("done", False, 7)
