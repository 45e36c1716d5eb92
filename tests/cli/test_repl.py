"""`loopactors repl` driven through a pseudo-terminal, as a person would type into it."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pexpect  # type: ignore[import-untyped]
import pytest

from loopactors.cli._repl_commands import Command, parse_line
from loopactors.errors import LoopSyntaxError
from tests.cli.test_commands import gone, listed, wait_for_file
from tests.codeloop.toyrepo import VALIDATE, git, make_repo, worker
from tests.gateway.test_cli_node import NodeProcess
from tests.hang import HANG


def test_lines_parse_into_commands() -> None:
    assert parse_line("|loop:3,fresh| hi") == Command("start", text="|loop:3,fresh| hi")
    assert parse_line("  stop ") == Command("/stop-loop")
    assert parse_line("continue") == Command("/resume")
    assert parse_line("/output ab 2") == Command("/output", ("ab", "2"))
    assert parse_line("/worker command:echo hi") == Command("/worker", ("command:echo hi",))
    assert parse_line("") == Command("empty")
    for bad, message in [
        ("|loop:0| x", "below 1"),
        ("/nope", "unknown command /nope"),
        ("/stauts", "unknown command /stauts (did you mean /status?)"),
        ("contnue", "'contnue' is not a command (did you mean continue?)"),
        ("hello there", "is not a command"),
        ("/history", "usage: /history ID"),
        ("/output a b", "ROUND must be a round number"),
        ("/pause a b", "usage: /pause [ID]"),
    ]:
        with pytest.raises(LoopSyntaxError, match=re.escape(message)):
            parse_line(bad)


def _spawn(tmp_path: Path, *args: str) -> pexpect.spawn:
    env = {**os.environ, "PROMPT_TOOLKIT_NO_CPR": "1", "TERM": "xterm"}
    child = pexpect.spawn(
        sys.executable,
        ["-m", "loopactors", "repl", "--state", str(tmp_path), *args],
        env=env,
        encoding="utf-8",
        timeout=HANG,
        dimensions=(40, 160),
    )
    child.expect("loop>")
    return child


@pytest.fixture
def repl(tmp_path: Path) -> Iterator[pexpect.spawn]:
    child = _spawn(tmp_path, "--store", "memory")
    yield child
    child.close(force=True)


def test_start_progress_history_completion_stop_quit(repl: pexpect.spawn, tmp_path: Path) -> None:
    repl.sendline("|loop:3,fresh| say hi")
    repl.expect("no worker configured")  # said once, with the way to choose one
    repl.expect(r"started (\S+): 3 rounds")
    loop_id = repl.match.group(1)
    repl.expect(r"round 2/3 completed")
    repl.expect("loop complete")
    repl.sendline(f"/history {loop_id}")
    repl.expect("round 3: completed")
    repl.send("/hist")
    repl.send("\t")  # completes the command (the screen shows the rest of the word)
    repl.expect("ory")
    repl.send(" " + loop_id[:4])
    repl.send("\t")  # and the loop id
    repl.expect(loop_id[4:])
    repl.sendline("")
    repl.expect("round 3: completed")
    repl.sendline(f"/output {loop_id} 2")
    repl.expect("round 2 of 3")
    # The scripted worker ended that loop at once: nothing to stop, and the REPL says why.
    repl.sendline("/stop-loop")
    repl.expect(r"no loop is running \(the scripted worker ends each round at once; ")
    repl.expect(r"/worker scripted:latency=1 makes each round take a second")
    repl.sendline("/stauts")
    repl.expect(r"unknown command /stauts \(did you mean /status\?\)")
    repl.sendline("contnue")
    repl.expect(r"'contnue' is not a command \(did you mean continue\?\)")
    repl.sendline("/worker scripted:latency=30")
    repl.expect("new loops use: scripted:latency=30")
    repl.sendline("|loop:4| long one")
    repl.expect(r"started (\S+)")
    assert "no worker configured" not in repl.before
    repl.sendline("status")
    repl.expect(r"awaiting_worker|dispatching")
    repl.sendline("stop")
    repl.expect("loop cancelled")
    repl.sendline("bogus words")
    repl.expect("is not a command")
    settle(repl)
    repl.send("half a line")
    repl.sendcontrol("c")  # cancels the line being typed, the REPL stays
    repl.sendline("/loops")
    repl.expect("cancelled")
    assert "half a line" not in repl.before.split("/loops")[-1]
    settle(repl)
    repl.sendeof()  # nothing live: quits without asking
    repl.expect(pexpect.EOF)
    repl.close()
    assert repl.exitstatus == 0
    assert "say hi" in (tmp_path / "repl_history").read_text()


def settle(child: pexpect.spawn) -> None:
    """Wait until the next prompt reads keys.

    Keys sent between two prompts would meet a cooked terminal, where Ctrl-D is no key at
    all. The prompt's own text is not a reliable sign (it is not always redrawn in full), but
    the terminal is: prompt_toolkit turns canonical mode off while a prompt reads, and on
    again while a command runs (checked on the pseudo-terminal, not guessed with a delay).
    """
    deadline = time.monotonic() + HANG
    while termios.tcgetattr(child.child_fd)[3] & termios.ICANON:
        assert time.monotonic() < deadline, "the REPL never read keys again"
        time.sleep(0.01)


def test_ctrl_d_asks_when_loops_are_live(repl: pexpect.spawn) -> None:
    # The memory store keeps nothing, and the banner says so (no state directory talk).
    assert "memory store: nothing is kept after you leave" in repl.before
    repl.sendline("/worker scripted:latency=30")
    repl.expect("new loops use")
    repl.sendline("|loop:2| busy")
    repl.expect(r"started \S+: 2 rounds")
    settle(repl)
    repl.sendeof()
    repl.expect(r"1 loop\(s\) are live; they stop with this embedded node and are lost")
    repl.sendline("n")
    repl.sendline("/status")
    repl.expect("awaiting_worker")
    repl.expect(r"0/2 completed, round 1 running")  # never "round 1/2" for a running round
    repl.sendline("/pause")
    repl.expect(r"pauses once round 1 \(running now\) is recorded")
    settle(repl)
    repl.sendeof()
    repl.expect("Quit")
    repl.sendline("y")
    repl.expect(pexpect.EOF)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_or_a_closed_terminal_leaves_no_worker_behind(
    tmp_path: Path, signum: signal.Signals
) -> None:
    """An embedded REPL ended by SIGTERM or its terminal closing (SIGHUP) left its rounds'
    agents running; it now leaves as `run` does: their groups killed, loops resumable."""
    ready = tmp_path / "ready"
    script = (
        "import os, pathlib, time; "
        f"pathlib.Path({str(ready)!r}).write_text(str(os.getpid())); time.sleep(7200)"
    )
    child = _spawn(tmp_path / "state")
    try:
        child.sendline("/worker command:" + shlex.join([sys.executable, "-c", script]))
        child.expect("new loops use")
        child.sendline("|loop:2| busy")
        child.expect(r"started \S+: 2 rounds")
        pid = int(wait_for_file(ready))
        listed(tmp_path / "state", pid)
        child.kill(signum)
        child.expect(pexpect.EOF)
        child.wait()
        assert gone(pid)
    finally:
        child.close(force=True)


def test_repl_drives_a_remote_node(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "node", "--worker", "scripted:latency=30")
    try:
        token = tmp_path / "token"
        token.write_text((tmp_path / "node" / "node.token").read_text())
        child = _spawn(tmp_path / "client", "--connect", node.url, "--token-file", str(token))
        child.sendline("|loop:3| remote")
        child.expect(r"started (\S+):")
        loop_id = child.match.group(1)
        child.expect(r"round 1/3 started")
        # A worker the node could not build is refused here, at once, not at the next loop.
        child.sendline("/worker bogus:thing")
        child.expect(r"error: unknown worker kind 'bogus' in 'bogus:thing'; accepted kinds: ")
        child.sendline("/worker")
        child.expect(r"new loops use: scripted:latency=30")
        settle(child)
        child.sendeof()
        child.expect(r"they keep running in the node")
        child.sendline("y")
        child.expect(pexpect.EOF)
        child.close()
        status = node.cli("status", loop_id, "--json")
        assert '"awaiting_worker"' in status.stdout  # still running after the REPL left
    finally:
        assert node.terminate() == 0


def test_loop_runs_one_round_of_the_chosen_code_loop(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    init = subprocess.run(
        [sys.executable, "-m", "loopactors", "code", "init", "--slug", "fix-calc",
         "--objective", "make calc.VALUE 42", "--executor", worker(tmp_path, "fix"),
         "--reviewer", worker(tmp_path, "approve"), "--validate", VALIDATE, "--max-rounds", "3"],
        cwd=repo, capture_output=True, text=True, timeout=HANG, check=False,
    )  # fmt: skip
    assert init.returncode == 0, init.stderr
    repl = _spawn(tmp_path / "state", "--store", "memory")
    try:
        repl.sendline("/loop")
        repl.expect("choose one with /code use")
        repl.sendline(f"/code use fix-calc {repo}")
        repl.expect("code loop fix-calc chosen")
        repl.sendline("/loop")
        repl.expect("running 1 round")
        repl.expect(r"round 1/1 completed")
        settle(repl)
        repl.sendline("/code status")
        repl.expect(r"code loop fix-calc: ready, round 1, 1 merged")
        repl.sendline("/code stop")
        repl.expect(r"fix-calc: stopped")
    finally:
        repl.close(force=True)
    assert "VALUE = 42" in git(repo, "show", "loop/fix-calc/candidate:calc.py")


def test_repl_on_a_directory_a_node_serves_connects_to_that_node(tmp_path: Path) -> None:
    """The README's quick start in order: `loopactors node &`, then `loopactors repl`."""
    node = NodeProcess(tmp_path / "state", "--worker", "scripted:latency=30")
    try:
        child = _spawn(tmp_path / "state")
        assert f"a node serves {tmp_path / 'state'}: connected to it at {node.url}" in (
            child.before
        )
        child.sendline("|loop:3| on the node")
        child.expect(r"started (\S+):")
        loop_id = child.match.group(1)
        child.expect(r"round 1/3 started")
        child.sendline("/stop-loop")
        child.expect("cancelled")
        settle(child)
        child.sendeof()
        child.expect(pexpect.EOF)
        child.close()
        status = node.cli("status", loop_id, "--json")
        assert '"cancelled"' in status.stdout, status.stderr
        # --connect reads a bare HOST:PORT as every command does.
        bare = node.url.removeprefix("ws://").rstrip("/")
        other = _spawn(tmp_path / "client", "--connect", bare, "--token-file",
                       str(tmp_path / "state" / "node.token"))  # fmt: skip
        assert "loopactors repl on node " in other.before
        settle(other)
        other.sendeof()
        other.expect(pexpect.EOF)
        other.close()
    finally:
        assert node.terminate() == 0


def test_repl_runs_here_when_the_node_that_wrote_node_url_is_gone(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "node.url").write_text("ws://127.0.0.1:9\n")  # left by a node that was killed
    (state / "node.token").write_text("secret\n")
    child = _spawn(state)
    assert "a node serves" not in child.before
    assert "loopactors repl on" in child.before
    child.sendline("|loop:1| here")
    child.expect(r"started (\S+):")
    child.expect("complete")
    settle(child)
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()


def test_a_plan_driven_loop_s_line_shows_its_tasks() -> None:
    from loopactors.cli._repl import _line
    from loopactors.loops import LoopSpec, LoopState

    spec = LoopSpec(task="work through the plan", rounds=10)
    state = LoopState(loop_id="L1", spec=spec, phase="paused", completed_rounds=2)
    assert "2/10 completed  " in _line(state)
    planned = LoopState(
        loop_id="L1", spec=spec, phase="paused", completed_rounds=2, tasks_done=3, tasks_total=7
    )
    assert "2/10 completed, tasks 3/7  " in _line(planned)
