from __future__ import annotations

import itertools
import re

import pytest
import trio
import trio.testing

from loopactors.errors import WorkerSpecError
from loopactors.workers import ScriptedWorker, parse_worker

from .sample_fns import make_request


def _scripted(spec: str) -> ScriptedWorker:
    worker = parse_worker(spec)
    assert isinstance(worker, ScriptedWorker)
    return worker


@pytest.mark.parametrize("spec", ["scripted", "scripted:"])
async def test_defaults(spec: str) -> None:
    worker = _scripted(spec)
    assert worker == ScriptedWorker()
    result = await worker.run(make_request(round=2, rounds=5), None)
    assert result.status == "completed"
    assert result.error is None
    assert result.tokens == 0
    assert re.fullmatch(r"round 2 of 5: [a-z]+", result.output)


async def test_default_outputs_differ_without_digits() -> None:
    # A no-progress fuse strips digits; the word must still change from round to round.
    worker = ScriptedWorker()
    outputs = [(await worker.run(make_request(round=n), None)).output for n in range(1, 201)]
    stripped = [re.sub(r"[0-9]", "", out) for out in outputs]
    assert all(a != b for a, b in itertools.pairwise(stripped))
    assert outputs == [
        (await worker.run(make_request(round=n), None)).output for n in range(1, 201)
    ]


async def test_latency_sleeps(autojump_clock: trio.testing.MockClock) -> None:
    worker = _scripted("scripted:latency=2.5")
    assert worker.latency == 2.5
    start = trio.current_time()
    await worker.run(make_request(), None)
    assert trio.current_time() - start == pytest.approx(2.5)


async def test_a_round_with_latency_only_waits_then_answers_as_run_does(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # What lets the runtime hold such a round as a timer rather than a task.
    worker = _scripted("scripted:latency=2.5,fail_every=2")
    for n in (1, 2):
        request = make_request(round=n)
        wait = worker.waits_only(request)
        assert wait is not None
        seconds, answer = wait
        assert seconds == 2.5
        assert answer(request) == await worker.run(request, None)
    assert ScriptedWorker().waits_only(make_request()) is None  # answered on the spot


async def test_zero_latency_is_one_checkpoint() -> None:
    worker = ScriptedWorker()
    with trio.CancelScope() as scope:
        scope.cancel()
        await worker.run(make_request(), None)
    assert scope.cancelled_caught
    with trio.testing.assert_checkpoints():
        await worker.run(make_request(), None)


async def test_fail_every() -> None:
    worker = _scripted("scripted:fail_every=3,tokens=5")
    results = [await worker.run(make_request(round=n), None) for n in range(1, 8)]
    assert [r.status for r in results] == ["completed", "completed", "failed"] * 2 + ["completed"]
    failed = results[2]
    assert failed.error == "scripted failure: round 3 (fail_every=3)"
    assert failed.output == ""
    assert failed.tokens == 5


async def test_tokens() -> None:
    result = await _scripted("scripted:tokens=17").run(make_request(), None)
    assert result.tokens == 17


async def test_output_template_fields() -> None:
    worker = _scripted("scripted:output={loop_id}/{round}/{rounds}/{word}|{prompt_tail}|{{x}}")
    prompt = "p" * 100 + "the end"
    result = await worker.run(make_request(round=4, rounds=9, prompt=prompt), None)
    loop_id, round_, rounds, rest = result.output.split("/")
    assert (loop_id, round_, rounds) == ("loop-1", "4", "9")
    word, tail, braces = rest.split("|")
    assert word.isalpha()
    assert tail == prompt[-80:]
    assert braces == "{x}"


async def test_output_takes_rest_verbatim() -> None:
    worker = _scripted("scripted:tokens=2,output=a, b,latency=3,{round:03d}")
    assert worker.output == "a, b,latency=3,{round:03d}"
    assert worker.latency == 0
    result = await worker.run(make_request(round=7), None)
    assert result.output == "a, b,latency=3,007"
    assert result.tokens == 2


def test_all_options() -> None:
    worker = _scripted("scripted:latency=.25,fail_every=2,tokens=0,output=")
    assert worker == ScriptedWorker(latency=0.25, fail_every=2, tokens=0, output="")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("scripted:speed=1", r"'speed' is unknown; accepted options: done_at, fail_every, latency"),
        ("scripted:latency", r"'latency' is not NAME=VALUE"),
        ("scripted:latency=1,,tokens=1", r"'' is not NAME=VALUE"),
        ("scripted:latency=1,", r"ends with a comma"),
        ("scripted:tokens=1,tokens=2", r"'tokens' is given twice"),
        ("scripted:latency=-1", r"latency must be a number of seconds >= 0"),
        ("scripted:latency=nan", r"latency must be"),
        ("scripted:latency=inf", r"latency must be"),
        ("scripted:latency=1e3", r"latency must be"),
        ("scripted:latency=", r"latency must be"),
        ("scripted:fail_every=0", r"fail_every must be an integer >= 1, got '0'"),
        ("scripted:fail_every=1.5", r"fail_every must be an integer >= 1"),
        ("scripted:fail_every=+2", r"fail_every must be an integer >= 1"),
        ("scripted:tokens=-3", r"tokens must be an integer >= 0"),
        ("scripted:tokens=many", r"tokens must be an integer >= 0"),
        ("scripted:output={name}", r"unknown placeholder \{name\}; accepted placeholders: "),
        ("scripted:output={}", r"unknown placeholder \{\}"),
        ("scripted:output={0}", r"unknown placeholder \{0\}"),
        ("scripted:output={round.real}", r"unknown placeholder \{round.real\}"),
        ("scripted:output={round", r"is malformed"),
        ("scripted:output=}", r"is malformed"),
        ("scripted:output={loop_id:d}", r"cannot render"),
        ("scripted:output={round:{nope}}", r"cannot render"),
    ],
)
def test_rejections(spec: str, message: str) -> None:
    with pytest.raises(WorkerSpecError, match=message):
        parse_worker(spec)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"latency": -0.1}, "latency"),
        ({"latency": float("inf")}, "latency"),
        ({"fail_every": 0}, "fail_every"),
        ({"tokens": -1}, "tokens"),
        ({"output": "{bad}"}, "placeholder"),
    ],
)
def test_constructor_validates(options: dict[str, object], message: str) -> None:
    with pytest.raises(WorkerSpecError, match=message):
        ScriptedWorker(**options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "",
            r"unknown worker kind '' in ''; accepted kinds: agent, aider, claude, codex, command, "
            "gemini, python, scripted",
        ),
        ("agents:x", r"unknown worker kind 'agents'"),
        ("Scripted", r"unknown worker kind 'Scripted'"),
    ],
)
def test_unknown_kind(spec: str, message: str) -> None:
    with pytest.raises(WorkerSpecError, match=message):
        parse_worker(spec)


def test_public_surface() -> None:
    from loopactors import workers

    assert workers.__all__ == sorted(workers.__all__)
    assert ScriptedWorker.__module__ == "loopactors.workers"
    assert ScriptedWorker.kind == "scripted"


def test_a_spec_for_remote_workers_is_checked_for_form_only() -> None:
    from loopactors.errors import WorkerSpecError
    from loopactors.workers import check_worker_spec

    assert check_worker_spec("command:/nowhere/tool --x", here=False).name == "command"
    assert check_worker_spec("python:some.module:run", here=False).name == "python"
    assert check_worker_spec("scripted:latency=1", here=False).name == "scripted"
    for bad in ("command:", "command:'open", "python:nocolon", "python:m:1x", "nope:x"):
        with pytest.raises(WorkerSpecError):
            check_worker_spec(bad, here=False)
    with pytest.raises(WorkerSpecError, match="not found"):
        check_worker_spec("command:/nowhere/tool")
