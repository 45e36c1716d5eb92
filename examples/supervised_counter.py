"""A counter actor, supervised: it crashes, is restarted fresh, and callers see clear errors.

python examples/supervised_counter.py
"""

from __future__ import annotations

from typing import Any

import msgspec
import trio
import trio.testing

from loopactors.actors import Actor, ChildSpec, ErrorReply, open_node
from loopactors.errors import CallFailed


class Add(msgspec.Struct, frozen=True):
    amount: int


class Total(msgspec.Struct, frozen=True):
    pass


class Counter(Actor[Add | Total]):
    def __init__(self) -> None:
        self.total = 0  # state lives in the actor; a restart starts from a fresh instance

    async def handle(self, message: Add | Total) -> Any:
        if isinstance(message, Total):
            return self.total
        if message.amount < 0:
            # Refuse this request, keep serving the others.
            return ErrorReply(ValueError(f"amount must be >= 0, got {message.amount}"))
        if message.amount > 1000:
            raise OverflowError("counter overflow")  # a bug: crash, let the supervisor act
        self.total += message.amount
        return self.total


async def main() -> list[str]:
    lines: list[str] = []
    async with open_node([ChildSpec("counter", Counter, name="counter")]) as node:
        counter = node.ref("counter")  # follows the name across restarts
        for amount in (1, 2, 3):
            await counter.cast(Add(amount))
        lines.append(f"total: {await counter.call(Total())}")
        try:
            await counter.call(Add(-5))
        except ValueError as exc:
            lines.append(f"refused: {exc}")
        try:
            await counter.call(Add(5000))
        except CallFailed as exc:
            lines.append(f"crashed: {exc.__cause__!r}")
        await trio.testing.wait_all_tasks_blocked()  # let the supervisor restart it
        lines.append(f"after restart: {await counter.call(Total())}")
        stats = await node.supervisor.statistics()
        lines.append(f"restarts: {stats.restarts}")
    return lines


if __name__ == "__main__":
    for line in trio.run(main):
        print(line)
