"""One node, several `loopactors worker` processes and a real redis-server.

Rounds of command workers print ``$LOOPACTORS_WORKER_NAME``, so each round's output says
which worker process ran it.
"""

from __future__ import annotations

import functools
import shlex
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from loopactors.loops import RoundWaiting
from loopactors.runtime import BreakerSettings, Runtime, RuntimeConfig, _dispatcher, open_runtime
from loopactors.transport._redis import NO_GROUP, open_redis
from loopactors.transport._status import collect, unserved
from loopactors.transport._wire import RESULTS_STREAM, WORKER_GROUP, rounds_stream
from tests.hang import HANG
from tests.processes import alive

from .conftest import RedisServer, Workers, wait_until


def command(script: str) -> str:
    return "command:" + shlex.join(["sh", "-c", script])


#: A round that takes a moment and names the worker that ran it.
NAMED = command('sleep 0.3; echo "ran on $LOOPACTORS_WORKER_NAME"')


def ran_on(output: str) -> str:
    return output.splitlines()[0].removeprefix("ran on ")


@pytest.fixture
async def node(tmp_path: Path, redis_server: RedisServer) -> AsyncIterator[Runtime]:
    config = RuntimeConfig(
        store="sqlite",
        state_dir=tmp_path / "state",
        transport=redis_server.url(),
        shutdown_grace=5.0,
        # Rounds print the same text: that is no sign of a loop stuck here.
        breaker=BreakerSettings(stale_rounds_limit=100),
    )
    async with open_runtime(config) as rt:
        yield rt


async def pending(url: str, kind: str) -> int:
    """Orders of this kind taken by a worker and not yet acknowledged."""
    async with open_redis(url, name="loopactors-test") as client:
        try:
            info = await client.xpending(rounds_stream(kind), WORKER_GROUP)
        except NO_GROUP:  # no worker of this kind ever joined
            return 0
        return int(info.pending)


async def test_rounds_spread_across_worker_processes(
    node: Runtime, redis_server: RedisServer, workers: Workers
) -> None:
    names = {"w1", "w2", "w3"}
    async with trio.open_nursery() as nursery:
        for name in sorted(names):
            nursery.start_soon(workers.start, redis_server.url(), name)
    loops = [node.handle(await node.start("|loop:2,fresh| work", worker=NAMED)) for _ in range(6)]
    used: list[str] = []
    for loop in loops:
        final = await loop.wait()
        assert final.phase == "complete"
        rounds = await loop.history()
        assert [r.round for r in rounds] == [1, 2]
        used += [ran_on(r.output) for r in rounds]
    assert set(used) <= names
    # Six loops at once on three one-slot workers: every worker had work.
    assert set(used) == names


async def test_a_killed_workers_round_is_reclaimed_and_recorded_once(
    node: Runtime, redis_server: RedisServer, workers: Workers
) -> None:
    url = redis_server.url()
    await workers.start(url, "doomed")
    # Slow only on the doomed worker: it is still running the round when it is killed.
    slow = command(
        'if [ "$LOOPACTORS_WORKER_NAME" = doomed ]; then sleep 5; fi; '
        'echo "ran on $LOOPACTORS_WORKER_NAME"'
    )
    loop = node.handle(await node.start("|loop:2,fresh| work", worker=slow))

    async def held() -> bool:
        return await pending(url, "command") == 1

    await wait_until(held)
    workers.kill("doomed")  # SIGKILL mid-round: no goodbye, no report, no acknowledgement
    await workers.start(url, "heir")
    final = await loop.wait()
    assert final.phase == "complete"
    rounds = await loop.history()
    assert [(r.round, r.status) for r in rounds] == [(1, "completed"), (2, "completed")]
    assert ran_on(rounds[0].output) == "heir"
    assert "reclaimed 1 round(s)" in workers.log("heir")


async def test_a_round_whose_workers_keep_dying_fails_instead_of_going_round_forever(
    node: Runtime, redis_server: RedisServer, workers: Workers
) -> None:
    url = redis_server.url()
    async with trio.open_nursery() as nursery:
        for name in ("w1", "w2", "w3"):
            nursery.start_soon(
                functools.partial(workers.start, url, name, options=("--max-deliveries", "2"))
            )
    # The round's command kills the worker process that runs it (its parent).
    loop = node.handle(await node.start("|loop:1| poison", worker=command("kill -9 $PPID")))
    await loop.wait()
    [record] = await loop.history()
    assert record.status == "failed"
    assert record.error is not None
    assert "died 2 times (more than --max-deliveries 2)" in record.error
    dead = [name for name, p in workers.processes.items() if p.poll() is not None]
    assert len(dead) == 2


async def test_stop_reaches_the_remote_round(
    node: Runtime, redis_server: RedisServer, workers: Workers, tmp_path: Path
) -> None:
    url = redis_server.url()
    await workers.start(url, "w1")
    marker = tmp_path / "terminated"
    trapped = tmp_path / "trapped"
    # The round's shell notes the SIGTERM the worker sends it, then exits; it says when its
    # trap is set, so the stop is sent after that and not after a guessed delay.
    script = (
        f'trap "echo TERM > {shlex.quote(str(marker))}; exit 1" TERM; '
        f"touch {shlex.quote(str(trapped))}; sleep 3600 & wait"
    )
    loop = node.handle(await node.start("|loop:3| wait", worker=command(script)))

    async def held() -> bool:
        return await pending(url, "command") == 1 and trapped.exists()

    await wait_until(held)
    with trio.fail_after(HANG):
        await loop.stop()
        final = await loop.wait()
    assert final.phase == "cancelled"

    async def terminated() -> bool:
        return marker.exists()

    await wait_until(terminated)
    assert marker.read_text().strip() == "TERM"

    # The cancelled round's report came back; nothing is left held by the worker.
    async def released() -> bool:
        return await pending(url, "command") == 0

    await wait_until(released)


async def test_redis_restarted_mid_run_loses_nothing(
    node: Runtime, redis_server: RedisServer, workers: Workers
) -> None:
    url = redis_server.url()
    await workers.start(url, "w1", slots=2)
    loops = [node.handle(await node.start("|loop:4,fresh| work", worker=NAMED)) for _ in range(2)]

    async def some_rounds_done() -> bool:
        states = [await node.get(loop.loop_id) for loop in loops]
        return any(state.round >= 2 for state in states)

    await wait_until(some_rounds_done)
    redis_server.stop()
    await trio.sleep(0.5)  # node and worker retry with backoff meanwhile
    states = [await node.get(loop.loop_id) for loop in loops]
    assert all(s.phase not in ("complete", "error", "interrupted") for s in states)
    redis_server.start()
    for loop in loops:
        final = await loop.wait()
        assert final.phase == "complete", (final, await loop.history())
        rounds = await loop.history()
        assert [(r.round, r.status) for r in rounds] == [(k, "completed") for k in range(1, 5)]


async def test_a_worker_never_takes_a_kind_it_does_not_run(
    node: Runtime, redis_server: RedisServer, workers: Workers
) -> None:
    url = redis_server.url()
    await workers.start(url, "scripted-only", kinds="scripted")
    loop = node.handle(await node.start("|loop:1| work", worker=NAMED))
    quick = node.handle(await node.start("|loop:1| work", worker="scripted"))
    assert (await quick.wait()).phase == "complete"  # that worker is alive and working
    await trio.sleep(0.5)
    state = await node.get(loop.loop_id)
    assert state.phase == "awaiting_worker"
    assert await pending(url, "command") == 0  # nobody took the command round
    await workers.start(url, "commands", kinds="command")
    assert (await loop.wait()).phase == "complete"
    [record] = await loop.history()
    assert ran_on(record.output) == "commands"


async def test_a_node_restarted_mid_round_records_the_round_once(
    tmp_path: Path, redis_server: RedisServer, workers: Workers
) -> None:
    url = redis_server.url()
    await workers.start(url, "w1")
    config = RuntimeConfig(
        store="sqlite",
        state_dir=tmp_path / "state",
        transport=url,
        breaker=BreakerSettings(stale_rounds_limit=100),
    )
    slow = command('sleep 1; echo "ran on $LOOPACTORS_WORKER_NAME"')
    async with open_runtime(config) as rt:
        loop = rt.handle(await rt.start("|loop:2,fresh| work", worker=slow))

        async def held() -> bool:
            return await pending(url, "command") == 1

        await wait_until(held)
    # The node is gone; the worker goes on with round 1. The next node resumes the loop and
    # dispatches round 1 again under the same key: the worker's run reports it, once.
    async with open_runtime(config) as rt:
        final = await rt.handle(loop.loop_id).wait()
        rounds = await rt.history(loop.loop_id)
    assert final.phase == "complete"
    assert [(r.round, r.status) for r in rounds] == [(1, "completed"), (2, "completed")]


async def test_a_command_need_only_exist_where_the_rounds_run(
    node: Runtime, redis_server: RedisServer, workers: Workers, tmp_path: Path
) -> None:
    """With remote workers the node checks a spec's form, not its local resources."""
    tool = tmp_path / "remote-only-tool"
    spec = f"command:{tool} --fast"
    loop = node.handle(await node.start("|loop:1| work", worker=spec))  # not on this machine (yet)
    assert (await node.get(loop.loop_id)).phase != "error"
    tool.write_text("#!/bin/sh\necho made it\n")
    tool.chmod(0o755)
    await workers.start(redis_server.url(), "w", kinds="command")
    assert (await loop.wait()).phase == "complete"
    with pytest.raises(Exception, match="cannot be split"):
        await node.start("|loop:1| work", worker="command:'unclosed")


async def test_a_node_sigkilled_mid_round_never_runs_the_round_twice_at_once(
    tmp_path: Path, redis_server: RedisServer, workers: Workers
) -> None:
    """A real ``loopactors run`` on Redis is SIGKILLed while a worker runs round 1; two idle
    workers could take the round again. The resumed node finds round 1's order still on the
    stream and waits for it: round 1 runs once, and no two runs overlap. Before, the resumed
    node published round 1 again and the second worker ran it alongside the first."""
    import os
    import signal
    import subprocess
    import sys

    url = redis_server.url()
    # A long idle timeout: no worker takes the other's order because a beat came late.
    await workers.start(url, "w1", options=("--idle-timeout", "20"))
    await workers.start(url, "w2", options=("--idle-timeout", "20"))
    marks = tmp_path / "marks"
    script = (
        f'echo "start $LOOPACTORS_ROUND $LOOPACTORS_WORKER_NAME" >> {marks}; sleep 1.5; '
        f'echo "end $LOOPACTORS_ROUND $LOOPACTORS_WORKER_NAME" >> {marks}; '
        'echo "ran on $LOOPACTORS_WORKER_NAME"; cat /proc/sys/kernel/random/uuid'
    )
    spec = command(script)
    state = tmp_path / "state"
    run = subprocess.Popen(  # noqa: ASYNC220 - killed below, never waited on for long
        [sys.executable, "-m", "loopactors", "run", "|loop:2,fresh| work", "--worker", spec,
         "--state", str(state), "--transport", url, "--json"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ},
    )  # fmt: skip
    try:

        async def started() -> bool:
            return marks.exists() and "start 1" in marks.read_text()

        await wait_until(started)
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait()
    config = RuntimeConfig(
        store="sqlite", state_dir=state, transport=url, shutdown_grace=5.0,
        breaker=BreakerSettings(stale_rounds_limit=100),
    )  # fmt: skip
    async with open_runtime(config) as rt:
        [loop] = await rt.list()
        with trio.fail_after(HANG):
            final = await rt.handle(loop.loop_id).wait()
        rounds = await rt.history(loop.loop_id)
    assert final.phase == "complete", final.reason
    assert [(r.round, r.status) for r in rounds] == [(1, "completed"), (2, "completed")]
    lines = marks.read_text().splitlines()
    # One run at a time, each round once: start 1, end 1, start 2, end 2.
    assert [line.split()[:2] for line in lines] == [
        ["start", "1"], ["end", "1"], ["start", "2"], ["end", "2"],
    ], lines  # fmt: skip
    assert ran_on(rounds[0].output) == lines[0].split()[2]  # the first run's own report


async def test_the_next_worker_of_the_machine_ends_a_killed_workers_command_group(
    node: Runtime, redis_server: RedisServer, workers: Workers, tmp_path: Path
) -> None:
    url = redis_server.url()
    pid_file = tmp_path / "leader.pid"
    await workers.start(url, "doomed")
    # On the doomed worker the round ignores SIGTERM and would run a minute.
    stubborn = command(
        f'if [ "$LOOPACTORS_WORKER_NAME" = doomed ]; then trap "" TERM; echo $$ > {pid_file}; '
        'sleep 60; fi; echo "ran on $LOOPACTORS_WORKER_NAME"'
    )
    loop = node.handle(await node.start("|loop:1| work", worker=stubborn))

    async def leader_running() -> bool:
        return pid_file.exists() and pid_file.read_text().strip().isdigit()

    await wait_until(leader_running)
    leader = int(pid_file.read_text())
    workers.kill("doomed")  # SIGKILL mid-round: its command's group runs on
    await trio.sleep(0.5)
    assert alive(leader)
    await workers.start(url, "heir")  # same machine, same list of groups

    async def ended() -> bool:
        return not alive(leader)

    await wait_until(ended)
    final = await loop.wait()
    assert final.phase == "complete"
    [record] = await loop.history()
    assert ran_on(record.output) == "heir"
    log = workers.log("heir")
    assert f"process group {leader} of loop {loop.loop_id} round 1 outlived worker process" in log
    # Ended before the heir took the round over and ran it again.
    assert log.index("outlived worker process") < log.index("reclaimed 1 round(s)")
    # The dead process's list is gone with its group.
    doomed = workers.processes["doomed"].pid
    assert not list((tmp_path / "worker-groups").glob(f"*/{doomed}"))


async def test_a_round_no_live_worker_serves_is_said_to_wait(
    tmp_path: Path, redis_server: RedisServer, workers: Workers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/scale-out.md: after a short grace, the round's waiting is told (the CLI's line,
    the dashboard's loop view) and `status` names the kind nobody serves."""
    monkeypatch.setattr(_dispatcher, "UNSERVED_GRACE", 0.2)
    url = redis_server.url()
    await workers.start(url, "scripted-only", kinds="scripted")
    config = RuntimeConfig(
        store="sqlite", state_dir=tmp_path / "state", transport=url, shutdown_grace=5.0
    )
    async with open_runtime(config) as node:
        with node.subscribe() as events:
            loop = node.handle(await node.start("|loop:1| work", worker=NAMED))
            told = None
            async for event in events:
                if isinstance(event, RoundWaiting):
                    told = event
                    break
        assert told is not None
        event = told
        assert (event.loop_id, event.round) == (loop.loop_id, 1)
        assert event.reason.startswith("no live worker serves 'command'; it runs once one does")
        assert "`loopactors worker --redis URL --kinds command`" in event.reason
        assert (await node.get(loop.loop_id)).phase == "awaiting_worker"
        # `status` with the transport says which kind nobody serves.
        shown = await trio.to_thread.run_sync(
            functools.partial(
                subprocess.run,
                [sys.executable, "-m", "loopactors", "status", "--transport", url,
                 "--state", str(tmp_path / "state")],
                capture_output=True, text=True, timeout=HANG, check=False,
            )
        )  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        text = " ".join(shown.stdout.split())
        assert (
            "no live worker serves 'command': 1 round(s) wait on loopactors:rounds:command" in text
        )
        # A worker of that kind comes: the round runs, and nothing more is said.
        with node.subscribe(loop.loop_id) as later:
            await workers.start(url, "commands", kinds="command")
            assert (await loop.wait()).phase == "complete"
            assert not any(isinstance(e, RoundWaiting) for e in drain(later))
        async with open_redis(url, name="loopactors-test") as client:
            assert unserved(await collect(client)) == []


def drain(subscription: Any) -> list[Any]:
    taken = []
    while True:
        try:
            taken.append(subscription.receive_nowait())
        except trio.WouldBlock:
            return taken


async def test_the_until_check_runs_on_the_worker_with_the_documented_environment(
    node: Runtime, redis_server: RedisServer, workers: Workers
) -> None:
    # docs/loops.md: the check runs where the round ran, with LOOPACTORS_LOOP_ID and
    # LOOPACTORS_ROUND set, as in the node's own process.
    await workers.start(redis_server.url(), "w1")
    until = 'echo "loop=$LOOPACTORS_LOOP_ID round=$LOOPACTORS_ROUND"; exit 1'
    loop = node.handle(await node.start("|loop:2,fresh| work", worker=NAMED, until=until))
    final = await loop.wait()
    assert final.trigger == "until_not_met"
    checks = [r.check for r in await loop.history()]
    assert [c.output.strip() if c else None for c in checks] == [
        f"loop={loop.loop_id} round={n}" for n in (1, 2)
    ]


async def test_a_round_reported_while_no_node_waited_is_taken_not_run_again(
    tmp_path: Path, redis_server: RedisServer, workers: Workers
) -> None:
    """The node goes while a worker runs round 1, and the worker reports it before any node
    is back. The next node (after a restart, or the one that took the store over) takes
    that report for round 1 instead of running the round again."""
    url = redis_server.url()
    await workers.start(url, "w1")
    marks = tmp_path / "marks"
    slow = command(
        f'echo "start $LOOPACTORS_ROUND" >> {marks}; sleep 1; echo "ran $LOOPACTORS_ROUND"'
    )
    config = RuntimeConfig(
        store="sqlite",
        state_dir=tmp_path / "state",
        transport=url,
        breaker=BreakerSettings(stale_rounds_limit=100),
    )
    async with open_runtime(config) as rt:
        loop = await rt.start("|loop:2,fresh| work", worker=slow)

        async def held() -> bool:
            return await pending(url, "command") == 1

        await wait_until(held)

    async def reported() -> bool:  # round 1's report waits on the results stream
        async with open_redis(url, name="loopactors-test") as client:
            return int(await client.xlen(RESULTS_STREAM)) == 1

    await wait_until(reported)
    async with open_runtime(config) as rt:
        with trio.fail_after(HANG):
            final = await rt.handle(loop.loop_id).wait()
        rounds = await rt.history(loop.loop_id)
    assert final.phase == "complete"
    assert [(r.round, r.status) for r in rounds] == [(1, "completed"), (2, "completed")]
    assert rounds[0].output.startswith("ran 1")
    assert marks.read_text().splitlines() == ["start 1", "start 2"]  # round 1 ran once
