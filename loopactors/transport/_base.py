"""The remote side of the runtime's round transport interface: rounds handed to other
processes, which time them; the Dispatcher only waits for their results, with the round's
cancel scope still the way a stop arrives (it also calls :meth:`RemoteTransport.cancel`)."""

from __future__ import annotations

import abc

import msgspec

from ..runtime import RoundRun, RoundTransport
from ..workers import RoundRequest, RoundResult

__all__ = ["RemoteTransport"]


class RemoteTransport(RoundTransport):
    """Rounds run in other processes: each is handed over and its result awaited."""

    #: What is kept of each output: cut where the round runs (no whole output is kept there).
    max_output_bytes: int = 1 << 20

    async def run(self, request: RoundRequest, run: RoundRun) -> RoundResult | None:
        bounded = msgspec.structs.replace(request, max_output_bytes=self.max_output_bytes)
        return await self.run_remote(bounded, run.timeout)

    @abc.abstractmethod
    async def run_remote(self, request: RoundRequest, timeout: float) -> RoundResult:
        """Run the round elsewhere and return its result; cancelling the caller abandons it
        (call :meth:`cancel` to stop it there)."""

    @abc.abstractmethod
    def cancel(self, key: str) -> None:
        """Stop the round with this idempotency key wherever it runs."""
