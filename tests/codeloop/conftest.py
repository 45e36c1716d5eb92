"""A toy repository per test, and a runtime in memory to run code rounds on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from loopactors.runtime import Runtime, RuntimeConfig, open_runtime

from .toyrepo import make_repo


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path)


@pytest.fixture
async def rt() -> AsyncIterator[Runtime]:
    async with open_runtime(RuntimeConfig(store="memory", shutdown_grace=5.0)) as runtime:
        yield runtime
