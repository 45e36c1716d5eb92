"""Issue 16's "done when", walked as a new user would, with real processes and a real browser:
`loopactors node`, then `loopactors dashboard --open`, loops move, one is stopped with a
click, and Prometheus scrapes /metrics with the token. The token travels in the URL's
fragment only: it is in no request the browser sent and in no line the node logged."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import stat
import subprocess
import threading
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.hang import HANG, HANG_MS

from .test_cli_node import LOOPACTORS
from .test_dashboard import CHROMIUM, CHROMIUM_ARGS, playwright_api

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="no system Chromium")
expect = playwright_api.expect


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class _Node:
    """`loopactors node` started in ``folder`` exactly as typed, its log kept."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.proc = subprocess.Popen(
            [*LOOPACTORS, "node"], cwd=folder, stderr=subprocess.PIPE, text=True
        )
        self.log: list[str] = []
        self.serving = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self.serving.wait(HANG):
            self.proc.kill()
            raise AssertionError(f"the node did not start: {''.join(self.log)}")

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)
            if " serving ws://" in line:
                self.serving.set()

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=HANG)
        self._reader.join(10)
        assert self.proc.stderr is not None
        self.proc.stderr.close()
        return code


def _dashboard_open(folder: Path) -> str:
    """`loopactors dashboard --open` in ``folder``; the URL its page file sent the browser
    ($BROWSER) to (the browser gets a file, never the token on its command line)."""
    opened = folder / "opened-argv.txt"
    page = folder / "opened-page.html"
    browser_script = folder / "browser.sh"
    browser_script.write_text(
        f'#!/bin/sh\nprintf "%s" "$1" > "{opened}"\ncat "${{1#file://}}" > "{page}"\n'
    )
    browser_script.chmod(browser_script.stat().st_mode | stat.S_IEXEC)
    shown = subprocess.run(  # noqa: PLW1510 - the exit code is asserted
        [*LOOPACTORS, "dashboard", "--open"],
        cwd=folder,
        env={**os.environ, "BROWSER": str(browser_script)},
        capture_output=True,
        text=True,
        timeout=HANG,
    )
    assert shown.returncode == 0, shown.stderr
    assert opened.read_text().startswith("file://")
    found = re.search(r"location\.replace\((\"[^\"]*\")\)", page.read_text())
    assert found is not None, page.read_text()
    url: str = json.loads(found.group(1))
    assert url == shown.stdout.strip()
    return url


def _watch_and_stop(url: str) -> tuple[list[str], list[str]]:
    """In Chromium: start two loops, see one move, stop the other with a click. The loop ids,
    and every request line and header the browser sent."""
    with playwright_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page()
        sent: list[str] = []
        page.on("request", lambda r: sent.append(f"{r.method} {r.url} {json.dumps(r.headers)}"))
        page.on("websocket", lambda ws: sent.append(f"WEBSOCKET {ws.url}"))
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(url)
        expect(page.locator("#conn-status")).to_have_attribute("data-state", "connected")
        assert "token" not in page.url
        ids = []
        for text in ("|loop:40,fresh| watch me move", "|loop:40,fresh| stop me"):
            page.fill("textarea[name=text]", text)
            page.click("[data-action=start]")
            expect(page.locator("#start-ok")).to_contain_text("started")
            ids.append((page.locator("#start-ok").text_content() or "").split()[-1])
        moving, doomed = (page.locator(f'tr[data-loop-id="{i}"]') for i in ids)
        first = moving.locator("td.round").text_content() or ""
        expect(moving.locator("td.round")).not_to_have_text(first, timeout=HANG_MS)
        doomed.locator('[data-action="stop"]').click()
        expect(doomed).to_have_attribute("data-phase", "cancelled", timeout=HANG_MS)
        expect(moving).not_to_have_attribute("data-phase", "cancelled")
        browser.close()
    assert errors == [], "JavaScript errors in the console"
    assert sent, "the browser's requests were not seen"
    return ids, sent


def _scrape(port: int, token: str) -> dict[str, float]:
    """Prometheus' scrape with the bearer token: each sample by name and labels."""
    metrics_url = f"http://127.0.0.1:{port}/metrics"
    assert httpx.get(metrics_url, timeout=HANG).status_code == 401
    scrape = httpx.get(metrics_url, headers={"Authorization": f"Bearer {token}"}, timeout=HANG)
    assert scrape.status_code == 200
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(scrape.text):
        for sample in family.samples:
            samples[sample.name + json.dumps(sample.labels, sort_keys=True)] = sample.value
    return samples


def test_a_new_user_runs_the_node_opens_the_dashboard_stops_a_loop_and_scrapes(
    tmp_path: Path,
) -> None:
    port = _free_port()  # the default 8765 may be taken on a shared machine
    (tmp_path / "loopactors.toml").write_text(
        f'worker = "scripted:latency=0.3"\n\n[node]\nport = {port}\n'
    )
    node = _Node(tmp_path)
    try:
        token = (tmp_path / ".loopactors" / "node.token").read_text().strip()
        url = _dashboard_open(tmp_path)
        assert url.startswith(f"http://127.0.0.1:{port}/#token=")
        ids, sent = _watch_and_stop(url)
        assert not [line for line in sent if token in line]

        node_url = (tmp_path / ".loopactors" / "node.url").read_text().strip()
        status = subprocess.run(  # noqa: PLW1510 - the exit code is asserted
            [*LOOPACTORS, "status", ids[1], "--json", "--connect", node_url],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=HANG,
        )
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["phase"] == "cancelled"  # read back through the CLI

        samples = _scrape(port, token)
        assert samples['loopactors_loops{"phase": "cancelled"}'] == 1
        loops = sum(v for k, v in samples.items() if k.startswith("loopactors_loops{"))
        assert loops == 2  # the other one still runs, in whichever live phase
        finished = sum(v for k, v in samples.items() if k.startswith("loopactors_rounds_total"))
        assert finished >= 2, "the rounds the page saw move are counted"
    finally:
        code = node.stop()
    assert code == 0
    log = "".join(node.log)
    assert f"dashboard at http://127.0.0.1:{port}/" in log
    assert token not in log
