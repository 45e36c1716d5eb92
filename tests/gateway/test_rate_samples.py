"""The node's own rounds/s samples (the dashboard's chart): taken every RATE_EVERY seconds
whether or not anyone asks, kept for RATE_WINDOW."""

from __future__ import annotations

import trio
import trio.testing

from loopactors.gateway._metrics import RATE_EVERY, RATE_WINDOW, NodeMetrics, RateSamples
from loopactors.runtime import RuntimeConfig, open_runtime


def test_samples_older_than_the_window_are_dropped() -> None:
    rates = RateSamples(window=10.0)
    for second in range(0, 30, 5):
        rates.add(float(second), second * 2)
    assert rates.samples() == [(15.0, 30), (20.0, 40), (25.0, 50)]
    assert RateSamples().samples() == []


async def test_the_node_samples_rounds_finished_with_no_client_asking(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = RuntimeConfig(store="memory", shutdown_grace=5.0)
    async with open_runtime(config) as runtime, trio.open_nursery() as nursery:
        metrics = NodeMetrics(runtime)
        metrics.now = trio.current_time
        nursery.start_soon(metrics.run)
        nursery.start_soon(metrics.sample_rates)
        await trio.testing.wait_all_tasks_blocked()
        handle = runtime.handle(
            await runtime.start("|loop:6,fresh| steady", worker="scripted:latency=10")
        )
        await handle.wait()  # a minute of rounds, in virtual time
        await trio.sleep(1.5 * RATE_EVERY)  # past the next sample, never at the same moment
        samples = metrics.rates.samples()
        # One sample every RATE_EVERY seconds from the start, counting up to the six rounds.
        assert len(samples) >= 60 / RATE_EVERY
        finished = [n for _, n in samples]
        assert finished == sorted(finished)
        assert finished[0] == 0
        assert finished[-1] == 6
        await trio.sleep(RATE_WINDOW)
        assert len(metrics.rates.samples()) <= RATE_WINDOW / RATE_EVERY + 1
        nursery.cancel_scope.cancel()
