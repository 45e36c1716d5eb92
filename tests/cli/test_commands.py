"""The command line, run as a user runs it: real processes, real state directories."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.hang import HANG

CLI = [sys.executable, "-m", "loopactors"]


def cli(*args: str, timeout: float = HANG) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def test_run_json_prints_one_event_per_line_and_exits_0() -> None:
    result = cli("run", "|loop:3,fresh| hello", "--store", "memory", "--json")
    assert result.returncode == 0, result.stderr
    events = json_lines(result.stdout)
    assert [e["type"] for e in events] == [
        "loop_started",
        "round_started",
        "round_finished",
        "round_started",
        "round_finished",
        "round_started",
        "round_finished",
        "loop_finished",
    ]
    assert len({e["loop_id"] for e in events}) == 1
    assert events[2]["round"] == 1
    assert events[2]["rounds"] == 3
    assert events[2]["status"] == "completed"
    assert events[-1]["phase"] == "complete"


@pytest.mark.parametrize(
    ("worker", "code", "phase"),
    [
        ("scripted:output=the same every time", 2, "escalated"),
        ("scripted:fail_every=1", 2, "escalated"),
    ],
)
def test_exit_codes_follow_the_final_phase(worker: str, code: int, phase: str) -> None:
    result = cli("run", "|loop:8| go", "--store", "memory", "--json", "--worker", worker)
    assert result.returncode == code, result.stderr
    assert json_lines(result.stdout)[-1]["phase"] == phase


@pytest.mark.parametrize("rounds", [1, 2])
def test_a_loop_with_no_completed_round_is_not_a_success(rounds: int) -> None:
    # Too few rounds for the failure breaker: the cap ends the loop, but not as `complete`.
    result = cli(
        "run", f"|loop:{rounds}| x", "--store", "memory", "--json", "--worker", "command:false"
    )
    assert result.returncode == 2, result.stderr
    finished = json_lines(result.stdout)[-1]
    assert (finished["phase"], finished["trigger"]) == ("escalated", "no_completed_round")
    assert finished["completed_rounds"] == 0
    said = "its only round did not complete" if rounds == 1 else "none of its 2 rounds completed"
    assert finished["reason"].startswith(said)
    assert "exit code 1" in finished["reason"]


def test_bad_input_is_a_clear_error_with_exit_1() -> None:
    result = cli("run", "|loop:abc| nope", "--store", "memory")
    assert result.returncode == 1
    assert "loopactors: error:" in result.stderr
    assert "abc" in result.stderr
    assert "Traceback" not in result.stderr
    result = cli("run", "|loop:2| nope", "--store", "memory", "--worker", "nonsense")
    assert result.returncode == 1
    assert "unknown worker kind" in result.stderr


def test_bad_usage_exits_64() -> None:
    assert cli("run").returncode == 64
    assert cli("--no-such-flag").returncode == 64


#: A round latency no test outlives: the run is still in its round when the test acts on it
#: (however slow the machine), and the test ends it.
FOREVER = 3600


def start_run(state: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CLI, "run", "|loop:4,fresh| slow work", "--state", str(state), "--json", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def kill(proc: subprocess.Popen[str]) -> None:
    """SIGKILL: no clean-up at all in the process; then close our ends of its pipes."""
    proc.kill()
    proc.communicate()


def read_until_round(proc: subprocess.Popen[str], round_number: int) -> str:
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        assert line, "the run ended early"
        event = json.loads(line)
        if event["type"] == "round_started" and event["round"] == round_number:
            return str(event["loop_id"])


def test_ctrl_c_stops_the_loop_and_exits_3(tmp_path: Path) -> None:
    proc = start_run(tmp_path, "--worker", f"scripted:latency={FOREVER}")
    read_until_round(proc, 1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=HANG)
    assert proc.returncode == 3, err
    assert json_lines(out)[-1]["phase"] == "cancelled"


def wait_for_file(path: Path, timeout: float = HANG) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists() or not path.read_text():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)
    return path.read_text()


def listed(state: Path, pid: int) -> None:
    """Wait until the runtime knows the worker's process group (it lists it in the state
    directory then): a signal before that may find it not yet known."""
    wait_for_file(state / "groups" / f"{pid}.json")


def gone(pid: int, timeout: float = HANG) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_a_second_ctrl_c_leaves_at_once_while_a_worker_ignores_sigterm(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    script = (
        "import os, pathlib, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        f"pathlib.Path({str(ready)!r}).write_text(str(os.getpid())); time.sleep(7200)"
    )
    config = tmp_path / "loopactors.toml"
    config.write_text("kill_grace = 3600\n")  # a stop would wait an hour for it
    worker = "command:" + shlex.join([sys.executable, "-c", script])
    proc = start_run(tmp_path / "state", "--worker", worker, "--config", str(config))
    assert proc.stderr is not None
    pid = int(wait_for_file(ready))
    proc.send_signal(signal.SIGINT)
    assert "press Ctrl-C again" in proc.stderr.readline()  # the first press was read
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=HANG)  # not the hour's grace
    assert proc.returncode == 130
    assert gone(pid)  # and the worker did not outlive it


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_or_a_closed_terminal_leaves_no_worker_behind(
    tmp_path: Path, signum: signal.Signals
) -> None:
    """`kill PID` or the terminal closing (SIGHUP) ended `run` at once and left the round's
    agent running, unseen, until the next `resume`: now both leave as a second Ctrl-C does,
    the worker's group killed, the loop resumable."""
    ready = tmp_path / "ready"
    script = (
        "import os, pathlib, time; "
        f"pathlib.Path({str(ready)!r}).write_text(str(os.getpid())); time.sleep(7200)"
    )
    worker = "command:" + shlex.join([sys.executable, "-c", script])
    proc = start_run(tmp_path / "state", "--worker", worker)
    pid = int(wait_for_file(ready))
    listed(tmp_path / "state", pid)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=HANG)
    assert proc.returncode == 130, err
    assert gone(pid)
    loop_id = json_lines(out)[0]["loop_id"]
    status = cli("status", loop_id, "--state", str(tmp_path / "state"), "--json")
    assert json.loads(status.stdout)["phase"] == "awaiting_worker", status.stdout  # resumable


def test_killed_run_resumes_and_status_and_history_read_it(tmp_path: Path) -> None:
    # Rounds of 2 s: the kill lands seconds before the loop could end, however loaded.
    proc = start_run(tmp_path, "--worker", "scripted:latency=2")
    loop_id = read_until_round(proc, 2)
    kill(proc)
    status = cli("status", loop_id, "--state", str(tmp_path), "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["phase"] == "awaiting_worker"
    assert "owner" not in json.loads(status.stdout)  # SQLite: one node, no owners

    resumed = cli("resume", "--state", str(tmp_path), "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json_lines(resumed.stdout)[-1]["phase"] == "complete"

    history = cli("history", loop_id, "--state", str(tmp_path), "--json")
    rounds = json.loads(history.stdout)["rounds"]
    assert [r["round"] for r in rounds] == [1, 2, 3, 4]
    assert all(r["status"] == "completed" for r in rounds)

    listing = cli("status", "--state", str(tmp_path))
    assert loop_id[:8] in listing.stdout
    assert cli("resume", "--state", str(tmp_path)).returncode == 0  # nothing left to do


def test_status_of_an_unknown_loop_is_an_error(tmp_path: Path) -> None:
    result = cli("status", "nope", "--state", str(tmp_path))
    assert result.returncode == 1
    assert "no loop 'nope'" in result.stderr
    empty = cli("status", "--state", str(tmp_path))
    assert empty.returncode == 0
    assert "no loops" in empty.stdout


def test_resume_refuses_a_worker_it_cannot_build_and_leaves_the_loop_as_it_was(
    tmp_path: Path,
) -> None:
    """A SIGKILLed run on a program found through a PATH entry, then `resume` in a shell
    without that entry: a common, passing mistake must not end the loop."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    agent = bin_dir / "my-agent"
    agent.write_text(
        '#!/bin/sh\ncat >/dev/null\nsleep "${MY_SLEEP:-0}"\necho "did $LOOPACTORS_ROUND"\n'
    )
    agent.chmod(0o755)
    state = tmp_path / "s"
    with_agent = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    proc = subprocess.Popen(
        [*CLI, "run", "|loop:2,fresh| needs my-agent", "--state", str(state), "--json",
         "--worker", "command:my-agent"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**with_agent, "MY_SLEEP": "30"},
    )  # fmt: skip
    loop_id = read_until_round(proc, 1)
    kill(proc)
    before = json.loads(cli("status", loop_id, "--state", str(state), "--json").stdout)
    assert before["phase"] == "awaiting_worker"

    refused = cli("resume", "--state", str(state), "--json")  # this shell's PATH: no bin_dir
    assert refused.returncode == 1, refused.stderr
    assert refused.stdout == ""
    assert "command worker executable 'my-agent' not found" in refused.stderr
    assert f"  {loop_id} (awaiting_worker, round 1): 'command:my-agent' cannot be built" in (
        refused.stderr
    )
    assert "Put the program on PATH" in refused.stderr
    assert "Traceback" not in refused.stderr
    after = json.loads(cli("status", loop_id, "--state", str(state), "--json").stdout)
    assert after == before  # nothing changed: phase, round, session, updated_at

    # With the program back on PATH, the same loop goes on to its end.
    resumed = subprocess.run(
        [*CLI, "resume", "--state", str(state), "--json"],
        capture_output=True, text=True, timeout=HANG, check=False, env=with_agent,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    final = json_lines(resumed.stdout)[-1]
    assert (final["loop_id"], final["phase"], final["completed_rounds"]) == (loop_id, "complete", 2)


def test_two_runtimes_cannot_share_a_state_directory(tmp_path: Path) -> None:
    proc = start_run(tmp_path, "--worker", f"scripted:latency={FOREVER}")
    read_until_round(proc, 1)
    try:
        second = cli("resume", "--state", str(tmp_path))
        assert second.returncode == 1
        assert "in use by another loopactors runtime" in second.stderr
        assert f"pid {proc.pid}" in second.stderr
    finally:
        kill(proc)


def test_demo_runs_and_exits_0() -> None:
    result = cli("demo", "--fast")
    assert result.returncode == 0, result.stderr
    assert "every round recorded exactly once: yes" in result.stdout
    assert "cancelled" in result.stdout


def test_config_file_is_used(tmp_path: Path) -> None:
    (tmp_path / "loopactors.toml").write_text('store = "memory"\nworker = "scripted:tokens=7"\n')
    result = subprocess.run(
        [*CLI, "run", "|loop:1| configured", "--json"],
        capture_output=True, text=True, timeout=HANG, check=False, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json_lines(result.stdout)[2]["tokens"] == 7
    assert not (tmp_path / ".loopactors").exists()  # memory store: nothing written
    (tmp_path / "loopactors.toml").write_text("colour = 'blue'\n")
    bad = subprocess.run(
        [*CLI, "run", "|loop:1| x"], capture_output=True, text=True, timeout=HANG, check=False,
        cwd=tmp_path,
    )  # fmt: skip
    assert bad.returncode == 1
    assert "colour" in bad.stderr
    assert "loopactors.toml" in bad.stderr


def test_a_config_file_that_is_not_utf8_or_an_infinite_timeout_is_refused(tmp_path: Path) -> None:
    (tmp_path / "loopactors.toml").write_bytes(b"store = 'memory' # \xff\n")
    bad = subprocess.run(
        [*CLI, "run", "|loop:1| x"], capture_output=True, text=True, timeout=HANG, check=False,
        cwd=tmp_path,
    )  # fmt: skip
    assert bad.returncode == 1
    assert "not UTF-8 text" in bad.stderr
    assert "Traceback" not in bad.stderr
    result = cli("run", "|loop:2| x", "--store", "memory", "--round-timeout", "inf")
    assert result.returncode == 1
    assert "round_timeout must be a finite number > 0" in result.stderr


def test_resume_runs_a_paused_loop_to_its_end(tmp_path: Path) -> None:
    from loopactors.loops import LoopSpec, LoopState, RoundRecord
    from loopactors.storage import Write, open_backend

    now = time.time()
    state = LoopState(
        loop_id="paused-one", spec=LoopSpec(task="wait", rounds=2), phase="paused", round=2,
        completed_rounds=1, last_output="o", created_at=now, updated_at=now, started_at=now,
    )  # fmt: skip
    backend = open_backend("sqlite", tmp_path)
    record = RoundRecord(loop_id="paused-one", round=1, status="completed", output="o")
    backend.commit([Write(state=state, round=record)])
    backend.close()
    result = cli("resume", "--state", str(tmp_path), "--json", timeout=HANG)
    assert result.returncode == 0, result.stderr
    assert json_lines(result.stdout)[-1]["phase"] == "complete"


def test_breaker_flags_and_ledger_export(tmp_path: Path) -> None:
    result = cli(
        "run", "|loop:8| fix it", "--state", str(tmp_path), "--json",
        "--worker", "scripted:fail_every=1", "--no-progress", "2",
    )  # fmt: skip
    assert result.returncode == 2
    last = json_lines(result.stdout)[-1]
    assert last["phase"] == "escalated"
    assert last["trigger"] == "consecutive_failures"
    exported = cli("ledger", "export", last["loop_id"], "--state", str(tmp_path))
    assert exported.returncode == 0, exported.stderr
    ledger = json.loads(exported.stdout)
    assert ledger["goal"] == "fix it"
    assert [a["outcome"] for a in ledger["attempts"]] == ["failure", "failure"]
    assert [a["iteration"] for a in ledger["attempts"]] == [1, 2]
    assert ledger["attempts"][0]["error"].startswith("scripted failure: round 1")
    assert set(ledger["attempts"][0]) == {
        "iteration", "timestamp", "action", "outcome", "error", "tokensUsed",
    }  # fmt: skip
    missing = cli("ledger", "export", "nope", "--state", str(tmp_path))
    assert missing.returncode == 1
    assert "no loop 'nope'" in missing.stderr


def test_stop_in_a_state_directory_no_runtime_runs(tmp_path: Path) -> None:
    proc = start_run(tmp_path, "--worker", f"scripted:latency={FOREVER}")
    loop_id = read_until_round(proc, 1)
    refused = cli("stop", loop_id, "--state", str(tmp_path))  # the run holds the directory
    assert refused.returncode == 1
    assert "--connect" in refused.stderr
    kill(proc)  # now nobody runs it; the loop is still live in the store
    stopped = cli("stop", loop_id, "--state", str(tmp_path), "--json")
    assert stopped.returncode == 0, stopped.stderr
    assert json.loads(stopped.stdout)["phase"] == "cancelled"
    # The round it had in flight is closed, as the runtime's own stop closes it.
    from loopactors.loops import LoopFinished
    from loopactors.storage import open_backend

    backend = open_backend("sqlite", tmp_path)
    try:
        last = backend.rounds(loop_id)[-1]
        (finished,) = [e for e in backend.events(loop_id) if isinstance(e, LoopFinished)]
    finally:
        backend.close()
    assert last.status == "cancelled"
    assert last.error is not None
    assert last.error.endswith("in flight: stopped while no runtime was running it")
    assert (finished.summary[-1].round, finished.summary[-1].status) == (last.round, "cancelled")
    again = cli("stop", loop_id, "--state", str(tmp_path))
    assert again.returncode == 0
    assert "cancelled" in again.stdout
    assert cli("resume", "--state", str(tmp_path)).returncode == 0  # nothing left to resume
    missing = cli("stop", "nope", "--state", str(tmp_path))
    assert missing.returncode == 1
    assert "no loop 'nope'" in missing.stderr


def test_status_of_a_path_that_is_no_state_directory_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from loopactors.cli import main

    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert main(["status", "--state", str(a_file)]) == 1
    assert f"the state directory {a_file} is not a directory" in capsys.readouterr().err
    assert main(["status", "--state", str(tmp_path / "missing")]) == 1
    assert f"no state directory {tmp_path / 'missing'}" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["status", "--state", str(tmp_path / "empty")]) == 0
    assert f"no loops in {tmp_path / 'empty'}" in capsys.readouterr().out
    # Shown as given, on one line, however long, whatever brackets it holds.
    odd = tmp_path / ("[b]x" + "y" * 120)
    odd.mkdir()
    assert main(["status", "--state", str(odd)]) == 0
    assert capsys.readouterr().out == f"no loops in {odd}\n"


def test_status_and_history_read_a_store_on_a_read_only_disk(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from loopactors.cli import main
    from tests.mounts import remount_read_only, small_tmpfs

    with small_tmpfs(tmp_path / "disk", "16m") as disk:
        state = disk / "state"
        assert main(["run", "|loop:2| hello", "--state", str(state), "--json"]) == 0
        loop_id = json_lines(capsys.readouterr().out)[0]["loop_id"]
        remount_read_only(disk)
        assert main(["status", "--state", str(state), "--json"]) == 0
        assert [loop["loop_id"] for loop in json.loads(capsys.readouterr().out)] == [loop_id]
        assert main(["history", loop_id, "--state", str(state), "--json"]) == 0
        assert capsys.readouterr().out
        assert sorted(os.listdir(state)) == ["loopactors.db", "runtime.lock"]  # nothing added


@pytest.mark.parametrize(
    "args",
    [
        ["status", "--json"],
        ["status"],
        ["run", "|loop:2| x", "--json"],
        ["run", "|loop:2| x"],
        ["--help"],
        ["code", "status", "--json"],
    ],
)
def test_a_closed_stdout_ends_any_command_quietly(tmp_path: Path, args: list[str]) -> None:
    # `loopactors status --json | head`: the reader is gone before (or while) we write.
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "state").mkdir()
    state = ["--state", str(tmp_path / "state")] if args[0] in ("status", "run") else []
    process = subprocess.Popen(
        [*CLI, *args, *state],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    assert process.stdout is not None
    assert process.stderr is not None
    process.stdout.close()
    code = process.wait(timeout=HANG)
    stderr = process.stderr.read().decode()
    process.stderr.close()
    assert "Traceback" not in stderr
    assert "BrokenPipeError" not in stderr
    assert code in (0, 141), stderr  # 141: as a process ended by SIGPIPE; 0 if all was read


def test_the_console_script_imports_a_python_worker_from_the_working_directory(
    tmp_path: Path,
) -> None:
    (tmp_path / "mymod.py").write_text(
        "async def fn(request, context):\n    return f'mine {request.round}'\n"
    )
    script = Path(sys.executable).parent / "loopactors"
    if not script.exists():
        pytest.skip("the console script is not installed next to this Python")
    result = subprocess.run(
        [str(script), "run", "|loop:1| x", "--store", "memory", "--json",
         "--worker", "python:mymod:fn"],
        capture_output=True, text=True, timeout=HANG, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json_lines(result.stdout)[-1]["phase"] == "complete"


def test_code_is_listed_and_ledger_alone_is_a_usage_error() -> None:
    listed = cli("--help")
    assert listed.returncode == 0
    assert "    code " in listed.stdout
    wrong = cli("frobnicate")
    assert wrong.returncode == 64
    assert "'code'" in wrong.stderr
    ledger = cli("ledger")
    assert ledger.returncode == 64
    assert "loopactors ledger: error: choose an action: export LOOP_ID" in ledger.stderr
    assert ledger.stdout == ""


def test_run_says_once_that_it_uses_the_scripted_worker() -> None:
    quiet = cli("run", "|loop:2| x", "--store", "memory", "--json", "--worker", "scripted")
    assert "scripted worker" not in quiet.stderr
    told = cli("run", "|loop:2| x", "--store", "memory", "--json")
    assert told.returncode == 0, told.stderr
    assert told.stderr.count("no --worker given: this loop uses the scripted worker") == 1
    assert json_lines(told.stdout)[-1]["phase"] == "complete"  # stdout stays JSON lines


def test_any_unique_id_prefix_names_a_loop_and_an_ambiguous_one_lists_them(
    tmp_path: Path,
) -> None:
    import trio

    from loopactors.runtime import RuntimeConfig, open_runtime

    state = tmp_path / "state"

    async def make() -> None:
        async with open_runtime(RuntimeConfig(store="sqlite", state_dir=state)) as rt:
            for loop_id in ("alpha-1", "alpha-2", "beta-7"):
                await (rt.handle(await rt.start(f"|loop:1| {loop_id}", loop_id=loop_id))).wait()
            await rt.start("|loop:1| held", loop_id="gamma-3", worker="scripted:latency=60")

    trio.run(make)
    where = ["--state", str(state)]
    shown = cli("status", "bet", *where, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["loop_id"] == "beta-7"
    assert json.loads(cli("history", "beta", *where, "--json").stdout)["loop"]["loop_id"] == (
        "beta-7"
    )
    assert json.loads(cli("ledger", "export", "b", *where).stdout)["goal"] == "beta-7"
    stopped = cli("stop", "gam", *where, "--json")
    assert stopped.returncode == 0, stopped.stderr
    assert json.loads(stopped.stdout)["phase"] == "cancelled"
    for command in (["status"], ["history"], ["stop"], ["ledger", "export"]):
        ambiguous = cli(*command, "alpha", *where)
        assert ambiguous.returncode == 1
        assert "loop id prefix 'alpha' matches several loops" in ambiguous.stderr
        assert "alpha-1, alpha-2; give more of the id" in ambiguous.stderr
    assert "no loop 'zeta'" in cli("status", "zeta", *where).stderr
    # The table shows every id whole, even on a narrow terminal.
    narrow = subprocess.run(
        [*CLI, "status", *where], capture_output=True, text=True, timeout=HANG, check=False,
        env={**os.environ, "COLUMNS": "60"},
    )  # fmt: skip
    for loop_id in ("alpha-1", "alpha-2", "beta-7", "gamma-3"):
        assert loop_id in narrow.stdout


def test_stale_rounds_flag_and_loop_key_set_the_no_progress_limit() -> None:
    counter_only = "scripted:output=step {round} done"
    escalated = cli("run", "|loop:5| toy", "--store", "memory", "--json", "--worker", counter_only)
    assert escalated.returncode == 2, escalated.stderr
    end = json_lines(escalated.stdout)[-1]
    assert (end["phase"], end["trigger"]) == ("escalated", "no_progress")
    assert "run --stale-rounds N, stale_rounds=N in the |loop| text" in end["reason"]
    for args in (
        ["|loop:5| toy", "--stale-rounds", "9"],
        ["|loop:5 stale_rounds=9| toy"],
        ["|loop:5,stale_rounds=9| toy"],
    ):
        relaxed = cli("run", *args, "--store", "memory", "--json", "--worker", counter_only)
        assert relaxed.returncode == 0, relaxed.stderr
        assert json_lines(relaxed.stdout)[-1]["completed_rounds"] == 5
    # The flag wins over the text, as every option does.
    flag_wins = cli(
        "run", "|loop:5 stale_rounds=9| toy", "--stale-rounds", "2", "--store", "memory",
        "--json", "--worker", counter_only,
    )  # fmt: skip
    assert flag_wins.returncode == 2
    bad = cli("run", "|loop:5| toy", "--stale-rounds", "0", "--store", "memory")
    assert bad.returncode == 1
    assert "stale_rounds_limit must be >= 1, got 0" in bad.stderr


def test_the_breaker_flags_say_what_they_control() -> None:
    shown = cli("run", "--help")
    text = " ".join(shown.stdout.split())
    assert "--no-progress N end the loop after N failed or timed-out rounds in a row" in text
    assert "--stale-rounds N end the loop (no_progress) after N rounds in a row with" in text


def test_until_and_max_cost_from_the_command_line(tmp_path: Path) -> None:
    flag = tmp_path / "ready"
    worker = f"command:sh -c {shlex.quote(f'echo r$LOOPACTORS_ROUND; touch {flag}')}"
    done = cli(
        "run", "|loop:5| make it ready", "--store", "memory", "--json", "--worker", worker,
        "--until", f"test -f {shlex.quote(str(flag))}",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    events = json_lines(done.stdout)
    (finished,) = [e for e in events if e["type"] == "round_finished"]
    assert finished["check"]["exit_code"] == 0
    assert events[-1]["reason"].startswith("objective met: the check `test -f ")
    never = cli(
        "run", "|loop:2| x", "--store", "memory", "--json", "--until", "exit 4",
        "--until-timeout", "30",
    )  # fmt: skip
    assert never.returncode == 2, never.stderr
    events = json_lines(never.stdout)
    assert [e["check"]["exit_code"] for e in events if e["type"] == "round_finished"] == [4, 4]
    assert events[-1]["trigger"] == "until_not_met"
    refused = cli("run", "|loop:2| x", "--store", "memory", "--until", "no-such-tool-qq -x")
    assert refused.returncode == 1
    assert "'no-such-tool-qq' was not found on PATH" in refused.stderr
    # A command worker reports no cost: a dollar budget for it is no budget, and is refused.
    uncapped = cli("run", "|loop:2| x", "--store", "memory", "--worker", worker, "--max-cost", "2")
    assert uncapped.returncode == 1
    assert "max_cost_usd cannot be kept for a command loop" in uncapped.stderr


def test_status_shows_what_each_account_spent_today_against_the_budgets(tmp_path: Path) -> None:
    toml = tmp_path / "loopactors.toml"
    toml.write_text("[budget]\ndaily_cost_usd = 2.0\ndaily_total_cost_usd = 5.0\n")
    state = str(tmp_path / "state")
    ran = cli(
        "run", "|loop:3| spend", "--state", state, "--config", str(toml),
        "--worker", "python:tests.runtime.round_fns:spend_on_account", "--max-cost", "10",
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    status = cli("status", "--state", state, "--config", str(toml))
    assert status.returncode == 0, status.stderr
    assert "$1.2000 of $10.00" in status.stdout  # the loop's spend and its max_cost_usd
    assert "spent since " in status.stdout
    assert ": $1.2000 of $5.00" in status.stdout
    assert "  test:acct: $1.2000 of $2.00" in status.stdout
