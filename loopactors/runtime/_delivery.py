"""How the runtime's actors find each other: runner names, and casts that tolerate absence."""

from __future__ import annotations

import contextlib
from typing import Any

from ..actors import Node
from ..errors import ActorError, MailboxFull

__all__ = ["RUNNER_PREFIX", "deliver", "runner_name"]

RUNNER_PREFIX = "loop:"


def runner_name(loop_id: str) -> str:
    """The name a loop's runner is registered under on its node."""
    return RUNNER_PREFIX + loop_id


async def deliver(node: Node, name: str, message: Any) -> None:
    """Cast ``message`` to the actor registered as ``name``, waiting only if its mailbox is
    full. Nobody there means nobody needs it: a loop that ended, or an actor that is
    restarting and recovers from the store."""
    ref = node.whereis(name)
    if ref is None:
        return
    try:
        ref.cast_nowait(message)
    except MailboxFull:
        with contextlib.suppress(ActorError):
            await ref.cast(message)
    except ActorError:
        return
