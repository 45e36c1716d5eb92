"""The command line on a store given by URL (--store, $LOOPACTORS_STORE): PostgreSQL for
run, resume, status, history, stop and prune, as separate processes; passwords never shown."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from loopactors.loops import TERMINAL_PHASES, LoopSpec, LoopState
from loopactors.storage import Write, open_backend
from tests.gateway.test_cli_node import NodeProcess
from tests.hang import HANG

CLI = [sys.executable, "-m", "loopactors"]


def cli(
    *args: str, state: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args, "--state", str(state)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )


def seed_live(url: str, loop_id: str, rounds: int = 2) -> None:
    now = time.time()
    state = LoopState(
        loop_id=loop_id,
        spec=LoopSpec(task="left running", rounds=rounds, worker="scripted"),
        phase="dispatching",
        round=1,
        created_at=now,
        updated_at=now,
    )
    backend = open_backend(url, None)
    try:
        backend.commit([Write(state=state)])
    finally:
        backend.close()


def lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def test_every_store_command_works_on_postgresql(postgres_url: str, tmp_path: Path) -> None:
    state = tmp_path / "state"
    run = cli("run", "|loop:2,fresh| hello", "--store", postgres_url, "--json", state=state)
    assert run.returncode == 0, run.stderr
    loop_id = lines(run.stdout)[0]["loop_id"]
    assert not (state / "loopactors.db").exists()  # the loops are in the database

    # The store from the environment, as a deployment keeps the password off the command line.
    env = {"LOOPACTORS_STORE": postgres_url}
    status = cli("status", "--json", state=state, env=env)
    assert status.returncode == 0, status.stderr
    assert [(s["loop_id"], s["phase"]) for s in json.loads(status.stdout)] == [
        (loop_id, "complete")
    ]
    history = cli("history", loop_id[:6], "--json", state=state, env=env)
    assert history.returncode == 0, history.stderr
    assert [r["status"] for r in json.loads(history.stdout)["rounds"]] == ["completed"] * 2

    # A loop a dead node left live: `resume` runs it here; `stop` ends another offline.
    seed_live(postgres_url, "left-1")
    seed_live(postgres_url, "left-2")
    stopped = cli("stop", "left-2", "--json", state=state, env=env)
    assert stopped.returncode == 0, stopped.stderr
    assert json.loads(stopped.stdout)["phase"] == "cancelled"
    resumed = cli("resume", "--json", state=state, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert lines(resumed.stdout)[-1]["phase"] == "complete"
    phases = {
        s["loop_id"]: s["phase"]
        for s in json.loads(cli("status", "--json", state=state, env=env).stdout)
    }
    assert phases == {loop_id: "complete", "left-1": "complete", "left-2": "cancelled"}

    dry = cli("prune", "--older-than", "0", "--dry-run", "--json", state=state, env=env)
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["loops"] == 3
    pruned = cli("prune", "--older-than", "0", "--json", state=state, env=env)
    assert json.loads(pruned.stdout)["loops"] == 3
    assert json.loads(cli("status", "--json", state=state, env=env).stdout) == []


def test_a_password_in_a_store_url_is_never_printed(
    postgres_server: object, tmp_path: Path
) -> None:
    url = "postgresql://loop:hunter2@/nosuchdb?host=/nonexistent-socket-dir"
    for command in (["status"], ["run", "|loop:1| x"], ["prune", "--older-than", "1d"]):
        result = cli(*command, "--store", url, state=tmp_path / "state")
        assert result.returncode != 0
        assert "hunter2" not in result.stdout + result.stderr
        assert "cannot connect to the store postgresql://***@" in result.stderr


def test_a_bad_store_url_is_a_clear_error(tmp_path: Path) -> None:
    result = cli("status", "--store", "mysql://me:pw@host/db", state=tmp_path)
    assert result.returncode != 0
    assert "unknown store 'mysql://***@host/db'; accepted: sqlite" in result.stderr
    result = cli("status", "--store", "memory", state=tmp_path)
    assert "the memory store keeps nothing after its process exits" in result.stderr


def _rows(url: str, query: str) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(query).fetchall()


def _until(url: str, query: str, wanted: Any) -> None:
    """Poll the store until ``query`` returns ``wanted`` (bounded only by HANG: a run that
    never gets there fails instead of hanging)."""
    deadline = time.monotonic() + HANG
    while _rows(url, query) != wanted:
        assert time.monotonic() < deadline, f"{query} never gave {wanted}"
        time.sleep(0.1)


def test_a_killed_nodes_loops_are_taken_over_by_the_next_node(
    postgres_url: str, tmp_path: Path
) -> None:
    now = time.time()
    # Rounds long enough that the loop is still running when its node is killed, however
    # slowly the second node starts on a loaded machine (checked below, not assumed).
    spec = LoopSpec(task="moving", rounds=30, worker="scripted:latency=0.5")
    backend = open_backend(postgres_url, None)
    backend.commit(
        [
            Write(
                state=LoopState(
                    loop_id="moving",
                    spec=spec,
                    phase="dispatching",
                    round=1,
                    created_at=now,
                    updated_at=now,
                )
            )
        ]
    )
    backend.close()
    options = ("--store", postgres_url, "--lease-ttl", "30")
    first = NodeProcess(tmp_path / "a", *options)
    _until(postgres_url, "SELECT count(*) >= 3 FROM rounds", [(True,)])  # it runs the loop
    # A second node runs alongside; the loop stays the first's.
    second = NodeProcess(tmp_path / "b", *options)
    [(owner,)] = _rows(postgres_url, "SELECT owner FROM loops")
    [(first_id,)] = _rows(postgres_url, f"SELECT node_id FROM nodes WHERE pid = {first.proc.pid}")
    assert owner == first_id
    first.proc.kill()  # SIGKILL: its lease (30 s) is left live in the database
    first.proc.wait()
    [(phase,)] = _rows(postgres_url, "SELECT phase FROM loops")
    assert phase not in TERMINAL_PHASES, f"the loop ended before its node was killed: {phase}"
    assert first.proc.stderr is not None
    first.proc.stderr.close()
    # Restarted on the same machine: the killed node's process is gone, so no 30 s wait:
    # it is declared dead at once, and one of the two live nodes takes its loop over.
    successor = NodeProcess(tmp_path / "c", *options)
    # `status` on the store, from anywhere, shows the nodes, live and gone.
    status = cli(
        "status", "--store", postgres_url, state=tmp_path / "elsewhere", env={"COLUMNS": "200"}
    )
    assert status.returncode == 0, status.stderr
    # Each loop's row names the node that owns it (once one of the live nodes claimed it).
    _until(
        postgres_url, f"SELECT owner IS NOT NULL AND owner <> '{first_id}' FROM loops", [(True,)]
    )
    status = cli(
        "status", "--store", postgres_url, state=tmp_path / "elsewhere", env={"COLUMNS": "200"}
    )
    [(owner,)] = _rows(postgres_url, "SELECT owner FROM loops")
    [row] = [line for line in status.stdout.splitlines() if "moving" in line]
    assert owner in row, status.stdout
    # --json says so too, read from the store or through a node (whichever owns it), for
    # every loop or one.
    for where, state in (("--store", tmp_path / "elsewhere"), ("--connect", tmp_path / "b")):
        target = postgres_url if where == "--store" else second.url
        listed = cli("status", "--json", where, target, state=state)
        assert listed.returncode == 0, listed.stderr
        assert [(s["loop_id"], s["owner"]) for s in json.loads(listed.stdout)] == [
            ("moving", owner)
        ]
        one = cli("status", "moving", "--json", where, target, state=state)
        assert json.loads(one.stdout)["owner"] == owner, one.stderr
    started, running, killed, seeder = [
        line for line in status.stdout.splitlines() if "(host " in line
    ]
    live = (
        r"node node-\S+ \(host \S+, pid \d+, gateway ws://127\.0\.0\.1:\d+\): live, "
        r"lease ends in [\d.]+ s, \d live loops?"
    )
    assert re.fullmatch(live, started)
    assert re.fullmatch(live, running)
    # Each names where its node listens, as that node says it.
    assert {second.url, successor.url} == {
        re.search(r"gateway (\S+)\)", line).group(1)  # type: ignore[union-attr]
        for line in (started, running)
    }
    assert re.fullmatch(r"node node-\S+ .*: dead \(declared so by node-\S+\)", killed)
    assert re.fullmatch(r"node command-\S+ .*: left", seeder)  # the write that seeded it
    _until(postgres_url, "SELECT phase FROM loops", [("complete",)])
    rounds = _rows(postgres_url, "SELECT round, status FROM rounds ORDER BY round")
    assert rounds == [(n, "completed") for n in range(1, 31)]  # each once, none lost
    assert successor.terminate() == 0
    assert second.terminate() == 0
    nodes = _rows(postgres_url, "SELECT state FROM nodes WHERE name = 'node' ORDER BY started_at")
    assert nodes == [("dead",), ("left",), ("left",)]
