"""Small actors the kernel tests share."""

from __future__ import annotations

from typing import Any

import msgspec
import trio

from loopactors.actors import Actor


class Ping(msgspec.Struct, frozen=True):
    value: int = 0


class Sleep(msgspec.Struct, frozen=True):
    seconds: float


class Crash(msgspec.Struct, frozen=True):
    text: str = "boom"


class Quit(msgspec.Struct, frozen=True):
    pass


class Boom(Exception):
    pass


class Worker(Actor[Any]):
    """Echoes pings, sleeps on request, crashes on request, quits on request.

    Every hook appends ``(name, event)`` to the shared ``log``.
    """

    def __init__(self, label: str, log: list[tuple[str, str]] | None = None) -> None:
        self.label = label
        self.log = log if log is not None else []
        self.seen: list[Any] = []

    async def on_start(self) -> None:
        self.log.append((self.label, "start"))

    async def handle(self, message: Any) -> Any:
        self.seen.append(message)
        if isinstance(message, Sleep):
            await trio.sleep(message.seconds)
            return "slept"
        if isinstance(message, Crash):
            raise Boom(message.text)
        if isinstance(message, Quit):
            self.stop()
            return "bye"
        return message

    async def on_stop(self, reason: BaseException | None) -> None:
        self.log.append((self.label, "stop" if reason is None else "crash"))


def all_tasks(task: trio.lowlevel.Task) -> list[trio.lowlevel.Task]:
    """Every task below ``task`` in the task tree."""
    found: list[trio.lowlevel.Task] = []
    for nursery in task.child_nurseries:
        for child in nursery.child_tasks:
            found.append(child)
            found.extend(all_tasks(child))
    return found
