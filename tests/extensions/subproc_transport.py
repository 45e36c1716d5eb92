"""A round transport from outside the package, as a third party writes one: each round runs
in a child Python process of its own (``python -m tests.extensions.round_child``), the
request on its stdin and the result on its stdout. A stop or the round's timeout cancels the
round's scope, which kills the child. Registered for ``subproc://`` URLs."""

from __future__ import annotations

import sys
import time
import urllib.parse

import msgspec
import trio

from loopactors.errors import ConfigError
from loopactors.runtime import DispatchSettings, RoundRun, RoundTransport, TransportKind
from loopactors.workers import RoundRequest, RoundResult

#: Rounds this transport ran, by idempotency key, with the child's process id.
RAN: dict[str, int] = {}
#: Keys whose stop the Dispatcher passed on.
CANCELLED: list[str] = []


class SubprocessTransport(RoundTransport):
    def __init__(self, settings: DispatchSettings) -> None:
        self.max_output_bytes = settings.max_output_bytes

    async def run(self, request: RoundRequest, run: RoundRun) -> RoundResult | None:
        run.begin(trio.current_time(), time.monotonic())  # timed here, from now
        bounded = msgspec.structs.replace(request, max_output_bytes=self.max_output_bytes)
        done = await trio.run_process(
            [sys.executable, "-m", "tests.extensions.round_child"],
            stdin=msgspec.json.encode(bounded),
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        if done.returncode != 0:
            tail = done.stderr.decode(errors="replace")[-500:]
            return RoundResult(
                status="failed", error=f"round child exited {done.returncode}: {tail}"
            )
        pid, result = msgspec.json.decode(done.stdout, type=tuple[int, RoundResult])
        RAN[request.key] = pid
        return result

    def cancel(self, key: str) -> None:
        CANCELLED.append(key)


def check(url: str) -> None:
    parts = urllib.parse.urlsplit(url)
    if parts.netloc or parts.path or parts.query:
        raise ConfigError(f"bad transport {url!r}: subproc:// takes nothing after it")


SUBPROC = TransportKind(
    name="subproc",
    check=check,
    open=lambda url, settings: SubprocessTransport(settings),
    rounds_here=False,  # the rounds' worker kinds must exist in the child, not here
)
