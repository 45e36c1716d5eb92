"""The ``aider`` worker kind: aider (PyPI ``aider-chat``).

Spec: ``aider[:model=NAME,binary=PATH,workspace=DIR,promise=WORD,account=NAME,backoff=SECONDS,
args=...]``. The endpoint and key come from the environment (``OPENAI_API_BASE``,
``OPENAI_API_KEY``, ...), as aider reads them.

Invocation: ``aider --message-file /dev/stdin`` with the prompt on stdin and the switches that
make it unattended and plain (``--yes-always --no-pretty --no-stream --no-fancy-input``) and
quiet (``--no-analytics --no-check-update --no-show-release-notes --no-detect-urls``). aider
commits its edits itself (its default), which the loop counts as progress.

aider has no machine-readable output and no session ids: the reply, tokens and cost are read
from its plain text (``Tokens: ... sent, ... received. Cost: $... message, $... session.``),
and its session is the workspace's chat history file (``.aider.chat.history.md``), which an
``inherit`` round after the first restores (``--restore-chat-history``). Details and limits:
docs/agent-clis.md.
"""

from __future__ import annotations

import re
from typing import ClassVar

import attrs

from ._cli_adapter import (
    COMMON_KEYS,
    AgentStep,
    CliAdapter,
    CliOutcome,
    CliRound,
    CliStreamParser,
    UsageLimit,
    detect_limit,
)
from ._cli_worker import cli_worker_kind

__all__ = ["KIND", "AiderAdapter", "parse_token_count"]

#: aider's session: the chat history file it keeps in the workspace (its default name).
CHAT_HISTORY = ".aider.chat.history.md"
_TOKENS = re.compile(r"^Tokens: (?P<sent>[0-9.]+[kM]?) sent(?P<rest>.*?) received\.")
_CACHE_WRITE = re.compile(r", ([0-9.]+[kM]?) cache write")
_CACHE_HIT = re.compile(r", ([0-9.]+[kM]?) cache hit")
_RECEIVED = re.compile(r", ([0-9.]+[kM]?)$")
_COST = re.compile(r"Cost: \$(?P<message>[0-9.]+) message, \$(?P<session>[0-9.]+) session\.")
#: An error aider reports and gives up on (it retries some itself first): litellm's exception.
#: Only litellm's: a reply that quotes a ``TypeError: ...`` is the model's words.
_ERROR = re.compile(r"^litellm\.(?P<name>[A-Za-z]*Error): (?P<message>.*)$")
#: Lines aider prints around the model's answer (not part of the reply).
_CHATTER = (
    "Aider v",
    "Main model:",
    "Weak model:",
    "Editor model:",
    "Model:",
    "Git repo:",
    "Repo-map:",
    "Added ",
    "Restored previous conversation history",
    "Applied edit to ",
    "Commit ",
    "Tokens: ",
    "Retrying in ",
    "Use /help",
    "Update git ",
    "Analytics have been",
    "You can skip this check",
    "Warning: ",
    "https://aider.chat",
)


def parse_token_count(text: str) -> int:
    """aider's rounded counts: ``950``, ``1.2k``, ``12k``, ``1.5M``."""
    scale = {"k": 1_000, "M": 1_000_000}.get(text[-1:], 1)
    number = text[:-1] if scale != 1 else text
    return round(float(number) * scale)


def _tokens_in(match: re.Match[str] | None) -> int:
    return parse_token_count(match[1]) if match else 0


class _AiderStream(CliStreamParser):
    def __init__(self) -> None:
        self.lines: list[str] = []
        #: The run's counts so far (summed over aider's "Tokens:" lines) and its session.
        self.counted = CliOutcome(session_id=CHAT_HISTORY)
        self.answered = False
        self.error: str | None = None
        self.reply: str = ""
        #: An error message goes on until a blank line or aider's own next line.
        self.in_error = False

    def feed(self, line: str) -> list[AgentStep]:
        line = line.rstrip("\r")
        if self.in_error and self.error is not None:
            if line.strip() and not line.startswith((*_CHATTER, "The API provider")):
                self.error = f"{self.error} {line.strip()}"
                return []
            self.in_error = False
        tokens = _TOKENS.match(line)
        if tokens is not None:
            self._count(tokens, line)
            self.reply = self._answer()
            self.lines.clear()
            return []
        error = _ERROR.match(line)
        if error is not None:
            self.error = line.strip()
            self.in_error = True
            return []
        if line.startswith("Applied edit to "):
            return [AgentStep(tool="edit", detail=line.removeprefix("Applied edit to ")[:120])]
        if line.startswith("Commit ") and len(line.split()) > 1:
            return [AgentStep(tool="commit", detail=line.removeprefix("Commit ")[:120])]
        self.lines.append(line)
        return []

    def _count(self, match: re.Match[str], line: str) -> None:
        rest = match["rest"]
        cache_read = _tokens_in(_CACHE_HIT.search(rest))
        # aider's "sent" counts cached prompt tokens too; the outcome keeps them apart.
        sent = max(0, parse_token_count(match["sent"]) - cache_read)
        cost = _COST.search(line)
        counted = self.counted
        self.counted = attrs.evolve(
            counted,
            input_tokens=counted.input_tokens + sent,
            output_tokens=counted.output_tokens + _tokens_in(_RECEIVED.search(rest)),
            cache_read_tokens=counted.cache_read_tokens + cache_read,
            cache_write_tokens=counted.cache_write_tokens + _tokens_in(_CACHE_WRITE.search(rest)),
            # The session is this run of aider.
            cost_usd=float(cost["session"]) if cost is not None else counted.cost_usd,
        )
        self.answered = True
        self.error = None  # an error before an answer was retried successfully

    def _answer(self) -> str:
        """The model's words since the last of aider's own lines."""
        start = 0
        for index, line in enumerate(self.lines):
            if line.startswith(_CHATTER):
                start = index + 1
        return "\n".join(self.lines[start:]).strip()

    def finish(self, returncode: int, stderr: str) -> CliOutcome:
        counted = attrs.evolve(self.counted, reply=self.reply)
        if self.error is None and returncode == 0 and self.answered:
            return counted
        error = self.error
        if error is None:
            tail = stderr.strip()[-500:] or "\n".join(self.lines[-5:]).strip()
            error = (
                f"aider exited with code {returncode}"
                if returncode != 0
                else "aider finished without an answer"
            ) + (f": {tail}" if tail else "")
        limit: UsageLimit | None = detect_limit(error)
        return attrs.evolve(counted, is_error=True, error=error, limit=limit)


class AiderAdapter(CliAdapter):
    kind: ClassVar[str] = "aider"
    binary: ClassVar[str] = "aider"
    install: ClassVar[str] = "pip install aider-chat (or: pipx install aider-chat)"
    #: No max_turns, permission_mode or allowed_tools: aider asks nothing with --yes-always
    #: and has no tool list.
    keys: ClassVar[frozenset[str]] = (
        COMMON_KEYS - {"max_turns", "permission_mode", "allowed_tools"}
    ) | {"backoff"}
    account_env: ClassVar[tuple[str, ...]] = (
        "OPENAI_API_KEY",
        "OPENAI_API_BASE",
        "ANTHROPIC_API_KEY",
        "GEMINI_API_KEY",
        "AIDER_MODEL",
    )

    final_args: ClassVar[tuple[str, ...]] = ("--message-file", "/dev/stdin")

    def leading_args(self, round: CliRound) -> list[str]:
        return [
            "--yes-always",
            "--no-pretty",
            "--no-stream",
            "--no-fancy-input",
            "--no-analytics",
            "--no-check-update",
            "--no-show-release-notes",
            "--no-detect-urls",
            "--no-suggest-shell-commands",
            "--chat-history-file",
            CHAT_HISTORY,
        ]

    def switches(self, round: CliRound) -> list[str]:
        return ["--restore-chat-history"] if round.resume else []

    def environment(self, round: CliRound) -> dict[str, str]:
        # litellm (inside aider) would fetch its model price list at start otherwise.
        return {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}

    def parser(self) -> CliStreamParser:
        return _AiderStream()


KIND = cli_worker_kind(AiderAdapter())
