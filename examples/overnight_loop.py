"""A loop to leave overnight: a plan, a check that decides when it is done, a dollar budget,
and a notification when it ends (docs/overnight.md).

    python examples/overnight_loop.py                 # Claude Code: `claude` on PATH
    python examples/overnight_loop.py codex           # or codex, gemini, aider
    python examples/overnight_loop.py claude DIR      # the project in DIR (a new directory)

It writes a small project with two bugs and a `fix_plan.md` listing them into a git
repository, starts a webhook receiver on 127.0.0.1 (standing in for ntfy, Slack or e-mail),
and runs the CLI as the worker with

- ``plan``: each round is told the next open task of fix_plan.md and ticks it off;
- ``until="python3 -B test_calc.py"``: the loop is complete only once the test passes, whatever
  the agent says; a failing run's output goes into the next round's prompt;
- ``max_cost_usd=2.0``: no round starts once the loop has spent two dollars (for the CLIs
  that report cost, claude and aider; codex and gemini get ``max_tokens`` instead);
- ``notify``: the receiver is told how the loop ended.

It prints each round (status, tasks done, the check, cost), the end, and the notification the
receiver got. The CLI uses its usual settings (for Claude Code, ``ANTHROPIC_API_KEY``, and
``ANTHROPIC_BASE_URL`` for another endpoint). Without the CLI it says how to install it.
"""

from __future__ import annotations

import http.server
import json
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, ClassVar

import trio

from loopactors import open_runtime
from loopactors.errors import WorkerSpecError
from loopactors.loops import RoundDeferred, RoundFinished
from loopactors.workers import parse_worker, worker_kind

CALC = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a + b\n"
TEST = (
    "from calc import add, mul\n\n"
    "assert add(2, 3) == 5, f'add(2, 3) is {add(2, 3)}'\n"
    "assert mul(2, 3) == 6, f'mul(2, 3) is {mul(2, 3)}'\n"
    "print('test passed')\n"
)
PLAN = "# fix plan\n- [ ] fix add in calc.py\n- [ ] fix mul in calc.py\n"
TASK = (
    "|loop:6| Fix calc.py so that `python3 test_calc.py` passes (do not change the test). "
    "Commit each fix."
)


def make_project(root: Path) -> None:
    (root / "calc.py").write_text(CALC)
    (root / "test_calc.py").write_text(TEST)
    (root / "fix_plan.md").write_text(PLAN)
    git = ["git", "-C", str(root), "-c", "user.name=example", "-c", "user.email=example@localhost"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "a project with two bugs"], check=True)


class Receiver(http.server.BaseHTTPRequestHandler):
    """A webhook: keeps what apprise's json:// posts."""

    received: ClassVar[list[dict[str, Any]]] = []
    arrived: ClassVar[threading.Event] = threading.Event()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        Receiver.received.append(json.loads(body))
        Receiver.arrived.set()
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass


def show(event: object) -> None:
    if isinstance(event, RoundDeferred):
        print(f"  round {event.round} deferred: {event.reason}")
    elif isinstance(event, RoundFinished):
        tasks = f"tasks {event.tasks_done}/{event.tasks_total}, " if event.tasks_total else ""
        print(f"round {event.round}: {event.status}, {tasks}${event.cost_usd:.6f}")


async def main(kind: str, where: str | None) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(where) if where else Path(tmp) / "project"
        project.mkdir()
        make_project(project)
        worker = f"{kind}:workspace={project}"
        try:
            parse_worker(worker)  # the binary is looked for here: say how to get it
        except WorkerSpecError as exc:
            print(exc)
            return 0
        # A dollar budget where the CLI reports cost; else a token budget (docs/loops.md).
        known = worker_kind(worker)
        budget = (
            {"max_cost_usd": 2.0}
            if known is None or known.reports_cost
            else {"max_tokens": 2_000_000}
        )
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        hook = f"json://127.0.0.1:{server.server_address[1]}/overnight"
        try:
            async with open_runtime(store="memory", observer=show) as rt:
                started = await rt.start(
                    TASK,
                    worker=worker,
                    plan=str(project / "fix_plan.md"),
                    until="python3 -B test_calc.py",  # -B: see docs/loops.md, "Verified completion"
                    **budget,
                    notify=(hook,),
                    notify_on=("loop_finished", "budget_reached"),
                )
                final = await rt.wait(started.loop_id)
                rounds = await rt.history(started.loop_id)
            for record in rounds:
                check = getattr(record, "check", None)
                if check is not None:
                    verdict = (
                        "passed"
                        if check.exit_code == 0
                        else f"failed ({check.error or f'exit {check.exit_code}'})"
                    )
                    print(f"round {record.round} check: {verdict}")
            print(f"loop {final.phase}: {final.reason or ''} (total ${final.cost_usd:.4f})")
            # The runtime tries what is due before it closes; the receiver has it by now.
            await trio.to_thread.run_sync(Receiver.arrived.wait, 30.0)
            for note in Receiver.received:
                print(f"notified: {note['title']}")
        finally:
            server.shutdown()
            server.server_close()
        log = await trio.run_process(
            ["git", "-C", str(project), "log", "--format=%s"], capture_stdout=True
        )
        print(f"commits: {len(log.stdout.splitlines())}")
        print(f"plan: {(project / 'fix_plan.md').read_text().count('- [x]')}/2 ticked")
    return 0


if __name__ == "__main__":
    chosen = sys.argv[1] if len(sys.argv) > 1 else "claude"
    if shutil.which("git") is None:
        sys.exit("this example needs git")
    sys.exit(trio.run(main, chosen, sys.argv[2] if len(sys.argv) > 2 else None))
