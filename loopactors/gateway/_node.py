"""The standalone node: the runtime plus a Gateway, run until SIGTERM or SIGINT."""

from __future__ import annotations

import contextlib
import functools
import logging
import secrets
import signal
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio

from .._logs import log_fields
from ..actors import ChildSpec, NamedRef
from ..errors import SupervisorError
from ..loops import AnyEvent, LoopFinished, LoopRecovered, LoopStarted
from ..runtime import NODE_URL_FILE, Runtime, RuntimeConfig, open_runtime
from ._auth import check_listen, load_token
from ._door import Door, open_door
from ._extensions import AddedRequests, NodeRequest
from ._gateway import Gateway, GatewayStatistics
from ._messages import GatewayShutdown, GetGatewayStatistics
from ._metrics import NodeMetrics
from ._settings import GatewaySettings

__all__ = ["GatewayHandle", "open_gateway", "serve_node"]

log = logging.getLogger("loopactors.node")


@attrs.frozen
class GatewayHandle:
    """A gateway running on a runtime: where it listens and how to steer it."""

    ref: NamedRef[Any]
    host: str
    port: int
    node_id: str
    token_path: Path

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"ws://{host}:{self.port}"

    async def statistics(self) -> GatewayStatistics:
        stats: GatewayStatistics = await self.ref.call(GetGatewayStatistics(), timeout=10.0)
        return stats

    async def shutdown(self, reason: str = "the node is shutting down") -> int:
        """Stop accepting, tell every client ``reason`` and close it; how many were closed."""
        closed: int = await self.ref.call(GatewayShutdown(reason), timeout=30.0)
        return closed


@asynccontextmanager
async def open_gateway(
    runtime: Runtime,
    settings: GatewaySettings | None = None,
    *,
    extensions: Sequence[NodeRequest] = (),
    door: Door | None = None,
) -> AsyncIterator[GatewayHandle]:
    """Serve ``runtime`` over websockets for the duration of the block, with the requests an
    application adds (``extensions``: ``codeloop.CODE_REQUEST`` serves ``code``).

    The token is the one in ``settings.token_file``, else ``<state_dir>/node.token``
    (created with mode 0600 at first start). A non-loopback ``host`` needs an explicit
    ``token_file``. With a ``door`` (:func:`open_door`, opened before the runtime) the
    gateway serves on its port, which answers ``503`` while no gateway does.
    """
    settings = settings or GatewaySettings()
    added = AddedRequests.of(extensions)  # a clear error now, not a child that fails to start
    check_listen(settings.host, explicit_token_file=settings.token_file is not None)
    token, token_path = load_token(Path(runtime.config.state_dir), settings.token_file)
    node_id = secrets.token_hex(6)  # new at each start: a client can tell a restart
    metrics = NodeMetrics(runtime)  # its counters outlive restarts of the gateway
    factory = functools.partial(
        Gateway, runtime, settings, token, node_id, metrics, added=added, door=door
    )
    await runtime.node.start_child(ChildSpec("gateway", factory, name="gateway"))
    ref = runtime.node.ref("gateway")
    stats: GatewayStatistics = await ref.call(GetGatewayStatistics(), timeout=10.0)
    handle = GatewayHandle(ref, settings.host, stats.port, node_id, token_path)
    # Where this node listens, for a command that finds the state directory in use (it
    # suggests --connect with this URL); gone when the node stops.
    url_file = Path(runtime.config.state_dir) / NODE_URL_FILE
    with contextlib.suppress(OSError):  # only a hint: a read-only state directory will do
        url_file.write_text(handle.url + "\n")
    try:
        yield handle
    finally:
        with contextlib.suppress(OSError):
            url_file.unlink(missing_ok=True)
        with trio.CancelScope(shield=True):
            try:
                await handle.shutdown()
            except Exception:  # already gone: nothing left to tell
                log.debug("gateway was not running at shutdown")
            with contextlib.suppress(SupervisorError):  # already terminated by its owner
                await runtime.node.terminate_child("gateway")


async def serve_node(
    config: RuntimeConfig,
    settings: GatewaySettings,
    *,
    extensions: Sequence[NodeRequest] = (),
    task_status: trio.TaskStatus[GatewayHandle] = trio.TASK_STATUS_IGNORED,
) -> int:
    """Run a node until SIGTERM or SIGINT, then shut down gracefully (loops persist).

    The port is open from before the runtime until after it stopped: ``/healthz`` answers
    ``503`` while the runtime starts (recovering its loops) and for the whole shutdown.
    """
    check_listen(settings.host, explicit_token_file=settings.token_file is not None)
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with (
            open_door(settings) as door,
            open_runtime(config, observer=_log_loop) as runtime,
            open_gateway(runtime, settings, extensions=extensions, door=door) as gateway,
        ):
            log.info(
                "node %s serving %s (state %s, token in %s, worker %s)",
                gateway.node_id,
                gateway.url,
                config.state_dir,
                gateway.token_path,
                config.worker,
                extra=log_fields("node_serving"),
            )
            task_status.started(gateway)
            async for signum in signals:
                name = signal.Signals(signum).name
                log.info(
                    "%s: shutting down (loops stay resumable)", name, extra=log_fields("shutdown")
                )
                break
            door.shutting_down()
            closed = await gateway.shutdown()
            log.info("told %d client(s) the node is going away", closed)
    log.info("node stopped", extra=log_fields("node_stopped"))
    return 0


def _log_loop(event: AnyEvent) -> None:
    """One log line per start and end of a loop (and per loop picked up after a restart)."""
    if isinstance(event, LoopStarted):
        log.info(
            "loop %s started: %d rounds, %s mode, worker %s",
            event.loop_id,
            event.rounds,
            event.mode,
            event.worker,
            extra=log_fields("loop_started", event.loop_id),
        )
    elif isinstance(event, LoopRecovered):
        log.info(
            "loop %s recovered in %s at round %d",
            event.loop_id,
            event.phase,
            event.round,
            extra=log_fields("loop_recovered", event.loop_id),
        )
    elif isinstance(event, LoopFinished):
        why = f" ({event.trigger or event.reason})" if event.reason else ""
        log.info(
            "loop %s %s after %d/%d rounds%s",
            event.loop_id,
            event.phase,
            event.completed_rounds,
            event.rounds,
            why,
            extra=log_fields("loop_finished", event.loop_id),
        )
