from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path

import pytest
import trio

from loopactors.errors import WorkerSpecError
from loopactors.workers import (
    CommandWorker,
    RoundResult,
    _cgroup,
    kill_worker_groups,
    parse_worker,
)
from loopactors.workers._command import split_tokens_line
from tests.hang import HANG, PROMPT

from .sample_fns import make_request

PY = sys.executable


def command(argv: list[str], *, kill_grace: float = 5.0) -> CommandWorker:
    worker = parse_worker("command:" + shlex.join(argv), kill_grace=kill_grace)
    assert isinstance(worker, CommandWorker)
    return worker


async def test_prompt_on_stdin_and_stdout_is_output() -> None:
    prompt = "héllo ✓\nsecond line"
    result = await command(["cat"]).run(make_request(prompt=prompt), None)
    assert result == RoundResult(status="completed", output=prompt)


async def test_environment() -> None:
    script = (
        "import json, os; print(json.dumps({k: v for k, v in os.environ.items()"
        " if k.startswith(('LOOPACTORS_', 'HOME'))}))"
    )
    request = make_request(loop_id="abc", round=2, rounds=7, mode="inherit")
    result = await command([PY, "-c", script]).run(request, None)
    env = json.loads(result.output)
    assert env.pop("HOME") == os.environ["HOME"]  # the parent's environment is kept
    assert env == {
        "LOOPACTORS_LOOP_ID": "abc",
        "LOOPACTORS_ROUND": "2",
        "LOOPACTORS_ROUNDS": "7",
        "LOOPACTORS_MODE": "inherit",
    }


async def test_no_shell() -> None:
    result = await command(["printf", "%s", "$HOME; echo hi"]).run(make_request(), None)
    assert result.output == "$HOME; echo hi"


async def test_non_zero_exit_has_stderr_tail() -> None:
    script = "import sys; sys.stderr.write('x' * 3000 + 'END\\n'); print('partial'); sys.exit(3)"
    result = await command([PY, "-c", script]).run(make_request(), None)
    assert result.status == "failed"
    assert result.output == "partial\n"
    assert result.error == "exit code 3: " + ("x" * 3000 + "END")[-2000:]


async def test_non_zero_exit_without_stderr() -> None:
    result = await command(["sh", "-c", "exit 4"]).run(make_request(), None)
    assert result == RoundResult(status="failed", error="exit code 4")


async def test_tokens_line_is_removed() -> None:
    script = """printf 'hello\\nworld\\n{"loopactors": {"tokens": 12}}\\n'"""
    result = await command(["sh", "-c", script]).run(make_request(), None)
    assert result == RoundResult(status="completed", output="hello\nworld\n", tokens=12)


async def test_tokens_reported_on_failure() -> None:
    script = """echo oops; echo '{"loopactors":{"tokens":3}}'; exit 1"""
    result = await command(["sh", "-c", script]).run(make_request(), None)
    assert result == RoundResult(status="failed", output="oops\n", error="exit code 1", tokens=3)


@pytest.mark.parametrize(
    ("stdout", "expected"),
    [
        ('{"loopactors": {"tokens": 5}}', ("", 5, False)),
        ('out\n{"loopactors": {"tokens": 5}}', ("out\n", 5, False)),
        ('out\n{"loopactors": {"tokens": 5}}\r\n', ("out\n", 5, False)),
        ('out\n{"loopactors": {"tokens": 5, "done": true}}', ("out\n", 5, True)),
        ('out\n{"loopactors": {"done": true}}', ("out\n", 0, True)),
        ('{"loopactors": {"tokens": 5}}\nafter\n', None),  # not the last line
        ('out\n{"loopactors": {"tokens": -1}}\n', None),
        ('out\n{"loopactors": {"tokens": 1.5}}\n', None),
        ('out\n{"loopactors": {"tokens": "5"}}\n', None),
        ('out\n{"loopactors": {"done": "yes"}}\n', None),
        ('out\n{"loopactors": {"tokens": 5, "cost": 1}}\n', None),
        ('out\n{"loopactors": {"tokens": 5}, "x": 1}\n', None),
        ('out\n{"loopactors": {"tokens": 5}\n', None),
        ("plain output\n", None),
        ("", None),
    ],
)
def test_split_tokens_line(stdout: str, expected: tuple[str, int, bool] | None) -> None:
    assert split_tokens_line(stdout) == (expected or (stdout, 0, False))


async def test_undecodable_output_is_replaced() -> None:
    result = await command(["printf", "a\\377b"]).run(make_request(), None)
    assert result.output == "a\ufffdb"


def test_executable_is_resolved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "agent.sh"
    script.write_text("#!/bin/sh\ncat\n")
    script.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    worker = parse_worker("command:./agent.sh --flag 'two words'")
    assert isinstance(worker, CommandWorker)
    assert worker.argv == ("./agent.sh", "--flag", "two words")
    assert worker.executable == str(script)
    assert parse_worker("command:sh").executable.endswith("/sh")  # type: ignore[attr-defined]


async def test_program_gone_after_parse(tmp_path: Path) -> None:
    script = tmp_path / "agent.sh"
    script.write_text("#!/bin/sh\ncat\n")
    script.chmod(0o755)
    worker = command([str(script)])
    script.unlink()
    result = await worker.run(make_request(), None)
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.startswith(f"cannot run {script}: ")


def test_rejections(tmp_path: Path) -> None:
    not_executable = tmp_path / "data.txt"
    not_executable.write_text("x")
    cases = [
        ("command", r"needs a program to run"),
        ("command:", r"needs a program to run"),
        ("command:   ", r"needs a program to run"),
        ("command:cat 'unclosed", r"cannot be split: No closing quotation"),
        ("command:no-such-program-0x1f --x", r"executable 'no-such-program-0x1f' not found"),
        (f"command:{not_executable}", r"not found: it must be on PATH or be the path of an exec"),
        (f"command:{tmp_path}", r"not found"),
    ]
    for spec, message in cases:
        with pytest.raises(WorkerSpecError, match=message):
            parse_worker(spec)


@pytest.mark.parametrize("grace", [-1.0, float("nan"), float("inf")])
def test_bad_kill_grace(grace: float) -> None:
    with pytest.raises(WorkerSpecError, match="kill_grace must be seconds >= 0"):
        parse_worker("command:cat", kill_grace=grace)


# --- cancellation (real time: the grace period is measured against real processes) ---


def _written_pids(path: Path) -> list[int] | None:
    if not (path.exists() and (text := path.read_text()).endswith("\n")):
        return None
    return [int(word) for word in text.split()]


async def _read_pids(path: Path) -> list[int]:
    """Wait until a script has written its pids (and so has set its traps)."""
    with trio.fail_after(HANG):
        while (pids := _written_pids(path)) is None:
            await trio.sleep(0.01)
    return pids


def _is_alive(pid: int) -> bool:
    """Running or sleeping: a zombie (dead, waiting for init to reap it) does not count."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


async def _assert_group_gone(pgid: int, pids: list[int]) -> None:
    # SIGKILL is delivered asynchronously (a killed process may still show as running for a
    # moment), and orphaned members are reaped by init, which is slow in some containers.
    with trio.move_on_after(HANG):
        while [pid for pid in pids if _is_alive(pid)] or _group_exists(pgid):
            await trio.sleep(0.01)
    assert not [pid for pid in pids if _is_alive(pid)]
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)


def _group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


async def _cancel_when_ready(worker: CommandWorker, ready: list[Path]) -> tuple[float, list[int]]:
    """Run a round, cancel it once the script is ready; return the stop's duration and pids."""
    scope = trio.CancelScope()

    async def run_round() -> None:
        with scope:
            await worker.run(make_request(), None)
            pytest.fail("the round finished although it was cancelled")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_round)
        pids = [pid for path in ready for pid in await _read_pids(path)]
        started = time.monotonic()
        scope.cancel()
    assert scope.cancelled_caught
    return time.monotonic() - started, pids


async def test_cancel_kills_group_that_ignores_sigterm(tmp_path: Path) -> None:
    ready = tmp_path / "pids"
    # Both the shell and its sleep ignore SIGTERM (an ignored signal is inherited).
    script = f"trap '' TERM; sleep 3600 & echo $$ $! > {shlex.quote(str(ready))}; wait"
    worker = command(["sh", "-c", script], kill_grace=0.3)
    elapsed, pids = await _cancel_when_ready(worker, [ready])
    assert 0.3 <= elapsed < PROMPT  # the grace, then a kill (not the hour of the sleep)
    await _assert_group_gone(pids[0], pids)


async def test_cancel_kills_descendants_that_outlive_the_leader(tmp_path: Path) -> None:
    leader, child = tmp_path / "leader", tmp_path / "child"
    # The leader dies on SIGTERM; its child ignores it and keeps stdout open.
    inner = f"trap '' TERM; echo $$ > {shlex.quote(str(child))}; exec sleep 3600"
    script = f"sh -c {shlex.quote(inner)} & echo $$ > {shlex.quote(str(leader))}; wait"
    worker = command(["sh", "-c", script], kill_grace=0.3)
    elapsed, pids = await _cancel_when_ready(worker, [leader, child])
    assert 0.3 <= elapsed < PROMPT  # the grace, then a kill (not the hour of the sleep)
    await _assert_group_gone(pids[0], pids)


async def test_cancel_is_prompt_when_sigterm_works(tmp_path: Path) -> None:
    ready = tmp_path / "pid"
    script = f"echo $$ > {shlex.quote(str(ready))}; exec sleep 3600"
    worker = command(["sh", "-c", script], kill_grace=HANG)
    elapsed, pids = await _cancel_when_ready(worker, [ready])
    assert elapsed < PROMPT  # not the grace
    # A lone child is reaped by run_process itself: no zombie, not even briefly.
    with pytest.raises(ProcessLookupError):
        os.killpg(pids[0], 0)


async def test_a_group_killed_as_the_process_leaves_reports_no_round(tmp_path: Path) -> None:
    """SIGTERM or a second Ctrl-C kills every worker group, then cancels the runtime: the
    killed round must not come back as a failed round first (it would be recorded, count as a
    failure and move the loop to its next round); it waits for the cancellation instead."""
    ready = tmp_path / "pid"
    worker = command(["sh", "-c", f"echo $$ > {shlex.quote(str(ready))}; exec sleep 3600"])
    results: list[RoundResult] = []
    scope = trio.CancelScope()

    async def run_round() -> None:
        with scope:
            results.append(await worker.run(make_request(), None))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_round)
        [pid] = await _read_pids(ready)
        assert kill_worker_groups() == 1
        await _assert_group_gone(pid, [pid])
        await trio.sleep(0.2)  # time to report, if it were going to
        assert results == []
        scope.cancel()
    assert scope.cancelled_caught
    assert results == []
    assert kill_worker_groups() == 0  # and it is no longer listed as running


async def test_cwd_and_extra_env_of_the_request(tmp_path: Path) -> None:
    script = "import os; print(os.getcwd()); print(os.environ['LOOPACTORS_WORKTREE'])"
    request = make_request(cwd=str(tmp_path), env={"LOOPACTORS_WORKTREE": "wt"})
    result = await command([PY, "-c", script]).run(request, None)
    assert result.output.splitlines() == [str(tmp_path), "wt"]  # pytest resolves tmp_path


# --- a grandchild that leaves the process group (setsid) ---

# The leader starts a grandchild in a session of its own that ignores SIGTERM and holds no
# pipe of the round's, writes both pids, then waits.
ESCAPE = """
import os, signal, sys, time
if sys.argv[1] == "leader":
    if os.fork() == 0:
        os.setsid()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        open(sys.argv[2] + ".escapee", "w").write(f"{os.getpid()}\\n")
        time.sleep(3600)
        os._exit(0)
    open(sys.argv[2], "w").write(f"{os.getpid()}\\n")
    time.sleep(3600)
"""


def _escaping_worker(tmp_path: Path) -> tuple[CommandWorker, Path]:
    script = tmp_path / "escape.py"
    script.write_text(ESCAPE)
    ready = tmp_path / "pids"
    return command([sys.executable, str(script), "leader", str(ready)], kill_grace=0.3), ready


def _own_cgroups() -> list[Path]:
    reason = _cgroup.unavailable_reason()
    assert reason is None
    base = _cgroup._where.base
    assert isinstance(base, Path)
    return sorted(base.glob(f"loopactors-{os.getpid()}-*"))


async def test_a_stop_ends_a_grandchild_that_left_the_group_through_the_cgroup(
    tmp_path: Path,
) -> None:
    if (reason := _cgroup.unavailable_reason()) is not None:
        pytest.skip(f"command workers get no cgroup here: {reason}")
    worker, ready = _escaping_worker(tmp_path)
    escapee_file = Path(f"{ready}.escapee")
    elapsed, pids = await _cancel_when_ready(worker, [ready, escapee_file])
    assert elapsed < PROMPT
    await _assert_group_gone(pids[0], pids)  # the escapee too
    assert _own_cgroups() == []  # the worker's cgroup is removed once empty


async def test_without_a_cgroup_a_grandchild_that_left_the_group_survives_a_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Where no cgroup can be made (docs/security.md says so), only the group is stopped."""
    monkeypatch.setattr(_cgroup._where, "base", None)
    monkeypatch.setattr(_cgroup, "_find_base", lambda: "no cgroup2 file system is mounted")
    worker, ready = _escaping_worker(tmp_path)
    elapsed, pids = await _cancel_when_ready(worker, [ready, Path(f"{ready}.escapee")])
    leader, escapee = pids
    try:
        assert elapsed < PROMPT
        assert not _group_exists(leader)
        assert _is_alive(escapee)  # not stopped: it left the group and nothing holds it
        assert os.getpgid(escapee) == escapee
    finally:
        os.kill(escapee, 9)


async def test_a_cgroup_that_cannot_be_joined_is_said_once_and_not_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    if (reason := _cgroup.unavailable_reason()) is not None:
        pytest.skip(f"command workers get no cgroup here: {reason}")
    monkeypatch.setattr(_cgroup, "_JOIN", 'shift; exec "$@"')  # never joins
    monkeypatch.setattr(_cgroup._where, "base", _cgroup._where.base)
    go = tmp_path / "go"
    # A program that is a shell itself, and that runs until the check has been made.
    script = (
        f"cat > /dev/null; while [ ! -e {shlex.quote(str(go))} ]; do sleep 0.01; done; echo ran"
    )
    worker = command(["sh", "-c", script])

    def said() -> list[str]:
        return [r.message for r in caplog.records if "without a cgroup" in r.message]

    outputs = []

    async def run_round() -> None:
        outputs.append((await worker.run(make_request(), None)).output)

    with caplog.at_level("WARNING", logger="loopactors.workers"):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_round)
            with trio.fail_after(HANG):
                while not said():
                    await trio.sleep(0.01)
            go.touch()
        await run_round()  # no cgroup made for this one
    assert outputs == ["ran\n", "ran\n"]
    assert len(said()) == 1
    assert "cannot be moved into" in said()[0]
    assert _cgroup.unavailable_reason() is not None
    assert _cgroup.new_cgroup() is None


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("no-interpreter-line", "echo ran\n"),
        ("gone-interpreter", "#!/no/such/interpreter\necho ran\n"),
    ],
)
async def test_a_program_the_kernel_cannot_exec_fails_the_same_with_or_without_a_cgroup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, text: str
) -> None:
    """The joining shell would run a file with no ``#!`` as a script and call a missing
    interpreter "not found": such programs run without it and fail as exec says."""
    script = tmp_path / name
    script.write_text(text)
    script.chmod(0o755)
    assert not _cgroup.runs_directly(str(script))
    with_cgroup = await command([str(script)]).run(make_request(), None)
    monkeypatch.setattr(_cgroup._where, "base", "no cgroup here (test)")
    without = await command([str(script)]).run(make_request(), None)
    assert (with_cgroup.status, with_cgroup.error) == (without.status, without.error)
    assert with_cgroup.status == "failed"
    assert with_cgroup.error is not None
    assert with_cgroup.error.startswith(f"cannot run {script}: ")
    assert ("Exec format error" if name == "no-interpreter-line" else "No such file") in (
        with_cgroup.error
    )


def test_programs_the_kernel_execs_directly(tmp_path: Path) -> None:
    script = tmp_path / "agent.sh"
    script.write_text("#!/bin/sh\ncat\n")
    script.chmod(0o644)
    assert not _cgroup.runs_directly(str(script))  # not executable
    script.chmod(0o755)
    assert _cgroup.runs_directly(str(script))
    assert _cgroup.runs_directly(sys.executable)  # an ELF binary
    assert not _cgroup.runs_directly(str(tmp_path))  # a directory
    assert not _cgroup.runs_directly(str(tmp_path / "gone"))


def test_why_workers_get_no_cgroup_is_logged_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(_cgroup._where, "base", None)
    monkeypatch.setattr(_cgroup, "_find_base", lambda: "no cgroup2 file system is mounted")
    with caplog.at_level("WARNING", logger="loopactors.workers"):
        assert _cgroup.unavailable_reason() == "no cgroup2 file system is mounted"
        assert _cgroup.new_cgroup() is None
        assert _cgroup.unavailable_reason() == "no cgroup2 file system is mounted"
    said = [r.message for r in caplog.records if "without a cgroup" in r.message]
    assert said == [
        "command workers run without a cgroup of their own (no cgroup2 file system is "
        "mounted): a process that leaves its worker's process group (setsid) is not stopped "
        "with it"
    ]
