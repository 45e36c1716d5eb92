from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
import trio
import trio.testing

from loopactors.errors import WorkerSpecError
from loopactors.workers import PythonWorker, RoundContext, RoundResult, parse_worker

from . import sample_fns
from .sample_fns import make_request

SAMPLE = "python:tests.workers.sample_fns"


async def test_str_result_is_completed_output() -> None:
    worker = parse_worker(f"{SAMPLE}:echo")
    assert worker == PythonWorker(sample_fns.echo)
    result = await worker.run(make_request(round=2, prompt="hello"), None)
    assert result == RoundResult(status="completed", output="round 2: hello")


async def test_round_result_passes_through() -> None:
    result = await parse_worker(f"{SAMPLE}:full_result").run(make_request(), None)
    assert result == RoundResult(status="completed", output="done", tokens=42)


async def test_exception_is_failed_round() -> None:
    result = await parse_worker(f"{SAMPLE}:boom").run(make_request(), None)
    assert result == RoundResult(status="failed", error="ValueError: no luck this round")


async def test_wrong_return_type_is_failed_round() -> None:
    result = await parse_worker(f"{SAMPLE}:wrong_type").run(make_request(), None)
    assert result.status == "failed"
    assert result.error == "TypeError: python worker returned int, expected str or RoundResult"


async def test_cancelled_propagates(autojump_clock: trio.testing.MockClock) -> None:
    worker = parse_worker(f"{SAMPLE}:forever")
    with trio.move_on_after(10) as scope:
        await worker.run(make_request(), None)
    assert scope.cancelled_caught


async def test_context_is_passed() -> None:
    class Context:
        def __init__(self) -> None:
            self.started: list[tuple[str, dict[str, Any]]] = []

        async def start(self, loop: str, **options: Any) -> Any:
            self.started.append((loop, options))
            return "child-1"

    context = Context()
    # Only start is used by starts_child: a partial RoundContext is enough.
    round_context = cast(RoundContext, context)
    result = await parse_worker(f"{SAMPLE}:starts_child").run(make_request(), round_context)
    assert result.output == "started child-1"
    assert context.started == [("child task", {"rounds": 2})]


@pytest.mark.parametrize(("name", "output"), [("echoer", "called"), ("Echoer.static", "static")])
async def test_async_callable_objects(name: str, output: str) -> None:
    result = await parse_worker(f"{SAMPLE}:{name}").run(make_request(), None)
    assert result.output == output


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("python", r"needs python:module.path:function; '' is not module:function"),
        ("python:tests.workers.sample_fns", r"needs python:module.path:function"),
        ("python:tests.workers.sample_fns:", r"needs python:module.path:function"),
        ("python::echo", r"needs python:module.path:function"),
        ("python:tests/workers:echo", r"needs python:module.path:function"),
        ("python:tests.workers.sample_fns:echo:x", r"needs python:module.path:function"),
        ("python:tests.workers.no_such_module:fn", r"cannot import module 'tests.workers.no_"),
        (f"{SAMPLE}:missing", r"'tests.workers.sample_fns' has no attribute 'missing'"),
        (f"{SAMPLE}:echo.nope", r"has no attribute 'echo.nope'"),
        (
            f"{SAMPLE}:not_async",
            r"'tests.workers.sample_fns:not_async' \(type function\) is not an async function",
        ),
        (f"{SAMPLE}:NOT_CALLABLE", r"\(type int\) is not an async function"),
        (f"{SAMPLE}:Echoer", r"\(type type\) is not an async function"),
    ],
)
def test_rejections(spec: str, message: str) -> None:
    with pytest.raises(WorkerSpecError, match=message):
        parse_worker(spec)


def test_module_that_fails_to_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "explodes_on_import.py").write_text("raise RuntimeError('bad config')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        WorkerSpecError, match=r"failed to import: RuntimeError: bad config"
    ) as info:
        parse_worker("python:explodes_on_import:fn")
    assert isinstance(info.value.__cause__, RuntimeError)


def test_a_main_function_of_another_program_is_said_to_be_that_programs() -> None:
    """A spec ``python_spec`` made in a script (``python:__main__:fn``) read by another
    program (``loopactors resume``, a restarted node): only that script can run it."""
    with pytest.raises(WorkerSpecError, match="names a function of the program that started"):
        parse_worker("python:__main__:a_function_this_program_does_not_have")
