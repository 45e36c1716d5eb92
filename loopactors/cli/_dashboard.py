"""`loopactors dashboard`: the node's dashboard address, signed in, and optionally opened.

The token goes in the URL's fragment (``#token=...``), which a browser never sends to a
server; the page moves it into the tab's sessionStorage and drops it from the address bar.
``--open`` never puts that URL on the browser's command line (every local user can read a
command line in ``ps``): the browser is given a page file, ``0600`` in a ``0700`` directory,
that sends it on to the URL; the file is removed once the browser has read it.
"""

from __future__ import annotations

import argparse
import os
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

    from ..gateway import gateway_settings  # noqa: PLC0415 - the [node] table, attrs only

    node = gateway_settings(config)
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
    if args.open:
        _open_privately(url)
    return 0


#: How long ``--open`` waits for the browser to read the page file before removing it.
OPEN_READ_SECONDS = 60.0


def _open_privately(url: str) -> None:
    """Open ``url`` in the browser without the token on any command line: through a page
    file only this user can read, removed once read (or after ``OPEN_READ_SECONDS``)."""
    import json  # noqa: PLC0415 - see the note on the imports
    import shutil  # noqa: PLC0415
    import tempfile  # noqa: PLC0415
    import time  # noqa: PLC0415

    folder = Path(tempfile.mkdtemp(prefix="loopactors-dashboard-"))  # 0700
    page = folder / "open.html"
    target = json.dumps(url).replace("<", "\\u003c")
    fd = os.open(page, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(
            "<!doctype html><meta charset=utf-8><title>loopactors</title>"
            f"<script>location.replace({target})</script>"
        )
    written = page.stat().st_atime_ns
    try:
        if not webbrowser.open(page.as_uri()):
            print("loopactors: no browser to open; open the address above", file=sys.stderr)
            return
        deadline = time.monotonic() + OPEN_READ_SECONDS
        while time.monotonic() < deadline:
            if page.stat().st_atime_ns != written:  # the browser has read it
                break
            time.sleep(0.1)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _running_node(state_dir: Path) -> str | None:
    """Where the node serving ``state_dir`` listens, as it wrote it (``node.url``): right
    even when it was started with another ``--listen`` than the configuration's."""
    from ..runtime import NODE_URL_FILE  # noqa: PLC0415 - see the note on the imports

    try:
        url = (state_dir / NODE_URL_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return url or None
