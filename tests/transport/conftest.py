"""A real redis-server on a free loopback port, and `loopactors worker` processes.

The server runs in a temporary directory with the append-only file synced on every write, so
a restart (``LocalRedis.restart``) keeps every acknowledged write, as in a deployment that
promises nothing is lost. Without ``redis-server`` on PATH these tests skip, saying so; CI
installs it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from loopactors.transport import LocalRedis
from loopactors.transport._local import TlsFiles
from loopactors.transport._redis import open_redis
from loopactors.transport._wire import WORKERS_HASH, decode_heartbeat
from tests.hang import HANG

REDIS_SERVER = shutil.which("redis-server")

RedisServer = LocalRedis


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (CI installs it: apt-get install redis-server)")
    server = LocalRedis(tmp_path / "redis")
    server.start()
    try:
        yield server
    finally:
        server.stop()


class Workers:
    """`loopactors worker` processes, stopped (SIGKILL if need be) at the end of the test."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.processes: dict[str, trio.Process] = {}
        self.logs: list[Any] = []

    async def start(
        self,
        url: str,
        name: str,
        *,
        kinds: str = "agent,command,python,scripted",
        slots: int = 1,
        options: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> trio.Process:
        """``env``: added to this process's environment (a command round's sees it)."""
        log = open(self.tmp_path / f"{name}.log", "wb")  # noqa: SIM115, ASYNC230 - closed in aclose
        self.logs.append(log)
        process = await trio.lowlevel.open_process(
            [
                sys.executable, "-m", "loopactors", "worker",
                "--redis", url, "--name", name, "--kinds", kinds, "--slots", str(slots),
                "--heartbeat", "0.2", "--idle-timeout", "1", "--kill-grace", "1",
                "--groups-dir", str(self.tmp_path / "worker-groups"), *options,
            ],
            stdout=log,
            stderr=log,
            env=None if env is None else {**os.environ, **env},
        )  # fmt: skip
        self.processes[name] = process
        await wait_for_workers(url, {name})
        return process

    def log(self, name: str) -> str:
        return (self.tmp_path / f"{name}.log").read_text()

    def kill(self, name: str) -> None:
        self.processes[name].send_signal(signal.SIGKILL)

    async def aclose(self) -> None:
        for process in self.processes.values():
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        with trio.move_on_after(10):
            for process in self.processes.values():
                await process.wait()
        for process in self.processes.values():
            if process.returncode is None:
                process.kill()
        for log in self.logs:
            log.close()


@pytest.fixture
async def workers(tmp_path: Path) -> Any:
    pool = Workers(tmp_path)
    try:
        yield pool
    finally:
        with trio.CancelScope(shield=True):
            await pool.aclose()


async def wait_for_workers(url: str, names: set[str]) -> None:
    """Until every named worker has said hello (its first heartbeat)."""
    with trio.fail_after(HANG):
        async with open_redis(url, name="loopactors-test") as client:
            while True:
                beats = await client.hgetall(WORKERS_HASH)
                if names <= {decode_heartbeat(v).name for v in beats.values()}:
                    return
                await trio.sleep(0.05)


async def wait_until(predicate: Any, *, timeout: float = HANG) -> None:
    with trio.fail_after(timeout):
        while not await predicate():
            await trio.sleep(0.05)


def make_certificates(directory: Path) -> TlsFiles:
    """A throwaway CA and a server certificate for 127.0.0.1, made with the openssl tool."""
    directory.mkdir()

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
            "-out", "ca.crt", "-days", "2", "-subj", "/CN=loopactors-test-ca")  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key",
            "-out", "server.csr", "-subj", "/CN=127.0.0.1")  # fmt: skip
    (directory / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.crt", "-days", "2",
            "-extfile", "ext.cnf")  # fmt: skip
    return TlsFiles(
        cert=directory / "server.crt", key=directory / "server.key", ca=directory / "ca.crt"
    )
