"""The CLI adapter interface's pure parts: the shared spec parser and limit detection."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import ClassVar

import pytest

from loopactors.errors import WorkerSpecError
from loopactors.workers._cli_adapter import (
    COMMON_KEYS,
    CliAdapter,
    CliCommand,
    CliOutcome,
    CliRound,
    CliStreamParser,
    detect_limit,
    parse_cli_options,
)


class _Adapter(CliAdapter):
    kind: ClassVar[str] = "toy"
    binary: ClassVar[str] = "toy"
    install: ClassVar[str] = "npm install -g toy"
    keys: ClassVar[frozenset[str]] = COMMON_KEYS | {"sandbox"}
    permission_modes: ClassVar[tuple[str, ...]] = ("ask", "trust")
    choices: ClassVar[Mapping[str, tuple[str, ...]]] = {"sandbox": ("on", "off")}
    final_args: ClassVar[tuple[str, ...]] = ("--prompt-from", "stdin")

    def leading_args(self, round: CliRound) -> list[str]:
        return ["run", "--json"]

    def switches(self, round: CliRound) -> list[str]:
        return ["--mode", round.options.permission_mode or "ask"]

    def environment(self, round: CliRound) -> dict[str, str]:
        return {"TOY_QUIET": "1"}

    def parser(self) -> CliStreamParser:
        raise NotImplementedError


def test_options_parse_common_and_own_keys() -> None:
    options = parse_cli_options(
        _Adapter(),
        "model=m1,max_turns=7,allowed_tools=Edit+Bash,sandbox=on,args=--x 'a, b' --y",
    )
    assert options.model == "m1"
    assert options.max_turns == 7
    assert options.allowed_tools == ("Edit", "Bash")
    assert options.extra == {"sandbox": "on"}
    assert options.args == ("--x", "a, b", "--y")  # args takes the rest, commas and all
    assert options.promise == "DONE"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("colour=red", "unknown; accepted"),
        ("model", "not key=value"),
        ("model=a,model=b", "given twice"),
        ("max_turns=0", "max_turns must be an integer >= 1"),
        ("promise=two words", "promise must be"),
        ("args='open", "args cannot be split"),
    ],
)
def test_bad_options_are_refused_by_name(text: str, words: str) -> None:
    with pytest.raises(WorkerSpecError, match=words):
        parse_cli_options(_Adapter(), text)


def test_the_command_line_is_assembled_once_for_every_kind() -> None:
    adapter = _Adapter()
    options = parse_cli_options(adapter, "model=m1,permission_mode=trust,args=--x 'a b'")
    command = adapter.command(CliRound("fix it", options, resume=None, workspace="/w"))
    assert command == CliCommand(
        argv=(
            *("toy", "run", "--json", "--model", "m1", "--mode", "trust", "--x", "a b"),
            *("--prompt-from", "stdin"),
        ),
        env={"TOY_QUIET": "1"},
        stdin=b"fix it",
    )
    bare = adapter.command(CliRound("p", parse_cli_options(adapter, ""), None, "/w"))
    assert "--model" not in bare.argv


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "permission_mode=yolo",
            "toy worker permission_mode 'yolo' is unknown; accepted: ask, trust",
        ),
        ("sandbox=maybe", "toy worker sandbox 'maybe' is unknown; accepted: on, off"),
    ],
)
def test_closed_choices_are_checked_by_the_base(text: str, message: str) -> None:
    adapter = _Adapter()
    with pytest.raises(WorkerSpecError, match=message):
        adapter.check(parse_cli_options(adapter, text))
    adapter.check(parse_cli_options(adapter, "permission_mode=ask,sandbox=off"))


def test_claude_pipe_epoch_limit() -> None:
    limit = detect_limit("Claude AI usage limit reached|1767225600")
    assert limit is not None
    assert limit.until == 1767225600.0


def test_resets_clock_time_is_the_next_such_time() -> None:
    now = time.mktime((2026, 1, 1, 14, 0, 0, 0, 0, -1))
    limit = detect_limit("5-hour limit reached ∙ resets 3pm", now=now)
    assert limit is not None
    assert limit.until == now + 3600
    limit = detect_limit("5-hour limit reached ∙ resets 1pm", now=now)
    assert limit is not None
    assert limit.until == now + 23 * 3600


def test_iso_reset_and_retry_after() -> None:
    limit = detect_limit("usage limit reached, resets at 2026-01-01T00:00:00Z")
    assert limit is not None
    assert limit.until == 1767225600.0
    limit = detect_limit('429 {"type":"rate_limit_error"} retry-after: 30', now=100.0)
    assert limit is not None
    assert limit.until == 130.0
    limit = detect_limit("Too many requests, try again in 2 minutes", now=0.0)
    assert limit is not None
    assert limit.until == 120.0
    limit = detect_limit("API Error: 429 rate_limit_error", now=0.0)
    assert limit is not None
    assert limit.until is None  # no time given: backoff


def test_other_errors_are_not_limits() -> None:
    assert detect_limit("API Error: 500 internal server error") is None
    assert CliOutcome(input_tokens=1, output_tokens=2, cache_read_tokens=3).tokens == 6
