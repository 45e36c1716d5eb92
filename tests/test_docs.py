"""The documentation, checked against the code (rolebox's W23: its docs drifted from it).

Tables and examples that state what the code does are read from the pages and compared
with what it does: the `|loop|` forms and their rejections, the configuration keys and
defaults, the exit codes, every `loopactors ...` command line shown, and the Python blocks'
imports. A change to either side that the other does not follow fails here.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from loopactors.cli import EXIT_STDOUT_CLOSED
from loopactors.cli._commands import EXIT_ABORTED, EXIT_LEASE_LOST, EXIT_USAGE, build_parser
from loopactors.cli._follow import PHASE_EXIT
from loopactors.codeloop._cli import build_parser as build_code_parser
from loopactors.errors import LoopSyntaxError
from loopactors.gateway import GatewaySettings
from loopactors.loops import parse_loop
from loopactors.runtime import (
    BreakerSettings,
    BudgetSettings,
    NotifySettings,
    RuntimeConfig,
)

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def page(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def table_rows(text: str, header: str) -> list[list[str]]:
    """The cells of the Markdown table whose header row starts with ``header``."""
    lines = text.splitlines()
    return rows_after(lines, next(i for i, line in enumerate(lines) if line.startswith(header)))


def rows_after(lines: list[str], header_at: int) -> list[list[str]]:
    """The cells of the table whose header row is ``lines[header_at]``."""
    rows = []
    for line in lines[header_at + 2 :]:
        if not line.startswith("|"):
            break
        cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
        rows.append([cell.strip().replace("\\|", "|") for cell in cells])
    assert rows, f"no rows under {lines[header_at]!r}"
    return rows


def code_spans(cell: str) -> list[str]:
    return re.findall(r"`([^`]*)`", cell)


# -- docs/loops.md: the |loop| syntax -------------------------------------------------------


def accepted_forms() -> Iterator[Any]:
    for text, rounds, mode, objective in table_rows(page("docs/loops.md"), "| text | rounds"):
        examples = code_spans(text)
        if "on its own line" in text:
            examples = [examples[0] + "\ntask"]
        for example in examples:
            yield pytest.param(example, rounds, mode, objective, id=example)


@pytest.mark.parametrize(("text", "rounds", "mode", "objective"), list(accepted_forms()))
def test_each_documented_form_parses_as_documented(
    text: str, rounds: str, mode: str, objective: str
) -> None:
    parsed = parse_loop(text)
    assert parsed.rounds == int(rounds.split(",", maxsplit=1)[0])
    assert parsed.mode == mode
    assert parsed.objective == (code_spans(objective)[0] if objective else None)
    assert parsed.task == "task"
    for claim in code_spans(rounds):  # e.g. `clamped=True`, `requested_rounds=99`
        name, value = claim.split("=")
        assert str(getattr(parsed, name)) == value


def rejections() -> Iterator[Any]:
    for text, message in table_rows(page("docs/loops.md"), "| input | message"):
        expected = code_spans(message)[0]
        if text == "no activation":
            yield pytest.param("just a task", expected, id=text)
            continue
        for example in code_spans(text):
            line = example if "no task" in text or "task" in example else f"{example} task"
            yield pytest.param(line, expected, id=example)


@pytest.mark.parametrize(("text", "message"), list(rejections()))
def test_each_documented_rejection_says_what_is_documented(text: str, message: str) -> None:
    with pytest.raises(LoopSyntaxError) as raised:
        parse_loop(text)
    # The documented message, up to an elision ("...") and with the example's own value.
    documented = message.split("...", maxsplit=1)[0].strip()
    quoted = re.search(r'"([^"]*)"', documented)
    actual = str(raised.value)
    if quoted is not None:
        value = re.search(r'"([^"]*)"', actual)
        assert value is not None, actual
        documented = documented.replace(quoted.group(0), value.group(0), 1)
    assert actual.startswith(documented), (actual, documented)


# -- docs/configuration.md: keys and defaults -------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "first_key", "not_in_table"),
    [
        # `sections` holds the tables other packages own: the gateway's [node] below.
        (RuntimeConfig, "state_dir", {"sections"}),
        (BreakerSettings, "max_consecutive_failures", set()),
        (GatewaySettings, "host", set()),
        (NotifySettings, "urls", set()),
        (BudgetSettings, "daily_cost_usd", set()),
    ],
    ids=["RuntimeConfig", "BreakerSettings", "GatewaySettings", "NotifySettings", "BudgetSettings"],
)
def test_configuration_tables_list_every_key_with_its_default(
    cls: type, first_key: str, not_in_table: set[str]
) -> None:
    lines = page("docs/configuration.md").splitlines()
    first_row = next(i for i, line in enumerate(lines) if line.startswith(f"| `{first_key}`"))
    documented = dict(_rows_from(lines, first_row - 2))
    fields = {f.name: f for f in attrs.fields(cls)}
    assert set(documented) == set(fields) - not_in_table
    for name, default in documented.items():
        actual = fields[name].default
        if isinstance(actual, attrs.Factory):  # type: ignore[arg-type]
            actual = actual.factory()
        assert _same_default(default, actual), (cls.__name__, name, default, actual)


def _rows_from(lines: list[str], header_at: int) -> Iterator[tuple[str, str]]:
    """Key and documented default of each row (a row may document two keys: `a`, `b`)."""
    for key_cell, _, default, *_ in rows_after(lines, header_at):
        keys = code_spans(key_cell)
        defaults = [d.strip() for d in default.split(",")] if len(keys) > 1 else [default]
        for key, value in zip(keys, defaults, strict=True):
            yield key, value.strip("`")


def _same_default(documented: str, actual: object) -> bool:
    """A documented default (``10000``, ``"gap"``, ``unset``, ``see below``...) vs the code's."""
    if documented in ("unset", "see below"):
        return actual is None or attrs.has(type(actual))
    if isinstance(actual, Path):
        return Path(documented) == actual
    if isinstance(actual, bool):
        return documented == str(actual).lower()
    if isinstance(actual, int | float):
        return float(documented) == float(actual)
    if isinstance(actual, dict):
        return documented == "{}" and actual == {}
    if isinstance(actual, tuple):
        return documented == "[]" and actual == ()
    return documented.strip('"') == actual


# -- README: exit codes -------------------------------------------------------------------------


def test_readme_exit_codes_are_the_cli_s() -> None:
    documented = {int(code) for code, _ in table_rows(page("README.md"), "| code | meaning")}
    assert documented == {
        *PHASE_EXIT.values(),
        EXIT_USAGE,
        EXIT_LEASE_LOST,
        EXIT_ABORTED,
        EXIT_STDOUT_CLOSED,
    }
    rows = dict(table_rows(page("README.md"), "| code | meaning"))
    for phase, code in PHASE_EXIT.items():
        assert phase in rows[str(code)], (phase, rows[str(code)])


# -- every `loopactors ...` command line shown ----------------------------------------------------


def shell_commands() -> Iterator[Any]:
    for path in PAGES:
        text = path.read_text(encoding="utf-8")
        for block in re.finditer(r"```(?:sh|bash)\n(.*?)```", text, re.S):
            body = block.group(1).replace("\\\n", " ")
            for line in body.splitlines():
                for words in _commands(line):
                    if words[:1] == ["loopactors"] and words[1:2] != ["context"]:
                        yield pytest.param(words[1:], id=f"{path.name}: {' '.join(words)}"[:90])


def _commands(line: str) -> Iterator[list[str]]:
    """The simple commands of a shell line, split at ``&&``, ``|``, ``&`` and ``;``."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars="|&;")
    lexer.whitespace_split = True
    words: list[str] = []
    for token in lexer:
        if token and set(token) <= set("|&;"):
            yield words
            words = []
        else:
            words.append(token)
    yield words


@pytest.mark.parametrize("args", list(shell_commands()))
def test_each_command_line_shown_is_accepted(args: list[str]) -> None:
    if any(word.startswith("[") or word == "..." for word in args):
        # A synopsis (`loopactors node [--listen HOST:PORT] ...`): each option it names exists.
        parser = build_code_parser() if args[0] == "code" else build_parser()
        words = args[1:] if args[0] == "code" else args
        options = {w.strip("[]").split("|")[0] for w in args if w.strip("[]").startswith("-")}
        known = _options_of(parser, words)
        assert options <= known, options - known
        return
    if args[0] == "code":
        build_code_parser().parse_args(args[1:])
    else:
        build_parser().parse_args(args)


def _options_of(parser: Any, words: list[str]) -> set[str]:
    """The options of the (sub)command that ``words`` name, e.g. ``ledger export``."""
    for word in words:
        subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subparsers or word not in subparsers[0].choices:
            break
        parser = subparsers[0].choices[word]
    return {option for action in parser._actions for option in action.option_strings}


# -- Python blocks: they compile, and what they import exists -----------------------------------


def python_blocks() -> Iterator[Any]:
    for path in PAGES:
        text = path.read_text(encoding="utf-8")
        for n, block in enumerate(re.finditer(r"```python\n(.*?)```", text, re.S)):
            yield pytest.param(block.group(1), id=f"{path.name}#{n + 1}")


@pytest.mark.parametrize("source", list(python_blocks()))
def test_python_blocks_compile_and_import_what_exists(source: str) -> None:
    signature = re.fullmatch(r"(\w+)(\(.*\))\n", source)  # one line
    if signature is not None:
        # A signature (`open_runtime(config=None, *, ...)`): the function's own, in full.
        name, params = signature.groups()
        documented = ast.parse(f"def {name}{params}: ...").body[0]
        assert isinstance(documented, ast.FunctionDef)
        actual = inspect.signature(getattr(importlib.import_module("loopactors"), name))
        arguments = documented.args
        names = [a.arg for a in (*arguments.args, *arguments.kwonlyargs)]
        if arguments.kwarg is not None:
            names.append(arguments.kwarg.arg)
        assert names == list(actual.parameters), (names, list(actual.parameters))
        return
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            # A call of a public name: the keywords it shows are the callable's.
            target = _public(node.func.id)
            if target is not None:
                parameters = inspect.signature(target).parameters
                if not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
                    shown = {k.arg for k in node.keywords if k.arg is not None}
                    assert shown <= set(parameters), (node.func.id, shown - set(parameters))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("loopactors"):
            module = importlib.import_module(node.module or "")
            for alias in node.names:
                assert hasattr(module, alias.name), f"{node.module} has no {alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("loopactors"):
                    importlib.import_module(alias.name)


PUBLIC_MODULES = (
    "loopactors",
    "loopactors.actors",
    "loopactors.runtime",
    "loopactors.workers",
    "loopactors.client",
    "loopactors.ledger",
    "loopactors.testing",
)


def _public(name: str) -> Any:
    for module in PUBLIC_MODULES:
        found = getattr(importlib.import_module(module), name, None)
        if callable(found):
            return found
    return None


@pytest.mark.parametrize("page", sorted((ROOT / "docs").glob("*.md")), ids=lambda p: p.name)
def test_numbered_tables_run_in_order_without_a_break(page: Path) -> None:
    """A table whose first column is ``#`` lists its rows 1, 2, 3, ... in one piece (a blank
    line inside a Markdown table ends it, and the rest shows as text)."""
    lines = page.read_text().splitlines()
    for start, line in enumerate(lines):
        if not line.startswith("| # |"):
            continue
        numbers = []
        for row in lines[start + 2 :]:
            if not row.startswith("|"):
                break
            numbers.append(int(row.split("|")[1]))
        assert numbers == list(range(1, len(numbers) + 1)), (page.name, numbers)
        rest = "\n".join(lines[start + 2 + len(numbers) :])
        assert not re.search(r"^\| \d+ \|", rest, re.M), f"{page.name}: a row after the table"


def test_the_claude_kind_says_how_its_rounds_are_billed() -> None:
    text = " ".join((ROOT / "docs" / "agent-clis.md").read_text().split())
    assert "Since mid-2026 Anthropic bills such runs on a subscription from a usage pool" in text


def test_open_runtime_is_imported_from_one_place() -> None:
    """The README, the docs and the examples import ``open_runtime`` as users should."""
    sources = [*PAGES, *sorted((ROOT / "examples").glob("*.py"))]
    imports = {
        (path.name, line.strip())
        for path in sources
        for line in path.read_text(encoding="utf-8").splitlines()
        if re.match(r"\s*from loopactors\S* import .*\bopen_runtime\b", line)
    }
    assert imports
    assert {line for _, line in imports} == {"from loopactors import open_runtime"}, imports


def test_section_citations_in_the_package_name_sections_that_exist() -> None:
    # Code cites the docs as (docs/PAGE.md, "Heading"): the heading must be on that page.
    cited = 0
    for source in sorted((ROOT / "loopactors").rglob("*.py")):
        text = re.sub(r"\n\s*(?:#:?)?\s*", " ", source.read_text(encoding="utf-8"))
        for name, title in re.findall(r"docs/([a-z_-]+\.md), \"([^\"]+)\"", text):
            headings = [
                line.lstrip("#").strip()
                for line in page(f"docs/{name}").splitlines()
                if line.startswith("#")
            ]
            assert any(h == title or h.startswith(title) for h in headings), (source, name, title)
            cited += 1
    assert cited >= 20
