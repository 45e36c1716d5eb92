"""The scripted worker: deterministic rounds for tests, demos and stress runs.

Spec: ``scripted[:latency=S,fail_every=K,done_at=K,output=TEXT,tokens=N]``. ``output=`` may
contain commas when it is the last option: everything after it is taken verbatim.
"""

from __future__ import annotations

import math
import re
import string
from collections.abc import Callable
from typing import ClassVar

import attrs
import trio

from ..errors import WorkerSpecError
from ._base import RoundContext, RoundRequest, RoundResult, Worker
from ._kinds import WorkerKind

__all__ = ["DEFAULT_OUTPUT", "KIND", "ScriptedWorker"]

#: Names an output template may use, e.g. ``{round}`` or ``{word}``.
TEMPLATE_FIELDS = ("loop_id", "prompt_tail", "round", "rounds", "word")
#: The word keeps consecutive outputs different even when a fuse strips digits.
DEFAULT_OUTPUT = "round {round} of {rounds}: {word}"
_OPTIONS = ("done_at", "fail_every", "latency", "output", "tokens")
_FORM = "scripted[:latency=SECONDS,fail_every=K,done_at=K,output=TEXT,tokens=N]"
_PROMPT_TAIL = 80
_WORDS = (
    "amber", "birch", "cedar", "delta", "ember", "fjord", "glade", "harbor", "island", "juniper",
    "kestrel", "lagoon", "meadow", "nectar", "orchid", "pebble", "quartz", "river", "summit",
    "thistle", "umber", "valley", "willow", "xenon", "yarrow", "zephyr", "acorn", "basalt",
    "canyon", "dune", "estuary", "fern", "granite", "heron", "indigo", "jasper", "kelp",
    "lichen", "marsh", "nimbus", "obsidian", "prairie", "quill", "reef", "sable", "tundra",
    "upland", "violet", "wren", "yucca",
)  # fmt: skip
_UNSIGNED_INT = re.compile(r"[0-9]+")
_UNSIGNED_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")


def _check_template(template: str) -> None:
    """Reject a template that could not render, so a typo fails at start, not in round 1."""
    accepted = ", ".join("{" + name + "}" for name in TEMPLATE_FIELDS)
    try:
        fields = [
            field for _, field, _, _ in string.Formatter().parse(template) if field is not None
        ]
    except ValueError as exc:
        raise WorkerSpecError(
            f"scripted worker output template {template!r} is malformed ({exc}); "
            "write {{ and }} for literal braces"
        ) from None
    for field in fields:
        if field not in TEMPLATE_FIELDS:
            raise WorkerSpecError(
                f"scripted worker output template {template!r} uses unknown placeholder "
                f"{{{field}}}; accepted placeholders: {accepted}"
            )
    try:  # format specs (``{round:03d}``) are allowed, but they must suit the value
        template.format(round=1, rounds=1, loop_id="loop", prompt_tail="", word=_WORDS[0])
    except (ValueError, KeyError, IndexError) as exc:
        raise WorkerSpecError(
            f"scripted worker output template {template!r} cannot render: {exc}"
        ) from None


@attrs.frozen(kw_only=True)
class ScriptedWorker(Worker):
    """Answers every round from a template after a fixed latency, failing every K-th round.

    A failed round still reports ``tokens``: a real failed call costs tokens too.
    """

    kind: ClassVar[str] = "scripted"

    latency: float = 0.0
    fail_every: int | None = None
    #: Round at which the worker reports the loop's objective met (``done``).
    done_at: int | None = None
    output: str = DEFAULT_OUTPUT
    tokens: int = 0

    def __attrs_post_init__(self) -> None:
        if not (math.isfinite(self.latency) and self.latency >= 0):
            raise WorkerSpecError(
                f"scripted worker latency must be a number of seconds >= 0, got {self.latency!r}"
            )
        if self.fail_every is not None and self.fail_every < 1:
            raise WorkerSpecError(
                f"scripted worker fail_every must be an integer >= 1, got {self.fail_every!r}"
            )
        if self.tokens < 0:
            raise WorkerSpecError(
                f"scripted worker tokens must be an integer >= 0, got {self.tokens!r}"
            )
        _check_template(self.output)

    @classmethod
    def from_spec(cls, options: str) -> ScriptedWorker:
        """Build from the text after ``scripted:`` (empty for all defaults)."""
        values: dict[str, str] = {}
        rest = options
        while rest:
            if rest.startswith("output="):
                values["output"] = rest.removeprefix("output=")  # verbatim, commas included
                break
            item, comma, rest = rest.partition(",")
            name, equals, value = item.partition("=")
            if not equals:
                raise WorkerSpecError(
                    f"scripted worker option {item!r} is not NAME=VALUE; expected {_FORM}"
                )
            if name not in _OPTIONS:
                raise WorkerSpecError(
                    f"scripted worker option {name!r} is unknown; "
                    f"accepted options: {', '.join(_OPTIONS)}"
                )
            if name in values:
                raise WorkerSpecError(f"scripted worker option {name!r} is given twice")
            if comma and not rest:
                raise WorkerSpecError(f"scripted worker spec {options!r} ends with a comma")
            values[name] = value
        return cls(
            latency=_parse_latency(values["latency"]) if "latency" in values else 0.0,
            fail_every=_parse_int("fail_every", values["fail_every"], minimum=1)
            if "fail_every" in values
            else None,
            done_at=_parse_int("done_at", values["done_at"], minimum=1)
            if "done_at" in values
            else None,
            output=values.get("output", DEFAULT_OUTPUT),
            tokens=_parse_int("tokens", values["tokens"], minimum=0) if "tokens" in values else 0,
        )

    async def run(self, request: RoundRequest, context: RoundContext | None) -> RoundResult:
        # The hot path of the stress benchmarks: one checkpoint and one format, nothing more.
        if self.latency:
            await trio.sleep(self.latency)
        else:
            await trio.lowlevel.checkpoint()
        return self._answer(request)

    def run_at_once(self, request: RoundRequest) -> RoundResult | None:
        return None if self.latency else self._answer(request)

    def waits_only(
        self, request: RoundRequest
    ) -> tuple[float, Callable[[RoundRequest], RoundResult]] | None:
        # A round of latency > 0 is that wait and then the answer: the runtime holds it as a
        # timer, not a task (a recovery of 50,000 loops has 50,000 such rounds in flight).
        return (self.latency, self._answer) if self.latency else None

    def _answer(self, request: RoundRequest) -> RoundResult:
        if self.fail_every is not None and request.round % self.fail_every == 0:
            return RoundResult(
                status="failed",
                error=f"scripted failure: round {request.round} (fail_every={self.fail_every})",
                tokens=self.tokens,
            )
        output = self.output.format(
            round=request.round,
            rounds=request.rounds,
            loop_id=request.loop_id,
            prompt_tail=request.prompt[-_PROMPT_TAIL:],
            word=_WORDS[request.round % len(_WORDS)],
        )
        done = self.done_at is not None and request.round >= self.done_at
        return RoundResult(status="completed", output=output, tokens=self.tokens, done=done)


def _parse_latency(value: str) -> float:
    if not _UNSIGNED_DECIMAL.fullmatch(value):
        raise WorkerSpecError(
            f"scripted worker latency must be a number of seconds >= 0 (like 0.5), got {value!r}"
        )
    return float(value)


def _parse_int(name: str, value: str, *, minimum: int) -> int:
    if not _UNSIGNED_INT.fullmatch(value) or int(value) < minimum:
        raise WorkerSpecError(
            f"scripted worker {name} must be an integer >= {minimum}, got {value!r}"
        )
    return int(value)


KIND = WorkerKind(
    name="scripted",
    build=lambda options, kill_grace: ScriptedWorker.from_spec(options),
    stable_spec=True,
    served_by_default=True,
    stand_in=True,
    reports_cost=False,  # its rounds' cost_usd is always 0
)
