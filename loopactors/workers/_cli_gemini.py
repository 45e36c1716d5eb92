"""The ``gemini`` worker kind: Google's Gemini CLI (npm ``@google/gemini-cli``).

Spec: ``gemini[:model=NAME,permission_mode=MODE,allowed_tools=A+B,binary=PATH,workspace=DIR,
promise=WORD,account=NAME,backoff=SECONDS,args=...]``.

Invocation: ``gemini --output-format stream-json -p ""`` with the prompt on stdin (``-p`` is
appended to stdin), ``--resume ID`` for an ``inherit`` round after the first. The approval mode
defaults to ``yolo`` (an unattended round edits files and runs commands without a prompt);
``permission_mode=auto_edit`` approves edits only, ``plan`` is read-only. ``--skip-trust`` trusts
the workspace for the run (headless Gemini CLI refuses untrusted folders' settings otherwise).

The CLI reads settings files only, so the worker points ``GEMINI_CLI_SYSTEM_DEFAULTS_PATH``
(unless set) at a defaults file shipped here: usage statistics, telemetry and update checks
off; with ``GOOGLE_GEMINI_BASE_URL`` in the environment it also selects API-key auth,
because the CLI otherwise takes a base URL for a gateway login it cannot use headless. User
settings still win over these defaults. Fields read: docs/agent-clis.md.
"""

from __future__ import annotations

import os
import pwd
import re
import time
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
    step_detail,
)
from ._cli_worker import cli_worker_kind

__all__ = ["KIND", "GeminiAdapter", "gemini_limit"]

APPROVAL_MODES = ("yolo", "auto_edit", "plan", "default")
_SETTINGS = Path(__file__).with_name("gemini-settings")
#: The tool parameter that says most about a call (Gemini CLI's tools).
_DETAIL_FIELDS = ("file_path", "command", "pattern", "dir_path", "path", "url", "query")
#: "...\nSuggested retry after 3600s." / "Please retry in 37.5s" (Gemini API quota errors).
_RETRY_AFTER = re.compile(r"(?:Suggested retry after|Please retry in) ([0-9.]+)(ms|s)\b")
_QUOTA = re.compile(
    r"quota|RESOURCE_EXHAUSTED|rate limit|\b429\b|exhausted your capacity", re.IGNORECASE
)


def gemini_limit(text: str, *, now: float | None = None) -> UsageLimit | None:
    """A quota or rate limit in a Gemini CLI error (forms in docs/agent-clis.md)."""
    match = _RETRY_AFTER.search(text)
    if match is not None and _QUOTA.search(text):
        seconds = float(match[1]) / (1000.0 if match[2] == "ms" else 1.0)
        return UsageLimit(
            until=(time.time() if now is None else now) + seconds, reason=short_detail(text)
        )
    if _QUOTA.search(text):
        return detect_limit(text, now=now) or UsageLimit(until=None, reason=short_detail(text))
    return detect_limit(text, now=now)


class _Event(msgspec.Struct, tag_field="type"):
    pass


class _Init(_Event, tag="init"):
    session_id: str


class _Message(_Event, tag="message"):
    role: str | None = None
    content: str | None = None
    delta: bool | None = None


class _ToolUse(_Event, tag="tool_use"):
    tool_name: str
    parameters: Any = None


class _Error(_Event, tag="error"):
    severity: str | None = None
    message: str | None = None


class _Stats(msgspec.Struct):
    #: ``input`` is the uncached input; ``input_tokens`` includes the cached part.
    input: int | None = None
    # A count left null reads as none (_int): it must not cost the round its result.
    input_tokens: int | None = 0
    output_tokens: int | None = 0
    cached: int | None = 0


class _ResultError(msgspec.Struct):
    message: str | None = None


class _Result(_Event, tag="result"):
    status: str | None = None
    stats: _Stats | None = None
    error: _ResultError | None = None


_Events = _Init | _Message | _ToolUse | _Error | _Result


class _GeminiStream(JsonLinesParser[_Events]):
    events = msgspec.json.Decoder(_Events)

    def __init__(self) -> None:
        super().__init__()
        self.session_id: str | None = None
        self.reply: list[str] = []
        self.result: _Result | None = None
        self.errors: list[str] = []
        #: The model answered at least once: only then has the CLI kept a session to resume.
        self.answered = False

    def event(self, event: _Events) -> list[AgentStep]:
        match event:
            case _Init(session_id=session_id):
                self.session_id = session_id
            case _Message(role="assistant", content=str(content)):
                self.answered = True
                if not event.delta:
                    self.reply.clear()
                self.reply.append(content)
            case _ToolUse(tool_name=tool, parameters=parameters):
                self.reply.clear()  # the reply is what the agent says after its last tool call
                self.answered = True
                return [AgentStep(tool=tool, detail=step_detail(parameters, _DETAIL_FIELDS))]
            case _Error(severity="error", message=message):
                self.errors.append(message or "error")
            case _Result():
                self.result = event
        return []

    def finish(self, returncode: int, stderr: str) -> CliOutcome:
        result = self.result or _Result()
        stats = result.stats or _Stats()
        cached = count_of(stats.cached)
        counted = CliOutcome(
            reply="".join(self.reply),
            input_tokens=count_of(stats.input)
            if stats.input is not None
            else max(0, count_of(stats.input_tokens) - cached),
            output_tokens=count_of(stats.output_tokens),
            cache_read_tokens=cached,
            # A run that failed before the model answered left no session the CLI can resume.
            session_id=self.session_id if self.answered else None,
        )
        if self.result is not None and result.status == "success" and returncode == 0:
            return counted
        error = result.error.message if result.error is not None else None
        if not error and self.errors:
            error = self.errors[-1]
        if not error:
            ended = f"gemini exited with code {returncode} without a result"
            error = self.unreported_error("gemini", stderr, ended)
        return attrs.evolve(
            counted, is_error=True, error=str(error), limit=gemini_limit(str(error))
        )


class GeminiAdapter(CliAdapter):
    kind: ClassVar[str] = "gemini"
    binary: ClassVar[str] = "gemini"
    install: ClassVar[str] = "npm install -g @google/gemini-cli"
    #: No max_turns: the CLI has no switch for it (settings ``model.maxSessionTurns``).
    keys: ClassVar[frozenset[str]] = (COMMON_KEYS - {"max_turns"}) | {"backoff"}
    strip_env: ClassVar[tuple[str, ...]] = ("GEMINI_CLI", "SANDBOX")
    account_env: ClassVar[tuple[str, ...]] = (
        "GEMINI_API_KEY",
        "GOOGLE_API_KEY",
        "GOOGLE_GEMINI_BASE_URL",
        "GOOGLE_CLOUD_PROJECT",
    )

    permission_modes: ClassVar[tuple[str, ...]] = APPROVAL_MODES
    final_args: ClassVar[tuple[str, ...]] = ("--prompt", "")  # headless; prompt on stdin

    def leading_args(self, round: CliRound) -> list[str]:
        return ["--output-format", "stream-json", "--skip-trust"]

    def switches(self, round: CliRound) -> list[str]:
        options = round.options
        argv = ["--approval-mode", options.permission_mode or "yolo"]
        if options.allowed_tools:
            argv += ["--allowed-tools", ",".join(options.allowed_tools)]
        if round.resume:
            argv += ["--resume", round.resume]
        return argv

    def environment(self, round: CliRound) -> dict[str, str]:
        env: dict[str, str] = {}
        if "GEMINI_CLI_SYSTEM_DEFAULTS_PATH" not in os.environ:
            api_key = bool(os.environ.get("GOOGLE_GEMINI_BASE_URL"))
            defaults = "api-key.json" if api_key else "quiet.json"
            env["GEMINI_CLI_SYSTEM_DEFAULTS_PATH"] = str(_defaults_file(defaults))
            if api_key:
                env.setdefault("GEMINI_DEFAULT_AUTH_TYPE", "gemini-api-key")
        env.setdefault("GEMINI_TELEMETRY_ENABLED", "false")
        return env

    def parser(self) -> CliStreamParser:
        return _GeminiStream()


def _defaults_file(name: str) -> Path:
    """The shipped defaults file, or a copy the CLI accepts.

    Gemini CLI skips a system defaults file unless the file and every directory above it are
    owned by root and writable by nobody else. The copy in the caller's cache qualifies for
    root wherever the package lies (a checkout under /tmp, say); for other users neither does,
    and only the environment switches apply (docs/agent-clis.md).
    """
    shipped = _SETTINGS / name
    if _root_owned_and_closed(shipped):
        return shipped
    # The account's own home, not $HOME (which a sandbox or test may point anywhere).
    home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    cache = home / ".cache" / "loopactors" / "gemini-settings"
    copy = cache / name
    try:
        content = shipped.read_bytes()
        if not copy.exists() or copy.read_bytes() != content:
            cache.mkdir(parents=True, exist_ok=True)
            cache.chmod(0o755)
            partial = cache / f"{name}.partial"
            partial.write_bytes(content)
            partial.chmod(0o644)
            partial.replace(copy)
    except OSError:
        return shipped
    return copy


def _root_owned_and_closed(path: Path) -> bool:
    try:
        for part in (path, *path.parents):
            status = part.stat()
            if status.st_uid != 0 or status.st_mode & 0o022:
                return False
    except OSError:
        return False
    return True


KIND = cli_worker_kind(GeminiAdapter(), reports_cost=False)  # docs/agent-clis.md, Gemini
