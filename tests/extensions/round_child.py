"""One round in a process of its own, for the ``subproc://`` transport: the request on
stdin, ``[pid, result]`` on stdout. Registers the ``reverse`` kind, as a plug-in would."""

from __future__ import annotations

import os
import sys

import msgspec
import trio

from loopactors.workers import RoundRequest, parse_worker, register_worker_kind


async def main() -> None:
    request = msgspec.json.decode(sys.stdin.buffer.read(), type=RoundRequest)
    result = await parse_worker(request.worker).run(request, None)
    sys.stdout.buffer.write(msgspec.json.encode([os.getpid(), result]))


if __name__ == "__main__":
    register_worker_kind("reverse", "tests.extensions.reverse_kind:KIND")
    trio.run(main)
