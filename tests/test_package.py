"""The package's public surface and its command line."""

from __future__ import annotations

import subprocess
import sys

import loopactors
import loopactors.actors
import loopactors.agent
import loopactors.errors
import loopactors.loops
import loopactors.runtime
import loopactors.storage
import loopactors.testing
import loopactors.workers
from loopactors.cli import main


def test_public_names_are_exported() -> None:
    for module in (
        loopactors,
        loopactors.actors,
        loopactors.agent,
        loopactors.errors,
        loopactors.loops,
        loopactors.runtime,
        loopactors.storage,
        loopactors.testing,
        loopactors.workers,
    ):
        assert len(set(module.__all__)) == len(module.__all__), module.__name__
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name}"


def test_public_classes_show_their_public_module() -> None:
    assert loopactors.actors.Actor.__module__ == "loopactors.actors"
    assert loopactors.actors.Supervisor.__module__ == "loopactors.actors"
    assert loopactors.agent.Transcript.__module__ == "loopactors.agent"


def test_every_error_derives_from_the_base() -> None:
    for name in loopactors.errors.__all__:
        assert issubclass(getattr(loopactors.errors, name), loopactors.errors.LoopactorsError)


def test_cli_help_and_version() -> None:
    assert main(["version"]) == 0
    assert main([]) == 0
    assert main(["--no-such-flag"]) == 64


def test_python_dash_m_runs_the_cli() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "loopactors", "--help"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0
    assert result.stdout.startswith("usage: loopactors")


def test_version_is_the_installed_distributions() -> None:
    from importlib.metadata import version

    import loopactors

    assert loopactors.__version__ == version("loopactors")
