"""The Notifier actor: delivers the store's notification queue through apprise.

The store queues notifications in the same transaction as the events they are about
(``loops.notifications_for``), so none is lost to a crash and none is sent for what was not
committed. This actor delivers them, oldest first, each in a worker thread (apprise is
synchronous) with a timeout and a bound on how many run at once; a failed delivery is
retried with backoff, and one still undelivered after ``max_age`` is dropped with a log line
and counted. Nothing here ever blocks or fails a loop: a loop never waits for this actor.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import urllib.parse
from collections.abc import Sequence
from typing import Any

import msgspec
import trio

from .._util import backoff_delay
from ..actors import Actor, ErrorReply
from ..errors import ActorError, StoreError
from ..loops import redact_notify_url
from ..storage import QueuedNotification
from ._config import NotifySettings
from ._messages import (
    DueNotifications,
    GetNotifierStatistics,
    NextNotificationAt,
    NotificationDone,
    NotificationRetry,
    NotificationsQueued,
)
from ._wiring import STORE

__all__ = ["Notifier", "NotifierStatistics", "check_notify_urls", "send_notification"]

log = logging.getLogger("loopactors.notify")

#: Notifications taken from the queue per look.
BATCH = 64
#: After a failure to read the queue (the store restarting), the next look is this late.
STORE_RETRY = 1.0


class NotifierStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """Counts since the node started: delivered, failed attempts (each retried later), and
    dropped (too old to deliver). What waits in the queue is the store's to say
    (``StoreStatistics.notifications``)."""

    sent: int = 0
    failed: int = 0
    dropped: int = 0


def check_notify_urls(urls: Sequence[str]) -> list[str]:
    """The URLs apprise does not accept, in words (empty: all are fine); shown redacted."""
    import apprise  # noqa: PLC0415 - only a loop or node that notifies loads it

    problems = []
    for url in urls:
        if apprise.Apprise.instantiate(url, suppress_exceptions=True) is None:
            problems.append(
                f"notify URL {redact_notify_url(url)!r} is not one apprise can send to: check "
                "its scheme and parts (json://HOST:PORT/PATH, mailto://HOST:PORT?to=...&from=..."
                ", ntfy://TOPIC, slack://..., see apprise's list of services)"
            )
    return problems


class _ThreadLines(logging.Handler):
    """apprise's log lines, kept per thread: the reason a delivery failed."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.local = threading.local()

    def emit(self, record: logging.LogRecord) -> None:
        lines = getattr(self.local, "lines", None)
        if lines is not None:
            with contextlib.suppress(Exception):
                lines.append(record.getMessage())


_lines = _ThreadLines()
_lines_lock = threading.Lock()


def _apprise_lines() -> _ThreadLines:
    """apprise's logger, captured once per process: its lines may carry parts of a URL,
    so they are never passed on as they are (see :func:`_scrub`)."""
    with _lines_lock:
        logger = logging.getLogger("apprise")
        if _lines not in logger.handlers:
            logger.addHandler(_lines)
            logger.propagate = False
            if logger.level == logging.NOTSET or logger.level > logging.INFO:
                logger.setLevel(logging.INFO)
    return _lines


def _secrets_of(url: str) -> list[str]:
    """The parts of ``url`` that may be secret: user, password, host, path and query parts."""
    parts = urllib.parse.urlsplit(url)
    found = [parts.username or "", parts.password or "", parts.netloc]
    found += parts.path.split("/")
    for key, value in urllib.parse.parse_qsl(parts.query):
        found += [key + "=" + value, value]
    # Longest first, so a token is replaced before a part of it.
    return sorted({p for p in found if len(p) >= 3}, key=len, reverse=True)


def _scrub(text: str, url: str) -> str:
    for secret in _secrets_of(url):
        text = text.replace(secret, "***")
    return text


def send_notification(url: str, title: str, body: str) -> str | None:
    """Deliver one notification (blocking: run it in a worker thread). ``None`` when it was
    delivered; else why not, with nothing of the URL's secrets in it."""
    import apprise  # noqa: PLC0415 - only a node that notifies loads it

    lines = _apprise_lines()
    lines.local.lines = []
    try:
        # The service itself, not an Apprise of one: that one sends from a thread of its own,
        # whose log lines (the reason it failed) this thread would never see.
        sender = apprise.Apprise.instantiate(url)
        if not sender:
            return "apprise does not accept this URL"
        if sender.notify(title=title, body=body):
            return None
        said = [line for line in lines.local.lines if line.strip()]
        why = _scrub(said[-1], url) if said else "the receiver did not accept it"
        return why[:300]
    except Exception as exc:  # apprise's own bug must not take the Notifier down
        return _scrub(f"{type(exc).__name__}: {exc}", url)[:300]
    finally:
        lines.local.lines = None


class Notifier(Actor[Any]):
    """Delivers queued notifications; see the module's docstring."""

    uses_nursery = True
    mailbox_size = 1_024

    def __init__(self, settings: NotifySettings) -> None:
        self._settings = settings
        self._wake = trio.Event()
        self._limiter = trio.CapacityLimiter(settings.max_parallel)
        self._sent = 0
        self._failed = 0
        self._dropped = 0
        #: Notifications being delivered now (by id): never taken twice.
        self._busy: set[int] = set()
        #: Why each notification of this run whose last attempt failed did (by id), said on
        #: the way out; those an earlier run left were said by it.
        self._undelivered: dict[int, str] = {}
        self._since = time.time()

    async def on_start(self) -> None:
        # Whatever a previous run left in the queue goes out now (it is durable).
        self.nursery.start_soon(self._deliver_forever)

    async def handle(self, message: Any) -> Any:
        kind = type(message)
        if kind is NotificationsQueued:
            self._wake.set()
            return None
        if kind is GetNotifierStatistics:
            return NotifierStatistics(sent=self._sent, failed=self._failed, dropped=self._dropped)
        return ErrorReply(TypeError(f"the notifier does not accept {kind.__name__}"))

    async def on_stop(self, reason: BaseException | None) -> None:
        """A graceful stop (``loopactors run`` ending with its loop) first tries what is due
        once more, for at most ``timeout`` seconds: a loop's last notification goes out with
        it, not at the next start. What fails stays queued for then."""
        if reason is not None:
            return
        with trio.move_on_after(self._settings.timeout):
            while True:
                try:
                    due = await self._ask(DueNotifications(time.time(), BATCH))
                except (ActorError, StoreError):
                    break
                if not self._busy and not [q for q in due if q.id not in self._busy]:
                    break
                self._wake.set()
                await trio.sleep(0.01)
        # Said, so that no one believes it went out (a warning: `run` shows it on stderr).
        for line in self._undelivered.values():
            log.warning("%s", line)

    async def _ask(self, message: Any) -> Any:
        return await self.node.ref(STORE).call(message, timeout=30.0)

    async def _deliver_forever(self) -> None:
        while True:
            self._wake = trio.Event()
            try:
                due: list[QueuedNotification] = await self._ask(
                    DueNotifications(time.time(), BATCH)
                )
                due = [q for q in due if q.id not in self._busy]
                for queued in due:
                    self._busy.add(queued.id)
                    self.nursery.start_soon(self._deliver, queued)
                next_at: float | None = await self._ask(NextNotificationAt())
            except (ActorError, StoreError):
                due, next_at = [], time.time() + STORE_RETRY
            if len(due) == BATCH:
                continue  # more are due now
            wait = float("inf") if next_at is None else max(0.0, next_at - time.time())
            if wait == 0.0 and not due:
                # What is due is being delivered: its end wakes this loop.
                wait = float("inf")
            with trio.move_on_after(wait):
                await self._wake.wait()

    async def _deliver(self, queued: QueuedNotification) -> None:
        settings = self._settings
        note = queued.notification
        shown = redact_notify_url(note.url)
        try:
            if time.time() - note.at > settings.max_age:
                self._dropped += 1
                log.warning(
                    "notification %s of loop %s to %s dropped: not delivered within %g s "
                    "(%d attempts)",
                    note.event,
                    note.loop_id,
                    shown,
                    settings.max_age,
                    queued.attempts,
                )
                self._undelivered.pop(queued.id, None)
                await self._ask(NotificationDone(queued.id))
                return
            why: str | None = "timed out"
            with trio.move_on_after(settings.timeout):
                why = await trio.to_thread.run_sync(
                    send_notification,
                    note.url,
                    note.title,
                    note.body,
                    limiter=self._limiter,
                    abandon_on_cancel=True,
                )
            if why is None:
                self._sent += 1
                self._undelivered.pop(queued.id, None)
                await self._ask(NotificationDone(queued.id))
                return
            self._failed += 1
            if note.at >= self._since:
                self._undelivered[queued.id] = (
                    f"notification {note.event} of loop {note.loop_id} to {shown} not "
                    f"delivered ({why}): kept in the queue, sent by the next runtime on this store"
                )
            attempts = queued.attempts + 1
            delay = backoff_delay(attempts, first=settings.retry_first, cap=settings.retry_max)
            log.info(
                "notification %s of loop %s to %s failed (attempt %d, next in %.0f s): %s",
                note.event,
                note.loop_id,
                shown,
                attempts,
                delay,
                why,
            )
            await self._ask(NotificationRetry(queued.id, time.time() + delay, attempts))
        except (ActorError, StoreError):
            return  # the store is restarting: the row is still queued, taken again later
        finally:
            self._busy.discard(queued.id)
            self._wake.set()
