"""Tables that stay readable at any width, and plain text where there is no terminal.

On a terminal the table fits the console's width: the short columns keep their whole values,
the ``flex`` ones (a task, a reason) share what is left and are cut with ``…``, and when even
that does not fit the columns with the highest ``drop`` are left out. Every value is data:
shown as ``Text`` (never Rich markup), control characters made visible (``terminal_safe``).
Loop ids are shown by the shortest tail that tells them apart (``loops.resolve_loop_id``
takes a tail as well as a prefix). Without a terminal (a pipe, a CI log) every value is
printed whole, ids too, in plain aligned columns: nothing is cut, and a script can read the
lines.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence

import attrs
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text

from .._util import terminal_safe

__all__ = ["Column", "Rows", "print_rows", "short_ids", "terminal_safe"]

#: The fewest characters of an id's random tail shown (32 bits: a tail shared by two loops of
#: one store is rare, and then the id is refused as ambiguous, listing both).
SHORT_ID = 8

_GENERATED = re.compile(r"[0-9a-f]+-[0-9a-f]{16}")

# Between two columns (rich's padding of one on each side, none at the edges).
_GAP = 2


@attrs.frozen
class Column:
    """One column: ``flex`` ones take the width left and are cut with ``…``; when the width
    is short, the columns with the highest ``drop`` go first (0: always shown); ``shorten``
    rewrites the whole column on a terminal (ids)."""

    name: str
    flex: bool = False
    drop: int = 0
    shorten: Callable[[Sequence[str]], list[str]] | None = None
    justify: str = "left"
    #: A flex column is not shown narrower than this (unless its values are all shorter).
    least: int = 10


class Rows:
    """A rich renderable: the table as wide as the console allows, or plain lines."""

    def __init__(
        self, columns: Sequence[Column], rows: Sequence[Sequence[str]], *, title: str = ""
    ) -> None:
        self.columns = list(columns)
        # Data, never markup nor terminal control: cells become Text, controls \xNN.
        self.rows = [[terminal_safe(" ".join(cell.split())) for cell in row] for row in rows]
        self.title = terminal_safe(title)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if not console.is_terminal:
            yield from self._plain()
            return
        yield self._table(options.max_width)

    def _plain(self) -> Iterator[Text]:
        if self.title:
            yield Text(self.title, no_wrap=True, overflow="ignore")
        widths = [
            max([len(c.name)] + [len(row[i]) for row in self.rows])
            for i, c in enumerate(self.columns)
        ]
        for cells in [[c.name for c in self.columns], *self.rows]:
            padded = [cell.ljust(width) for cell, width in zip(cells, widths, strict=True)]
            yield Text((" " * _GAP).join(padded).rstrip(), no_wrap=True, overflow="ignore")

    def _table(self, width: int) -> Table:
        rows = [list(row) for row in self.rows]
        for i, column in enumerate(self.columns):
            if column.shorten is not None:
                for row, short in zip(rows, column.shorten([r[i] for r in rows]), strict=True):
                    row[i] = short
        shown = list(range(len(self.columns)))
        if sum(self._natural(i, rows) for i in shown) + _GAP * (len(shown) - 1) > width:
            # Something is cut: first leave out the columns that say nothing (all "-" or 0).
            shown = [i for i in shown if not (self.columns[i].drop and _blank(rows, i))]
        while True:
            widths = self._widths(shown, rows, width)
            droppable = [i for i in shown if self.columns[i].drop]
            if widths is not None or not droppable:
                break
            shown.remove(max(droppable, key=lambda i: (self.columns[i].drop, i)))
        table = Table(
            title=Text(self.title) if self.title else None, box=None, pad_edge=False, padding=(0, 1)
        )
        for i in shown:
            column = self.columns[i]
            fixed = None if widths is None else widths[i]
            table.add_column(
                column.name,
                no_wrap=True,
                overflow="ellipsis",
                width=fixed,
                justify=column.justify,  # type: ignore[arg-type]
            )
        for row in rows:
            table.add_row(*(Text(row[i]) for i in shown))
        return table

    def _natural(self, i: int, rows: list[list[str]]) -> int:
        return max([len(self.columns[i].name)] + [len(row[i]) for row in rows])

    def _widths(self, shown: list[int], rows: list[list[str]], width: int) -> dict[int, int] | None:
        """Each shown column's width, or None if they do not fit in ``width``."""
        natural = {i: self._natural(i, rows) for i in shown}
        flex = [i for i in shown if self.columns[i].flex]
        fixed = sum(natural[i] for i in shown if i not in flex)
        left = width - fixed - _GAP * (len(shown) - 1)
        widths = {i: natural[i] for i in shown if i not in flex}
        least = {i: min(self.columns[i].least, natural[i]) for i in flex}
        if left < sum(least.values()):
            return None
        # The first flex columns first (the task before the reason), each leaving the later
        # ones their least width.
        for n, i in enumerate(flex):
            widths[i] = min(natural[i], left - sum(least[j] for j in flex[n + 1 :]))
            left -= widths[i]
        return widths


def _blank(rows: list[list[str]], i: int) -> bool:
    return all(row[i] in ("", "-", "0") for row in rows)


def print_rows(console: Console, rows: Rows) -> None:
    """Print a table; without a terminal its lines are whole, however wide."""
    console.print(rows, soft_wrap=not console.is_terminal)


def short_ids(ids: Sequence[str]) -> list[str]:
    """Each generated id (``<hex time>-<16 hex>``) by the shortest tail of at least
    ``SHORT_ID`` characters that no other of ``ids`` ends with; other ids whole."""
    shown = list(ids)
    pending = [i for i, loop_id in enumerate(ids) if _GENERATED.fullmatch(loop_id)]
    for n in range(SHORT_ID, 17):
        tails = Counter(loop_id[-n:] for loop_id in ids)
        unique = {i for i in pending if tails[ids[i][-n:]] == 1}
        for i in unique:
            shown[i] = ids[i][-n:] if n < 16 else ids[i]
        pending = [i for i in pending if i not in unique]
        if not pending:
            break
    return shown
