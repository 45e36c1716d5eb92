"""What every test shares."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="session")
def _state_home_of_the_tests(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Nothing a test starts writes under the real home's state directory (a `loopactors
    worker` lists its process groups in ``$XDG_STATE_HOME``, docs/scale-out.md)."""
    patch = pytest.MonkeyPatch()
    patch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state-home")))
    yield
    patch.undo()
