"""`loopactors node` on a PostgreSQL store after its lease ended (``LeaseLost``): it
registers again as a new incarnation on the same port (never reviving the dead one), waits
between attempts while the database cannot be reached, or, told to, exits with code 75, as
`loopactors run` does."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
import trio

from loopactors.client import connect
from loopactors.gateway import GatewaySettings, serve_node
from loopactors.runtime import RuntimeConfig
from loopactors.storage._postgres import PostgresBackend
from tests.hang import HANG

ROOT = Path(__file__).resolve().parents[2]


def sql(url: str, query: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def incarnations(url: str, pid: int) -> list[tuple[str, str]]:
    """This process's node incarnations on the store, oldest first: id and state."""
    rows = sql(url, "SELECT node_id, state FROM nodes WHERE pid = %s ORDER BY started_at", (pid,))
    return [(str(node_id), str(state)) for node_id, state in rows]


def declare_dead(url: str, node_id: str) -> None:
    """What a node that found ``node_id``'s lease expired does: declared dead, its loops
    freed under a new fence."""
    sql(
        url,
        "UPDATE nodes SET state = 'dead', dead_at = clock_timestamp(), dead_by = 'another' "
        "WHERE node_id = %s",
        (node_id,),
    )
    sql(url, "UPDATE loops SET owner = NULL, fence = fence + 1 WHERE owner = %s", (node_id,))


async def until(what: str, check: Callable[[], bool]) -> None:
    with trio.fail_after(HANG):
        while not await trio.to_thread.run_sync(check):
            await trio.sleep(0.05)
    assert check(), what


def config(url: str, state: Path) -> RuntimeConfig:
    return RuntimeConfig(
        store=url,
        state_dir=state,
        lease_ttl=1.0,
        kill_grace=0.0,
        inter_round_delay=0.1,
        shutdown_grace=5.0,
    )


async def test_a_node_declared_dead_serves_on_as_a_new_incarnation(
    postgres_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    pid = os.getpid()
    async with trio.open_nursery() as nursery:
        gateway = await nursery.start(
            serve_node, config(postgres_url, tmp_path), GatewaySettings(port=0)
        )
        token = gateway.token_path.read_text().strip()
        async with connect(gateway.url, token=token) as client:
            loop = await client.start(
                # Rounds of 1 s: it runs on for 50 s, long after the node registers again.
                "|loop:50 stale_rounds=50| long work",
                worker="scripted:latency=1",
            )
        [(first, _)] = incarnations(postgres_url, pid)
        declare_dead(postgres_url, first)

        def registered_again() -> bool:
            return [s for _, s in incarnations(postgres_url, pid)] == ["dead", "live"]

        await until("a new incarnation", registered_again)
        await until("it serves", lambda: "again, a new incarnation" in caplog.text)
        [(_, dead), (second, _)] = incarnations(postgres_url, pid)
        assert dead == "dead"
        assert second != first
        # The same port serves the new incarnation, which claimed the loop back (freed with
        # the dead one) and runs it on under its own fence.
        async with connect(gateway.url, token=token, reconnect=True) as client:
            with trio.fail_after(HANG):
                while True:
                    owner = sql(
                        postgres_url, "SELECT owner FROM loops WHERE loop_id = %s", (loop.loop_id,)
                    )
                    if owner == [(second,)]:
                        break
                    await trio.sleep(0.05)
            at = (await client.get(loop.loop_id)).round
            with trio.fail_after(HANG):
                while (await client.get(loop.loop_id)).round <= at:
                    await trio.sleep(0.05)
            # A renewal never revived the dead one: it stays dead while the other serves.
            await trio.sleep(1.0)
            assert incarnations(postgres_url, pid) == [(first, "dead"), (second, "live")]
            assert (await client.stop(loop.loop_id)).phase == "cancelled"
        os.kill(pid, signal.SIGTERM)  # serve_node's own signal receiver takes it
    assert incarnations(postgres_url, pid) == [(first, "dead"), (second, "left")]
    said = caplog.text
    assert "was taken over by another node: stopping (nothing more is committed)" in said
    assert "lease lost: registering again as a new incarnation" in said
    assert f"node {second} holds a lease on the store" in said
    assert "again, a new incarnation" in said


async def test_a_node_waits_for_an_unreachable_database_then_registers_again(
    postgres_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The database refuses this node's role and ends its sessions (an outage, as the node
    sees it): its runtime stops (its lease cannot be renewed, its store cannot be opened);
    it tries again with growing waits until the role may log in again, then serves as a new
    incarnation."""
    caplog.set_level(logging.INFO)
    role = f"r_{uuid.uuid4().hex[:12]}"
    parts = urllib.parse.urlsplit(postgres_url)
    schema = urllib.parse.parse_qs(parts.query)["options"][0].split("=")[1]
    sql(postgres_url, f"CREATE ROLE {role} LOGIN")
    sql(postgres_url, f"GRANT ALL ON SCHEMA {schema} TO {role}")
    url = urllib.parse.urlunsplit(parts._replace(netloc=f"{role}@"))
    pid = os.getpid()
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_node, config(url, tmp_path), GatewaySettings(port=0))
        [(first, _)] = incarnations(postgres_url, pid)
        sql(postgres_url, f"ALTER ROLE {role} NOLOGIN")
        sql(
            postgres_url,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
            (role,),
        )

        def attempts() -> int:
            return caplog.text.count("cannot register again")

        await until("two failed attempts", lambda: attempts() >= 2)
        # Its runtime stopped on the lost lease, or on the store it could not reach,
        # whichever came first.
        assert "registering again as a new incarnation" in caplog.text
        waits = [
            float(line.rsplit("next attempt in ", 1)[1].split()[0])
            for line in caplog.text.splitlines()
            if "cannot register again" in line
        ]
        assert 0.8 <= waits[0] <= 2.0
        # Doubled each time (each jittered down by at most a fifth).
        assert 1.6 * 0.8 <= waits[1] / waits[0] <= 2.0 / 0.8
        sql(postgres_url, f"ALTER ROLE {role} LOGIN")

        def registered_again() -> bool:
            states = [s for _, s in incarnations(postgres_url, pid)]
            return len(states) == 2 and states[1] == "live"

        await until("a new incarnation", registered_again)
        assert incarnations(postgres_url, pid)[0][0] == first
        os.kill(pid, signal.SIGTERM)
    assert [s for _, s in incarnations(postgres_url, pid)][1] == "left"


def test_exit_on_lease_lost_ends_the_node_with_75(postgres_url: str, tmp_path: Path) -> None:
    argv = [
        sys.executable, "-m", "loopactors", "node", "--store", postgres_url,
        "--state", str(tmp_path / "state"), "--listen", "127.0.0.1:0", "--lease-ttl", "1",
        "--exit-on-lease-lost",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = tmp_path / "node.log"
    with log.open("wb") as out:
        node = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=out, env=env)
    try:
        url_file = tmp_path / "state" / "node.url"
        started = time.monotonic()
        while not url_file.exists():
            assert node.poll() is None, log.read_text()
            assert time.monotonic() - started < HANG, "the node never served"
            time.sleep(0.05)
        [(node_id, _)] = incarnations(postgres_url, node.pid)
        declare_dead(postgres_url, node_id)
        assert node.wait(HANG) == 75, log.read_text()
    finally:
        if node.poll() is None:
            node.kill()
            node.wait()
    said = log.read_text()
    assert "lease lost: exiting (exit_on_lease_lost is set)" in said
    assert "was taken over by another node" in said
    assert incarnations(postgres_url, node.pid) == [(node_id, "dead")]


def test_run_whose_lease_ends_exits_with_75(postgres_url: str, tmp_path: Path) -> None:
    PostgresBackend(postgres_url, node_id="").close()  # the tables, to watch from here
    argv = [
        sys.executable, "-m", "loopactors", "run", "|loop:50| long", "--worker",
        "scripted:latency=1", "--store", postgres_url, "--state", str(tmp_path / "state"),
        "--lease-ttl", "1", "--json",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = tmp_path / "run.log"
    with log.open("wb") as out:
        run = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=out, env=env)
    try:
        started = time.monotonic()
        while not sql(postgres_url, "SELECT 1 FROM loops WHERE phase <> 'admitted'"):
            assert run.poll() is None, log.read_text()
            assert time.monotonic() - started < HANG, "the loop never started"
            time.sleep(0.05)
        [(node_id, _)] = incarnations(postgres_url, run.pid)
        declare_dead(postgres_url, node_id)
        assert run.wait(HANG) == 75, log.read_text()
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert "was taken over by another node" in log.read_text()
