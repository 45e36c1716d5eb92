"""Fuzzing the ``|loop|`` parser: random and mutated text either parses into a valid loop or
raises :class:`LoopSyntaxError` with a message; no other exception, ever.

tests/loops/test_syntax.py holds the properties; this suite throws more, and stranger, text
at the parser (whole-Unicode noise, spliced activations, byte-level damage). CI runs a short
version; ``just fuzz`` runs long (LOOPACTORS_FUZZ_EXAMPLES).
"""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from loopactors.errors import LoopSyntaxError
from loopactors.loops._syntax import ParsedLoop, parse_loop

EXAMPLES = int(os.environ.get("LOOPACTORS_FUZZ_EXAMPLES", "150"))

VALID = [
    "|loop| task",
    "|loop:3| task",
    "|loop:3,fresh| review this module",
    "|loop:5,inherit| go on",
    "|loop iterations=4 mode=fresh| t",
    '|loop:2 objective="all tests pass"| fix',
    "|loop:50| many",
    "|loop:1,fresh objective=done| x",
]
PIECES = [
    "|",
    "loop",
    ":",
    ",",
    "=",
    " ",
    '"',
    "\\",
    "\n",
    "\r\n",
    "\t",
    "fresh",
    "inherit",
    "iterations",
    "mode",
    "objective",
    "0",
    "1",
    "50",
    "51",
    "-1",
    "1e3",
    "٣",
    "\x00",
    "\u200b",
    "\uff4c\uff4f\uff4f\uff50",
    "\uff5c",
]  # fmt: skip  (fullwidth look-alikes)


def check(text: str) -> None:
    try:
        parsed = parse_loop(text)
    except LoopSyntaxError as exc:
        message = str(exc)
    else:
        assert isinstance(parsed, ParsedLoop)
        assert 1 <= parsed.rounds < 10**18
        assert parsed.mode in ("inherit", "fresh")
        assert parsed.task.strip()
        assert parsed.spec().rounds == parsed.rounds
        return
    assert message.strip(), repr(text)  # always says what was wrong


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.text(max_size=300))
def test_any_unicode_text(text: str) -> None:
    check(text)


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=30).map("".join))
def test_text_made_of_the_grammar_s_own_pieces(text: str) -> None:
    check(text)


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    first=st.sampled_from(VALID),
    second=st.sampled_from(VALID),
    cut_a=st.integers(min_value=0, max_value=60),
    cut_b=st.integers(min_value=0, max_value=60),
)
def test_two_activations_spliced(first: str, second: str, cut_a: int, cut_b: int) -> None:
    check(first[:cut_a] + second[cut_b:])


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    base=st.sampled_from(VALID),
    damage=st.lists(
        st.tuples(st.integers(min_value=0, max_value=200), st.integers(min_value=0, max_value=255)),
        min_size=1,
        max_size=6,
    ),
)
def test_byte_level_damage(base: str, damage: list[tuple[int, int]]) -> None:
    data = bytearray(base.encode())
    for where, byte in damage:
        data[where % len(data)] = byte
    check(data.decode("utf-8", errors="surrogateescape"))
