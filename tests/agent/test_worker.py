"""The agent worker kind: its spec, one round, and a loop of agent rounds in the runtime."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loopactors.agent import Transcript
from loopactors.cli import main
from loopactors.errors import WorkerSpecError
from loopactors.loops import AgentStep, LoopFinished
from loopactors.loops._rules import SEPARATOR
from loopactors.runtime import RuntimeConfig, open_runtime
from loopactors.storage import open_backend
from loopactors.workers import AgentWorker, parse_worker
from tests.hang import HANG, PROMPT

from ..workers.sample_fns import make_request
from .chat_server import ChatServer, completion


@pytest.fixture(autouse=True)
def no_model_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LOOPACTORS_LLM_BASE_URL", "LOOPACTORS_LLM_MODEL", "LOOPACTORS_LLM_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def test_spec_options(tmp_path: Path) -> None:
    worker = parse_worker(
        f"agent:model=qwen,base_url=http://localhost:8080/v1/,max_iterations=7,"
        f"workspace={tmp_path},context_window=32000,stream=false,timeout=9.5"
    )
    assert isinstance(worker, AgentWorker)
    assert worker.settings.base_url == "http://localhost:8080/v1"
    assert (worker.settings.model, worker.settings.stream, worker.settings.timeout) == (
        "qwen",
        False,
        9.5,
    )
    assert worker.config.max_iterations == 7
    assert worker.config.compaction.context_window == 32000
    assert worker.workspace == tmp_path.resolve()


def test_spec_falls_back_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPACTORS_LLM_BASE_URL", "http://localhost:11434/v1")
    monkeypatch.setenv("LOOPACTORS_LLM_MODEL", "llama3")
    monkeypatch.setenv("LOOPACTORS_LLM_API_KEY", "sk-from-env")
    worker = parse_worker("agent")
    assert isinstance(worker, AgentWorker)
    assert (worker.settings.model, worker.settings.api_key) == ("llama3", "sk-from-env")
    assert worker.config.max_iterations == 500
    assert "sk-from-env" not in repr(worker)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("agent", "LOOPACTORS_LLM_BASE_URL and LOOPACTORS_LLM_MODEL"),
        ("agent:model=m,base_url=u,api_key=sk-1", "api_key cannot be given in the spec"),
        ("agent:model=m,base_url=u,color=red", "option 'color' is unknown"),
        ("agent:model=m,model=n,base_url=u", "option 'model' is given twice"),
        ("agent:model=m,base_url=u,max_iterations=0", "max_iterations must be an integer >= 1"),
        ("agent:model=m,base_url=u,stream=yes", "stream must be true or false"),
        ("agent:model=m,base_url=u,timeout=-1", "timeout must be seconds > 0"),
        ("agent:model=m,base_url=u,workspace=/no/such/dir", "is not a directory"),
        ("agent:model", "is not NAME=VALUE"),
        ("agent:model=m,base_url=u,bash=maybe", "bash must be one of on, sandbox, off"),
    ],
)
def test_bad_specs_are_refused(spec: str, message: str) -> None:
    with pytest.raises(WorkerSpecError, match=message):
        parse_worker(spec)


async def test_one_round(tmp_path: Path) -> None:
    replies = [
        completion(calls=[("c", "write", {"path": "out.txt", "content": "42"})], prompt_tokens=50),
        completion("wrote the answer", prompt_tokens=80),
    ]
    with ChatServer(replies) as server:
        worker = parse_worker(f"agent:model=m,base_url={server.base_url},workspace={tmp_path}")
        result = await worker.run(make_request(prompt="write 42 to out.txt"), None)
    assert (result.status, result.output, result.error) == ("completed", "wrote the answer", None)
    assert result.tokens == 50 + 80 + 5 + 5
    assert (tmp_path / "out.txt").read_text() == "42"
    transcript = Transcript.from_builtins(result.transcript)
    assert [e.message.role for e in transcript.entries] == [
        "system", "user", "assistant", "tool", "assistant",
    ]  # fmt: skip
    assert transcript.entries[1].message.content == "write 42 to out.txt"


@pytest.mark.parametrize("mode", ["off", "sandbox"])
async def test_the_bash_option_reaches_the_tools_and_the_sub_agents(
    tmp_path: Path, mode: str
) -> None:
    from loopactors.agent import find_bwrap
    from loopactors.errors import AgentError

    if mode == "sandbox":
        try:
            find_bwrap()
        except AgentError:
            pytest.skip("bubblewrap (bwrap) is not installed")
    replies = [
        completion(calls=[("c", "bash", {"command": f"touch {tmp_path}/../escaped"})]),
        completion("done"),
    ]
    with ChatServer(replies) as server:
        spec = f"agent:model=m,base_url={server.base_url},workspace={tmp_path},bash={mode}"
        worker = parse_worker(spec)
        assert isinstance(worker, AgentWorker)
        assert f"bash={mode}" in (worker.subagent_spec() or "")
        result = await worker.run(make_request(prompt="escape"), None)
    offered = [tool["function"]["name"] for tool in server.requests[0]["tools"]]
    assert ("bash" in offered) == (mode == "sandbox")
    assert result.status == "completed"
    assert not (tmp_path.parent / "escaped").exists()


async def test_a_failed_model_call_fails_the_round_with_the_providers_message(
    tmp_path: Path,
) -> None:
    from .chat_server import Reply

    with ChatServer([Reply(status=400, body={"error": {"message": "model not found"}})]) as server:
        worker = parse_worker(f"agent:model=m,base_url={server.base_url},workspace={tmp_path}")
        result = await worker.run(make_request(), None)
    assert result.status == "failed"
    assert result.error is not None
    assert "model not found" in result.error


def stored_events(state_dir: Path, loop_id: str) -> list[Any]:
    backend = open_backend("sqlite", state_dir)
    try:
        return list(backend.events(loop_id))
    finally:
        backend.close()


async def test_three_agent_rounds_in_inherit_mode(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "test_calc.py").write_text("assert 1 + 1 == 3\n")
    replies = [
        completion(calls=[("r", "read", {"path": "test_calc.py"})]),
        completion(
            calls=[("e", "edit", {"path": "test_calc.py", "old_string": "3", "new_string": "2"})]
        ),
        completion(calls=[("b", "bash", {"command": "python3 test_calc.py && echo passed"})]),
        completion("Round 1: fixed the assertion; the test passes."),
        completion(calls=[("b2", "bash", {"command": "python3 test_calc.py && echo passed"})]),
        completion("Round 2: checked again, still passing."),
        completion("Round 3: nothing left to fix."),
    ]
    config = RuntimeConfig(store="sqlite", state_dir=tmp_path / "state", shutdown_grace=5.0)
    with ChatServer(replies) as server:
        spec = f"agent:model=m,base_url={server.base_url},workspace={workspace}"
        async with open_runtime(config) as runtime:
            loop_id = "agent-steps"
            with runtime.subscribe(loop_id) as events:  # before the start: nothing is missed
                handle = runtime.handle(
                    await runtime.start(
                        "|loop:3| fix the failing test", worker=spec, loop_id=loop_id
                    )
                )
                seen = []
                async for event in events:
                    seen.append(event)
                    if isinstance(event, LoopFinished):
                        break
            final = await handle.wait()
            history = await handle.history()
    assert final.phase == "complete", history
    # Each tool call was published live, as the coding-agent CLI kinds publish theirs.
    steps = [(e.round, e.tool, e.detail) for e in seen if isinstance(e, AgentStep)]
    assert steps == [
        (1, "read", "test_calc.py"),
        (1, "edit", "test_calc.py"),
        (1, "bash", "python3 test_calc.py && echo passed"),
        (2, "bash", "python3 test_calc.py && echo passed"),
    ]
    # Live only: the store keeps the rounds' transcripts, not the steps.
    assert not [e for e in stored_events(tmp_path / "state", loop_id) if isinstance(e, AgentStep)]
    assert [r.status for r in history] == ["completed"] * 3
    assert (workspace / "test_calc.py").read_text() == "assert 1 + 1 == 2\n"
    assert [r.output for r in history] == [
        "Round 1: fixed the assertion; the test passes.",
        "Round 2: checked again, still passing.",
        "Round 3: nothing left to fix.",
    ]
    assert [r.tokens for r in history] == [4 * 105, 2 * 105, 105]
    assert final.tokens_used == 7 * 105
    # Round 2's prompt is seeded with round 1's output (inherit mode).
    round_two_prompt = server.requests[4]["messages"][1]["content"]
    assert round_two_prompt == history[0].output + SEPARATOR + "fix the failing test"
    transcripts = [Transcript.from_builtins(r.transcript) for r in history]
    assert [len(t) for t in transcripts] == [9, 5, 3]
    bash_result = transcripts[0].entries[7].message
    assert (bash_result.name, bash_result.content) == ("bash", "passed\n")
    assert server.unexpected == 0


def test_history_shows_the_transcript(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import trio

    with ChatServer([completion("all done")]) as server:
        spec = f"agent:model=m,base_url={server.base_url},workspace={tmp_path}"

        async def one_loop() -> str:
            config = RuntimeConfig(store="sqlite", state_dir=tmp_path / "state")
            async with open_runtime(config) as runtime:
                handle = runtime.handle(await runtime.start("|loop:1| say done", worker=spec))
                await handle.wait()
                return handle.loop_id

        loop_id = trio.run(one_loop)
    capsys.readouterr()
    assert main(["history", loop_id, "--state", str(tmp_path / "state"), "--transcript"]) == 0
    text = capsys.readouterr().out
    assert "=== round 1 transcript" in text
    assert "--- user\nsay done\n--- assistant\nall done" in text
    assert main(["history", loop_id, "--state", str(tmp_path / "state"), "--json"]) == 0
    rounds = json.loads(capsys.readouterr().out)["rounds"]
    assert [e["message"]["role"] for e in rounds[0]["transcript"]] == [
        "system",
        "user",
        "assistant",
    ]


def test_in_workspace() -> None:
    from loopactors.workers import in_workspace

    assert in_workspace("agent", "/tmp") == "agent:workspace=/tmp"
    assert in_workspace("agent:model=m", "/tmp") == "agent:model=m,workspace=/tmp"
    assert in_workspace("agent:workspace=/srv", "/tmp") == "agent:workspace=/srv"
    with pytest.raises(WorkerSpecError, match="a workspace applies to the kinds agent, "):
        in_workspace("scripted", "/tmp")


def test_cli_run_with_the_agent_worker_and_a_workspace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "notes.txt").write_text("remember the milk\n")
    replies = [
        completion(calls=[("r", "read", {"path": "notes.txt"})]),
        completion("The note says: remember the milk."),
    ]
    with ChatServer(replies) as server:
        monkeypatch.setenv("LOOPACTORS_LLM_BASE_URL", server.base_url)
        monkeypatch.setenv("LOOPACTORS_LLM_MODEL", "m")
        code = main(
            [
                "run", "|loop:1| what does the note say?", "--worker", "agent",
                "--workspace", str(tmp_path), "--store", "memory", "--json",
            ]
        )  # fmt: skip
    assert code == 0
    started = json.loads(capsys.readouterr().out.splitlines()[0])
    assert started["worker"] == f"agent:workspace={tmp_path.resolve()}"
    assert "remember the milk" in server.requests[1]["messages"][-1]["content"]
    assert main(["run", "|loop:1| x", "--workspace", str(tmp_path), "--store", "memory"]) != 0
    assert "a workspace applies to the kinds agent, " in capsys.readouterr().err


async def test_an_error_inside_the_model_stream_fails_the_round_with_its_message(
    tmp_path: Path,
) -> None:
    from .chat_server import Reply

    broken = Reply(chunks=[{"error": {"message": "upstream model overloaded", "type": "server"}}])
    with ChatServer([broken]) as server:
        worker = parse_worker(f"agent:model=m,base_url={server.base_url},workspace={tmp_path}")
        result = await worker.run(make_request(), None)
    assert result.status == "failed"
    assert result.error is not None
    assert "upstream model overloaded" in result.error
    assert "cut off" not in result.error
    assert len(server.requests) == 1


async def test_stopping_an_agent_loop_in_a_catastrophic_grep(tmp_path: Path) -> None:
    """The model asks for ``grep (a+)+$`` over a 100 MB workspace of ``a...ab`` lines (with
    Python's ``re`` each line alone takes seconds, holding the GIL: the node froze; with RE2
    the whole walk takes about 10 s of a worker thread). While it runs the runtime answers;
    a stop returns at once and the grep's result never reaches the model; a second loop with
    a 1 s round timeout times out on time. About 3 s: the workspace is written first."""
    import time

    import trio

    workspace = tmp_path / "ws"
    workspace.mkdir()
    chunk = ("a" * 32 + "b\n") * 30_000  # 1 MB
    for n in range(100):
        (workspace / f"f{n:03}.txt").write_text(chunk)
    grep = completion(calls=[("g", "grep", {"pattern": "(a+)+$"})])
    config = RuntimeConfig(store="sqlite", state_dir=tmp_path / "state", shutdown_grace=5.0)
    with ChatServer([grep, grep, completion("never asked")]) as server:
        spec = f"agent:model=m,base_url={server.base_url},workspace={workspace},stream=false"
        async with open_runtime(config) as runtime:
            handle = runtime.handle(await runtime.start("|loop:1| find it", worker=spec))
            with trio.fail_after(HANG):
                while not server.requests:  # the model has been asked: its answer is a grep
                    await trio.sleep(0.01)
            await trio.sleep(0.3)  # the grep is under way
            with trio.fail_after(HANG):
                assert (await runtime.get(handle.loop_id)).phase == "awaiting_worker"
                assert len(await runtime.list()) == 1
            assert len(server.requests) == 1  # the grep has not returned
            stopped_at = time.monotonic()
            with trio.fail_after(HANG):
                state = await handle.stop()
            took_to_stop = time.monotonic() - stopped_at
            rounds = await handle.history()
            await trio.sleep(0.2)
            assert len(server.requests) == 1  # its result never went to the model

            timed = runtime.handle(
                await runtime.start("|loop:1| find it again", worker=spec, round_timeout=1.0)
            )
            started_at = time.monotonic()
            with trio.fail_after(HANG):
                timed_state = await timed.wait()
            took_to_time_out = time.monotonic() - started_at
            timed_rounds = await timed.history()
            with trio.fail_after(HANG):
                assert len(await runtime.list()) == 2  # the runtime still answers
    assert state.phase == "cancelled"
    assert [r.status for r in rounds] == ["cancelled"]
    assert took_to_stop < PROMPT, took_to_stop  # the grep alone would take ages
    assert [r.status for r in timed_rounds] == ["timed_out"]
    assert timed_state.terminal
    assert took_to_time_out < PROMPT, took_to_time_out
    assert len(server.requests) == 2  # the second loop's first ask, and nothing after it
