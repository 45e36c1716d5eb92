"""docs/observability.md's alert rules, run by Prometheus's own rule tester (`promtool test
rules`, Debian's `prometheus` package) on the series a real node exposes.

The case they exist for: a node restarted while a loop hangs. What the fresh node serves on
/metrics is scraped here and played, after twenty minutes of a node that finished rounds, as
Prometheus would have stored it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from .conftest import LiveNode

DOCS = Path(__file__).parents[2] / "docs" / "observability.md"
PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool is not installed (Debian's `prometheus` package; .ci/run installs it)",
)
#: The labels Prometheus adds to every scraped series.
NODE = "node:8765"
TARGET = {"instance": NODE, "job": "loopactors"}
#: Minutes the node before the restart ran (finishing a round a minute), and after it.
BEFORE, AFTER = 20, 40


def documented_rules() -> str:
    text = DOCS.read_text()
    blocks: list[str] = re.findall(r"```yaml\n(groups:.*?)```", text, re.DOTALL)
    assert len(blocks) == 1, "docs/observability.md has one block of alert rules"
    return blocks[0]


def series(name: str, labels: dict[str, str]) -> str:
    shown = ",".join(f'{k}="{v}"' for k, v in sorted({**labels, **TARGET}.items()))
    return f"{name}{{{shown}}}"


def promtool(tmp_path: Path, tests: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    (tmp_path / "rules.yml").write_text(documented_rules())
    # JSON is YAML: no YAML writer needed.
    spec = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": tests}
    (tmp_path / "test.yml").write_text(json.dumps(spec, indent=1))
    return subprocess.run(
        [PROMTOOL, "test", "rules", "test.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


async def fresh_node_series(node: LiveNode) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """What a node serves right after its start, with one loop hanging in its first round."""
    hanging = node.runtime.handle(
        await node.runtime.start("|loop:3| hangs", worker="scripted:latency=86400")
    )
    await hanging.wait_phase("awaiting_worker")
    async with httpx.AsyncClient(timeout=30) as client:
        reply = await client.get(
            f"http://127.0.0.1:{node.gateway.port}/metrics",
            headers={"Authorization": f"Bearer {node.token}"},
        )
    assert reply.status_code == 200
    found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(reply.text):
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def restart_inputs(
    fresh: dict[str, dict[tuple[tuple[str, str], ...], float]], *, rounds_after: bool
) -> list[dict[str, str]]:
    """Twenty minutes of a node finishing a scripted round a minute, a restart, then what the
    fresh node serves (its rounds going on, if ``rounds_after``). A series the fresh node
    does not serve is stale after the restart (``_``), as in Prometheus."""
    busy = (("status", "completed"), ("worker_kind", "scripted"))
    rounds = fresh.get("loopactors_rounds_total", {})
    inputs = []
    for labels in {busy, *rounds}:
        before = f"0+1x{BEFORE}" if labels == busy else f"0x{BEFORE}"
        if labels not in rounds:
            after = f"_x{AFTER - 1}"
        elif labels == busy and rounds_after:
            after = f"{rounds[labels]:g}+1x{AFTER - 1}"
        else:
            after = f"{rounds[labels]:g}x{AFTER - 1}"
        inputs.append(
            {
                "series": series("loopactors_rounds_total", dict(labels)),
                "values": f"{before} {after}",
            }
        )
    for labels, value in fresh["loopactors_loops"].items():
        live = 1 if dict(labels)["phase"] == "awaiting_worker" else 0
        inputs.append(
            {
                "series": series("loopactors_loops", dict(labels)),
                "values": f"{live}x{BEFORE} {value:g}x{AFTER - 1}",
            }
        )
    return inputs


async def test_no_rounds_pages_for_a_node_restarted_with_a_hanging_loop(
    live_node: LiveNode, tmp_path: Path
) -> None:
    fresh = await fresh_node_series(live_node)
    # Every known series is there from the start, at 0 (docs/observability.md).
    rounds = fresh["loopactors_rounds_total"]
    statuses = {dict(labels)["status"] for labels in rounds}
    assert statuses == {"completed", "failed", "timed_out", "cancelled"}
    assert {dict(labels)["worker_kind"] for labels in rounds} >= {"scripted", "command", "agent"}
    assert set(rounds.values()) == {0.0}
    assert set(fresh["loopactors_tokens_total"].values()) == {0.0}
    notifications = {dict(k)["outcome"] for k in fresh["loopactors_notifications_total"]}
    assert notifications == {"sent", "failed", "dropped"}
    assert len(fresh["loopactors_round_duration_seconds_count"]) == len(rounds) // 4
    assert not any(name.endswith("_created") for name in fresh)

    paged = {
        "exp_labels": {"severity": "page", "instance": TARGET["instance"]},
        "exp_annotations": {
            "summary": f"{TARGET['instance']}: live loops but no finished round in 10 minutes"
        },
    }
    result = promtool(
        tmp_path,
        [
            {
                "interval": "1m",
                "input_series": restart_inputs(fresh, rounds_after=False),
                "alert_rule_test": [
                    {"eval_time": "15m", "alertname": "LoopactorsNoRounds", "exp_alerts": []},
                    {"eval_time": "50m", "alertname": "LoopactorsNoRounds", "exp_alerts": [paged]},
                ],
            },
            {  # the same restart, but the loop goes on: nobody is paged
                "interval": "1m",
                "input_series": restart_inputs(fresh, rounds_after=True),
                "alert_rule_test": [
                    {"eval_time": "50m", "alertname": "LoopactorsNoRounds", "exp_alerts": []},
                ],
            },
        ],
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_escalations_and_restarts_are_counted_in_whole_numbers(tmp_path: Path) -> None:
    escalated = series("loopactors_loops", {"phase": "escalated"})
    restarts = series("loopactors_actor_restarts_total", {"actor": "store"})
    result = promtool(
        tmp_path,
        [
            {
                "interval": "1m",
                "input_series": [
                    # One loop escalates at 20m (a rate would say "1.0714 loops").
                    {"series": escalated, "values": "0x20 1x40"},
                    # The store restarts every minute from 30m (increase() extrapolates).
                    {"series": restarts, "values": "0x30 0+1x30"},
                ],
                "alert_rule_test": [
                    {"eval_time": "19m", "alertname": "LoopactorsEscalations", "exp_alerts": []},
                    {
                        "eval_time": "27m",
                        "alertname": "LoopactorsEscalations",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "ticket",
                                    **TARGET,
                                    "phase": "escalated",
                                },
                                "exp_annotations": {
                                    "summary": f"{NODE}: 1 loop(s) escalated in 15 minutes"
                                },
                            }
                        ],
                    },
                    {"eval_time": "50m", "alertname": "LoopactorsEscalations", "exp_alerts": []},
                    {
                        "eval_time": "37m",
                        "alertname": "LoopactorsActorRestarts",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "ticket",
                                    "instance": TARGET["instance"],
                                    "actor": "store",
                                },
                                "exp_annotations": {
                                    "summary": f"{NODE}: actor store restarted 6 times"
                                    " in 15 minutes"
                                },
                            }
                        ],
                    },
                ],
            }
        ],
    )
    assert result.returncode == 0, result.stdout + result.stderr
