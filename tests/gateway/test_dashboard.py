"""The dashboard in a real headless Chromium against a real `loopactors node` process.

Chromium comes from the system's packages (``.ci/run`` installs it); Playwright drives it
through ``executable_path`` and never downloads a browser. Without /usr/bin/chromium these
tests are skipped, saying so.
"""

from __future__ import annotations

import json
import re
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from loopactors.client import connect
from tests.hang import HANG_MS

from .test_cli_node import NodeProcess

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="no system Chromium at /usr/bin/chromium (`apt-get install chromium`, as .ci/run does)",
)

playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright (dev extra)")
expect = playwright_api.expect


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def node(tmp_path: Path) -> Iterator[NodeProcess]:
    process = NodeProcess(tmp_path, "--worker", "scripted:latency=0.3")
    yield process
    if process.proc.poll() is None:
        process.proc.kill()
        process.proc.wait()
    if process.proc.stderr is not None:
        process.proc.stderr.close()


class Dashboard:
    """A page on the node's dashboard that records every console error and page error."""

    def __init__(self, browser: Any, node: NodeProcess) -> None:
        self.node = node
        self.page = browser.new_page(viewport={"width": 1300, "height": 900})
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        token = (node.state / "node.token").read_text().strip()
        self.http = node.url.replace("ws://", "http://")
        self.page.goto(f"{self.http}/#token={token}")
        expect(self.page.locator("#conn-status")).to_have_attribute("data-state", "connected")

    def start(self, text: str, worker: str = "") -> str:
        page = self.page
        page.fill("textarea[name=text]", text)
        page.fill("input[name=worker]", worker)
        page.click("[data-action=start]")
        expect(page.locator("#start-ok")).to_contain_text("started")
        started = page.locator("#start-ok").text_content() or ""
        return started.removeprefix("started ").strip()

    def row(self, loop_id: str) -> Any:
        return self.page.locator(f'tr[data-loop-id="{loop_id}"]')


@pytest.fixture
def dashboard(browser: Any, node: NodeProcess) -> Iterator[Dashboard]:
    board = Dashboard(browser, node)
    yield board
    board.page.close()
    assert board.errors == [], "JavaScript errors in the console"


def cli_phase(node: NodeProcess, loop_id: str) -> str:
    status = node.cli("status", loop_id, "--json")
    assert status.returncode == 0, status.stderr
    phase: str = json.loads(status.stdout)["phase"]
    return phase


def test_the_token_leaves_the_url_and_stays_in_session_storage(dashboard: Dashboard) -> None:
    page = dashboard.page
    assert "token" not in page.url
    token = (dashboard.node.state / "node.token").read_text().strip()
    assert page.evaluate("sessionStorage.getItem('loopactors.token')") == token
    assert page.evaluate("localStorage.length") == 0
    assert token not in "".join(dashboard.node.log)


def test_a_running_loops_row_updates_live_and_its_stop_button_cancels_it(
    dashboard: Dashboard,
) -> None:
    loop_id = dashboard.start("|loop:50,fresh| a long job")
    row = dashboard.row(loop_id)
    expect(row).to_have_count(1)
    round_cell = row.locator("td.round")
    first = round_cell.text_content()
    expect(round_cell).not_to_have_text(first or "", timeout=HANG_MS)  # no reload: pushed
    expect(row.locator("td.task")).to_have_text("a long job")
    row.locator('[data-action="stop"]').click()
    expect(row).to_have_attribute("data-phase", "cancelled", timeout=HANG_MS)
    assert cli_phase(dashboard.node, loop_id) == "cancelled"
    expect(row.locator('[data-action="stop"]')).to_be_disabled()


def test_pause_and_resume_buttons(dashboard: Dashboard) -> None:
    loop_id = dashboard.start("|loop:50,fresh| pausable")
    row = dashboard.row(loop_id)
    row.locator('[data-action="pause"]').click()
    expect(row).to_have_attribute("data-phase", "paused", timeout=HANG_MS)
    assert cli_phase(dashboard.node, loop_id) == "paused"
    expect(row.locator('[data-action="pause"]')).to_be_disabled()
    row.locator('[data-action="resume"]').click()
    expect(row).not_to_have_attribute("data-phase", "paused", timeout=HANG_MS)
    assert cli_phase(dashboard.node, loop_id) not in ("paused", "cancelled", "complete")
    expect(row.locator('[data-action="resume"]')).to_be_disabled()


def test_the_start_form_shows_the_nodes_errors(dashboard: Dashboard) -> None:
    page = dashboard.page
    page.fill("textarea[name=text]", "|loop:abc| bad count")
    page.click("[data-action=start]")
    expect(page.locator("#start-error")).to_contain_text('iterations "abc" is not a whole number')
    page.fill("textarea[name=text]", "|loop:2| fine text")
    page.fill("input[name=worker]", "no-such-worker")
    page.click("[data-action=start]")
    expect(page.locator("#start-error")).to_contain_text("no-such-worker")
    assert page.locator("tr[data-loop-id]").count() == 0


def test_the_loop_view_shows_rounds_breaker_and_output(dashboard: Dashboard) -> None:
    page = dashboard.page
    loop_id = dashboard.start("|loop:3,fresh| three rounds", worker="scripted:latency=0.05")
    row = dashboard.row(loop_id)
    expect(row).to_have_attribute("data-phase", "complete", timeout=HANG_MS)
    row.locator("a.open").click()
    expect(page.locator("#loop-view")).to_be_visible()
    rounds = page.locator("#round-rows tr")
    expect(rounds).to_have_count(3)
    expect(rounds.nth(0).locator("td").nth(1)).to_have_text("completed")
    rounds.nth(0).locator("summary").click()
    expect(rounds.nth(0).locator("pre")).to_contain_text("round 1 of 3")
    expect(page.locator("#breaker .bar.closest")).to_have_count(1)
    expect(page.locator("#breaker .bar")).to_have_count(5)  # no token or time budget set
    expect(page.locator('#breaker .bar[data-trigger="max_rounds"]')).to_have_class("bar closest")
    expect(page.locator('#breaker [data-trigger="max_rounds"] .count')).to_have_text("3 / 3")
    expect(page.locator('#breaker [data-trigger="stagnation"] .count')).to_have_text("0 / 3")
    expect(page.locator('#breaker [data-trigger="frustration"] .count')).to_have_text("0 / 3")
    expect(page.locator("#timeline rect")).to_have_count(3)
    expect(page.locator("#events li")).not_to_have_count(0)
    expect(page.locator("#events")).to_contain_text("loop_finished")
    page.click("#close-loop")
    expect(page.locator("#loops-view")).to_be_visible()


def test_filter_search_and_node_view(dashboard: Dashboard) -> None:
    page = dashboard.page
    done = dashboard.start("|loop:1| quick one", worker="scripted:latency=0.01")
    slow = dashboard.start("|loop:50| slow one")
    expect(dashboard.row(done)).to_have_attribute("data-phase", "complete", timeout=HANG_MS)
    page.select_option("#phase-filter", "live")
    expect(page.locator("tr[data-loop-id]")).to_have_count(1)
    expect(dashboard.row(slow)).to_have_count(1)
    page.select_option("#phase-filter", "")
    page.fill("#search", "quick")
    expect(page.locator("tr[data-loop-id]")).to_have_count(1)
    expect(dashboard.row(done)).to_have_count(1)
    page.fill("#search", "")
    page.click(".tab[data-view=node]")
    expect(page.locator('#actors li[data-actor="store"]')).to_contain_text("restarts 0")
    expect(page.locator('#actors li[data-actor="loops"]')).to_contain_text("children")
    expect(page.locator("#node-figures")).to_contain_text("connections")
    expect(page.locator("#rate-chart polyline")).to_have_count(1)
    expect(page.locator("#cluster-view")).to_be_hidden()  # a store of its own: no cluster


def test_the_node_view_lists_the_nodes_sharing_a_postgresql_store(
    browser: Any, tmp_path: Path, postgres_url: str
) -> None:
    first = NodeProcess(tmp_path / "a", "--store", postgres_url, "--worker", "scripted:latency=1")
    second = NodeProcess(tmp_path / "b", "--store", postgres_url)
    try:
        board = Dashboard(browser, first)
        board.start("|loop:50| owned by the first node")
        page = board.page
        page.click(".tab[data-view=node]")
        rows = page.locator("#cluster-rows tr")
        expect(rows).to_have_count(2, timeout=HANG_MS)
        mine = rows.filter(has_text="(this node)")
        expect(mine).to_have_count(1)
        expect(mine).to_have_attribute("data-state", "live")
        expect(mine.locator("td").nth(6)).to_have_text("1")  # the loop it started
        expect(mine.locator("td").nth(3)).to_have_text(first.url)  # where it listens
        other = rows.filter(has_not_text="(this node)")
        expect(other.locator("td").nth(6)).to_have_text("0")
        expect(other.locator("td").nth(3)).to_have_text(second.url)
        assert second.terminate() == 0  # a graceful stop leaves the store
        expect(page.locator('#cluster-rows tr[data-state="left"]')).to_have_count(
            1, timeout=HANG_MS
        )
        board.page.close()
        assert board.errors == []
    finally:
        for node in (first, second):
            if node.proc.poll() is None:
                node.proc.kill()
                node.proc.wait()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_the_page_survives_a_node_restart(browser: Any, tmp_path: Path) -> None:
    port = _free_port()
    first = NodeProcess(tmp_path, "--listen", f"127.0.0.1:{port}")
    try:
        board = Dashboard(browser, first)
        old_id = board.page.locator("#node-id").text_content() or ""
        loop_id = board.start("|loop:2| before the restart", worker="scripted:latency=0.01")
        expect(board.row(loop_id)).to_have_attribute("data-phase", "complete", timeout=HANG_MS)
        assert first.terminate() == 0
        expect(board.page.locator("#conn-status")).to_have_attribute("data-state", "reconnecting")
        expect(board.page.locator("#banner")).to_contain_text("Lost the connection")
        second = NodeProcess(tmp_path, "--listen", f"127.0.0.1:{port}")
        try:
            expect(board.page.locator("#conn-status")).to_have_attribute(
                "data-state", "connected", timeout=HANG_MS
            )
            expect(board.page.locator("#banner")).to_contain_text("the node restarted")
            assert board.page.locator("#node-id").text_content() != old_id
            expect(board.row(loop_id)).to_have_count(1)  # read again from the store
            again = board.start("|loop:1| after the restart", worker="scripted:latency=0.01")
            expect(board.row(again)).to_have_attribute("data-phase", "complete", timeout=HANG_MS)
            # Only the refused reconnection attempts may have been logged by the browser.
            assert all(re.search(r"WebSocket|ERR_CONNECTION_REFUSED", e) for e in board.errors)
        finally:
            second.terminate()
        board.page.close()
    finally:
        if first.proc.poll() is None:
            first.proc.kill()
            first.proc.wait()


def test_every_loop_is_reachable_past_one_status_page(browser: Any, tmp_path: Path) -> None:
    # Pages of 40 loops: 130 loops take four status pages, and the oldest is on the last.
    config = tmp_path / "loopactors.toml"
    config.write_text("[node]\nmax_status_loops = 40\n")
    node = NodeProcess(tmp_path / "state", "--config", str(config))
    try:
        token = (node.state / "node.token").read_text().strip()

        async def start_loops() -> list[str]:
            async with connect(node.url, token=token) as client:
                return [
                    (await client.start(f"|loop:1| paged job {n}", worker="scripted")).loop_id
                    for n in range(130)
                ]

        loop_ids = trio.run(start_loops)
        board = Dashboard(browser, node)
        page = board.page
        expect(page.locator("#counts")).to_have_text("130 loops, 0 live", timeout=HANG_MS)
        expect(page.locator("#page-info")).to_have_text("1 / 2")
        expect(page.locator("tr[data-loop-id]")).to_have_count(100)
        page.click("#next-page")
        expect(page.locator("tr[data-loop-id]")).to_have_count(30)
        expect(board.row(loop_ids[0])).to_have_count(1)  # the oldest, on the last page
        page.fill("#search", "paged job 0")
        expect(page.locator("tr[data-loop-id]")).to_have_count(1)
        expect(board.row(loop_ids[0])).to_have_attribute("data-phase", "complete")
        board.page.close()
        assert board.errors == []
    finally:
        node.terminate()


def test_the_breaker_shows_the_ledgers_counts_and_the_closest_trigger(
    dashboard: Dashboard,
) -> None:
    page = dashboard.page
    # Failed rounds with the same action: frustration and consecutive failures reach 3 together;
    # consecutive failures, checked first, is the closest and trips the loop.
    loop_id = dashboard.start(
        "|loop:10| fix the parser", worker="python:tests.runtime.round_fns:same_action"
    )
    row = dashboard.row(loop_id)
    expect(row).to_have_attribute("data-phase", "escalated", timeout=HANG_MS)
    row.locator("a.open").click()
    breaker = page.locator("#breaker")
    expect(breaker.locator(".bar.closest")).to_have_attribute(
        "data-trigger", "consecutive_failures"
    )
    expect(breaker.locator(".bar.closest span").first).to_have_text(
        "consecutive failures (closest)"
    )
    expect(breaker.locator('[data-trigger="frustration"] .count')).to_have_text("3 / 3")
    expect(breaker.locator("p.error")).to_contain_text("tripped: consecutive_failures")

    async def standing() -> dict[str, tuple[str, str]]:
        token = (dashboard.node.state / "node.token").read_text().strip()
        async with connect(dashboard.node.url, token=token) as client:
            rounds = await client.history_reply(loop_id)
        assert rounds.breaker is not None
        return {t.trigger: (t.label, f"{t.value:g} / {t.limit:g}") for t in rounds.breaker.triggers}

    # Every count and label on the page is the node's (the ledger's similarity is computed
    # there; the labels come from its trigger table).
    for trigger, (label, text) in trio.run(standing).items():
        bar = breaker.locator(f'[data-trigger="{trigger}"]')
        expect(bar.locator(".count")).to_have_text(text)
        expect(bar.locator("span").first).to_contain_text(label)


def test_the_docs_build_saves_the_screenshot_the_readme_shows(tmp_path: Path) -> None:
    # Over 2 s on purpose: a node with 50 loops and a Chromium, as `just docs` runs them.
    root = Path(__file__).parents[2]
    assert (
        "![The dashboard with 50 loops](docs/img/dashboard.png)" in (root / "README.md").read_text()
    )
    assert (root / "docs" / "img" / "dashboard.png").stat().st_size > 10_000
    assert "python docs/build_screenshot.py" in (root / "justfile").read_text()
    out = tmp_path / "dashboard.png"
    built = subprocess.run(  # noqa: PLW1510 - the exit code is asserted
        [sys.executable, str(root / "docs" / "build_screenshot.py"), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    png = out.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == (1400, 900)


def test_an_agent_rounds_transcript_opens_in_the_loop_view(dashboard: Dashboard) -> None:
    from tests.agent.chat_server import ChatServer, completion

    page = dashboard.page
    replies = [
        completion(calls=[("c1", "bash", {"command": "echo checked"})], prompt_tokens=120),
        completion("All checked: nothing to change.", prompt_tokens=150),
    ]
    with ChatServer(replies) as server:  # a model on loopback: no network, no key
        loop_id = dashboard.start(
            "|loop:1| check the build",
            worker=f"agent:model=scripted,base_url={server.base_url},stream=false",
        )
        row = dashboard.row(loop_id)
        expect(row).to_have_attribute("data-phase", "complete", timeout=HANG_MS)
    row.locator("a.open").click()
    first = page.locator("#round-rows tr").first
    first.locator("summary").click()
    transcript = first.locator("pre.transcript")
    expect(transcript).to_contain_text("All checked: nothing to change.")
    expect(transcript).to_contain_text("echo checked")  # the tool call the agent made
    expect(first.locator("h4")).to_have_text("transcript")


def test_a_plan_driven_loop_shows_its_tasks(dashboard: Dashboard, tmp_path: Path) -> None:
    page = dashboard.page
    plan = tmp_path / "fix_plan.md"
    plan.write_text("- [x] one\n- [ ] two\n- [ ] three\n")
    run = dashboard.node.cli("run", "|loop:2,fresh| plan job", "--plan", str(plan), "--json")
    # The scripted worker ticks nothing: its rounds run out with tasks open (exit 2).
    assert run.returncode == 2, run.stderr
    finished = json.loads(run.stdout.splitlines()[-1])
    assert finished["trigger"] == "plan_not_done"
    loop_id = finished["loop_id"]
    row = dashboard.row(loop_id)
    expect(row.locator("td.round")).to_contain_text("tasks 1/3", timeout=HANG_MS)
    row.locator("a.open").click()
    expect(page.locator("#loop-summary")).to_contain_text("tasks")
    expect(page.locator("#loop-summary")).to_contain_text("1/3")


def cli_state(node: NodeProcess, loop_id: str) -> dict[str, Any]:
    status = node.cli("status", loop_id, "--json")
    assert status.returncode == 0, status.stderr
    state: dict[str, Any] = json.loads(status.stdout)
    return state


def test_a_row_says_what_the_command_line_says(dashboard: Dashboard) -> None:
    loop_id = dashboard.start("|loop:20,fresh| a long job")
    row = dashboard.row(loop_id)
    done = row.locator("td.round")
    # Running: the loop's own phase word (not "running"), rounds completed and the one running.
    expect(done).to_have_text(re.compile(r"^\d+/20 · r\d+ ▶$"), timeout=HANG_MS)
    expect(row.locator(".phase")).to_have_text("awaiting_worker", timeout=HANG_MS)
    expect(done).not_to_have_text(re.compile(r"^0/20"), timeout=HANG_MS)
    stopped = dashboard.node.cli("stop", loop_id, "--json")
    assert stopped.returncode == 0, stopped.stderr
    state = cli_state(dashboard.node, loop_id)
    expect(row).to_have_attribute("data-phase", state["phase"], timeout=HANG_MS)
    # `status` says "3/20" in its done column: so does the row, for the same cancelled loop.
    expect(done).to_have_text(f"{state['completed_rounds']}/20")
    table = dashboard.node.cli("status", loop_id[-8:])
    assert f"{state['completed_rounds']}/20" in table.stdout


def test_an_escalated_row_shows_its_reason(dashboard: Dashboard) -> None:
    loop_id = dashboard.start(
        "|loop:10| fix the parser", worker="python:tests.runtime.round_fns:same_action"
    )
    row = dashboard.row(loop_id)
    expect(row).to_have_attribute("data-phase", "escalated", timeout=HANG_MS)
    reason = cli_state(dashboard.node, loop_id)["reason"]
    assert reason
    expect(row.locator(".reason")).to_have_text(reason)
    expect(row.locator(".reason")).to_have_attribute("title", reason)


def test_the_table_says_it_is_loading_until_the_node_answers(
    browser: Any, node: NodeProcess
) -> None:
    token = (node.state / "node.token").read_text().strip()
    http = node.url.replace("ws://", "http://")
    held = browser.new_page()
    held.route_web_socket(re.compile(".*"), lambda ws: None)  # open, and never answered
    held.goto(f"{http}/#token={token}")
    expect(held.locator("#loading-rows")).to_be_visible()
    expect(held.locator("#loading-rows")).to_have_text("loading the node's loops…")
    expect(held.locator("#empty")).to_be_hidden()
    held.close()
    board = Dashboard(browser, node)  # answered: no loops, and it says so
    expect(board.page.locator("#loading-rows")).to_be_hidden()
    expect(board.page.locator("#empty")).to_be_visible()
    board.page.close()
    assert board.errors == []


def test_the_node_view_draws_the_rounds_the_node_sampled_before_it_opened(
    dashboard: Dashboard,
) -> None:
    token = (dashboard.node.state / "node.token").read_text().strip()

    async def sampled_twice() -> list[Any]:
        async with connect(dashboard.node.url, token=token) as client:
            while len(samples := (await client.statistics()).rate_samples) < 2:
                await trio.sleep(0.5)  # the node samples every 5 s, asked or not
            return samples

    samples = trio.run(sampled_twice)
    assert samples[0][1] == 0  # from the node's start
    page = dashboard.page
    opened = page.evaluate("Date.now() / 1000")
    page.click("[data-view=node]")
    expect(page.locator("#node-figures")).not_to_be_empty(timeout=HANG_MS)
    # The chart's first point is the node's, from before this tab showed the node view.
    assert page.evaluate("rateSamples[0][0]") <= samples[0][0] < opened - 4
    expect(page.locator("#rate-chart text")).to_contain_text("rounds/s now")
