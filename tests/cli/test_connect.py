"""`--connect`: one reading of a node's address for every command (README, "Command line")."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from loopactors.cli import main
from loopactors.cli._address import node_ws_url
from loopactors.errors import ConfigError
from tests.gateway.test_cli_node import LOOPACTORS, NodeProcess
from tests.hang import HANG

# Every command that takes --connect, with the arguments it needs besides.
COMMANDS = [
    ["status"],
    ["status", "abc"],
    ["run", "|loop:1| x"],
    ["stop", "abc"],
    ["history", "abc"],
    ["pause", "abc"],
    ["resume", "abc"],
    ["repl"],
    ["dashboard"],
]


@pytest.mark.parametrize(
    ("given", "url"),
    [
        ("ws://127.0.0.1:8765", "ws://127.0.0.1:8765"),
        ("wss://node.example:443/api", "wss://node.example:443/api"),
        ("http://127.0.0.1:8765/", "ws://127.0.0.1:8765/"),
        ("https://node.example", "wss://node.example"),
        ("http://127.0.0.1:8765/#token=secret", "ws://127.0.0.1:8765/"),  # as copied
        ("127.0.0.1:8765", "ws://127.0.0.1:8765"),
        ("localhost:8765", "ws://localhost:8765"),
        ("[::1]:8765", "ws://[::1]:8765"),
    ],
)
def test_the_accepted_forms(given: str, url: str) -> None:
    assert node_ws_url(given) == url


@pytest.mark.parametrize(
    ("given", "why"),
    [
        ("ftp://x:1", "the scheme 'ftp' is not a node's"),
        ("localhost", "it is not HOST:PORT"),
        ("", "it is not HOST:PORT"),
        ("::1:8765", "an IPv6 host goes in brackets"),
        ("ws://:8765", "it names no host"),
        ("ws://h:99999", "its port is not a number from 1 to 65535"),
        ("h:port", "it is not HOST:PORT"),
    ],
)
def test_anything_else_is_refused_naming_the_accepted_forms(given: str, why: str) -> None:
    with pytest.raises(ConfigError) as refused:
        node_ws_url(given)
    assert f"got {given!r} ({why}" in str(refused.value)
    assert "ws://HOST:PORT, wss://HOST:PORT, http(s)://HOST:PORT or HOST:PORT" in str(refused.value)


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
@pytest.mark.parametrize("bad", ["localhost", "ftp://x:1", "ws://h:99999"])
def test_every_command_refuses_a_bad_address_in_one_line(
    command: list[str], bad: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([*command, "--connect", bad, "--state", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 64
    assert out == ""
    assert err.count("\n") == 1, err
    assert err.startswith("loopactors: error: --connect takes a node's address, ")
    assert repr(bad) in err


def test_every_command_reaches_a_node_by_each_form(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "state", "--worker", "scripted:latency=0.01")
    try:
        port = node.url.rsplit(":", 1)[1].strip("/")

        def cli(*args: str, connect: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(  # noqa: PLW1510 - the exit code is asserted
                [*LOOPACTORS, *args, "--connect", connect, "--state", str(node.state)],
                capture_output=True,
                text=True,
                timeout=HANG,
            )

        forms = [f"127.0.0.1:{port}", f"localhost:{port}", f"http://127.0.0.1:{port}/"]
        run = cli("run", "|loop:1| by address", "--json", connect=forms[0])
        assert run.returncode == 0, run.stderr
        loop_id = json.loads(run.stdout.splitlines()[-1])["loop_id"]
        for form in forms:
            status = cli("status", loop_id, "--json", connect=form)
            assert status.returncode == 0, status.stderr
            assert json.loads(status.stdout)["phase"] == "complete"
            assert "owner" not in json.loads(status.stdout)  # a store of its own: no owners
            history = cli("history", loop_id, "--json", connect=form)
            assert history.returncode == 0, history.stderr
            assert [r["round"] for r in json.loads(history.stdout)["rounds"]] == [1]
            stop = cli("stop", loop_id, "--json", connect=form)  # finished: said, not an error
            assert "Traceback" not in stop.stderr
            resumed = cli("resume", loop_id, connect=form)
            assert "Traceback" not in resumed.stderr
            shown = cli("dashboard", connect=form)
            assert shown.returncode == 0, shown.stderr
            assert shown.stdout.startswith(f"http://127.0.0.1:{port}/#token=") or (
                shown.stdout.startswith(f"http://localhost:{port}/#token=")
            )
        assert all("Traceback" not in line for line in node.log)
    finally:
        assert node.terminate() == 0
