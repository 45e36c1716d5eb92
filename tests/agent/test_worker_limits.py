"""The agent worker meets a rate or usage limit that outlasts its retries: the round is
deferred, as the CLI kinds' are, and other loops on the same endpoint and key wait too.
Against the project's fake chat server on loopback, with each header a server may send."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from loopactors.loops import RoundDeferred
from loopactors.runtime import RuntimeConfig, open_runtime
from loopactors.workers import AgentWorker, parse_worker
from loopactors.workers._agent import LIMIT_BACKOFF
from loopactors.workers._cli_worker import clear_limit_holds

from ..workers.sample_fns import make_request
from .chat_server import ChatServer, Reply, completion

#: Each header a server (or a LiteLLM proxy in front of one) says "wait" with, and its wait.
HEADERS = [
    ({"retry-after": "30"}, 30.0),
    ({"retry-after-ms": "45000"}, 45.0),
    ({"llm_provider-retry-after": "60"}, 60.0),
    ({"llm_provider-retry-after-ms": "90000"}, 90.0),
]


@pytest.fixture(autouse=True)
def no_holds(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("LOOPACTORS_LLM_BASE_URL", "LOOPACTORS_LLM_MODEL", "LOOPACTORS_LLM_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    clear_limit_holds()
    yield
    clear_limit_holds()


def busy(headers: dict[str, str]) -> Reply:
    return Reply(status=429, body={"error": {"message": "rate limit reached"}}, headers=headers)


def spec(server: ChatServer, tmp_path: Path) -> str:
    return f"agent:model=m,base_url={server.base_url},workspace={tmp_path},stream=false"


def quick(worker: AgentWorker) -> AgentWorker:
    """The worker with a tiny backoff cap: its retries follow each other at once (the
    server's wait is still what the deferred round keeps)."""
    return attrs.evolve(worker, settings=attrs.evolve(worker.settings, backoff_cap=0.01))


@pytest.mark.parametrize(("headers", "wait"), HEADERS)
async def test_a_limit_that_outlasts_the_retries_defers_the_round(
    tmp_path: Path, headers: dict[str, str], wait: float
) -> None:
    with ChatServer([busy(headers)] * 5) as server:
        parsed = parse_worker(spec(server, tmp_path))
        assert isinstance(parsed, AgentWorker)
        worker = quick(parsed)
        request = make_request(worker=spec(server, tmp_path))
        before = time.time()
        result = await worker.run(request, None)
        assert result.status == "deferred", result.error
        assert result.deferred_until is not None
        assert before + wait <= result.deferred_until <= time.time() + wait
        assert "HTTP 429" in (result.error or "")
        assert len(server.requests) == 5  # the first try and the 4 retries
        # The same endpoint and key: another round waits, without a request.
        again = await worker.run(request, None)
        assert again.status == "deferred"
        assert again.deferred_until == result.deferred_until
        assert (again.error or "").startswith("held back: ")
        assert len(server.requests) == 5


async def test_a_quota_refusal_defers_with_the_default_backoff(tmp_path: Path) -> None:
    quota = Reply(
        status=403,
        body={
            "error": {"message": "You exceeded your current quota", "type": "insufficient_quota"}
        },
    )
    with ChatServer([quota]) as server:
        parsed = parse_worker(spec(server, tmp_path))
        assert isinstance(parsed, AgentWorker)
        before = time.time()
        result = await parsed.run(make_request(), None)
    assert result.status == "deferred", result.error
    assert result.deferred_until is not None
    assert result.deferred_until >= before + LIMIT_BACKOFF
    assert "quota" in (result.error or "")


async def test_another_error_still_fails_the_round(tmp_path: Path) -> None:
    refused = Reply(status=400, body={"error": {"message": "bad request: no such model"}})
    with ChatServer([refused]) as server:
        parsed = parse_worker(spec(server, tmp_path))
        assert isinstance(parsed, AgentWorker)
        result = await parsed.run(make_request(), None)
    assert result.status == "failed"
    assert "no such model" in (result.error or "")


async def test_a_loop_waits_out_the_limit_then_runs_the_round_again(tmp_path: Path) -> None:
    wait = {"retry-after-ms": "20"}  # short, so the loop's wait is short too
    script = [busy(wait)] * 5 + [completion("finally done")]
    seen: list[object] = []
    config = RuntimeConfig(store="sqlite", state_dir=tmp_path / "state", shutdown_grace=5.0)
    with ChatServer(script) as server:
        async with open_runtime(config, observer=seen.append) as rt:
            handle = rt.handle(await rt.start("|loop:1| answer", worker=spec(server, tmp_path)))
            final = await handle.wait()
            history = await handle.history()
    assert final.phase == "complete", final.reason
    (deferred,) = [e for e in seen if isinstance(e, RoundDeferred)]
    assert deferred.round == 1
    assert "HTTP 429" in deferred.reason
    assert [(r.round, r.status, r.output) for r in history] == [(1, "completed", "finally done")]
    assert final.consecutive_failures == 0
