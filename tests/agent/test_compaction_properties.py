"""Micro compaction's promises, over generated transcripts (hypothesis)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from loopactors.agent import CompactionConfig, Message, ToolCall, Transcript, plan_micro
from loopactors.agent._compaction import turn_groups

CONFIG = CompactionConfig()
PROTECTED = {name.casefold() for name in CONFIG.protected_tools}
TOOLS = ["read", "bash", "write", "goal", "TodoWrite", "askuserquestion"]

calls = st.lists(
    st.tuples(
        st.sampled_from(TOOLS),
        st.dictionaries(
            st.sampled_from(["path", "content", "command", "n"]),
            st.one_of(st.integers(), st.text(max_size=5).map(lambda t: t * 200)),
            max_size=3,
        ),
        st.integers(min_value=0, max_value=1500),  # result length
        st.booleans(),  # error
    ),
    min_size=0,
    max_size=3,
)
turns = st.lists(st.tuples(calls, st.booleans()), min_size=0, max_size=7)


def build(spec: list[tuple[list[tuple[str, dict[str, object], int, bool]], bool]]) -> Transcript:
    transcript = Transcript([Message(role="user", content="inherited " * 100)])
    transcript.append(Message(role="system", content="sys"))
    n = 0
    for rounds, answer in spec:
        transcript.append(Message(role="user", content="do it"))
        for name, arguments, length, error in rounds:
            n += 1
            call = ToolCall(id=f"c{n}", name=name, arguments=json.dumps(arguments))
            result = Message(
                role="tool", tool_call_id=call.id, name=name, content="r" * length, is_error=error
            )
            transcript.commit_tool_round(Message(role="assistant", tool_calls=(call,)), [result])
        if answer:
            transcript.append(Message(role="assistant", content="done"))
    return transcript


@settings(max_examples=200, deadline=None)
@given(turns)
def test_micro_keeps_its_promises(
    spec: list[tuple[list[tuple[str, dict[str, object], int, bool]], bool]],
) -> None:
    transcript = build(spec)
    before = [e.message for e in transcript.entries]
    plan = plan_micro(transcript, CONFIG)
    groups = turn_groups(transcript.entries)
    newest = {i for group in groups[-CONFIG.stale_groups :] for i in group}
    saved = 0
    for index, projection in plan.projections.items():
        entry = transcript.entries[index]
        message = entry.message
        assert index not in newest
        assert not entry.ancestor
        if message.role == "tool":
            assert not message.is_error
            assert (message.name or "").casefold() not in PROTECTED
            assert projection.content is not None
            assert len(projection.content) < len(message.content)
            saved += len(message.content) - len(projection.content)
        else:
            for call in message.tool_calls:
                if call.id not in projection.arguments:
                    continue
                assert call.name.casefold() not in PROTECTED
                original, shorter = (
                    json.loads(call.arguments),
                    json.loads(projection.arguments[call.id]),
                )
                assert isinstance(shorter, dict)
                assert list(shorter) == list(original)
                saved += len(call.arguments) - len(projection.arguments[call.id])
    assert plan.estimated_tokens_saved == saved // 4
    transcript.apply_projections(plan.projections, revision=plan.revision)
    assert [e.message for e in transcript.entries] == before  # stored messages never change
    assert plan_micro(transcript, CONFIG).projections == {}  # nothing left to do twice
