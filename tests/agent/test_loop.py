"""run_agent end to end against a real chat-completions server on loopback."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import trio

from loopactors.agent import (
    AgentConfig,
    AgentHooks,
    ChatClient,
    ChatReply,
    Message,
    MessageQueue,
    ModelSettings,
    QueuedMessage,
    ToolCall,
    ToolDecision,
    ToolSet,
    Transcript,
    core_tools,
    deny,
    run_agent,
)
from loopactors.agent._loop import CONTINUE_AFTER_CUT
from tests.hang import HANG

from .chat_server import ChatServer, completion, stream


@pytest.fixture
async def server() -> AsyncIterator[ChatServer]:
    with ChatServer() as chat:
        yield chat


def client(server: ChatServer, **options: Any) -> ChatClient:
    options.setdefault("backoff", 0.01)
    return ChatClient(ModelSettings(base_url=server.base_url, model="m", **options))


def call(call_id: str, name: str, **arguments: Any) -> tuple[str, str, dict[str, Any]]:
    return (call_id, name, arguments)


def roles(transcript: Transcript) -> list[str]:
    return [entry.message.role for entry in transcript.entries]


def assert_consistent(transcript: Transcript) -> None:
    """Every tool call is followed by exactly its results, in call order."""
    entries = [e.message for e in transcript.entries]
    for index, message in enumerate(entries):
        if message.tool_calls:
            ids = [c.id for c in message.tool_calls]
            after = entries[index + 1 : index + 1 + len(ids)]
            assert [m.tool_call_id for m in after] == ids
            assert all(m.role == "tool" for m in after)


async def test_reads_edits_runs_a_command_and_answers(server: ChatServer, tmp_path: Path) -> None:
    (tmp_path / "greet.py").write_text('print("helo")\n')
    server.add(
        stream(["Reading."], calls=[("c1", "read", '{"path": '), ("c1", "read", '"greet.py"}')]),
        completion(
            calls=[call("c2", "edit", path="greet.py", old_string="helo", new_string="hello")]
        ),
        stream([], calls=[("c3", "bash", json.dumps({"command": "python3 greet.py"}))]),
        stream(["Fixed the typo; ", "it prints hello."], prompt_tokens=300),
    )
    async with client(server) as model:
        result = await run_agent(
            "fix the typo in greet.py", model=model, tools=ToolSet(core_tools()), workspace=tmp_path
        )
    assert result.status == "completed", result.error
    assert result.output == "Fixed the typo; it prints hello."
    assert (tmp_path / "greet.py").read_text() == 'print("hello")\n'
    assert result.iterations == 4
    assert (result.tokens.calls, result.tokens.prompt_tokens) == (4, 600)
    assert result.tokens.completion_tokens == 20
    assert roles(result.transcript) == [
        "system", "user", "assistant", "tool", "assistant", "tool", "assistant", "tool",
        "assistant",
    ]  # fmt: skip
    tool_results = [e.message for e in result.transcript.entries if e.message.role == "tool"]
    assert '1\tprint("helo")' in tool_results[0].content
    assert tool_results[1].content == "replaced 1 occurrence(s) in greet.py"
    assert tool_results[2].content == "hello\n"
    assert not any(m.is_error for m in tool_results)
    # The model saw the tools and, on the second call, the first tool result.
    assert {t["function"]["name"] for t in server.requests[0]["tools"]} == {
        "read", "write", "edit", "glob", "grep", "bash",
    }  # fmt: skip
    second = server.requests[1]["messages"]
    assert second[2]["tool_calls"][0]["function"]["name"] == "read"
    assert second[3]["role"] == "tool"
    assert second[3]["tool_call_id"] == "c1"
    assert "text" not in {e.kind for e in result.events}  # streamed text is live only
    stages = [e.detail for e in result.events if e.kind.startswith("stage_")]
    assert stages[:2] == ["receive", "receive: done"]
    assert len(stages) % 2 == 0


async def test_a_prompt_that_arrives_during_the_answer_is_handled_in_the_same_run(
    server: ChatServer,
) -> None:
    queue = MessageQueue()

    class LateInput(AgentHooks):
        async def after_model(self, reply: ChatReply) -> None:
            if reply.content == "first answer":
                queue.push(QueuedMessage(kind="prompt", text="and one more thing"))
                queue.push(QueuedMessage(kind="info", text="fyi"))

    server.add(completion("first answer"), completion("second answer"))
    async with client(server, stream=False) as model:
        result = await run_agent(
            "question", model=model, tools=ToolSet(), queue=queue, hooks=[LateInput()]
        )
    assert result.output == "second answer"
    assert result.iterations == 2
    last = server.requests[1]["messages"]
    assert [m["content"] for m in last[-2:]] == [
        "and one more thing",
        "<system-reminder>\nfyi\n</system-reminder>",
    ]


async def test_info_alone_never_runs_the_model(server: ChatServer) -> None:
    queue = MessageQueue()
    queue.push(QueuedMessage(kind="info", text="just so you know"))
    async with client(server) as model:
        result = await run_agent(None, model=model, tools=ToolSet(), queue=queue)
    assert result.status == "completed"
    assert result.iterations == 0
    assert server.requests == []
    assert roles(result.transcript) == ["system", "user"]


async def test_the_budget_counts_model_calls_only(server: ChatServer, tmp_path: Path) -> None:
    config = AgentConfig(max_iterations=1)
    server.add(completion("done in one"))
    async with client(server) as model:
        result = await run_agent("q", model=model, tools=ToolSet(), config=config)
    assert (result.status, result.output) == ("completed", "done in one")

    server.add(
        completion(calls=[call("a", "glob", pattern="*")]),
        completion(calls=[call("b", "glob", pattern="*")]),
    )
    config = AgentConfig(max_iterations=2)
    async with client(server) as model:
        result = await run_agent(
            "q", model=model, tools=ToolSet(core_tools()), config=config, workspace=tmp_path
        )
    assert result.status == "failed"
    assert result.error == "the agent used its budget of 2 model calls without finishing"
    assert result.iterations == 2
    assert_consistent(result.transcript)


async def test_tool_errors_continue_and_a_streak_raises_a_waking_warning(
    server: ChatServer, tmp_path: Path
) -> None:
    server.add(
        completion(calls=[call("a", "read", path="nope"), call("b", "glob", pattern="*")]),
        completion(calls=[call("c", "read", path="nope"), call("d", "nosuch")]),
        completion("I give up on that file"),
    )
    config = AgentConfig(failure_streak=2)
    async with client(server) as model:
        result = await run_agent(
            "q", model=model, tools=ToolSet(core_tools()), config=config, workspace=tmp_path
        )
    assert result.status == "completed"
    results = [e.message for e in result.transcript.entries if e.message.role == "tool"]
    assert [(m.tool_call_id, m.is_error) for m in results] == [
        ("a", True), ("b", False), ("c", True), ("d", True),
    ]  # fmt: skip
    assert results[3].content.startswith("Tool 'nosuch' not found; available: read, write")
    warning = server.requests[2]["messages"][-1]["content"]
    assert "tool 'read' has failed 2 times in a row" in warning
    assert warning.count("<system-reminder>") == 1
    assert [e.kind for e in result.events].count("tool_failure_warning") == 1


async def test_a_cut_stream_is_continued(server: ChatServer) -> None:
    server.add(stream(["I will start by"], cut="reset"), stream([" checking", " the file."]))
    live: list[str] = []
    async with client(server) as model:
        result = await run_agent(
            "q",
            model=model,
            tools=ToolSet(),
            on_event=lambda e: live.append(e.detail) if e.kind == "text" else None,
        )
    assert live == ["I will start by", " checking", " the file."]
    assert result.status == "completed"
    assert result.output == " checking the file."
    second = server.requests[1]["messages"]
    assert second[-2] == {"role": "assistant", "content": "I will start by"}
    assert CONTINUE_AFTER_CUT in second[-1]["content"]


async def test_replies_cut_too_often_fail_the_run(server: ChatServer) -> None:
    server.add(*[stream(["more"], cut="close") for _ in range(3)])
    async with client(server) as model:
        result = await run_agent("q", model=model, tools=ToolSet())
    assert result.status == "failed"
    assert result.error is not None
    assert "cut off 3 times in a row" in result.error


async def test_model_errors_after_retries_fail_the_round_with_the_providers_message(
    server: ChatServer,
) -> None:
    from .chat_server import Reply

    busy = Reply(status=429, body={"error": {"message": "quota exceeded"}})
    server.add(busy, completion("ok"), busy, busy)
    async with client(server, max_retries=1) as model:
        first = await run_agent("q", model=model, tools=ToolSet())
        second = await run_agent("q", model=model, tools=ToolSet())
    assert (first.status, first.output) == ("completed", "ok")
    assert second.status == "failed"
    assert second.error is not None
    assert "HTTP 429" in second.error
    assert "quota exceeded" in second.error


class Recorder(AgentHooks):
    def __init__(self, fail: Sequence[str] = ()) -> None:
        self.fail = set(fail)
        self.calls: list[str] = []

    def _hit(self, name: str) -> None:
        self.calls.append(name)
        if name in self.fail:
            raise RuntimeError(f"{name} broke")

    async def before_agent(self, messages: Sequence[Message]) -> None:
        self._hit("before_agent")

    async def before_compact(self, reading: Any) -> None:
        self._hit("before_compact")

    async def after_compact(self, action: str) -> None:
        self._hit("after_compact")

    async def before_model(self, messages: Sequence[Message]) -> None:
        self._hit("before_model")

    async def after_model(self, reply: ChatReply) -> None:
        self._hit("after_model")

    async def on_error(self, error: BaseException) -> None:
        self._hit("on_error")

    async def after_tool(self, call: ToolCall, result: Message) -> None:
        self._hit("after_tool")

    async def after_tools_batch(
        self, calls: Sequence[ToolCall], results: Sequence[Message]
    ) -> None:
        self._hit("after_tools_batch")

    async def after_agent(self, answer: str) -> str | None:
        self._hit("after_agent")
        return answer.upper()


async def test_hooks_that_are_only_recorded(server: ChatServer, tmp_path: Path) -> None:
    hooks = Recorder(fail=["before_agent", "before_compact", "after_compact"])
    server.add(completion(calls=[call("a", "glob", pattern="*")]), completion("fine"))
    async with client(server) as model:
        result = await run_agent(
            "q", model=model, tools=ToolSet(core_tools()), hooks=[hooks], workspace=tmp_path
        )
    assert (result.status, result.output) == ("completed", "FINE")
    assert result.transcript.entries[-1].message.content == "FINE"
    failed = [e.detail for e in result.events if e.kind == "hook_failed"]
    assert failed[0] == "before_agent: RuntimeError: before_agent broke"
    assert len(failed) == 5  # before_agent once, the compact hooks on both passes
    assert hooks.calls == [
        "before_agent", "before_compact", "after_compact", "before_model", "after_model",
        "after_tool", "after_tools_batch",
        "before_compact", "after_compact", "before_model", "after_model", "after_agent",
    ]  # fmt: skip


@pytest.mark.parametrize("hook", ["before_model", "after_model", "after_agent"])
async def test_hooks_that_fail_the_run(server: ChatServer, hook: str) -> None:
    hooks = Recorder(fail=[hook])
    server.add(completion("answer"))
    async with client(server) as model:
        result = await run_agent("q", model=model, tools=ToolSet(), hooks=[hooks])
    assert result.status == "failed"
    assert result.error == f"hook {hook} failed: RuntimeError: {hook} broke"
    assert hooks.calls[-1] == "on_error"


@pytest.mark.parametrize("hook", ["after_tool", "after_tools_batch"])
async def test_tool_hooks_fail_the_run_after_the_commit(
    server: ChatServer, tmp_path: Path, hook: str
) -> None:
    hooks = Recorder(fail=[hook])
    server.add(completion(calls=[call("a", "write", path="x.txt", content="x")]))
    async with client(server) as model:
        result = await run_agent(
            "q", model=model, tools=ToolSet(core_tools()), hooks=[hooks], workspace=tmp_path
        )
    assert result.status == "failed"
    assert result.error == f"hook {hook} failed: RuntimeError: {hook} broke"
    assert roles(result.transcript)[-2:] == ["assistant", "tool"]
    assert not result.transcript.entries[-1].message.is_error
    assert (tmp_path / "x.txt").read_text() == "x"


async def test_before_tools_batch_approves_denies_or_fails_closed(
    server: ChatServer, tmp_path: Path
) -> None:
    class Gate(AgentHooks):
        def __init__(self, answer: list[ToolDecision] | None) -> None:
            self.answer = answer

        async def before_tools_batch(self, calls: Sequence[ToolCall]) -> list[ToolDecision] | None:
            return self.answer

    writes = [call("a", "write", path="a.txt", content="a"), call("b", "bash", command="touch b")]
    server.add(completion(calls=writes), completion("ok"))
    gate = Gate([ToolDecision(True), deny("no shell here")])
    async with client(server) as model:
        result = await run_agent(
            "q", model=model, tools=ToolSet(core_tools()), hooks=[gate], workspace=tmp_path
        )
    assert result.status == "completed"
    denied = result.transcript.entries[-2].message
    assert (denied.content, denied.is_error) == ("denied: no shell here", True)
    assert (tmp_path / "a.txt").exists()
    assert not (tmp_path / "b").exists()

    server.add(completion(calls=writes))
    async with client(server) as model:
        result = await run_agent(
            "q", model=model, tools=ToolSet(core_tools()), hooks=[Gate([])], workspace=tmp_path
        )
    assert result.status == "failed"
    assert result.error == (
        "hook before_tools_batch failed: ValueError: returned 0 decisions for 2 calls"
    )
    assert_consistent(result.transcript)
    assert [e.message.is_error for e in result.transcript.entries[-2:]] == [True, True]


async def test_cancel_mid_tool_call_leaves_a_consistent_transcript(
    server: ChatServer, tmp_path: Path
) -> None:
    from .test_tools import wait_dead

    server.add(
        completion(
            calls=[
                call("a", "write", path="done.txt", content="x"),
                call("b", "bash", command="echo $$ > sleeper.pid; exec sleep 30"),
            ]
        )
    )
    transcript = Transcript()
    started = trio.Event()

    def on_event(event: Any) -> None:
        if event.kind == "tool_started" and event.detail == "bash":
            started.set()

    async with client(server) as model, trio.open_nursery() as nursery:

        async def agent() -> None:
            await run_agent(
                "q",
                model=model,
                tools=ToolSet(core_tools()),
                workspace=tmp_path,
                transcript=transcript,
                on_event=on_event,
            )
            raise AssertionError("the run should have been cancelled")

        nursery.start_soon(agent)
        await started.wait()
        pid_file = trio.Path(tmp_path / "sleeper.pid")
        while not await pid_file.exists() or not (await pid_file.read_text()).strip():
            await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert_consistent(transcript)
    assert roles(transcript) == ["system", "user", "assistant", "tool", "tool"]
    write_result, bash_result = (e.message for e in transcript.entries[3:])
    assert not write_result.is_error
    assert bash_result.is_error
    assert bash_result.content.startswith("not run to the end: the run was cancelled")
    await wait_dead(int((await pid_file.read_text()).strip()))


async def test_idle_wait_for_background_work_is_bounded(server: ChatServer) -> None:
    queue = MessageQueue()
    pending = [True]
    server.add(completion("started the job"), completion("the job said 42"))

    async with client(server) as model, trio.open_nursery() as nursery:

        async def job() -> None:
            await trio.sleep(0.2)
            pending[0] = False
            queue.push(QueuedMessage(kind="defer", text="job result: 42", source="background"))

        nursery.start_soon(job)
        result = await run_agent(
            "run the job", model=model, tools=ToolSet(), queue=queue, background=lambda: pending[0]
        )
    assert (result.status, result.output, result.handoff) == ("completed", "the job said 42", None)
    assert "job result: 42" in server.requests[1]["messages"][-1]["content"]

    server.add(completion("waiting"))
    config = AgentConfig(idle_wait=0.1)
    async with client(server) as model:
        result = await run_agent(
            "q", model=model, tools=ToolSet(), config=config, background=lambda: True
        )
    assert result.status == "completed"
    assert result.handoff is not None
    assert "still pending after 0.1s" in result.handoff


async def test_on_error_failures_are_recorded_and_the_original_error_reported(
    server: ChatServer,
) -> None:
    hooks = Recorder(fail=["before_model", "on_error"])
    async with client(server) as model:
        result = await run_agent("q", model=model, tools=ToolSet(), hooks=[hooks])
    assert result.error == "hook before_model failed: RuntimeError: before_model broke"
    assert [e.detail for e in result.events if e.kind == "hook_failed"][-1] == (
        "on_error: RuntimeError: on_error broke"
    )
    assert server.requests == []


async def test_a_raising_before_tools_batch_fails_closed(
    server: ChatServer, tmp_path: Path
) -> None:
    class Broken(AgentHooks):
        async def before_tools_batch(self, calls: Sequence[ToolCall]) -> list[ToolDecision] | None:
            raise PermissionError("policy store unreachable")

    server.add(completion(calls=[call("a", "write", path="a.txt", content="a")]))
    async with client(server) as model:
        result = await run_agent(
            "q", model=model, tools=ToolSet(core_tools()), hooks=[Broken()], workspace=tmp_path
        )
    assert result.status == "failed"
    assert result.error == (
        "hook before_tools_batch failed: PermissionError: policy store unreachable"
    )
    assert not (tmp_path / "a.txt").exists()
    assert_consistent(result.transcript)
    assert result.transcript.entries[-1].message.is_error


async def test_cancel_mid_stream_leaves_nothing_half_written(server: ChatServer) -> None:
    from .chat_server import Reply

    slow = stream(["one ", "two ", "three"])
    server.add(Reply(chunks=slow.chunks, delay=0.2))
    transcript = Transcript()
    async with client(server) as model:
        with trio.move_on_after(HANG) as scope:  # only a hang reaches it
            async with trio.open_nursery() as nursery:

                async def agent() -> None:
                    await run_agent("q", model=model, tools=ToolSet(), transcript=transcript)

                nursery.start_soon(agent)
                while not server.requests:
                    await trio.sleep(0.01)
                await trio.sleep(0.3)  # inside the stream
                nursery.cancel_scope.cancel()
    assert not scope.cancelled_caught
    assert roles(transcript) == ["system", "user"]
