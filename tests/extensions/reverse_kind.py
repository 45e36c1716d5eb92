"""A worker kind from outside the package, as a third party writes one: one module with a
worker and its ``KIND``. Nothing under ``loopactors/`` names it."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import attrs
import trio

from loopactors.errors import WorkerSpecError
from loopactors.workers import RoundContext, RoundRequest, RoundResult, Worker, WorkerKind


@attrs.frozen
class ReverseWorker(Worker):
    """Answers each round with its prompt reversed, or upper-cased with ``shout``; writes
    the output into its workspace when it has one."""

    kind: ClassVar[str] = "reverse"

    shout: bool = False
    workspace: str | None = None
    sleep: float = 0.0

    async def run(self, request: RoundRequest, context: RoundContext | None) -> RoundResult:
        await trio.sleep(self.sleep)
        text = request.prompt[::-1]
        text = text.upper() if self.shout else text
        where = request.cwd or self.workspace
        if where is not None:
            (Path(where) / f"round-{request.round}.txt").write_text(text)
        return RoundResult(status="completed", output=text, tokens=len(text))


def build(options: str, kill_grace: float) -> Worker:
    values = dict(item.partition("=")[::2] for item in options.split(",") if item)
    unknown = sorted(set(values) - {"shout", "sleep", "workspace"})
    if unknown:
        raise WorkerSpecError(
            f"reverse worker option {unknown[0]!r} is unknown; "
            "accepted options: shout, sleep, workspace"
        )
    return ReverseWorker(
        shout=values.get("shout") == "yes",
        workspace=values.get("workspace"),
        sleep=float(values.get("sleep", 0)),
    )


def pin_workspace(spec: str, directory: str | Path) -> str:
    if "workspace=" in spec:
        return spec
    return f"{spec}{',' if ':' in spec else ':'}workspace={Path(directory).resolve()}"


KIND = WorkerKind(
    name="reverse",
    build=build,
    workspace="round",
    pin_workspace=pin_workspace,
    stable_spec=True,
    served_by_default=False,
)
