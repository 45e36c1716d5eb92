"""A throwaway PostgreSQL server for the tests: initdb and pg_ctl in a temporary directory,
reached only through a Unix socket there, with fsync off (a test database needs no
durability across power loss). Each test gets a fresh schema, named first in its URL's
``search_path``, so tests never see each other's tables.

``initdb`` and ``pg_ctl`` refuse to run as root: as root they run as the ``postgres`` user
(``runuser``), which then owns the directory. Without the server binaries the tests that
need them skip, saying so; CI installs Debian's ``postgresql`` (.ci/run).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import urllib.parse
import uuid
from pathlib import Path

import pytest


def _bin_dir() -> Path | None:
    found = shutil.which("pg_ctl")
    if found is not None:
        return Path(found).parent
    # Debian keeps them off PATH, by major version.
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda path: int(Path(path).parent.parent.name),
    )
    return Path(candidates[-1]).parent if candidates else None


SKIP_REASON = (
    "the PostgreSQL server binaries (initdb, pg_ctl) are not installed "
    "(CI installs them: apt-get install postgresql)"
)


class PostgresServer:
    """One server for the test session; :meth:`fresh_url` makes an empty schema."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="loopactors-pg-"))
        self.data = self.root / "data"
        self.socket_dir = self.root
        self._as: list[str] = []
        if os.geteuid() == 0:
            runuser = shutil.which("runuser")
            if runuser is None:
                pytest.skip("running as root without runuser: cannot start PostgreSQL")
            shutil.chown(self.root, user="postgres")
            self._as = [runuser, "-u", "postgres", "--"]
        self.root.chmod(0o755)

    def _run(self, *argv: str) -> None:
        result = subprocess.run(
            [*self._as, *argv], capture_output=True, text=True, check=False, cwd=self.root
        )
        if result.returncode != 0:
            log = self.root / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{argv[0]} failed: {result.stdout}{result.stderr}{tail}")

    def start(self) -> None:
        self._run(
            str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "loop",
            "-E", "UTF8", "--no-sync", "--no-instructions",
        )  # fmt: skip
        options = (
            f"-k {self.socket_dir} -c listen_addresses='' -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        self._run(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options, "-w",
            "-l", str(self.root / "server.log"), "start",
        )  # fmt: skip

    def stop(self) -> None:
        try:
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    @property
    def url(self) -> str:
        """The server's ``postgres`` database, as the test user (no password: trust)."""
        return f"postgresql://loop@/postgres?host={urllib.parse.quote(str(self.socket_dir))}"

    def fresh_url(self) -> str:
        """A URL whose tables live in a new, empty schema."""
        import psycopg

        schema = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        options = urllib.parse.quote(f"-csearch_path={schema}")
        return f"{self.url}&options={options}"


def start_server() -> PostgresServer:
    bin_dir = _bin_dir()
    if bin_dir is None:
        pytest.skip(SKIP_REASON)
    server = PostgresServer(bin_dir)
    try:
        server.start()
    except BaseException:
        shutil.rmtree(server.root, ignore_errors=True)
        raise
    return server


#: Every built-in store, for tests of the StoreBackend contract.
STORES = ("memory", "sqlite", "postgres")


def store_url(request: pytest.FixtureRequest, name: str) -> str:
    """The URL of a fresh store of kind ``name`` (one of :data:`STORES`)."""
    if name == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    return name
