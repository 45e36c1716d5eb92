"""Retry delays while Redis is unreachable: doubling from ``first`` up to ``cap`` seconds.

Pure; the caller sleeps. ``reset()`` after a success so the next outage starts short again.
"""

from __future__ import annotations

__all__ = ["Backoff"]


class Backoff:
    __slots__ = ("_next", "cap", "failures", "first")

    def __init__(self, first: float = 0.05, cap: float = 2.0) -> None:
        if not 0 < first <= cap:
            raise ValueError(f"backoff needs 0 < first <= cap, got first={first}, cap={cap}")
        self.first = first
        self.cap = cap
        self._next = first
        #: Failures in a row since the last success.
        self.failures = 0

    def next_delay(self) -> float:
        """The delay before the next attempt; each call doubles the one after (up to cap)."""
        delay = self._next
        self._next = min(self.cap, self._next * 2)
        self.failures += 1
        return delay

    def reset(self) -> None:
        self._next = self.first
        self.failures = 0
