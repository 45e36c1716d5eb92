"""A loop of agent rounds that fixes a failing test, on any OpenAI-compatible model server.

    LOOPACTORS_LLM_BASE_URL=http://localhost:11434/v1 LOOPACTORS_LLM_MODEL=qwen2.5-coder \\
        python examples/agent_loop.py

Without those two variables it only says how to start a local model server. With them, it
writes a small project with a bug into a temporary directory, runs
``|loop:2| make the test pass`` on the ``agent`` worker (inherit mode: round 2 starts from
round 1's answer), prints each round and whether the test passes at the end.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import trio

from loopactors import open_runtime

HOW_TO = """\
Set LOOPACTORS_LLM_BASE_URL and LOOPACTORS_LLM_MODEL to an OpenAI-compatible endpoint, e.g.

  Ollama:     ollama pull qwen2.5-coder && ollama serve
              LOOPACTORS_LLM_BASE_URL=http://localhost:11434/v1 LOOPACTORS_LLM_MODEL=qwen2.5-coder
  llama.cpp:  llama-server -m model.gguf --jinja --port 8080
              LOOPACTORS_LLM_BASE_URL=http://localhost:8080/v1 LOOPACTORS_LLM_MODEL=local
  vLLM:       vllm serve Qwen/Qwen2.5-Coder-7B-Instruct --enable-auto-tool-choice \\
                --tool-call-parser hermes
              LOOPACTORS_LLM_BASE_URL=http://localhost:8000/v1 \\
              LOOPACTORS_LLM_MODEL=Qwen/Qwen2.5-Coder-7B-Instruct

(and LOOPACTORS_LLM_API_KEY for a hosted endpoint), then run this example again."""

CALC = "def add(a, b):\n    return a - b\n"
TEST = "from calc import add\n\nassert add(2, 3) == 5, add(2, 3)\nprint('test passed')\n"
TASK = "|loop:2| make `python3 test_calc.py` pass by fixing calc.py (do not change the test)"


def tests_pass(workspace: Path) -> bool:
    run = subprocess.run(
        [sys.executable, "test_calc.py"], cwd=workspace, capture_output=True, check=False
    )
    return run.returncode == 0


async def main(workspace: Path) -> None:
    (workspace / "calc.py").write_text(CALC)
    (workspace / "test_calc.py").write_text(TEST)
    worker = f"agent:workspace={workspace},max_iterations=30"
    async with open_runtime(store="memory") as rt:
        started = await rt.start(TASK, worker=worker)
        final = await rt.wait(started.loop_id)
        for record in await rt.history(started.loop_id):
            answer = (record.output or record.error or "").strip().splitlines() or [""]
            print(f"round {record.round}: {record.status}, {record.tokens} tokens: {answer[0]}")
    print(f"loop {final.phase}; test passes: {'yes' if tests_pass(workspace) else 'no'}")


if __name__ == "__main__":
    if not (os.environ.get("LOOPACTORS_LLM_BASE_URL") and os.environ.get("LOOPACTORS_LLM_MODEL")):
        print(HOW_TO)
        sys.exit(0)
    with tempfile.TemporaryDirectory() as directory:
        trio.run(main, Path(directory))
