"""Per-connection limits that are plain arithmetic. Pure, no trio."""

from __future__ import annotations

__all__ = ["TokenBucket"]


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
