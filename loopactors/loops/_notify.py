"""Notifications: which of a loop's events tell someone, what they say, and URLs shown safely.

Pure, no trio and no I/O. The store queues what :func:`notifications_for` returns in the
same transaction as the events it comes from, so a notification is never lost to a crash
and never sent for something that was not committed; the runtime's Notifier delivers the
queue (docs/notifications.md).
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Iterable, Sequence
from typing import Literal, get_args

import msgspec

from ._events import AnyEvent, LoopFinished, RoundDeferred, RoundFinished
from ._model import LoopState

__all__ = [
    "BUDGET_TRIGGERS",
    "NOTIFY_EVENTS",
    "Notification",
    "NotifyEvent",
    "check_notify",
    "notifications_for",
    "redact_notify_url",
    "shown",
]

#: What a notification can be about. ``check_failing``: the loop's ``until`` check failed
#: ``notify_check_failures`` rounds in a row (a failing RoundFinished check).
NotifyEvent = Literal["loop_finished", "round_deferred", "budget_reached", "check_failing"]
NOTIFY_EVENTS: tuple[NotifyEvent, ...] = get_args(NotifyEvent)

#: Escalation triggers that mean "a budget was reached" (``budget_reached``).
BUDGET_TRIGGERS = frozenset({"cost_budget", "token_budget", "deadline"})

#: Schemes whose host is a plain network address, shown when a URL is redacted; for every
#: other scheme (slack://, tgram://, discord://, ...) the host is itself a token.
_HOST_SHOWN = frozenset(
    {"json", "jsons", "form", "forms", "xml", "xmls", "mailto", "mailtos", "ntfy", "ntfys"}
)


class Notification(msgspec.Struct, gc=False, frozen=True, kw_only=True):
    """One message about one loop, for one URL (a row of the store's queue)."""

    loop_id: str
    event: NotifyEvent
    url: str
    title: str
    body: str
    #: When the event happened (UNIX time): the queue drops what is older than its bound.
    at: float


def redact_notify_url(url: str) -> str:
    """A notification URL as logs and displays show it: the scheme, the host for schemes
    whose host is an address, and ``***`` for the rest (user, password, tokens in the path
    or query). ``json://user:pw@host:8080/hook?x=1`` -> ``json://***@host:8080/***?***``."""
    parts = urllib.parse.urlsplit(url)
    if not parts.scheme:
        return "***"
    scheme = parts.scheme.lower()
    if scheme not in _HOST_SHOWN:
        return f"{scheme}://***"
    try:
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return f"{scheme}://***"
    shown = f"{scheme}://"
    if parts.username is not None or parts.password is not None:
        shown += "***@"
    shown += host + (f":{port}" if port is not None else "")
    if parts.path.strip("/"):
        shown += "/***"
    if parts.query:
        shown += "?***"
    return shown


def shown(state: LoopState) -> LoopState:
    """``state`` as it may be shown or sent to a client: its notification URLs redacted
    (:func:`redact_notify_url`). The store keeps them whole: they are needed to deliver."""
    if not state.spec.notify:
        return state
    spec = msgspec.structs.replace(
        state.spec, notify=tuple(redact_notify_url(url) for url in state.spec.notify)
    )
    return msgspec.structs.replace(state, spec=spec)


def check_notify(urls: Sequence[str], events: Sequence[str], check_failures: int) -> list[str]:
    """What is wrong with a loop's notification options, in words (empty: nothing). Only
    the form is checked here; whether a URL names a known service is the runtime's check."""
    problems = []
    for url in urls:
        if isinstance(url, str) and not url.strip():  # shown redacted it would read '***'
            problems.append(
                "a notify URL is empty: write SCHEME://..., e.g. json://host:port/path, "
                "mailto://..., ntfy://topic"
            )
        elif not isinstance(url, str) or "://" not in url:
            problems.append(
                f"notify URL {redact_notify_url(str(url))!r} is not a URL: write SCHEME://..., "
                "e.g. json://host:port/path, mailto://..., ntfy://topic"
            )
    unknown = sorted(set(events) - set(NOTIFY_EVENTS))
    if unknown:
        problems.append(
            f"unknown notify event(s) {', '.join(unknown)}; accepted: {', '.join(NOTIFY_EVENTS)}"
        )
    if check_failures < 1:
        problems.append(f"notify_check_failures must be >= 1, got {check_failures}")
    return problems


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(at))


def _task(state: LoopState) -> str:
    """The task's first line, short."""
    return state.spec.task.strip().splitlines()[0][:80] if state.spec.task.strip() else ""


def _about(state: LoopState, event: AnyEvent) -> tuple[NotifyEvent, str, str] | None:
    """The kind, title and body of a notification about ``event``, if it is one."""
    loop = state.loop_id
    task = _task(state)
    cost = f", ${state.cost_usd:.4f}" if state.cost_usd else ""
    if isinstance(event, LoopFinished):
        kind: NotifyEvent = "loop_finished"
        if event.phase == "escalated" and event.trigger in BUDGET_TRIGGERS:
            kind = "budget_reached"
        words = {"complete": "complete", "cancelled": "cancelled", "escalated": "escalated"}
        what = words.get(event.phase, "failed")
        title = f"loop {loop} {what}"
        body = (
            f"{task}\n{event.completed_rounds}/{event.rounds} rounds completed{cost}; "
            f"phase {event.phase}"
        )
        if event.trigger:
            body += f", trigger {event.trigger}"
        if event.reason:
            body += f": {event.reason}"
        return kind, title, body
    if isinstance(event, RoundDeferred):
        title = f"loop {loop} waits until {_when(event.until)}"
        body = (
            f"{task}\nround {event.round}/{event.rounds} deferred until {_when(event.until)}: "
            f"{event.reason}"
        )
        return "round_deferred", title, body
    return None


def notifications_for(
    state: LoopState, events: Iterable[AnyEvent], *, failing_checks: int = 0
) -> list[Notification]:
    """The notifications a commit of ``state`` with ``events`` queues: one per URL of the
    loop's ``notify`` for each event the loop's ``notify_on`` names.

    ``failing_checks`` is how many rounds in a row the loop's ``until`` check has failed
    after this commit: at exactly ``notify_check_failures`` a ``check_failing`` notification
    goes out (once per run of failures, not every round after).
    """
    spec = state.spec
    if not spec.notify:
        return []
    wanted = set(spec.notify_on or NOTIFY_EVENTS)
    found: list[tuple[NotifyEvent, str, str, float]] = []
    for event in events:
        about = _about(state, event)
        if about is None:
            if (
                isinstance(event, RoundFinished)
                and failing_checks == spec.notify_check_failures
                and "check_failing" in wanted
            ):
                title = f"loop {state.loop_id}: its check failed {failing_checks} rounds in a row"
                body = f"{_task(state)}\nround {event.round}/{event.rounds}: `{state.spec.until}` "
                body += "still fails"
                check = event.check
                if check is not None:
                    code = check.exit_code if check.error is None else check.error
                    tail = check.output.strip().splitlines()[-3:]
                    body += f" ({code})" + "".join(f"\n{line}" for line in tail)
                found.append(("check_failing", title, body, event.at))
            continue
        kind, title, body = about
        if kind == "budget_reached" and kind not in wanted:
            kind = "loop_finished"  # still a finished loop to whoever asked for those
        if kind in wanted:
            found.append((kind, title, body, event.at))
    return [
        Notification(loop_id=state.loop_id, event=kind, url=url, title=title, body=body, at=at)
        for kind, title, body, at in found
        for url in spec.notify
    ]
