"""The ``codex`` worker kind: OpenAI's Codex CLI (npm ``@openai/codex``).

Spec: ``codex[:model=NAME,sandbox=MODE,binary=PATH,workspace=DIR,promise=WORD,account=NAME,
backoff=SECONDS,args=...]``.

Invocation: ``codex exec --json`` with the prompt on stdin (``-``); an ``inherit`` round after
the first runs ``codex exec resume ID``. The default ``sandbox=bypass`` runs without approvals or
Codex's own sandbox (``--dangerously-bypass-approvals-and-sandbox``), so an unattended round can
edit, run commands and commit (Codex's ``workspace-write`` sandbox keeps ``.git`` read-only);
``sandbox=workspace-write`` / ``read-only`` / ``danger-full-access`` choose Codex's sandbox with
approvals off. ``OPENAI_BASE_URL`` in the environment (never a spec key: specs are stored) points
Codex at another
Responses API endpoint through a model provider of its own, keyed by ``OPENAI_API_KEY``.
Analytics, feedback and the plugin sync are switched off. What is read from which event is in
docs/agent-clis.md.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import attrs
import msgspec

from ._cli_adapter import (
    COMMON_KEYS,
    AgentStep,
    CliAdapter,
    CliOutcome,
    CliRound,
    CliStreamParser,
    JsonLinesParser,
    UsageLimit,
    count_of,
    detect_limit,
    short_detail,
)
from ._cli_worker import cli_worker_kind

__all__ = ["KIND", "CodexAdapter"]

SANDBOXES = ("bypass", "workspace-write", "read-only", "danger-full-access")
#: The provider the worker defines when a base URL is given (``-c model_providers.<id>...``).
PROVIDER = "loopactors"
#: "You've hit your usage limit. ... try again at 4:40 AM." (ChatGPT plans, codex-rs).
_TRY_AGAIN_AT = re.compile(r"try again at ([0-9]{1,2}(?::[0-9]{2})?\s*[AaPp][Mm])")


def _toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def codex_home() -> Path:
    """Where Codex keeps its sessions: ``CODEX_HOME``, else ``~/.codex``."""
    home = os.environ.get("CODEX_HOME")
    return Path(home) if home else Path.home() / ".codex"


class _TokenInfo(msgspec.Struct):
    last_token_usage: dict[str, Any] | None = None


class _TokenCount(msgspec.Struct):
    info: _TokenInfo | None = None


class _RolloutLine(msgspec.Struct):
    """A line of a session's rollout file; read: a ``token_count`` event's usage."""

    payload: _TokenCount | None = None


_rollout_line = msgspec.json.Decoder(_RolloutLine)


def round_usage(thread_id: str, home: Path | None = None) -> dict[str, int] | None:
    """The usage of the last turn of session ``thread_id``, from its rollout file.

    ``codex exec --json`` reports the session's running total on ``turn.completed``, so a
    resumed session would count its earlier rounds again; the rollout's ``token_count``
    events carry each model call's own usage (``last_token_usage``): their sum since the last
    ``task_started`` is this run's. ``None`` when the file cannot be found or read.
    """
    root = (home or codex_home()) / "sessions"
    try:
        files = sorted(root.glob(f"*/*/*/rollout-*-{thread_id}.jsonl"))
    except OSError:
        return None
    if not files:
        return None
    total: dict[str, int] = {}
    try:
        with files[-1].open(encoding="utf-8") as lines:
            for line in lines:
                if '"task_started"' in line:
                    total = {}
                    continue
                if '"token_count"' not in line:
                    continue
                try:
                    payload = _rollout_line.decode(line).payload
                except msgspec.ValidationError:
                    continue  # "token_count" in another line, of another shape
                last = payload.info.last_token_usage if payload and payload.info else None
                for key, value in (last or {}).items():
                    total[key] = total.get(key, 0) + count_of(value)
    except (OSError, ValueError, msgspec.DecodeError):  # a line that is not JSON
        return None
    return total


class _Change(msgspec.Struct):
    path: str | None = None


class _Item(msgspec.Struct):
    """A thread item: ``agent_message`` (text), ``command_execution`` (command),
    ``file_change`` (changes), ``mcp_tool_call`` (server, tool), ``web_search`` (query), ..."""

    type: str = ""
    text: str | None = None
    command: str | None = None
    changes: list[_Change] = []
    server: str = ""
    tool: str = ""
    query: str | None = None


class _Event(msgspec.Struct, tag_field="type"):
    pass


class _ThreadStarted(_Event, tag="thread.started"):
    thread_id: str


class _TurnCompleted(_Event, tag="turn.completed"):
    usage: dict[str, Any]


class _Message(msgspec.Struct):
    message: str | None = None


class _TurnFailed(_Event, tag="turn.failed"):
    error: _Message | None = None


class _Error(_Event, tag="error"):
    message: str


class _ItemStarted(_Event, tag="item.started"):
    item: _Item


class _ItemCompleted(_Event, tag="item.completed"):
    item: _Item


_Events = _ThreadStarted | _TurnCompleted | _TurnFailed | _Error | _ItemStarted | _ItemCompleted


class _CodexStream(JsonLinesParser[_Events]):
    events = msgspec.json.Decoder(_Events)

    def __init__(self) -> None:
        super().__init__()
        self.thread_id: str | None = None
        self.reply: str | None = None
        self.usage: dict[str, Any] | None = None
        self.failure: str | None = None
        self.errors: list[str] = []
        #: The model answered at least once. A run that failed on its first request (a usage
        #: limit) reports no session: the re-run starts the round afresh instead of resuming
        #: a session that holds only the prompt.
        self.answered = False

    def event(self, event: _Events) -> list[AgentStep]:
        match event:
            case _ThreadStarted(thread_id=thread_id):
                self.thread_id = thread_id
            case _TurnCompleted(usage=usage):
                self.usage = usage
                self.answered = True
            case _TurnFailed(error=error):
                self.failure = (error.message if error is not None else None) or "turn failed"
            case _Error(message=message):
                self.errors.append(message)
            case _ItemStarted(item=item):
                return self._item(True, item)
            case _ItemCompleted(item=item):
                return self._item(False, item)
        return []

    def _item(self, started: bool, item: _Item) -> list[AgentStep]:
        if item.type != "error":
            self.answered = True
        if item.type == "agent_message" and not started:
            self.reply = item.text or ""
            return []
        if not started and item.type != "file_change":
            return []  # a command shows once, when it starts
        if item.type == "command_execution":
            return [AgentStep(tool="command", detail=short_detail(item.command or ""))]
        if item.type == "file_change" and not started:
            paths = [change.path for change in item.changes if change.path]
            return [AgentStep(tool="file_change", detail=short_detail(" ".join(paths)))]
        if item.type == "mcp_tool_call":
            name = f"{item.server}.{item.tool}".strip(".")
            return [AgentStep(tool=name or "mcp_tool_call")]
        if item.type == "web_search":
            return [AgentStep(tool="web_search", detail=short_detail(item.query or ""))]
        return []

    def finish(self, returncode: int, stderr: str) -> CliOutcome:
        usage = self.usage
        if usage is not None and self.thread_id is not None:
            own = round_usage(self.thread_id)
            if own:
                usage = own
        usage = usage or {}
        cached = count_of(usage.get("cached_input_tokens"))
        counted = CliOutcome(
            reply=self.reply or "",
            # OpenAI counts cached input inside input_tokens; the outcome keeps them apart.
            input_tokens=max(0, count_of(usage.get("input_tokens")) - cached),
            output_tokens=count_of(usage.get("output_tokens")),
            cache_read_tokens=cached,
            cache_write_tokens=count_of(usage.get("cache_write_input_tokens")),
            session_id=self.thread_id if self.answered else None,
        )
        if self.failure is None and returncode == 0 and self.reply is not None:
            return counted
        error = self.failure or (self.errors[-1] if self.errors else None)
        if error is None:
            ended = (
                f"exited with code {returncode}" if returncode != 0 else "finished without a reply"
            )
            error = self.unreported_error("codex", stderr, f"codex {ended}")
        return attrs.evolve(counted, is_error=True, error=error, limit=codex_limit(error))


def codex_limit(text: str, *, now: float | None = None) -> UsageLimit | None:
    """A usage or rate limit in a Codex error message (forms in docs/agent-clis.md)."""
    if "usage limit" in text.lower():
        match = _TRY_AGAIN_AT.search(text)
        if match is not None:
            # detect_limit reads "limit reached ... resets <clock time>" as the next such time.
            return detect_limit(f"usage limit reached, resets {match[1]}", now=now) or (
                UsageLimit(until=None, reason=short_detail(text))
            )
        return UsageLimit(until=None, reason=short_detail(text))
    return detect_limit(text, now=now)


class CodexAdapter(CliAdapter):
    kind: ClassVar[str] = "codex"
    binary: ClassVar[str] = "codex"
    install: ClassVar[str] = "npm install -g @openai/codex"
    #: No max_turns, permission_mode or allowed_tools: Codex has no such switches (sandbox=).
    keys: ClassVar[frozenset[str]] = (
        COMMON_KEYS - {"max_turns", "permission_mode", "allowed_tools"}
    ) | {
        "backoff",
        "sandbox",
    }
    strip_env: ClassVar[tuple[str, ...]] = ("CODEX_SANDBOX", "CODEX_SANDBOX_NETWORK_DISABLED")
    account_env: ClassVar[tuple[str, ...]] = (
        "OPENAI_API_KEY",
        "CODEX_API_KEY",
        "OPENAI_BASE_URL",
        "CODEX_HOME",
    )

    choices: ClassVar[Mapping[str, tuple[str, ...]]] = {"sandbox": SANDBOXES}
    final_args: ClassVar[tuple[str, ...]] = ("-",)  # the prompt comes on stdin

    def leading_args(self, round: CliRound) -> list[str]:
        argv = ["exec"]
        if round.resume:
            argv += ["resume", round.resume]
        argv += ["--json", "--skip-git-repo-check"]
        sandbox = round.options.extra.get("sandbox", "bypass")
        if sandbox == "bypass":
            argv.append("--dangerously-bypass-approvals-and-sandbox")
        else:
            argv += ["-c", f"sandbox_mode={_toml_string(sandbox)}"]
            argv += ["-c", 'approval_policy="never"']
        # Nothing but the model endpoint: no analytics, feedback upload or plugin sync.
        argv += ["-c", "analytics.enabled=false", "-c", "feedback.enabled=false"]
        argv += ["--disable", "plugins", "--disable", "remote_plugin"]
        base_url = os.environ.get("OPENAI_BASE_URL")
        if base_url:
            table = f"model_providers.{PROVIDER}"
            argv += ["-c", f"model_provider={_toml_string(PROVIDER)}"]
            argv += ["-c", f"{table}.name={_toml_string(PROVIDER)}"]
            argv += ["-c", f"{table}.base_url={_toml_string(base_url)}"]
            argv += ["-c", f'{table}.env_key="OPENAI_API_KEY"']
            argv += ["-c", f'{table}.wire_api="responses"']
        return argv

    def parser(self) -> CliStreamParser:
        return _CodexStream()


KIND = cli_worker_kind(CodexAdapter(), reports_cost=False)  # docs/agent-clis.md, Codex
