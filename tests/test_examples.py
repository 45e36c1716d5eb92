"""Every example in examples/ runs, as a user would run it."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hang import HANG

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(name: str) -> str:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        capture_output=True,
        text=True,
        timeout=HANG,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_supervised_counter() -> None:
    assert run_example("supervised_counter.py").splitlines() == [
        "total: 6",
        "refused: amount must be >= 0, got -5",
        "crashed: OverflowError('counter overflow')",
        "after restart: 0",
        "restarts: 1",
    ]


ROOT = EXAMPLES.parent


def readme_commands() -> list[str]:
    """The README's first code block: its two commands, after its title and what they need."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert lines[0] == "# loopactors", "the README opens with its title"
    start = lines.index("```sh")
    assert lines[start + 3] == "```", "the first code block holds the two commands alone"
    before = " ".join(lines[1:start])
    for needed in ("Python 3.11 or later", "a clone of this repository", "virtual", "venv"):
        assert needed in before, f"the prerequisites come before the commands: {needed}"
    assert "```" not in before
    return lines[start + 1 : start + 3]


def test_readme_opens_with_the_two_commands_that_ci_and_just_run() -> None:
    demo, tests = readme_commands()
    assert demo.startswith("pip install -e . && loopactors")
    assert tests == "pip install -e '.[dev]' && pytest"
    assert tests in (ROOT / ".ci" / "run").read_text().splitlines()
    justfile = (ROOT / "justfile").read_text()
    assert f"    {demo}\n" in justfile
    assert f"    {tests}\n" in justfile
    # `just` is one of the dev extras: the README says so where it names `just`.
    text = " ".join((ROOT / "README.md").read_text().split())
    assert "`just` itself comes with the `[dev]` extra" in text
    assert "rust-just" in (ROOT / "pyproject.toml").read_text()


def test_readme_quick_start_runs() -> None:
    text = (ROOT / "README.md").read_text()
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("complete ['round 1 of 3: birch', ")


@pytest.mark.skipif(
    shutil.which("redis-server") is None,
    reason="redis-server is not installed (CI installs it: apt-get install redis-server)",
)
def test_scale_out() -> None:
    lines = run_example("scale_out.py").splitlines()
    assert lines[:4] == [f"job {i}: complete, 3 rounds" for i in range(4)]
    # Four loops at once on two workers of two slots each: both took rounds.
    assert lines[4] == "rounds ran on: worker-a, worker-b"


def test_embedded_loops() -> None:
    lines = run_example("embedded_loops.py").splitlines()
    assert lines[:5] == [
        "writer: [loop-progress round 1/4 completed, duration=0.0s]",
        "writer: [loop-progress round 2/4 completed, duration=0.0s]",
        "writer: [loop-progress round 3/4 completed, duration=0.0s]",
        "writer: [loop-progress round 4/4 completed, duration=0.0s]",
        "writer finished: complete, last output '+1 +2 +3 +4'",
    ]
    assert lines[5].startswith("slow loop paused after ")
    assert lines[6] == "slow loop stopped: cancelled"
    assert lines[7].startswith("slow loop rounds: 1:completed")
    assert lines[7].endswith(":cancelled")


def test_retention() -> None:
    assert run_example("retention.py").splitlines() == [
        "dry run: would remove 2 loops, 4 rounds, 12 events",
        "prune: removed 2 loops, 4 rounds, 12 events",
        "a pruned loop's history: not found",
        "left: ['paused']",
    ]


def test_agent_loop_explains_how_without_a_model_server() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPACTORS_LLM_")}
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "agent_loop.py")],
        capture_output=True, text=True, timeout=HANG, check=False, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Set LOOPACTORS_LLM_BASE_URL and LOOPACTORS_LLM_MODEL")


def test_agent_loop_against_a_scripted_model_server() -> None:
    from tests.agent.chat_server import ChatServer, completion

    fix = {"path": "calc.py", "old_string": "a - b", "new_string": "a + b"}
    run_test = {"command": "python3 test_calc.py"}
    replies = [
        completion(calls=[("r", "read", {"path": "calc.py"})], prompt_tokens=200),
        completion(calls=[("e", "edit", fix)], prompt_tokens=300),
        completion(calls=[("b", "bash", run_test)], prompt_tokens=400),
        completion("Fixed add: it subtracted.\nThe test passes now.", prompt_tokens=500),
        completion(calls=[("b2", "bash", run_test)], prompt_tokens=200),
        completion("Checked: the test still passes.", prompt_tokens=300),
    ]
    with ChatServer(replies) as server:
        env = {**os.environ, "LOOPACTORS_LLM_BASE_URL": server.base_url}
        env["LOOPACTORS_LLM_MODEL"] = "scripted"
        result = subprocess.run(
            [sys.executable, str(EXAMPLES / "agent_loop.py")],
            capture_output=True, text=True, timeout=HANG, check=False, env=env,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "round 1: completed, 1420 tokens: Fixed add: it subtracted.",
        "round 2: completed, 510 tokens: Checked: the test still passes.",
        "loop complete; test passes: yes",
    ]
    assert server.requests[0]["model"] == "scripted"


def test_node_and_client() -> None:
    lines = run_example("node_and_client.py").splitlines()
    assert lines[0].startswith("connected to node ")
    assert "[loop-progress round 3/3 completed" in "\n".join(lines)
    assert lines[-3] == "[loop-progress loop complete]"
    assert lines[-2].startswith("outputs: ['round 1 of 3")
    assert lines[-1] == "watched 3 more loops to their end"


def test_code_loop() -> None:
    assert run_example("code_loop.py").splitlines() == [
        "init: ready, candidate loop/fix-add/candidate",
        "round 1: merged into the candidate",
        "round 2: merged into the candidate",
        "round 3: review rejected: debug output left in",
        "loop: waiting_review (max_rounds: 3 of 3 rounds are done)",
        "main: return a - b",
        "loop/fix-add/candidate: return a + b",
        "kept for inspection: loop/fix-add/r003",
        "Not pushed, not merged into main.",
    ]


def test_stress_check() -> None:
    lines = run_example("stress_check.py").splitlines()
    assert lines[0].startswith("50 loops: {")
    assert "crashes injected" in lines[1]
    assert "ok: no loop left live" in lines
    assert "ok: every complete loop has rounds 1..M, each once" in lines
    assert not any(line.startswith("FAIL") for line in lines)


def test_agent_cli_loop_says_how_to_install_a_missing_cli() -> None:
    env = {**os.environ, "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "agent_cli_loop.py")],
        capture_output=True, text=True, timeout=HANG, check=False, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "npm install -g @anthropic-ai/claude-code" in result.stdout


def test_agent_cli_loop_with_the_real_claude_code_against_a_fake_endpoint(
    tmp_path: Path,
) -> None:
    from tests.agent_clis._fakes import AnthropicFake, Turn, cli_binary, quiet_env

    claude = cli_binary("claude")
    project = tmp_path / "project"
    calc = str(project / "calc.py")
    commit = "python3 test_calc.py && git -c user.name=a -c user.email=a@a commit -qam fix"
    turns = [
        Turn(tools=[("Read", {"file_path": calc})]),
        Turn(tools=[("Edit", {"file_path": calc, "old_string": "a - b", "new_string": "a + b"})]),
        Turn(tools=[("Bash", {"command": commit})]),
        Turn(text="Fixed add and committed.\n<promise>DONE</promise>"),
    ]
    fake = AnthropicFake(turns)
    with fake.server.running():
        env = quiet_env(
            tmp_path / "home",
            PATH=f"{claude.parent}:{os.environ['PATH']}",
            ANTHROPIC_BASE_URL=fake.url,
            ANTHROPIC_API_KEY="sk-ant-test-not-a-real-key",
            CLAUDE_CODE_MAX_RETRIES="0",
        )
        result = subprocess.run(
            [sys.executable, str(EXAMPLES / "agent_cli_loop.py"), "claude", str(project)],
            capture_output=True, text=True, timeout=HANG, check=False, env=env,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("  round 1: Read ")
    assert lines[1].startswith("  round 1: Edit ")
    assert lines[2].startswith("  round 1: Bash python3 test_calc.py")
    # calc.py, and what running the test left (its __pycache__), if Python wrote one
    assert re.match(
        r"round 1: completed, [12] files changed, 1 commits, \d+ tokens, \$0\.", lines[3]
    )
    assert lines[-3].startswith("loop complete: objective met in round 1 (total $")
    assert lines[-2:] == ["test passes", "commits: 2"]


def quick_start_line(starting: str) -> list[str]:
    """A quick-start command of the README (continuation lines joined), as argv."""
    text = (ROOT / "README.md").read_text().split("## Quick start", 1)[1]
    block = text.split("```sh\n", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    line = next(line for line in block.splitlines() if line.startswith(starting))
    return shlex.split(line.partition("  #")[0])


def test_my_agent_runs_the_readme_s_command_worker_lines(tmp_path: Path) -> None:
    argv = quick_start_line('loopactors run "|loop:3| tighten')
    assert "command:examples/my-agent.sh" in argv
    state = ["--state", str(tmp_path / "state"), "--json"]
    run = subprocess.run(
        [sys.executable, "-m", *argv, *state],
        cwd=ROOT, capture_output=True, text=True, timeout=HANG, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    events = [json.loads(line) for line in run.stdout.splitlines()]
    assert events[-1]["phase"] == "complete"
    assert events[-1]["completed_rounds"] == 3
    loop_id = events[-1]["loop_id"]
    history = subprocess.run(
        [sys.executable, "-m", "loopactors", "history", loop_id, *state],
        cwd=ROOT, capture_output=True, text=True, timeout=HANG, check=False,
    )  # fmt: skip
    outputs = [r["output"] for r in json.loads(history.stdout)["rounds"]]
    assert outputs[0] == ("round 1 of 3 (inherit mode) on: tighten the wording of README.md\n")
    assert outputs[1].startswith("round 2 of 3 (inherit mode) on: tighten the wording")
    assert "building on the " in outputs[1]

    # The objective line: the check passes, so the agent reports the objective met.
    setting, *objective = quick_start_line("MY_AGENT_CHECK=")
    assert setting == "MY_AGENT_CHECK=pytest -q"
    # A check that fails: the rounds go on until the stand-in's output stops changing.
    for given, phase, rounds in (("true", "complete", 1), ("false", "escalated", 5)):
        env = {**os.environ, "MY_AGENT_CHECK": given}
        done = subprocess.run(
            [sys.executable, "-m", *objective, *state],
            cwd=ROOT, capture_output=True, text=True, timeout=HANG, check=False, env=env,
        )  # fmt: skip
        end = json.loads(done.stdout.splitlines()[-1])
        assert (end["phase"], end["completed_rounds"]) == (phase, rounds), done.stderr
        if given == "true":
            assert end["reason"] == "objective met in round 1"


def test_overnight_loop_says_how_to_install_a_missing_cli() -> None:
    env = {**os.environ, "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "overnight_loop.py")],
        capture_output=True, text=True, timeout=HANG, check=False, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "npm install -g @anthropic-ai/claude-code" in result.stdout


def test_overnight_loop_with_the_real_claude_code_against_a_fake_endpoint(
    tmp_path: Path,
) -> None:
    """issue 23's end to end: a claude loop with a plan, an until check, a dollar budget and a
    notification edits a git workspace until its check passes, each round costing what it
    cost, and a receiver on loopback is told it ended."""
    from tests.agent_clis._fakes import (
        SONNET_PRICES,
        AnthropicFake,
        Turn,
        cli_binary,
        quiet_env,
    )

    claude = cli_binary("claude")
    project = tmp_path / "project"
    calc, plan = str(project / "calc.py"), str(project / "fix_plan.md")
    commit = "git -c user.name=a -c user.email=a@a commit -qam"

    def fix(old: str, new: str, task: str) -> list[Turn]:
        return [
            Turn(tools=[("Read", {"file_path": calc}), ("Read", {"file_path": plan})]),
            Turn(tools=[("Edit", {"file_path": calc, "old_string": old, "new_string": new})]),
            Turn(
                tools=[
                    (
                        "Edit",
                        {"file_path": plan, "old_string": f"- [ ] {task}",
                         "new_string": f"- [x] {task}"},
                    )
                ]
            ),
            Turn(tools=[("Bash", {"command": f"{commit} '{task}'"})]),
            Turn(text=f"Done: {task}."),
        ]  # fmt: skip

    turns = [
        *fix("return a - b", "return a + b", "fix add in calc.py"),
        *fix("mul(a, b):\n    return a + b", "mul(a, b):\n    return a * b", "fix mul in calc.py"),
    ]
    fake = AnthropicFake(turns)
    with fake.server.running():
        env = quiet_env(
            tmp_path / "home",
            PATH=f"{claude.parent}:{os.environ['PATH']}",
            ANTHROPIC_BASE_URL=fake.url,
            ANTHROPIC_API_KEY="sk-ant-test-not-a-real-key",
            ANTHROPIC_MODEL="claude-sonnet-4-5",
            CLAUDE_CODE_MAX_RETRIES="0",
        )
        result = subprocess.run(
            [sys.executable, str(EXAMPLES / "overnight_loop.py"), "claude", str(project)],
            capture_output=True, text=True, timeout=HANG, check=False, env=env,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    rounds = [line for line in lines if re.match(r"round \d+: completed", line)]
    # Seen once in a loaded CI run: four rounds, the check failing after round 2. What the
    # CLI asked the fake (each conversation request takes the next scripted turn) says why.
    asked = [len(messages) for messages in fake.conversations]
    tasks = [r.split(",")[1].strip() for r in rounds]
    assert tasks == ["tasks 1/2", "tasks 2/2"], (result.stdout, asked)
    assert "round 1 check: failed (exit 1)" in lines
    assert "round 2 check: passed" in lines
    assert any(line.startswith("loop complete: ") for line in lines)
    assert any(re.fullmatch(r"notified: loop \S+ complete", line) for line in lines)
    assert lines[-2:] == ["commits: 3", "plan: 2/2 ticked"]
    # Each round's cost is its own: together they are what the fake billed, priced.
    costs = [float(r.rsplit("$", 1)[1]) for r in rounds]
    billed = sum(
        sum(SONNET_PRICES[k] * usage.get(k, 0) for k in SONNET_PRICES)
        for _, _, usage in fake.billed
    )
    assert all(cost > 0 for cost in costs)
    assert abs(sum(costs) - billed) < 1e-5
