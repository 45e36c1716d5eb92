"""The real coding-agent CLIs against provider fakes on loopback (see _fakes.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from loopactors.workers._cli_worker import SESSION_MARKERS, clear_limit_holds

from ._fakes import QUIET, AnthropicFake, cli_binary, git_workspace
from ._loops import binary

#: Variables that could route a request off the machine or leak a real account.
_OUTSIDE = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CLAUDE_CONFIG_DIR",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
)


@pytest.fixture(autouse=True)
def _no_limit_holds() -> Iterator[None]:
    clear_limit_holds()
    yield
    clear_limit_holds()


@pytest.fixture(scope="session")
def claude_bin() -> Path:
    return cli_binary("claude")


def _pinned(name: str) -> Callable[[], Path]:
    @pytest.fixture(name=name)
    def pinned_binary() -> Path:
        """The pinned CLI, installed into the cache on first use."""
        return binary(name)

    return pinned_binary


codex = _pinned("codex")
gemini = _pinned("gemini")
aider = _pinned("aider")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """The CLI's home directory (its configuration and sessions), made by ``quiet_env``."""
    return tmp_path / "home"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A git workspace the round's CLI works in (a module may override it)."""
    return git_workspace(tmp_path / "ws")


@pytest.fixture
def fake(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The provider fake of the module's kind (its ``FAKE`` class) serving on loopback;
    answers held back are let go at the end."""
    fake = request.module.FAKE()
    with fake.server.running():
        yield fake
        fake.release()


@pytest.fixture
def anthropic() -> Iterator[AnthropicFake]:
    fake = AnthropicFake()
    with fake.server.running():
        yield fake


@pytest.fixture
def claude_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, claude_bin: Path, anthropic: AnthropicFake
) -> dict[str, str]:
    """This process's environment set for Claude Code against the fake: what rounds inherit."""
    for name in (*_OUTSIDE, *SESSION_MARKERS):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    values = {
        **QUIET,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "PATH": f"{claude_bin.parent}:{__import__('os').environ['PATH']}",
        "ANTHROPIC_BASE_URL": anthropic.url,
        "ANTHROPIC_API_KEY": "sk-ant-test-not-a-real-key",
        "NO_PROXY": "127.0.0.1,localhost",
        # An error answer is final at once (Claude Code retries 429 and 5xx by default).
        "CLAUDE_CODE_MAX_RETRIES": "0",
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return values
