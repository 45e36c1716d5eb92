"""Running ``loopactors`` as a user does, with a CLI worker kind, for the agent-CLI tests."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.hang import HANG

from ._fakes import CACHE, cli_binary

LOOPACTORS = [sys.executable, "-m", "loopactors"]
AIDER_VERSION = "0.86.2"


def binary(name: str) -> Path:
    """A pinned CLI: npm ones through ``cli_binary``, aider from its own venv."""
    if name != "aider":
        return cli_binary(name)
    path = CACHE / f"aider-{AIDER_VERSION}" / "venv" / "bin" / "aider"
    if not path.exists():
        import pytest

        repo = Path(__file__).resolve().parents[2]
        subprocess.run([str(repo / ".ci/install-agent-clis"), "aider"], check=True, timeout=900)
        if not path.exists():  # the installer says why in pip-error.log
            log = path.parents[2] / "pip-error.log"
            why = log.read_text()[-300:] if log.exists() else "no log"
            pytest.skip(f"aider-chat=={AIDER_VERSION} could not be installed: {why}")
    return path


def run(
    args: list[str], env: dict[str, str], *, cwd: Path, timeout: float = HANG
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LOOPACTORS, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
        check=False,
    )


def start(args: list[str], env: dict[str, str], *, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*LOOPACTORS, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=cwd,
    )


def events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def of_type(all_events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in all_events if e["type"] == kind]


def read_until(proc: subprocess.Popen[str], kind: str, round_number: int) -> dict[str, Any]:
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        assert line, f"the run ended before {kind} of round {round_number}: {proc.stderr!r}"
        event = json.loads(line)
        if event["type"] == kind and event.get("round") == round_number:
            return dict(event)


def wait_for(condition: Any, timeout: float = HANG) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def processes_with(marker: str) -> list[int]:
    """The processes whose environment holds ``marker`` (a test's private HOME)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker.encode() in environ:
            found.append(int(entry.name))
    return found


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def git(workspace: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(workspace), *args], capture_output=True, text=True, check=True
    )
    return done.stdout


def traced(real: Path, log: Path, calls: str = "connect") -> Path:
    """A wrapper that runs ``real`` under ``strace``, logging every call of ``calls`` (by
    default connect(2)) of the CLI and its children to ``log`` (``binary=`` of the spec)."""
    import pytest

    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed (.ci/run installs it)")
    probe = subprocess.run(
        [strace, "-f", "-o", os.devnull, "true"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        pytest.skip(f"strace cannot trace here: {probe.stderr.decode().strip()[:200]}")
    wrapper = log.with_suffix(".sh")
    wrapper.write_text(f'#!/bin/sh\nexec {strace} -f -qq -e trace={calls} -o {log} {real} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


#: connect(2) targets that stay on the machine: loopback, and local (unix) sockets.
_LOCAL = re.compile(
    r'inet_addr\("127\.|inet_pton\(AF_INET6, "(?:::1|::ffff:127\.[0-9.]+)"|'
    r"AF_UNIX|AF_NETLINK|AF_UNSPEC"
)


#: A datagram or connection to a DNS server's port, whatever its address.
_DNS = re.compile(r"htons\(53\)")
_SENDS = ("sendto(", "sendmsg(", "sendmmsg(")


def lookups_and_sends_off_loopback(log: Path) -> list[str]:
    """In a log traced with ``connect,sendto,sendmsg,sendmmsg``: every name lookup (a
    connection or datagram to port 53, even to a local resolver) and every datagram sent to
    an address beyond loopback."""
    return [
        line.strip()
        for line in log.read_text().splitlines()
        if _DNS.search(line)
        or (any(s in line for s in _SENDS) and "sin" in line and not _LOCAL.search(line))
    ]


def off_loopback(log: Path) -> list[str]:
    """The connect(2) calls in an strace log that aimed beyond loopback (DNS included)."""
    return [
        line.strip()
        for line in log.read_text().splitlines()
        if "connect(" in line and not _LOCAL.search(line)
    ]
