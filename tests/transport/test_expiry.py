"""Workers that stop beating are marked dead, then removed with their idle consumers; every
Redis connection carries a client name. Real redis-server, real `loopactors worker` processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from loopactors.runtime import BreakerSettings, RuntimeConfig, open_runtime
from loopactors.transport import _node
from loopactors.transport._redis import NO_GROUP, open_redis
from loopactors.transport._status import collect
from loopactors.transport._wire import WORKER_GROUP, WORKERS_HASH, decode_heartbeat, rounds_stream
from tests.hang import HANG

from .conftest import RedisServer, Workers, wait_until
from .test_scale_out import command, pending


async def records(url: str) -> dict[str, Any]:
    async with open_redis(url, name="loopactors-test") as client:
        raw = await client.hgetall(WORKERS_HASH)
    return {name: decode_heartbeat(value) for name, value in raw.items()}


async def consumers(url: str, kind: str) -> set[str]:
    async with open_redis(url, name="loopactors-test") as client:
        try:
            listed = await client.xinfo_consumers(rounds_stream(kind), WORKER_GROUP)
        except NO_GROUP:
            return set()
    return {str(c["name"]) for c in listed}


async def client_names(url: str) -> list[str]:
    async with open_redis(url, name="loopactors-test") as client:
        return [str(c.get("name") or "") for c in await client.client_list()]


async def test_a_killed_worker_is_marked_dead_then_removed_once_its_round_moved(
    tmp_path: Path,
    redis_server: RedisServer,
    workers: Workers,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_node, "SWEEP_SECONDS", 0.2)
    url = redis_server.url()
    config = RuntimeConfig(
        store="sqlite",
        state_dir=tmp_path / "state",
        transport=url,
        breaker=BreakerSettings(stale_rounds_limit=100),
    )
    async with open_runtime(config) as rt:
        await workers.start(url, "doomed", kinds="command")
        slow = command('if [ "$LOOPACTORS_WORKER_NAME" = doomed ]; then sleep 30; fi; echo done')
        loop = rt.handle(await rt.start("|loop:1| work", worker=slow))

        async def held() -> bool:
            return await pending(url, "command") == 1

        await wait_until(held)
        names = await client_names(url)
        assert "loopactors-worker-doomed" in names
        assert any(n.startswith("loopactors-node-") for n in names)
        workers.kill("doomed")  # SIGKILL: no goodbye

        async def marked_dead() -> bool:
            async with open_redis(url, name="loopactors-test") as client:
                status = await collect(client)
            return [(w.name, w.dead_since is not None) for w in status.workers] == [
                ("doomed", True)
            ]

        await wait_until(marked_dead)
        # Still holding its round (nobody alive to reclaim it): never removed, so the round
        # is not dropped from the pending list.
        await trio.sleep(1.0)
        assert "doomed" in await records(url)
        assert "doomed" in await consumers(url, "command")
        await workers.start(url, "heir", kinds="command")
        assert (await loop.wait()).phase == "complete"

        async def gone() -> bool:
            return "doomed" not in await records(url) and "doomed" not in await consumers(
                url, "command"
            )

        await wait_until(gone)
        beats = await records(url)
        assert list(beats) == ["heir"]
        assert beats["heir"].dead_since is None


async def test_the_node_sweeps_when_no_worker_is_left(
    tmp_path: Path,
    redis_server: RedisServer,
    workers: Workers,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_node, "SWEEP_SECONDS", 0.2)
    url = redis_server.url()
    await workers.start(url, "lonely", kinds="scripted")
    config = RuntimeConfig(store="memory", transport=url)
    async with open_runtime(config) as rt:
        loop = rt.handle(await rt.start("|loop:1| one", worker="scripted"))
        assert (await loop.wait()).phase == "complete"
        assert "lonely" in await consumers(url, "scripted")
        workers.kill("lonely")

        async def gone() -> bool:
            return not await records(url) and not await consumers(url, "scripted")

        try:
            await wait_until(gone)
        except trio.TooSlowError:
            left = (await records(url), await consumers(url, "scripted"))
            raise AssertionError(f"still there (records, consumers): {left}") from None


async def test_a_worker_that_stops_says_goodbye_with_its_consumers(
    redis_server: RedisServer, workers: Workers
) -> None:
    url = redis_server.url()
    process = await workers.start(url, "polite", kinds="scripted")
    async with open_runtime(RuntimeConfig(store="memory", transport=url)) as rt:
        loop = rt.handle(await rt.start("|loop:1| one", worker="scripted"))
        assert (await loop.wait()).phase == "complete"
    assert "polite" in await consumers(url, "scripted")  # a consumer once it took an order

    async def acknowledged() -> bool:  # the report can reach the node before the ack
        return await pending(url, "scripted") == 0

    await wait_until(acknowledged)
    process.terminate()
    with trio.fail_after(HANG):
        await process.wait()
    assert await records(url) == {}
    assert await consumers(url, "scripted") == set()


def test_status_shows_a_worker_whose_beats_stopped_as_dead(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    url = redis_server.url()

    async def plant() -> None:
        # A worker that beat once and died: its record is there, its liveness flag is not.
        async with open_redis(url, name="loopactors-test") as client:
            await client.hset(
                WORKERS_HASH,
                {"ghost": '{"name":"ghost","kinds":["scripted"],"slots":2,"in_flight":1,"at":1}'},
            )

    trio.run(plant)
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "loopactors",
            "status",
            "--state",
            str(tmp_path),
            "--transport",
            url,
        ],
        capture_output=True,
        check=False,
        text=True,
        timeout=HANG,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )
    assert shown.returncode == 0, shown.stderr
    row = next(line for line in shown.stdout.splitlines() if "ghost" in line)
    assert "dead" in row
    as_json = subprocess.run(
        [sys.executable, "-m", "loopactors", "status", "--state", str(tmp_path),
         "--transport", url, "--json"],
        capture_output=True, check=False, text=True, timeout=HANG,
    )  # fmt: skip
    assert as_json.returncode == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    assert data["loops"] == []
    [ghost] = data["transport"]["workers"]
    assert (ghost["name"], ghost["in_flight"]) == ("ghost", 1)
    assert ghost["dead_since"] is not None
    assert data["transport"]["redis"] == url


async def test_an_outage_is_one_line_and_its_end_another(
    redis_server: RedisServer, workers: Workers
) -> None:
    url = redis_server.url()
    await workers.start(url, "patient", kinds="scripted")
    redis_server.stop()
    # Slow (an outage, then a reconnect): it pins what a user watching the log sees.
    await trio.sleep(2.5)  # long enough for coredis to have logged a retry every 2 s
    redis_server.start()

    async def back() -> bool:
        return "is back" in workers.log("patient")

    await wait_until(back)
    log = workers.log("patient")
    assert log.count("unreachable while") == 1, log
    assert log.count("is back") == 1, log
    assert "coredis" not in log
