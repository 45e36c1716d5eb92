"""Durability you choose (``durability = "normal" | "full"``): the setting reaches the store's
real connection from the configuration file, the command line and the embedded API, and a
bad value is refused naming the accepted ones."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from loopactors.cli._commands import _config, build_parser
from loopactors.errors import ConfigError
from loopactors.runtime import RuntimeConfig, load_config, open_runtime
from loopactors.runtime._store import Store
from loopactors.storage import (
    DURABILITIES,
    MemoryBackend,
    SqliteBackend,
    StoreBackend,
    check_durability,
    open_backend,
    open_store,
)
from loopactors.storage._postgres import PostgresBackend

#: ``PRAGMA synchronous`` as SQLite reports it: 1 is NORMAL, 2 is FULL.
SYNCHRONOUS = {"normal": 1, "full": 2}


def synchronous(backend: StoreBackend) -> int:
    assert isinstance(backend, SqliteBackend)
    value: int = backend._conn.execute("PRAGMA synchronous").fetchone()[0]
    return value


@pytest.mark.parametrize("durability", DURABILITIES)
def test_sqlite_sets_the_pragma_on_its_connection(tmp_path: Path, durability: str) -> None:
    backend = open_backend("sqlite", tmp_path, durability=check_durability(durability))
    try:
        assert synchronous(backend) == SYNCHRONOUS[durability]
        # WAL either way: FULL syncs the WAL at each commit, NORMAL at checkpoints.
        assert isinstance(backend, SqliteBackend)
        assert backend._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        backend.close()


def test_the_default_is_normal(tmp_path: Path) -> None:
    assert RuntimeConfig().durability == "normal"
    backend = open_backend("sqlite", tmp_path)
    try:
        assert synchronous(backend) == SYNCHRONOUS["normal"]
    finally:
        backend.close()


def test_a_reopened_store_takes_the_setting_of_its_own_open(tmp_path: Path) -> None:
    # The pragma is the connection's, not the file's: each open says it again.
    open_backend("sqlite", tmp_path, durability="full").close()
    backend = open_backend("sqlite", tmp_path)
    try:
        assert synchronous(backend) == SYNCHRONOUS["normal"]
    finally:
        backend.close()


def test_a_bad_value_names_the_accepted_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown durability 'fsync'; accepted: normal, full"):
        open_store("sqlite", tmp_path, durability="fsync")  # type: ignore[arg-type]
    assert not (tmp_path / "loopactors.db").exists()  # refused before anything was opened
    with pytest.raises(ValueError, match=r"durability must be one of normal, full, got 'FULL'"):
        RuntimeConfig(durability="FULL")  # type: ignore[arg-type]


def test_the_memory_store_takes_either(tmp_path: Path) -> None:
    for durability in DURABILITIES:
        backend = open_backend("memory", None, durability=durability)
        assert isinstance(backend, MemoryBackend)
        backend.close()


def test_the_configuration_file(tmp_path: Path) -> None:
    path = tmp_path / "loopactors.toml"
    path.write_text('durability = "full"\n', encoding="utf-8")
    assert load_config(path).durability == "full"
    path.write_text('durability = "always"\n', encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(path) in str(info.value)
    assert "durability must be one of normal, full, got 'always'" in str(info.value)
    path.write_text("durability = 2\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"durability: expected one of normal, full, got int"):
        load_config(path)


@pytest.mark.parametrize("command", ["run", "node", "repl", "resume"])
def test_the_command_line_flag(tmp_path: Path, command: str) -> None:
    path = tmp_path / "loopactors.toml"
    path.write_text('durability = "full"\n', encoding="utf-8")
    text = ["|loop:1| hi"] if command == "run" else []
    parser = build_parser(command)
    given = parser.parse_args([command, *text, "--config", str(path)])
    assert _config(given).durability == "full"  # the file's
    flagged = parser.parse_args([command, *text, "--config", str(path), "--durability", "normal"])
    assert _config(flagged).durability == "normal"  # the flag wins
    bad = parser.parse_args([command, *text, "--durability", "sync"])
    with pytest.raises(ConfigError, match=r"durability must be one of normal, full, got 'sync'"):
        _config(bad)


@pytest.mark.parametrize(
    ("durability", "given"), [("normal", "config"), ("full", "config"), ("full", "keyword")]
)
async def test_the_embedded_api_sets_it_on_the_runtime_store(
    tmp_path: Path, durability: str, given: str
) -> None:
    chosen = check_durability(durability)
    config = RuntimeConfig(store="sqlite", state_dir=tmp_path, shutdown_grace=5.0)
    opened = (
        open_runtime(config.replace(durability=chosen))
        if given == "config"
        else open_runtime(config, durability=chosen)
    )
    async with opened as rt:
        ref = rt.node.whereis("store")
        assert ref is not None
        actor = ref._cell.actor
        assert isinstance(actor, Store)
        assert synchronous(actor.backend) == SYNCHRONOUS[durability]
        started = await rt.start("|loop:2,fresh| hello", worker="scripted")
        final = await rt.wait(started.loop_id)
        assert final.phase == "complete"
    # What was committed under either setting is there after the runtime is gone.
    with sqlite3.connect(tmp_path / "loopactors.db") as conn:
        assert conn.execute("SELECT count(*) FROM rounds").fetchone()[0] == 2
    with pytest.raises(ConfigError, match=r"durability must be one of normal, full, got 'on'"):
        async with open_runtime(config, durability="on"):
            pass


def test_postgresql_full_flushes_every_commit_of_its_session(postgres_url: str) -> None:
    # The test server runs with synchronous_commit = off: normal keeps the server's setting,
    # full turns the flush on for the store's own session.
    for durability, expected in (("normal", "off"), ("full", "on")):
        backend = open_backend(postgres_url, None, durability=check_durability(durability))
        try:
            assert isinstance(backend, PostgresBackend)
            row = backend._conn.execute("SHOW synchronous_commit").fetchone()
            assert row is not None
            assert row[0] == expected
        finally:
            backend.close()
