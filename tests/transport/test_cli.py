"""`loopactors worker`, `run --transport` and `status --transport` as a user runs them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from loopactors.cli import main
from loopactors.runtime import RuntimeConfig, open_runtime
from loopactors.transport import LocalRedis
from tests.hang import HANG

from .conftest import REDIS_SERVER, Workers, make_certificates

SECRET = "s3cret-pass"


def loopactors(*args: str, timeout: float = HANG) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loopactors", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_worker_without_redis_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    monkeypatch.delenv("LOOPACTORS_REDIS", raising=False)
    assert main(["worker"]) == 64
    assert "needs --redis URL (or $LOOPACTORS_REDIS)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--redis", "http://h:1"), "the scheme must be redis:// or rediss://"),
        (
            ("--redis", "redis://h:1/0", "--kinds", "telepathy"),
            "accepted: agent, command, python, scripted, aider, claude, codex, gemini",
        ),
        (("--redis", "redis://h:1/0", "--slots", "0"), "slots must be >= 1"),
    ],
)
def test_worker_refuses_bad_options(
    args: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    monkeypatch.delenv("LOOPACTORS_REDIS", raising=False)
    assert main(["worker", *args]) == 1
    assert message in capsys.readouterr().err


@pytest.fixture
def password_redis(tmp_path: Path) -> Iterator[LocalRedis]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (CI installs it: apt-get install redis-server)")
    server = LocalRedis(tmp_path / "redis", password=SECRET)
    server.start()
    yield server
    server.stop()


async def test_run_and_status_on_a_password_protected_redis_show_no_secret(
    password_redis: LocalRedis, workers: Workers, tmp_path: Path
) -> None:
    url = password_redis.url()
    await workers.start(url, "w1", kinds="scripted", slots=2)
    state = str(tmp_path / "state")
    argv = ["run", "|loop:2,fresh| hello", "--worker", "scripted", "--transport", url]
    run = await trio.to_thread.run_sync(lambda: loopactors(*argv, "--state", state, "--json"))
    assert run.returncode == 0, run.stderr
    assert '"phase":"complete"' in run.stdout
    status = await trio.to_thread.run_sync(
        lambda: loopactors("status", "--state", state, "--transport", url)
    )
    assert status.returncode == 0, status.stderr
    assert "complete" in status.stdout
    assert "w1" in status.stdout  # the worker table
    assert "scripted" in status.stdout
    assert "loopactors:rounds:scripted" in status.stdout  # the backlog table
    assert "worker w1 on redis://***@127.0.0.1" in workers.log("w1")
    for text in (run.stdout, run.stderr, status.stdout, status.stderr, workers.log("w1")):
        assert SECRET not in text


@pytest.fixture
def tls_redis(tmp_path: Path) -> Iterator[LocalRedis]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (CI installs it: apt-get install redis-server)")
    if shutil.which("openssl") is None:
        pytest.skip("the openssl tool is not installed: no certificate for a TLS test")
    tls = make_certificates(tmp_path / "certs")
    server = LocalRedis(tmp_path / "redis", password=SECRET, tls=tls)
    server.start()
    yield server
    server.stop()


async def test_rounds_run_over_tls(tls_redis: LocalRedis, workers: Workers, tmp_path: Path) -> None:
    url = tls_redis.url()
    assert url.startswith("rediss://")
    await workers.start(url, "w1", kinds="scripted")
    config = RuntimeConfig(store="memory", transport=url)
    async with open_runtime(config) as rt:
        loop = rt.handle(await rt.start("|loop:2,fresh| over tls", worker="scripted"))
        assert (await loop.wait()).phase == "complete"
    assert SECRET not in workers.log("w1")


def test_status_says_when_redis_is_unreachable(tmp_path: Path) -> None:
    result = loopactors(
        "status", "--state", str(tmp_path), "--transport", f"redis://:{SECRET}@127.0.0.1:1/0"
    )
    assert result.returncode == 0
    assert "redis redis://***@127.0.0.1:1/0 unreachable" in result.stdout
    assert SECRET not in result.stdout + result.stderr


def test_a_worker_with_a_wrong_password_says_so_and_shows_neither_password(
    password_redis: LocalRedis,
) -> None:
    url = password_redis.url().replace(SECRET, "wrong-guess")
    result = loopactors("worker", "--redis", url)
    assert result.returncode == 1
    assert "refused this worker: invalid username-password pair" in result.stderr
    assert "redis://***@127.0.0.1" in result.stderr
    assert "wrong-guess" not in result.stderr
    assert SECRET not in result.stderr
