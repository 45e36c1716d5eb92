"""Usage mistakes on the command line: a misspelt command or option says what was likely meant,
in the usage of the command it was given to (exit 64)."""

from __future__ import annotations

import pytest

from loopactors.cli import main
from loopactors.cli._commands import EXIT_USAGE


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["stauts"], "unknown command 'stauts' (did you mean status?); choose from 'demo', 'run',"),
        (["hsitory", "x"], "unknown command 'hsitory' (did you mean history?)"),
        (["status", "--conect", "ws://h:1"], "arguments: --conect (did you mean --connect?)"),
        (["run", "--wroker=scripted", "|loop:1| x"], "--wroker=scripted (did you mean --worker?)"),
        (["status", "--zzz"], "unrecognized arguments: --zzz"),
    ],
)  # fmt: skip
def test_a_misspelt_command_or_option_is_told_what_it_likely_meant(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err
    assert said in err
    assert "Traceback" not in err


def test_an_unknown_option_shows_its_commands_usage_not_the_top_level_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["status", "--conect", "ws://127.0.0.1:1"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("usage: loopactors status ")
    assert "loopactors status: error: unrecognized arguments: --conect" in err
    assert "COMMAND ..." not in err
