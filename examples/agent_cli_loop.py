"""A loop of Claude Code rounds (or another coding-agent CLI) that fixes a failing test.

    python examples/agent_cli_loop.py                 # Claude Code: `claude` on PATH
    python examples/agent_cli_loop.py codex           # or codex, gemini, aider
    python examples/agent_cli_loop.py claude DIR      # the project in DIR (a new directory)

It writes a small project with a bug into a git repository (a temporary one, or DIR) and runs
``|loop:3 objective="python3 test_calc.py passes"| ...`` with that CLI as the worker, in
``inherit`` mode (each round resumes the agent's own session). It prints each round (status,
files changed, commits, tokens, cost, the tool calls the agent made) and whether the test
passes at the end. The CLI uses its usual settings: for Claude Code, ``ANTHROPIC_API_KEY``
(and ``ANTHROPIC_BASE_URL`` to use another endpoint). Without the CLI it says how to install it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import trio

from loopactors import open_runtime
from loopactors.errors import WorkerSpecError
from loopactors.loops import AgentStep, RoundDeferred, RoundFinished
from loopactors.workers import parse_worker

CALC = "def add(a, b):\n    return a - b\n"
TEST = "from calc import add\n\nassert add(2, 3) == 5, add(2, 3)\nprint('test passed')\n"
TASK = (
    '|loop:3 objective="python3 test_calc.py passes"| make `python3 test_calc.py` pass by '
    "fixing calc.py (do not change the test); commit the fix"
)


def make_project(root: Path) -> None:
    (root / "calc.py").write_text(CALC)
    (root / "test_calc.py").write_text(TEST)
    git = ["git", "-C", str(root), "-c", "user.name=example", "-c", "user.email=example@localhost"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "a project with a bug"], check=True)


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

        def show(event: object) -> None:
            if isinstance(event, AgentStep):
                print(f"  round {event.round}: {event.tool} {event.detail}")
            elif isinstance(event, RoundDeferred):
                print(f"  round {event.round} deferred: {event.reason}")
            elif isinstance(event, RoundFinished):
                print(
                    f"round {event.round}: {event.status}, {event.files_changed} files changed, "
                    f"{event.commits} commits, {event.tokens} tokens, ${event.cost_usd:.4f}"
                )

        async with open_runtime(store="memory", observer=show) as rt:
            started = await rt.start(TASK, worker=worker)
            final = await rt.wait(started.loop_id)
        print(f"loop {final.phase}: {final.reason or ''} (total ${final.cost_usd:.4f})")
        test = await trio.run_process(
            [sys.executable, "test_calc.py"], cwd=project, capture_stdout=True, check=False
        )
        print("test passes" if test.returncode == 0 else "test still fails")
        log = await trio.run_process(
            ["git", "-C", str(project), "log", "--format=%s"], capture_stdout=True
        )
        print(f"commits: {len(log.stdout.splitlines())}")
    return 0


if __name__ == "__main__":
    chosen = sys.argv[1] if len(sys.argv) > 1 else "claude"
    if shutil.which("git") is None:
        sys.exit("this example needs git")
    sys.exit(trio.run(main, chosen, sys.argv[2] if len(sys.argv) > 2 else None))
