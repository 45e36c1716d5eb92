"""How the gateway admits TCP connections (docs/security.md, "Gateway").

Every connection is counted from accept to close. Together they never hold more descriptors
than the :class:`~._limits.DescriptorBudget` allows, so the runtime keeps a reserve for its
own work whatever the load on the port: at the budget, the oldest connection still sending its
request head is dropped to make room (whatever its age: the budget is a hard limit and
accepting must go on), and when there is none, accepting pauses (new
connections wait in the kernel's backlog) until one closes. A connection has
``handshake_timeout`` seconds to send its whole request head; past ``max_handshaking`` doing
so at once, a new one drops the oldest once that has had ``DROP_AGE`` seconds (younger ones
are all read: a client is never kept waiting to be read); one whose peer closes is closed at
once. ``accept`` failing for want of
descriptors or memory pauses accepting briefly. Each of these conditions is one log line, at
most every 10 s, with a count of what happened since; never a traceback.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import NoReturn

import trio

from ._limits import DescriptorBudget, Notices
from ._settings import GatewaySettings

__all__ = ["Admission", "Handshake", "descriptor_budget"]

log = logging.getLogger("loopactors.gateway")

#: ``accept`` errors that mean the process or system is out of something: wait, then retry.
_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_ACCEPT_PAUSE = 0.1
#: Seconds a connection must have been handshaking before it may be dropped for a new one.
DROP_AGE = 1.0
#: What a limit that is not set, or absurdly high, counts as.
_UNLIMITED = 1 << 20

Handler = Callable[[trio.SocketStream], Awaitable[None]]


def descriptor_budget(reserve: int) -> DescriptorBudget:
    """This process's budget: its ``RLIMIT_NOFILE`` soft limit and the descriptors open now."""
    limit = _UNLIMITED
    with contextlib.suppress(ImportError, OSError, ValueError):
        import resource  # noqa: PLC0415 - POSIX only

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if 0 < soft != resource.RLIM_INFINITY:
            limit = min(soft, _UNLIMITED)
    in_use = 0
    for directory in ("/proc/self/fd", "/dev/fd"):
        with contextlib.suppress(OSError):
            in_use = len(os.listdir(directory))
            break
    return DescriptorBudget(limit=limit, in_use=in_use, reserve=reserve)


class Handshake:
    """One connection's time to send its request head: cancelled when it is over, and why."""

    __slots__ = ("dropped", "scope", "timed_out")

    def __init__(self, scope: trio.CancelScope) -> None:
        self.scope = scope
        #: Dropped to make room for a newer connection (not its own fault: no answer).
        self.dropped = False
        #: It took longer than ``handshake_timeout``.
        self.timed_out = False


class Admission:
    """The gateway's TCP connections, from accept to close (see the module docstring)."""

    def __init__(self, settings: GatewaySettings, budget: DescriptorBudget) -> None:
        self.budget = budget
        #: Each kind of connection that has not proven itself gets a quarter of the budget at
        #: most, so that half of it is always left for token holders.
        self.max_handshaking = budget.share(0.25, settings.max_handshaking)
        self.max_unauthenticated = budget.share(0.25, settings.max_unauthenticated)
        self.handshake_timeout = settings.handshake_timeout
        self.open = 0
        #: Connections still sending their request head, oldest first, with their start.
        self._handshaking: dict[int, tuple[Handshake, float]] = {}
        self._ids = itertools.count()
        #: Set when a connection closes or ends its handshake (replaced by each waiter).
        self._changed = trio.Event()
        self._notices = Notices()
        # Counted since this gateway incarnation started.
        self.dropped = 0
        self.timed_out = 0
        self.accept_errors = 0
        self.budget_waits = 0

    def notice(self, condition: str, message: str) -> None:
        """Log ``message`` as a warning unless ``condition`` was told less than 10 s ago."""
        untold = self._notices.due(condition, trio.current_time())
        if untold is not None:
            log.warning(
                "%s%s", message, f" ({untold} more since the last such line)" * bool(untold)
            )

    async def serve(
        self, listeners: list[trio.SocketListener], handler: Handler, nursery: trio.Nursery
    ) -> NoReturn:
        """Accept on every listener for ever, each connection's ``handler`` in ``nursery``."""
        async with trio.open_nursery() as accepters:
            for listener in listeners:
                accepters.start_soon(self._accept_loop, listener, handler, nursery)
        raise AssertionError("accept loops never end")  # pragma: no cover

    async def _accept_loop(
        self, listener: trio.SocketListener, handler: Handler, nursery: trio.Nursery
    ) -> None:
        async with listener:
            while True:
                while self.open >= self.budget.capacity:
                    self.budget_waits += 1
                    if not self._handshaking:
                        self.notice(
                            "budget",
                            f"the gateway holds all {self.budget.describe()}: new connections "
                            "wait until one closes (raise 'ulimit -n' to serve more)",
                        )
                    else:  # one at a time: the dropped one's close wakes this loop
                        self._drop_oldest(
                            f"the gateway holds all {self.budget.describe()}", min_age=0.0
                        )
                    await self._wait_for_change()
                try:
                    stream = await listener.accept()
                except OSError as exc:
                    if exc.errno not in _CAPACITY_ERRNOS:
                        raise
                    self.accept_errors += 1
                    self.notice(
                        "accept",
                        f"cannot accept connections: {os.strerror(exc.errno)}; "
                        f"retrying every {_ACCEPT_PAUSE:g}s",
                    )
                    await trio.sleep(_ACCEPT_PAUSE)
                    continue
                self.open += 1
                nursery.start_soon(self._run, stream, handler)

    async def _run(self, stream: trio.SocketStream, handler: Handler) -> None:
        try:
            await handler(stream)
        finally:
            await trio.aclose_forcefully(stream)  # closes at once, even when cancelled
            self.open -= 1
            self._changed.set()

    @contextlib.asynccontextmanager
    async def handshake(self) -> AsyncIterator[Handshake]:
        """Around reading a connection's request head: cancelled after ``handshake_timeout``
        or when the connection is dropped to make room (see the module docstring).

        Past ``max_handshaking`` a new connection drops the oldest one, but only once that has
        had ``DROP_AGE`` seconds to send its head; when none has, the new one is read all the
        same (the descriptor budget still bounds them all). So a burst of honest clients,
        whose heads arrive within milliseconds, never drops its own members, and a client is
        never kept waiting to be read: once its head is read it can prove itself.
        """
        if len(self._handshaking) >= self.max_handshaking:
            self._drop_oldest(
                f"more than {self.max_handshaking} connections are still to send their "
                "request (idle, half-open or slow clients)",
                min_age=DROP_AGE,
            )
        deadline = trio.current_time() + self.handshake_timeout
        key = next(self._ids)
        ticket = Handshake(trio.CancelScope(deadline=deadline))
        self._handshaking[key] = (ticket, trio.current_time())
        try:
            with ticket.scope:
                yield ticket
        finally:
            self._handshaking.pop(key, None)
            self._changed.set()
        if ticket.scope.cancelled_caught and not ticket.dropped:
            ticket.timed_out = True
            self.timed_out += 1
            self.notice(
                "handshake",
                f"closed a connection that sent no whole request within "
                f"{self.handshake_timeout:g}s",
            )

    def _drop_oldest(self, why: str, *, min_age: float) -> bool:
        """Drop the oldest connection still handshaking if it has been for ``min_age``."""
        if not self._handshaking:
            return False
        key, (ticket, started) = next(iter(self._handshaking.items()))
        if trio.current_time() - started < min_age:
            return False
        del self._handshaking[key]
        ticket.dropped = True
        ticket.scope.cancel()
        self.dropped += 1
        self.notice("drop", f"dropped the oldest connection still to send its request: {why}")
        return True

    async def _wait_for_change(self) -> None:
        """Until a connection finishes its handshake or closes, or the oldest one still
        handshaking becomes old enough to drop."""
        if self._changed.is_set():  # every waiter waits on the same event until it is set
            self._changed = trio.Event()
        oldest = min((started for _, started in self._handshaking.values()), default=None)
        with trio.move_on_at(
            oldest + DROP_AGE if oldest is not None else trio.current_time() + DROP_AGE
        ):
            await self._changed.wait()
