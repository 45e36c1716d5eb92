"""``loopactors stress --gateway-flood``: a real node under abusive connections (docs/stress.md).

A node process is started on loopback with few file descriptors (``ulimit -n``). While its
loops run command-worker rounds, this process holds connections that never send a byte,
connections that send half a request head, websockets that never say hello, and floods the
port with connections opened and closed as fast as they go: well over the node's descriptor
limit in all, bounded in count (``connections``) and time (``seconds``). Meanwhile a token
holder connects afresh and asks for ``status`` every ``status_every`` seconds (starting over
on a fresh socket after ``ATTEMPT_SECONDS`` without an answer, as clients do).

The checks (docs/security.md, gateway promises 6 to 8): every status answer came within
``status_bound`` seconds, every round of every loop completed (none failed for want of a
descriptor), the node is still running, its log holds no traceback and no condition logged
more often than its rate limit allows.
"""

from __future__ import annotations

import contextlib
import re
import resource
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import attrs
import msgspec
import trio

from ..errors import ConfigError, ConnectionLost, LoopactorsError
from ..gateway import NodeClient, connect
from ._report import InvariantCheck, percentile

__all__ = ["FloodOptions", "FloodReport", "render_flood_report", "run_gateway_flood"]

TERMINAL = ("complete", "cancelled", "interrupted", "escalated", "error")
#: What the held connections send: nothing, half a request head, a whole upgrade (then no
#: hello). A third of them each.
UPGRADE = (
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)
HELD_KINDS = (b"", b"GET / HTTP/1.1\r\nHost: x\r\n", UPGRADE)
#: Each condition the gateway logs is rate limited to one line every 10 s (docs/security.md,
#: promise 8); a few more are allowed for the edges of the run.
LOG_INTERVAL = 10.0
LOG_SLACK = 3
MAX_CONNECTIONS = 20_000
#: The node's ``fd_reserve`` (256) plus room for its gateway to serve a token holder.
MIN_DESCRIPTORS = 320
#: Descriptors this process keeps for itself beyond the held connections.
OWN_RESERVE = 256
#: Each round reads its prompt, waits a little and prints something new (so the breaker
#: sees progress): a fresh subprocess with pipes, which is what fails first when the
#: node runs out of descriptors.
DEFAULT_WORKER = "command:" + shlex.join(
    [
        sys.executable,
        "-c",
        "import sys, time, uuid; sys.stdin.read(); time.sleep(0.2); print(uuid.uuid4())",
    ]
)


@attrs.frozen
class FloodOptions:
    #: Connections held at once (idle, half-sent heads, upgraded without hello).
    connections: int = 600
    #: Tasks opening and closing connections as fast as they go.
    churners: int = 4
    loops: int = 4
    rounds: int = 12
    worker: str = DEFAULT_WORKER
    #: The node's ``ulimit -n``.
    descriptors: int = 400
    #: The flood's bound: it ends when the loops do, or after this many seconds.
    seconds: float = 60.0
    status_bound: float = 10.0
    status_every: float = 0.2
    #: The node's state directory (a fresh temporary one if None).
    state_dir: Path | None = None

    def check(self) -> None:
        problems = []
        if not 0 <= self.connections <= MAX_CONNECTIONS:
            problems.append(
                f"--connections must be from 0 to {MAX_CONNECTIONS}, got {self.connections}"
            )
        if not 0 <= self.churners <= 64:
            problems.append(f"--churners must be from 0 to 64, got {self.churners}")
        if not 1 <= self.loops <= 1000:
            problems.append(
                f"--loops must be from 1 to 1000 with --gateway-flood, got {self.loops}"
            )
        if not 1 <= self.rounds <= 50:
            problems.append(f"--rounds must be from 1 to 50, got {self.rounds}")
        if not MIN_DESCRIPTORS <= self.descriptors <= 1_000_000:
            problems.append(
                f"--descriptors must be from {MIN_DESCRIPTORS} to 1000000, got "
                f"{self.descriptors} (the node keeps 256 of them for its own work: fd_reserve)"
            )
        for flag, value in (
            ("--flood-seconds", self.seconds),
            ("--status-bound", self.status_bound),
        ):
            if not (0 < value < 86_400):
                problems.append(f"{flag} must be seconds > 0 (and under a day), got {value}")
        if problems:
            raise ConfigError("; ".join(problems))


class FloodReport(msgspec.Struct, frozen=True, kw_only=True):
    url: str
    descriptors: int
    connections_asked: int
    #: Connections that were open at once at the flood's height (the rest were refused or
    #: dropped by the node before they could be counted).
    connections_held: int
    churned: int
    seconds: float
    status_checks: int
    status_p50_s: float | None
    status_max_s: float | None
    loops: int
    rounds_per_loop: int
    rounds_completed: int
    phases: dict[str, int]
    log_warnings: dict[str, int]
    checks: tuple[InvariantCheck, ...]
    ok: bool = False


def _check(name: str, description: str, checked: int, problems: list[str]) -> InvariantCheck:
    return InvariantCheck(
        name=name,
        description=description,
        checked=checked,
        violations=len(problems),
        examples=tuple(problems[:5]),
    )


def run_gateway_flood(options: FloodOptions) -> FloodReport:
    """Start the node, flood it while its loops run, stop it, and check (blocking)."""
    options.check()
    _make_room_for(options.connections + options.churners + OWN_RESERVE)
    with contextlib.ExitStack() as stack:
        state_dir = options.state_dir
        if state_dir is None:
            state_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="flood-")))
        state_dir.mkdir(parents=True, exist_ok=True)
        log_path = state_dir / "flood-node.log"
        with _node(options, state_dir, log_path) as (url, token, process):
            run = trio.run(_flood, options, url, token)
            alive = process.poll() is None
        log = log_path.read_text(encoding="utf-8", errors="replace")
        return _report(options, url, run, alive=alive, log=log)


def _make_room_for(descriptors: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < descriptors:
        if hard != resource.RLIM_INFINITY and hard < descriptors:
            raise ConfigError(
                f"holding that many connections needs {descriptors} descriptors in this "
                f"process; its hard limit (ulimit -Hn) is {hard}: ask for fewer --connections"
            )
        resource.setrlimit(resource.RLIMIT_NOFILE, (descriptors, hard))


@contextlib.contextmanager
def _node(
    options: FloodOptions, state_dir: Path, log_path: Path
) -> Iterator[tuple[str, str, subprocess.Popen[bytes]]]:
    limit = options.descriptors

    def limit_descriptors() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    argv = [sys.executable, "-m", "loopactors", "node", "--listen", "127.0.0.1:0"]
    argv += ["--state", str(state_dir), "--worker", options.worker]
    with log_path.open("wb") as err:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            preexec_fn=limit_descriptors,  # noqa: PLW1509 - only setrlimit, before exec
        )
    try:
        deadline = time.monotonic() + 60
        while not (match := re.search(r"serving (ws://\S+)", log_path.read_text())):
            if process.poll() is not None:
                raise LoopactorsError(
                    f"the node exited {process.returncode} before serving: "
                    f"{log_path.read_text()[-2000:]}"
                )
            if time.monotonic() > deadline:
                raise LoopactorsError("the node did not start serving within 60 s")
            time.sleep(0.05)
        token = (state_dir / "node.token").read_text().strip()
        yield match.group(1), token, process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@attrs.define
class _Run:
    began: float = attrs.Factory(time.monotonic)
    held_peak: int = 0
    churned: int = 0
    latencies: list[float] = attrs.Factory(list)
    #: Status checks that failed or came late, described.
    late: list[str] = attrs.Factory(list)
    seconds: float = 0.0
    timed_out: bool = False
    states: list[tuple[str, str, int]] = attrs.Factory(list)  # loop id, phase, completed
    round_problems: list[str] = attrs.Factory(list)


async def _flood(options: FloodOptions, url: str, token: str) -> _Run:
    port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
    run = _Run()
    held: list[trio.SocketStream] = []
    stop = trio.Event()
    try:
        async with connect(url, token=token) as owner:
            loop_ids = [
                (await owner.start(f"|loop:{options.rounds},fresh| flood {index}")).loop_id
                for index in range(options.loops)
            ]
            with trio.move_on_after(options.seconds) as bound:
                async with trio.open_nursery() as nursery:
                    for index in range(options.connections):
                        data = HELD_KINDS[index % len(HELD_KINDS)]
                        nursery.start_soon(_hold, port, data, held, run)
                    for _ in range(options.churners):
                        nursery.start_soon(_churn, port, stop, run)
                    await _watch(
                        options, url=url, token=token, owner=owner, loop_ids=loop_ids, run=run
                    )
                    stop.set()
            run.timed_out = bound.cancelled_caught
            run.seconds = time.monotonic() - run.began
            for stream in held:
                await trio.aclose_forcefully(stream)
            held.clear()
            for loop_id in loop_ids:
                state = await owner.get(loop_id)
                run.states.append((loop_id, state.phase, state.completed_rounds))
                rounds = await owner.history(loop_id, output_head=0)
                bad = [f"{r.round} {r.status}" for r in rounds if r.status != "completed"]
                if bad:
                    run.round_problems.append(f"{loop_id}: rounds {', '.join(bad)}")
    finally:
        for stream in held:
            await trio.aclose_forcefully(stream)
    return run


async def _watch(
    options: FloodOptions,
    *,
    url: str,
    token: str,
    owner: NodeClient,
    loop_ids: list[str],
    run: _Run,
) -> None:
    """Ask for status as a fresh token holder until every loop has ended."""
    while True:
        phases = [(await owner.get(loop_id)).phase for loop_id in loop_ids]
        if all(phase in TERMINAL for phase in phases):
            return
        started = time.monotonic()
        lost: list[str] = []
        try:
            with trio.fail_after(options.status_bound):
                await _ask_status(url, token, lost)
        except (trio.TooSlowError, LoopactorsError, OSError) as exc:
            what = str(exc) or type(exc).__name__
            if lost:
                what += f" (the last attempt: {lost[-1]})"
            run.late.append(f"status asked {started - run.began:.1f} s in: {what}")
        else:
            taken = time.monotonic() - started
            run.latencies.append(taken)
            if taken > options.status_bound:
                run.late.append(f"status took {taken:.2f} s")
        await trio.sleep(options.status_every)


async def _hold(port: int, data: bytes, held: list[trio.SocketStream], run: _Run) -> None:
    with contextlib.suppress(OSError, trio.BrokenResourceError):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        held.append(stream)
        run.held_peak = max(run.held_peak, len(held))
        if data:
            await stream.send_all(data)


async def _churn(port: int, stop: trio.Event, run: _Run) -> None:
    while not stop.is_set():
        with contextlib.suppress(OSError, trio.BrokenResourceError):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            await stream.aclose()
            run.churned += 1
        await trio.lowlevel.checkpoint()


def _warnings(log: str) -> Counter[str]:
    """Warning lines of the node's log by condition (numbers and addresses blanked)."""
    return Counter(
        re.sub(r"[\d.:\[\]]+", "N", line.split(" ", 3)[-1])[:60]
        for line in log.splitlines()
        if "WARNING" in line
    )


def _report(options: FloodOptions, url: str, run: _Run, *, alive: bool, log: str) -> FloodReport:
    flood_ran = []
    if options.connections and run.held_peak < min(options.connections, 50):
        flood_ran.append(f"only {run.held_peak} connections were ever held at once")
    if options.churners and run.churned == 0:
        flood_ran.append("no connection was opened and closed by the flood")
    rounds_ok = list(run.round_problems)
    for loop_id, phase, completed in run.states:
        if phase != "complete" or completed != options.rounds:
            rounds_ok.append(f"{loop_id}: {phase} with {completed}/{options.rounds} rounds")
    if run.timed_out:
        rounds_ok.append(f"the loops were not done after --flood-seconds {options.seconds}")
    tracebacks = log.count("Traceback")
    warnings = _warnings(log)
    allowed = int(run.seconds / LOG_INTERVAL) + LOG_SLACK
    noisy = [f"{count} x {line!r}" for line, count in warnings.items() if count > allowed]
    checks = (
        _check("flood_ran", "the flood really ran (connections held, opened and closed)", 1,
               flood_ran),
        _check(
            "status_in_time",
            f"every token holder's status answered within {options.status_bound} s",
            len(run.latencies) + len(run.late),
            run.late,
        ),
        _check("rounds_completed", "every round of every loop completed", len(run.states),
               rounds_ok),
        _check("node_alive", "the node is still running after the flood", 1,
               [] if alive else ["the node exited during the flood"]),
        _check("no_traceback", "no traceback in the node's log", 1,
               [f"{tracebacks} tracebacks"] if tracebacks else []),
        _check(
            "log_rate_limited",
            f"no condition logged more than {allowed} times (one line per 10 s)",
            len(warnings),
            noisy,
        ),
    )  # fmt: skip
    completed = sum(done for _, _, done in run.states)
    return FloodReport(
        url=url,
        descriptors=options.descriptors,
        connections_asked=options.connections,
        connections_held=run.held_peak,
        churned=run.churned,
        seconds=run.seconds,
        status_checks=len(run.latencies) + len(run.late),
        status_p50_s=percentile(run.latencies, 0.5),
        status_max_s=max(run.latencies) if run.latencies else None,
        loops=len(run.states),
        rounds_per_loop=options.rounds,
        rounds_completed=completed,
        phases=dict(sorted(Counter(phase for _, phase, _ in run.states).items())),
        log_warnings=dict(warnings),
        checks=checks,
        ok=all(check.ok for check in checks) and bool(run.latencies),
    )


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


def render_flood_report(report: FloodReport) -> str:
    lines = [
        f"stress --gateway-flood: a node at {report.url} with ulimit -n {report.descriptors}, "
        f"{report.loops} loops x {report.rounds_per_loop} rounds",
        f"  connections held     {report.connections_held} at most at once "
        f"({report.connections_asked} asked: idle, half-sent heads, upgraded without hello)",
        f"  connections churned  {report.churned} (opened and closed)",
        f"  flood lasted         {report.seconds:.2f} s",
        f"  status checks        {report.status_checks}, p50 {_seconds(report.status_p50_s)}, "
        f"max {_seconds(report.status_max_s)}",
        f"  rounds completed     {report.rounds_completed} of "
        f"{report.loops * report.rounds_per_loop}",
        "  loops per phase      "
        + (", ".join(f"{phase} {n}" for phase, n in report.phases.items()) or "none"),
        f"  node log warnings    {sum(report.log_warnings.values())} lines, "
        f"{len(report.log_warnings)} conditions",
        "checks:",
    ]
    for check in report.checks:
        mark = "ok  " if check.ok else "FAIL"
        lines.append(f"  {mark} {check.description} ({check.checked} checked)")
        lines.extend(f"       {example}" for example in check.examples)
    lines.append("all checks hold" if report.ok else "CHECKS FAILED")
    return "\n".join(lines)


#: How long one attempt of a token holder waits before it starts over on a fresh socket, as
#: clients do: a SYN the flood's full backlog dropped is otherwise retried by the kernel only
#: after 1, 3, 7, 15, 31 s.
ATTEMPT_SECONDS = 5.0


async def _ask_status(url: str, token: str, lost: list[str]) -> None:
    """Connect as a token holder and read a page of status, starting over after
    ``ATTEMPT_SECONDS`` without an answer or on a lost connection (noted in ``lost``; the
    caller bounds the whole); a refusal (``RemoteError``) is raised at once."""
    while True:
        with trio.move_on_after(ATTEMPT_SECONDS):
            try:
                async with connect(url, token=token, timeout=ATTEMPT_SECONDS) as holder:
                    await holder.list(limit=10)
                    return
            except (ConnectionLost, OSError) as exc:
                lost.append(str(exc) or type(exc).__name__)
                await trio.sleep_forever()  # until the attempt's time is up: no busy loop
