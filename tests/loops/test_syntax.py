"""The ``|loop ...|`` activation syntax: every accepted form, every rejection, and a property
that nothing but a valid ParsedLoop or a LoopSyntaxError ever comes out (rolebox's W5)."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from loopactors.errors import LoopSyntaxError
from loopactors.loops import _syntax
from loopactors.loops._model import DEFAULT_ROUNDS, LoopSpec, Mode
from loopactors.loops._syntax import ParsedLoop, parse_loop

# (activation line, rounds, mode, objective)
ACCEPTED: list[tuple[str, int, Mode, str | None]] = [
    ("|loop|", DEFAULT_ROUNDS, "inherit", None),
    ("|loop:|", DEFAULT_ROUNDS, "inherit", None),
    ("|loop:,|", DEFAULT_ROUNDS, "inherit", None),
    ("|loop:3|", 3, "inherit", None),
    ("|loop:007|", 7, "inherit", None),
    ("|loop: 3 , fresh |", 3, "fresh", None),
    ("|loop:3,fresh|", 3, "fresh", None),
    ("|loop:3,FRESH|", 3, "fresh", None),
    ("|loop:3,no-inherit|", 3, "fresh", None),
    ("|loop:3,No-Inherit|", 3, "fresh", None),
    ("|loop:3,off|", 3, "fresh", None),
    ("|loop:3,false|", 3, "fresh", None),
    ("|loop:3,inherit|", 3, "inherit", None),
    ("|loop:3,on|", 3, "inherit", None),
    ("|loop:3,TRUE|", 3, "inherit", None),
    ("|loop:3,InHeRiT|", 3, "inherit", None),
    ("|loop:3,mode=fresh|", 3, "fresh", None),
    ("|loop:3, mode = OFF|", 3, "fresh", None),
    ("|loop:iterations=3,mode=inherit|", 3, "inherit", None),
    ("|loop:mode=fresh,iterations=4|", 4, "fresh", None),
    ("|loop:,fresh|", DEFAULT_ROUNDS, "fresh", None),
    ("|loop:,mode=fresh|", DEFAULT_ROUNDS, "fresh", None),
    ("|loop:,,iterations=2|", 2, "inherit", None),
    ('|loop:"3",fresh|', 3, "fresh", None),
    ("|loop:2,objective=ship it|", 2, "inherit", "ship it"),
    ('|loop:2,objective="ship, it | now"|', 2, "inherit", "ship, it | now"),
    ("|loop:1|", 1, "inherit", None),
    ("|loop:50|", 50, "inherit", None),
    ("|loop |", DEFAULT_ROUNDS, "inherit", None),
    ("|loop iterations=3 mode=fresh|", 3, "fresh", None),
    ("|loop iterations=7|", 7, "inherit", None),
    ("|loop mode=Off|", DEFAULT_ROUNDS, "fresh", None),
    ('|loop iterations=3 mode=fresh objective="ship it"|', 3, "fresh", "ship it"),
    ("|loop\titerations=3\tobjective=ship|", 3, "inherit", "ship"),
    ('|loop objective="say \\"hi\\" \\\\ bye"|', DEFAULT_ROUNDS, "inherit", 'say "hi" \\ bye'),
    ('|loop objective="a|b" mode=fresh|', DEFAULT_ROUNDS, "fresh", "a|b"),
    ("|loop objective=x=y|", DEFAULT_ROUNDS, "inherit", "x=y"),
    ("  |loop:3|", 3, "inherit", None),
    ("\t|loop:3|", 3, "inherit", None),
]


@pytest.mark.parametrize(("line", "rounds", "mode", "objective"), ACCEPTED)
def test_accepted_forms(line: str, rounds: int, mode: Mode, objective: str | None) -> None:
    parsed = parse_loop(f"{line} write the report")
    assert parsed == ParsedLoop(
        task="write the report",
        rounds=rounds,
        mode=mode,
        objective=objective,
    )


@pytest.mark.parametrize(
    ("line", "requested"),
    [("|loop:51|", 51), ("|loop:99|", 99), ("|loop iterations=200|", 200), ("|loop:0200|", 200)],
)
def test_the_parser_keeps_any_count_the_node_checks_the_cap(line: str, requested: int) -> None:
    # Never clamped: the node's max_rounds refuses or admits the count as asked.
    assert parse_loop(f"{line} go").rounds == requested


def test_w5_regressions() -> None:
    # Each of these was silently misread by the reference.
    for text in ("|loop:abc| t", "|loop:1e3| t"):
        with pytest.raises(LoopSyntaxError, match="not a whole number"):
            parse_loop(text)
    assert parse_loop("|loop:3,mode=fresh| t").mode == "fresh"
    both = parse_loop("|loop:iterations=3,mode=inherit| t")
    assert (both.rounds, both.mode) == (3, "inherit")
    empty_first = parse_loop("|loop:,fresh| t")
    assert (empty_first.rounds, empty_first.mode) == (DEFAULT_ROUNDS, "fresh")


def test_text_before_the_activation_line_is_kept() -> None:
    parsed = parse_loop("Context first.\nMore context.\n|loop:2| do the thing\nand this")
    assert parsed.task == "Context first.\nMore context.\ndo the thing\nand this"
    assert parsed.rounds == 2


def test_multi_line_task_and_crlf() -> None:
    parsed = parse_loop("|loop:,fresh|\r\n  line one\r\nline two  \n")
    assert parsed.task == "line one\r\nline two"
    parsed = parse_loop("|loop:2,fresh|\n\nfirst\n\nsecond\n")
    assert parsed.task == "first\n\nsecond"


def test_first_activation_wins_and_later_ones_stay_in_the_task() -> None:
    parsed = parse_loop("|loopy| not this\n|loop:2| a\n|loop:9| b")
    assert parsed.rounds == 2
    assert parsed.task == "|loopy| not this\na\n|loop:9| b"


@pytest.mark.parametrize(
    "text",
    [
        "do it |loop:3|",
        "|loopy| do it",
        "|looping 3| do it",
        "|loop-x| do it",
        "|LOOP:3| do it",
        "x|loop| do it",
        "",
        "no activation here",
    ],
)
def test_not_an_activation(text: str) -> None:
    with pytest.raises(LoopSyntaxError, match=r"must start a line with \|loop\|"):
        parse_loop(text)


# (text, fragments the message must contain: the bad part and what is accepted)
REJECTED: list[tuple[str, tuple[str, ...]]] = [
    ("|loop:abc| t", ('iterations "abc" is not a whole number', "at least 1", "max_rounds")),
    ("|loop:1e3| t", ('"1e3"', "whole number")),
    ("|loop:2.5| t", ('"2.5"', "whole number")),
    ("|loop:fresh| t", ('iterations "fresh" is not a whole number', "|loop:,fresh|")),
    ("|loop:-1| t", ('"-1"', "whole number")),
    ("|loop:+3| t", ('"+3"', "whole number")),
    ("|loop:3 fresh| t", ('"3 fresh"', "whole number")),
    ("|loop:٣| t", ('"٣"', "whole number")),
    ("|loop:0| t", ('iterations "0" is below 1', "at least 1")),
    ("|loop iterations=000| t", ('"000" is below 1',)),
    ("|loop iterations=-5| t", ('"-5"', "whole number")),
    ("|loop iterations= mode=fresh| t", ('iterations ""', "whole number")),
    ("|loop:iterations=| t", ('iterations ""', "whole number")),
    ("|loop:9999999999999999999999| t", ('"9999999999999999999999"', "too large", "max_rounds")),
    ("|loop:3,xyz| t", ('unknown mode "xyz"', "inherit (or on, true)", "no-inherit")),
    ("|loop mode=sideways| t", ('unknown mode "sideways"', "fresh")),
    ("|loop:3,mode=| t", ('unknown mode ""', "inherit")),
    ("|loop speed=3| t", ('unknown key "speed"', "iterations, mode, objective")),
    ("|loop:3,speed=fast| t", ('unknown key "speed"', "iterations, mode, objective")),
    ("|loop:3,stale_round=2| t", ('unknown key "stale_round" (did you mean stale_rounds?)',)),
    ("|loop:3,mdoe=fresh| t", ('unknown key "mdoe" (did you mean mode?)',)),
    ("|loop:=3| t", ('unknown key ""', "iterations, mode, objective")),
    ("|loop Mode=fresh| t", ('unknown key "Mode"',)),
    ("|loop:3,iterations=4| t", ("iterations is given twice", '"3"', '"4"')),
    ("|loop iterations=3 iterations=3| t", ("iterations is given twice",)),
    ("|loop:3,fresh,mode=off| t", ("mode is given twice",)),
    ("|loop mode=on mode=off| t", ("mode is given twice",)),
    ("|loop objective=a objective=b| t", ("objective is given twice",)),
    ("|loop:3,fresh,x| t", ('"x" is the third', "at most two", "iterations then mode")),
    ("|loop:,,,| t", ("the third", "at most two")),
    ("|loop:mode=fresh,3| t", ('positional item "3" comes after a key=value', "iterations=N")),
    ("|loop 3| t", ('"3" is not key=value', "|loop iterations=N")),
    ("|loop iterations=3 fresh| t", ('"fresh" is not key=value',)),
    ("|loop:3|", ("task is empty",)),
    ("|loop:3|   \n  \n", ("task is empty",)),
    ('|loop objective=""| t', ("objective is empty", "objective=")),
    ('|loop:objective="  "| t', ("objective is empty",)),
    ("|loop:3 t", ("no closing |", "|loop:N|")),
    ("|loop:3\n| t", ("no closing |",)),
    ("|loop iterations=3", ("no closing |",)),
    ("|loop", ("no closing |",)),
    ("|loop=3| t", ('unexpected "=3"', "|loop key=value ...|")),
    ('|loop objective="ship it| t', ('quoted value has no closing "',)),
    ('|loop:"3"x| t', ('unexpected "x" after a quoted value', "commas")),
    ('|loop objective="a"b| t', ('unexpected "b" after the quoted value of objective', "spaces")),
]


@pytest.mark.parametrize(("text", "fragments"), REJECTED)
def test_rejected(text: str, fragments: tuple[str, ...]) -> None:
    with pytest.raises(LoopSyntaxError) as info:
        parse_loop(text)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message


def test_long_bad_values_are_shortened_in_messages() -> None:
    with pytest.raises(LoopSyntaxError) as info:
        parse_loop(f"|loop:{'x' * 5000}| t")
    assert len(str(info.value)) < 200


def test_spec_carries_the_parse_and_the_options() -> None:
    parsed = parse_loop('|loop:99,fresh,objective="done"| task')
    spec = parsed.spec(worker="command:./agent.sh", round_timeout=5.0)
    assert spec == LoopSpec(
        task="task",
        rounds=99,
        mode="fresh",
        objective="done",
        worker="command:./agent.sh",
        round_timeout=5.0,
    )
    assert parse_loop("|loop| t").spec() == LoopSpec(task="t")


def _check(text: str) -> None:
    try:
        parsed = parse_loop(text)
    except LoopSyntaxError:
        return
    assert isinstance(parsed, ParsedLoop)
    assert parsed.rounds >= 1
    assert parsed.mode in ("inherit", "fresh")
    assert parsed.task


@settings(max_examples=500)
@given(st.text())
@example("|loop:" + "9" * 5000 + "| t")
@example('|loop objective="\\')
@example("|loop:\\|")
def test_arbitrary_text_only_parses_or_raises(text: str) -> None:
    _check(text)


_VALID = [line for line, *_ in ACCEPTED]
_ALPHABET = st.sampled_from(list('|:,= \t\n\r"\\0123456789-+.eabcdfilmnoprstuxyzAFIMO٣'))


@settings(max_examples=1000)
@given(
    base=st.sampled_from(_VALID),
    edits=st.lists(
        st.tuples(
            st.sampled_from(["insert", "delete", "replace"]),
            st.integers(min_value=0, max_value=80),
            _ALPHABET,
        ),
        max_size=6,
    ),
    prefix=st.sampled_from(["", "context\n", "  ", "x "]),
    suffix=st.sampled_from([" task", "", "\nmore"]),
)
def test_mutated_activations_only_parse_or_raise(
    base: str, edits: list[tuple[str, int, str]], prefix: str, suffix: str
) -> None:
    text = base
    for op, where, ch in edits:
        at = where % (len(text) + 1)
        if op == "insert":
            text = text[:at] + ch + text[at:]
        elif op == "delete":
            text = text[:at] + text[at + 1 :]
        else:
            text = text[:at] + ch + text[at + 1 :]
    _check(prefix + text + suffix)


def test_a_count_then_space_keys() -> None:
    parsed = parse_loop('|loop:10 objective="all tests pass"| fix the failing tests')
    assert (parsed.rounds, parsed.mode, parsed.objective, parsed.task) == (
        10,
        "inherit",
        "all tests pass",
        "fix the failing tests",
    )
    assert parse_loop("|loop:2 mode=fresh| t").mode == "fresh"
    with pytest.raises(LoopSyntaxError, match="unknown key"):
        parse_loop("|loop:2 colour=red| t")


_BLANK = st.text(alphabet=" \t", max_size=2)


@given(
    _BLANK,
    st.sampled_from(["", "0", "5", "007", "12"]),
    _BLANK,
    st.none() | st.tuples(_BLANK, st.sampled_from(["", "fresh", "OFF", "no-inherit", "x"]), _BLANK),
)
def test_the_plain_colon_form_reads_as_the_item_parser_reads_it(
    before: str, count: str, after: str, mode: tuple[str, str, str] | None
) -> None:
    # parse_loop matches `|loop:N,mode|` with one pattern; it must agree with _colon_items.
    text = f":{before}{count}{after}" + ("" if mode is None else "," + "".join(mode)) + "|"
    plain = _syntax._PLAIN_COLON.match(text, 1)
    assert plain is not None
    line = _syntax._Line(text)
    line.i = 1
    items = _syntax._colon_items(line)
    expected = [(None, plain[1])] if plain[2] is None else [(None, plain[1]), (None, plain[2])]
    assert items == expected
    assert line.i == plain.end()


def test_stale_rounds_sets_the_no_progress_limit() -> None:
    for text in (
        "|loop:5 stale_rounds=4| t",
        "|loop:5,stale_rounds=4| t",
        "|loop stale_rounds=4| t",
    ):
        parsed = parse_loop(text)
        assert parsed.stale_rounds_limit == 4
        assert parsed.spec().stale_rounds_limit == 4
        assert parsed.spec(stale_rounds_limit=7).stale_rounds_limit == 7  # options win
    assert parse_loop("|loop:5| t").stale_rounds_limit is None
    assert (
        parse_loop("|loop:5| t").spec().stale_rounds_limit == LoopSpec(task="t").stale_rounds_limit
    )
    for bad in ("0", "x", "-1", "2.5", ""):
        with pytest.raises(LoopSyntaxError) as info:
            parse_loop(f"|loop stale_rounds={bad}| t")
        assert f'stale_rounds "{bad}" is not a whole number >= 1' in str(info.value)
    with pytest.raises(LoopSyntaxError, match="objective, stale_rounds"):
        parse_loop("|loop stale_round=3| t")
