"""The adapter interface of a coding-agent CLI worker kind (``claude``, ``codex``, ...).

Pure, no trio: a kind is a :class:`CliAdapter` that says how to call its CLI for one round
(:meth:`CliAdapter.command`) and how to read what the CLI printed (:meth:`CliAdapter.parser`,
a :class:`CliStreamParser` fed one stdout line at a time). Everything else (the subprocess,
its process group and stop, the environment, sessions, progress, limits, the promise) is the
shared worker's (``_cli_worker.CliAgentWorker``), so every kind behaves alike.

A kind's module declares ``KIND = cli_worker_kind(TheAdapter())`` (``_cli_worker``) and
registers it like any worker kind (``register_worker_kind``); ``parse_worker`` then accepts
its name.
The spec form is shared: ``KIND[:key=value,...]`` with the keys of :data:`COMMON_KEYS` the
kind accepts plus its own (``CliAdapter.keys``); ``args=`` takes the rest of the spec.
"""

from __future__ import annotations

import abc
import re
import shlex
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar, Generic, TypeVar

import attrs
import msgspec

from ..errors import WorkerSpecError
from ._kinds import worker_kind, worker_kinds

__all__ = [
    "COMMON_KEYS",
    "AgentStep",
    "AnyEvent",
    "CliAdapter",
    "CliCommand",
    "CliOptions",
    "CliOutcome",
    "CliRound",
    "CliStreamParser",
    "JsonLinesParser",
    "UsageLimit",
    "cli_adapter",
    "cli_kinds",
    "count_of",
    "detect_limit",
    "parse_cli_options",
    "short_detail",
    "step_detail",
]

#: Keys every kind may accept (each kind lists the ones it does in ``CliAdapter.keys``):
#: ``model``, ``max_turns`` (int >= 1), ``permission_mode``, ``allowed_tools`` (``A+B``),
#: ``binary`` (path or name on PATH), ``workspace`` (directory, default the current one),
#: ``promise`` (the completion word, default ``DONE``), ``account`` (a name for the limit
#: group, default derived from the provider's key and base URL), ``args`` (extra CLI
#: arguments, shell-split; it takes the rest of the spec, so it comes last).
COMMON_KEYS: frozenset[str] = frozenset(
    {
        "account",
        "allowed_tools",
        "args",
        "binary",
        "max_turns",
        "model",
        "permission_mode",
        "promise",
        "workspace",
    }
)
E = TypeVar("E")

_INT = re.compile(r"[1-9][0-9]*")
_PROMISE = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@attrs.frozen
class CliOptions:
    """A kind's spec, parsed and checked: what the user chose, fixed for the loop."""

    kind: str
    model: str | None = None
    max_turns: int | None = None
    permission_mode: str | None = None
    allowed_tools: tuple[str, ...] = ()
    binary: str | None = None
    args: tuple[str, ...] = ()
    workspace: str | None = None
    promise: str = "DONE"
    account: str | None = None
    #: The kind's own keys (``CliAdapter.keys`` minus the common ones), unparsed.
    extra: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen
class CliRound:
    """One round as the adapter needs it to build the command line."""

    prompt: str
    options: CliOptions
    #: The agent session to resume (``inherit`` mode, round > 1), or ``None`` for a new one.
    resume: str | None
    #: The directory the CLI runs in (absolute).
    workspace: str


@attrs.frozen
class CliCommand:
    """How to start the CLI for one round."""

    argv: tuple[str, ...]
    #: Added to the round's environment (after markers are removed and LOOPACTORS_* set).
    env: Mapping[str, str] = attrs.field(factory=dict)
    #: Bytes for stdin, or ``None`` for an empty stdin (the prompt is in argv).
    stdin: bytes | None = None


@attrs.frozen
class AgentStep:
    """A tool call seen in the stream: published as an ``agent_step`` event."""

    tool: str
    #: Short (at most ~120 characters): a path, a command line, a pattern.
    detail: str = ""


#: The input field that says most about a tool call (Claude Code's tools and the agent's).
_DETAIL_FIELDS = ("file_path", "command", "pattern", "path", "url", "query", "description")
_DETAIL = 120


def step_detail(tool_input: Any, fields: Sequence[str] = _DETAIL_FIELDS) -> str:
    """An ``agent_step``'s detail: the first of the input ``fields`` that is set (the one
    that says most: a path, a command line, a pattern), shortened by :func:`short_detail`."""
    if not isinstance(tool_input, dict):
        return ""
    for name in fields:
        value = tool_input.get(name)
        if isinstance(value, str) and value:
            return short_detail(value)
    return ""


def short_detail(text: str) -> str:
    """``text`` on one line, at most ``_DETAIL`` characters (an ``agent_step``'s detail)."""
    text = " ".join(text.split())
    return text if len(text) <= _DETAIL else text[: _DETAIL - 1] + "…"


def count_of(value: Any) -> int:
    """A count as a CLI reported it (tokens): a whole number, or 0 for anything else."""
    return value if isinstance(value, int) and value >= 0 else 0


@attrs.frozen
class UsageLimit:
    """The provider said "not now": the round is deferred, not failed."""

    #: UNIX time the limit resets, or ``None`` when the CLI did not say (backoff applies).
    until: float | None
    #: The CLI's own words, short.
    reason: str


@attrs.frozen
class CliOutcome:
    """What one run of the CLI came to, read from its output."""

    #: The agent's final reply (the round's output).
    reply: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    #: Cache reads and writes as the CLI reports them (see ``tokens`` for what counts).
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0
    session_id: str | None = None
    #: The CLI reported an error (or its output could not be read): the round fails with
    #: ``error`` unless ``limit`` is set.
    is_error: bool = False
    error: str | None = None
    limit: UsageLimit | None = None
    #: The session to resume was not found (deleted, another machine, another HOME): the
    #: worker runs the round again once in a new session, with the full prompt.
    session_missing: bool = False

    @property
    def tokens(self) -> int:
        """The round's tokens: input + output + cache writes + cache reads.

        Cache reads are counted in full (they are tokens the model read this round, billed at
        a lower rate that ``cost_usd`` reflects), so a loop's token budget bounds what the
        model saw, not what it cost.
        """
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_read_tokens
            + self.cache_write_tokens
        )


class CliStreamParser(abc.ABC):
    """Reads one run's stdout, a line at a time, then says what it came to."""

    @abc.abstractmethod
    def feed(self, line: str) -> list[AgentStep]:
        """Take one stdout line (without its newline); return the tool calls it shows."""

    @abc.abstractmethod
    def finish(self, returncode: int, stderr: str) -> CliOutcome:
        """The run ended with ``returncode`` and ``stderr`` (its tail): what it came to.

        A non-zero exit or output that cannot be read is ``is_error`` with the CLI's own
        message; a usage or rate limit sets ``limit`` (see :func:`detect_limit`).
        """


class AnyEvent(msgspec.Struct):
    """Any JSON object: what a CLI printed that its parser does not read (fields ignored)."""


_ANY: msgspec.json.Decoder[Any] = msgspec.json.Decoder()


class JsonLinesParser(CliStreamParser, Generic[E]):
    """A CLI that prints one JSON object per line, decoded with msgspec into the kind's typed
    events: the preamble every such kind shares.

    A kind sets :attr:`events`, a decoder of its events (Structs, a union of them tagged by
    their ``type`` field); :meth:`feed` skips blank lines, hands each event to :meth:`event`
    and anything else that is a JSON object (another type, a changed shape) to :meth:`other`
    as :attr:`others` decodes it: CLIs add events, and a round goes on. The first line that is
    not JSON is kept (``unreadable``) for the error ``finish`` reports; JSON that is not an
    object is ignored."""

    #: The kind's events.
    events: ClassVar[msgspec.json.Decoder[Any]]
    #: What is read of any other object (by default nothing).
    others: ClassVar[msgspec.json.Decoder[Any]] = msgspec.json.Decoder(AnyEvent)

    def __init__(self) -> None:
        #: The start of the first line that was not JSON, if any.
        self.unreadable: str | None = None

    def unreported_error(self, kind: str, stderr: str, ended: str) -> str:
        """The error of a run whose events said none: the first line that was not JSON, or
        how the run ended (``ended``) with the tail of ``stderr``."""
        if self.unreadable:
            return f"{kind} printed unreadable output: {self.unreadable!r}"
        tail = stderr.strip()[-500:]
        return ended + (f": {tail}" if tail else "")

    def feed(self, line: str) -> list[AgentStep]:
        if not line.strip():
            return []
        try:
            return self.event(self.events.decode(line))
        except msgspec.ValidationError:
            pass  # JSON, but not one of the events read: another event, or not an object
        except msgspec.DecodeError:
            self.unreadable = self.unreadable or line[:200]
            return []
        try:
            other = self.others.decode(line)
        except msgspec.ValidationError:
            other = None  # not an object, or what `others` reads is of another type
        except msgspec.DecodeError:  # a type error came first, then the line broke off
            self.unreadable = self.unreadable or line[:200]
            return []
        if other is None:
            try:
                _ANY.decode(line)  # the rare path: whether the line is JSON at all
            except msgspec.DecodeError:
                self.unreadable = self.unreadable or line[:200]
            return []
        return self.other(other)

    @abc.abstractmethod
    def event(self, event: E) -> list[AgentStep]:
        """Take one of the kind's events; return the tool calls it shows."""

    def other(self, event: Any) -> list[AgentStep]:
        """Take any other object the CLI printed, as :attr:`others` decoded it."""
        return []


class CliAdapter(abc.ABC):
    """One coding-agent CLI. Subclasses set the class attributes and fill in the parts of
    the command line that are their own; the assembly (and the checks of closed choices) is
    written once, here."""

    #: The worker kind (the spec's first word), e.g. ``claude``.
    kind: ClassVar[str]
    #: The executable's name on PATH.
    binary: ClassVar[str]
    #: Where the binary comes from, for the missing-binary message, e.g.
    #: ``npm install -g @anthropic-ai/claude-code``.
    install: ClassVar[str]
    #: The spec keys this kind accepts (common ones and its own).
    keys: ClassVar[frozenset[str]]
    #: Environment variables removed before the CLI starts (markers of an enclosing session
    #: that make a nested CLI refuse to start or change behaviour).
    strip_env: ClassVar[tuple[str, ...]] = ()
    #: Environment variables naming the provider account (key, base URL): hashed, never
    #: stored, into the limit group when the spec gives no ``account``.
    account_env: ClassVar[tuple[str, ...]] = ()
    #: Whether a session can be resumed (``inherit`` rounds pass ``CliRound.resume``).
    resumes: ClassVar[bool] = True
    #: The ``permission_mode`` values the CLI knows (empty: the kind has no such key).
    permission_modes: ClassVar[tuple[str, ...]] = ()
    #: Closed choices of the kind's own keys (codex: ``sandbox``), checked like the modes.
    choices: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    #: What comes last on the command line, after ``args=`` (how the prompt is read).
    final_args: ClassVar[tuple[str, ...]] = ()
    #: The CLI's cost is the session's running total (a resumed session's includes the
    #: earlier rounds), not the run's: the worker records the difference.
    session_total_cost: ClassVar[bool] = False

    def check(self, options: CliOptions) -> None:
        """Refuse option values the kind cannot use (raise WorkerSpecError): a
        ``permission_mode`` outside :attr:`permission_modes`, a value outside
        :attr:`choices`. A kind with more to check extends this."""
        given = {"permission_mode": options.permission_mode} if self.permission_modes else {}
        given |= {key: options.extra.get(key) for key in self.choices}
        for key, value in given.items():
            accepted = self.permission_modes if key == "permission_mode" else self.choices[key]
            if value is not None and value not in accepted:
                raise WorkerSpecError(
                    f"{self.kind} worker {key} {value!r} is unknown; accepted: "
                    f"{', '.join(accepted)}"
                )

    def command(self, round: CliRound) -> CliCommand:
        """The argv (``argv[0]`` is replaced by the resolved binary), extra env and stdin:
        the kind's fixed part, ``--model``, the kind's switches, ``args=``, then
        :attr:`final_args`; the prompt always comes on stdin."""
        options = round.options
        argv = [self.binary, *self.leading_args(round)]
        if options.model:
            argv += ["--model", options.model]
        argv += [*self.switches(round), *options.args, *self.final_args]
        return CliCommand(
            argv=tuple(argv), env=self.environment(round), stdin=round.prompt.encode("utf-8")
        )

    @abc.abstractmethod
    def leading_args(self, round: CliRound) -> list[str]:
        """What follows the binary, before ``--model``: output format, fixed switches."""

    def switches(self, round: CliRound) -> list[str]:
        """The kind's switches after ``--model`` (limits, permissions, tools, resume)."""
        return []

    def environment(self, round: CliRound) -> dict[str, str]:
        """Added to the round's environment for this kind."""
        return {}

    @abc.abstractmethod
    def parser(self) -> CliStreamParser:
        """A fresh parser for one run's output."""


def cli_kinds() -> tuple[str, ...]:
    """The registered worker kinds that are coding-agent CLIs."""
    return tuple(name for name in worker_kinds() if cli_adapter(name) is not None)


def cli_adapter(kind: str) -> CliAdapter | None:
    """The adapter of the CLI kind ``kind``; ``None`` for any other kind."""
    adapter = getattr(worker_kind(kind), "adapter", None)
    return adapter if isinstance(adapter, CliAdapter) else None


def spec_form(adapter: CliAdapter) -> str:
    keys = sorted(adapter.keys - {"args"}) + (["args"] if "args" in adapter.keys else [])
    return f"{adapter.kind}[:{','.join(k + '=...' for k in keys)}]"


def parse_cli_options(adapter: CliAdapter, text: str) -> CliOptions:
    """Parse the text after ``KIND:`` (shared by every kind).

    Raises:
        WorkerSpecError: an item not ``key=value``, a key the kind does not accept or given
            twice, a bad value; the message names the accepted keys.
    """
    kind = adapter.kind
    values: dict[str, str] = {}
    rest = text
    while rest:
        if rest.startswith("args=") and "args" in adapter.keys:
            values["args"] = rest.removeprefix("args=")  # the rest of the spec, commas and all
            break
        item, _, rest = rest.partition(",")
        name, equals, value = item.partition("=")
        if not equals or not name or not value:
            raise WorkerSpecError(
                f"{kind} worker option {item!r} is not key=value; expected {spec_form(adapter)}"
            )
        if name not in adapter.keys:
            raise WorkerSpecError(
                f"{kind} worker option {name!r} is unknown; accepted: "
                f"{', '.join(sorted(adapter.keys))}"
            )
        if name in values:
            raise WorkerSpecError(f"{kind} worker option {name!r} is given twice")
        values[name] = value
    max_turns = values.pop("max_turns", None)
    if max_turns is not None and not _INT.fullmatch(max_turns):
        raise WorkerSpecError(f"{kind} worker max_turns must be an integer >= 1, got {max_turns!r}")
    promise = values.pop("promise", "DONE")
    if not _PROMISE.fullmatch(promise):
        raise WorkerSpecError(
            f"{kind} worker promise must be 1-64 letters, digits, '_', '.' or '-', got {promise!r}"
        )
    try:
        args = tuple(shlex.split(values.pop("args", "")))
    except ValueError as exc:
        raise WorkerSpecError(f"{kind} worker args cannot be split: {exc}") from None
    tools = values.pop("allowed_tools", None)
    options = CliOptions(
        kind=kind,
        model=values.pop("model", None),
        max_turns=int(max_turns) if max_turns else None,
        permission_mode=values.pop("permission_mode", None),
        allowed_tools=tuple(t for t in tools.split("+") if t) if tools else (),
        binary=values.pop("binary", None),
        args=args,
        workspace=values.pop("workspace", None),
        promise=promise,
        account=values.pop("account", None),
        extra=values,
    )
    adapter.check(options)
    return options


# --- usage and rate limits ---------------------------------------------------------------

#: Claude Code's older result text: ``Claude AI usage limit reached|1735689600``.
_PIPE_EPOCH = re.compile(r"usage limit reached\|(\d{9,11})", re.IGNORECASE)
#: Newer wording: ``5-hour limit reached ∙ resets 3pm`` / ``... resets 3:30pm (Europe/Paris)``
#: / ``resets at 2026-01-01T15:00:00Z``.
_RESETS = re.compile(
    r"limit (?:reached|exceeded).*?resets?(?: at)?\s+"
    r"(?P<when>\d{4}-\d\d-\d\dT[\d:.]+(?:Z|[+-]\d\d:?\d\d)?|\d{1,2}(?::\d\d)?\s*(?:am|pm)?)",
    re.IGNORECASE | re.DOTALL,
)
_LIMIT_WORDS = re.compile(
    r"usage limit|rate[ _]limit|rate_limit_error|\b429\b|too many requests|"
    r"quota exceeded|resource_exhausted|limit reached",
    re.IGNORECASE,
)
_RETRY_AFTER = re.compile(
    r"retry[- _]after\"?\s*[:=]?\s*\"?(\d+(?:\.\d+)?)\s*(ms|s|seconds?)?|"
    r"(?:try again|retry) in (\d+(?:\.\d+)?)\s*(ms|s|seconds?|m|minutes?|h|hours?)",
    re.IGNORECASE,
)


def _clock_time(when: str, now: float) -> float | None:
    """``3pm`` / ``3:30pm`` / ``15:00`` (local time): the next such time after ``now``."""
    match = re.fullmatch(r"(\d{1,2})(?::(\d\d))?\s*(am|pm)?", when.strip(), re.IGNORECASE)
    if match is None:
        return None
    hour, minute = int(match[1]), int(match[2] or 0)
    if match[3]:
        if not 1 <= hour <= 12:
            return None
        hour = hour % 12 + (12 if match[3].lower() == "pm" else 0)
    if hour > 23 or minute > 59:
        return None
    local = time.localtime(now)
    target = time.mktime((*local[:3], hour, minute, 0, 0, 0, -1))
    return target if target > now else target + 86400


def _iso_time(when: str) -> float | None:
    try:
        return datetime.fromisoformat(when.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def detect_limit(text: str, *, now: float | None = None) -> UsageLimit | None:
    """A usage or rate limit in ``text`` (a CLI's result or error), or ``None``.

    Forms (documented in docs/agent-clis.md): Claude Code's ``Claude AI usage limit
    reached|<epoch>``; ``... limit reached ... resets <time>`` (a clock time, local, or an ISO
    time); an HTTP 429 / ``rate_limit_error`` / "too many requests" / quota message, with a
    ``retry-after`` or "try again in N s" if given. ``until`` is ``None`` when no time is
    given: the caller backs off.
    """
    now = time.time() if now is None else now
    reason = " ".join(text.split())[:200]
    match = _PIPE_EPOCH.search(text)
    if match is not None:
        return UsageLimit(until=float(match[1]), reason="usage limit reached")
    match = _RESETS.search(text)
    if match is not None:
        when = match["when"]
        until = _iso_time(when) if "T" in when else _clock_time(when, now)
        return UsageLimit(until=until, reason=reason)
    if not _LIMIT_WORDS.search(text):
        return None
    match = _RETRY_AFTER.search(text)
    if match is not None:
        amount = float(match[1] or match[3])
        unit = (match[2] or match[4] or "s").lower()
        scale = {"ms": 0.001, "m": 60.0, "h": 3600.0}.get(unit[:1] if unit != "ms" else "ms", 1.0)
        if unit.startswith("min"):
            scale = 60.0
        return UsageLimit(until=now + amount * scale, reason=reason)
    return UsageLimit(until=None, reason=reason)
