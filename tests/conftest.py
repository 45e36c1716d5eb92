"""What every test shares."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import settings

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
