from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopactors.ledger import (
    calculate_similarity,
    error_signature,
    format_number,
    prune_stack_trace,
)
from loopactors.ledger._js import WHITESPACE, encode_json, js_string, trim


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            "TypeError: cannot read x at /home/u/app/foo.js:12:5",
            "TypeError: cannot read x at foo.js",
        ),
        ("C:\\Users\\dev\\proj\\src\\main.ts:10:5 - error TS2322", "main.ts - error TS2322"),
        ("Error: connect ECONNREFUSED 127.0.0.1:5432", "Error: connect ECONNREFUSED #.#.#.#"),
        ("[2024-01-15T10:23:45.123Z] Timeout after 3000ms", "[<ts>] Timeout after 3000ms"),
        ("at 2024-01-15 10:23:45 done", "at <ts> done"),
        ("Error:42 at line 10:30", "Error at line #"),
        ("C:\\temp\\", "C:\\temp\\"),
        ("abc0x1F and 0xdeadBEEF", "abc<addr> and <addr>"),
        ("E11000 v8 x86_64 3000ms", "E11000 v8 x86_64 3000ms"),
        ("\n  \n  first line  \nsecond", "first line"),
        ("   \n\t", ""),
        ("", ""),
        ("a   b\t\tc", "a b c"),
        # Quirks kept: URL scheme glued by the drive form, and/or glued.
        ("https://example.com/api/v1/users?id=42 failed", "httpusers?id=# failed"),
        ("read and/or write", "read andor write"),
    ],
)
def test_error_signature_examples(error: str, expected: str) -> None:
    assert error_signature(error) == expected


def test_signature_js_whitespace_and_ascii_classes() -> None:
    # U+FEFF is JS whitespace; U+0085 and U+001C are not (Python's strip would take them).
    assert error_signature("\ufeff x \ufeff") == "x"
    assert error_signature("\x85x\x1c") == "\x85x\x1c"
    assert error_signature("a\u3000\u00a0b") == "a b"
    # Only LF splits lines; CR stays and is whitespace.
    assert error_signature("a\rb") == "a b"
    # Non-ASCII digits are not \d, and é is not a word character for \b.
    assert error_signature("code \u0663\u0664") == "code \u0663\u0664"
    assert error_signature("é42é") == "é#é"
    assert error_signature("port:\u0665") == "port:\u0665"


def test_similarity_examples() -> None:
    assert calculate_similarity("ABC", "abc") == 1
    assert calculate_similarity("", "x") == 0
    assert calculate_similarity("", "") == 1
    assert calculate_similarity("try 1", "try 2") == 0.4
    assert (
        calculate_similarity(
            "Error: connect ECONNREFUSED 127.0.0.1:5432",
            "Error: connection refused on 127.0.0.1:5432",
        )
        == 0.68
    )


def test_similarity_uses_utf16_code_units() -> None:
    assert calculate_similarity("a😀b", "a😀c") == 0.3333333333333333
    # Final sigma: JS toLowerCase maps word-final Σ to ς.
    assert calculate_similarity("ΑΣ", "ας") == 1


@given(st.text(), st.text())
def test_similarity_is_symmetric_and_bounded(a: str, b: str) -> None:
    s = calculate_similarity(a, b)
    assert 0 <= s <= 1
    assert s == calculate_similarity(b, a)


def test_prune_stack_trace() -> None:
    trace = "\n".join(f"line {i}" for i in range(20))
    assert prune_stack_trace(trace, 5) == (
        "line 0\nline 1\nline 2\nline 3\nline 4\n  \u2026 (15 more lines pruned)"
    )
    assert prune_stack_trace("  a\nb  ", 2) == "a\nb"
    assert prune_stack_trace("  a\nb  \nc", 2) == "  a\nb\n  \u2026 (1 more line pruned)"
    # Quirk kept: the empty line after a trailing LF counts.
    assert prune_stack_trace("a\nb\nc\n", 3) == "a\nb\nc\n  \u2026 (1 more line pruned)"
    assert prune_stack_trace("\ufeffx\ufeff", 8) == "x"


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1500.0, "1500"),
        (100, "100"),
        (-0.0, "0"),
        (0.1 + 0.2, "0.30000000000000004"),
        (1e21, "1e+21"),
        (123456789012345680000.0, "123456789012345680000"),
        (1e-7, "1e-7"),
        (1.5e-7, "1.5e-7"),
        (0.000001, "0.000001"),
        (2**60, "1152921504606847000"),
        (-2.5, "-2.5"),
        (float("nan"), "NaN"),
        (float("inf"), "Infinity"),
        (float("-inf"), "-Infinity"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
    ],
)
def test_format_number(value: float, text: str) -> None:
    assert format_number(value) == text


def test_js_string_and_trim() -> None:
    assert [js_string(v) for v in (None, True, "0.85", 95.0)] == ["null", "true", "0.85", "95"]
    assert trim(WHITESPACE + "x" + WHITESPACE) == "x"
    assert trim("\x1cx\x85") == "\x1cx\x85"


def test_encode_json_is_json_stringify() -> None:
    value = {"a": [], "b": {"c": [1, 2.0]}, "d": {}, "e": 'é\n"', "f": float("inf")}
    assert encode_json(value) == (
        '{\n  "a": [],\n  "b": {\n    "c": [\n      1,\n      2\n    ]\n  },\n'
        '  "d": {},\n  "e": "é\\n\\"",\n  "f": null\n}'
    )
    assert encode_json({"a": [1, None, 1e21]}, indent=None) == '{"a":[1,null,1e+21]}'
