"""Variants from outside the package, one per axis of change, each registered the way a
third party registers one (docs/architecture.md, "Where a change goes")."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from loopactors.gateway import forget_node_request, register_node_request
from loopactors.loops import forget_trigger, register_trigger
from loopactors.runtime import forget_transport, register_transport
from loopactors.workers import forget_worker_kind, register_worker_kind

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def reverse_kind() -> Iterator[str]:
    """The ``reverse`` worker kind registered by its path, as a plug-in calls it."""
    register_worker_kind("reverse", "tests.extensions.reverse_kind:KIND")
    try:
        yield "reverse"
    finally:
        forget_worker_kind("reverse")


def installed(site: Path, group: str, name: str, target: str) -> dict[str, str]:
    """An installed distribution in ``site`` naming ``target`` in an entry-point ``group``,
    and the environment of a process that sees it (and this checkout)."""
    info = site / "loopactors_extension_test-1.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: loopactors-extension-test\nVersion: 1.0\n"
    )
    with (info / "entry_points.txt").open("a") as points:
        points.write(f"[{group}]\n{name} = {target}\n")
    path = os.pathsep.join([str(ROOT), str(site), *sys.path[1:]])
    return {**os.environ, "PYTHONPATH": path}


@pytest.fixture
def tail_request() -> Iterator[str]:
    """The ``tail`` node request registered by its path, as a plug-in registers it."""
    register_node_request("tail", "tests.extensions.tail_request:TAIL")
    try:
        yield "tail"
    finally:
        forget_node_request("tail")


@pytest.fixture
def subproc_transport() -> Iterator[str]:
    """The ``subproc://`` transport registered by its path, as a plug-in registers it."""
    register_transport("subproc", "tests.extensions.subproc_transport:SUBPROC")
    try:
        yield "subproc://"
    finally:
        forget_transport("subproc")


@pytest.fixture
def long_output_trigger() -> Iterator[str]:
    """The ``long_output`` breaker trigger, registered as a plug-in registers it."""
    from .long_output_trigger import LONG_OUTPUT

    register_trigger(LONG_OUTPUT)
    try:
        yield "long_output"
    finally:
        forget_trigger("long_output")
