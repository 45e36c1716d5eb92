"""Fuzzing the websocket protocol against a live node: random and mutated frames.

The node is a real ``loopactors node`` process. Every frame sent on an authenticated
connection gets exactly one answer, ``ok`` or an
``error`` that carries a code and a message; nothing takes the node down, which answers a
ping after every batch. Before ``hello`` a bad frame gets an error or a close with a code.
CI runs a short version; ``just fuzz`` runs long (LOOPACTORS_FUZZ_EXAMPLES).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trio_websocket import ConnectionClosed, open_websocket_url

from loopactors.gateway._auth import TOKEN_FILENAME

from ..gateway.conftest import RawClient
from ..gateway.test_cli_node import NodeProcess

#: Each example is a websocket connection to a real process (and a started loop stays in the
#: node's store), so a long run takes a tenth of the examples the in-process suites take.
EXAMPLES = max(150, int(os.environ.get("LOOPACTORS_FUZZ_EXAMPLES", "150")) // 10)

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

TYPES = [
    "hello", "ping", "start", "stop", "pause", "resume", "status", "history", "output",
    "subscribe", "unsubscribe", "launch", "",
]  # fmt: skip
#: Valid frames (a worker is never named: a fuzzer must not be able to pick a command).
VALID: list[dict[str, Any]] = [
    {"type": "ping", "id": 1},
    {"type": "start", "id": 2, "text": "|loop:2,fresh| fuzz the node"},
    {"type": "start", "id": 3, "spec": {"task": "fuzz spec", "rounds": 2, "mode": "fresh"}},
    {"type": "start", "id": 4, "text": "|loop:1| opts", "options": {"round_timeout": 5}},
    {"type": "status", "id": 5},
    {"type": "status", "id": 6, "loop_id": "x", "live_only": True, "limit": 3},
    {"type": "stop", "id": 7, "loop_id": "x", "after_round": True},
    {"type": "pause", "id": 8, "loop_id": "x"},
    {"type": "resume", "id": 9, "loop_id": "x"},
    {"type": "history", "id": 10, "loop_id": "x", "output_head": 3},
    {"type": "output", "id": 11, "loop_id": "x", "round": 1},
    {"type": "subscribe", "id": 12, "loop_id": "x", "replay": True},
    {"type": "unsubscribe", "id": 13, "subscription": "s1"},
    {"type": "hello", "id": 14, "protocol": 1, "token": "t"},
]
FIELDS = [
    "id", "loop_id", "text", "after_round", "live_only", "limit", "output_head", "round",
    "replay", "subscription", "protocol", "token", "client", "options", "extra",
]  # fmt: skip

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
random_objects = st.builds(
    lambda kind, fields: json.dumps({"type": kind, **fields}),
    st.sampled_from(TYPES) | st.text(max_size=8),
    st.dictionaries(st.sampled_from(FIELDS), values, max_size=5),
)
_EDIT_ALPHABET = list('{}[]":,0123456789-.etruflasnx \\')


@st.composite
def mutated_valid(draw: st.DrawFn) -> str:
    text = json.dumps(draw(st.sampled_from(VALID)))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        at = draw(st.integers(min_value=0, max_value=len(text)))
        op = draw(st.sampled_from(["insert", "delete", "replace"]))
        ch = draw(st.sampled_from(_EDIT_ALPHABET))
        if op == "insert":
            text = text[:at] + ch + text[at:]
        elif op == "delete":
            text = text[:at] + text[at + 1 :]
        else:
            text = text[:at] + ch + text[at + 1 :]
    return text


frames: st.SearchStrategy[str | bytes] = (
    st.sampled_from([json.dumps(frame) for frame in VALID])
    | mutated_valid()
    | random_objects
    | st.text(max_size=60)
    | st.binary(max_size=40)
)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """One real node process for the whole module: the fuzz must not bring it down."""
    process = NodeProcess(tmp_path_factory.mktemp("fuzz-node"), "--store", "memory")
    yield process
    assert process.proc.poll() is None, "the node died under the fuzz: " + "".join(process.log)
    assert process.terminate() == 0


def token_of(node: NodeProcess) -> str:
    return (node.state / TOKEN_FILENAME).read_text().strip()


async def answer(raw: RawClient) -> dict[str, Any]:
    """The next reply (ok, error, or closing before a close), skipping subscription events."""
    while True:
        frame = await raw.receive()
        if frame.get("type") in ("ok", "error", "closing"):
            return frame
        assert frame.get("type") in ("event", "gap"), frame


def assert_answered(frame: str | bytes, reply: dict[str, Any]) -> None:
    assert reply["type"] != "closing", (frame, reply)  # after hello, errors never close
    if reply["type"] == "error":
        assert isinstance(reply.get("code"), str), (frame, reply)
        assert reply["code"], (frame, reply)
        assert isinstance(reply.get("message"), str), (frame, reply)
        assert reply["message"], (frame, reply)


async def send_batch(url: str, token: str, batch: list[str | bytes]) -> None:
    async with open_websocket_url(url) as ws:
        raw = RawClient(ws)
        hello = await raw.ask({"type": "hello", "id": 0, "protocol": 1, "token": token})
        assert hello["type"] == "ok", hello
        for frame in batch:
            await raw.send(frame)
            assert_answered(frame, await answer(raw))
        await raw.send({"type": "ping", "id": "after-batch"})
        pong = await answer(raw)
        assert pong["type"] == "ok", pong
        assert pong["id"] == "after-batch"


async def send_first(url: str, token: str, frame: str | bytes) -> None:
    async with open_websocket_url(url) as ws:
        raw = RawClient(ws)
        try:
            await raw.send(frame)
            reply = await answer(raw)
        except ConnectionClosed as closed:
            reason = closed.reason
        else:
            reason = None
            if reply["type"] == "closing":  # "<code>: <message>", then the close
                code, _, message = reply["reason"].partition(": ")
                assert code, reply
                assert message, reply
            else:
                assert_answered(frame, reply)
    if reason is not None:  # closed without a word: the close itself carries a code
        assert reason.code >= 1000, reason
    await send_batch(url, token, [])  # the node still serves


FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@FUZZ
@given(batch=st.lists(frames, min_size=1, max_size=8))
def test_any_frame_gets_an_answer_and_the_node_keeps_serving(
    node: NodeProcess, batch: list[str | bytes]
) -> None:
    trio.run(send_batch, node.url, token_of(node), batch)


@FUZZ
@given(frame=frames)
def test_a_bad_first_frame_gets_an_error_or_a_close_with_a_code(
    node: NodeProcess, frame: str | bytes
) -> None:
    trio.run(send_first, node.url, token_of(node), frame)
