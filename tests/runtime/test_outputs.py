"""What is kept of a round's output: the configured bytes, the rest said (and kept aside)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from loopactors.runtime import RuntimeConfig, open_runtime
from loopactors.runtime._outputs import cap_output
from tests.gateway.test_cli_node import NodeProcess


def test_cap_output_keeps_the_end_in_whole_characters() -> None:
    assert cap_output("short", 10) == "short"
    text = "a" + "é" * 10  # 21 bytes
    cut = cap_output(text, 5)
    assert cut == "[output cut: the first 16 of 21 bytes were dropped (max_output_bytes = 5)]\néé"
    assert cap_output(text, 21) == text


async def test_a_long_output_is_cut_and_kept_whole_aside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HUGE_BYTES", str(3_000_000))
    config = RuntimeConfig(
        state_dir=tmp_path,
        worker="python:tests.runtime.disk_fns:huge",
        max_output_bytes=100_000,
        keep_full_outputs=True,
    )
    async with open_runtime(config) as rt:
        handle = await rt.start("|loop:2| talk a lot")
        state = await handle.wait()
        rounds = await rt.history(handle.loop_id)
    whole = tmp_path / "outputs" / handle.loop_id / "1.txt"
    for record in rounds:
        first, _, rest = record.output.partition("\n")
        assert first == (
            "[output cut: the first 2900000 of 3000000 bytes were dropped "
            f"(max_output_bytes = 100000); whole output in {whole.parent / f'{record.round}.txt'}]"
        )
        assert rest == "é" * 50_000
    assert state.last_output == rounds[-1].output
    assert whole.read_text(encoding="utf-8").startswith("start\néé")
    assert len(whole.read_bytes()) == 3_000_000


def test_a_70_mb_output_over_the_wire(tmp_path: Path) -> None:
    # A 70 MB output once broke `run --connect` and every later `status --connect` (a
    # frame over the client's 64 MiB cap). ~10 s: a node process and 70 MB through a pipe.
    print_70mb = shlex.join(
        [sys.executable, "-c", "import sys; sys.stdout.write('y' * 70_000_000)"]
    )
    node = NodeProcess(tmp_path, "--worker", f"command:{print_70mb}")
    try:
        run = node.cli("run", "|loop:1| big", "--json")
        assert run.returncode == 0, run.stderr
        assert json.loads(run.stdout.splitlines()[-1])["phase"] == "complete"
        status = node.cli("status", "--json")
        assert status.returncode == 0, status.stderr
        (loop,) = json.loads(status.stdout)
        assert len(loop["last_output"]) == 200  # a head, not the output
        assert node.terminate() == 0
    finally:
        if node.proc.poll() is None:
            node.proc.kill()
            node.proc.wait()
