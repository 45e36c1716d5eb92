"""What a line typed into the REPL asks for. Pure, no trio: parsed here, acted on in _repl."""

from __future__ import annotations

import shlex

import attrs

from .._util import did_you_mean
from ..errors import LoopSyntaxError
from ..loops import parse_loop

__all__ = ["COMMANDS", "Command", "help_text", "parse_line"]

#: Slash commands, their arguments, and what they do (the text of /help).
COMMANDS: dict[str, tuple[str, str]] = {
    "/stop-loop": ("[ID]", "stop a loop now (the current one when no ID is given)"),
    "/pause": ("[ID]", "pause after the round in flight"),
    "/resume": ("[ID]", "resume a paused loop"),
    "/status": ("[ID]", "one loop's state (the current one), or every loop's"),
    "/loops": ("", "the loops in the store, newest first"),
    "/history": ("ID", "the rounds of a loop"),
    "/output": ("ID ROUND", "the whole output of one round"),
    "/worker": ("[SPEC]", "show or set the worker of new loops (scripted, command:ARGV, ...)"),
    "/code": (
        "use SLUG [REPO] | status|pause|resume|stop|handoff [SLUG]",
        "choose a code loop, or act on it (set one up with `loopactors code init`)",
    ),
    "/loop": ("[continuous]", "run one round of the chosen code loop (or until a gate stops it)"),
    "/help": ("", "this help"),
    "/quit": ("", "leave (Ctrl-D too)"),
}

#: Plain words people say to a running loop, as the reference's users do.
WORDS = {
    "pause": "/pause",
    "continue": "/resume",
    "resume": "/resume",
    "stop": "/stop-loop",
    "status": "/status",
}

_ARITY = {"/history": 1, "/output": 2}


@attrs.frozen
class Command:
    """``name`` is a slash command, ``start`` (a ``|loop|`` line) or ``empty``."""

    name: str
    args: tuple[str, ...] = ()
    text: str = ""


def parse_line(line: str) -> Command:
    """The command a line asks for; :class:`LoopSyntaxError` says what is wrong and how to
    say it instead."""
    text = line.strip()
    if not text:
        return Command("empty")
    if text.startswith("|loop"):
        parse_loop(text)  # refuse bad |loop| text here, with the parser's own message
        return Command("start", text=text)
    word = text.lower()
    if word in WORDS:
        return Command(WORDS[word])
    if not text.startswith("/"):
        hint = did_you_mean(word, [*WORDS, *COMMANDS])
        raise LoopSyntaxError(
            f"{_head(text)!r} is not a command{hint}: start a loop with |loop:N| task, "
            "or type /help for the commands"
        )
    try:
        name, *args = shlex.split(text)
    except ValueError as exc:
        raise LoopSyntaxError(f"cannot read {_head(text)!r}: {exc}") from None
    if name == "/worker":
        return Command(name, (text[len("/worker") :].strip(),) if args else ())
    if name not in COMMANDS:
        raise LoopSyntaxError(
            f"unknown command {name}{did_you_mean(name, COMMANDS)}; the commands are "
            f"{', '.join(COMMANDS)} (see /help)"
        )
    if name == "/code":
        return _code_command(args)
    if name == "/loop":
        if args not in ([], ["continuous"]):
            raise LoopSyntaxError("usage: /loop [continuous]")
        return Command(name, tuple(args))
    want = _ARITY.get(name)
    usage = f"{name} {COMMANDS[name][0]}".strip()
    if want is not None and len(args) != want:
        raise LoopSyntaxError(f"usage: {usage}")
    if want is None and len(args) > (1 if COMMANDS[name][0] else 0):
        raise LoopSyntaxError(f"usage: {usage}")
    if name == "/output" and not (args[1].isascii() and args[1].isdigit()):
        raise LoopSyntaxError(f"ROUND must be a round number, got {args[1]!r}; usage: {usage}")
    return Command(name, tuple(args))


_CODE_ACTIONS = ("status", "pause", "resume", "stop", "handoff")


def _code_command(args: list[str]) -> Command:
    usage = f"usage: /code {COMMANDS['/code'][0]}"
    if not args:
        raise LoopSyntaxError(usage)
    action, rest = args[0], args[1:]
    if action == "use" and 1 <= len(rest) <= 2:
        return Command("/code", tuple(args))
    if action in _CODE_ACTIONS and len(rest) <= 1:
        return Command("/code", tuple(args))
    raise LoopSyntaxError(usage)


def help_text() -> str:
    lines = ["|loop:N[,mode]| TASK   start a loop (mode inherit or fresh)"]
    lines += [f"{f'{name} {args}'.strip():<22} {what}" for name, (args, what) in COMMANDS.items()]
    lines.append("pause, continue, stop, status   act on the current loop")
    return "\n".join(lines)


def _head(text: str) -> str:
    return text if len(text) <= 40 else text[:37] + "..."
