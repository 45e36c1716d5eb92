"""The inbox kinds and the transcript's rules (no event loop needed)."""

from __future__ import annotations

import pytest

from loopactors.agent import (
    Message,
    MessageQueue,
    Projection,
    QueuedMessage,
    StaleTranscript,
    ToolCall,
    Transcript,
    TranscriptError,
)
from loopactors.errors import AgentError


def msg(kind: str, text: str = "x", **fields: object) -> QueuedMessage:
    return QueuedMessage(kind=kind, text=text, **fields)  # type: ignore[arg-type]


def test_prompt_and_defer_wake_info_never_does() -> None:
    queue = MessageQueue()
    wakes: list[int] = []
    queue.on_wake(lambda: wakes.append(len(queue)))
    queue.push(msg("info", "i1"))
    assert wakes == []
    assert not queue.has_wake_up()
    queue.push(msg("defer", "d1", source="background"))
    queue.push(msg("prompt", "p1"))
    assert wakes == [2, 3]
    assert queue.has_wake_up()
    assert queue.has_pending_defer("background")
    assert not queue.has_pending_defer("steering")
    assert [m.text for m in queue.drain_all()] == ["i1", "d1", "p1"]  # FIFO
    assert queue.is_empty()
    assert queue.drain_all() == []


def test_push_batch_wakes_once_and_empty_batch_is_a_no_op() -> None:
    queue = MessageQueue()
    wakes: list[None] = []
    queue.on_wake(lambda: wakes.append(None))
    queue.push_batch([])
    queue.push_batch([msg("info")])
    assert wakes == []
    queue.push_batch([msg("prompt"), msg("defer"), msg("info")])
    assert wakes == [None]
    assert len(queue) == 4
    queue.clear()
    assert queue.is_empty()


def test_message_fields_are_checked_when_made() -> None:
    with pytest.raises(AgentError, match="prompt is always visible"):
        msg("prompt", visible=False, persisted=False)
    with pytest.raises(AgentError, match="hidden from the model cannot be persisted"):
        msg("info", visible=False)
    transient = msg("info", persisted=False)
    assert transient.visible
    assert not transient.wakes


def tool_round(call_ids: list[str]) -> tuple[Message, list[Message]]:
    assistant = Message(
        role="assistant",
        tool_calls=tuple(ToolCall(id=i, name="read", arguments="{}") for i in call_ids),
    )
    results = [Message(role="tool", tool_call_id=i, name="read", content="ok") for i in call_ids]
    return assistant, results


def test_tool_calls_enter_only_as_a_whole_round_in_call_order() -> None:
    transcript = Transcript()
    assistant, results = tool_round(["a", "b"])
    with pytest.raises(TranscriptError, match="commit_tool_round"):
        transcript.append(assistant)
    with pytest.raises(TranscriptError, match="commit_tool_round"):
        transcript.append(results[0])
    with pytest.raises(TranscriptError, match="call order"):
        transcript.commit_tool_round(assistant, results[::-1])
    with pytest.raises(TranscriptError, match="call order"):
        transcript.commit_tool_round(assistant, results[:1])
    with pytest.raises(TranscriptError, match="starts with an assistant"):
        transcript.commit_tool_round(Message(role="assistant", content="hi"), [])
    assert len(transcript) == 0
    assert transcript.revision == 0
    transcript.commit_tool_round(assistant, results)
    assert [e.message.role for e in transcript.entries] == ["assistant", "tool", "tool"]
    assert transcript.revision == 1


def test_projection_changes_the_view_never_the_stored_message() -> None:
    transcript = Transcript([Message(role="system", content="sys")])
    transcript.append(Message(role="user", content="hello"))
    assistant = Message(
        role="assistant",
        tool_calls=(
            ToolCall(id="a", name="write", arguments='{"text": "long"}'),
            ToolCall(id="b", name="goal", arguments='{"text": "keep"}'),
        ),
    )
    results = [
        Message(role="tool", tool_call_id="a", name="write", content="long result"),
        Message(role="tool", tool_call_id="b", name="goal", content="kept"),
    ]
    transcript.commit_tool_round(assistant, results)
    revision = transcript.revision
    transcript.apply_projections(
        {2: Projection(arguments={"a": '{"text": "l.."}'}), 3: Projection(content="short")},
        revision=revision,
    )
    view = transcript.model_view()
    assert view[2].tool_calls[0].arguments == '{"text": "l.."}'
    assert view[2].tool_calls[1].arguments == '{"text": "keep"}'
    assert view[3].content == "short"
    assert transcript.entries[3].message.content == "long result"
    assert transcript.entries[3].truncated
    with pytest.raises(StaleTranscript):
        transcript.apply_projections({3: Projection(content="x")}, revision=revision)
    with pytest.raises(TranscriptError, match="ancestor"):
        transcript.apply_projections({0: Projection(content="x")}, revision=transcript.revision)


def test_full_commit_excludes_own_non_system_only_and_round_trips() -> None:
    transcript = Transcript([Message(role="user", content="parent context")])
    transcript.append(Message(role="system", content="own system"))
    transcript.append(Message(role="user", content="q"))
    transcript.append(Message(role="assistant", content="a"))
    with pytest.raises(TranscriptError, match="user messages only"):
        transcript.commit_full([Message(role="assistant")], revision=transcript.revision)
    excluded = transcript.commit_full(
        [Message(role="user", content="summary")], revision=transcript.revision
    )
    assert excluded == 2
    assert [m.content for m in transcript.model_view()] == [
        "parent context",
        "own system",
        "summary",
    ]
    assert len(transcript.entries) == 5  # nothing deleted
    copy = Transcript.from_builtins(transcript.to_builtins())
    assert copy.model_view() == transcript.model_view()
    assert [e.excluded for e in copy.entries] == [e.excluded for e in transcript.entries]


def test_a_full_compaction_applied_elsewhere_commits_like_one_applied_here() -> None:
    from loopactors.agent._transcript import excluded_view

    def sample() -> Transcript:
        transcript = Transcript()
        transcript.append(Message(role="system", content="rules"))
        transcript.append(Message(role="user", content="task"))
        transcript.append(Message(role="assistant", content="done"))
        return transcript

    here, there = sample(), sample()
    summary = [Message(role="user", content="summary")]
    view = excluded_view(there.entries, summary)
    assert [e.excluded for e in there.entries] == [False, False, False]  # pure
    assert there.commit_view(view, revision=there.revision) == here.commit_full(
        summary, revision=here.revision
    )
    assert there.to_builtins() == here.to_builtins()
    other = sample()
    with pytest.raises(TranscriptError, match="does not extend"):
        other.commit_view(view[1:], revision=other.revision)
    with pytest.raises(StaleTranscript):
        other.commit_view(view, revision=other.revision - 1)
