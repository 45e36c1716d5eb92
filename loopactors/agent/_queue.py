"""The agent's inbox: what reaches the loop between model calls, in FIFO order.

Pure (no trio): the loop registers a wake-up callback with :meth:`MessageQueue.on_wake` and
waits on its own event. Because the loop drains, decides to exit or go idle, and arms its wait
without a checkpoint in between, a message pushed during that decision is never lost: trio runs
one task at a time, so nothing else can push until the loop awaits, and by then the callback is
armed (no chain of re-checks).

Kinds (scheduling only; content is the message's business):

- ``prompt``: an external request; wakes the loop.
- ``defer``: a late result or steering that must be answered (a background result, a warning
  that needs a reaction, "continue after truncation"); wakes the loop.
- ``info``: a notification; delivered with the next drain but never wakes the loop, and a
  drain holding only info does not run the model.

Whether the message is shown to the model and whether it is kept in the transcript are two more
fields, independent of the kind, checked when the message is made.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Literal

import msgspec

from ..errors import AgentError

__all__ = ["MessageKind", "MessageQueue", "MessageSource", "QueuedMessage"]

MessageKind = Literal["prompt", "defer", "info"]
MessageSource = Literal[
    "user",
    "background",
    "tool_failure_warning",
    "continuation",
    "steering",
    "system",
]


class QueuedMessage(msgspec.Struct, frozen=True, kw_only=True):
    kind: MessageKind
    text: str
    source: MessageSource = "user"
    #: Shown to the model (as a user message; non-prompt text wrapped as a system reminder).
    visible: bool = True
    #: Kept in the transcript; when false the text reaches only the next model call.
    persisted: bool = True

    def __post_init__(self) -> None:
        if self.kind == "prompt" and not (self.visible and self.persisted):
            raise AgentError("a prompt is always visible to the model and persisted")
        if not self.visible and self.persisted:
            raise AgentError("a message hidden from the model cannot be persisted in its view")

    @property
    def wakes(self) -> bool:
        """Prompt and defer wake the loop; info never does."""
        return self.kind != "info"


class MessageQueue:
    """FIFO inbox of one agent; see the module docstring for the kinds."""

    def __init__(self) -> None:
        self._items: deque[QueuedMessage] = deque()
        self._waker: Callable[[], None] | None = None

    def __len__(self) -> int:
        return len(self._items)

    def is_empty(self) -> bool:
        return not self._items

    def on_wake(self, callback: Callable[[], None] | None) -> None:
        """Call ``callback`` (once per push that holds a waking message) until replaced."""
        self._waker = callback

    def push(self, message: QueuedMessage) -> None:
        self._items.append(message)
        if message.wakes and self._waker is not None:
            self._waker()

    def push_batch(self, messages: Iterable[QueuedMessage]) -> None:
        """Append all, then wake once if any wakes (an empty batch does nothing)."""
        batch = list(messages)
        self._items.extend(batch)
        if any(message.wakes for message in batch) and self._waker is not None:
            self._waker()

    def drain_all(self) -> list[QueuedMessage]:
        """Take everything queued, in FIFO order."""
        items = list(self._items)
        self._items.clear()
        return items

    def has_wake_up(self) -> bool:
        """A prompt or defer is waiting."""
        return any(message.wakes for message in self._items)

    def has_pending_defer(self, source: MessageSource) -> bool:
        return any(m.kind == "defer" and m.source == source for m in self._items)

    def clear(self) -> None:
        self._items.clear()
