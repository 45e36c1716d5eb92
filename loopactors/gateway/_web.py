"""What the node answers to plain HTTP: health, Prometheus metrics and the dashboard.

- ``GET /healthz``: ``200 ok`` while the node serves; ``503`` and why (``starting``,
  ``shutting down``, ``unavailable``) while it starts, stops or restarts an actor it needs.
- ``GET /metrics``: the Prometheus exposition, with ``Authorization: Bearer <token>`` only.
- ``GET /`` and ``GET /<file>``: the dashboard's files, shipped inside the package.

``HEAD`` is answered like ``GET`` without the body; other methods get 405. Paths are matched
against a fixed list of names, never joined to a directory, so no request reaches a file
outside the dashboard's.
"""

from __future__ import annotations

import importlib.resources
from typing import TYPE_CHECKING
from urllib.parse import unquote

from prometheus_client import CONTENT_TYPE_LATEST

from ._auth import token_matches
from ._http import HttpRequest, HttpResponse

if TYPE_CHECKING:
    from ._gateway import Gateway

__all__ = ["DASHBOARD_FILES", "WebRoutes", "dashboard_files"]

#: Content types of the dashboard's files, by suffix; a file of another kind is not served.
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".txt": "text/plain; charset=utf-8",
}

#: The page may load its own files and speak websocket to this node, nothing else.
_PAGE_HEADERS = (
    (
        "Content-Security-Policy",
        "default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data:; "
        "frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    ),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
    ("Cache-Control", "no-cache"),
)

DASHBOARD_FILES = "dashboard"


def dashboard_files() -> dict[str, tuple[bytes, str]]:
    """Every file of the dashboard by name, with its content type (read once, small)."""
    folder = importlib.resources.files("loopactors.gateway") / DASHBOARD_FILES
    files: dict[str, tuple[bytes, str]] = {}
    for entry in folder.iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in CONTENT_TYPES:
            files[entry.name] = (entry.read_bytes(), CONTENT_TYPES[suffix])
    return files


class WebRoutes:
    """The HTTP side of one gateway (the ``respond`` of its :class:`SplitServer`)."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.files = dashboard_files()

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method not in ("GET", "HEAD"):
            return HttpResponse.text(
                405,
                f"{request.method} is not accepted here; this node answers GET and HEAD "
                "(and websocket upgrades)",
                headers=(("Allow", "GET, HEAD"),),
            )
        path = request.target.partition("?")[0]
        try:
            decoded = unquote(path, errors="strict") if "%" in path else path
        except UnicodeDecodeError:
            decoded = "\0"  # refused below like any other bad path
        if not decoded.startswith("/") or any(
            bad in decoded for bad in ("/..", "../", "\\", "\0", "//")
        ):
            return HttpResponse.text(
                400,
                f"bad path {path[:200]!r}: a file of the dashboard, "
                "/healthz or /metrics is accepted",
            )
        if decoded == "/healthz":
            return self._health()
        if decoded == "/metrics":
            return await self._metrics(request)
        name = "index.html" if decoded == "/" else decoded[1:]
        found = self.files.get(name)
        if found is None:
            return HttpResponse.text(404, f"no {decoded[:200]!r} here: try /, /healthz or /metrics")
        body, content_type = found
        return HttpResponse(200, body, content_type, _PAGE_HEADERS)

    def _health(self) -> HttpResponse:
        if self.gateway.healthy():
            return HttpResponse.text(200, "ok", headers=(("Cache-Control", "no-store"),))
        door = self.gateway.door
        if door is not None and door.state != "serving":
            why: str = door.state  # "starting" or "shutting down"
        elif not self.gateway.accepting:
            why = "shutting down"
        else:
            why = "unavailable"  # an actor the runtime needs is down (it is being restarted)
        return HttpResponse.text(503, why, headers=(("Cache-Control", "no-store"),))

    async def _metrics(self, request: HttpRequest) -> HttpResponse:
        scheme, _, offered = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token_matches(self.gateway.token, offered.strip()):
            self.gateway.auth_failures += 1
            return HttpResponse.text(
                401,
                "metrics need the node's token: send Authorization: Bearer <token>",
                headers=(("WWW-Authenticate", 'Bearer realm="loopactors"'),),
            )
        body = await self.gateway.metrics.exposition(self.gateway)
        return HttpResponse(200, body, CONTENT_TYPE_LATEST, (("Cache-Control", "no-store"),))
