"""Limits that are plain arithmetic: a request rate, the descriptor budget, log notices.

Pure, no trio. How the gateway admits connections with them is in ``_admission``.
"""

from __future__ import annotations

__all__ = ["DescriptorBudget", "Notices", "TokenBucket"]


class TokenBucket:
    """``rate`` requests per second on average, bursts of up to ``burst``; time is passed in."""

    __slots__ = ("_last", "_level", "burst", "rate")

    def __init__(self, rate: float, burst: float, now: float) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError(f"a rate limit needs rate > 0 and burst >= 1, got {rate}, {burst}")
        self.rate = rate
        self.burst = burst
        self._level = burst
        self._last = now

    def take(self, now: float) -> bool:
        """Spend one token if there is one; False means the request is over the limit."""
        self._level = min(self.burst, self._level + (now - self._last) * self.rate)
        self._last = now
        if self._level >= 1:
            self._level -= 1
            return True
        return False


class DescriptorBudget:
    """How many sockets the gateway may hold at once: the process's descriptor limit
    (``RLIMIT_NOFILE``) minus those open when the gateway started minus ``reserve``, kept for
    the runtime's own work (the store, workers' pipes, model connections), so that no load on
    the gateway can make a round fail for want of a descriptor."""

    __slots__ = ("capacity", "in_use_at_start", "limit", "reserve")

    def __init__(self, *, limit: int, in_use: int, reserve: int) -> None:
        self.limit = limit
        self.in_use_at_start = in_use
        self.reserve = reserve
        #: Never below a handful, so that a node started close to its limit still answers.
        self.capacity = max(limit - in_use - reserve, _MIN_SOCKETS)

    def describe(self) -> str:
        return (
            f"{self.capacity} sockets (ulimit -n {self.limit}, minus {self.in_use_at_start} "
            f"descriptors open at start and {self.reserve} kept for the runtime)"
        )

    def share(self, fraction: float, cap: int) -> int:
        """``cap``, or ``fraction`` of the capacity when that is smaller (at least 1)."""
        return max(1, min(cap, int(self.capacity * fraction)))


_MIN_SOCKETS = 8


class Notices:
    """One log line per condition per ``interval`` seconds: the first occurrence is told at
    once, later ones are counted and told with the next line (time is passed in)."""

    __slots__ = ("_interval", "_last", "_suppressed")

    def __init__(self, interval: float = 10.0) -> None:
        self._interval = interval
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def due(self, condition: str, now: float) -> int | None:
        """None: stay quiet; else say it now, with this many occurrences not told before."""
        last = self._last.get(condition)
        if last is not None and now - last < self._interval:
            self._suppressed[condition] = self._suppressed.get(condition, 0) + 1
            return None
        self._last[condition] = now
        return self._suppressed.pop(condition, 0)
