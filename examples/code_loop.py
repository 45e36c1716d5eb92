"""A code loop on a toy repository, with command workers: three rounds, gated by validation
and review, landing on a candidate branch; main stays as it was.

    python examples/code_loop.py

The executor and the reviewer are small Python scripts standing in for coding agents' command
lines (anything that runs as ``command:ARGV`` plugs in the same way). The executor fixes a bug
in round 1, documents the fix in round 2, and leaves a debug print in round 3, which the
reviewer rejects. The same loop from a shell:

    loopactors code init --slug fix-add --objective "..." --executor "command:..." \\
        --reviewer "command:..." --validate "python check.py" --max-rounds 3 \\
        --attendance unattended
    loopactors code run --slug fix-add --until-gate
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import trio

from loopactors import open_runtime
from loopactors.codeloop import CodeRoundFinished, open_code_loop

EXECUTOR = """import os, subprocess
round = os.environ["LOOPACTORS_ROUND"]
if round == "1":
    open("calc.py", "w").write("def add(a, b):\\n    return a + b\\n")
elif round == "2":
    open("README", "w").write("add(a, b) returns the sum.\\n")
else:
    open("calc.py", "a").write("print('debug')\\n")
subprocess.run(["git", "add", "-A"], check=True)
subprocess.run(["git", "commit", "-qm", "round " + round], check=True)
"""

REVIEWER = """import sys
added = [line for line in sys.stdin.read().splitlines() if line.startswith("+")]
if any("print(" in line for line in added):
    print("VERDICT: reject")
    print("debug output left in")
else:
    print("VERDICT: approve")
    print("small and covered by check.py")
"""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout.strip()


def toy_repository(base: Path) -> Path:
    repo = base / "toy"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "loop@example.invalid")
    git(repo, "config", "user.name", "Code Loop Example")
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / "check.py").write_text("import calc, sys\nsys.exit(calc.add(2, 3) != 5)\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "add() with a bug")
    return repo


def command(script: Path) -> str:
    return "command:" + shlex.join([sys.executable, str(script)])


async def main(base: Path) -> list[str]:
    repo = toy_repository(base)
    (base / "executor.py").write_text(EXECUTOR)
    (base / "reviewer.py").write_text(REVIEWER)
    loop = await open_code_loop("fix-add", path=repo)
    state = await loop.init(
        objective="add() must return the sum of its arguments",
        executor=command(base / "executor.py"),
        reviewer=command(base / "reviewer.py"),
        validate=shlex.join([sys.executable, "check.py"]),
        max_rounds=3,
        attendance="unattended",
    )
    lines = [f"init: {state.status}, candidate {state.candidate_branch}"]
    async with open_runtime(store="memory") as runtime:
        state = await loop.run(runtime, rounds=None)  # until a gate stops it
    lines += [
        f"round {event.round}: {event.reason}"
        for event in loop.ledger.read_events()
        if isinstance(event, CodeRoundFinished)
    ]
    lines.append(f"loop: {state.status} ({state.active_gate}: {state.reason})")
    for branch in ("main", state.candidate_branch):
        source = git(repo, "show", f"{branch}:calc.py").splitlines()[1].strip()
        lines.append(f"{branch}: {source}")
    status = await loop.status()
    lines.append(f"kept for inspection: {', '.join(status.rejected_branches)}")
    lines.append(loop.ledger.handoff_path.read_text().splitlines()[-1])
    return lines


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        for line in trio.run(main, Path(tmp)):
            print(line)
