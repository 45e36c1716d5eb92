"""The Redis client, opened the same way by the node, the workers and ``status``.

coredis runs on anyio, so on trio. Connection errors are the ones retried with backoff.
Importing coredis takes a fifth of a second: only the Redis transport, the worker command and
``status`` with a Redis transport import this module.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator
from typing import Any

import coredis
import coredis.exceptions
import trio

from ._backoff import RetryDelays
from ._url import redact_url

__all__ = [
    "GROUP_EXISTS",
    "NO_GROUP",
    "RETRIED",
    "RETRIED_OR_NO_GROUP",
    "client_name",
    "create_group",
    "open_redis",
    "retry",
]

log = logging.getLogger("loopactors.transport")
# coredis logs each of its own connection retries (three every time we try): while Redis is
# down that is several lines a second. Our retries say it once per outage instead.
logging.getLogger("coredis").setLevel(logging.WARNING)

#: Errors after which an operation is tried again once Redis answers: connection loss, a
#: timeout, and a server that is still loading its data after a restart.
RETRIED: tuple[type[BaseException], ...] = (
    coredis.exceptions.ConnectionError,
    coredis.exceptions.BusyLoadingError,
    TimeoutError,
    OSError,
)


#: XGROUP CREATE of a group that exists (BUSYGROUP).
GROUP_EXISTS = coredis.exceptions.StreamDuplicateConsumerGroupError
#: A read from a group that does not exist (NOGROUP): Redis restarted without its data.
NO_GROUP = coredis.exceptions.StreamConsumerGroupError
#: Redis refused the credentials (or the user may not run a command): not worth retrying.
REFUSED: tuple[type[BaseException], ...] = (
    coredis.exceptions.AuthenticationError,
    coredis.exceptions.AuthorizationError,
)
#: What a background loop rides out: Redis away, or back without its data.
RETRIED_OR_NO_GROUP: tuple[type[BaseException], ...] = (*RETRIED, NO_GROUP)


def find_error(exc: BaseException, kinds: tuple[type[BaseException], ...]) -> BaseException | None:
    """The first error of these kinds in ``exc`` or the exception groups it nests."""
    if isinstance(exc, kinds):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = find_error(inner, kinds)
            if found is not None:
                return found
    return None


def client_name(role: str, name: str | None = None) -> str:
    """The name every connection of this process gives Redis (``CLIENT LIST`` shows it):
    ``loopactors-<role>-<name>``, by default the host and process id. Redis takes no spaces
    or control characters in a name: they become ``_``."""
    name = name if name is not None else f"{socket.gethostname()}-{os.getpid()}"
    raw = f"loopactors-{role}-{name}"
    return "".join(c if "!" <= c <= "~" else "_" for c in raw)


@contextlib.asynccontextmanager
async def open_redis(url: str, *, name: str) -> AsyncIterator[Any]:
    """A client for ``url`` (``redis://`` or ``rediss://``); strings decoded as UTF-8; each of
    its connections named ``name`` (see :func:`client_name`)."""
    client: Any = coredis.Redis.from_url(url, decode_responses=True, client_name=name)
    async with client:
        yield client


#: URLs found unreachable and not yet seen back: one log line per outage, whichever task
#: meets it first, and one when any operation succeeds again.
_unreachable: set[str] = set()


def note_unreachable(url: str, what: str, exc: BaseException, cap: float) -> None:
    """Log the start of an outage once (the URL without its password)."""
    if url in _unreachable:
        return
    _unreachable.add(url)
    log.warning(
        "redis %s unreachable while %s (%s); retrying every <= %.1f s",
        redact_url(url),
        what,
        type(exc).__name__,
        cap,
    )


def note_reachable(url: str) -> None:
    """Log the end of an outage once."""
    if url in _unreachable:
        _unreachable.discard(url)
        log.warning("redis %s is back", redact_url(url))


async def retry(what: str, url: str, op: Any, *args: Any, **kwargs: Any) -> Any:
    """``await op(*args, **kwargs)``, again and again with backoff while Redis is unreachable.

    An outage is logged once, and its end once (:func:`note_unreachable`).
    """
    backoff = RetryDelays()
    while True:
        try:
            result = await op(*args, **kwargs)
        except RETRIED as exc:
            note_unreachable(url, what, exc, backoff.cap)
            await trio.sleep(backoff.next_delay())
            continue
        note_reachable(url)
        return result


async def create_group(client: Any, stream: str, group: str) -> None:
    """Create the consumer group (and the stream) unless it exists; reads start at the
    stream's beginning, so orders published before the first worker joined are not skipped."""
    with contextlib.suppress(GROUP_EXISTS):
        await client.xgroup_create(stream, group, identifier="0", mkstream=True)
