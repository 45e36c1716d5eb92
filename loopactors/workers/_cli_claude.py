"""The ``claude`` worker kind: Claude Code (npm ``@anthropic-ai/claude-code``).

Spec: ``claude[:model=NAME,max_turns=N,permission_mode=MODE,allowed_tools=A+B,binary=PATH,
workspace=DIR,promise=WORD,account=NAME,backoff=SECONDS,args=...]``.

Invocation: ``claude -p --output-format stream-json --verbose`` with the prompt on stdin,
``--resume ID`` for an ``inherit`` round after the first. Permissions default to
``bypassPermissions`` (an unattended round edits files and runs commands without a prompt);
Claude Code refuses that mode as root unless ``IS_SANDBOX=1`` is set, so as root the worker
sets it, and ``permission_mode=acceptEdits`` (edits without prompt, no shell commands unless
``allowed_tools`` lists them) is the choice for who does not want that. What is read from which
field of the stream is in docs/agent-clis.md.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

import msgspec

from ._cli_adapter import (
    COMMON_KEYS,
    AgentStep,
    CliAdapter,
    CliOptions,
    CliOutcome,
    CliRound,
    CliStreamParser,
    JsonLinesParser,
    UsageLimit,
    detect_limit,
    step_detail,
)
from ._cli_worker import cli_worker_kind

__all__ = ["KIND", "ClaudeAdapter"]

PERMISSION_MODES = ("acceptEdits", "auto", "bypassPermissions", "default", "dontAsk", "plan")
#: Claude Code's own switches for what a round does not need: non-essential traffic
#: (update checks, release notes, model lists), telemetry, error reports, auto-update and
#: the feedback command. Without them a round with a local endpoint still resolves and
#: calls the vendor's hosts. A user's own setting of any of them is kept.
QUIET_ENV = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_BUG_COMMAND": "1",
    "CLAUDE_CODE_ENABLE_TELEMETRY": "0",
}


class _Block(msgspec.Struct):
    """A block of an assistant message: ``tool_use`` (name, input), ``text``, others."""

    type: str = ""
    name: str | None = None
    input: Any = None
    text: str = ""


class _Message(msgspec.Struct):
    content: list[_Block] = []


class _Session(msgspec.Struct):
    """What every event carries (``system``, ``user``, ...): the session's id."""

    session_id: str | None = None


class _Event(_Session, tag_field="type"):
    pass


class _Assistant(_Event, tag="assistant"):
    message: _Message | None = None
    is_api_error_message: bool | None = None


class _Usage(msgspec.Struct):
    # A count left null reads as none: it must not cost the round its result.
    input_tokens: int | None = 0
    output_tokens: int | None = 0
    cache_read_input_tokens: int | None = 0
    cache_creation_input_tokens: int | None = 0


class _Result(_Event, tag="result"):
    subtype: str | None = None
    is_error: bool | None = None
    result: str | None = None
    total_cost_usd: float | None = None
    usage: _Usage | None = None
    errors: list[Any] | None = None
    api_error_status: int | None = None


class _ClaudeStream(JsonLinesParser[_Assistant | _Result]):
    # Not strict: a count written as 5.0 (or a number as a string) is still read.
    events = msgspec.json.Decoder(_Assistant | _Result, strict=False)
    others = msgspec.json.Decoder(_Session)

    def __init__(self) -> None:
        super().__init__()
        self.session_id: str | None = None
        self.result: _Result | None = None
        self.last_error_text: str | None = None

    def other(self, event: _Session) -> list[AgentStep]:
        self.session_id = event.session_id or self.session_id
        return []

    def event(self, event: _Assistant | _Result) -> list[AgentStep]:
        self.other(event)
        if isinstance(event, _Result):
            self.result = event
            return []
        steps = []
        for block in event.message.content if event.message is not None else ():
            if block.type == "tool_use" and block.name is not None:
                steps.append(AgentStep(tool=block.name, detail=step_detail(block.input)))
            elif block.type == "text" and event.is_api_error_message:
                self.last_error_text = block.text
        return steps

    def finish(self, returncode: int, stderr: str) -> CliOutcome:
        result = self.result
        if result is None:
            message = stderr or (
                f"unreadable output: {self.unreadable!r}" if self.unreadable else "no output"
            )
            return CliOutcome(
                session_id=self.session_id,
                is_error=True,
                error=f"claude exited with code {returncode} without a result: {message}",
                limit=detect_limit(message),
            )
        usage = result.usage or _Usage()
        cost = result.total_cost_usd
        reply = result.result or ""
        is_error = bool(result.is_error) or returncode != 0
        error: str | None = None
        limit: UsageLimit | None = None
        listed = "; ".join(e for e in result.errors or () if isinstance(e, str))
        if is_error:
            error = (
                reply
                or listed
                or self.last_error_text
                or stderr
                or f"claude reported {result.subtype}"
            )
            if returncode != 0 and stderr and stderr not in error:
                error = f"{error} ({stderr[-500:]})"
            limit = detect_limit(reply or error)
            if limit is None and result.api_error_status == 429:
                limit = UsageLimit(until=None, reason=error[:200])
        else:
            # Claude Code's subscription limit arrives as the whole result text.
            pipe = detect_limit(reply) if reply.startswith("Claude AI usage limit") else None
            limit = pipe
        return CliOutcome(
            reply=reply,
            input_tokens=max(0, usage.input_tokens or 0),
            output_tokens=max(0, usage.output_tokens or 0),
            cache_read_tokens=max(0, usage.cache_read_input_tokens or 0),
            cache_write_tokens=max(0, usage.cache_creation_input_tokens or 0),
            cost_usd=float(cost) if cost is not None and cost >= 0 else 0.0,
            session_id=result.session_id or self.session_id,
            is_error=is_error,
            error=error,
            limit=limit,
            session_missing=is_error and "No conversation found with session ID" in (error or ""),
        )


class ClaudeAdapter(CliAdapter):
    kind: ClassVar[str] = "claude"
    binary: ClassVar[str] = "claude"
    install: ClassVar[str] = "npm install -g @anthropic-ai/claude-code"
    keys: ClassVar[frozenset[str]] = COMMON_KEYS | {"backoff"}
    strip_env: ClassVar[tuple[str, ...]] = ()
    account_env: ClassVar[tuple[str, ...]] = (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
        "CLAUDE_CODE_OAUTH_TOKEN",
    )

    permission_modes: ClassVar[tuple[str, ...]] = PERMISSION_MODES
    #: ``total_cost_usd`` of a resumed session counts its earlier runs too.
    session_total_cost: ClassVar[bool] = True

    def leading_args(self, round: CliRound) -> list[str]:
        return ["-p", "--output-format", "stream-json", "--verbose"]

    def switches(self, round: CliRound) -> list[str]:
        options = round.options
        argv: list[str] = []
        if options.max_turns:
            argv += ["--max-turns", str(options.max_turns)]
        argv += ["--permission-mode", _mode(options)]
        if options.allowed_tools:
            argv += ["--allowedTools", *options.allowed_tools]
        if round.resume:
            argv += ["--resume", round.resume]
        return argv

    def environment(self, round: CliRound) -> dict[str, str]:
        env = {name: value for name, value in QUIET_ENV.items() if name not in os.environ}
        if _mode(round.options) == "bypassPermissions" and os.geteuid() == 0:
            # Claude Code refuses bypassPermissions as root outside a sandbox it knows of.
            env["IS_SANDBOX"] = "1"
        return env

    def parser(self) -> CliStreamParser:
        return _ClaudeStream()


def _mode(options: CliOptions) -> str:
    return options.permission_mode or "bypassPermissions"


KIND = cli_worker_kind(ClaudeAdapter())
