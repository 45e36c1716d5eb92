"""pytest plugin: fixtures for tests of actor programs (registered as `loopactors`)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from ..actors import Node, open_node


@pytest.fixture
async def actor_node() -> AsyncIterator[Node]:
    """An empty node, open for one test; add actors with ``spawn`` or ``start_child``."""
    async with open_node(name="test-node") as node:
        yield node
