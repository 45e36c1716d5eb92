"""The claude kind's parts that need no binary: its command line, and reading its stream (the
lines below are what Claude Code 2.1.332 printed against the test suite's fake endpoint)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import trio

from loopactors.errors import WorkerSpecError
from loopactors.workers import check_worker_spec, in_workspace
from loopactors.workers._cli_adapter import CliRound, parse_cli_options
from loopactors.workers._cli_claude import ClaudeAdapter
from loopactors.workers._cli_worker import progress_since, snapshot

SESSION = "c0fc082d-c127-467c-b2d0-f06dcd6941be"


def line(**fields: object) -> str:
    return json.dumps({"session_id": SESSION, **fields})


def result(**fields: object) -> str:
    base: dict[str, object] = {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "result": "done",
        "total_cost_usd": 0.0016,
        "usage": {
            "input_tokens": 200,
            "cache_creation_input_tokens": 10,
            "cache_read_input_tokens": 30,
            "output_tokens": 40,
        },
    }
    base.update(fields)
    return line(**base)


def parse(*lines: str, returncode: int = 0, stderr: str = ""):  # type: ignore[no-untyped-def]
    parser = ClaudeAdapter().parser()
    steps = [step for text in lines for step in parser.feed(text)]
    return steps, parser.finish(returncode, stderr)


def test_the_command_line() -> None:
    adapter = ClaudeAdapter()
    options = parse_cli_options(
        adapter, "model=opus,max_turns=4,allowed_tools=Edit+Bash,args=--fallback-model sonnet"
    )
    command = adapter.command(CliRound("do it", options, SESSION, "/w"))
    assert command.argv == (
        "claude", "-p", "--output-format", "stream-json", "--verbose", "--model", "opus",
        "--max-turns", "4", "--permission-mode", "bypassPermissions",
        "--allowedTools", "Edit", "Bash", "--resume", SESSION, "--fallback-model", "sonnet",
    )  # fmt: skip
    assert command.stdin == b"do it"
    assert (command.env.get("IS_SANDBOX") == "1") == (os.geteuid() == 0)
    calm = adapter.command(
        CliRound("x", parse_cli_options(adapter, "permission_mode=acceptEdits"), None, "/w")
    )
    assert "--resume" not in calm.argv
    assert "IS_SANDBOX" not in calm.env  # only bypassPermissions needs it


def test_a_bad_permission_mode_is_refused() -> None:
    with pytest.raises(WorkerSpecError, match="permission_mode 'yolo' is unknown; accepted: "):
        parse_cli_options(ClaudeAdapter(), "permission_mode=yolo")


def test_result_usage_cost_session_and_steps() -> None:
    tool = {"type": "tool_use", "name": "Bash", "input": {"command": "pytest -q  tests"}}
    steps, outcome = parse(
        line(type="system", subtype="init"),
        line(type="assistant", message={"content": [{"type": "text", "text": "hm"}, tool]}),
        "",
        result(),
    )
    assert [(s.tool, s.detail) for s in steps] == [("Bash", "pytest -q tests")]
    assert (outcome.reply, outcome.session_id, outcome.is_error) == ("done", SESSION, False)
    assert (outcome.input_tokens, outcome.output_tokens) == (200, 40)
    assert (outcome.cache_read_tokens, outcome.cache_write_tokens) == (30, 10)
    assert outcome.tokens == 280
    assert outcome.cost_usd == 0.0016


def test_an_api_429_is_a_limit_without_a_time() -> None:
    _, outcome = parse(
        result(
            is_error=True,
            api_error_status=429,
            result="API Error: Request rejected (429) · Rate limited",
        ),
        returncode=1,
    )
    assert outcome.is_error
    assert outcome.limit is not None
    assert outcome.limit.until is None


def test_the_subscription_usage_limit_carries_its_reset() -> None:
    _, outcome = parse(result(is_error=True, result="Claude AI usage limit reached|1767225600"))
    assert outcome.limit is not None
    assert outcome.limit.until == 1767225600.0
    # the same words inside an ordinary reply are no limit
    _, ok = parse(result(result="I read about the 'usage limit reached' message in the docs."))
    assert ok.limit is None


def test_no_result_or_unreadable_output_fails_with_the_clis_words() -> None:
    _, outcome = parse(returncode=1, stderr="--dangerously-skip-permissions cannot be used")
    assert outcome.is_error
    assert "cannot be used" in (outcome.error or "")
    _, garbled = parse("this is not json", returncode=0)
    assert garbled.is_error
    assert "unreadable output: 'this is not json'" in (garbled.error or "")


def test_events_of_other_types_or_shapes_are_passed_over() -> None:
    # CLIs add events and fields: a round reads what it knows and goes on (msgspec decodes
    # the known events; any other object still gives its session).
    other_session = "11111111-2222-3333-4444-555555555555"
    _, first = parse(
        json.dumps({"type": "rate_limit_event", "session_id": other_session, "x": [1, {}]}),
    )
    assert first.session_id == other_session
    steps, outcome = parse(
        json.dumps({"type": "rate_limit_event", "session_id": other_session, "x": [1, {}]}),
        line(type="assistant", message={"content": [{"type": "thinking", "thinking": "..."}]}),
        line(type="assistant", message={"content": "not a list"}),  # another shape
        json.dumps([1, 2]),  # JSON, not an object
        line(type="assistant", message={"content": [{"type": "tool_use", "name": "Read"}]}),
        returncode=1,
        stderr="killed",
    )
    assert [s.tool for s in steps] == ["Read"]
    assert outcome.session_id == SESSION  # the last one named
    assert outcome.error == "claude exited with code 1 without a result: killed"
    # A line broken off after a field of another type is still unreadable, not skipped.
    _, broken = parse('{"type": "result", "is_error": "yes", "res', returncode=1)
    assert "unreadable output" in (broken.error or "")


def test_a_result_with_a_null_or_odd_count_is_still_the_result() -> None:
    # A count or list the CLI left null (or wrote as 5.0) is read as nothing: the round's
    # result stands, as before the stream was decoded with msgspec.
    usage = {"input_tokens": 5.0, "output_tokens": None, "cache_read_input_tokens": None}
    _, outcome = parse(result(usage=usage, errors=None, total_cost_usd=None))
    assert (outcome.reply, outcome.is_error, outcome.error) == ("done", False, None)
    assert (outcome.input_tokens, outcome.output_tokens, outcome.cache_read_tokens) == (5, 0, 0)
    _, failed = parse(result(is_error=True, result=None, errors=None, subtype="error_x"))
    assert failed.error == "claude reported error_x"


def test_a_spec_for_remote_rounds_is_checked_for_form_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert check_worker_spec("claude:model=x", here=False).name == "claude"
    with pytest.raises(WorkerSpecError, match="unknown"):
        check_worker_spec("claude:colour=red", here=False)
    with pytest.raises(WorkerSpecError, match="npm install -g @anthropic-ai/claude-code"):
        check_worker_spec("claude", here=True)


def test_in_workspace_keeps_args_last(tmp_path: Path) -> None:
    assert in_workspace("claude", tmp_path) == f"claude:workspace={tmp_path}"
    assert in_workspace("claude:model=m,args=-x a,b", tmp_path) == (
        f"claude:model=m,workspace={tmp_path},args=-x a,b"
    )
    assert in_workspace("claude:workspace=/elsewhere", tmp_path) == "claude:workspace=/elsewhere"


async def test_progress_in_git_counts_changed_files_and_new_commits(tmp_path: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(
            ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *args],
            check=True,
            capture_output=True,
        )

    git("init", "-q")
    (tmp_path / "a").write_text("1")
    git("add", "-A")
    git("commit", "-qm", "one")
    (tmp_path / "dirty").write_text("before")
    before = await snapshot(str(tmp_path))
    assert await progress_since(str(tmp_path), before) == (0, 0, False)  # still dirty, same
    (tmp_path / "dirty").write_text("after")
    (tmp_path / "b").write_text("2")
    assert await progress_since(str(tmp_path), before) == (2, 0, True)
    git("add", "-A")
    git("commit", "-qm", "two")
    git("commit", "-q", "--allow-empty", "-m", "three")
    files, commits, moved = await progress_since(str(tmp_path), before)
    assert (commits, moved) == (2, True)
    assert files == 2  # the dirty file and b: now committed, so no longer dirty


async def test_progress_elsewhere_uses_a_fingerprint(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    before = await snapshot(str(tmp_path))
    assert await progress_since(str(tmp_path), before) == (0, 0, False)
    await trio.sleep(0.01)
    (tmp_path / "g").write_text("y")
    assert await progress_since(str(tmp_path), before) == (1, 0, True)
