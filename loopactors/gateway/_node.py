"""The standalone node: the runtime plus a Gateway, run until SIGTERM or SIGINT."""

from __future__ import annotations

import contextlib
import functools
import logging
import random
import secrets
import signal
import socket
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio

from .._logs import log_fields
from ..actors import ChildSpec, NamedRef
from ..errors import (
    LeaseLost,
    LoopactorsError,
    RestartIntensityExceeded,
    StoreError,
    SupervisorError,
)
from ..loops import AnyEvent, LoopFinished, LoopRecovered, LoopStarted
from ..runtime import NODE_URL_FILE, Runtime, RuntimeConfig, open_runtime
from ..storage import store_kind
from ._auth import check_listen, load_token
from ._door import Door, open_door
from ._extensions import AddedRequests, NodeRequest
from ._gateway import Gateway, GatewayStatistics
from ._messages import GatewayShutdown, GetGatewayStatistics
from ._metrics import NodeMetrics
from ._settings import GatewaySettings

__all__ = ["GatewayHandle", "open_gateway", "serve_node"]

log = logging.getLogger("loopactors.node")

#: Hosts that mean "every address of this machine".
_EVERY_ADDRESS = frozenset({"", "0.0.0.0", "::"})


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

    @property
    def advertised_url(self) -> str:
        """:attr:`url` as another machine would use it: the machine's name for a gateway
        listening on every address."""
        if self.host in _EVERY_ADDRESS:
            return f"ws://{socket.gethostname()}:{self.port}"
        return self.url

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
    try:  # for the other nodes of a shared store (their status and dashboards)
        await runtime.set_gateway_url(handle.advertised_url)
    except LoopactorsError as exc:  # only shown there: the gateway serves all the same
        log.warning("cannot record the gateway's address in the store: %s", exc)
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

    A runtime that ends with :class:`LeaseLost` (its lease on a shared store ended), or on
    its shared store's failure, is opened again as a new incarnation on the same port,
    waiting longer between attempts while the store cannot be reached; unless
    ``settings.exit_on_lease_lost``: then the error is raised (docs/multinode.md).
    """
    check_listen(settings.host, explicit_token_file=settings.token_file is not None)
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with open_door(settings) as door, trio.open_nursery() as nursery:
            stopping = trio.Event()

            async def watch() -> None:
                async for signum in signals:
                    name = signal.Signals(signum).name
                    log.info(
                        "%s: shutting down (loops stay resumable)",
                        name,
                        extra=log_fields("shutdown"),
                    )
                    stopping.set()
                    return

            nursery.start_soon(watch)
            node = _Incarnations(config, settings, extensions, door, stopping)
            await node.serve(task_status)
            nursery.cancel_scope.cancel()
    log.info("node stopped", extra=log_fields("node_stopped"))
    return 0


#: Seconds between attempts to register again after a lost lease while the store cannot
#: be reached: the first, doubled at each failure up to the last (jittered).
RELIVE_BACKOFF = (1.0, 30.0)


@attrs.define
class _Incarnations:
    """The runtimes `loopactors node` runs one after the other behind one door: a new one
    (a new lease, never the dead one's) after each that ended with ``LeaseLost`` or on its
    shared store's failure."""

    config: RuntimeConfig
    settings: GatewaySettings
    extensions: Sequence[NodeRequest]
    door: Door
    stopping: trio.Event
    #: A runtime ended with its lease lost: failures to open the next are retried.
    lost: bool = False
    #: Seconds to wait before the next attempt (0: at once), and the back-off it grew from.
    delay: float = 0.0
    backoff: float = 0.0
    #: When the runtime in hand began to serve (None: not yet).
    served_at: float | None = None

    async def serve(self, task_status: trio.TaskStatus[GatewayHandle]) -> None:
        while not self.stopping.is_set():
            if self.delay:
                with trio.move_on_after(self.delay):
                    await self.stopping.wait()
                if self.stopping.is_set():
                    break
            self.served_at = None
            try:
                await self._serve_once(task_status)
            except Exception as exc:
                failure = _store_failure(exc)
                if failure is None:
                    raise
                self._after(failure, exc)
            else:
                return
        self.door.shutting_down()

    async def _serve_once(self, task_status: trio.TaskStatus[GatewayHandle]) -> None:
        config, settings = self.config, self.settings
        async with (
            open_runtime(config, observer=_log_loop) as runtime,
            open_gateway(runtime, settings, extensions=self.extensions, door=self.door) as gateway,
        ):
            self.served_at = trio.current_time()
            log.info(
                "node %s serving %s%s (state %s, token in %s, worker %s)",
                gateway.node_id,
                gateway.url,
                " again, a new incarnation" if self.lost else "",
                config.state_dir,
                gateway.token_path,
                config.worker,
                extra=log_fields("node_serving"),
            )
            if not self.lost:
                task_status.started(gateway)
            await self.stopping.wait()
            self.door.shutting_down()
            closed = await gateway.shutdown()
            log.info("told %d client(s) the node is going away", closed)

    def _after(self, failure: StoreError, exc: BaseException) -> None:
        """What follows a runtime that ended on ``failure``: raise ``exc`` again, or set
        when the next incarnation is opened."""
        # A runtime that served a lease long starts the back-off anew.
        steady = self.served_at is not None and (
            trio.current_time() - self.served_at >= self.config.lease_ttl
        )
        if steady:
            self.backoff = 0.0
        if isinstance(failure, LeaseLost):
            if self.settings.exit_on_lease_lost:
                log.error("lease lost: exiting (exit_on_lease_lost is set)")
                raise exc
            # The first loss, or one of a runtime that served a lease long: at once; one
            # lost soon after it was opened (the store unsteady) waits as a failed
            # attempt does.
            if steady or not self.lost:
                self.backoff = self.delay = 0.0
            else:
                self._back_off()
            self.lost = True
            log.warning(
                "lease lost: registering again as a new incarnation%s",
                f" in {self.delay:.1f} s" if self.delay else "",
            )
            return
        if self.served_at is not None:
            if self.settings.exit_on_lease_lost or store_kind(self.config.store).hold is None:
                raise exc  # told to exit; or a store of this node's own, with no lease
            # The store failed under a running runtime (the database unreachable): its
            # lease is as good as lost, and the next incarnation waits for the database.
            self.lost = True
            self._back_off()
            log.warning(
                "the store failed (%s): registering again as a new incarnation in %.1f s",
                failure,
                self.delay,
            )
            return
        if not self.lost:
            raise exc  # the first start: as before
        self._back_off()
        log.warning("cannot register again (%s); next attempt in %.1f s", failure, self.delay)

    def _back_off(self) -> None:
        first, most = RELIVE_BACKOFF
        self.backoff = min(max(self.backoff * 2.0, first), most)
        self.delay = self.backoff * random.uniform(0.8, 1.0)


def _store_failure(exc: BaseException) -> StoreError | None:
    """The store error ``exc`` is, or that a group of only store errors holds (its first
    ``LeaseLost`` if any), or that made a supervisor give up; None for anything else."""
    if isinstance(exc, StoreError):
        return exc
    if isinstance(exc, RestartIntensityExceeded):
        return exc.last_cause if isinstance(exc.last_cause, StoreError) else None
    if not isinstance(exc, BaseExceptionGroup):
        return None
    leaves = [_store_failure(e) for e in exc.exceptions]
    if not leaves or any(leaf is None for leaf in leaves):
        return None
    found = [leaf for leaf in leaves if leaf is not None]
    return next((leaf for leaf in found if isinstance(leaf, LeaseLost)), found[0])


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
