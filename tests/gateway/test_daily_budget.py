"""The node reports today's spend per account and its daily budgets (docs/loops.md, Daily
budgets): in ``statistics`` (the dashboard's node view) and on ``/metrics``."""

from __future__ import annotations

from pathlib import Path

from loopactors.cli.schema import node_extensions
from loopactors.client import connect
from loopactors.gateway import GatewaySettings, open_gateway
from loopactors.runtime import open_runtime
from loopactors.workers import record_spend

from .conftest import node_config


async def test_statistics_carry_the_days_spend_and_the_budgets(tmp_path: Path) -> None:
    config = node_config(
        tmp_path, budget={"daily_cost_usd": 2.0, "daily_total_cost_usd": 5.0, "reset_hour": 3}
    )
    async with (
        open_runtime(config) as runtime,
        open_gateway(runtime, GatewaySettings(port=0), extensions=node_extensions()) as gateway,
    ):
        record_spend("claude", "a7becc91a74e5f69", 0.25)
        record_spend("codex", "0123456789abcdef", 0.5)
        token = gateway.token_path.read_text().strip()
        async with connect(gateway.url, token=token) as client:
            stats = await client.statistics()
    assert stats.daily_cost_usd == {
        "claude:a7becc91a74e5f69": 0.25,
        "codex:0123456789abcdef": 0.5,
        "total": 0.75,
    }
    assert stats.daily_budget_usd == {"account": 2.0, "total": 5.0}
