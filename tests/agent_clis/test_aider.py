"""The ``aider`` kind: the real aider (pinned, from PyPI, in its own venv) against a Chat
Completions fake, and its parser on output recorded from the pinned version.

aider starts slowly (a large Python program: several seconds a run), so the live tests are
few: an edit with tokens and cost, a resumed chat, an error. Its rate-limit handling is tested
on recorded output: aider retries a rate limit itself for about a minute before it gives up.
"""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

from loopactors.workers import parse_worker
from loopactors.workers._cli_aider import AiderAdapter, parse_token_count
from tests.hang import HANG

from ._fakes import git_workspace, quiet_env
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
from ._openai_fake import ChatCompletionsFake, ModelTurn, openai_error

RECORDED = Path(__file__).with_name("recorded")
EDIT = "hello.txt\n```\n<<<<<<< SEARCH\nold\n=======\nnew\n>>>>>>> REPLACE\n```\nChanged it."

#: The provider fake the ``fake`` fixture serves (conftest.py).
FAKE = ChatCompletionsFake


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return git_workspace(tmp_path / "ws", {"hello.txt": "old\n"})


def env_for(home: Path, aider: Path, fake: ChatCompletionsFake) -> dict[str, str]:
    # aider fetches litellm's model list once a day unless its cache is fresh: give it the
    # copy litellm ships, so nothing leaves loopback.
    caches = home / ".aider" / "caches"
    caches.mkdir(parents=True, exist_ok=True)
    shipped = next(aider.parent.parent.glob("lib/python*/site-packages/litellm"))
    shutil.copy(
        shipped / "model_prices_and_context_window_backup.json",
        caches / "model_prices_and_context_window.json",
    )
    return quiet_env(
        home,
        OPENAI_API_KEY="sk-test",
        OPENAI_API_BASE=f"{fake.url}/v1",
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@example.com",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.com",
    )


def spec(aider: Path) -> str:
    """The worker spec; ``--file hello.txt`` puts the file in aider's chat."""
    return (
        f"aider:binary={aider},model=openai/gpt-4o,"
        "args=--file hello.txt --map-tokens 0 --no-show-model-warnings"
    )


def user_messages(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] in ("user", "assistant")]


def test_an_edit_lands_as_a_commit_with_tokens_and_cost_and_the_next_round_resumes(
    aider: Path, fake: ChatCompletionsFake, workspace: Path, tmp_path: Path
) -> None:
    fake.turns = [
        ModelTurn(text=EDIT, input_tokens=1000, output_tokens=50),
        ModelTurn(text="Nothing left.\n<promise>DONE</promise>", input_tokens=1200),
    ]
    prompt = '|loop iterations=3 mode=inherit objective="hello.txt says new"| make it new'
    result = run(
        ["run", prompt, "--store", "memory", "--json", "--worker", spec(aider)],
        env_for(tmp_path / "home", aider, fake),
        cwd=workspace,
    )
    assert result.returncode == 0, result.stderr
    all_events = events(result.stdout)
    finished = of_type(all_events, "round_finished")
    assert [e["status"] for e in finished] == ["completed", "completed"]
    assert all_events[-1]["phase"] == "complete"
    assert (workspace / "hello.txt").read_text() == "new\n"
    assert len(git(workspace, "log", "--format=%s").splitlines()) == 2  # aider's own commit
    assert finished[0]["commits"] == 1
    assert finished[0]["tokens"] == 1000 + 50
    # gpt-4o at litellm's shipped prices: $2.50 / M input, $10 / M output.
    assert finished[0]["cost_usd"] == pytest.approx(0.0030, abs=1e-5)
    steps = of_type(all_events, "agent_step")
    assert steps[0] == {**steps[0], "tool": "edit", "detail": "hello.txt"}
    # Round 2 restored the chat: the fake saw round 1's request and answer.
    second = user_messages(fake.conversations[1])
    assert any("Changed it." in text for text in second), second
    assert sum("make it new" in text for text in second) >= 2, second


def test_nothing_leaves_loopback(
    aider: Path, fake: ChatCompletionsFake, workspace: Path, tmp_path: Path
) -> None:
    """Every connect(2) of aider, traced: only the fake (its model list cache is fresh)."""
    log = tmp_path / "connect.log"
    fake.turns = [ModelTurn(text=EDIT)]
    result = run(
        [
            "run",
            "|loop:1| hi",
            "--store",
            "memory",
            "--json",
            "--worker",
            spec(traced(aider, log)),
        ],
        env_for(tmp_path / "home", aider, fake),
        cwd=workspace,
    )
    assert of_type(events(result.stdout), "round_finished")[0]["status"] == "completed"
    assert "127.0.0.1" in log.read_text()
    assert off_loopback(log) == []


def test_an_error_fails_the_round_with_the_cli_message(
    aider: Path, fake: ChatCompletionsFake, workspace: Path, tmp_path: Path
) -> None:
    fake.turns = [ModelTurn(error=openai_error(404, "model_not_found", "no such model"))]
    result = run(
        ["run", "|loop:1| hi", "--store", "memory", "--json", "--worker", spec(aider)],
        env_for(tmp_path / "home", aider, fake),
        cwd=workspace,
    )
    finished = of_type(events(result.stdout), "round_finished")
    assert finished[0]["status"] == "failed"
    assert "no such model" in finished[0]["error"]


def test_stop_mid_round_ends_the_aider_process_group(
    aider: Path, fake: ChatCompletionsFake, workspace: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    fake.turns = [ModelTurn(text="too late", delay=60)]
    proc = start(
        ["run", "|loop:2| hi", "--store", "memory", "--json", "--worker", spec(aider)],
        env_for(home, aider, fake),
        cwd=workspace,
    )
    try:
        read_until(proc, "round_started", 1)
        wait_for(lambda: len(fake.conversations) == 1, timeout=HANG)  # aider awaits its answer
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=HANG)
        assert proc.returncode == 3, err
        assert events(out)[-1]["phase"] == "cancelled"
        wait_for(lambda: processes_with(str(home)) == [], timeout=HANG)
    finally:
        kill_all(processes_with(str(home)))
        proc.kill()


def test_a_crash_mid_loop_resumes_and_restores_the_chat(
    aider: Path, fake: ChatCompletionsFake, workspace: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    state = tmp_path / "state"
    newer = EDIT.replace("old", "new").replace("=======\nnew", "=======\nnewer")
    fake.turns = [
        ModelTurn(text=EDIT),
        ModelTurn(text="never delivered", delay=60),
        ModelTurn(text=newer),
    ]
    env = env_for(home, aider, fake)
    args = ["--state", str(state)]
    proc = start(
        ["run", "|loop:2,inherit| edit", *args, "--json", "--worker", spec(aider)],
        env,
        cwd=workspace,
    )
    try:
        first = read_until(proc, "round_finished", 1)
        assert first["status"] == "completed"
        read_until(proc, "round_started", 2)
        wait_for(lambda: len(fake.conversations) == 2, timeout=HANG)
        proc.kill()  # a crash: no clean-up at all
        proc.communicate()
    finally:
        kill_all(processes_with(str(home)))  # the orphaned aider of round 2
    resumed = run(["resume", *args, "--json"], env, cwd=workspace)
    assert resumed.returncode == 0, resumed.stderr
    assert events(resumed.stdout)[-1]["phase"] == "complete"
    assert (workspace / "hello.txt").read_text() == "newer\n"
    history = run(["history", first["loop_id"], *args, "--json"], env, cwd=workspace)
    rounds = json.loads(history.stdout)["rounds"]
    assert [(r["round"], r["status"]) for r in rounds] == [(1, "completed"), (2, "completed")]
    # The re-run round 2 restored the chat history of round 1.
    assert any("Changed it." in text for text in user_messages(fake.conversations[2]))


def test_a_rate_limit_aider_gave_up_on_defers_the_round() -> None:
    """Output of aider 0.86.2 recorded against the fake answering 429 every time."""
    parser = AiderAdapter().parser()
    for line in (RECORDED / "aider-0.86.2-rate-limit.txt").read_text().splitlines():
        parser.feed(line)
    outcome = parser.finish(0, "")
    assert outcome.is_error
    assert outcome.error is not None
    assert outcome.error.startswith("litellm.RateLimitError")
    assert outcome.limit is not None
    assert outcome.limit.until is not None  # "Please try again in 20s."


def test_aider_token_counts_and_cache_fields_are_read() -> None:
    parser = AiderAdapter().parser()
    for line in [
        "Aider v0.86.2",
        "Added hello.txt to the chat.",
        "",
        "I changed it.",
        "TypeError: the old code passed a str here.",
        "",
        "Tokens: 2.5k sent, 1.2k cache write, 1.0k cache hit, 75 received. "
        "Cost: $0.01 message, $0.02 session.",
        "Applied edit to hello.txt",
    ]:
        parser.feed(line)
    outcome = parser.finish(0, "")
    assert outcome.reply == "I changed it.\nTypeError: the old code passed a str here."
    assert not outcome.is_error
    assert outcome.input_tokens == 1500
    assert outcome.cache_read_tokens == 1000
    assert outcome.cache_write_tokens == 1200
    assert outcome.output_tokens == 75
    assert outcome.cost_usd == 0.02
    assert parse_token_count("12k") == 12000
    assert parse_token_count("1.5M") == 1_500_000


def test_a_missing_aider_is_refused_naming_the_package(tmp_path: Path) -> None:
    with pytest.raises(Exception, match=r"aider.*pip install aider-chat"):
        parse_worker(f"aider:binary={tmp_path / 'nope'}")
