"""A private redis-server on a free loopback port: for tests, examples and benchmarks.

Not for production (run Redis as a service there). The server keeps its append-only file,
synced on every write, in the directory given, so a restart keeps every acknowledged write.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import socket
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

from ..errors import ConfigError

__all__ = ["LocalRedis", "TlsFiles", "local_redis"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclasses.dataclass(frozen=True)
class TlsFiles:
    """The server's certificate and key, and the CA that signed it (clients trust that)."""

    cert: Path
    key: Path
    ca: Path


class LocalRedis:
    """A redis-server process: ``start()``, ``stop()``, ``restart()`` (same port, same data)."""

    def __init__(
        self,
        directory: Path,
        *,
        password: str | None = None,
        tls: TlsFiles | None = None,
        executable: str | None = None,
    ) -> None:
        found = executable or shutil.which("redis-server")
        if found is None:
            raise ConfigError(
                "redis-server is not installed; on Debian or Ubuntu: apt-get install redis-server"
            )
        self.executable = found
        self.directory = directory
        self.password = password
        self.tls = tls
        self.port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, db: int = 0) -> str:
        auth = f":{self.password}@" if self.password else ""
        if self.tls is not None:
            ca = urllib.parse.quote(str(self.tls.ca))
            return f"rediss://{auth}127.0.0.1:{self.port}/{db}?ssl_ca_certs={ca}"
        return f"redis://{auth}127.0.0.1:{self.port}/{db}"

    def start(self, timeout: float = 10.0) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [
                self.executable,
                *self._listen(),
                "--bind", "127.0.0.1",
                "--dir", str(self.directory),
                "--save", "",
                "--appendonly", "yes",
                "--appendfsync", "always",
                *(["--requirepass", self.password] if self.password else []),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port)):
                return
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.stop()
                raise ConfigError(f"redis-server did not start on port {self.port}")
            time.sleep(0.01)

    def _listen(self) -> list[str]:
        if self.tls is None:
            return ["--port", str(self.port)]
        return [
            "--port", "0",
            "--tls-port", str(self.port),
            "--tls-cert-file", str(self.tls.cert),
            "--tls-key-file", str(self.tls.key),
            "--tls-ca-cert-file", str(self.tls.ca),
            "--tls-auth-clients", "no",
        ]  # fmt: skip

    def stop(self) -> None:
        """SIGTERM: Redis flushes its append-only file and exits."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()


@contextlib.contextmanager
def local_redis(directory: Path) -> Iterator[LocalRedis]:
    """A started :class:`LocalRedis`, stopped on the way out."""
    server = LocalRedis(directory)
    server.start()
    try:
        yield server
    finally:
        server.stop()
