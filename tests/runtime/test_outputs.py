"""What is kept of a round's output: the configured bytes, the rest said (and kept aside)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import ClassVar

import pytest

from loopactors.runtime import RuntimeConfig, open_runtime
from loopactors.runtime._outputs import cap_output
from loopactors.workers import _command
from loopactors.workers._output import OutputTail
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
        handle = rt.handle(await rt.start("|loop:2| talk a lot"))
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


# 20 MB of numbered lines, then the tokens line: what is kept is checkable byte for byte.
LINES = 2_500_000
PRINT_20MB = shlex.join(
    [
        sys.executable,
        "-c",
        "import sys; w = sys.stdout.buffer.write\n"
        f"for i in range(0, {LINES}, 100_000):\n"
        "    w(b''.join(b'%07d\\n' % n for n in range(i, i + 100_000)))\n"
        'w(b\'{"loopactors": {"tokens": 7}}\\n\')',
    ]
)


class _SpyTail(OutputTail):
    """Records the most bytes the worker ever held of the output."""

    held: ClassVar[list[int]] = []

    def feed(self, chunk: bytes | bytearray) -> None:
        super().feed(chunk)
        if self.limit == LIMIT:
            self.held.append(len(self.kept))


LIMIT = 100_000


async def test_a_command_worker_holds_only_the_kept_tail_while_its_output_streams(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: the whole 20 MB was collected in memory and cut when the round ended.
    monkeypatch.setattr(_command, "OutputTail", _SpyTail)
    _SpyTail.held.clear()
    config = RuntimeConfig(
        state_dir=tmp_path,
        worker=f"command:{PRINT_20MB}",
        max_output_bytes=LIMIT,
        keep_full_outputs=True,
    )
    async with open_runtime(config) as rt:
        handle = rt.handle(await rt.start("|loop:1| talk a lot"))
        state = await handle.wait()
        (record,) = await rt.history(handle.loop_id)
    assert state.phase == "complete"
    whole = tmp_path / "outputs" / handle.loop_id / "1.txt"
    total = LINES * 8 + len('{"loopactors": {"tokens": 7}}\n')
    assert len(_SpyTail.held) > 100  # fed in many chunks
    assert max(_SpyTail.held) <= LIMIT
    first, _, rest = record.output.partition("\n")
    assert first == (
        f"[output cut: the first {total - LIMIT} of {total} bytes were dropped "
        f"(max_output_bytes = {LIMIT}); whole output in {whole}]"
    )
    # The tail, whole lines but the first, and the tokens line taken off it.
    lines = rest.splitlines()
    assert lines[-1] == f"{LINES - 1:07d}"
    assert lines[1:] == [f"{n:07d}" for n in range(LINES - len(lines) + 1, LINES)]
    assert len(rest.encode()) <= LIMIT
    assert record.tokens == 7
    data = whole.read_bytes()
    assert len(data) == total
    assert data.startswith(b"0000000\n0000001\n")
    assert data.endswith(b'2499999\n{"loopactors": {"tokens": 7}}\n')


async def test_a_cut_output_without_keep_full_outputs_names_no_file(tmp_path: Path) -> None:
    config = RuntimeConfig(
        state_dir=tmp_path, worker=f"command:{PRINT_20MB}", max_output_bytes=LIMIT
    )
    async with open_runtime(config) as rt:
        handle = rt.handle(await rt.start("|loop:1| talk a lot"))
        await handle.wait()
        (record,) = await rt.history(handle.loop_id)
    first, _, rest = record.output.partition("\n")
    assert first.endswith(f"bytes were dropped (max_output_bytes = {LIMIT})]")
    assert rest.endswith(f"{LINES - 1:07d}\n")
    assert not (tmp_path / "outputs").exists()


def test_output_tail_keeps_whole_characters_and_says_what_it_dropped(tmp_path: Path) -> None:
    tail = OutputTail(5, whole_at=tmp_path / "o" / "1.txt")
    for piece in ("a", "é" * 5, "é" * 5):  # 21 bytes, fed cut mid-character
        data = piece.encode()
        tail.feed(data[:1])
        tail.feed(data[1:])
    assert len(tail.kept) == 5
    text = tail.text()
    assert text == cap_output("a" + "é" * 10, 5, kept_at=tmp_path / "o" / "1.txt")
    assert (tmp_path / "o" / "1.txt").read_text() == "a" + "é" * 10
    small = OutputTail(5, whole_at=tmp_path / "o" / "2.txt")
    small.feed(b"abc")
    assert small.text() == "abc"
    assert not (tmp_path / "o" / "2.txt").exists()  # only an output that was cut is kept


def test_a_cut_output_is_not_cut_again() -> None:
    cut = cap_output("x" * 50, 10)
    assert cap_output(cut, 10) == cut
