"""The ``|loop ...|`` activation syntax: find it, parse it, or say exactly what is wrong.

Pure Python, no trio. As docs/rolebox-lessons.md (W5) asks, nothing is guessed: a value that
cannot be used raises :class:`LoopSyntaxError` naming the bad part and what is accepted, and
the documented forms (``|loop:3,mode=fresh|``, ``|loop:iterations=3,mode=inherit|``,
``|loop:,fresh|``) mean what they say.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from .._util import did_you_mean
from ..errors import LoopSyntaxError
from ._model import DEFAULT_ROUNDS, LoopSpec, Mode

__all__ = ["ParsedLoop", "parse_loop"]

_KEYS = ("iterations", "mode", "objective", "stale_rounds", "until")
_MODES: dict[str, Mode] = {
    **dict.fromkeys(("inherit", "on", "true"), "inherit"),
    **dict.fromkeys(("fresh", "no-inherit", "off", "false"), "fresh"),
}
# `|loop` at a line start, not followed by a name character (so `|loopy|` is just text).
_ACTIVATION = re.compile(r"^[ \t]*\|loop(?![A-Za-z0-9_-])", re.MULTILINE)
_DIGITS = re.compile(r"[0-9]+")
# `|loop:N key=value ...|`: the colon form's count followed by space-separated keys.
_COUNT_THEN_KEYS = re.compile(r"[ \t]*([0-9]+)[ \t]+(?=[A-Za-z_]+[ \t]*=)")
# `|loop:N,mode|` and its parts (`|loop:N|`, `|loop:,mode|`, `|loop:|`): what
# _colon_items makes of it, matched at once (an activation is parsed per loop started).
_PLAIN_COLON = re.compile(r"[ \t]*([0-9]*)[ \t]*(?:,[ \t]*([A-Za-z-]*)[ \t]*)?\|")
# Longer numbers are garbage, and would not survive int()/str() under Python's digit limit.
_MAX_DIGITS = 18
_WS = " \t"

_FORMS = "|loop|, |loop:N|, |loop:N key=value ...| or |loop key=value ...|"
_USE_ITERATIONS = (
    "use a whole number of at least 1 (at most the node's max_rounds, 50 unless configured)"
)
_USE_MODE = "use inherit (or on, true) or fresh (or no-inherit, off, false)"
_USE_KEYS = "accepted keys are " + ", ".join(_KEYS)


class ParsedLoop(msgspec.Struct, frozen=True, kw_only=True):
    """What an activation asked for, validated; ``spec()`` turns it into a :class:`LoopSpec`."""

    task: str
    rounds: int
    mode: Mode
    objective: str | None
    #: ``stale_rounds=N``: the spec's ``stale_rounds_limit`` (None: not given).
    stale_rounds_limit: int | None = None
    #: ``until="CMD"``: the loop's check (docs/loops.md, Verified completion).
    until: str | None = None

    def spec(self, **options: Any) -> LoopSpec:
        if self.stale_rounds_limit is not None:
            options.setdefault("stale_rounds_limit", self.stale_rounds_limit)
        if self.until is not None:
            options.setdefault("until", self.until)
        return LoopSpec(
            task=self.task, rounds=self.rounds, mode=self.mode, objective=self.objective, **options
        )


def _show(value: str) -> str:
    # Quote the user's text in messages, but never echo a novel back.
    return f'"{value if len(value) <= 40 else value[:40] + "..."}"'


class _Line:
    """A cursor over the activation line, just after ``|loop``."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0

    def peek(self) -> str:
        return self.text[self.i : self.i + 1]  # "" at the end of the line

    def skip_ws(self) -> None:
        text, i, end = self.text, self.i, len(self.text)
        while i < end and text[i] in _WS:
            i += 1
        self.i = i

    def run(self, stops: str) -> str:
        """The text from the cursor up to (not including) the first of ``stops`` or the end
        of the line; the cursor moves there. (Indexing, not :meth:`peek`: every activation
        is parsed once per loop started.)"""
        text, start, end = self.text, self.i, len(self.text)
        i = start
        while i < end and text[i] not in stops:
            i += 1
        self.i = i
        return text[start:i]

    def need_more(self) -> None:
        if not self.peek():
            raise LoopSyntaxError(f"the activation has no closing |: write {_FORMS}")

    def quoted(self) -> str:
        """A ``"..."`` string starting at the cursor; ``\\"`` and ``\\\\`` are escapes."""
        out: list[str] = []
        self.i += 1
        while (ch := self.peek()) != '"':
            if not ch:
                raise LoopSyntaxError('a quoted value has no closing ": end it with "')
            if ch == "\\" and self.text[self.i + 1 : self.i + 2] in ('"', "\\"):
                self.i += 1
                ch = self.peek()
            out.append(ch)
            self.i += 1
        self.i += 1
        return "".join(out)


# An item is (key, value); key None for a positional item.
_Item = tuple[str | None, str]


def _colon_items(line: _Line) -> list[_Item]:
    items: list[_Item] = []
    while True:
        line.skip_ws()
        key: str | None = None
        if line.peek() == '"':
            value = line.quoted()
        else:
            head = line.run(",|=")
            if line.peek() == "=":
                key = head.strip(_WS)
                line.i += 1
                line.skip_ws()
                value = line.quoted() if line.peek() == '"' else line.run(",|").strip(_WS)
            else:
                value = head.strip(_WS)
        line.skip_ws()
        line.need_more()
        if line.peek() not in ",|":
            raise LoopSyntaxError(
                f"unexpected {_show(line.run(',|'))} after a quoted value: "
                "separate items with commas"
            )
        items.append((key, value))
        line.i += 1
        if line.text[line.i - 1] == "|":
            return items


def _space_items(line: _Line) -> list[_Item]:
    items: list[_Item] = []
    while True:
        line.skip_ws()
        line.need_more()
        if line.peek() == "|":
            line.i += 1
            return items
        key = line.run(_WS + "=|")
        if line.peek() != "=":
            raise LoopSyntaxError(
                f"{_show(key)} is not key=value: in the space form write "
                f'|loop iterations=N mode=fresh objective="..."|; {_USE_KEYS}'
            )
        line.i += 1
        value = line.quoted() if line.peek() == '"' else line.run(_WS + "|")
        if line.peek() and line.peek() not in _WS + "|":
            raise LoopSyntaxError(
                f"unexpected {_show(line.run(_WS + '|'))} after the quoted value of {key}: "
                "separate key=value items with spaces"
            )
        items.append((key, value))


def _collect(items: list[_Item]) -> dict[str, str]:
    """Map items to keys, rejecting unknown keys, duplicates and misplaced positionals."""
    given: dict[str, str] = {}
    positional = 0
    seen_named = False
    for named, value in items:
        if named is None:
            if seen_named:
                raise LoopSyntaxError(
                    f"positional item {_show(value)} comes after a key=value item: "
                    "put iterations and mode first, or name them (iterations=N, mode=...)"
                )
            positional += 1
            if positional > 2:
                raise LoopSyntaxError(
                    f"too many positional items ({_show(value)} is the third): "
                    "at most two, iterations then mode, e.g. |loop:3,fresh|"
                )
            if not value:
                continue  # an empty positional item means "the default"
            key = _KEYS[positional - 1]
        else:
            seen_named, key = True, named
            if key not in _KEYS:
                hint = did_you_mean(key, _KEYS)
                raise LoopSyntaxError(f"unknown key {_show(key)}{hint}: {_USE_KEYS}")
        if key in given:
            raise LoopSyntaxError(
                f"{key} is given twice ({_show(given[key])} and {_show(value)}): give it once"
            )
        given[key] = value
    return given


def _rounds(raw: str) -> int:
    if not _DIGITS.fullmatch(raw):
        # The first positional item is always iterations; say so when a mode was put there.
        hint = f" (a mode alone is written |loop:,{raw}|)" if raw.lower() in _MODES else ""
        raise LoopSyntaxError(
            f"iterations {_show(raw)} is not a whole number: {_USE_ITERATIONS}{hint}"
        )
    if len(raw.lstrip("0")) > _MAX_DIGITS:
        raise LoopSyntaxError(f"iterations {_show(raw)} is far too large: {_USE_ITERATIONS}")
    rounds = int(raw)
    if rounds < 1:
        raise LoopSyntaxError(f"iterations {_show(raw)} is below 1: {_USE_ITERATIONS}")
    return rounds


def _stale_rounds(raw: str) -> int:
    if not _DIGITS.fullmatch(raw) or len(raw.lstrip("0")) > _MAX_DIGITS or int(raw) < 1:
        raise LoopSyntaxError(
            f"stale_rounds {_show(raw)} is not a whole number >= 1: how many rounds in a "
            "row with unchanged output end the loop (no_progress)"
        )
    return int(raw)


def _until(raw: str) -> str:
    until = raw.strip()
    if not until:
        raise LoopSyntaxError('the until check is empty: write until="pytest -q"')
    return until


def parse_loop(text: str) -> ParsedLoop:
    """Parse the first ``|loop...|`` activation in ``text``; the rest of the text is the task.

    Raises :class:`LoopSyntaxError` (and nothing else) for any text it cannot accept.
    """
    match = _ACTIVATION.search(text)
    if match is None:
        raise LoopSyntaxError(f"no loop activation: the text must start a line with {_FORMS}")
    line = _Line((text[match.end() :].splitlines() or [""])[0])  # an activation is one line
    opener = line.peek()
    line.i += 1
    if opener == "|":
        items: list[_Item] = []
    elif opener == ":":
        plain = _PLAIN_COLON.match(line.text, line.i)
        lead = None if plain else _COUNT_THEN_KEYS.match(line.text, line.i)
        if plain is not None:
            line.i = plain.end()
            items = [(None, plain[1])] if plain[2] is None else [(None, plain[1]), (None, plain[2])]
        elif lead is not None:  # |loop:10 objective="..."|: a count, then the space form
            line.i = lead.end()
            items = [(None, lead[1]), *_space_items(line)]
        else:
            items = _colon_items(line)
    elif opener and opener in _WS:
        items = _space_items(line)
    else:
        line.i -= 1
        line.need_more()
        raise LoopSyntaxError(
            f"unexpected {_show(line.run(_WS + '|'))} after |loop: write {_FORMS}"
        )
    given = _collect(items)

    requested = DEFAULT_ROUNDS
    if "iterations" in given:
        requested = _rounds(given["iterations"])
    mode: Mode = "inherit"
    if "mode" in given:
        raw_mode = given["mode"]
        if raw_mode.lower() not in _MODES:
            raise LoopSyntaxError(f"unknown mode {_show(raw_mode)}: {_USE_MODE}")
        mode = _MODES[raw_mode.lower()]
    objective: str | None = None
    if "objective" in given:
        objective = given["objective"].strip()
        if not objective:
            raise LoopSyntaxError('the objective is empty: write objective="what done means"')

    stale_rounds = _stale_rounds(given["stale_rounds"]) if "stale_rounds" in given else None
    until = _until(given["until"]) if "until" in given else None

    # The activation (with its indentation) is cut out; text before it is part of the task.
    after = text[match.end() + line.i :].lstrip(_WS)
    task = (text[: match.start()] + after).strip()
    if not task:
        raise LoopSyntaxError(
            "the task is empty: write it after the closing | or on the following lines"
        )
    # The node's cap (max_rounds) is checked at admission, where it is known.
    return ParsedLoop(
        task=task,
        rounds=requested,
        mode=mode,
        objective=objective,
        stale_rounds_limit=stale_rounds,
        until=until,
    )
