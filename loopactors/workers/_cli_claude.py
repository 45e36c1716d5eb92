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


def _int(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


class _ClaudeStream(JsonLinesParser):
    def __init__(self) -> None:
        super().__init__()
        self.session_id: str | None = None
        self.result: dict[str, Any] | None = None
        self.last_error_text: str | None = None

    def event(self, event: dict[str, Any]) -> list[AgentStep]:
        session = event.get("session_id")
        if isinstance(session, str) and session:
            self.session_id = session
        kind = event.get("type")
        if kind == "result":
            self.result = event
            return []
        if kind != "assistant":
            return []
        message = event.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        steps = []
        for block in content if isinstance(content, list) else ():
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use" and isinstance(block.get("name"), str):
                steps.append(AgentStep(tool=block["name"], detail=step_detail(block.get("input"))))
            elif block.get("type") == "text" and event.get("is_api_error_message"):
                self.last_error_text = str(block.get("text", ""))
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
        usage = result.get("usage") if isinstance(result.get("usage"), dict) else {}
        assert isinstance(usage, dict)
        cost = result.get("total_cost_usd")
        text = result.get("result")
        reply = text if isinstance(text, str) else ""
        session = result.get("session_id")
        is_error = bool(result.get("is_error")) or returncode != 0
        error: str | None = None
        limit: UsageLimit | None = None
        errors = result.get("errors")
        listed = (
            "; ".join(e for e in errors if isinstance(e, str)) if isinstance(errors, list) else ""
        )
        if is_error:
            subtype = result.get("subtype")
            error = (
                reply or listed or self.last_error_text or stderr or f"claude reported {subtype}"
            )
            if returncode != 0 and stderr and stderr not in error:
                error = f"{error} ({stderr[-500:]})"
            limit = detect_limit(reply or error)
            if limit is None and result.get("api_error_status") == 429:
                limit = UsageLimit(until=None, reason=error[:200])
        else:
            # Claude Code's subscription limit arrives as the whole result text.
            pipe = detect_limit(reply) if reply.startswith("Claude AI usage limit") else None
            limit = pipe
        return CliOutcome(
            reply=reply,
            input_tokens=_int(usage.get("input_tokens")),
            output_tokens=_int(usage.get("output_tokens")),
            cache_read_tokens=_int(usage.get("cache_read_input_tokens")),
            cache_write_tokens=_int(usage.get("cache_creation_input_tokens")),
            cost_usd=float(cost) if isinstance(cost, (int, float)) and cost >= 0 else 0.0,
            session_id=session if isinstance(session, str) and session else self.session_id,
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
