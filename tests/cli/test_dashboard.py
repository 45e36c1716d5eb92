"""`loopactors dashboard` and `--log-format json`, against a real `loopactors node` process."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import urllib.parse
from pathlib import Path

import httpx
import pytest

from loopactors.cli._dashboard import dashboard_url
from loopactors.errors import ConfigError
from tests.gateway.test_cli_node import LOOPACTORS, NodeProcess
from tests.hang import HANG


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: PLW1510 - the exit code is asserted
        [*LOOPACTORS, *args], capture_output=True, text=True, timeout=HANG, env=env
    )


def test_dashboard_prints_the_signed_in_address_and_opens_it(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "state", "--log-format", "json")
    try:
        token = (node.state / "node.token").read_text().strip()
        shown = run_cli("dashboard", "--connect", node.url, "--state", str(node.state))
        assert shown.returncode == 0, shown.stderr
        url = shown.stdout.strip()
        parts = urllib.parse.urlsplit(url)
        assert parts.scheme == "http"
        assert parts.path == "/"
        assert parts.fragment == f"token={urllib.parse.quote(token, safe='')}"
        assert shown.stderr == ""
        page = httpx.get(url.partition("#")[0], timeout=10)
        assert page.status_code == 200
        assert "text/html" in page.headers["content-type"]

        # --open hands the address to the user's browser ($BROWSER is honoured), through a
        # private page file (docs/security.md): the browser reads it and is sent on.
        opened = tmp_path / "opened.txt"
        browser = tmp_path / "browser.sh"
        browser.write_text(f'#!/bin/sh\nsleep 0.1; cat "${{1#file://}}" > {opened}\n')
        browser.chmod(browser.stat().st_mode | stat.S_IEXEC)
        env = {**os.environ, "BROWSER": str(browser)}
        run = run_cli(
            "dashboard", "--open", "--connect", node.url, "--state", str(node.state), env=env
        )
        assert run.returncode == 0, run.stderr
        assert f"location.replace({json.dumps(url)})" in opened.read_text()

        # The node's own log: JSON lines, the loop's lines with its id, never the token.
        started = node.cli("run", "|loop:1| logged")
        assert started.returncode == 0, started.stderr
    finally:
        assert node.terminate() == 0
    records = [json.loads(line) for line in node.log]
    assert all({"ts", "level", "event", "message"} <= set(r) for r in records)
    events = {r["event"] for r in records}
    assert {"listening", "dashboard", "node_serving", "loop_started", "loop_finished"} <= events
    assert {"node_stopped", "shutdown"} <= events
    begun = next(r for r in records if r["event"] == "loop_started")
    finished = next(r for r in records if r["event"] == "loop_finished")
    assert finished["loop_id"] == begun["loop_id"]
    assert begun["loop_id"] in begun["message"]
    assert finished["level"] == "info"
    assert token not in "".join(node.log)
    dashboard_line = next(r for r in records if r["event"] == "dashboard")
    assert dashboard_line["message"].startswith("dashboard at http://127.0.0.1:")


def test_dashboard_without_a_node_still_prints_the_address(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "node.token").write_text("secret-token\n")
    shown = run_cli("dashboard", "--state", str(state), "--connect", "ws://127.0.0.1:9")
    assert shown.returncode == 0
    assert shown.stdout.strip() == "http://127.0.0.1:9/#token=secret-token"
    assert "no node answers at ws://127.0.0.1:9" in shown.stderr


def test_dashboard_finds_the_port_the_running_node_wrote(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "node.token").write_text("secret-token\n")
    (state / "node.url").write_text("ws://127.0.0.1:9\n")  # what a node on port 9 writes
    shown = run_cli("dashboard", "--state", str(state))
    assert shown.returncode == 0
    assert shown.stdout.strip() == "http://127.0.0.1:9/#token=secret-token"
    assert "no node answers at ws://127.0.0.1:9" in shown.stderr


def test_dashboard_refuses_a_bad_address_or_no_token(tmp_path: Path) -> None:
    bad = run_cli("dashboard", "--connect", "ftp://x", "--state", str(tmp_path))
    assert bad.returncode == 64  # bad usage, as for every command's --connect
    assert "--connect takes a node's address, ws://HOST:PORT" in bad.stderr
    env = {k: v for k, v in os.environ.items() if k != "LOOPACTORS_TOKEN"}
    missing = run_cli("dashboard", "--state", str(tmp_path / "none"), env=env)
    assert missing.returncode == 1
    assert "no token to connect with" in missing.stderr


@pytest.mark.parametrize(
    ("node", "url"),
    [
        ("ws://127.0.0.1:8765", "http://127.0.0.1:8765/#token=a%2Fb%20c"),
        ("wss://node.example:443", "https://node.example:443/#token=a%2Fb%20c"),
        ("ws://0.0.0.0:8765", "http://127.0.0.1:8765/#token=a%2Fb%20c"),
        ("ws://[::1]:8765/", "http://[::1]:8765/#token=a%2Fb%20c"),
        ("http://localhost:1", "http://localhost:1/#token=a%2Fb%20c"),
    ],
)
def test_dashboard_url(node: str, url: str) -> None:
    assert dashboard_url(node, "a/b c") == url


def test_dashboard_url_names_what_it_accepts() -> None:
    with pytest.raises(ConfigError, match="ws://HOST:PORT"):
        dashboard_url("127.0.0.1:8765", "t")


def test_worker_logs_json_lines() -> None:
    # No Redis on port 9: the worker logs its retries until it is stopped by the timeout.
    proc = subprocess.Popen(
        [*LOOPACTORS, "worker", "--redis", "redis://127.0.0.1:9/0", "--log-format", "json"],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    try:
        first = json.loads(proc.stderr.readline())
    finally:
        proc.terminate()
        proc.wait(timeout=HANG)
        rest = [json.loads(line) for line in proc.stderr.read().splitlines()]
        proc.stderr.close()
    assert {"ts", "level", "event", "message"} <= set(first)
    # SIGTERM ends it with a word, not in silence.
    said = [line["message"] for line in rest]
    assert any(m.startswith("worker ") and " stopping on SIGTERM: " in m for m in said), said
    assert said[-1].endswith(" stopped")
    assert proc.returncode == 0
    assert first["ts"].endswith("+00:00")


def test_log_format_is_checked() -> None:
    bad = run_cli("node", "--log-format", "xml")
    assert bad.returncode == 64
    assert "invalid choice: 'xml'" in bad.stderr
