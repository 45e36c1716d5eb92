"""`loopactors dashboard`: the node's dashboard address, signed in, and optionally opened.

The token goes in the URL's fragment (``#token=...``), which a browser never sends to a
server; the page moves it into the tab's sessionStorage and drops it from the address bar.
"""

from __future__ import annotations

import argparse
import sys
import urllib.parse
import webbrowser
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ._remote import read_token

# httpx and the runtime load when the command runs: the command line imports this module to
# build its parser, for every command.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..runtime import RuntimeConfig

__all__ = ["add_parser", "dashboard", "dashboard_url"]

_SCHEMES = {"ws": "http", "wss": "https", "http": "http", "https": "https"}
# A node listening on every address is reached on this machine through the loopback one.
_ANY_ADDRESS = {"0.0.0.0", "::", ""}


def add_parser(commands: Any, state_options: Any, connect_options: Any) -> None:
    parser = commands.add_parser(
        "dashboard", help="print the node's dashboard address with its token (--open: open it)"
    )
    parser.add_argument("--open", action="store_true", help="open it in the default browser")
    state_options(parser, allow_memory=False, with_state=True)
    connect_options(parser)


def dashboard_url(node_url: str, token: str) -> str:
    """``ws://HOST:PORT`` (or ``http://...``) and the token -> the dashboard's address."""
    parts = urllib.parse.urlsplit(node_url)
    scheme = _SCHEMES.get(parts.scheme)
    if scheme is None or not parts.hostname:
        raise ConfigError(
            f"--connect takes the node's address, ws://HOST:PORT (or wss://, http://), "
            f"got {node_url!r}"
        )
    host = parts.hostname
    if host in _ANY_ADDRESS:
        host = "127.0.0.1"
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    fragment = "token=" + urllib.parse.quote(token, safe="")
    return urllib.parse.urlunsplit((scheme, netloc, "/", "", fragment))


def dashboard(args: argparse.Namespace, config: RuntimeConfig) -> int:
    import httpx  # noqa: PLC0415 - see the note on the imports

    node = config.node
    if args.connect:
        node_url = args.connect
    else:
        node_url = _running_node(config.state_dir)
        if node_url is None:
            host = node.host if ":" not in node.host else f"[{node.host}]"
            node_url = f"ws://{host}:{node.port}"
    dashboard_url(node_url, "")  # a bad address is refused before any token is read
    url = dashboard_url(node_url, read_token(args, config.state_dir))
    print(url)
    health = url.partition("#")[0] + "healthz"
    try:
        answer = httpx.get(health, timeout=3.0)
        if answer.status_code != 200:
            print(
                f"loopactors: the node at {node_url} is not serving ({answer.status_code})",
                file=sys.stderr,
            )
    except httpx.HTTPError:
        print(
            f"loopactors: no node answers at {node_url} yet (start one with `loopactors node`)",
            file=sys.stderr,
        )
    if args.open and not webbrowser.open(url):
        print("loopactors: no browser to open; open the address above", file=sys.stderr)
    return 0


def _running_node(state_dir: Path) -> str | None:
    """Where the node serving ``state_dir`` listens, as it wrote it (``node.url``): right
    even when it was started with another ``--listen`` than the configuration's."""
    from ..runtime import NODE_URL_FILE  # noqa: PLC0415 - see the note on the imports

    try:
        url = (state_dir / NODE_URL_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return url or None
