"""What every test shares."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import settings

from .postgres import PostgresServer, start_server

# Property tests check behaviour, not speed: a per-example deadline (hypothesis's default is
# 200 ms) only makes them fail now and then on a loaded machine (timing goals live in bench/).
settings.register_profile("loopactors", deadline=None)
settings.load_profile("loopactors")


@pytest.fixture(autouse=True, scope="session")
def _state_home_of_the_tests(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Nothing a test starts writes under the real home's state directory (a `loopactors
    worker` lists its process groups in ``$XDG_STATE_HOME``, docs/scale-out.md)."""
    patch = pytest.MonkeyPatch()
    patch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state-home")))
    yield
    patch.undo()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL server for the session (tests/postgres.py); skips, saying
    so, where its binaries are not installed."""
    server = start_server()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """A ``postgresql://`` store URL with a schema of its own, empty."""
    return postgres_server.fresh_url()
