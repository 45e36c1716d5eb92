"""The ``claude`` worker kind driving the real Claude Code (pinned, from npm) against a fake
Anthropic Messages API on loopback.

Each test starts the real CLI at least once (about a second each on an idle machine): that is
the point of these tests, and why some take a few seconds.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
import trio

from loopactors.errors import WorkerSpecError
from loopactors.loops import AgentStep, RoundDeferred, RoundFinished
from loopactors.runtime import RuntimeConfig, open_runtime
from loopactors.workers import CliAgentWorker, RoundRequest, next_reset, parse_worker
from tests.hang import HANG, PROMPT

from ._fakes import QUIET, AnthropicFake, Turn, anthropic_error, billed_between, git_workspace
from ._loops import lookups_and_sends_off_loopback, off_loopback, traced


def config(tmp_path: Path, **changes: object) -> RuntimeConfig:
    return RuntimeConfig(
        store="sqlite", state_dir=tmp_path / "state", shutdown_grace=5.0, kill_grace=2.0
    ).replace(**changes)


def git(ws: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ws), *args], check=True, capture_output=True, text=True
    ).stdout


def request(prompt: str, **changes: object) -> RoundRequest:
    fields: dict[str, object] = {
        "loop_id": "l1",
        "round": 1,
        "rounds": 1,
        "mode": "fresh",
        "prompt": prompt,
        "task": prompt,
        "worker": "claude",
    }
    fields.update(changes)
    return RoundRequest(**fields)  # type: ignore[arg-type]


async def test_inherit_loop_edits_a_git_workspace_resumes_its_session_and_counts_cost(
    tmp_path: Path, anthropic: AnthropicFake, claude_env: dict[str, str]
) -> None:
    ws = git_workspace(tmp_path / "ws")
    anthropic.turns = [
        # round 1: write a file, then say so
        Turn(tools=[("Write", {"file_path": str(ws / "a.txt"), "content": "one\n"})]),
        Turn(text="Created a.txt.", usage={"input_tokens": 300, "output_tokens": 40}),
        # round 2 (resumed session): write and commit, then the promise
        Turn(
            tools=[
                ("Write", {"file_path": str(ws / "b.txt"), "content": "two\n"}),
                (
                    "Bash",
                    {"command": "git add -A && git -c user.name=a -c user.email=a@a commit -qm b"},
                ),
            ]
        ),
        Turn(
            text="Both files exist.\n<promise>DONE</promise>",
            usage={"input_tokens": 500, "output_tokens": 60, "cache_read_input_tokens": 1000},
        ),
    ]
    seen: list[object] = []
    async with open_runtime(config(tmp_path), observer=seen.append) as rt:
        handle = rt.handle(
            await rt.start(
                '|loop:3 objective="a.txt and b.txt exist"| create the files',
                worker=f"claude:workspace={ws}",
            )
        )
        final = await handle.wait()
        history = await handle.history()
    assert final.phase == "complete", final.reason
    assert final.reason == "objective met in round 2"
    assert (ws / "a.txt").read_text() == "one\n"
    assert git(ws, "log", "--format=%s").split() == ["b", "start"]
    first, second = history
    assert first.output == "Created a.txt."
    assert first.files_changed == 1
    assert first.commits == 0
    assert second.commits == 1
    # tokens: input + output + cache reads, over the round's model calls
    assert first.tokens == 100 + 20 + 300 + 40
    assert second.tokens == 100 + 20 + 500 + 60 + 1000
    assert first.cost_usd > 0
    assert second.cost_usd > 0
    assert final.cost_usd == pytest.approx(first.cost_usd + second.cost_usd)
    # the session: round 2 resumed round 1's, and the provider saw the earlier conversation
    assert first.session_id
    assert final.agent_session == second.session_id
    round2_first_call = anthropic.conversations[2]
    said = str(round2_first_call)
    assert "Created a.txt." in said
    assert "create the files" in said
    # the promise instruction went with the prompt; tool calls were published live
    assert "<promise>DONE</promise>" in str(anthropic.conversations[0])
    steps = [e for e in seen if isinstance(e, AgentStep)]
    assert [(s.round, s.tool) for s in steps] == [(1, "Write"), (2, "Write"), (2, "Bash")]
    assert steps[0].detail == str(ws / "a.txt")
    finished = [e for e in seen if isinstance(e, RoundFinished)]
    assert [e.cost_usd for e in finished] == [first.cost_usd, second.cost_usd]
    # the key never reaches the store
    state_files = (tmp_path / "state").rglob("*")
    assert not any(b"sk-ant-test" in p.read_bytes() for p in state_files if p.is_file())


async def test_a_mentioned_promise_does_not_end_the_loop(
    tmp_path: Path, anthropic: AnthropicFake, claude_env: dict[str, str]
) -> None:
    """The false completions users report: the tag echoed in a sentence, quoted, or in a code
    block is no claim; only the tag alone on the reply's last line is."""
    ws = git_workspace(tmp_path / "ws")
    anthropic.turns = [
        Turn(
            text="I will end with `<promise>DONE</promise>` only once the tests pass. "
            "Two still fail: not done yet."
        ),
        Turn(text='The rule is:\n```\n<promise>DONE</promise>\n```\nStill "not done".'),
        Turn(text="All tests pass now.\n\n<promise>DONE</promise>\n"),
    ]
    async with open_runtime(config(tmp_path)) as rt:
        handle = rt.handle(
            await rt.start(
                '|loop:5 objective="the tests pass"| fix the tests',
                worker=f"claude:workspace={ws}",
                stale_rounds_limit=5,  # the replies change no file
            )
        )
        final = await handle.wait()
    assert final.phase == "complete", final.reason
    assert final.reason == "objective met in round 3"
    assert final.completed_rounds == 3


async def test_each_inherit_round_costs_what_its_own_requests_cost(
    tmp_path: Path, anthropic: AnthropicFake, claude_env: dict[str, str]
) -> None:
    """Claude Code reports a resumed session's running total as ``total_cost_usd``: the
    worker records the difference, so a round costs what its requests were billed."""
    ws = git_workspace(tmp_path / "ws")
    anthropic.turns = [
        Turn(text="one", usage={"input_tokens": 1000, "output_tokens": 100}),
        Turn(
            text="two",
            usage={
                "input_tokens": 2000,
                "output_tokens": 300,
                "cache_read_input_tokens": 10_000,
                "cache_creation_input_tokens": 1000,
            },
        ),
        Turn(text="three", usage={"input_tokens": 500, "output_tokens": 50}),
    ]
    async with open_runtime(config(tmp_path)) as rt:
        handle = rt.handle(
            await rt.start(
                "|loop:3| go on",
                worker=f"claude:workspace={ws},model=claude-sonnet-4-5",
                stale_rounds_limit=5,
            )
        )
        final = await handle.wait()
        history = await handle.history()
    assert final.completed_rounds == 3, final.reason
    assert len({r.session_id for r in history}) == 1  # one session, resumed twice
    ends = [r.started_at for r in history[1:]] + [time.time()]
    for record, end in zip(history, ends, strict=True):
        assert record.cost_usd == pytest.approx(billed_between(anthropic, record.started_at, end))
    assert [r.cost_usd for r in history] == pytest.approx([0.0045, 0.01725, 0.00225])
    # the session's running total is kept with each round
    assert [r.session_cost_usd for r in history] == pytest.approx([0.0045, 0.02175, 0.024])
    assert final.cost_usd == pytest.approx(0.024)
    assert final.agent_session_cost == pytest.approx(0.024)


async def test_fresh_mode_starts_a_new_session_each_round(
    tmp_path: Path, anthropic: AnthropicFake, claude_env: dict[str, str]
) -> None:
    ws = git_workspace(tmp_path / "ws")
    anthropic.turns = [Turn(text="reply-one-xyzzy"), Turn(text="reply-two")]
    async with open_runtime(config(tmp_path)) as rt:
        handle = rt.handle(
            await rt.start("|loop:2,fresh| look around", worker=f"claude:workspace={ws}")
        )
        final = await handle.wait()
        history = await handle.history()
    assert final.completed_rounds == 2
    assert history[0].session_id != history[1].session_id
    assert "reply-one-xyzzy" not in str(anthropic.conversations[1])


async def test_an_error_result_fails_the_round_with_the_clis_message(
    tmp_path: Path, anthropic: AnthropicFake, claude_env: dict[str, str]
) -> None:
    refusal = anthropic_error(403, "permission_error", "this key may not use claude-nope-9")
    anthropic.turns = [Turn(error=refusal)] * 3
    worker = parse_worker(f"claude:workspace={git_workspace(tmp_path / 'ws')}")
    result = await worker.run(request("hi"), None)
    assert result.status == "failed"
    assert result.error is not None
    assert "may not use claude-nope-9" in result.error
    assert result.session_id  # kept even for a failed round


async def test_a_rate_limit_defers_the_round_then_it_completes(
    tmp_path: Path, anthropic: AnthropicFake, claude_env: dict[str, str]
) -> None:
    ws = git_workspace(tmp_path / "ws")
    anthropic.turns = [
        Turn(
            error=anthropic_error(429, "rate_limit_error", "rate limited", **{"retry-after": "1"})
        ),
        Turn(tools=[("Write", {"file_path": str(ws / "c.txt"), "content": "c\n"})]),
        Turn(text="wrote c"),
    ]
    seen: list[object] = []
    async with open_runtime(config(tmp_path), observer=seen.append) as rt:
        handle = rt.handle(
            await rt.start(
                "|loop:1| write c", worker=f"claude:workspace={ws},backoff=0.5,max_turns=5"
            )
        )
        waiting = await handle.wait_phase("dispatching")
        final = await handle.wait()
        history = await handle.history()
    deferred = [e for e in seen if isinstance(e, RoundDeferred)]
    assert len(deferred) == 1
    assert deferred[0].round == 1
    assert "429" in deferred[0].reason
    assert deferred[0].until > deferred[0].at
    assert waiting.phase == "dispatching"
    assert final.phase == "complete"
    assert final.consecutive_failures == 0
    assert [r.status for r in history] == ["completed"]
    assert history[0].output == "wrote c"
    assert (ws / "c.txt").exists()


async def test_stop_mid_round_ends_the_cli_and_its_group(
    tmp_path: Path, anthropic: AnthropicFake, claude_env: dict[str, str]
) -> None:
    answered = trio.Event()
    release = __import__("threading").Event()
    handle_request = anthropic.handle

    def slow(req):  # type: ignore[no-untyped-def]
        if isinstance(req.body, dict) and req.body.get("tools"):
            trio.from_thread.run_sync(answered.set, trio_token=token)
            release.wait(HANG)
        return handle_request(req)

    token = trio.lowlevel.current_trio_token()
    anthropic.server.handler = slow
    ws = git_workspace(tmp_path / "ws")
    try:
        async with open_runtime(config(tmp_path)) as rt:
            handle = rt.handle(
                await rt.start("|loop:3| think long", worker=f"claude:workspace={ws}")
            )
            with trio.fail_after(HANG):
                await answered.wait()
            pids = _processes_of(handle.loop_id)
            assert pids, "the CLI should be running"
            started = time.monotonic()
            final = await handle.stop()
            assert final.phase == "cancelled"
            with trio.fail_after(HANG):
                while _processes_of(handle.loop_id):
                    await trio.sleep(0.05)
            assert time.monotonic() - started < PROMPT
            history = await handle.history()
    finally:
        release.set()
    assert [r.status for r in history] == ["cancelled"]


def _processes_of(loop_id: str) -> list[int]:
    """Processes whose environment names this loop (the CLI and whatever it started)."""
    found = []
    marker = f"LOOPACTORS_LOOP_ID={loop_id}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().split()[2]
        except OSError:
            continue
        if marker in environ.split(b"\0") and state != "Z":
            found.append(int(entry.name))
    return found


def test_a_missing_binary_is_refused_naming_it_and_its_package(tmp_path: Path) -> None:
    with pytest.raises(WorkerSpecError, match=r"'claude-nowhere'.*npm install -g @anthropic-ai"):
        parse_worker("claude:binary=claude-nowhere")


async def test_markers_of_an_enclosing_session_are_removed(
    tmp_path: Path,
    anthropic: AnthropicFake,
    claude_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Inside a Claude Code session these are set; the nested CLI must not see them.
    monkeypatch.setenv("CLAUDECODE", "1")
    monkeypatch.setenv("CLAUDE_CODE_ENTRYPOINT", "cli")
    monkeypatch.setenv("LOOPACTORS_TEST_PASSES", "yes")
    anthropic.turns = [Turn(tools=[("Bash", {"command": "env > seen-env.txt"})]), Turn(text="ok")]
    ws = git_workspace(tmp_path / "ws")
    worker = parse_worker(f"claude:workspace={ws}")
    assert isinstance(worker, CliAgentWorker)
    env = worker.environment(request("dump env"))
    assert "CLAUDECODE" not in env
    assert "CLAUDE_CODE_ENTRYPOINT" not in env
    assert env["ANTHROPIC_BASE_URL"] == anthropic.url  # provider settings pass through
    result = await worker.run(request("dump env"), None)
    assert result.status == "completed", result.error  # the nested CLI started
    seen = (ws / "seen-env.txt").read_text().splitlines()
    assert "LOOPACTORS_LOOP_ID=l1" in seen
    assert "LOOPACTORS_TEST_PASSES=yes" in seen
    assert os.environ["CLAUDECODE"] == "1"  # this process keeps its own


async def test_one_limit_holds_back_the_other_loops_of_the_same_account(
    tmp_path: Path, anthropic: AnthropicFake, claude_env: dict[str, str]
) -> None:
    anthropic.turns = [Turn(error=anthropic_error(429, "rate_limit_error", "slow down"))]
    asked: list[tuple[float, str]] = []
    answer = anthropic.handle

    def logged(req):  # type: ignore[no-untyped-def]
        if isinstance(req.body, dict) and req.body.get("tools"):
            asked.append((time.time(), str(req.body.get("messages"))))
        return answer(req)

    anthropic.server.handler = logged
    ws_a, ws_b = git_workspace(tmp_path / "a"), git_workspace(tmp_path / "b")
    seen: list[object] = []
    async with open_runtime(config(tmp_path), observer=seen.append) as rt:
        first = rt.handle(
            await rt.start("|loop:1| task alpha", worker=f"claude:workspace={ws_a},backoff=1.5")
        )
        while not any(isinstance(e, RoundDeferred) for e in seen):
            await trio.sleep(0.02)
        second = rt.handle(
            await rt.start("|loop:1| task beta", worker=f"claude:workspace={ws_b},backoff=1.5")
        )
        finals = [await first.wait(), await second.wait()]
    assert [f.phase for f in finals] == ["complete", "complete"]
    deferrals = [e for e in seen if isinstance(e, RoundDeferred)]
    assert [d.loop_id for d in deferrals] == [first.loop_id, second.loop_id]
    assert deferrals[1].reason.startswith("held back")
    assert deferrals[1].until == deferrals[0].until  # one wait for both
    beta = [at for at, said in asked if "task beta" in said]
    assert beta
    assert min(beta) >= deferrals[0].until  # the held loop asked nothing before the reset


async def test_a_lost_session_is_replaced_by_a_new_one_with_the_full_prompt(
    tmp_path: Path, anthropic: AnthropicFake, claude_env: dict[str, str]
) -> None:
    anthropic.turns = [Turn(text="started over")]
    worker = parse_worker(f"claude:workspace={git_workspace(tmp_path / 'ws')}")
    lost = "0b5b3c1e-1111-4222-8333-444455556666"  # no such session in this HOME
    result = await worker.run(
        request("seed text\n\n---\n\ntask text", task="task text", mode="inherit", session=lost),
        None,
    )
    assert result.status == "completed", result.error
    assert result.output == "started over"
    assert result.session_id != lost
    assert "seed text" in str(anthropic.conversations[0])


async def test_claude_code_connects_to_nothing_but_the_fake(
    tmp_path: Path, anthropic: AnthropicFake, claude_env: dict[str, str], claude_bin: Path
) -> None:
    """Every connect(2) of Claude Code and its children, traced: only 127.0.0.1 (with the
    switches of the test environment, see _fakes.QUIET)."""
    log = tmp_path / "connect.log"
    ws = git_workspace(tmp_path / "ws")
    anthropic.turns = [
        Turn(tools=[("Bash", {"command": "echo hi > hi.txt"})]),
        Turn(text="said hi"),
    ]
    worker = parse_worker(f"claude:workspace={ws},binary={traced(claude_bin, log)}")
    result = await worker.run(request("say hi"), None)
    assert result.status == "completed", result.error
    assert (ws / "hi.txt").exists()
    assert "connect(" in log.read_text()  # the trace saw the calls to the fake
    assert off_loopback(log) == []


async def test_the_worker_itself_keeps_claude_code_off_the_network(
    tmp_path: Path,
    anthropic: AnthropicFake,
    claude_env: dict[str, str],
    claude_bin: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without any quiet switch in the user's environment, a 2-round loop against a
    loopback endpoint connects to that endpoint only and looks up no name: the worker sets
    Claude Code's own switches (docs/agent-clis.md, claude)."""
    for name in QUIET:
        monkeypatch.delenv(name, raising=False)
    log = tmp_path / "net.log"
    ws = git_workspace(tmp_path / "ws")
    anthropic.turns = [Turn(text="one"), Turn(text="two")]
    binary = traced(claude_bin, log, "connect,sendto,sendmsg,sendmmsg")
    async with open_runtime(config(tmp_path)) as rt:
        handle = rt.handle(
            await rt.start("|loop:2| look around", worker=f"claude:workspace={ws},binary={binary}")
        )
        final = await handle.wait()
    assert final.completed_rounds == 2, final.reason
    traced_calls = log.read_text()
    assert "connect(" in traced_calls  # the trace saw the calls to the fake
    assert off_loopback(log) == []
    assert lookups_and_sends_off_loopback(log) == []


async def test_a_daily_budget_defers_an_accounts_loops_until_the_reset_across_restarts(
    tmp_path: Path, anthropic: AnthropicFake, claude_env: dict[str, str]
) -> None:
    """$0.0045 a round against $0.008 a day for the account: round 2 brings the day's spend
    over it, so round 3 waits for the next reset; after a restart, the store's rounds of the
    day still count, and a new loop on the same account waits without calling the model."""
    ws = git_workspace(tmp_path / "ws")
    usage = {"input_tokens": 1000, "output_tokens": 100}
    anthropic.turns = [Turn(text=f"reply {n}", usage=usage) for n in range(4)]
    budget = {"daily_cost_usd": 0.008, "reset_hour": 4}
    worker = f"claude:workspace={ws},model=claude-sonnet-4-5"
    seen: list[object] = []
    async with open_runtime(config(tmp_path, budget=budget), observer=seen.append) as rt:
        handle = rt.handle(await rt.start("|loop:3| go on", worker=worker, stale_rounds_limit=5))
        while (await handle.get()).deferred_until is None:
            await trio.sleep(0.05)
        waiting = await handle.get()
        history = await handle.history()
    assert [(r.round, r.status) for r in history] == [
        (1, "completed"),
        (2, "completed"),
        (3, "deferred"),
    ]
    assert history[0].account is not None
    assert history[0].account.startswith("claude:")
    (deferred,) = [e for e in seen if isinstance(e, RoundDeferred)]
    assert deferred.reason.startswith("held back: daily budget reached: claude account ")
    assert "spent $0.0090 of $0.0080 today (daily_cost_usd)" in deferred.reason
    reset = next_reset(time.time(), 4)
    assert waiting.deferred_until == pytest.approx(reset)
    assert len(anthropic.billed) == 2
    async with open_runtime(config(tmp_path, budget=budget)) as rt:
        other = rt.handle(await rt.start("|loop:1| another", worker=worker))
        while (await other.get()).deferred_until is None:
            await trio.sleep(0.05)
        assert (await other.get()).deferred_until == pytest.approx(reset)
    assert len(anthropic.billed) == 2  # nobody called the model over the budget
