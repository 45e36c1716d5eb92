"""Runtimes for the runtime's tests: in memory (virtual time works) or on SQLite."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from loopactors.runtime import Runtime, RuntimeConfig, open_runtime


def memory_config(**changes: object) -> RuntimeConfig:
    return RuntimeConfig(store="memory", shutdown_grace=5.0).replace(**changes)


def sqlite_config(state_dir: Path, **changes: object) -> RuntimeConfig:
    return RuntimeConfig(store="sqlite", state_dir=state_dir, shutdown_grace=5.0).replace(**changes)


@pytest.fixture
async def rt() -> AsyncIterator[Runtime]:
    async with open_runtime(memory_config()) as runtime:
        yield runtime
