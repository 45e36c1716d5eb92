"""Retry delays while Redis is unreachable: doubling from ``first`` up to ``cap`` seconds.

Pure; the caller sleeps. ``reset()`` after a success so the next outage starts short again.
"""

from __future__ import annotations

from .._util import backoff_delay

__all__ = ["RetryDelays"]


class RetryDelays:
    __slots__ = ("cap", "failures", "first")

    def __init__(self, first: float = 0.05, cap: float = 2.0) -> None:
        if not 0 < first <= cap:
            raise ValueError(f"backoff needs 0 < first <= cap, got first={first}, cap={cap}")
        self.first = first
        self.cap = cap
        #: Failures in a row since the last success.
        self.failures = 0

    def next_delay(self) -> float:
        """The delay before the next attempt; each call doubles the one after (up to cap)."""
        self.failures += 1
        return backoff_delay(self.failures, first=self.first, cap=self.cap)

    def reset(self) -> None:
        self.failures = 0
